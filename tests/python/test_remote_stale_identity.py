"""A remote shard's identity is the size and ETag of the object it was indexed from. Once the
object on the server is found replaced (a direct fetch, an epoch's downloads in the background,
its kept index under index_cache), every later check of that dataset raises StaleIndexError
naming the URL, though the cache now holds the new object as a verified copy: the old byte
ranges are never read from the new object. The new object here has the old one's size and
member layout (its two images swapped, each padded to one length), so old ranges would read
the other sample's image without a sign. Served from memory by FaultProxy on 127.0.0.1."""

from __future__ import annotations

import os

import pytest
import torch

import ringloader as rl
from ringloader import transforms as T
from imagegen import jpeg_bytes

import remote_servers as srv

TRANSFORM = T.Compose([T.Resize(24), T.CenterCrop(16), T.ToTensor()])
WHOLE = {"max_attempts": 2, "backoff_initial_s": 0.01, "backoff_max_s": 0.05,
         "range_reads_below": 0}


def _images():
    a, b = jpeg_bytes(40, 30, seed=1), jpeg_bytes(30, 40, seed=2)
    size = max(len(a), len(b))
    # A JPEG decoder stops at its end marker: the padding makes the two the same length.
    return a + bytes(size - len(a)), b + bytes(size - len(b))


def _shard(first: bytes, second: bytes, labels=(0, 1)) -> bytes:
    return srv.tar_bytes([("s0.jpg", first), ("s0.cls", str(labels[0]).encode()),
                          ("s1.jpg", second), ("s1.cls", str(labels[1]).encode())])


@pytest.fixture
def server():
    a, b = _images()
    old, new = _shard(a, b), _shard(b, a)
    assert len(old) == len(new) and old != new
    proxy = srv.FaultProxy("http://127.0.0.1:9")
    # No pack sidecars (S3 without list rights answers 403): each shard is indexed from its bytes.
    proxy.always = {"/a.tar.idx.json": "403", "/b.tar.idx.json": "403"}
    objects = {"a": proxy.serve("/a.tar", srv.MemoryObject([old, new], etag=True)),
               "b": proxy.serve("/b.tar", srv.MemoryObject([_shard(a, b, (2, 3))] * 2, etag=True))}
    yield proxy, objects
    proxy.stop()


def _dataset(proxy, tmp_path, index_cache=None):
    return rl.WebDataset([f"{proxy.url}/a.tar", f"{proxy.url}/b.tar"], transform=TRANSFORM,
                         cache_dir=str(tmp_path / "cache"), remote_options=dict(WHOLE),
                         index_cache=index_cache)


def _epoch(ds):
    return [(x, y) for x, y in rl.DataLoader(ds, batch_size=2)]


def _assert_stale_for_good(ds, url):
    """Every later read of the dataset raises StaleIndexError naming url: iter() (and so every
    batch), and each of the stale shard's samples."""
    for _ in range(2):
        with pytest.raises(rl.StaleIndexError, match=rf"{url} changed since") as got:
            _epoch(ds)
        assert got.value.path == url
        for i in (0, 1):
            with pytest.raises(rl.StaleIndexError, match=rf"{url} changed since") as got:
                ds[i]
            assert got.value.path == url
    assert ds[2][1] == 2 and ds[2][0].shape == (3, 16, 16)  # the unchanged shard still reads


def _replace_and_evict(ds, objects):
    objects["a"].current = 1
    os.unlink(ds.shard_paths[0])  # evicted from the cache: the next fetch gets the new object


def test_found_by_a_direct_fetch_it_stays_stale(server, tmp_path):
    proxy, objects = server
    url = f"{proxy.url}/a.tar"
    ds = _dataset(proxy, tmp_path)
    want = _epoch(ds)
    image_b = ds[1][0]
    _replace_and_evict(ds, objects)
    with pytest.raises(rl.StaleIndexError, match=rf"{url} changed since") as got:
        ds[0]  # a direct fetch: the cache keeps the new object
    assert got.value.path == url
    _assert_stale_for_good(ds, url)
    # Built again: indexed from the new object, which holds B's image first.
    fresh = _dataset(proxy, tmp_path)
    assert torch.equal(fresh[0][0], image_b)
    assert len(_epoch(fresh)) == len(want)


def test_found_by_an_epochs_downloads_it_stays_stale(server, tmp_path):
    proxy, objects = server
    url = f"{proxy.url}/a.tar"
    ds = _dataset(proxy, tmp_path)
    _epoch(ds)
    _replace_and_evict(ds, objects)
    with pytest.raises(rl.StaleIndexError, match=rf"{url} changed since") as got:
        _epoch(ds)  # downloaded on native threads at the epoch's start
    assert got.value.path == url
    _assert_stale_for_good(ds, url)


def test_skipped_by_an_epoch_it_stops_the_next(server, tmp_path):
    # on_error="skip" passes over the stale shard's samples in the epoch that found it; the
    # next epoch does not read its old ranges from the new object either.
    proxy, objects = server
    url = f"{proxy.url}/a.tar"
    ds = _dataset(proxy, tmp_path)
    _epoch(ds)
    _replace_and_evict(ds, objects)
    loader = rl.DataLoader(ds, batch_size=2, on_error="skip", max_skipped_fraction=0.5)
    assert [y.tolist() for _, y in loader] == [[2, 3]]
    for _ in range(2):
        with pytest.raises(rl.StaleIndexError, match=rf"{url} changed since"):
            list(loader)


def test_replaced_mid_epoch_it_stays_stale(server, tmp_path):
    proxy, objects = server
    url = f"{proxy.url}/b.tar"
    objects["b"].versions[1] = _shard(*reversed(_images()), labels=(2, 3))
    ds = _dataset(proxy, tmp_path)
    os.unlink(ds.shard_paths[1])
    proxy.hold("/b.tar")
    batches = iter(rl.DataLoader(ds, batch_size=2))
    try:
        _, y = next(batches)  # shard a, read while b's download waits
        assert y.tolist() == [0, 1]
        objects["b"].current = 1  # replaced on the server mid-epoch
    finally:
        proxy.release("/b.tar")
    with pytest.raises(rl.StaleIndexError, match=rf"{url} changed since"):
        list(batches)
    for _ in range(2):
        with pytest.raises(rl.StaleIndexError, match=rf"{url} changed since"):
            _epoch(ds)
        with pytest.raises(rl.StaleIndexError, match=rf"{url} changed since"):
            ds[2]
    assert ds[0][1] == 0


def test_a_kept_index_of_a_replaced_object_stays_stale(server, tmp_path):
    proxy, objects = server
    url, index = f"{proxy.url}/a.tar", str(tmp_path / "index")
    ds = _dataset(proxy, tmp_path, index_cache=index)
    _epoch(ds)
    _replace_and_evict(ds, objects)
    with pytest.raises(rl.StaleIndexError, match=rf"{url} changed since"):
        _epoch(ds)
    _assert_stale_for_good(ds, url)
    # Built again from the kept index (the old object's): the cache's verified copy of the new
    # object is not handed to it either.
    again = _dataset(proxy, tmp_path, index_cache=index)
    with pytest.raises(rl.StaleIndexError, match=rf"{url} changed since.*Delete its kept index"):
        _epoch(again)
    _assert_stale_for_good(again, url)
    # As the error says: the kept index deleted, the dataset built again reads the new object.
    kept = again._remote.index_path(url)
    os.unlink(kept)
    for old in (ds, again):  # their downloads' failures stay the cache entry's while they run
        old.close_downloads()
    fresh = _dataset(proxy, tmp_path, index_cache=index)
    assert [y for _, y in _epoch(fresh)][0].tolist() == [0, 1]
    assert os.path.exists(kept)
