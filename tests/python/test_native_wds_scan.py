"""``_C.scan_webdataset_shard``: the native index of a WebDataset tar shard, checked against the
member offsets Python's tarfile reports."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest

from ringloader import _C


def _write_shard(path, members, fmt=tarfile.GNU_FORMAT):
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _data_offsets(path):
    with tarfile.open(path) as tar:
        return {m.name: (m.offset_data, m.size) for m in tar.getmembers()}


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])
def test_index_matches_tarfile(tmp_path, fmt):
    long_dir = "d" * 90 + "/" + "e" * 40 if fmt != tarfile.USTAR_FORMAT else "train"
    members = []
    for i in range(6):
        key = f"{long_dir}/{i:06d}"
        members.append((f"{key}.jpg", bytes([i]) * (100 + 300 * i)))
        members.append((f"{key}.cls", f"{i * 3}\n".encode()))
    shard = tmp_path / "shard.tar"
    _write_shard(shard, members, fmt)
    index = _C.scan_webdataset_shard(str(shard))
    assert index["error"] == ""
    assert index["bytes"] == shard.stat().st_size
    offsets = _data_offsets(shard)
    assert index["keys"] == [f"{long_dir}/{i:06d}" for i in range(6)]
    assert index["members"] == [f"{long_dir}/{i:06d}.jpg" for i in range(6)]
    assert index["errors"] == [""] * 6
    for name in ("offsets", "lengths", "labels"):
        assert isinstance(index[name], np.ndarray) and index[name].dtype == np.int64
    np.testing.assert_array_equal(index["offsets"], [offsets[m][0] for m in index["members"]])
    np.testing.assert_array_equal(index["lengths"], [offsets[m][1] for m in index["members"]])
    np.testing.assert_array_equal(index["labels"], [i * 3 for i in range(6)])


def test_options_errors_and_pipe_urls(tmp_path):
    shard = tmp_path / "s.tar"
    _write_shard(shard, [
        ("a.png", b"P"), ("a.json", b'{"label": 4, "caption": "x \\" }"}'),
        ("b.jpg", b"J"), ("b.json", b'{"label": "no"}'),
        ("c.txt", b"only text"),
    ])
    index = _C.scan_webdataset_shard(str(shard), image_exts=["png", "jpg"], label_key="json")
    assert index["keys"] == ["a", "b", "c"]
    assert index["labels"].tolist() == [4, -1, -1]
    assert index["errors"] == [
        "",
        f"{shard}: member 'b.json': field 'label' is not an integer",
        f"{shard}: sample 'c' has no image member (.png/.jpg)",
    ]
    # Without pipe=True a pipe:-spelled url is a file name, never a command.
    with pytest.raises(FileNotFoundError, match="pipe:cat"):
        _C.scan_webdataset_shard(f"pipe:cat {shard}", image_exts=["png", "jpg"], label_key="json")
    piped = _C.scan_webdataset_shard(f"pipe:cat {shard}", image_exts=["png", "jpg"], label_key="json",
                                     pipe=True)
    assert piped["keys"] == index["keys"]
    np.testing.assert_array_equal(piped["offsets"], index["offsets"])
    assert piped["error"] == ""
    failing = _C.scan_webdataset_shard("pipe:exit 2", pipe=True)
    assert failing["keys"] == [] and failing["error"] == "pipe:exit 2 exited with status 2"
    with pytest.raises(FileNotFoundError, match="missing.tar"):
        _C.scan_webdataset_shard(str(tmp_path / "missing.tar"))
    with pytest.raises(ValueError, match="is not pipe:COMMAND"):
        _C.scan_webdataset_shard(str(shard), pipe=True)
    with pytest.raises(ValueError, match="image_exts"):
        _C.scan_webdataset_shard(str(shard), image_exts=[])


def test_truncated_shard_keeps_earlier_samples(tmp_path):
    shard = tmp_path / "t.tar"
    _write_shard(shard, [("0.jpg", b"x" * 700), ("0.cls", b"0"), ("1.jpg", b"y" * 5000), ("1.cls", b"1")])
    data = shard.read_bytes()
    cut = _data_offsets(shard)["1.jpg"][0] + 100
    shard.write_bytes(data[:cut])
    index = _C.scan_webdataset_shard(str(shard))
    assert index["keys"] == ["0", "1"]
    assert index["errors"][0] == ""
    assert "has no image member" in index["errors"][1]
    assert index["error"].startswith(f"{shard}: truncated: member '1.jpg'")
    assert index["bytes"] == cut
