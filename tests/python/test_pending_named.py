"""A shard that trickles in names itself: while the loader waits for it, ``describe()`` and the
``LoaderTimeoutError`` that ``timeout=`` raises give its URL, the bytes landed of the bytes
expected, the rate now and how long ago its download started (a FaultProxy trickles it at 16
bytes/s, with the minimum rate off so that the download neither fails nor lands in the test)."""

from __future__ import annotations

import re
import time

import pytest

import ringloader as rl
from ringloader import _C
from ringloader import transforms as T

import remote_servers as srv

# Off: the shard keeps trickling however slow it is (the test stops the loader instead).
SLOW_OK = {"max_attempts": 1, "min_rate_bytes_per_s": 0, "download_deadline_s": 0}


@pytest.fixture
def trickling_shard(unique_tree, tmp_path):
    """Two 4-sample shards behind a FaultProxy, indexed while honest; then train-1 trickles."""
    proxy = srv.proxy_of_two_shards(rl.ImageFolder(str(unique_tree)).samples,
                                    hold_s=15.0)  # the trickle's end, should the loader not hang up
    url, index = f"{proxy.url}/train-{{0..1}}.tar", str(tmp_path / "index")
    rl.WebDataset(url, cache_dir=str(tmp_path / "indexed"), index_cache=index)  # keeps the index
    proxy.always = {"/train-1.tar": "trickle"}
    ds = rl.WebDataset(url, transform=T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()]),
                       cache_dir=str(tmp_path / "cache"), index_cache=index, remote_options=SLOW_OK)
    try:
        yield ds, f"{proxy.url}/train-1.tar", len(proxy.objects["/train-1.tar"].versions[0])
    finally:
        proxy.stop()


def _named(text: str, url: str, size: int):
    """(bytes landed, bytes/s now, seconds since it started) as `text` names `url`'s download."""
    got = re.search(rf"{re.escape(url)}: (\d+) of {size} bytes, (\d+) bytes/s now, "
                    rf"started ([\d.]+) s ago", text)
    return None if got is None else (int(got[1]), int(got[2]), float(got[3]))


def test_describe_and_the_timeout_error_name_the_trickling_download(trickling_shard):
    ds, url, size = trickling_shard
    loader = rl.DataLoader(ds, batch_size=4, timeout=2)
    t0 = time.monotonic()
    it = iter(loader)
    try:
        # While the epoch waits for the shard, describe() names it (once a second measured it).
        named, text = None, ""
        while named is None and time.monotonic() - t0 < 8:
            time.sleep(0.1)
            text = loader.describe()
            named = _named(text, url, size)
        assert named is not None, text
        landed, rate, age = named
        assert 0 < landed < size and 0 < rate < 100 and age >= 1, text  # 16 bytes/s
        assert "  remote:  downloads in flight (" in text

        with pytest.raises(rl.LoaderTimeoutError) as error:
            for _ in it:  # train-0's batch may come first; train-1's cannot
                pass
        message = str(error.value)
        assert "DataLoader timed out after 2" in message
        named = _named(message, url, size)
        assert named is not None, message
        landed, rate, age = named
        assert 0 < landed < size and 0 < rate < 100 and age >= 2, message
    finally:
        del it
        ds.close_downloads()  # the epoch's downloads outlive its iterator: they are the dataset's
    # Cancelled, the download is named no more.
    assert url not in _C.downloads_in_flight()
    assert "downloads in flight" not in loader.describe()
    assert time.monotonic() - t0 < 15

