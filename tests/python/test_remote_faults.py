"""The remote downloader against servers that check and misbehave (tests/python/remote_servers.py):
S3 requests signed as the AWS SDKs sign them, accepted by moto's server with signatures checked
(long-term keys, session tokens, a region other than us-east-1, path-style endpoints); ranged and
resumed downloads pinned to one version of an object that has no ETag; a server that trickles
bytes fails its download by the minimum rate or the deadline instead of holding it for ever."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ringloader import _C
from ringloader.core import _remote

import remote_servers as srv

FAST = {"max_attempts": 3, "backoff_initial_s": 0.01, "backoff_max_s": 0.05}
SMALL = os.urandom(100_000)
BIG = os.urandom(5 << 19)  # two pieces of over 1 MiB with two connections


@pytest.fixture(scope="module")
def moto():
    pytest.importorskip("moto", reason="moto[server] is not installed (requirements-dev.txt)")
    pytest.importorskip("boto3", reason="boto3 (moto's dependency) is not installed")
    server = srv.MotoAuth({"bkt": {"data/small.bin": SMALL, "data/big.bin": BIG}})
    yield server
    server.stop()


def _s3(moto, region="eu-west-3", **creds):
    settings = dict(FAST, endpoint=moto.url, region=region, access_key=moto.access_key,
                    secret_key=moto.secret_key)
    settings.update(creds)
    return settings


def test_the_server_checks_signatures(moto):
    # What the tests below rely on: boto3 is let in, a wrong secret is not.
    assert moto.boto3_get("bkt", "data/small.bin", region="eu-west-3") == SMALL
    assert moto.boto3_get("bkt", "data/small.bin", **moto.session) == SMALL
    import botocore.exceptions

    with pytest.raises(botocore.exceptions.ClientError, match="SignatureDoesNotMatch"):
        moto.boto3_get("bkt", "data/small.bin", secret_key="wrong")


@pytest.mark.parametrize("region", ["eu-west-3", "us-east-1"])
def test_long_term_keys_sign_whole_downloads_path_style(moto, tmp_path, region):
    [got] = _C.fetch_shards(["s3://bkt/data/small.bin"], str(tmp_path), 0, _s3(moto, region))
    assert "error" not in got, got
    assert Path(got["path"]).read_bytes() == SMALL


def test_session_tokens_sign_ranged_pieces(moto, tmp_path):
    # A shard of known size comes in two signed Range requests; the temporary credentials sign
    # with x-amz-security-token.
    settings = _s3(moto, **moto.session, max_connections=2)
    fetch = _C.BackgroundFetch(["s3://bkt/data/big.bin"], str(tmp_path), 0, settings,
                               [(len(BIG), None)])
    [got] = fetch.wait()
    fetch.close()
    assert "error" not in got, got
    assert got["attempts"] == 2  # the two pieces, each accepted at once
    assert Path(got["path"]).read_bytes() == BIG


def test_signed_requests_through_a_proxy_carry_what_the_sdks_sign(moto, tmp_path):
    proxy = srv.FaultProxy(moto.url)
    proxy.forward_host = True  # what was signed
    try:
        settings = dict(_s3(moto, **moto.session), endpoint=proxy.url, max_connections=2)
        fetch = _C.BackgroundFetch(["s3://bkt/data/big.bin"], str(tmp_path), 0, settings,
                                   [(len(BIG), None)])
        [got] = fetch.wait()
        fetch.close()
        assert "error" not in got, got
        for request in proxy.gets("/bkt/data/big.bin"):
            auth = request["authorization"]
            assert auth.startswith(f"AWS4-HMAC-SHA256 Credential={moto.session['access_key']}/")
            assert "/eu-west-3/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;" \
                   "x-amz-date;x-amz-security-token, Signature=" in auth
            assert request["x-amz-content-sha256"] == (
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
            assert request["x-amz-security-token"] == moto.session["session_token"]
    finally:
        proxy.stop()


def test_a_wrong_secret_is_permission_denied_naming_the_url(moto, tmp_path):
    [got] = _C.fetch_shards(["s3://bkt/data/small.bin"], str(tmp_path), 0,
                            _s3(moto, secret_key="not-the-secret"))
    assert got["code"] == "permission_denied"
    assert "s3://bkt/data/small.bin: HTTP 403 Forbidden" in got["error"]
    assert "SignatureDoesNotMatch" in got["error"]
    with pytest.raises(PermissionError, match=r"s3://bkt/data/small\.bin: HTTP 403"):
        _remote.raise_if_fatal(got)


def test_addressing_style_path_virtual_and_auto(tmp_path):
    def host(url, **settings):
        return _C.link_estimate(url, settings)["host"]

    custom = {"endpoint": "http://127.0.0.1:9"}
    assert host("s3://bkt/k.tar", **custom) == "http://127.0.0.1:9"
    assert host("s3://bkt/k.tar", **custom, s3_addressing_style="auto") == "http://127.0.0.1:9"
    assert host("s3://bkt/k.tar", **custom, s3_addressing_style="virtual") == "http://bkt.127.0.0.1:9"
    aws = {"region": "eu-west-1", "s3_addressing_style": "auto"}
    assert host("s3://bkt/k.tar", **aws) == "https://bkt.s3.eu-west-1.amazonaws.com"
    assert host("s3://my.bucket/k.tar", **aws) == "https://s3.eu-west-1.amazonaws.com"
    assert host("s3://bkt/k.tar", region="eu-west-1", s3_addressing_style="path") == \
        "https://s3.eu-west-1.amazonaws.com"
    # As botocore reads it: the profile's nested `s3 =` block of ~/.aws/config.
    (tmp_path / "config").write_text("[default]\nregion = eu-west-1\ns3 =\n"
                                     "    addressing_style = path\n")
    env = {"AWS_CONFIG_FILE": str(tmp_path / "config"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    assert _remote.s3_addressing_style(env) == "path"
    (tmp_path / "config").write_text("[default]\nregion = eu-west-1\n")
    assert _remote.s3_addressing_style(env) == "auto"
    (tmp_path / "config").write_text("[default]\ns3 =\n    addressing_style = sideways\n")
    with pytest.raises(ValueError, match="addressing_style"):
        _remote.s3_addressing_style(env)
    assert _remote.check_remote_options({"s3_addressing_style": "virtual"}) == \
        {"s3_addressing_style": "virtual"}
    with pytest.raises(ValueError, match="s3_addressing_style"):
        _remote.check_remote_options({"s3_addressing_style": "up"})


# ---- one version per download ------------------------------------------------------------------


@pytest.mark.parametrize("preconditions", [True, False], ids=["412", "last-modified-differs"])
def test_pieces_of_an_object_without_etag_replaced_mid_download_are_one_version(tmp_path,
                                                                                preconditions):
    old, new = os.urandom(len(BIG)), os.urandom(len(BIG))
    proxy = srv.FaultProxy("http://127.0.0.1:9")
    # No ETag; the object is replaced (same size) the moment the first piece was answered. The
    # other piece's first request gets a 503 late, so its retry goes out once the first piece pinned
    # the version: If-Unmodified-Since, which a server answers with 412 (or, one that ignores
    # it, with the new version's Last-Modified).
    obj = proxy.serve("/a.tar", srv.MemoryObject([old, new], etag=False,
                                                 preconditions=preconditions,
                                                 replace_after_first_range=True))
    proxy.faults = {"/a.tar": ["late503"]}
    try:
        fetch = _C.BackgroundFetch([f"{proxy.url}/a.tar"], str(tmp_path / "cache"), 0,
                                   dict(FAST, max_connections=2), [(len(BIG), None)])
        [got] = fetch.wait()
        fetch.close()
        requests = proxy.gets("/a.tar")
    finally:
        proxy.stop()
    assert "error" not in got, got
    data = Path(got["path"]).read_bytes()
    assert data == new, (f"{sum(a != b for a, b in zip(data, new))} bytes differ from the new "
                         f"version, {sum(a != b for a, b in zip(data, old))} from the old")
    retried = requests[2]  # the 503, the first piece, then the retry
    assert retried["if-unmodified-since"] == obj.last_modified(0)
    assert obj.answered[-1] == (200, 1)  # then the new version, whole
    assert "range" not in requests[-1]


def test_a_resumed_download_without_etag_restarts_when_the_object_changed(tmp_path):
    old, new = os.urandom(200_000), os.urandom(200_000)
    proxy = srv.FaultProxy("http://127.0.0.1:9")
    obj = proxy.serve("/a.tar", srv.MemoryObject([old, new], etag=False))
    proxy.faults = {"/a.tar": ["reset"]}

    def replace(_path):
        obj.current = 1

    proxy.after_reset = replace
    try:
        [got] = _C.fetch_shards([f"{proxy.url}/a.tar"], str(tmp_path), 0, FAST)
        requests = proxy.gets("/a.tar")
    finally:
        proxy.stop()
    assert "error" not in got, got
    assert Path(got["path"]).read_bytes() == new
    # The resume asked for the rest only if the object was still the Last-Modified it began with.
    assert requests[1]["range"].startswith("bytes=") and \
        requests[1]["if-range"] == obj.last_modified(0)
    assert obj.answered[-1] == (200, 1)


# ---- trickles --------------------------------------------------------------------------------


@pytest.fixture
def trickle(tmp_path):
    proxy = srv.FaultProxy("http://127.0.0.1:9")
    proxy.serve("/slow.tar", srv.MemoryObject([os.urandom(4096)]))
    proxy.always = {"/slow.tar": "trickle"}  # 16 bytes/s: 256 s for the object
    proxy.hold_s = 10.0
    yield proxy
    proxy.stop()


def test_a_trickle_under_the_minimum_rate_is_retried_then_fails_naming_url_and_rate(trickle,
                                                                                     tmp_path):
    url = f"{trickle.url}/slow.tar"
    settings = dict(FAST, max_attempts=2, min_rate_bytes_per_s=1000, min_rate_window_s=1.0)
    t0 = time.monotonic()
    [got] = _C.fetch_shards([url], str(tmp_path), 0, settings)
    took = time.monotonic() - t0
    assert took < 8, took
    assert got["code"] == "unavailable"
    assert url in got["error"] and "too slow" in got["error"]
    assert "bytes/s, under min_rate_bytes_per_s=1000" in got["error"]
    assert "gave up after 2 attempts" in got["error"]
    assert len(trickle.gets("/slow.tar")) == 2


def test_a_download_past_its_deadline_fails_naming_the_url(trickle, tmp_path):
    url = f"{trickle.url}/slow.tar"
    settings = dict(FAST, min_rate_bytes_per_s=0, download_deadline_s=1.5)
    t0 = time.monotonic()
    [got] = _C.fetch_shards([url], str(tmp_path), 0, settings)
    took = time.monotonic() - t0
    assert took < 6, took
    assert got["code"] == "deadline_exceeded"
    assert url in got["error"] and "download_deadline_s=1.5" in got["error"]


def test_rate_and_deadline_options_are_checked():
    ok = {"min_rate_bytes_per_s": 0, "min_rate_window_s": 5, "download_deadline_s": 0}
    assert _remote.check_remote_options(ok) == {"min_rate_bytes_per_s": 0,
                                                "min_rate_window_s": 5.0,
                                                "download_deadline_s": 0.0}
    for bad in ({"min_rate_bytes_per_s": -1}, {"min_rate_bytes_per_s": 1.5},
                {"min_rate_window_s": 0}, {"download_deadline_s": -2}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            _remote.check_remote_options(bad)


def test_a_trickling_shard_fails_its_samples_naming_the_url_and_the_rate(unique_tree, tmp_path):
    import ringloader as rl
    from ringloader import transforms as T

    proxy = srv.proxy_of_two_shards(rl.ImageFolder(str(unique_tree)).samples, hold_s=10.0)
    url, index = f"{proxy.url}/train-{{0..1}}.tar", str(tmp_path / "index")
    try:
        rl.WebDataset(url, cache_dir=str(tmp_path / "c1"), index_cache=index)  # keeps the index
        proxy.always = {"/train-1.tar": "trickle"}
        options = dict(FAST, max_attempts=2, min_rate_bytes_per_s=1000, min_rate_window_s=1.0)
        ds = rl.WebDataset(url, transform=T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()]),
                           cache_dir=str(tmp_path / "c2"), index_cache=index,
                           remote_options=options)
        t0 = time.monotonic()
        with pytest.raises(rl.SampleError, match=rf"{proxy.url}/train-1\.tar.*too slow.*"
                           r"bytes/s, under min_rate_bytes_per_s=1000"):
            for _ in rl.DataLoader(ds, batch_size=4):
                pass
        assert time.monotonic() - t0 < 10
    finally:
        proxy.stop()
