"""Native clip batches of any sample structure (one video reference a sample, in tuples, lists,
namedtuples or dicts) and with a ``collate_fn``: the batches equal torch's worker-process path
(the same transform as a Python callable, the same keyed draws), under every ``on_error``."""
from __future__ import annotations

import collections
import warnings
from pathlib import Path

import pytest
import torch
from torchvision.transforms import v2

import ringloader as rl
from ringloader import clips

from videogen import NEEDS_VIDEO, make_clip, resized_clip

pytestmark = NEEDS_VIDEO

Pair = collections.namedtuple("Pair", "video label")
KINDS = ["dict", "triple", "named", "nested"]


class Samples(torch.utils.data.Dataset):
    """Samples of ``kind`` over ``paths``; ``python`` gives the same resize as a Python
    callable, which keeps the clips on torch's worker processes."""

    def __init__(self, paths, kind: str, python: bool = False):
        self.paths, self.kind, self.python = paths, kind, python

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        video = resized_clip(self.paths[i], self.python)
        if self.kind == "dict":
            return {"video": video, "label": i, "meta": {"frames": rl.ClipIndices(video), "name": f"s{i}"}}
        if self.kind == "triple":
            return i, [video, rl.ClipTimes(video)], 2 * i
        if self.kind == "named":
            return Pair(video, i)
        return [{"clip": (video,)}, i]


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> list:
    top = tmp_path_factory.mktemp("structures")
    return [make_clip(top / f"{k}.mp4", hue=45 * k) for k in range(5)]


def _load(dataset, workers: int = 2, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rl.FallbackWarning)
        loader = rl.DataLoader(dataset, batch_size=2, num_workers=workers,
                               generator=torch.Generator().manual_seed(3), **kw)
        return list(loader), loader


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def _stack_collate(samples):
    """A collate_fn of one's own: the clips stacked, the rest listed."""
    clips_ = torch.stack([s["video"] if isinstance(s, dict) else s[0] for s in samples])
    return clips_, [s["label"] if isinstance(s, dict) else s[1] for s in samples]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("collate_fn", [None, list])
def test_any_structure_batches_natively_as_torchs_workers(paths, kind, collate_fn):
    native, loader = _load(Samples(paths, kind), collate_fn=collate_fn)
    assert "native clip batches" in loader.describe()
    workers, loader = _load(Samples(paths, kind, python=True), collate_fn=collate_fn)
    assert "generic path" in loader.describe()
    assert len(native) == len(workers) == 3
    for a, b in zip(native, workers):
        assert _equal(a, b), (a, b)


def test_a_collate_fn_gets_each_samples_clip_as_a_view_of_the_batch(paths):
    seen = []

    def collate(samples):
        seen.append([s["video"] for s in samples])
        return _stack_collate(samples)

    native, _ = _load(Samples(paths, "dict"), collate_fn=collate)
    workers, _ = _load(Samples(paths, "dict", python=True), collate_fn=_stack_collate)
    assert all(_equal(a, b) for a, b in zip(native, workers))
    first = seen[0]  # rows of one batch tensor: no copy was made to hand them over
    assert first[1].untyped_storage().data_ptr() == first[0].untyped_storage().data_ptr()


def test_the_video_where_sample_zero_holds_it(paths, tmp_path: Path):
    class Moved(Samples):
        def __getitem__(self, i):
            sample = super().__getitem__(i)
            return {"elsewhere": sample["video"], "label": i} if i == 3 else sample

    with pytest.raises(TypeError, match=r"sample 3: its video reference is at \['elsewhere'\], sample 0's at \['video'\]"):
        _load(Moved(paths, "dict"))

    class Two(Samples):
        def __getitem__(self, i):
            return {"a": rl.VideoFile(self.paths[i]), "b": rl.VideoFile(self.paths[i])}

    _, loader = _load(Two(paths, "dict"), collate_fn=list)
    assert "generic path" in loader.describe()


@pytest.mark.parametrize("kind", ["dict", "nested"])
def test_skip_with_drop_last_and_replace_keep_the_structure(paths, tmp_path: Path, kind):
    cut = list(paths)
    bad = tmp_path / "cut.mp4"
    bad.write_bytes(paths[1].read_bytes()[:300])
    cut[1] = bad
    full, _ = _load(Samples(cut, kind), on_error="skip", drop_last=True)
    # drop_last plans samples 0-3; 1 fails: 0, 2 and 3 survive, one full batch of the first two
    assert len(full) == 1 and _clips_of(full[0], kind).shape[0] == 2
    assert [int(x) for x in _labels_of(full[0], kind)] == [0, 2]
    replaced, _ = _load(Samples(cut, kind), on_error="replace")
    labels = [int(x) for b in replaced for x in _labels_of(b, kind)]
    assert len(labels) == 5 and 1 not in labels
    for batch in replaced:  # each row is the clip of the sample its label names
        for b, (row, label) in enumerate(zip(_clips_of(batch, kind), _labels_of(batch, kind))):
            assert row.shape == (1, 3, 3, 12, 16) and int(label) != 1
            if kind == "dict":  # its frames leaf names the frames: the substitute's own video's
                frames = batch["meta"]["frames"][b][0].tolist()
                assert torch.equal(row[0], v2.Resize(12)(rl.VideoFile(cut[int(label)]).decode(frames)))


def _clips_of(batch, kind):
    return batch["video"] if kind == "dict" else batch[0]["clip"][0]


def _labels_of(batch, kind):
    return batch["label"] if kind == "dict" else batch[1]


def test_resume_mid_epoch_with_dict_samples(paths):
    dataset = Samples(paths, "dict")
    loader = rl.DataLoader(dataset, batch_size=2, num_workers=2, shuffle=True,
                           generator=torch.Generator().manual_seed(9))
    it = iter(loader)
    first = next(it)
    state = loader.state_dict()
    rest = list(it)
    again = rl.DataLoader(dataset, batch_size=2, num_workers=2, shuffle=True,
                          generator=torch.Generator().manual_seed(1))
    again.load_state_dict(state)
    resumed = list(again)
    assert len(rest) == len(resumed) == 2 and first["video"].shape[0] == 2
    assert all(_equal(a, b) for a, b in zip(rest, resumed))


# ---- an rl.Joint holding a clip, natively --------------------------------------------------

FRAMES = 20


def _boxes():
    from torchvision import tv_tensors

    rows = [[k, k / 2, k + 8.0, k / 2 + 10.0] for k in range(FRAMES)]
    return tv_tensors.BoundingBoxes(torch.tensor(rows), format="XYXY", canvas_size=(24, 32))


class JointClips(torch.utils.data.Dataset):
    """Joint samples: a clip with one box per frame, a box of the whole clip and its frames."""

    def __init__(self, paths, transform, step=None):
        self.paths, self.transform, self.step = paths, transform, step

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        video = rl.VideoFile(self.paths[i], clip=clips.random_indices(num_frames_per_clip=3))
        from torchvision import tv_tensors

        boxes = _boxes()
        whole = tv_tensors.wrap(boxes[4:6], like=boxes)
        structure = (video, {"boxes": rl.PerFrame(video, boxes), "whole": whole, "frames": rl.ClipIndices(video),
                             "label": i})
        if self.step is not None:
            structure[1]["extra"] = self.step
        return rl.Joint(self.transform, structure)


def _sample_key(index: int):
    from ringloader.core._sample_keys import SampleKey

    return SampleKey(index, 77, 0, index)


@pytest.mark.parametrize("chain", ["rrc_flip", "resize_center", "random_crop"])
def test_a_joint_with_a_clip_runs_natively_and_moves_its_boxes_as_v2(paths, chain):
    from torchvision import tv_tensors
    from torchvision.transforms.v2 import functional as F

    from ringloader import _C
    from ringloader.loader import video_batches as vb

    transform = {"rrc_flip": v2.Compose([v2.RandomResizedCrop(16, scale=(0.2, 1.0)), v2.RandomHorizontalFlip(),
                                         v2.ToDtype(torch.float32, scale=True)]),
                 "resize_center": v2.Compose([v2.Resize(20), v2.CenterCrop(18)]),
                 "random_crop": v2.Compose([v2.RandomCrop(14), v2.RandomHorizontalFlip(p=1.0)])}[chain]
    dataset = JointClips(paths, transform)
    source = vb.VideoClipBatches(dataset, threads=2)
    assert source.joint
    keys = [_sample_key(i) for i in range(len(paths))]
    clips_, structures = source.batch(keys)
    chain_ = vb.native_chain(transform)[0][0]
    for b, key in enumerate(keys):
        frames = structures[1]["frames"][b][0].tolist()
        video = tv_tensors.Video(rl.VideoFile(paths[b]).decode(frames))
        boxes = _boxes()
        per_frame = tv_tensors.wrap(boxes[frames], like=boxes)
        whole = tv_tensors.wrap(boxes[4:6], like=boxes)
        seed = _C.sample_seed(key.seed, key.epoch, _C.row_key(key.index, key.position))
        ops = _C.video_chain_plan(chain_, 32, 24, seed)
        # v2's own transforms' calls for the drawn parameters (RandomResizedCrop: resized_crop)
        for n, (kind, top, left, height, width) in enumerate(ops):
            if kind == "crop" and n + 1 < len(ops) and ops[n + 1][0] == "resize" and chain == "rrc_flip":
                size = [ops[n + 1][3], ops[n + 1][4]]
                video, per_frame, whole = (F.resized_crop(x, top, left, height, width, size)
                                           for x in (video, per_frame, whole))
            elif kind == "crop" and (n == 0 or ops[n - 1][0] != "crop"):
                if chain != "rrc_flip":
                    video, per_frame, whole = (F.crop(x, top, left, height, width) for x in (video, per_frame, whole))
            elif kind == "resize" and chain != "rrc_flip":
                video, per_frame, whole = (F.resize(x, [height, width]) for x in (video, per_frame, whole))
            elif kind == "flip":
                video, per_frame, whole = (F.horizontal_flip(x) for x in (video, per_frame, whole))
        if chain == "rrc_flip":
            video = F.to_dtype(video, torch.float32, scale=True)
        assert (clips_[b, 0] - video).abs().max().item() == 0  # max |diff| 0
        assert torch.equal(structures[1]["boxes"][0][b], per_frame.as_subclass(torch.Tensor))
        assert torch.equal(structures[1]["whole"][b], whole.as_subclass(torch.Tensor))
        assert int(structures[1]["label"][b]) == b


def test_joint_clips_under_the_dataloader_natively(paths):
    transform = v2.Compose([v2.RandomResizedCrop(16), v2.RandomHorizontalFlip()])
    native, loader = _load(JointClips(paths, transform), collate_fn=list)
    assert "native clip batches" in loader.describe()
    alone, _ = _load(JointClips(paths, transform), workers=0, collate_fn=list)
    from torchvision import tv_tensors

    for batch, again in zip(native, alone):  # the same for any number of threads
        for (clip, target), (clip_b, target_b) in zip(batch, again):
            assert isinstance(clip, tv_tensors.Video) and clip.shape == (1, 3, 3, 16, 16)
            assert torch.equal(clip, clip_b) and torch.equal(target["boxes"][0], target_b["boxes"][0])
            assert isinstance(target["boxes"][0], tv_tensors.BoundingBoxes)
            assert target["boxes"][0].canvas_size == (16, 16)
    collated, _ = _load(JointClips(paths, transform))
    assert collated[0][0].shape == (2, 1, 3, 3, 16, 16) and collated[0][1]["boxes"][0].shape == (2, 3, 4)


def test_a_joint_the_native_clip_chain_cannot_run_stays_on_torchs_workers(paths):
    transform = v2.Compose([v2.RandomResizedCrop(16), v2.ColorJitter(0.3)])
    batches, loader = _load(JointClips(paths, transform), collate_fn=list)
    assert "generic path" in loader.describe() and len(batches) == 3
    from torchvision import tv_tensors

    masked = JointClips(paths, v2.RandomHorizontalFlip(), step=tv_tensors.Mask(torch.zeros(24, 32, dtype=torch.uint8)))
    _, loader = _load(masked, collate_fn=list)
    assert "generic path" in loader.describe()


def test_a_joint_with_pixels_beside_its_clip_stays_on_torchs_workers(paths):
    """Masks and images (per frame or not) would not be transformed by the clip chain: such a
    Joint runs in torch's workers, where v2 transforms them, and the warning says why."""
    from torchvision import tv_tensors

    masks = tv_tensors.Mask(torch.arange(FRAMES * 24 * 32).reshape(FRAMES, 24, 32) % 7)
    image = tv_tensors.Image(torch.zeros(3, 24, 32, dtype=torch.uint8))
    transform = v2.Compose([v2.Resize((12, 16)), v2.CenterCrop(10)])

    class Pixels(torch.utils.data.Dataset):
        def __init__(self, leaf):
            self.leaf = leaf

        def __len__(self):
            return 2

        def __getitem__(self, i):
            video = rl.VideoFile(paths[i], clip=[0, 5, 9])
            leaf = {"masks": lambda: rl.PerFrame(video, masks),
                    "listed": lambda: rl.PerFrame(video, [tv_tensors.Mask(m) for m in masks]), "image": lambda: image}[self.leaf]()
            return rl.Joint(transform, {"video": video, "leaf": leaf})

    for leaf in ("masks", "listed", "image"):
        with pytest.warns(rl.FallbackWarning, match="tv_tensors.(Mask|Image)"):
            loader = rl.DataLoader(Pixels(leaf), batch_size=2, num_workers=0, collate_fn=list)
        batch = next(iter(loader))
        assert "generic path" in loader.describe()
        out = batch[0]["leaf"]
        shapes = [tuple(m.shape) for m in out] if isinstance(out, list) else [tuple(out.shape)]
        assert all(s[-2:] == (10, 10) for s in shapes), (leaf, shapes)


@pytest.mark.parametrize("step", ["pure", "dtype_dict"])
def test_steps_v2_applies_to_every_leaf_keep_a_joint_on_torchs_workers(paths, step):
    from torchvision import tv_tensors

    last = v2.ToPureTensor() if step == "pure" else v2.ToDtype(
        {tv_tensors.Video: torch.float32, tv_tensors.BoundingBoxes: torch.float32, "others": None})
    dataset = JointClips(paths, v2.Compose([v2.Resize((12, 16)), last]))
    batches, loader = _load(dataset, workers=0, collate_fn=list)
    assert "generic path" in loader.describe()
    clip, target = batches[0][0]
    if step == "pure":
        assert type(clip) is torch.Tensor and type(target["whole"]) is torch.Tensor
    else:
        assert target["whole"].dtype == torch.float32


@pytest.mark.parametrize("transform", [
    v2.CenterCrop((24, 32)),
    v2.RandomResizedCrop((12, 16), scale=(1.0, 1.0), ratio=(4 / 3, 4 / 3)),
    v2.Compose([v2.Resize((24, 32)), v2.RandomCrop((24, 32))])])
def test_a_full_frame_crop_still_clamps_the_boxes_as_v2(paths, transform):
    """v2 calls CenterCrop's and RandomResizedCrop's kernels on boxes even when the crop is the
    whole frame, and they clamp; RandomCrop skips its crop then: so does the native path (these
    draws are fixed, so v2 itself gives the expected boxes)."""
    from torchvision import tv_tensors

    outside = tv_tensors.BoundingBoxes([[-5, 2, 40, 20]] * FRAMES, format="XYXY", canvas_size=(24, 32))

    class Outside(torch.utils.data.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            video = rl.VideoFile(paths[i], clip=[1, 2])
            return rl.Joint(transform, (video, rl.PerFrame(video, outside)))

    batches, loader = _load(Outside(), workers=0, collate_fn=list)
    assert "native clip batches" in loader.describe()
    video = tv_tensors.Video(rl.VideoFile(paths[0]).decode([1, 2]))
    want_clip, want_boxes = transform((video, tv_tensors.wrap(outside[[1, 2]], like=outside)))
    clip, boxes = batches[0][0]
    assert torch.equal(clip, want_clip) and torch.equal(boxes, want_boxes)
    # clamped into the frame, except by a RandomCrop of the whole frame (v2 skips the crop then)
    assert (boxes.min() < 0) == isinstance(transform, v2.Compose)


def test_a_transform_built_per_sample_is_not_kept_forever(paths):
    from ringloader.loader import video_batches as vb

    class Fresh(JointClips):
        def __getitem__(self, i):
            self.transform = v2.Compose([v2.Resize((12, 16))])  # a new object every sample
            return super().__getitem__(i % len(self.paths))

        def __len__(self):
            return 200

    source = vb.VideoClipBatches(Fresh(paths, None), threads=1)
    for start in range(0, 200, 50):
        source.batch([_sample_key(i) for i in range(start, start + 50)])
    assert len(source._chains) <= vb._CHAINS_KEPT


def test_a_sample_unlike_sample_zeros_pair_is_refused_not_cut(paths):
    class Ragged(Samples):
        def __getitem__(self, i):
            video = super().__getitem__(i).video
            return (video, i, "extra") if i == 1 else (video, i)

    with pytest.raises(TypeError, match=r"sample 1 .*tuple of 3, sample 0 a \(video, target\) pair"):
        _load(Ragged(paths, "named"), workers=0)


def test_a_pairs_string_labels_collate_as_torchs(paths):
    class Named(Samples):
        def __getitem__(self, i):
            return super().__getitem__(i).video, f"class {i}"

    batches, loader = _load(Named(paths, "named"), workers=0)
    assert "native clip batches" in loader.describe() and batches[0][1] == ("class 0", "class 1")


def test_why_clips_do_not_batch_natively_is_said(paths):
    class Flipped(Samples):
        def __getitem__(self, i):
            return rl.VideoFile(self.paths[i], clip=[0, 1], transform=v2.RandomVerticalFlip()), i

    with pytest.warns(rl.FallbackWarning, match="RandomVerticalFlip has no native video equivalent"):
        loader = rl.DataLoader(Flipped(paths, "named"), batch_size=2)
    assert "RandomVerticalFlip" in loader.describe()
    with pytest.warns(rl.FallbackWarning, match="worker_init_fn is given"):
        loader = rl.DataLoader(Samples(paths, "dict"), batch_size=2, num_workers=2, worker_init_fn=print)
    assert "generic path" in loader.describe()
    with pytest.raises(ValueError, match="dtype only applies to the native image pipeline; this loader "
                                         "batches video clips natively"):
        rl.DataLoader(Samples(paths, "dict"), batch_size=2, dtype=torch.float16)


class _Indexed(torch.utils.data.Dataset):
    """(clip, index) of a class folder, the transform native or a Python callable."""

    def __init__(self, paths, python: bool):
        resize = v2.Resize(12)
        self.paths, self.transform = paths, (lambda x: resize(x)) if python else resize

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return rl.VideoFile(self.paths[i], clip=clips.random_indices(num_frames_per_clip=2),
                            transform=self.transform), i


@pytest.mark.parametrize("python", [False, True])
def test_persistent_workers_keep_torchs_order_and_draw_anew_each_epoch(paths, python):
    """torch's persistent iterator draws its base seed once: the shuffled order of every epoch
    is torch's; and the clips are drawn anew each epoch although the RNG need not move (no
    shuffle: before, the worker path gave the first epoch's clips again)."""
    for persistent in (False, True):
        torch.manual_seed(4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", rl.FallbackWarning)
            loader = rl.DataLoader(_Indexed(paths, python), batch_size=3, shuffle=True, num_workers=2,
                                   persistent_workers=persistent)
            order = [b[1].tolist() for _ in range(3) for b in loader]
        torch.manual_seed(4)
        theirs = torch.utils.data.DataLoader(list(range(len(paths))), batch_size=3, shuffle=True,
                                             num_workers=2, persistent_workers=persistent)
        assert order == [b.tolist() for _ in range(3) for b in theirs], persistent
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rl.FallbackWarning)
        loader = rl.DataLoader(_Indexed(paths, python), batch_size=5, num_workers=2, persistent_workers=True)
        first, second = (next(iter(loader))[0] for _ in range(2))
    assert not torch.equal(first, second)


def test_describe_says_no_batch_is_made_ahead_without_workers(paths):
    assert "prefetch 0 (num_workers=0: each batch is made when asked)" in \
        rl.DataLoader(Samples(paths, "dict"), batch_size=2, num_workers=0).describe()
    assert "prefetch 2 (max_memory" in rl.DataLoader(Samples(paths, "dict"), batch_size=2, num_workers=2).describe()
