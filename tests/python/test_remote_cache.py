"""What the node-local cache of remote shards guarantees, against real loopback servers (nginx and
the fault-injecting proxy of tests/python/remote_servers.py): a cut download never stays in it
under the shard's name, a cached copy of another size than indexed or whose bytes changed since
they were downloaded is fetched again, and using a cached shard leaves its file as it was, so an
epoch read ahead from the cache is used as one read ahead from local shards is."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader import transforms as T

import remote_servers as srv

wds = pytest.importorskip("webdataset")

TRANSFORM = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])
FAST = {"max_attempts": 3, "backoff_initial_s": 0.01, "backoff_max_s": 0.05}
NAMES = ["train-000000.tar", "train-000001.tar"]
URLS = "/train-{000000..000001}.tar"


@pytest.fixture(autouse=True)
def _own_cache_home(tmp_path, monkeypatch):
    """Default cache folders (shards, indexes) under the test's folder, not the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


@pytest.fixture(scope="module")
def shards(tmp_path_factory, unique_tree):
    """Two shards of 12 samples (webdataset.ShardWriter): their folder."""
    root = tmp_path_factory.mktemp("cache_shards")
    samples = rl.ImageFolder(str(unique_tree)).samples
    with wds.ShardWriter(str(root / "train-%06d.tar"), maxcount=12, verbose=0) as sink:
        for i, (path, label) in enumerate(samples):
            sink.write({"__key__": f"s{i:05d}", "jpg": Path(path).read_bytes(), "cls": label})
    return root


@pytest.fixture(scope="module")
def nginx(tmp_path_factory, shards):
    if srv.NGINX is None:
        pytest.skip("nginx is not installed (Debian nginx-light; scripts/setup.sh installs it)")
    server = srv.Nginx(shards, tmp_path_factory.mktemp("cache_nginx"))
    yield server
    server.stop()


@pytest.fixture
def proxy(nginx):
    p = srv.FaultProxy(nginx.url)
    yield p
    p.stop()


def _epoch(ds, **kw):
    """(labels, images) of one epoch in the sampler's order."""
    images, labels = [], []
    for x, y in rl.DataLoader(ds, batch_size=6, **kw):
        images.append(x.clone())
        labels += y.tolist()
    return labels, images


def _assert_same_as_local(remote, shards):
    local = rl.WebDataset([str(shards / n) for n in NAMES], transform=TRANSFORM, index_cache=None)
    got_labels, got = _epoch(remote)
    want_labels, want = _epoch(local)
    assert got_labels == want_labels and sorted(got_labels) == sorted(local.targets)
    assert all(torch.equal(g, w) for g, w in zip(got, want))


def _flip_bit(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x08]))


def test_a_cut_download_of_an_indexed_shard_is_not_kept_and_comes_again_whole(nginx, proxy, shards,
                                                                             tmp_path):
    index = str(tmp_path / "index")
    # An earlier run indexed the shards (their sizes kept with the indexes).
    rl.WebDataset(f"{proxy.url}{URLS}", cache_dir=str(tmp_path / "c1"), index_cache=index)
    proxy.requests.clear()
    # This run downloads them at the first epoch's start; the server cuts shard 0 in half once,
    # saying so in its Content-Length.
    proxy.faults = {"/train-000000.tar": ["short"]}
    ds = rl.WebDataset(f"{proxy.url}{URLS}", transform=TRANSFORM, cache_dir=str(tmp_path / "c2"),
                       index_cache=index, remote_options=FAST)
    _assert_same_as_local(ds, shards)
    assert len(proxy.gets("/train-000000.tar")) == 2  # the cut copy, then the whole one
    assert os.path.getsize(ds.shard_paths[0]) == (shards / NAMES[0]).stat().st_size
    # Later runs read the whole copy from the cache.
    again = rl.WebDataset(f"{proxy.url}{URLS}", transform=TRANSFORM,
                          cache_dir=str(tmp_path / "c2"), index_cache=index, remote_options=FAST)
    _assert_same_as_local(again, shards)
    assert len(proxy.gets("/train-000000.tar")) == 2


def test_a_download_cut_short_is_checked_with_the_server_and_fetched_again(proxy, shards,
                                                                           tmp_path):
    # The server cuts shard 0 in half once, saying so in its Content-Length: nothing knows the
    # shard's size yet, but its copy indexes as damaged, so the server is asked for the object's
    # size, which is not the copy's: downloaded again, every sample there.
    proxy.faults = {"/train-000000.tar": ["short"]}
    ds = rl.WebDataset(f"{proxy.url}{URLS}", transform=TRANSFORM, cache_dir=str(tmp_path / "c"),
                       index_cache=None, remote_options=FAST)
    assert len(ds) == 24 and not any(ds.sample_errors)
    _assert_same_as_local(ds, shards)
    asked = proxy.gets("/train-000000.tar")
    assert len(asked) == 3 and "range" not in asked[0] and "range" not in asked[2]
    assert asked[1]["range"].startswith("bytes=")  # the one-byte question


def test_a_cut_copy_left_in_the_cache_by_an_earlier_run_is_fetched_again(proxy, shards,
                                                                         tmp_path):
    index = str(tmp_path / "index")
    size = (shards / NAMES[0]).stat().st_size

    def cut_run(cache):
        # A server that cut shard 0 short and said so, and failed the question too: the cut
        # copy stays in the cache (its index says the shard is damaged).
        proxy.faults = {"/train-000000.tar": ["short"] * (1 + FAST["max_attempts"])}
        cut = rl.WebDataset(f"{proxy.url}{URLS}", cache_dir=cache, index_cache=None,
                            remote_options=FAST)
        assert len(cut) < 24 and os.path.getsize(cut.shard_paths[0]) < size
        proxy.faults = {}
        proxy.requests.clear()

    # A later run without kept indexes asks the server about the damaged copy: fetched again.
    cache = str(tmp_path / "cache")
    cut_run(cache)
    ds = rl.WebDataset(f"{proxy.url}{URLS}", transform=TRANSFORM, cache_dir=cache,
                       index_cache=None, remote_options=FAST)
    assert len(ds) == 24
    _assert_same_as_local(ds, shards)
    assert len(proxy.gets("/train-000000.tar")) == 2  # the question, the download
    assert os.path.getsize(ds.shard_paths[0]) == size
    # A later run whose index knows the shard's size (kept by another node's run here) finds
    # the cached copy of another size at the epoch's start: fetched again without asking.
    rl.WebDataset(f"{proxy.url}{URLS}", cache_dir=str(tmp_path / "other"), index_cache=index)
    cache = str(tmp_path / "cache2")
    cut_run(cache)
    ds = rl.WebDataset(f"{proxy.url}{URLS}", transform=TRANSFORM, cache_dir=cache,
                       index_cache=index, remote_options=FAST)
    assert len(ds) == 24
    _assert_same_as_local(ds, shards)
    assert len(proxy.gets("/train-000000.tar")) == 1
    assert os.path.getsize(ds.shard_paths[0]) == size


def test_a_changed_byte_in_a_cached_shard_is_caught_and_the_shard_fetched_again(nginx, shards,
                                                                               tmp_path):
    cache, index = str(tmp_path / "cache"), str(tmp_path / "index")
    ds = rl.WebDataset(f"{nginx.url}{URLS}", transform=TRANSFORM, cache_dir=cache,
                       index_cache=index)
    _assert_same_as_local(ds, shards)
    before = nginx.gets(NAMES[1])
    # One bit of an image member's data flips on disk (the size stays).
    entry = ds.shard_paths[1]
    k = ds.shard_starts[1] + 3
    at = int(ds.offsets[k]) + int(ds.lengths[k]) // 2
    _flip_bit(entry, at)
    # A dataset built from the kept indexes (the copy checked at the epoch's start) and one
    # indexed from the cache (checked when fetched at construction) both read the shard's
    # bytes as the server has them: the copy fails its checksum and is downloaded again.
    kept = rl.WebDataset(f"{nginx.url}{URLS}", transform=TRANSFORM, cache_dir=cache,
                         index_cache=index)
    _assert_same_as_local(kept, shards)
    assert nginx.gets(NAMES[1]) == before + 1
    _flip_bit(entry, at)
    fresh = rl.WebDataset(f"{nginx.url}{URLS}", transform=TRANSFORM, cache_dir=cache,
                          index_cache=None)
    _assert_same_as_local(fresh, shards)
    assert nginx.gets(NAMES[1]) == before + 2


def test_epochs_over_cached_remote_shards_use_their_read_ahead_as_local_ones_do(nginx, shards,
                                                                               tmp_path):
    def run(ds):
        loader = rl.DataLoader(ds, batch_size=4, shuffle=True,
                               generator=torch.Generator().manual_seed(5))
        epochs = [[(x.clone(), y.clone()) for x, y in loader] for _ in range(4)]
        return epochs, loader

    remote = rl.WebDataset(f"{nginx.url}{URLS}", transform=TRANSFORM,
                           cache_dir=str(tmp_path / "cache"))
    local = rl.WebDataset([str(shards / n) for n in NAMES], transform=TRANSFORM, index_cache=None)
    got, remote_loader = run(remote)
    want, local_loader = run(local)
    for a, b in zip(got, want):
        assert len(a) == len(b)
        assert all(torch.equal(xa, xb) and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b))
    r, l = _settled_stats(remote_loader), _settled_stats(local_loader)
    assert l["epochs_adopted"] == 3
    assert r["epochs_adopted"] == l["epochs_adopted"], remote_loader.describe()
    assert "dropped because their files changed" not in remote_loader.describe()
    # Nothing decoded twice: the epochs read ahead were used, not thrown away and read again
    # (besides what was delivered, only the fifth epoch's start, read ahead, was decoded).
    for s in (r, l):
        assert s["samples"] == 4 * 24 and s["decodes"] - s["samples_ahead"] == s["samples"], s


def _settled_stats(loader):
    """stats() once the epoch read ahead stopped decoding (its share of the slots is full)."""
    deadline, last = time.monotonic() + 10, None
    while True:
        s = loader.stats()
        if last is not None and (s["decodes"], s["samples_ahead"]) == last:
            return s
        assert time.monotonic() < deadline, s
        last = (s["decodes"], s["samples_ahead"])
        time.sleep(0.2)
