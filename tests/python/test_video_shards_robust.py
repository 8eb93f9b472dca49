"""rl.VideoShards under rl.DataLoader when its shards are not as they should be: a shard rewritten
after the dataset was built raises StaleIndexError naming it (at iter(), and when one of its
samples is read) instead of reading other bytes at the recorded ranges; bad samples (no video
member, a member cut by a truncated shard) fall under on_error as bad clips do, on native clip
batches and on torch's path alike."""

from __future__ import annotations

import os
import shutil
import tarfile
import warnings
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader.sources import video as rv
from ringloader.transforms import clips

from videogen import make_clip

pytestmark = [
    pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg CLI to make videos"),
    pytest.mark.skipif(not rv.video_available()[0], reason="FFmpeg's libraries are not loadable"),
]
v2 = pytest.importorskip("torchvision.transforms.v2")

SAMPLER = clips.random_indices(num_clips=1, num_frames_per_clip=4, num_indices_between_frames=2)
CHAIN = v2.CenterCrop(16)


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> list:
    """Three tiny H.264 clips (32x24, 20 frames, a keyframe every 5), labels 0, 1, 2."""
    top = tmp_path_factory.mktemp("shard_videos")
    paths = []
    for k in range(3):
        path = top / f"v{k}.mp4"
        make_clip(path, 70 * k)
        (top / f"v{k}.cls").write_text(str(k))
        paths.append(path)
    return paths


def write_shard(shard: Path, videos: list, order=(0, 1, 2), label_only: str = "") -> Path:
    """A tar of ``videos`` in ``order`` (video + label each); ``label_only``: first a sample of
    that key with a label and no video."""
    with tarfile.open(shard, "w") as tar:
        if label_only:
            tar.add(videos[0].with_suffix(".cls"), arcname=f"{label_only}.cls")
        for k in order:
            tar.add(videos[k], arcname=videos[k].name)
            tar.add(videos[k].with_suffix(".cls"), arcname=f"{videos[k].stem}.cls")
    return shard


def loader(dataset, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rl.FallbackWarning)
        return rl.DataLoader(dataset, generator=torch.Generator().manual_seed(3), **kwargs)


def python_transform(clip):  # not a v2 step: decoded in torch's worker processes
    return clip[..., :16, :16]


def rewrite(shard: Path, videos: list) -> None:
    """The shard written again with its members in another order (the same size): every
    recorded byte range now names other bytes. Its mtime is set a second later, as a rewrite
    on a file system with coarse timestamps would still show."""
    before = shard.stat()
    write_shard(shard, videos, order=(2, 0, 1))
    assert shard.stat().st_size == before.st_size
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))


@pytest.mark.parametrize("transform", [None, CHAIN, python_transform], ids=["native", "native-v2", "torch"])
def test_a_shard_rewritten_after_the_dataset_was_built_raises_stale_index_at_iter(
        tmp_path: Path, videos: list, transform):
    shard = write_shard(tmp_path / "train-0.tar", videos)
    ds = rl.VideoShards(str(shard), clip=SAMPLER, transform=transform)
    dl = loader(ds, batch_size=3, num_workers=1)
    assert len(list(dl)) == 1  # as built: fine
    rewrite(shard, videos)
    with pytest.raises(rl.StaleIndexError, match=r"VideoShards shard .*train-0.tar .*since the dataset was "
                                                 r"built.*Build the VideoShards again"):
        iter(dl)
    with pytest.raises(rl.StaleIndexError, match="train-0.tar"):
        ds[1]  # a sample of the changed shard read alone
    fresh = rl.VideoShards(str(shard), clip=SAMPLER, transform=transform)  # built again: reads
    assert fresh.targets == [2, 0, 1] and len(list(loader(fresh, batch_size=3))) == 1


@pytest.mark.parametrize("transform", [None, python_transform], ids=["native", "torch"])
def test_a_shard_rewritten_mid_epoch_fails_the_samples_read_after(tmp_path: Path, videos: list, transform):
    shard = write_shard(tmp_path / "train-0.tar", videos)
    ds = rl.VideoShards(str(shard), clip=SAMPLER, transform=transform)
    it = iter(loader(ds, batch_size=1, num_workers=0))
    assert next(it)[1].tolist() == [0]
    rewrite(shard, videos)
    with pytest.raises(rl.StaleIndexError, match="VideoShards shard .*train-0.tar"):
        next(it)


def test_a_member_kept_and_decoded_after_its_shard_changed_is_stale(tmp_path: Path, videos: list):
    shard = write_shard(tmp_path / "kept.tar", videos)
    ref, _ = rl.VideoShards(str(shard), clip=[0, 1])[0]
    assert ref.decode().shape == (2, 3, 24, 32)
    rewrite(shard, videos)
    with pytest.raises(rl.StaleIndexError, match="VideoShards shard .*kept.tar"):
        ref.decode()


class Kept(torch.utils.data.Dataset):
    """A user's Dataset of the (VideoFile, target) pairs a VideoShards gave, kept."""

    def __init__(self, pairs):
        self.pairs = pairs

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        return self.pairs[i]


@pytest.mark.parametrize("workers", [0, 2])
def test_members_kept_in_a_users_dataset_are_stale_on_native_clip_batches(
        tmp_path: Path, videos: list, workers: int):
    """The VideoFile references a VideoShards gave, kept in a Dataset of the user's and batched
    natively (the pool reads their byte ranges itself, never VideoFile.decode): after the
    shard is rewritten their batch raises StaleIndexError naming it, as decode() does, rather
    than decode other bytes at the recorded ranges."""
    shard = write_shard(tmp_path / "kept.tar", videos)
    ds = rl.VideoShards(str(shard), clip=SAMPLER, transform=CHAIN)
    users = Kept([ds[i] for i in range(len(ds))])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # natively batched
        dl = rl.DataLoader(users, batch_size=3, num_workers=workers, on_error="skip")
    assert [t.tolist() for _, t in dl] == [[0, 1, 2]]
    rewrite(shard, videos)
    with pytest.raises(rl.StaleIndexError, match="VideoShards shard .*kept.tar"):
        list(dl)


def test_only_the_changed_shard_of_several_is_stale_for_its_samples(tmp_path: Path, videos: list):
    first = write_shard(tmp_path / "a.tar", videos)
    second = write_shard(tmp_path / "b.tar", videos)
    ds = rl.VideoShards([str(first), str(second)], clip=SAMPLER)
    rewrite(second, videos)
    ref, target = ds[0]  # the unchanged shard's samples read as before
    assert target == 0 and ref.decode(generator=torch.Generator().manual_seed(0)).shape == (1, 4, 3, 24, 32)
    with pytest.raises(rl.StaleIndexError, match="b.tar"):
        ds[3]
    with pytest.raises(rl.StaleIndexError, match="b.tar"):
        ds.check_unchanged()


@pytest.fixture
def damaged(tmp_path: Path, videos: list) -> tuple:
    """Shard a.tar: sample 'nolabel' (a label, no video) then v0, v1, v2; shard b.tar: v0 v1 v2
    cut inside v2.mp4's data."""
    first = write_shard(tmp_path / "a.tar", videos, label_only="novideo")
    whole = write_shard(tmp_path / "whole.tar", videos)
    with tarfile.open(whole) as tar:
        cut = next(m for m in tar.getmembers() if m.name == "v2.mp4")
    data = whole.read_bytes()
    second = tmp_path / "b.tar"
    second.write_bytes(data[: cut.offset_data + cut.size // 2])
    ds = rl.VideoShards([str(first), str(second)], clip=SAMPLER, transform=CHAIN)
    return ds, first, second


def test_bad_video_shard_samples_are_skipped_natively(damaged: tuple):
    ds = damaged[0]
    assert len(ds) == 7 and [s[5] != "" for s in ds.samples].count(True) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # sample 0 is bad: still natively batched, no fallback
        dl = rl.DataLoader(ds, batch_size=4, num_workers=2, on_error="skip")
    assert "native threads" in dl.describe()
    got = [(clip.shape, target.tolist()) for clip, target in dl]
    assert [t for _, t in got] == [[0, 1, 2], [0, 1]]
    assert all(shape[1:] == (1, 4, 3, 16, 16) for shape, _ in got)
    assert dl.stats()["video"]["skipped"] == 2


def test_bad_video_shard_samples_are_replaced_natively(damaged: tuple):
    ds = damaged[0]
    dl = loader(ds, batch_size=4, num_workers=0, on_error="replace")
    batches = [(clip, target) for clip, target in dl]
    assert [tuple(c.shape) for c, _ in batches] == [(4, 1, 4, 3, 16, 16), (3, 1, 4, 3, 16, 16)]
    assert dl.stats()["video"]["replaced"] == 2
    again = [(clip, target) for clip, target in loader(ds, batch_size=4, num_workers=0, on_error="replace")]
    assert all(torch.equal(a, b) and torch.equal(ta, tb) for (a, ta), (b, tb) in zip(batches, again))


def test_bad_video_shard_samples_are_replaced_alike_for_any_thread_count(damaged: tuple):
    """The substitute of a bad sample is drawn from the row's key: the same clips and targets
    whether one or two native threads decode (and whether batches are made ahead)."""
    ds = damaged[0]
    runs = [[(clip, target) for clip, target in loader(ds, batch_size=4, num_workers=w, on_error="replace",
                                                       shuffle=True)] for w in (0, 1, 2)]
    for other in runs[1:]:
        assert len(other) == len(runs[0]) == 2
        assert all(torch.equal(a, b) and torch.equal(ta, tb) for (a, ta), (b, tb) in zip(runs[0], other))


def test_too_many_bad_video_shard_samples_raise_naming_shard_and_member(damaged: tuple):
    """max_skipped_fraction's error lists the clips lost: a sample of a shard that could not be
    read is named by its shard and member (what its own error says), not by its index alone."""
    ds, first, second = damaged
    with pytest.raises(RuntimeError, match=r"skipped 2 of the 7 clips") as raised:
        list(loader(ds, batch_size=4, num_workers=0, on_error="skip", max_skipped_fraction=0.2))
    message = str(raised.value)
    assert f"{first}" in message and "'novideo' has no video member" in message
    assert f"{second}" in message and "v2.mp4" in message


@pytest.mark.parametrize("workers", [0, 2])
def test_bad_video_shard_samples_raise_naming_shard_and_member_natively(damaged: tuple, workers: int):
    ds, first, second = damaged
    dl = loader(ds, batch_size=4, num_workers=workers, on_error="raise")
    it = iter(dl)
    with pytest.raises(ValueError, match=rf"{first}.*sample 'novideo' has no video member"):
        next(it)
    with pytest.raises(ValueError, match=rf"{second}.*truncated: member 'v2.mp4'"):
        next(it)


def test_bad_video_shard_samples_raise_naming_shard_and_member_on_torchs_path(damaged: tuple, tmp_path: Path):
    ds = rl.VideoShards([str(damaged[1]), str(damaged[2])], clip=SAMPLER, transform=python_transform)
    with pytest.raises(ValueError, match=rf"{damaged[1]}.*sample 'novideo' has no video member"):
        next(iter(loader(ds, batch_size=4, num_workers=0)))
    tail = torch.utils.data.Subset(ds, [4, 5, 6])
    with pytest.raises(ValueError, match=rf"{damaged[2]}.*v2.mp4"):
        list(loader(tail, batch_size=3, num_workers=1))


def test_a_rewritten_shard_inside_a_subset_or_concat_is_stale_at_iter(tmp_path: Path, videos: list):
    shard = write_shard(tmp_path / "c.tar", videos)
    ds = rl.VideoShards(str(shard), clip=SAMPLER)
    wrapped = torch.utils.data.ConcatDataset([torch.utils.data.Subset(ds, [2, 0])])
    dl = loader(wrapped, batch_size=2)
    rewrite(shard, videos)
    with pytest.raises(rl.StaleIndexError, match="c.tar"):
        iter(dl)
