"""Leaves a clip's drawn frames decide (``rl.ClipIndices``, ``rl.ClipTimes``, ``rl.PerFrame``) and
``rl.Joint`` with a video: one draw per reference shared by its leaves, per-frame boxes moved
with the clip's one geometric draw as v2 moves them, the same values natively and in torch's
worker processes."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

import ringloader as rl
from ringloader import clips

from videogen import NEEDS_VIDEO, make_clip, resized_clip

pytestmark = NEEDS_VIDEO

# A 32x24 clip of 20 frames at 10 fps (make_clip), one box per frame that moves with the frame.
FRAMES = 20


def _boxes() -> tv_tensors.BoundingBoxes:
    rows = [[k, k / 2, k + 8.0, k / 2 + 10.0] for k in range(FRAMES)]
    return tv_tensors.BoundingBoxes(torch.tensor(rows), format="XYXY", canvas_size=(24, 32))


@pytest.fixture(scope="module")
def clip_path(tmp_path_factory) -> Path:
    return make_clip(tmp_path_factory.mktemp("leaves") / "clip.mp4", hue=40)


def test_indices_and_times_are_the_frames_drawn_and_torchcodecs_pts(clip_path: Path):
    torchcodec = pytest.importorskip("torchcodec.decoders")
    sampler = clips.random_indices(num_clips=2, num_frames_per_clip=3, num_indices_between_frames=2)
    video = rl.VideoFile(clip_path, clip=sampler)
    clip, frames, times = rl.materialize((video, rl.ClipIndices(video), rl.ClipTimes(video)),
                                         torch.Generator().manual_seed(7))
    drawn = sampler.frame_indices(video.metadata.clip_meta(), torch.Generator().manual_seed(7))
    assert frames.dtype == torch.int64 and frames.tolist() == [list(r) for r in drawn]
    assert torch.equal(clip, video.decode(frames.tolist()))  # the frames of the leaf are the clip's
    theirs = torchcodec.VideoDecoder(str(clip_path)).get_frames_at(frames.flatten().tolist())
    assert times.dtype == torch.float64 and torch.equal(times.flatten(), theirs.pts_seconds.double())


def test_one_draw_per_reference_whatever_the_order_of_its_leaves(clip_path: Path):
    video = rl.VideoFile(clip_path, clip=clips.random_indices(num_frames_per_clip=4))
    first = rl.materialize((rl.ClipIndices(video), video, rl.ClipIndices(video)),
                           torch.Generator().manual_seed(3))
    second = rl.materialize((video, rl.ClipIndices(video)), torch.Generator().manual_seed(3))
    assert torch.equal(first[0], first[2]) and torch.equal(first[0], second[1])
    assert torch.equal(first[1], second[0])
    sampler = clips.random_indices(num_clips=3, num_frames_per_clip=2)
    video, other = (rl.VideoFile(clip_path, clip=sampler) for _ in range(2))
    a, b = rl.materialize((rl.ClipIndices(video), rl.ClipIndices(other)),
                          torch.Generator().manual_seed(3))
    draws = torch.Generator().manual_seed(3)  # each reference its own draw, in order
    meta = video.metadata.clip_meta()
    assert a.tolist() == sampler.frame_indices(meta, draws) and b.tolist() == sampler.frame_indices(meta, draws)


def test_per_frame_takes_lists_mappings_tensors_and_tv_tensors(clip_path: Path):
    video = rl.VideoFile(clip_path, clip=[3, 0, -1])
    boxes = _boxes()
    listed, mapped, tensor, boxed = rl.materialize((
        rl.PerFrame(video, [f"f{k}" for k in range(FRAMES)]),
        rl.PerFrame(video, {k: k * 10 for k in range(FRAMES)}),
        rl.PerFrame(video, torch.arange(FRAMES * 2).view(FRAMES, 2)),
        rl.PerFrame(video, boxes)))
    assert listed == ["f3", "f0", f"f{FRAMES - 1}"] and mapped == [30, 0, 10 * (FRAMES - 1)]
    assert tensor.tolist() == [[6, 7], [0, 1], [2 * FRAMES - 2, 2 * FRAMES - 1]]
    assert isinstance(boxed, tv_tensors.BoundingBoxes) and boxed.canvas_size == (24, 32)
    assert torch.equal(boxed.as_subclass(torch.Tensor), boxes[[3, 0, FRAMES - 1]].as_subclass(torch.Tensor))
    several = rl.VideoFile(clip_path, clip=[[1, 2], [5, 6]])
    rows = rl.materialize(rl.PerFrame(several, boxes))
    assert [r.shape for r in rows] == [(2, 4), (2, 4)] and isinstance(rows[1], tv_tensors.BoundingBoxes)


@pytest.mark.parametrize("seed", range(6))
def test_a_joint_with_a_video_equals_v2_on_the_decoded_clip(clip_path: Path, seed: int):
    transform = v2.Compose([v2.RandomResizedCrop(16, scale=(0.3, 1.0)), v2.RandomHorizontalFlip(),
                            v2.ToDtype(torch.float32, scale=True)])
    sampler = clips.random_indices(num_frames_per_clip=5)
    video = rl.VideoFile(clip_path, clip=sampler)
    boxes = _boxes()
    one_each = [tv_tensors.BoundingBoxes(b[None], format="XYXY", canvas_size=(24, 32)) for b in boxes]
    sample = rl.Joint(transform, (video, {"boxes": rl.PerFrame(video, boxes),
                                          "each": rl.PerFrame(video, one_each),
                                          "frames": rl.ClipIndices(video), "label": 4}))
    torch.manual_seed(seed)
    clip, target = rl.materialize(sample, torch.Generator().manual_seed(seed))
    rows = sampler.frame_indices(video.metadata.clip_meta(), torch.Generator().manual_seed(seed))
    torch.manual_seed(seed)
    want_clip, want = transform((tv_tensors.Video(video.decode(rows)),
                                 {"boxes": [tv_tensors.wrap(boxes[list(rows[0])], like=boxes)], "each": [[one_each[i] for i in rows[0]]]}))
    assert isinstance(clip, tv_tensors.Video) and clip.shape == (1, 5, 3, 16, 16)
    assert (clip - want_clip).abs().max().item() == 0  # max |diff| 0
    assert torch.equal(target["boxes"][0], want["boxes"][0])
    assert all(torch.equal(a, b) for a, b in zip(target["each"][0], want["each"][0]))
    assert target["frames"].tolist() == [list(rows[0])] and target["label"] == 4


class _JointClips(torch.utils.data.Dataset):
    """Joint samples: a clip flipped (p=1) with its per-frame boxes and the frames it holds;
    ``python``: a Python step after the flip, which keeps the Joint on torch's workers."""

    def __init__(self, path: Path, python: bool = False):
        self.path, self.python = path, python

    def __len__(self) -> int:
        return 5

    def __getitem__(self, i: int):
        video = rl.VideoFile(self.path, clip=clips.random_indices(num_frames_per_clip=3))
        flip = v2.RandomHorizontalFlip(p=1.0)
        return rl.Joint(v2.Compose([flip, v2.Lambda(lambda x: x)]) if self.python else flip,
                        (video, {"boxes": rl.PerFrame(video, _boxes()), "frames": rl.ClipIndices(video),
                                 "label": i}))


def _load(dataset, workers: int, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rl.FallbackWarning)
        loader = rl.DataLoader(dataset, batch_size=2, num_workers=workers,
                               generator=torch.Generator().manual_seed(11), **kw)
        return list(loader), loader


@pytest.mark.parametrize("python", [False, True])
def test_joint_clips_under_the_dataloader_are_keyed_and_the_boxes_follow_them(clip_path: Path, python: bool):
    """A flip the native clip chain runs (natively), or the same flip with a Python step after
    it (torch's workers, with one FallbackWarning): keyed, and the boxes follow the frames."""
    dataset = _JointClips(clip_path, python)
    if python:
        with pytest.warns(rl.FallbackWarning, match="video"):
            rl.DataLoader(dataset, batch_size=2, collate_fn=list)
    alone, loader = _load(dataset, 0, collate_fn=list)
    assert ("generic path" if python else "native clip batches") in loader.describe()
    pooled, _ = _load(dataset, 2, collate_fn=list)
    boxes = _boxes()
    for batch_a, batch_b in zip(alone, pooled):
        for (clip, target), (clip_b, target_b) in zip(batch_a, batch_b):
            assert torch.equal(clip, clip_b) and torch.equal(target["frames"], target_b["frames"])
            rows = target["frames"][0].tolist()
            assert torch.equal(clip[0], rl.VideoFile(clip_path).decode(rows).flip(-1))
            flipped = v2.functional.horizontal_flip(tv_tensors.wrap(boxes[rows], like=boxes))
            assert torch.equal(target["boxes"][0].as_subclass(torch.Tensor), flipped.as_subclass(torch.Tensor))


class _PairClips(torch.utils.data.Dataset):
    """(VideoFile, target) samples whose targets hold leaves of the video; ``python`` gives the
    same resize as a Python callable, which keeps the clips on torch's worker processes."""

    def __init__(self, paths, python: bool = False, values: int = FRAMES):
        self.paths, self.python, self.values = paths, python, values

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        video = resized_clip(self.paths[i], self.python)
        return video, {"label": i, "frames": rl.ClipIndices(video), "times": rl.ClipTimes(video),
                       "seen": rl.PerFrame(video, torch.arange(self.values))}


def test_native_clip_batches_fill_the_leaves_as_torchs_workers(clip_path: Path):
    paths = [clip_path] * 5
    native, loader = _load(_PairClips(paths), 2)
    assert "native clip batches" in loader.describe()
    workers, loader = _load(_PairClips(paths, python=True), 2)
    assert "generic path" in loader.describe()
    for (clips_a, target_a), (clips_b, target_b) in zip(native, workers):
        assert torch.equal(clips_a, clips_b)
        for key in ("label", "frames", "times", "seen"):
            assert torch.equal(target_a[key], target_b[key]), key
        assert torch.equal(target_a["frames"], target_a["seen"])


def test_a_replaced_clip_gets_its_substitutes_leaves(tmp_path: Path, clip_path: Path):
    paths = [make_clip(tmp_path / f"{k}.mp4", hue=50 * k) for k in range(4)]
    paths[1].write_bytes(paths[1].read_bytes()[:300])  # cut: its sample's error
    batches, _ = _load(_PairClips(paths), 2, on_error="replace")
    rows = [(clip, {k: v[b] for k, v in target.items()})
            for clip_batch, target in batches for b, clip in enumerate(clip_batch)]
    assert len(rows) == 4 and 1 not in [int(t["label"]) for _, t in rows]
    for clip, target in rows:  # the clip is the frames its leaves name, of its own video
        frames = target["frames"][0].tolist()
        decoded = v2.Resize(12)(rl.VideoFile(paths[int(target["label"])]).decode(frames))
        assert torch.equal(clip[0], decoded) and target["seen"][0].tolist() == frames


def test_bad_leaves_are_named_errors(clip_path: Path, tmp_path: Path):
    video = rl.VideoFile(clip_path, clip=[2, 15])
    with pytest.raises(IndexError, match=r"clip\.mp4.*frame 15"):
        rl.materialize(rl.PerFrame(video, list(range(10))))
    with pytest.raises(IndexError, match=r"clip\.mp4.*frame 15"):
        rl.materialize(rl.PerFrame(video, {2: "a"}))
    with pytest.raises(IndexError, match=r"clip\.mp4.*frame 15"):
        rl.materialize(rl.PerFrame(video, torch.zeros(10)))
    with pytest.raises(IndexError, match="out of range"):
        rl.materialize(rl.ClipIndices(rl.VideoFile(clip_path, clip=[40])))
    with pytest.raises(TypeError, match="ClipIndices.*VideoFile"):
        rl.ClipIndices(str(clip_path))
    with pytest.raises(TypeError, match="values must be"):
        rl.PerFrame(video, 3)
    with pytest.raises(ValueError, match="transform of its own"):
        rl.Joint(v2.RandomHorizontalFlip(), (rl.VideoFile(clip_path, transform=v2.Resize(8)), 1))
    # natively a sample whose values miss a frame is that sample's error, under on_error
    paths = [make_clip(tmp_path / f"{k}.mp4", hue=30 * k, frames=12) for k in range(3)]
    short = _PairClips(paths, values=5)
    with pytest.raises(IndexError, match="PerFrame"):
        _load(short, 2)
    kept, _ = _load(short, 2, on_error="skip", max_skipped_fraction=1.0)
    assert all(int(f.max()) < 5 for _, t in kept for f in t["frames"])


def test_a_leaf_of_another_object_of_the_samples_video_is_refused(clip_path: Path):
    sampler = clips.random_indices(num_frames_per_clip=3)
    video = rl.VideoFile(clip_path, clip=sampler)
    other = rl.VideoFile(clip_path, clip=sampler)  # equal, but another object: another draw
    with pytest.raises(ValueError, match=r"ClipIndices\(.*clip\.mp4\) is given another VideoFile"):
        rl.materialize({"video": video, "frames": rl.ClipIndices(other)}, torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match="another VideoFile"):
        rl.materialize(rl.Joint(v2.RandomHorizontalFlip(), (video, rl.PerFrame(other, list(range(FRAMES))))))
    # one object held twice: one draw, one clip twice; two objects: two draws
    a, b = rl.materialize((video, video), torch.Generator().manual_seed(1))
    c, d = rl.materialize((video, other), torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and torch.equal(a, c)
    draws = torch.Generator().manual_seed(1)
    meta = video.metadata.clip_meta()
    first, second = sampler.frame_indices(meta, draws), sampler.frame_indices(meta, draws)
    assert torch.equal(d, other.decode(second)) and torch.equal(c, video.decode(first))


def test_a_clip_argument_is_checked_where_it_is_written(clip_path: Path):
    assert torch.equal(rl.VideoFile(clip_path, clip=torch.tensor([0, 2])).decode(),
                       rl.VideoFile(clip_path, clip=[0, 2]).decode())  # a tensor, as torchcodec takes
    assert rl.VideoFile(clip_path, clip=range(0, 8, 2)).decode().shape[0] == 4
    for bad in (3, clips.random_indices, "0,1"):
        with pytest.raises(TypeError, match=r"clip\.mp4: clip=.* is not a clip: give a list of frame indices"):
            rl.VideoFile(clip_path, clip=bad)
    folder = clip_path.parent / "folder"
    (folder / "a").mkdir(parents=True, exist_ok=True)
    (folder / "a" / "x.mp4").write_bytes(clip_path.read_bytes())
    assert rl.VideoFolder(folder, clip=range(0, 4))[0][0].decode().shape[0] == 4
