"""A WebDataset index that no longer matches its shard is never used to deliver rows: a pipe:
shard's cached index is checked member by member as the stream passes (a mismatch ends the epoch
with StaleIndexError and drops the cache entry), a pack sidecar is used only while it matches
the shard (size, mtime, a spot check of headers), and a local shard rewritten after the dataset
was built is refused at the next epoch."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pytest

import ringloader as rl
from ringloader import transforms as T
from imagegen import jpeg_bytes

wds = pytest.importorskip("webdataset")

TRANSFORM = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])
ROWS = 25


def _images(seed: int):
    """ROWS JPEGs of varied sizes (so no two shards share a member layout by chance)."""
    return [jpeg_bytes(40 + (i * 7 + seed) % 50, 30 + (i * 11 + seed) % 40, seed=seed * 100 + i)
            for i in range(ROWS)]


def _write_shard(path: Path, images, label: int) -> None:
    """A shard by webdataset.TarWriter: keys sample00000.. (the same in every shard)."""
    with wds.TarWriter(str(path)) as sink:
        for i, data in enumerate(images):
            sink.write({"__key__": f"sample{i:05d}", "jpg": data, "cls": label})


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Shard A (class 0) and shard B (class 2, other images)."""
    root = tmp_path_factory.mktemp("ab")
    _write_shard(root / "a.tar", _images(1), 0)
    _write_shard(root / "b.tar", _images(2), 2)
    return root / "a.tar", root / "b.tar"


def _collect(loader):
    """Labels of the batches delivered, and the exception that ended the epoch (or None)."""
    labels = []
    try:
        for _, batch in loader:
            labels += batch.tolist()
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return labels, exc
    return labels, None


# ---- pipe: with a cached index ------------------------------------------------------------------

@pytest.mark.timeout(120)
@pytest.mark.parametrize("on_error", ["raise", "skip", "replace"])
def test_stale_pipe_cache_never_serves_the_old_rows(shards, tmp_path, on_error):
    a, b = shards
    s = tmp_path / "s.tar"
    shutil.copy(a, s)
    url, cache = f"pipe:cat {s}", str(tmp_path / "cache")
    rl.WebDataset(url, transform=TRANSFORM, index_cache=cache)
    (entry,) = os.listdir(cache)
    shutil.copy(b, s)
    stale = rl.WebDataset(url, transform=TRANSFORM, index_cache=cache)
    assert stale.targets == [0] * ROWS  # the cached index of A: nothing told it otherwise yet
    labels, exc = _collect(rl.DataLoader(stale, batch_size=5, on_error=on_error))
    # Not one row of A's index served from B's bytes (they would all say 0), under every policy.
    assert labels == []
    assert isinstance(exc, rl.StaleIndexError) and isinstance(exc, RuntimeError), exc
    assert not isinstance(exc, rl.SampleError)
    assert exc.path == url
    message = str(exc)
    assert f"{url}: the shard's index is out of date" in message
    assert f"Its cached index {os.path.join(cache, entry)} was removed" in message
    assert "build the WebDataset again" in message
    assert os.listdir(cache) == []
    # Built again: indexed from the stream as it is now, and cached again.
    fresh = rl.WebDataset(url, transform=TRANSFORM, index_cache=cache)
    assert fresh.targets == [2] * ROWS
    assert sorted(_collect(rl.DataLoader(fresh, batch_size=5, on_error=on_error))[0]) == \
        [2] * ROWS
    assert len(os.listdir(cache)) == 1


@pytest.mark.timeout(120)
def test_stale_stream_is_not_a_replace_substitute(shards, tmp_path):
    """A good local shard and a stale pipe: one: on_error="replace" must not fill a batch from
    the stale stream, nor go on past it."""
    a, b = shards
    s = tmp_path / "s.tar"
    shutil.copy(a, s)
    url, cache = f"pipe:cat {s}", str(tmp_path / "cache")
    rl.WebDataset(url, index_cache=cache)
    shutil.copy(b, s)
    ds = rl.WebDataset([str(b), url], transform=TRANSFORM, index_cache=cache)
    labels, exc = _collect(rl.DataLoader(ds, batch_size=5, on_error="replace"))
    assert isinstance(exc, rl.StaleIndexError), exc
    assert labels == [2] * len(labels) and len(labels) < 2 * ROWS  # only B's own rows, then the end


def test_index_matching_the_stream_is_served(shards, tmp_path):
    """The check does not get in the way: the cached index of an unchanged stream reads as the
    local shard does, every header passing."""
    a, _ = shards
    url, cache = f"pipe:cat {a}", str(tmp_path / "cache")
    rl.WebDataset(url, index_cache=cache)
    again = rl.WebDataset(url, transform=TRANSFORM, index_cache=cache)
    labels, exc = _collect(rl.DataLoader(again, batch_size=5, shuffle=True, seed=3))
    assert exc is None and labels == [0] * ROWS
    assert len(os.listdir(cache)) == 1


# ---- pack sidecars ------------------------------------------------------------------------------

def _pack_list(tmp_path: Path, name: str, files, label: int) -> Path:
    from ringloader.pack import pack

    lst = tmp_path / f"{name}.txt"
    lst.write_text("".join(f"{f} {label}\n" for f in files))
    pack(str(lst), str(tmp_path / name), shard_size=10**9, progress_stream=io.StringIO())
    return tmp_path / name / "shard-000000.tar"


def test_pack_sidecar_records_the_shards_mtime(tmp_path):
    src = tmp_path / "imgs"
    src.mkdir()
    for i, data in enumerate(_images(1)[:4]):
        (src / f"{i}.jpg").write_bytes(data)
    shard = _pack_list(tmp_path, "p", sorted(src.iterdir()), 1)
    side = json.loads(Path(str(shard) + rl.webdataset.INDEX_SUFFIX).read_text())
    assert side["mtime_ns"] == shard.stat().st_mtime_ns
    assert side["bytes"] == shard.stat().st_size


def test_sidecar_of_another_shard_of_the_same_size_is_not_used(tmp_path):
    src = tmp_path / "imgs"
    src.mkdir()
    files = []
    for i, data in enumerate(_images(3)):
        files.append(src / f"{i:02d}.jpg")
        files[-1].write_bytes(data)
    a = _pack_list(tmp_path, "a", files, 1)
    b = _pack_list(tmp_path, "b", files[::-1], 2)  # the same members in another order: same size
    assert a.stat().st_size == b.stat().st_size
    images_of = lambda ds: [ds.offsets.tolist(), ds.lengths.tolist()]  # noqa: E731
    want = rl.WebDataset(str(b), index_cache=None)
    # B's bytes under A's name with A's size and (worst case, as cp -p or rsync -t would leave
    # it) A's mtime: only the header spot check can tell.
    mtime = a.stat().st_mtime_ns
    shutil.copy(b, a)
    os.utime(a, ns=(mtime, mtime))
    got = rl.WebDataset(str(a), index_cache=None)
    assert got.targets == [2] * ROWS and images_of(got) == images_of(want)
    # An ordinary copy (new mtime): not used either.
    shutil.copy(b, a)
    got = rl.WebDataset(str(a), index_cache=None)
    assert got.targets == [2] * ROWS and images_of(got) == images_of(want)


def test_sidecar_without_mtime_is_scanned_not_trusted(tmp_path):
    src = tmp_path / "imgs"
    src.mkdir()
    for i, data in enumerate(_images(4)[:6]):
        (src / f"{i}.jpg").write_bytes(data)
    shard = _pack_list(tmp_path, "p", sorted(src.iterdir()), 1)
    sidecar = Path(str(shard) + rl.webdataset.INDEX_SUFFIX)
    data = json.loads(sidecar.read_text())
    data["samples"][0][4] = 3  # a label only the sidecar says: tells whether it was read
    sidecar.write_text(json.dumps(data))
    assert rl.WebDataset(str(shard), index_cache=None).targets[0] == 3  # matches: used
    del data["mtime_ns"]  # as sidecars were written before they recorded it
    sidecar.write_text(json.dumps(data))
    assert rl.WebDataset(str(shard), index_cache=None).targets == [1] * 6


# ---- local shards changed after the dataset was built -------------------------------------------

@pytest.mark.parametrize("on_error", ["raise", "skip", "replace"])
@pytest.mark.parametrize("same_size", [False, True])
def test_local_shard_rewritten_after_construction_is_refused(shards, tmp_path, on_error,
                                                             same_size):
    a, b = shards
    s = tmp_path / "s.tar"
    shutil.copy(a, s)
    ds = rl.WebDataset(str(s), transform=TRANSFORM, index_cache=None)
    loader = rl.DataLoader(ds, batch_size=5, on_error=on_error)
    assert _collect(loader) == ([0] * ROWS, None)
    if same_size:
        # Rewritten in place, same size: the mtime tells.
        data = bytearray(s.read_bytes())
        data[int(ds.offsets[3]) + 10] ^= 0xFF
        s.write_bytes(bytes(data))
        what = "was modified"
    else:
        shutil.copy(b, s)
        what = "changed size"
    labels, exc = _collect(loader)
    assert labels == [] and isinstance(exc, rl.StaleIndexError), exc
    assert exc.path == str(s)
    assert f"WebDataset shard {s} {what}" in str(exc) and "Build the WebDataset again" in str(exc)
    with pytest.raises(rl.StaleIndexError, match="index is out of\\s+date"):
        ds[0]
    rebuilt = rl.WebDataset(str(s), transform=TRANSFORM, index_cache=None)
    want = [0] * ROWS if same_size else [2] * ROWS
    assert _collect(rl.DataLoader(rebuilt, batch_size=5, on_error=on_error))[0] == want
