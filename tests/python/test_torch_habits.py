"""Torch habits that must behave as with torch, or refuse saying what to do instead (issue 11)."""

from __future__ import annotations

import copy
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.utils.data as tud
import torchvision.transforms as tvt
from PIL import Image

import ringloader as rl
from ringloader import transforms as T

from imagegen import jpeg_bytes

TRAIN = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])
EVAL = T.Compose([T.Resize(40), T.CenterCrop(32)])


@pytest.fixture(scope="module")
def ids_tree(tmp_path_factory) -> Path:
    """12 classes x 1 image: a label is its sample's index."""
    root = tmp_path_factory.mktemp("habits")
    for i in range(12):
        (root / f"c{i:02d}").mkdir()
        (root / f"c{i:02d}" / "x.jpg").write_bytes(jpeg_bytes(90 + 4 * i, 72, seed=200 + i))
    return root


def batches(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


def assert_same(a, b):
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(ya, yb) and torch.equal(xa, xb)


# ---- 1. repeated indices draw independent augmentations -----------------------------------

class RepeatSampler(tud.Sampler):
    """Index 0 eight times, then 1 eight times; resumable (state_dict/load_state_dict)."""

    def __init__(self):
        self.order = [0] * 8 + [1] * 8

    def __iter__(self):
        return iter(self.order)

    def __len__(self):
        return len(self.order)

    def state_dict(self):
        return {"order": list(self.order)}

    def load_state_dict(self, state):
        self.order = list(state["order"])


def test_repeated_indices_draw_independent_augmentations(ids_tree: Path):
    ds = rl.ImageFolder(ids_tree, transform=TRAIN)
    weights = [1.0, 0.02, 0.02, 0.02] + [0.0] * 8

    def run(workers):
        torch.manual_seed(5)
        sampler = tud.WeightedRandomSampler(weights, num_samples=24, replacement=True)
        return batches(rl.DataLoader(ds, batch_size=8, sampler=sampler, num_workers=workers))

    one = run(1)
    assert len(one) == 3
    images = torch.cat([x for x, _ in one])
    labels = torch.cat([y for _, y in one])
    copies = images[labels == 0]
    assert len(copies) > 10
    distinct = {c.numpy().tobytes() for c in copies}
    assert len(distinct) == len(copies)  # every copy of index 0 got its own augmentation
    assert_same(one, run(1))  # the same seed repeats
    assert_same(one, run(3))  # any number of workers


def test_weighted_sampling_with_replacement_resumes_exactly(ids_tree: Path):
    ds = rl.ImageFolder(ids_tree, transform=TRAIN)
    weights = [1.0, 0.05, 0.05] + [0.0] * 9

    def make(generator=None):
        sampler = tud.WeightedRandomSampler(weights, num_samples=20, replacement=True, generator=generator)
        return rl.DataLoader(ds, batch_size=4, sampler=sampler, num_workers=2)

    for generator in (None, torch.Generator().manual_seed(8)):
        torch.manual_seed(3)
        full = batches(make(generator))
        torch.manual_seed(3)
        if generator is not None:
            generator.manual_seed(8)
        first = make(generator)
        it = iter(first)
        seen = [tuple(t.clone() for t in next(it)) for _ in range(2)]
        state = pickle.loads(pickle.dumps(first.state_dict()))
        del it, first
        torch.manual_seed(77)  # the resumed run depends only on the checkpoint
        resumed = make(torch.Generator().manual_seed(1) if generator is not None else None)
        resumed.load_state_dict(state)
        rest = batches(resumed)
        assert_same(seen + rest, full)
        assert len(rest) == 3


def test_repeated_indices_resume_with_the_same_augmentations(ids_tree: Path):
    ds = rl.ImageFolder(ids_tree, transform=TRAIN)

    def make():
        return rl.DataLoader(ds, batch_size=3, sampler=RepeatSampler(), num_workers=2)

    torch.manual_seed(1)
    full = batches(make())
    torch.manual_seed(1)
    first = make()
    it = iter(first)
    seen = [tuple(t.clone() for t in next(it)) for _ in range(2)]
    state = first.state_dict()
    del it, first
    resumed = make()
    resumed.load_state_dict(state)
    assert_same(seen + batches(resumed), full)
    copies = torch.cat([x for x, _ in full])[:8]
    assert len({c.numpy().tobytes() for c in copies}) == 8


def test_ranks_with_one_seed_draw_independently_for_identical_images(tmp_path: Path):
    """Same seed on every rank (as training scripts do): the rows at one position of two ranks'
    shards must not share their augmentation draws. All images are the same here, so equal draws
    would give equal rows."""
    for i in range(8):
        (tmp_path / f"c{i}").mkdir()
        (tmp_path / f"c{i}" / "x.jpg").write_bytes(jpeg_bytes(96, 80, seed=1))
    ds = rl.ImageFolder(tmp_path, transform=TRAIN)
    rows = []
    for rank in (0, 1):
        torch.manual_seed(0)
        loader = rl.DataLoader(ds, batch_size=4, rank=rank, world_size=2, seed=0)
        rows.append(torch.cat([x for x, _ in loader]))
    assert all(not torch.equal(a, b) for a, b in zip(*rows))


# ---- 2. reassigned transforms take effect at the next iter() -------------------------------

def test_reassigned_transform_and_target_transform_take_effect(ids_tree: Path):
    ds = rl.ImageFolder(ids_tree, transform=EVAL)
    loader = rl.DataLoader(ds, batch_size=4)
    x, y = next(iter(loader))
    assert x.shape == (4, 3, 32, 32) and x.dtype == torch.uint8
    ds.transform = T.Compose([T.Resize(20), T.CenterCrop(16), T.ToTensor()])
    ds.target_transform = lambda t: t + 100
    x2, y2 = next(iter(loader))
    assert x2.shape == (4, 3, 16, 16) and x2.dtype == torch.float32
    assert y2.tolist() == [t + 100 for t in y.tolist()]
    assert ds[0][1] == 100
    # A transform the native path cannot batch: a clear error, not a silent fallback.
    with pytest.warns(UserWarning, match="ElasticTransform"):
        ds.transform = tvt.Compose([tvt.Resize(20), tvt.CenterCrop(16), tvt.ElasticTransform(),
                                    tvt.ToTensor()])
    with pytest.raises(TypeError, match="new ringloader.DataLoader"):
        iter(loader)


# ---- 3. on_error="skip" with drop_last keeps batches full -----------------------------------

@pytest.fixture()
def holes_tree(tmp_path: Path) -> Path:
    """9 classes x 1 image, samples 2 and 5 unreadable: labels are indices."""
    for i in range(9):
        (tmp_path / f"c{i}").mkdir()
        data = b"not a jpeg" if i in (2, 5) else jpeg_bytes(64, 48, seed=300 + i)
        (tmp_path / f"c{i}" / "x.jpg").write_bytes(data)
    return tmp_path


def test_skip_with_drop_last_refills_batches_deterministically(holes_tree: Path):
    ds = rl.ImageFolder(holes_tree, transform=EVAL)

    def make(workers=2):
        return rl.DataLoader(ds, batch_size=3, drop_last=True, on_error="skip", num_workers=workers)

    full = batches(make())
    # Survivors in order: 0 1 3 4 6 7 8 -> [0 1 3] [4 6 7]; the short rest [8] is dropped.
    assert [y.tolist() for _, y in full] == [[0, 1, 3], [4, 6, 7]]
    assert len(make()) == 3  # the planned count: an upper bound
    assert_same(full, batches(make(workers=1)))
    reference = {int(y): x for xb, yb in batches(rl.DataLoader(ds, batch_size=1, on_error="skip"))
                 for x, y in zip(xb, yb)}
    for xb, yb in full:
        for x, y in zip(xb, yb):
            assert torch.equal(x, reference[int(y)])
    # Resume after the first batch: row 4 had already been taken from planned batch 1.
    first = make()
    it = iter(first)
    seen = [tuple(t.clone() for t in next(it))]
    state = first.state_dict()
    assert state["delivered"] == 1 and state["rows"] == 1
    del it, first
    resumed = make()
    resumed.load_state_dict(state)
    assert_same(seen + batches(resumed), full)


# ---- 4. Subset, random_split and ConcatDataset stay native ----------------------------------

def torch_batches(dataset, **kwargs):
    torch.manual_seed(11)
    return batches(tud.DataLoader(dataset, batch_size=4, **kwargs))


def native_batches(dataset, **kwargs):
    torch.manual_seed(11)
    loader = rl.DataLoader(dataset, batch_size=4, **kwargs)
    assert loader.native
    return batches(loader)


@pytest.mark.parametrize("shuffle", [False, True])
def test_subset_random_split_and_concat_stay_native_in_torchs_order(ids_tree: Path, shuffle: bool):
    ds = rl.ImageFolder(ids_tree, transform=EVAL)
    other = rl.ImageFolder(ids_tree, transform=T.Compose([T.Resize(40), T.CenterCrop(32)]))
    part_a, part_b = tud.random_split(ds, [7, 5], generator=torch.Generator().manual_seed(3))
    wrappers = [
        tud.Subset(ds, [5, 3, 3, 9, -1, 0]),
        part_b,
        tud.ConcatDataset([ds, other]),
        tud.ConcatDataset([part_a, tud.Subset(other, [1, 2])]),
        tud.Subset(tud.ConcatDataset([other, part_b]), list(range(16, 4, -1))),
    ]
    for wrapper in wrappers:
        assert_same(native_batches(wrapper, shuffle=shuffle), torch_batches(wrapper, shuffle=shuffle))


def test_wrappers_the_native_path_cannot_serve_warn_once(ids_tree: Path):
    ds = rl.ImageFolder(ids_tree, transform=EVAL)
    other = rl.ImageFolder(ids_tree, transform=T.Compose([T.Resize(48), T.CenterCrop(32)]))

    class Wrapped(tud.Dataset):
        def __init__(self, dataset):
            self.dataset = dataset

        def __len__(self):
            return len(self.dataset)

        def __getitem__(self, i):
            return self.dataset[i]

    with pytest.warns(UserWarning, match=r"ConcatDataset .*different transforms.*generic path.*4x"):
        loader = rl.DataLoader(tud.ConcatDataset([ds, other]), batch_size=4)
    assert not loader.native
    assert_same(batches(loader), torch_batches(tud.ConcatDataset([ds, other])))
    with pytest.warns(UserWarning, match=r"Wrapped .*not a ringloader ImageFolder.*generic path") as record:
        assert not rl.DataLoader(Wrapped(ds), batch_size=4).native
    assert len(record) == 1


# ---- 5. pickling and deep copies at any time -------------------------------------------------

def test_dataset_pickles_and_deep_copies_after_use(ids_tree: Path):
    ds = rl.ImageFolder(ids_tree, transform=EVAL)
    x0, y0 = ds[0]
    for clone in (pickle.loads(pickle.dumps(ds)), copy.deepcopy(ds)):
        x, y = clone[0]
        assert y == y0 and torch.equal(x, x0)
        assert clone.samples == ds.samples


def test_torch_loader_with_spawn_workers(ids_tree: Path):
    ds = rl.ImageFolder(ids_tree, transform=EVAL)
    ds[0]  # the handle made here must not travel to the workers
    loader = tud.DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context="spawn")
    got = batches(loader)
    assert [y.tolist() for _, y in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert torch.equal(got[0][0][0], ds[0][0])


# ---- 6. torch dtypes and channels_last ------------------------------------------------------

def test_torch_dtypes_and_channels_last(ids_tree: Path):
    ds = rl.ImageFolder(ids_tree, transform=T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()]))
    reference, _ = next(iter(rl.DataLoader(ds, batch_size=4)))
    for dtype in (torch.bfloat16, torch.float16, torch.float32, "bfloat16"):
        x, _ = next(iter(rl.DataLoader(ds, batch_size=4, dtype=dtype)))
        want = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        assert x.dtype == want
        torch.testing.assert_close(x.float(), reference, atol=1e-2, rtol=1e-2)
    for kwargs in (dict(memory_format=torch.channels_last), dict(layout=torch.channels_last)):
        x, _ = next(iter(rl.DataLoader(ds, batch_size=4, **kwargs)))
        assert x.shape == (4, 3, 32, 32)
        assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
        assert torch.equal(x, reference)
    raw, _ = next(iter(rl.DataLoader(ds, batch_size=4, layout="NHWC")))
    assert raw.shape == (4, 32, 32, 3) and torch.equal(raw.permute(0, 3, 1, 2), reference)


@pytest.mark.parametrize("kwargs,match", [
    (dict(dtype=torch.int32), "dtype"),
    (dict(dtype="double"), "dtype"),
    (dict(memory_format=torch.preserve_format), "memory_format"),
    (dict(layout=torch.strided), "layout"),
    (dict(layout="NHWC", memory_format=torch.channels_last), "layout='NHWC'.*memory_format"),
])
def test_bad_dtype_and_layout_name_the_argument(ids_tree: Path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        rl.DataLoader(rl.ImageFolder(ids_tree, transform=EVAL), batch_size=2, **kwargs)


# ---- 7. pin_memory without a GPU -------------------------------------------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="the message is for machines without a GPU")
def test_pin_memory_without_gpu_is_one_plain_line(ids_tree: Path, monkeypatch):
    import ringloader.loader.dataloader as dl

    monkeypatch.setattr(dl, "_warned_pinning", False)
    with pytest.warns(UserWarning) as record:
        rl.DataLoader(rl.ImageFolder(ids_tree, transform=EVAL), batch_size=2, pin_memory=True)
    [warning] = record
    assert str(warning.message) == ("pin_memory=True ignored: no CUDA GPU is visible; batches use "
                                    "ordinary host memory")


# ---- 9. fast_decode on large photos -----------------------------------------------------------

def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a.double() - b.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def test_fast_decode_on_large_photos_against_torchvision(tmp_path: Path):
    """The default (fast_decode=False) equals torchvision; fast_decode=True stays within
    PSNR >= 35 dB and max |diff| <= 32 of 255 (docs/dataloader.md: 37-46 dB, max 17-27 measured)."""
    (tmp_path / "a").mkdir()
    for i, (w, h) in enumerate([(2400, 1800), (2048, 2732)]):
        (tmp_path / "a" / f"{i}.jpg").write_bytes(jpeg_bytes(w, h, quality=90, seed=500 + i))
    steps = [tvt.Resize(256), tvt.CenterCrop(224)]
    ds = rl.ImageFolder(tmp_path, transform=tvt.Compose(steps))
    ref = torch.stack([tvt.Compose(steps + [tvt.PILToTensor()])(Image.open(p).convert("RGB"))
                       for p, _ in ds.samples])
    exact, _ = next(iter(rl.DataLoader(ds, batch_size=2)))
    assert torch.equal(exact, ref)
    assert torch.equal(ds[1][0], ref[1])
    fast, _ = next(iter(rl.DataLoader(ds, batch_size=2, fast_decode=True)))
    diff = (fast.int() - ref.int()).abs()
    assert 0 < int(diff.max()) <= 32
    assert min(psnr(fast[i], ref[i]) for i in range(2)) >= 35.0
    assert float(np.mean(diff.numpy())) < 1.5


class _Noise:
    """A Python step after the native prefix (hybrid path), drawing from torch's RNG."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand(())


def _reseeded_epochs(loader, seeds):
    out = []
    for s in seeds:
        if s is not None:
            torch.manual_seed(s)
        out.append(batches(loader))
    return out


@pytest.mark.parametrize("path", ["native", "native_generator", "hybrid"])
def test_reseeding_before_iter_repeats_order_and_augmentations(ids_tree: Path, path: str):
    # torch: torch.manual_seed(s) before iter() draws the same base seed, hence the same worker
    # seeds and the same augmentations. Here the per-sample seeds follow from that base seed alone.
    if path == "hybrid":
        with pytest.warns(UserWarning, match="run per sample in Python"):
            ds = rl.ImageFolder(ids_tree, transform=tvt.Compose(
                [tvt.RandomResizedCrop(32), tvt.ToTensor(), _Noise()]))
    else:
        ds = rl.ImageFolder(ids_tree, transform=TRAIN)

    def make(**kwargs):
        if path == "native_generator":
            kwargs["generator"] = torch.Generator().manual_seed(9)
        return rl.DataLoader(ds, batch_size=4, shuffle=True, **kwargs)

    loader = make()
    if path == "native_generator":
        first = batches(loader)
        loader.generator.manual_seed(9)  # re-seeding the loader's own generator
        again = batches(loader)
    else:
        first, again = _reseeded_epochs(loader, [7, 7])
    assert_same(first, again)
    # Without re-seeding, epochs still differ (each iter() draws a new base seed).
    if path == "native_generator":
        loader.generator.manual_seed(9)
        third, fourth = batches(loader), batches(loader)
    else:
        third, fourth = _reseeded_epochs(loader, [7, None])
    assert_same(first, third)
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(third, fourth))
    if loader.native:
        # The re-seed cancelled the epoch read ahead (its seed was another), as set_epoch does:
        # results are those of a loader that never reads ahead.
        assert loader.stats()["epochs_adopted"] == 0
        assert "re-seeded between epochs" in loader.describe()
        drained = make(persistent_workers=False)
        if path == "native_generator":
            assert_same(batches(drained), first)
        else:
            assert_same(_reseeded_epochs(drained, [7])[0], first)
