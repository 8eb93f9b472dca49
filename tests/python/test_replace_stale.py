"""on_error="replace" never passes over a stale shard: a replacement candidate whose shard was
rewritten since it was indexed raises StaleIndexError naming that shard, rather than being
skipped as a bad sample (another candidate standing in silently, or the failed sample's own
error hiding why), on native clip batches (rl.VideoShards) and native images (rl.WebDataset
local shards)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import warnings
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader import transforms as T

from imagegen import jpeg_bytes


def _later(path: Path, before: os.stat_result) -> None:
    """mtime a second later, as a rewrite on a file system with coarse timestamps still shows."""
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))


# ---- native clip batches ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> list:
    from ringloader.sources import video as rv

    if shutil.which("ffmpeg") is None or not rv.video_available()[0]:
        pytest.skip("needs the ffmpeg CLI and FFmpeg's libraries")
    top = tmp_path_factory.mktemp("replace_stale_videos")
    paths = []
    for k in range(3):
        path = top / f"v{k}.mp4"
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                        f"testsrc2=size=32x24:rate=10:duration=1,hue=h={70 * k}", "-pix_fmt", "yuv420p",
                        "-c:v", "libx264", "-g", "5", str(path)], check=True)
        (top / f"v{k}.cls").write_text(str(k))
        paths.append(path)
    return paths


def _video_shard(shard: Path, videos: list, order=(0, 1, 2), label_only: bool = False) -> Path:
    with tarfile.open(shard, "w") as tar:
        if label_only:  # a sample with a label and no video: a bad sample
            tar.add(videos[0].with_suffix(".cls"), arcname="novideo.cls")
        for k in order:
            tar.add(videos[k], arcname=videos[k].name)
            tar.add(videos[k].with_suffix(".cls"), arcname=f"{videos[k].stem}.cls")
    return shard


@pytest.mark.parametrize("batch", [1, 2])
def test_a_stale_candidate_of_a_clip_replacement_raises_naming_its_shard(tmp_path: Path, videos: list,
                                                                         batch: int):
    """Shard a: a sample with no video (bad) and a good one; shard b: three good ones, rewritten
    after iter() (members in another order, the same size). The bad sample's substitutes are
    drawn from b: StaleIndexError naming b.tar, not the bad sample's own error (nor a substitute
    from elsewhere). batch=1: every clip of the batch failed (the shape comes from a substitute)."""
    from ringloader.transforms import clips

    a = _video_shard(tmp_path / "a.tar", videos, order=(1,), label_only=True)
    b = _video_shard(tmp_path / "b.tar", videos)
    ds = rl.VideoShards([str(a), str(b)], clip=clips.random_indices(num_frames_per_clip=2,
                                                                   num_indices_between_frames=2))
    assert ds.targets[1:] == [1, 0, 1, 2]  # the bad sample is 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # natively batched
        dl = rl.DataLoader(ds, batch_size=batch, sampler=[0, 1][:batch], on_error="replace",
                           num_workers=0, generator=torch.Generator().manual_seed(0))
    assert [t.tolist() for _, t in dl][0][1:] == [1][: batch - 1]  # as built: replaced, delivered
    it = iter(dl)
    before = b.stat()
    _video_shard(b, videos, order=(2, 0, 1))
    assert b.stat().st_size == before.st_size
    _later(b, before)
    with pytest.raises(rl.StaleIndexError, match="b.tar"):
        next(it)


# ---- native images: rl.WebDataset local shards ---------------------------------------------------

def _image_shard(path: Path, images: list, label: int, bad: tuple = ()) -> Path:
    with tarfile.open(path, "w") as tar:
        for i, data in enumerate(images):
            for name, payload in ((f"s{i:03d}.jpg", b"not a jpeg" * 8 if i in bad else data),
                                  (f"s{i:03d}.cls", str(label).encode())):
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(payload), 0
                tar.addfile(info, io.BytesIO(payload))
    return path


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stale_local_shard_met_by_a_bad_sample_raises_naming_it(tmp_path: Path, monkeypatch, workers):
    """Shard a: one bad sample and a good one; shard b: good ones, rewritten right after iter()'s
    check (its members in another order, the same size: every recorded range names other bytes).
    The bad sample's substitutes come from b: StaleIndexError naming b.tar, never the rows of
    its old index read from new bytes, nor another substitute standing in silently."""
    images = [jpeg_bytes(24, 20, seed=k) for k in range(6)]
    a = _image_shard(tmp_path / "a.tar", images[:2], 0, bad=(0,))
    b = _image_shard(tmp_path / "b.tar", images[2:], 1)
    ds = rl.WebDataset([str(a), str(b)], transform=T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()]),
                       index_cache=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dl = rl.DataLoader(ds, batch_size=1, sampler=[0], on_error="replace", num_workers=workers)
    assert dl.native
    before = b.stat()
    _image_shard(b, images[2:][::-1], 1)
    assert b.stat().st_size == before.st_size
    _later(b, before)
    monkeypatch.setattr(type(ds), "check_unchanged", lambda self: None)  # rewritten just after it
    dl = rl.DataLoader(ds, batch_size=1, sampler=[0, 0, 1], on_error="replace", num_workers=workers)
    it = iter(dl)
    with pytest.raises(rl.StaleIndexError, match="b.tar"):
        next(it)
    with pytest.raises(rl.StaleIndexError, match="b.tar"):  # and again: the epoch never goes on
        next(it)
