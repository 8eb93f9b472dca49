"""rl.VideoShards over remote shards (http://): each shard fetched through rl.WebDataset's cache
(verified, atomic) and its members read in place from the cached copy; the clips equal those of
the same shard read locally (max |diff| 0). A server that fails or cuts the shard gives errors
naming the URL, and an object replaced on the server behind a copy that went through the cache
again is a StaleIndexError naming the URL. Served from memory by tests/python/remote_servers.py's
FaultProxy on 127.0.0.1."""

from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader.sources import video as rv
from ringloader.transforms import clips

from videogen import make_clip

from remote_servers import FaultProxy, MemoryObject, tar_bytes

pytestmark = [
    pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg CLI to make videos"),
    pytest.mark.skipif(not rv.video_available()[0], reason="FFmpeg's libraries are not loadable"),
]
v2 = pytest.importorskip("torchvision.transforms.v2")

SAMPLER = clips.random_indices(num_clips=1, num_frames_per_clip=4, num_indices_between_frames=2)
FAST = {"max_attempts": 1, "connect_timeout_s": 2, "stall_timeout_s": 2}


@pytest.fixture(scope="module")
def shard(tmp_path_factory) -> bytes:
    """A tar of two tiny H.264 clips (32x24, 20 frames) with labels 0 and 1."""
    top = tmp_path_factory.mktemp("remote_videos")
    members = []
    for k in range(2):
        path = top / f"v{k}.mp4"
        make_clip(path, 90 * k)
        members += [(f"v{k}.mp4", path.read_bytes()), (f"v{k}.cls", str(k).encode())]
    return tar_bytes(members)


@pytest.fixture
def proxy():
    server = FaultProxy("http://127.0.0.1:9")  # no upstream: every path is served from memory
    yield server
    server.stop()


def batches(dataset) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # natively batched: no FallbackWarning
        dl = rl.DataLoader(dataset, batch_size=2, num_workers=2, generator=torch.Generator().manual_seed(4))
        return [(clip, target.tolist()) for clip, target in dl]


def test_a_remote_shard_gives_the_clips_of_the_local_file(shard: bytes, proxy, tmp_path: Path):
    local = tmp_path / "videos-0.tar"
    local.write_bytes(shard)
    proxy.serve("/videos-0.tar", MemoryObject([shard], etag=True))
    url = f"{proxy.url}/videos-0.tar"
    remote = rl.VideoShards(url, clip=SAMPLER, transform=v2.CenterCrop(16), cache_dir=str(tmp_path / "cache"))
    here = rl.VideoShards(str(local), clip=SAMPLER, transform=v2.CenterCrop(16))
    assert [s[1:] for s in remote.samples] == [s[1:] for s in here.samples] and remote.targets == [0, 1]
    ref, _ = remote[1]
    assert ref.name == f"{url}:v1.mp4" and ref.path.startswith(str(tmp_path / "cache"))
    got, want = batches(remote), batches(here)
    assert [t for _, t in got] == [t for _, t in want] == [[0, 1]]
    assert got[0][0].shape == (2, 1, 4, 3, 16, 16)
    assert (got[0][0].int() - want[0][0].int()).abs().max().item() == 0
    assert len(proxy.gets("/videos-0.tar")) == 1  # one download: the epoch reads the cached copy
    # A second dataset over the same URL finds the shard in the cache.
    again = rl.VideoShards(url, clip=SAMPLER, transform=v2.CenterCrop(16), cache_dir=str(tmp_path / "cache"))
    assert len(again) == 2 and len(proxy.gets("/videos-0.tar")) == 1


def test_a_failing_server_is_an_error_naming_the_url(shard: bytes, proxy, tmp_path: Path):
    proxy.serve("/down.tar", MemoryObject([shard]))
    proxy.always["/down.tar"] = "503"
    url = f"{proxy.url}/down.tar"
    with pytest.raises(ConnectionError, match="VideoShards.*" + url.replace(".", r"\.")):
        rl.VideoShards(url, cache_dir=str(tmp_path / "cache"), remote_options=FAST)
    proxy.always["/private.tar"] = "403"
    with pytest.raises(PermissionError, match="VideoShards shard.*" + f"{proxy.url}/private.tar"):
        rl.VideoShards(f"{proxy.url}/private.tar", cache_dir=str(tmp_path / "cache"), remote_options=FAST)
    # A pipe: shard whose command fetches it fails as the command does: its status and stderr.
    fetch = f"import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen('{url}').read())"
    with pytest.raises(RuntimeError, match=r"(?s)VideoShards: the command of 'pipe:.*down\.tar.*exited with "
                                           r"status 1: .*HTTP Error 503"):
        rl.VideoShards(f'pipe:{sys.executable} -c "{fetch}"', cache_dir=str(tmp_path / "cache"))


def test_a_server_that_cuts_the_shard_gives_sample_errors_naming_the_url(shard: bytes, proxy, tmp_path: Path):
    proxy.serve("/cut.tar", MemoryObject([shard]))
    proxy.always["/cut.tar"] = "short"  # half the shard, and a Content-Length that says so
    url = f"{proxy.url}/cut.tar"
    ds = rl.VideoShards(url, clip=SAMPLER, cache_dir=str(tmp_path / "cache"), remote_options=FAST)
    bad = [i for i, s in enumerate(ds.samples) if s[5]]
    assert bad, ds.samples  # the cut end is a sample that fails when read
    with pytest.raises(ValueError, match=url.replace(".", r"\.")) as info:
        ds[bad[-1]]
    assert str(tmp_path / "cache") not in str(info.value)  # the URL, not the cached copy


def test_an_object_replaced_behind_a_copy_fetched_again_is_stale(shard: bytes, proxy, tmp_path: Path):
    # The same members in another order: the same size, other bytes at every recorded range.
    members = []
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(shard)) as tar:
        for info in tar.getmembers():
            members.append((info.name, tar.extractfile(info).read()))
    other = tar_bytes(members[2:] + members[:2])
    assert len(other) == len(shard) and other != shard
    obj = proxy.serve("/videos-0.tar", MemoryObject([shard, other], etag=True))
    url = f"{proxy.url}/videos-0.tar"
    cache = tmp_path / "cache"
    ds = rl.VideoShards(url, clip=SAMPLER, cache_dir=str(cache))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dl = rl.DataLoader(ds, batch_size=2, num_workers=0)
    assert len(list(dl)) == 1
    # The copy rewritten in place (not the file this process verified): checked again, the
    # server's object unchanged, so it is downloaded again and the clips go on.
    copy = Path(ds.shard_paths[0])
    copy.write_bytes(other)
    assert [t.tolist() for _, t in dl] == [[0, 1]]
    assert copy.read_bytes() == shard and len(proxy.gets("/videos-0.tar")) == 2
    # Replaced on the server, and the copy evicted: fetched again, it is another object.
    obj.current = 1
    copy.unlink()
    with pytest.raises(rl.StaleIndexError, match="VideoShards shard " + url.replace(".", r"\.")):
        iter(dl)
    with pytest.raises(rl.StaleIndexError, match=url.replace(".", r"\.")):
        ds[0]
