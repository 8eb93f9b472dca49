"""A ``pipe:`` command runs only when the caller wrote it: never because a file found on disk, or
named by a list, an index or a cache, is spelled ``pipe:...``. Such files are read as files."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

import ringloader as rl
from ringloader import _C
from ringloader import transforms as T
from ringloader.sources.webdataset import _cache_path, cache_index_as, expand_urls, IMAGE_EXTS

from imagegen import jpeg_bytes

TRANSFORM = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])
EVIL_SHARD = "pipe:touch PWNED; cat shard-000000.tar; true .tar"
EVIL_IMAGE = "pipe:touch PWNED; cat a.jpg; true .jpg"


def _write_shard(path: Path, labels) -> None:
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for i, label in enumerate(labels):
            for name, data in ((f"{i:04d}.jpg", jpeg_bytes(48, 40, seed=i)),
                               (f"{i:04d}.cls", str(label).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A folder others could write to, the working directory: a good shard and a copy of it
    (other labels) named like a command that would create PWNED."""
    _write_shard(tmp_path / "shard-000000.tar", [0, 1, 2])
    _write_shard(tmp_path / EVIL_SHARD, [3, 3, 3])
    (tmp_path / "a.jpg").write_bytes(jpeg_bytes(48, 40, seed=7))
    shutil.copy(tmp_path / "a.jpg", tmp_path / EVIL_IMAGE)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _load_all(ds) -> list:
    return [int(v) for _, labels in rl.DataLoader(ds, batch_size=4, num_workers=1) for v in labels]


@pytest.mark.parametrize("pattern", ["*.tar", "{shard,pipe}*.tar", "[ps]*.tar"])
def test_glob_and_brace_matches_are_files(planted, pattern):
    assert sorted(expand_urls(pattern)) == ["./" + EVIL_SHARD, "shard-000000.tar"]
    ds = rl.WebDataset(pattern, transform=TRANSFORM, index_cache=str(planted / "cache"))
    assert not ds.streamed and ds.url_pipes == [False, False]
    assert sorted(_load_all(ds)) == [0, 1, 2, 3, 3, 3]  # the odd shard read as the file it is
    ds[ds.urls.index("./" + EVIL_SHARD) * 3]  # random access: it is a local file
    assert not (planted / "PWNED").exists()
    assert not (planted / "cache").exists()  # nothing cached: no stream was indexed


def test_file_urls_and_path_objects_are_files(planted):
    for url in (f"file://{EVIL_SHARD}", Path(EVIL_SHARD)):
        ds = rl.WebDataset(url, transform=TRANSFORM, index_cache=None)
        assert ds.urls == ["./" + EVIL_SHARD] and not ds.streamed
        assert _load_all(ds) == [3, 3, 3]
    assert not (planted / "PWNED").exists()


def test_a_written_pipe_command_still_runs(planted):
    ds = rl.WebDataset("pipe:cat shard-000000.tar", transform=TRANSFORM,
                       index_cache=str(planted / "cache"))
    assert ds.streamed and ds.url_pipes == [True]
    assert _load_all(ds) == [0, 1, 2]


def test_index_sidecars_and_cached_indexes_never_name_what_runs(planted):
    # A sidecar and a cached index that claim a command as their shard: they only give byte
    # ranges and labels; the shard read is the one the caller named.
    cache = planted / "cache"
    cache_index_as("pipe:cat shard-000000.tar", "shard-000000.tar", str(cache))
    cached = Path(_cache_path("pipe:cat shard-000000.tar", IMAGE_EXTS, "cls", "label", str(cache)))
    data = json.loads(cached.read_text())
    data["shard"] = "pipe:touch PWNED"
    cached.write_text(json.dumps(data))
    side = json.loads(cached.read_text())
    side["bytes"] = (planted / EVIL_SHARD).stat().st_size
    side["mtime_ns"] = (planted / EVIL_SHARD).stat().st_mtime_ns  # so that it is used
    (planted / (EVIL_SHARD + ".idx.json")).write_text(json.dumps(side))
    piped = rl.WebDataset("pipe:cat shard-000000.tar", transform=TRANSFORM, index_cache=str(cache))
    local = rl.WebDataset("*.tar", transform=TRANSFORM, index_cache=str(cache))
    assert _load_all(piped) == [0, 1, 2]
    # The odd shard's (planted) sidecar gives its ranges and labels, its own bytes are read.
    assert sorted(_load_all(local)) == [0, 0, 1, 1, 2, 2]
    assert not (planted / "PWNED").exists()


def test_file_lists_and_image_folders_read_such_names_as_files(planted):
    (planted / "list.txt").write_text(f"{EVIL_IMAGE} 1\na.jpg 0\n")
    listed = rl.FileList("list.txt", transform=TRANSFORM)
    assert [p for p, _ in listed.samples][0] == EVIL_IMAGE
    direct = rl.FileList([EVIL_IMAGE, "a.jpg"], [1, 0], transform=TRANSFORM)
    # A folder whose name is a command, used as a relative ImageFolder root.
    root = planted / "pipe:touch PWNED; true "
    (root / "cls").mkdir(parents=True)
    shutil.copy(planted / "a.jpg", root / "cls" / EVIL_IMAGE)
    folder = rl.ImageFolder("pipe:touch PWNED; true ", transform=TRANSFORM)
    assert folder.samples[0][0].startswith("pipe:touch PWNED")
    for ds in (listed, direct):
        assert sorted(_load_all(ds)) == [0, 1]
        image, label = ds[0]
        np.testing.assert_array_equal(image.numpy(), ds[1][0].numpy())  # the same picture
    assert _load_all(folder) == [0]
    assert folder[0][1] == 0
    assert not (planted / "PWNED").exists()


def test_native_loader_runs_only_marked_samples(planted):
    opts = {"batch_size": 1, "num_workers": 1, "transform": T.split(TRANSFORM).steps,
            "dtype": "float32"}
    loader = _C.Loader(["pipe:touch PWNED; cat a.jpg"], [0], opts)
    loader.start_builtin_epoch(0)
    with pytest.raises(Exception, match="No such file"):
        loader.next()
    loader.stop()
    assert not (planted / "PWNED").exists()
    with pytest.raises(ValueError, match=r"sample 0 is marked as a pipe: stream but its path "
                                         r"\"a.jpg\" is not pipe:COMMAND"):
        _C.Loader(["a.jpg"], [0], opts, lengths=[10], pipes=[True])
    with pytest.raises(ValueError, match="pipes must be a sequence of bool with one entry per path"):
        _C.Loader(["a.jpg"], [0], opts, pipes=[True, False])
