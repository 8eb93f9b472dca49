"""WebDataset shards over http://, https:// and s3://, against real loopback servers started by
the tests: nginx (HTTP, and HTTPS with a certificate made here), moto's S3 server, and a
fault-injecting proxy (tests/python/remote_servers.py). Each sample once per epoch, pixels equal
to the same shards read locally; the node-local cache, its lock and its limit; the fault rules."""

from __future__ import annotations

import io
import os
import time
import warnings
from pathlib import Path

import pytest

import ringloader as rl
from ringloader.core import _remote
from ringloader import transforms as T
from ringloader.sources.webdataset import expand_urls

import remote_servers as srv

wds = pytest.importorskip("webdataset")

TRANSFORM = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])
FAST = {"max_attempts": 3, "backoff_initial_s": 0.01, "backoff_max_s": 0.05}
needs_nginx = pytest.mark.skipif(srv.NGINX is None, reason="nginx is not installed "
                                 "(Debian nginx-light; scripts/setup.sh installs it)")


@pytest.fixture(autouse=True)
def _own_cache_home(tmp_path, monkeypatch):
    """Default cache folders (shards, indexes) under the test's folder, not the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


@pytest.fixture(scope="module")
def shards(tmp_path_factory, unique_tree):
    """Two shards (12 samples each) by webdataset.ShardWriter, in `root`: (root, names)."""
    root = tmp_path_factory.mktemp("shards")
    samples = rl.ImageFolder(str(unique_tree)).samples
    with wds.ShardWriter(str(root / "train-%06d.tar"), maxcount=12, verbose=0) as sink:
        for i, (path, label) in enumerate(samples):
            sink.write({"__key__": f"s{i:05d}", "jpg": Path(path).read_bytes(), "cls": label})
    (root / "forbidden").mkdir()
    (root / "forbidden" / "train-000000.tar").write_bytes((root / "train-000000.tar").read_bytes())
    return root, ["train-000000.tar", "train-000001.tar"]


@pytest.fixture(scope="module")
def nginx(tmp_path_factory, shards):
    if srv.NGINX is None:
        pytest.skip("nginx is not installed (Debian nginx-light; scripts/setup.sh installs it)")
    if srv.OPENSSL is None:
        pytest.skip("openssl is not installed (it makes the test certificate)")
    prefix = tmp_path_factory.mktemp("nginx")
    cert, key = srv.make_cert(prefix)
    server = srv.Nginx(shards[0], prefix, cert, key)
    server.cert = cert
    yield server
    server.stop()


@pytest.fixture
def proxy(nginx):
    p = srv.FaultProxy(nginx.url, stall_s=3.0)
    yield p
    p.stop()


def _epoch(ds, **kw):
    """(labels, images) of one epoch in the sampler's order."""
    loader = rl.DataLoader(ds, batch_size=6, **kw)
    images, labels = [], []
    for x, y in loader:
        images.append(x.clone())
        labels += y.tolist()
    return labels, images


def _assert_same(remote, local, **kw):
    got_labels, got = _epoch(remote, **kw)
    want_labels, want = _epoch(local, **kw)
    assert got_labels == want_labels
    assert sorted(got_labels) == sorted(local.targets)  # every sample once
    for g, w in zip(got, want):
        assert (g - w).abs().max().item() == 0


def _local(shards):
    root, names = shards
    return rl.WebDataset([str(root / n) for n in names], transform=TRANSFORM, index_cache=None)


def test_scheme_detection_and_urls():
    assert _remote.remote_scheme("s3://b/k.tar") == "s3"
    assert _remote.remote_scheme("https://h/x.tar") == "https"
    assert _remote.remote_scheme("/data/http://x") is None
    assert _remote.remote_scheme("pipe:curl http://h/x") is None
    assert expand_urls("s3://b/train-{0..1}.tar") == ["s3://b/train-0.tar", "s3://b/train-1.tar"]
    with pytest.raises(ValueError, match="ftp://h/a.tar"):
        expand_urls("ftp://h/a.tar")
    with pytest.raises(ValueError, match="cache_limit"):
        rl.WebDataset("s3://b/k.tar", cache_limit="lots")
    with pytest.raises(ValueError, match="remote_options: unknown key 'retries'"):
        rl.WebDataset("s3://b/k.tar", remote_options={"retries": 3})
    with pytest.raises(ValueError, match=r"remote_options\['max_attempts'\] must be an int >= 1"):
        rl.WebDataset("s3://b/k.tar", remote_options={"max_attempts": 0})
    assert _remote.cache_limit_bytes("50GB") == 50 * 10 ** 9
    assert _remote.cache_limit_bytes(None) == 0


def test_ca_bundle_order(tmp_path, monkeypatch):
    mine, env = tmp_path / "mine.pem", tmp_path / "env.pem"
    mine.write_text("x")
    env.write_text("y")
    for var in ("SSL_CERT_FILE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(_remote.CA_BUNDLE_ENV, str(env))
    assert _remote.ca_bundle(str(mine)) == str(mine)
    assert _remote.ca_bundle(None) == str(env)
    monkeypatch.delenv(_remote.CA_BUNDLE_ENV)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "gone.pem"))
    with pytest.raises(FileNotFoundError, match="gone.pem"):
        _remote.ca_bundle(None)
    monkeypatch.delenv("SSL_CERT_FILE")
    assert _remote.ca_bundle(None) in (*_remote.SYSTEM_CA_BUNDLES, None)


def test_s3_settings_from_profile_files(tmp_path):
    creds, config = tmp_path / "credentials", tmp_path / "config"
    creds.write_text("[default]\naws_access_key_id = D\naws_secret_access_key = DS\n"
                     "[train]\naws_access_key_id = AKTRAIN\naws_secret_access_key = SECRET\n"
                     "aws_session_token = TOKEN\n")
    config.write_text("[profile train]\nregion = eu-central-1\nendpoint_url = http://store:9000\n")
    env = {"AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_CONFIG_FILE": str(config),
           "AWS_PROFILE": "train"}
    got = _remote.s3_settings(env)
    assert got == {"access_key": "AKTRAIN", "secret_key": "SECRET", "session_token": "TOKEN",
                   "region": "eu-central-1", "endpoint": "http://store:9000"}
    env.update(AWS_ACCESS_KEY_ID="ENVKEY", AWS_REGION="us-west-2", AWS_ENDPOINT_URL="http://e")
    got = _remote.s3_settings(env)
    assert (got["access_key"], got["region"], got["endpoint"]) == ("ENVKEY", "us-west-2", "http://e")
    del env["AWS_PROFILE"]
    assert _remote.s3_settings(env)["secret_key"] == "DS"


@needs_nginx
def test_http_shards_read_like_local_ones_and_the_second_pass_is_cached(nginx, shards, tmp_path):
    cache = tmp_path / "cache"
    url = f"{nginx.url}/train-{{000000..000001}}.tar"
    before = nginx.gets("train-000000.tar")
    ds = rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(cache))
    local = _local(shards)
    assert ds.keys == local.keys and ds.targets == local.targets
    assert nginx.gets("train-000000.tar") == before + 1
    assert all(p.startswith(str(cache)) for p in ds.shard_paths)
    _assert_same(ds, local, shuffle=True, seed=3)
    _assert_same(ds, local)  # the second epoch: from the cache
    again = rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(cache))
    _assert_same(again, local)
    assert nginx.gets("train-000000.tar") == before + 1  # one download in all
    assert "member" in ds.describe_sample(0) and nginx.url in ds.describe_sample(0)


@needs_nginx
def test_https_with_a_test_ca_and_clear_errors(nginx, shards, tmp_path, monkeypatch):
    url = f"{nginx.https_url}/train-{{000000..000001}}.tar"
    for var in ("SSL_CERT_FILE", "CURL_CA_BUNDLE", _remote.CA_BUNDLE_ENV):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(RuntimeError, match=r"127\.0\.0\.1.*train-00000[01]\.tar.*certificate"):
        rl.WebDataset(url, cache_dir=str(tmp_path / "a"), remote_options=FAST)
    ds = rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(tmp_path / "b"),
                       ca_file=str(nginx.cert))
    _assert_same(ds, _local(shards))
    monkeypatch.setenv(_remote.CA_BUNDLE_ENV, str(nginx.cert))
    assert len(rl.WebDataset(url, cache_dir=str(tmp_path / "c"))) == len(ds)
    start = time.monotonic()
    with pytest.raises(PermissionError, match=r"/forbidden/train-000000\.tar: HTTP 403"):
        rl.WebDataset(f"{nginx.https_url}/forbidden/train-000000.tar", cache_dir=str(tmp_path / "d"))
    with pytest.raises(FileNotFoundError, match=r"/nope\.tar: HTTP 404 Not Found"):
        rl.WebDataset(f"{nginx.url}/nope.tar", cache_dir=str(tmp_path / "d"))
    assert time.monotonic() - start < 2  # not retried
    assert not [p for p in (tmp_path / "d").iterdir() if not p.name.endswith(".lock")]


@needs_nginx
def test_503s_resets_and_stalls_are_retried_and_resumed(nginx, proxy, shards, tmp_path):
    proxy.faults = {"/train-000000.tar": ["503", "reset", "norange"],
                    "/train-000001.tar": ["reset", "stall", "ok"]}
    ds = rl.WebDataset(f"{proxy.url}/train-{{000000..000001}}.tar", transform=TRANSFORM,
                       cache_dir=str(tmp_path / "cache"),
                       remote_options=dict(FAST, max_attempts=4, stall_timeout_s=1))
    _assert_same(ds, _local(shards))
    first = proxy.gets("/train-000000.tar")
    assert len(first) == 3 and "range" in first[2]  # answered with the whole object: rewritten
    second = proxy.gets("/train-000001.tar")
    assert len(second) == 3
    size = (shards[0] / "train-000001.tar").stat().st_size
    # Each retry asks for the rest of what it has (what arrived before the reset), guarded by
    # the ETag it saw.
    starts = [int(r["range"][len("bytes="):-1]) for r in second[1:]]
    assert "range" not in second[0]
    assert 0 < starts[0] <= size // 2 and starts[0] <= starts[1] < size
    assert second[1]["if-range"].startswith('"') and second[2]["if-range"] == second[1]["if-range"]
    assert not list((tmp_path / "cache").glob("*.part"))


@needs_nginx
def test_an_object_replaced_between_attempts_is_fetched_again_whole(nginx, proxy, shards,
                                                                    tmp_path):
    root, names = shards
    (root / "replaced").mkdir(exist_ok=True)
    target = root / "replaced" / "t.tar"
    target.write_bytes((root / names[0]).read_bytes())
    # nginx's ETag is the mtime in seconds and the size: the sizes differ, so the ETags do.
    assert (root / names[0]).stat().st_size != (root / names[1]).stat().st_size
    proxy.faults = {"/replaced/t.tar": ["reset"]}
    # After the first half arrived the object is replaced: the resumed request's If-Range
    # (the old ETag) no longer matches, and the new object comes whole, never spliced.
    proxy.after_reset = lambda path: (time.sleep(0.01),
                                      target.write_bytes((root / names[1]).read_bytes()))
    ds = rl.WebDataset(f"{proxy.url}/replaced/t.tar", transform=TRANSFORM,
                       cache_dir=str(tmp_path / "cache"), remote_options=FAST)
    second = rl.WebDataset(str(root / names[1]), transform=TRANSFORM, index_cache=None)
    _assert_same(ds, second)
    got = proxy.gets("/replaced/t.tar")
    assert len(got) == 2 and got[1]["range"].startswith("bytes=") and got[1]["if-range"]


@needs_nginx
def test_a_shard_that_cannot_be_fetched_fails_its_samples_not_the_run(nginx, proxy, shards,
                                                                      tmp_path):
    url = f"{proxy.url}/train-{{000000..000001}}.tar"
    proxy.always = {"/train-000001.tar": "503"}
    # Its samples cannot be known: construction raises, naming it and why.
    with pytest.raises(ConnectionError, match=r"1 of 2 shards could not be downloaded.*"
                       r"train-000001\.tar: .*HTTP 503.*gave up after 3"):
        rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(tmp_path / "cache"),
                      index_cache=None, remote_options=FAST)
    assert len(proxy.gets("/train-000001.tar")) == FAST["max_attempts"]
    local = _local(shards)
    # A run that indexed the shard before keeps its samples, each failing, when it is down.
    proxy.always = {}
    index = str(tmp_path / "index")
    assert len(rl.WebDataset(url, cache_dir=str(tmp_path / "c2"), index_cache=index)) == 24
    proxy.always = {"/train-000001.tar": "503"}
    down = rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(tmp_path / "c3"),
                         index_cache=index, remote_options=FAST)
    assert len(down) == 24 and down.keys == local.keys
    # Built from the kept indexes: the shard is fetched at the epoch's start, and fails there.
    with pytest.raises(rl.SampleError, match=r"train-000001\.tar.*could not be downloaded.*"
                       r"HTTP 503"):
        _epoch(down)
    labels, _ = _epoch(down, on_error="skip")
    assert sorted(labels) == sorted(local.targets[:12])
    # Without a kept index its samples are unknown again: construction raises.
    with pytest.raises(ConnectionError, match=r"train-000001\.tar: .*HTTP 503"):
        rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(tmp_path / "c4"),
                      index_cache=str(tmp_path / "index2"), remote_options=FAST)


@needs_nginx
def test_kept_indexes_build_the_dataset_without_downloading(nginx, shards, tmp_path):
    url = f"{nginx.url}/train-{{000000..000001}}.tar"
    index = str(tmp_path / "index")
    first = rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(tmp_path / "c1"),
                          index_cache=index)
    before = nginx.gets("train-000000.tar")
    ds = rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(tmp_path / "c2"),
                       index_cache=index)
    assert nginx.gets("train-000000.tar") == before  # only the kept index was read
    assert ds.keys == first.keys and ds.targets == first.targets
    assert not any(os.path.exists(p) for p in ds.shard_paths)
    _assert_same(ds, _local(shards), shuffle=True, seed=1)  # the epoch's start downloads
    assert nginx.gets("train-000000.tar") == before + 1
    assert all(p.startswith(str(tmp_path / "c2")) and os.path.exists(p) for p in ds.shard_paths)


@needs_nginx
def test_a_kept_index_of_a_changed_object_is_stale_at_the_first_epoch(nginx, shards, tmp_path):
    root, names = shards
    (root / "kept").mkdir(exist_ok=True)
    target = root / "kept" / "train.tar"
    target.write_bytes((root / names[0]).read_bytes())
    url, index = f"{nginx.url}/kept/train.tar", str(tmp_path / "index")
    rl.WebDataset(url, cache_dir=str(tmp_path / "c1"), index_cache=index)
    target.write_bytes((root / names[1]).read_bytes())  # replaced on the server (a new ETag)
    ds = rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(tmp_path / "c2"),
                       index_cache=index)
    with pytest.raises(rl.StaleIndexError, match=r"kept/train\.tar changed since the dataset"):
        _epoch(ds)


@needs_nginx
def test_cache_limit_evicts_least_recently_used_and_refetches(nginx, shards, tmp_path):
    cache = tmp_path / "cache"
    size = max((shards[0] / n).stat().st_size for n in shards[1])
    first = rl.WebDataset(f"{nginx.url}/train-000000.tar", transform=TRANSFORM,
                          cache_dir=str(cache), cache_limit=size + 1000)
    assert os.path.exists(first.shard_paths[0])
    second = rl.WebDataset(f"{nginx.url}/train-000001.tar", cache_dir=str(cache),
                           cache_limit=size + 1000)
    assert os.path.exists(second.shard_paths[0])
    assert not os.path.exists(first.shard_paths[0])  # least recently used, over the limit
    before = nginx.gets("train-000000.tar")
    labels, _ = _epoch(first)  # the epoch's start brings it back
    assert sorted(labels) == sorted(_local(shards).targets[:12])
    assert nginx.gets("train-000000.tar") == before + 1


@needs_nginx
def test_an_epoch_over_more_than_the_cache_holds_completes_within_the_limit(nginx, shards,
                                                                            unique_tree, tmp_path):
    """cache_limit below the dataset's shards: every epoch delivers each sample once (pixels as
    local), evicting least recently used shards as it goes; the folder never holds more than the
    limit plus one shard per reader thread; the next epoch downloads again what was evicted."""
    import threading

    root = shards[0] / "six"
    if not root.is_dir():
        root.mkdir()
        samples = rl.ImageFolder(str(unique_tree)).samples
        with wds.ShardWriter(str(root / "part-%06d.tar"), maxcount=4, verbose=0) as sink:
            for i, (path, label) in enumerate(samples):
                sink.write({"__key__": f"s{i:05d}", "jpg": Path(path).read_bytes(), "cls": label})
    names = sorted(p.name for p in root.glob("part-*.tar"))
    assert len(names) == 6
    largest = max((root / n).stat().st_size for n in names)
    url = f"{nginx.url}/six/part-{{000000..000005}}.tar"
    index = tmp_path / "index"
    rl.WebDataset(url, cache_dir=str(tmp_path / "indexing"), index_cache=str(index))
    cache = tmp_path / "cache"
    limit = 2 * largest
    ds = rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(cache), cache_limit=limit,
                       index_cache=str(index))  # from the kept indexes: nothing downloaded yet
    local = rl.WebDataset([str(root / n) for n in names], transform=TRANSFORM, index_cache=None)
    peak, stop = [0], threading.Event()

    def watch():
        while not stop.is_set():
            held = 0
            for p in cache.glob("*"):
                if p.name.endswith((".tar", ".tar.part")):
                    try:
                        held += p.stat().st_size
                    except FileNotFoundError:
                        pass
            peak[0] = max(peak[0], held)
            time.sleep(0.002)

    def gets():
        return [nginx.gets(f"six/{n}") for n in names]

    readers = 2
    loader = rl.DataLoader(ds, batch_size=6, num_workers=2, reader_threads=readers)
    watcher = threading.Thread(target=watch)
    watcher.start()
    epochs, fetched, cached = [], [], []
    try:
        for _ in range(2):
            before = gets()
            cached.append({n for n in names if os.path.exists(ds.shard_paths[names.index(n)])})
            epochs.append([(x.clone(), y.tolist()) for x, y in loader])
            fetched.append([after - b for after, b in zip(gets(), before)])
    finally:
        stop.set()
        watcher.join()
    want = [(x, y.tolist()) for x, y in rl.DataLoader(local, batch_size=6)]
    for got in epochs:
        assert [y for _, y in got] == [y for _, y in want]
        assert all(g.equal(w) for (g, _), (w, _) in zip(got, want))
    assert 0 < peak[0] <= limit + readers * largest, (peak[0], limit, largest)
    assert cached[0] == set() and all(f >= 1 for f in fetched[0]), fetched
    # The second epoch downloads again every shard evicted during the first (here the first
    # ones, read earliest), each a bounded number of times: no thrashing.
    assert len(cached[1]) <= 3 and all(fetched[1][names.index(n)] >= 1
                                        for n in names if n not in cached[1]), (cached, fetched)
    assert all(sum(f) <= 2 * len(names) for f in fetched), fetched
    # Shuffled, the readers follow the permutation while the downloads follow the shard order:
    # a shard a reader waits for comes first, and the epoch delivers each sample once.
    shuffled = [y for _, y in rl.DataLoader(ds, batch_size=6, shuffle=True, seed=3)]
    assert sorted(sum((y.tolist() for y in shuffled), [])) == sorted(sum(
        (y for _, y in want), []))
    ds.close_downloads()


@needs_nginx
def test_a_changed_object_is_a_stale_index_once_fetched_again(nginx, shards, tmp_path):
    root, names = shards
    (root / "changing").mkdir(exist_ok=True)
    target = root / "changing" / "train.tar"
    target.write_bytes((root / names[0]).read_bytes())
    ds = rl.WebDataset(f"{nginx.url}/changing/train.tar", transform=TRANSFORM,
                       cache_dir=str(tmp_path / "cache"))
    first, _ = _epoch(ds)
    target.write_bytes((root / names[1]).read_bytes())  # replaced on the server (a new ETag)
    assert _epoch(ds)[0] == first  # the cached copy is not revalidated while it is cached
    os.unlink(ds.shard_paths[0])  # evicted: the next epoch fetches the new object
    with pytest.raises(rl.StaleIndexError, match=r"changing/train\.tar changed since the dataset"):
        _epoch(ds)


@needs_nginx
def test_ctrl_c_stops_the_downloads(nginx, shards, tmp_path):
    import _thread
    import threading

    slow = srv.FaultProxy(nginx.url, latency_s=10)
    try:
        threading.Timer(0.3, _thread.interrupt_main).start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            rl.WebDataset(f"{slow.url}/train-{{000000..000001}}.tar", cache_dir=str(tmp_path / "c"))
        assert time.monotonic() - start < 3
        assert not list((tmp_path / "c").glob("*.part"))
    finally:
        slow.stop()


def _build_and_count(url, cache, queue):
    queue.put(len(rl.WebDataset(url, cache_dir=cache)))


@needs_nginx
def test_processes_on_one_node_share_one_download(nginx, shards, tmp_path):
    import multiprocessing

    slow = srv.FaultProxy(nginx.url, latency_s=0.3)
    try:
        ctx = multiprocessing.get_context("fork")  # the package is imported already: fast
        queue = ctx.Queue()
        url = f"{slow.url}/train-{{000000..000001}}.tar"
        procs = [ctx.Process(target=_build_and_count, args=(url, str(tmp_path / "cache"), queue))
                 for _ in range(3)]
        with warnings.catch_warnings():
            # Python 3.12+ warns on fork with threads running (the proxy's): the children only
            # build a dataset and exit.
            warnings.simplefilter("ignore", DeprecationWarning)
            for p in procs:
                p.start()
        counts = [queue.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        assert counts == [24] * 3 and [p.exitcode for p in procs] == [0] * 3
        assert len(slow.gets("/train-000000.tar")) == 1
        assert len(slow.gets("/train-000001.tar")) == 1
    finally:
        slow.stop()


def test_s3_through_moto_signed_with_the_profile(shards, tmp_path, monkeypatch):
    pytest.importorskip("moto", reason="moto[server] is not installed (requirements-dev.txt)")
    pytest.importorskip("boto3", reason="boto3 (moto's dependency) is not installed")
    root, names = shards
    moto = srv.Moto()
    proxy = srv.FaultProxy(moto.url)
    try:
        moto.put("bkt", {f"data/{n}": (root / n).read_bytes() for n in names})
        (tmp_path / "credentials").write_text(
            "[train]\naws_access_key_id = AKIATRAIN\naws_secret_access_key = SECRETKEY\n")
        (tmp_path / "config").write_text("[profile train]\nregion = eu-west-3\n")
        for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                    "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
        monkeypatch.setenv("AWS_PROFILE", "train")
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        ds = rl.WebDataset("s3://bkt/data/train-{000000..000001}.tar", transform=TRANSFORM,
                           cache_dir=str(tmp_path / "cache"))
        _assert_same(ds, _local(shards), shuffle=True, seed=5)
        (request,) = proxy.gets("/bkt/data/train-000000.tar")
        auth = request["authorization"]
        assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIATRAIN/")
        assert "/eu-west-3/s3/aws4_request" in auth and "x-amz-date" in request
        # Built again from the kept indexes into an empty cache, a Subset's members come by
        # signed range requests.
        from torch.utils.data import Subset
        again = rl.WebDataset("s3://bkt/data/train-{000000..000001}.tar", transform=TRANSFORM,
                              cache_dir=str(tmp_path / "ranged"))
        got = [y.tolist() for _, y in rl.DataLoader(Subset(again, [2, 17]), batch_size=2)]
        assert got == [[ds.targets[2], ds.targets[17]]]
        ranged = proxy.gets("/bkt/data/train-000000.tar")[1:]
        assert ranged and all(r["range"].startswith("bytes=") for r in ranged)
        assert all(r["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIATRAIN/")
                   for r in ranged)
        # The link measured is the endpoint's (every bucket behind it shares it).
        [link] = again.link_estimates()
        assert link["host"] == proxy.url and link["latency_samples"] >= len(ranged)
        with pytest.raises(FileNotFoundError, match=r"s3://bkt/data/missing\.tar: HTTP 404"):
            rl.WebDataset("s3://bkt/data/missing.tar", cache_dir=str(tmp_path / "cache"))
        proxy.always["/bkt/data/denied.tar"] = "403"
        with pytest.raises(PermissionError, match=r"denied\.tar: HTTP 403 Forbidden: .*AccessDenied"):
            rl.WebDataset("s3://bkt/data/denied.tar", cache_dir=str(tmp_path / "cache"))
        # Local and remote shards mix in one dataset.
        mixed = rl.WebDataset([str(root / names[0]), f"s3://bkt/data/{names[1]}"],
                              transform=TRANSFORM, cache_dir=str(tmp_path / "cache"))
        _assert_same(mixed, _local(shards))
    finally:
        proxy.stop()
        moto.stop()


def test_the_benchmarks_link_serves_ranges_at_its_rate(tmp_path):
    import urllib.request

    from ringloader.bench import _ThrottledFiles

    data = bytes(range(256)) * 4096  # 1 MiB
    (tmp_path / "a.tar").write_bytes(data)
    link = _ThrottledFiles(tmp_path, latency_s=0.02, rate=10e6)
    try:
        start = time.monotonic()
        with urllib.request.urlopen(f"{link.url}/a.tar") as r:
            assert r.read() == data and r.headers["ETag"]
            etag = r.headers["ETag"]
        assert time.monotonic() - start >= 0.09  # 1 MiB at 10 MB/s
        req = urllib.request.Request(f"{link.url}/a.tar",
                                     headers={"Range": "bytes=1000-", "If-Range": etag})
        with urllib.request.urlopen(req) as r:
            assert r.status == 206 and r.read() == data[1000:]
            assert r.headers["Content-Range"] == f"bytes 1000-{len(data) - 1}/{len(data)}"
        req = urllib.request.Request(f"{link.url}/a.tar",
                                     headers={"Range": "bytes=1000-", "If-Range": '"other"'})
        with urllib.request.urlopen(req) as r:
            assert r.status == 200 and r.read() == data
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"{link.url}/../etc/passwd")
    finally:
        link.stop()


def test_remote_benchmark_reports_each_epoch_and_cleans_up(image_tree, tmp_path):
    """``python -m ringloader.bench --dataset remote``: the report's shape (not its timings), and
    its shards and cache, made in a temporary folder, are removed afterwards."""
    import re
    import subprocess
    import sys

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "ringloader.bench", "--dataset", "remote", "--root", str(image_tree),
         "--batch-size", "4", "--num-workers", "2", "--link-rate", "50", "--link-latency-ms", "5",
         "--quiet"],
        capture_output=True, text=True, env=dict(os.environ, TMPDIR=str(scratch)), timeout=200)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(r"ringloader remote benchmark: 24 images, 1 shards .* 50 MB/s and 5 ms", out), out
    rate = r" *: +[0-9.]+ s, +\d+ img/s, [0-9.]+x the link, [0-9.]+x local"
    assert re.search(r"the link alone needs [0-9.]+ s", out), out
    # Each epoch's CPU seconds (the link's server runs in a process of its own), against the
    # local epoch's.
    cpu = r"; [0-9.]+ CPU-s \([0-9.]+x local\)$"
    assert re.search(r"local shards" + rate + r"; [0-9.]+ CPU-s \(1\.00x local\)$", out, re.M), out
    for name in (r"http://, epoch 1, overlapping", r"http://, epoch 2 \(cache\)"):
        assert re.search(name + rate + cpu, out, re.M), out
    assert re.search(r"http://, epoch 1, fetch first" + rate + r" \(download [0-9.]+ s = "
                     r"[0-9.]+ MB/s\)" + cpu, out, re.M), out
    for e in (1, 2):
        assert re.search(rf"http://, cache of half, epoch {e}" + rate + cpu, out, re.M), out
        # The peers: pipe:curl streams and the webdataset package, each epoch over the link.
        if srv.shutil.which("curl"):
            assert re.search(rf"pipe:curl, epoch {e}" + rate + cpu, out, re.M), out
        assert re.search(rf"webdataset pkg, epoch {e}" + rate + cpu, out, re.M), out
    # A sparse Subset: its one shard's 3 members by range under "auto" (neighbours merged into
    # fewer requests), none with 0.
    sub = r" *: +[0-9.]+ s, first batch [0-9.]+ s, 3 images, "
    assert re.search(r"http://, Subset 1/10, auto" + sub + r"1 of 1 shards by range \([1-3] requests\)",
                     out), out
    assert re.search(r"http://, Subset 1/10, 0 \(whole\)" + sub + r"0 of 1 shards by range "
                     r"\(0 requests\)", out), out
    assert not list(scratch.glob("ringloader-remote-*"))


@needs_nginx
def test_pack_sidecars_on_the_server_build_the_dataset_without_the_shards(nginx, shards,
                                                                           unique_tree, tmp_path):
    root, _ = shards
    from ringloader import pack
    pack.pack(str(unique_tree), str(root / "packed"), shard_size=600_000,
              progress_stream=io.StringIO())
    names = sorted(p.name for p in (root / "packed").glob("shard-*.tar"))
    assert len(names) >= 2
    urls = [f"{nginx.url}/packed/{n}" for n in names]
    local = rl.WebDataset([str(root / "packed" / n) for n in names], transform=TRANSFORM,
                          index_cache=None)
    ds = rl.WebDataset(urls, transform=TRANSFORM, cache_dir=str(tmp_path / "cache"),
                       index_cache=None)
    tars = lambda: [nginx.gets(f"packed/{n}") for n in names]  # noqa: E731
    assert tars() == [0] * len(names)  # the sidecars only
    assert all(nginx.gets(f"packed/{n}.idx.json") == 1 for n in names)
    assert ds.keys == local.keys and ds.targets == local.targets
    _assert_same(ds, local)  # the epoch's start downloads the shards
    assert tars() == [1] * len(names)
    assert all(c is not None and c[1] is not None for c in ds.remote_copies)  # ETags learnt


def _kept(proxy, tmp_path):
    """Two shards behind the proxy, as a dataset built from the indexes an earlier run kept:
    nothing is downloaded until the first epoch's start."""
    url = f"{proxy.url}/train-{{000000..000001}}.tar"
    index = str(tmp_path / "index")
    rl.WebDataset(url, cache_dir=str(tmp_path / "c1"), index_cache=index)
    ds = rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(tmp_path / "c2"),
                       index_cache=index, remote_options=FAST)
    assert not any(os.path.exists(p) for p in ds.shard_paths)
    return ds


@needs_nginx
def test_the_first_batch_decodes_before_the_last_shard_lands(proxy, shards, tmp_path):
    ds = _kept(proxy, tmp_path)
    proxy.hold("/train-000001.tar")
    it = iter(rl.DataLoader(ds, batch_size=6))
    _, first = next(it)  # from the first shard, while the second is held at the server
    assert "/train-000001.tar" in proxy.held and not os.path.exists(ds.shard_paths[1])
    assert os.path.exists(ds.shard_paths[0])
    proxy.release("/train-000001.tar")
    labels = first.tolist() + [v for _, y in it for v in y.tolist()]
    assert labels == _local(shards).targets


@needs_nginx
def test_a_shard_failing_while_the_epoch_runs_fails_its_samples(proxy, shards, tmp_path):
    ds = _kept(proxy, tmp_path)
    proxy.always = {"/train-000001.tar": "503"}
    labels, _ = _epoch(ds, on_error="skip")
    assert labels == _local(shards).targets[:12]
    with pytest.raises(rl.SampleError, match=r"train-000001\.tar.*could not be downloaded.*"
                       r"HTTP 503"):
        _epoch(ds)
    proxy.always = {}
    assert _epoch(ds)[0] == _local(shards).targets  # the next epoch's start fetches it again


@needs_nginx
def test_a_copy_of_a_dataset_leaves_the_downloads_to_the_original(proxy, shards, tmp_path):
    import copy
    import pickle

    ds = _kept(proxy, tmp_path)
    proxy.hold("/train-000001.tar")
    try:
        it = iter(rl.DataLoader(ds, batch_size=6))
        next(it)
        twin = pickle.loads(pickle.dumps(ds))  # as a spawned worker receives it
        assert twin._background is None and copy.deepcopy(ds)._background is None
        assert len(twin) == len(ds)
    finally:
        proxy.release("/train-000001.tar")
    assert [v for _, y in it for v in y.tolist()] == _local(shards).targets[6:]


@needs_nginx
def test_stopping_the_loader_while_a_shard_downloads_returns_promptly(proxy, shards, tmp_path):
    ds = _kept(proxy, tmp_path)
    proxy.hold("/train-000001.tar")
    try:
        loader = rl.DataLoader(ds, batch_size=6)
        it = iter(loader)
        next(it)
        start = time.monotonic()
        del it, loader  # its readers wait for the held shard: stopping must not
        ds.close_downloads()  # the transfer itself stops too
        assert time.monotonic() - start < 2
        assert not os.path.exists(ds.shard_paths[1])
        assert not list((tmp_path / "c2").glob("*.part"))
    finally:
        proxy.release("/train-000001.tar")


def _range_bytes(nginx, name):
    """(status, bytes sent) of every GET of `name` in nginx's access log."""
    log = nginx.prefix / "logs" / "access.log"
    out = []
    for line in log.read_text().splitlines() if log.exists() else []:
        if f"GET /{name} HTTP" in line:
            status, sent = line.split('" ', 1)[1].split()[:2]
            out.append((int(status), int(sent)))
    return out


def _kept_index_dataset(nginx, tmp_path, **kw):
    """The two shards over http, built from indexes an earlier run kept (so nothing is in the
    new cache folder yet)."""
    url, index = f"{nginx.url}/train-{{000000..000001}}.tar", str(tmp_path / "index")
    rl.WebDataset(url, cache_dir=str(tmp_path / "first"), index_cache=index)
    return rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(tmp_path / "cache"),
                         index_cache=index, **kw)


@needs_nginx
def test_a_subset_reads_its_members_by_range_and_a_whole_epoch_downloads(nginx, shards, tmp_path):
    from torch.utils.data import Subset

    ds = _kept_index_dataset(nginx, tmp_path)
    local = _local(shards)
    picks = [1, 4, 14, 22]  # two members of each shard: far under half of its bytes
    wanted = {n: sum(int(ds.lengths[i]) for i in picks if ds.shard_of(i) == s)
              for s, n in enumerate(shards[1])}
    logged = {n: len(_range_bytes(nginx, n)) for n in shards[1]}
    loader = rl.DataLoader(Subset(ds, picks), batch_size=2)
    before = loader.stats()
    got = [(x.clone(), y.tolist()) for x, y in loader]
    want = [(x, y.tolist()) for x, y in rl.DataLoader(Subset(local, picks), batch_size=2)]
    assert [y for _, y in got] == [y for _, y in want]
    for (g, _), (w, _) in zip(got, want):
        assert (g - w).abs().max().item() == 0
    sent = 0
    for name in shards[1]:
        new = _range_bytes(nginx, name)[logged[name]:]
        assert new and all(status == 206 for status, _ in new)  # never the whole shard
        assert wanted[name] <= sum(b for _, b in new) <= wanted[name] + 16 * 1024
        sent += sum(b for _, b in new)
    after = loader.stats()
    assert after["range_bytes"] - before["range_bytes"] == sent
    assert after["range_requests"] - before["range_requests"] >= 2
    assert not any(os.path.exists(p) for p in ds.shard_paths)  # nothing went into the cache
    assert len(list((tmp_path / "cache").glob("*.ranges-*"))) == 2  # the members' sparse copies
    # A member the copy lacks, read alone: its shard is downloaded, not read from the copy.
    x, y = ds[0]
    assert y == local.targets[0] and (x - local[0][0]).abs().max().item() == 0

    # The whole dataset wants every byte: each shard is downloaded whole, once.
    _assert_same(ds, local)
    for name in shards[1]:
        assert [s for s, _ in _range_bytes(nginx, name)[logged[name]:]].count(200) == 1
    assert all(os.path.exists(p) for p in ds.shard_paths)
    assert not list((tmp_path / "cache").glob("*.ranges-*"))  # removed at the next epoch's start


@needs_nginx
def test_a_503_on_a_range_is_retried(nginx, proxy, shards, tmp_path):
    from torch.utils.data import Subset

    url, index = f"{proxy.url}/train-{{000000..000001}}.tar", str(tmp_path / "index")
    rl.WebDataset(url, cache_dir=str(tmp_path / "first"), index_cache=index)
    proxy.faults = {"/train-000000.tar": ["503", "reset"]}
    ds = rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(tmp_path / "cache"),
                       index_cache=index, remote_options=FAST)
    start = len(proxy.gets("/train-000000.tar"))
    got = [y.tolist() for _, y in rl.DataLoader(Subset(ds, [3, 20]), batch_size=2)]
    want = [y.tolist() for _, y in rl.DataLoader(Subset(_local(shards), [3, 20]), batch_size=2)]
    assert got == want
    asked = proxy.gets("/train-000000.tar")[start:]
    assert len(asked) == 3 and all(r["range"].startswith("bytes=") for r in asked)


@needs_nginx
def test_a_changed_object_read_by_range_is_a_stale_index_naming_the_url(nginx, shards, tmp_path):
    from torch.utils.data import Subset

    root, names = shards
    (root / "ranged").mkdir(exist_ok=True)
    target = root / "ranged" / "train.tar"
    target.write_bytes((root / names[0]).read_bytes())
    url, index = f"{nginx.url}/ranged/train.tar", str(tmp_path / "index")
    rl.WebDataset(url, cache_dir=str(tmp_path / "c1"), index_cache=index)
    os.utime(target, (1, 1))  # the same bytes, another ETag (nginx's is mtime and size)
    ds = rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(tmp_path / "c2"),
                       index_cache=index)
    with pytest.raises(rl.StaleIndexError, match=r"ranged/train\.tar changed since .*ETag.*"
                       r"Delete its kept index .*index.* and build the WebDataset again"):
        list(rl.DataLoader(Subset(ds, [2]), batch_size=1))


def test_range_reads_below_is_checked():
    with pytest.raises(ValueError, match=r"remote_options\['range_reads_below'\] must be a number"):
        rl.WebDataset("s3://b/k.tar", remote_options={"range_reads_below": -1})
    with pytest.raises(ValueError, match=r"range_reads_below'\] must be a number >= 0.0 or 'auto', "
                       r"got 'fast'"):
        rl.WebDataset("s3://b/k.tar", remote_options={"range_reads_below": "fast"})
    assert _remote.check_remote_options({"range_reads_below": "auto"}) == \
        {"range_reads_below": "auto"}


@needs_nginx
def test_a_ranks_share_fetches_only_its_members(nginx, shards, tmp_path):
    ds = _kept_index_dataset(nginx, tmp_path)
    logged = {n: len(_range_bytes(nginx, n)) for n in shards[1]}
    # Six ranks of 24 samples in shard order: rank 3 reads samples 12..15, all in the second shard.
    got_labels, got = _epoch(ds, rank=3, world_size=6)
    want_labels, want = _epoch(_local(shards), rank=3, world_size=6)
    assert got_labels == want_labels == [ds.targets[i] for i in range(12, 16)]
    for g, w in zip(got, want):
        assert (g - w).abs().max().item() == 0
    first, second = (_range_bytes(nginx, n)[logged[n]:] for n in shards[1])
    assert first == []  # a shard the rank wants none of is not fetched at all
    assert second and all(status == 206 for status, _ in second)
    share = sum(int(ds.lengths[i]) for i in range(12, 16))
    assert share <= sum(b for _, b in second) <= share + 16 * 1024


@needs_nginx
def test_a_range_that_keeps_failing_fails_its_samples_naming_the_url(nginx, proxy, shards,
                                                                   tmp_path):
    from torch.utils.data import Subset

    url, index = f"{proxy.url}/train-{{000000..000001}}.tar", str(tmp_path / "index")
    rl.WebDataset(url, cache_dir=str(tmp_path / "first"), index_cache=index)
    proxy.always = {"/train-000001.tar": "503"}
    ds = rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(tmp_path / "cache"),
                       index_cache=index, remote_options=FAST)
    sub = Subset(ds, [3, 20])
    with pytest.raises(rl.SampleError, match=r"train-000001\.tar.*could not be downloaded.*"
                       r"train-000001\.tar bytes \d+-\d+: HTTP 503.*gave up after 3"):
        list(rl.DataLoader(sub, batch_size=2))
    labels = [y.tolist() for _, y in rl.DataLoader(sub, batch_size=2, on_error="skip")]
    assert labels == [[ds.targets[3]]]


@needs_nginx
def test_a_resume_mid_shard_fetches_only_what_is_left(nginx, shards, tmp_path):
    url, index = f"{nginx.url}/train-{{000000..000001}}.tar", str(tmp_path / "index")
    first = rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(tmp_path / "first"),
                          index_cache=index)
    loader = rl.DataLoader(first, batch_size=10)
    it = iter(loader)
    next(it), next(it)  # 20 of 24 samples delivered
    state = loader.state_dict()
    want = [y.tolist() for _, y in it]
    ds = rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(tmp_path / "cache"),
                       index_cache=index)
    logged = {n: len(_range_bytes(nginx, n)) for n in shards[1]}
    resumed = rl.DataLoader(ds, batch_size=10)
    resumed.load_state_dict(state)
    assert [y.tolist() for _, y in resumed] == want == [ds.targets[20:]]
    first_shard, second = (_range_bytes(nginx, n)[logged[n]:] for n in shards[1])
    assert first_shard == [] and second and all(status == 206 for status, _ in second)
    left = sum(int(ds.lengths[i]) for i in range(20, 24))
    assert left <= sum(b for _, b in second) <= left + 16 * 1024


def _ranged_behind_proxy(proxy, tmp_path, **options):
    """The two shards behind the proxy, built from kept indexes (nothing in the cache)."""
    url, index = f"{proxy.url}/train-{{000000..000001}}.tar", str(tmp_path / "index")
    rl.WebDataset(url, cache_dir=str(tmp_path / "first"), index_cache=index)
    return rl.WebDataset(url, transform=TRANSFORM, cache_dir=str(tmp_path / "cache"),
                         index_cache=index, remote_options=dict(FAST, **options))


@needs_nginx
def test_range_reads_run_while_the_epoch_reads(nginx, proxy, shards, tmp_path):
    from torch.utils.data import Subset

    ds = _ranged_behind_proxy(proxy, tmp_path)
    picks = [1, 4, 14, 22]
    want = [(x, y.tolist()) for x, y in rl.DataLoader(Subset(_local(shards), picks), batch_size=2)]
    asked = {n: len(proxy.gets(n)) for n in ("/train-000000.tar", "/train-000001.tar")}
    proxy.hold("/train-000001.tar")
    try:
        loader = rl.DataLoader(Subset(ds, picks), batch_size=2)
        before = loader.stats()["range_requests"]
        it = iter(loader)
        x, y = next(it)  # the first shard's members, while the second's ranges are held
        # One copy of two has landed: the first batch did not wait for the last range.
        assert ds._ranges.finished() == 1
        first = len(proxy.gets("/train-000000.tar")) - asked["/train-000000.tar"]
        assert first >= 1 and ds._ranges.totals()[0] == first
        assert loader.stats()["range_requests"] - before == first  # the held ones not yet
    finally:
        proxy.release("/train-000001.tar")
    got = [(x.clone(), y.tolist())] + [(a.clone(), b.tolist()) for a, b in it]
    assert ds._ranges.finished() == 2
    assert [y for _, y in got] == [y for _, y in want]
    for (g, _), (w, _) in zip(got, want):
        assert (g - w).abs().max().item() == 0
    second = len(proxy.gets("/train-000001.tar")) - asked["/train-000001.tar"]
    assert second >= 1 and loader.stats()["range_requests"] - before == first + second


@needs_nginx
def test_range_reads_follow_the_plans_order_of_shards(nginx, proxy, shards, tmp_path):
    from torch.utils.data import Subset

    # One request at a time, and the plan reads the second shard first: its ranges must come
    # first, or the first batch would wait for the first shard, which the proxy holds.
    ds = _ranged_behind_proxy(proxy, tmp_path, max_connections=1, range_reads_below=1.0)
    proxy.hold_s = 10.0
    asked = len(proxy.gets("/train-000000.tar"))
    proxy.hold("/train-000000.tar")
    try:
        it = iter(rl.DataLoader(Subset(ds, [14, 22, 1, 4]), batch_size=2))
        _, first = next(it)
        assert first.tolist() == [ds.targets[14], ds.targets[22]]
        # The second shard's copy landed; the first shard's is still held at the proxy.
        assert ds._ranges.finished() == 1
        assert len(proxy.gets("/train-000000.tar")) - asked <= 1
    finally:
        proxy.release("/train-000000.tar")
    assert [v for _, y in it for v in y.tolist()] == [ds.targets[1], ds.targets[4]]


@needs_nginx
def test_range_reads_and_whole_downloads_share_one_connection_budget(nginx, proxy, shards,
                                                                     tmp_path):
    from torch.utils.data import Subset

    # One member of the first shard (by range) and the whole second shard (downloaded): both
    # start at the epoch's start, and each response takes 0.3 s, so two budgets would overlap.
    ds = _ranged_behind_proxy(proxy, tmp_path, max_connections=1, range_reads_below=0.5)
    asked = {n: len(proxy.gets(n)) for n in ("/train-000000.tar", "/train-000001.tar")}
    proxy.latency_s, proxy.peak_in_flight = 0.3, 0
    picks = [1] + list(range(12, 24))
    loader = rl.DataLoader(Subset(ds, picks), batch_size=13)
    before = loader.stats()["range_requests"]
    assert [y.tolist() for _, y in loader] == [[ds.targets[i] for i in picks]]
    first, second = (proxy.gets(n)[asked[n]:] for n in ("/train-000000.tar", "/train-000001.tar"))
    assert first and all("range" in r for r in first)  # by range
    assert [("range" in r) for r in second] == [False]  # whole
    assert loader.stats()["range_requests"] - before == len(first)
    assert proxy.peak_in_flight == 1


def test_shards_of_known_size_land_in_the_order_given_each_at_the_links_pace(tmp_path):
    from ringloader import _C
    from ringloader.bench import _ThrottledFiles

    # Three 2.5 MiB objects over a 25 MB/s link, two connections: two whole downloads at once
    # would share the link and land together after about 0.2 s; in pieces (two each, taking both
    # connections), in the order given, the first lands after about 0.1 s.
    root = tmp_path / "objects"
    root.mkdir()
    size = 5 << 19
    for i in range(3):
        (root / f"s{i}.tar").write_bytes(os.urandom(size))
    link = _ThrottledFiles(root, 0.005, 25e6)
    try:
        urls = [f"{link.url}/s{i}.tar" for i in range(3)]
        cache = tmp_path / "cache"
        t0 = time.monotonic()
        fetch = _C.BackgroundFetch(urls, str(cache), 0, {"max_connections": 2},
                                   [(size, None)] * 3)
        landed = {}
        while len(landed) < 3 and time.monotonic() - t0 < 10:
            for p in cache.glob("*-s?.tar"):
                landed.setdefault(p.name[-6:-4], time.monotonic() - t0)
            time.sleep(0.002)
        results = fetch.wait()
        fetch.close()
    finally:
        link.stop()
    # Asked for in the order given, whichever fetch thread got to its download first: s0's two
    # pieces take both connections, then s1's, then s2's.
    assert [name for name, _ in link.requests] == ["s0.tar"] * 2 + ["s1.tar"] * 2 + ["s2.tar"] * 2, \
        link.requests
    first, second, third = landed["s0"], landed["s1"], landed["s2"]
    assert first < second < third
    assert first < 0.6 * third
    assert [r["size"] for r in results] == [size] * 3
    assert all(r["attempts"] == 2 for r in results)  # two pieces of at least 1 MiB each
    for i, r in enumerate(results):
        assert Path(r["path"]).read_bytes() == (root / f"s{i}.tar").read_bytes()


def test_pieces_a_server_does_not_serve_come_whole_and_a_failing_server_fails_once(tmp_path):
    from ringloader import _C
    from ringloader.bench import _ThrottledFiles

    size = 5 << 19  # two pieces with two connections
    data = os.urandom(size)
    (tmp_path / "a.tar").write_bytes(data)
    (tmp_path / "b.tar").write_bytes(data)
    link = _ThrottledFiles(tmp_path, 0.0, 1e9)
    proxy = srv.FaultProxy(link.url)
    proxy.always = {"/a.tar": "norange", "/b.tar": "503"}
    try:
        fetch = _C.BackgroundFetch([f"{proxy.url}/a.tar", f"{proxy.url}/b.tar"],
                                   str(tmp_path / "cache"), 0,
                                   dict(FAST, max_connections=2), [(size, None)] * 2)
        a, b = fetch.wait()
        fetch.close()
    finally:
        proxy.stop()
        link.stop()
    # The server ignored Range: both pieces refused, then one whole download.
    assert ["range" in r for r in proxy.gets("/a.tar")] == [True, True, False]
    assert a["size"] == size and Path(a["path"]).read_bytes() == data
    # 503 throughout: each piece's retries, and no whole download after them.
    assert "error" in b and "b.tar" in b["error"] and "gave up after 3" in b["error"]
    assert len(proxy.gets("/b.tar")) == 6 and all("range" in r for r in proxy.gets("/b.tar"))


def test_pieces_of_an_object_that_changed_between_attempts_are_not_spliced(tmp_path):
    from ringloader import _C
    from ringloader.bench import _ThrottledFiles

    size = 5 << 19
    old, new = os.urandom(size), os.urandom(size)
    path = tmp_path / "a.tar"
    path.write_bytes(old)
    link = _ThrottledFiles(tmp_path, 0.0, 1e9)  # its ETag: the file's mtime and size
    proxy = srv.FaultProxy(link.url)
    # Both pieces break off half-way, and the object is replaced (same size) meanwhile: their
    # retries would bring the rest of the new one under one ETag.
    proxy.faults = {"/a.tar": ["reset", "reset"]}
    proxy.after_reset = lambda _: (path.write_bytes(new), os.utime(path, ns=(1, time.time_ns())))
    try:
        fetch = _C.BackgroundFetch([f"{proxy.url}/a.tar"], str(tmp_path / "cache"), 0,
                                   dict(FAST, max_connections=2), [(size, None)])
        [got] = fetch.wait()
        fetch.close()
    finally:
        proxy.stop()
        link.stop()
    assert got["size"] == size
    assert Path(got["path"]).read_bytes() == new  # whole, after the pieces found the change
    assert "range" not in proxy.gets("/a.tar")[-1]


@needs_nginx
def test_stopping_while_a_range_is_in_flight_returns_promptly(nginx, proxy, shards, tmp_path):
    from torch.utils.data import Subset

    ds = _ranged_behind_proxy(proxy, tmp_path)
    proxy.hold("/train-000001.tar")
    try:
        loader = rl.DataLoader(Subset(ds, [1, 4, 14, 22]), batch_size=2)
        it = iter(loader)
        next(it)
        start = time.monotonic()
        del it, loader  # its readers wait for the held range: stopping must not
        ds.close_downloads()  # the transfer itself stops too
        assert time.monotonic() - start < 2
        assert not list((tmp_path / "cache").glob("*.ranges-*"))
    finally:
        proxy.release("/train-000001.tar")


@needs_nginx
def test_auto_reads_a_sparse_subset_by_range_and_measures_the_link(nginx, shards, tmp_path):
    from torch.utils.data import Subset

    ds = _kept_index_dataset(nginx, tmp_path)  # default remote_options: "auto"
    assert ds._fetcher.range_reads_below == "auto"
    logged = {n: len(_range_bytes(nginx, n)) for n in shards[1]}
    loader = rl.DataLoader(Subset(ds, [5, 17]), batch_size=2)
    assert [y.tolist() for _, y in loader] == [[ds.targets[5], ds.targets[17]]]
    for name in shards[1]:
        new = _range_bytes(nginx, name)[logged[name]:]
        assert len(new) == 1 and new[0][0] == 206  # one member each, never the whole shard
    [link] = loader.stats()["remote_links"]
    assert link["host"] == nginx.url and link["latency_samples"] >= 2
    assert 0 < link["latency_s"] < 5 and link["bytes_per_s"] > 0
    assert f"remote:  {nginx.url}: " in loader.describe()
    assert not any(os.path.exists(p) for p in ds.shard_paths)


@needs_nginx
def test_parquet_files_over_http_read_like_local_ones(tmp_path, unique_tree):
    """``rl.Parquet`` takes http(s)/s3 URLs as WebDataset does (brace patterns, no globs): each
    file is fetched natively into the download cache once, then converted and read as a local
    file; a missing object is a FileNotFoundError naming its URL."""
    import pickle

    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    if srv.OPENSSL is None:
        pytest.skip("openssl is not installed (it makes the test certificate)")
    root = tmp_path / "www"
    root.mkdir()
    samples = rl.ImageFolder(str(unique_tree)).samples[:10]
    for k, part in enumerate((samples[:6], samples[6:])):
        table = pa.table({"image": [{"bytes": Path(p).read_bytes(), "path": None} for p, _ in part],
                          "label": [int(c) for _, c in part]})
        pq.write_table(table, root / f"part-{k}.parquet", row_group_size=4)
    server = srv.Nginx(root, tmp_path / "nginx")
    try:
        downloads = tmp_path / "downloads"
        remote = rl.Parquet(server.url + "/part-{0..1}.parquet", transform=TRANSFORM,
                            cache_dir=tmp_path / "copies", download_dir=downloads)
        local = rl.Parquet([root / "part-0.parquet", root / "part-1.parquet"],
                           transform=TRANSFORM, cache_dir=tmp_path / "local-copies")
        assert remote.files == [server.url + f"/part-{k}.parquet" for k in range(2)]
        assert len(remote) == len(local) == 10
        assert any(f.is_file() for f in downloads.rglob("*"))  # fetched into download_dir
        for (a, la), (b, lb) in zip(rl.DataLoader(remote, batch_size=5),
                                    rl.DataLoader(local, batch_size=5)):
            assert torch.equal(a, b) and torch.equal(la, lb)
        # A pickled copy (a spawned process's) finds the files in the download cache.
        again = pickle.loads(pickle.dumps(remote))
        a, _ = next(iter(rl.DataLoader(again, batch_size=10)))
        b, _ = next(iter(rl.DataLoader(local, batch_size=10)))
        assert torch.equal(a, b)
        with pytest.raises(FileNotFoundError, match=r"part-9\.parquet"):
            rl.Parquet(server.url + "/part-9.parquet", cache_dir=tmp_path / "copies",
                       download_dir=downloads, remote_options=FAST)
        with pytest.raises(ValueError, match="cannot be a glob"):
            rl.Parquet(server.url + "/part-*.parquet", cache_dir=tmp_path / "copies")
    finally:
        server.stop()
