"""End-to-end behaviour of the native path against torchvision/torch."""

from __future__ import annotations

import math
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from torchvision import transforms as tvt

import ringloader as rl
from ringloader import transforms as T

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def rl_eval(to_tensor: bool = False):
    steps = [T.Resize(256), T.CenterCrop(224)]
    if to_tensor:
        steps += [T.ToTensor(), T.Normalize(MEAN, STD)]
    return T.Compose(steps)


def rl_train():
    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(MEAN, STD)])


# ---- ImageFolder -----------------------------------------------------------------------------

def test_image_folder_matches_torchvision(tmp_path: Path, image_tree: Path):
    root = tmp_path / "mixed"
    shutil.copytree(image_tree, root)
    # Upper-case extensions, nested folders, non-image files, another extension.
    (root / "class_01" / "nested" / "deeper").mkdir(parents=True)
    shutil.copy(root / "class_01" / "img_000.jpg", root / "class_01" / "nested" / "deeper" / "X.JPEG")
    shutil.copy(root / "class_02" / "img_001.jpg", root / "class_02" / "b.JPG")
    (root / "class_03" / "notes.txt").write_text("not an image")
    ours = rl.ImageFolder(root)
    theirs = torchvision.datasets.ImageFolder(root)
    assert ours.classes == theirs.classes
    assert ours.class_to_idx == theirs.class_to_idx
    assert ours.samples == theirs.samples
    assert ours.targets == theirs.targets


def test_image_folder_errors(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="nope"):
        rl.ImageFolder(tmp_path / "nope")
    (tmp_path / "empty_class").mkdir()
    with pytest.raises(FileNotFoundError, match="empty_class"):
        rl.ImageFolder(tmp_path)


# ---- transforms vs torchvision's PIL pipeline -----------------------------------------------------

def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * math.log10(255.0**2 / mse)


def test_eval_transform_close_to_torchvision(image_tree: Path):
    """Resize(256)+CenterCrop(224), uint8: mean |diff| < 1.5 levels of 255 and PSNR > 35 dB per
    image, for every flavour (4:2:0/4:2:2/4:4:4, progressive, grayscale, CMYK)."""
    ours = rl.ImageFolder(image_tree, transform=rl_eval())
    theirs = torchvision.datasets.ImageFolder(
        image_tree, transform=tvt.Compose([tvt.Resize(256), tvt.CenterCrop(224), tvt.PILToTensor()]))
    worst_mad, worst_psnr = 0.0, float("inf")
    for i in range(len(ours)):
        a, la = ours[i]
        b, lb = theirs[i]
        assert la == lb
        assert a.dtype == torch.uint8 and a.shape == b.shape == (3, 224, 224)
        mad = float((a.int() - b.int()).abs().float().mean())
        p = psnr(a.numpy(), b.numpy())
        worst_mad, worst_psnr = max(worst_mad, mad), min(worst_psnr, p)
    assert worst_mad < 1.5, worst_mad
    assert worst_psnr > 35.0, worst_psnr


def test_scaled_decode_close_to_torchvision(tmp_path: Path):
    """Large images take the DCT-scaled path (1/2 or 1/4) before resampling; torchvision decodes at
    full size. Tolerance: mean |diff| < 1.5 levels of 255, PSNR > 35 dB; full decode is exact."""
    from imagegen import jpeg_bytes
    (tmp_path / "c").mkdir()
    for i, (w, h, kw) in enumerate([(1024, 768, {}), (900, 1200, dict(subsampling="4:4:4")),
                                    (2000, 1500, dict(progressive=True))]):
        (tmp_path / "c" / f"{i}.jpg").write_bytes(jpeg_bytes(w, h, seed=40 + i, **kw))
    theirs = torchvision.datasets.ImageFolder(
        tmp_path, transform=tvt.Compose([tvt.Resize(256), tvt.CenterCrop(224), tvt.PILToTensor()]))
    for fast in (True, False):
        x, _ = next(iter(rl.DataLoader(rl.ImageFolder(tmp_path, transform=rl_eval()), batch_size=3,
                                       fast_decode=fast)))
        for i in range(3):
            b = theirs[i][0]
            mad = float((x[i].int() - b.int()).abs().float().mean())
            if fast:
                assert mad < 1.5 and psnr(x[i].numpy(), b.numpy()) > 35.0, (i, mad)
            else:
                assert mad == 0.0, (i, mad)


def test_torchvision_compose_is_translated_exactly(image_tree: Path):
    tv = tvt.Compose([tvt.Resize(256), tvt.CenterCrop(224), tvt.ToTensor(), tvt.Normalize(MEAN, STD)])
    a = rl.DataLoader(rl.ImageFolder(image_tree, transform=tv), batch_size=8)
    b = rl.DataLoader(rl.ImageFolder(image_tree, transform=rl_eval(True)), batch_size=8)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_unsupported_torchvision_transform_is_named(image_tree: Path):
    # strict=True refuses what would run in Python (test_hybrid.py covers strict=False).
    with pytest.raises(TypeError, match="ElasticTransform"):
        rl.ImageFolder(image_tree, transform=tvt.Compose([tvt.ElasticTransform(), tvt.ToTensor()]),
                       strict=True)


def test_transform_without_native_equivalent_is_named(image_tree: Path):
    with pytest.raises(TypeError, match="Lambda"):
        rl.transforms.to_steps(tvt.Compose([tvt.Lambda(lambda x: x), tvt.ToTensor()]))
    with pytest.raises(TypeError, match="NEAREST_EXACT|nearest-exact"):
        rl.transforms.to_steps(tvt.Resize(256, interpolation=tvt.InterpolationMode.NEAREST_EXACT))


def test_normalize_math_matches_torchvision_on_our_pixels(image_tree: Path):
    """ToTensor+Normalize equals torchvision's math applied to our own uint8 output."""
    u8 = rl.ImageFolder(image_tree, transform=rl_eval())
    f32 = rl.DataLoader(rl.ImageFolder(image_tree, transform=rl_eval(True)), batch_size=len(u8))
    x, _ = next(iter(f32))
    for i in range(len(u8)):
        ref = tvt.Normalize(MEAN, STD)(u8[i][0].float() / 255)
        torch.testing.assert_close(x[i], ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype,torch_dtype", [("float16", torch.float16), ("bfloat16", torch.bfloat16),
                                               ("float32", torch.float32)])
def test_dtypes_and_layouts(image_tree: Path, dtype, torch_dtype):
    ds = rl.ImageFolder(image_tree, transform=rl_eval(True))
    ref, _ = next(iter(rl.DataLoader(ds, batch_size=4)))
    x, _ = next(iter(rl.DataLoader(ds, batch_size=4, dtype=dtype)))
    assert x.dtype == torch_dtype and x.shape == (4, 3, 224, 224)
    tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float32: 0}[torch_dtype]
    torch.testing.assert_close(x.float(), ref, atol=tol * 3, rtol=tol)
    nhwc, _ = next(iter(rl.DataLoader(ds, batch_size=4, dtype=dtype, layout="NHWC")))
    assert nhwc.shape == (4, 224, 224, 3)
    assert torch.equal(nhwc.permute(0, 3, 1, 2), x)


# ---- DataLoader semantics ------------------------------------------------------------------

def test_batches_shapes_labels_and_len(image_tree: Path):
    ds = rl.ImageFolder(image_tree, transform=rl_train())
    loader = rl.DataLoader(ds, batch_size=5, num_workers=2)
    assert len(loader) == math.ceil(len(ds) / 5)
    labels = []
    for x, y in loader:
        assert x.dtype == torch.float32 and x.shape[1:] == (3, 224, 224)
        assert y.dtype == torch.int64
        assert torch.isfinite(x).all()
        labels += y.tolist()
    assert labels == ds.targets  # sequential sampler: dataset order
    dropped = rl.DataLoader(ds, batch_size=5, drop_last=True)
    assert len(dropped) == len(ds) // 5 == sum(1 for _ in dropped)


def test_shuffle_order_equals_torch_for_same_seed(unique_tree: Path):
    ours = rl.DataLoader(rl.ImageFolder(unique_tree, transform=rl_eval()), batch_size=5, shuffle=True)
    theirs = torch.utils.data.DataLoader(
        torchvision.datasets.ImageFolder(unique_tree, transform=tvt.Compose(
            [tvt.Resize(256), tvt.CenterCrop(224), tvt.PILToTensor()])),
        batch_size=5, shuffle=True)
    for seed in (0, 1):
        torch.manual_seed(seed)
        a = [y.tolist() for _, y in ours]
        torch.manual_seed(seed)
        b = [y.tolist() for _, y in theirs]
        assert a == b
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a = [y.tolist() for _, y in rl.DataLoader(rl.ImageFolder(unique_tree, transform=rl_eval()),
                                              batch_size=4, shuffle=True, generator=g1)]
    b = [y.tolist() for y in torch.utils.data.DataLoader(list(range(24)), batch_size=4,
                                                          shuffle=True, generator=g2)]
    assert a == b


def test_deterministic_for_seed_and_any_worker_count(image_tree: Path):
    ds = rl.ImageFolder(image_tree, transform=rl_train())
    runs = []
    for workers in (0, 1, 3):
        torch.manual_seed(123)
        loader = rl.DataLoader(ds, batch_size=6, shuffle=True, num_workers=workers)
        runs.append([(x.clone(), y.clone()) for x, y in loader])
    for other in runs[1:]:
        for (xa, ya), (xb, yb) in zip(runs[0], other):
            assert torch.equal(xa, xb) and torch.equal(ya, yb)
    torch.manual_seed(124)
    different = [x for x, _ in rl.DataLoader(ds, batch_size=6, shuffle=True)]
    assert not all(torch.equal(a[0], b) for a, b in zip(runs[0], different))


def test_new_epoch_per_iter_draws_new_augmentation(image_tree: Path):
    loader = rl.DataLoader(rl.ImageFolder(image_tree, transform=rl_train()), batch_size=24)
    torch.manual_seed(0)
    (a, _), = list(loader)
    (b, _), = list(loader)
    assert not torch.equal(a, b)


def test_early_break_and_reiteration(image_tree: Path):
    loader = rl.DataLoader(rl.ImageFolder(image_tree, transform=rl_eval()), batch_size=3, num_workers=2)
    full = [x.clone() for x, _ in loader]
    for stop in (0, 1, 3):
        for i, (x, _) in enumerate(loader):
            assert torch.equal(x, full[i])
            if i == stop:
                break
    assert [torch.equal(x, f) for (x, _), f in zip(loader, full)] == [True] * len(full)


def test_tensors_kept_alive_stay_intact(image_tree: Path):
    loader = rl.DataLoader(rl.ImageFolder(image_tree, transform=rl_eval()), batch_size=2, num_workers=2,
                           prefetch_factor=1, max_slots=16)
    kept, copies = [], []
    for x, y in loader:
        kept.append(x)
        copies.append(x.clone())
    for _ in loader:  # another epoch reuses only released slots
        pass
    for k, c in zip(kept, copies):
        assert torch.equal(k, c)


def test_zero_copy_and_slot_recycling(image_tree: Path):
    loader = rl.DataLoader(rl.ImageFolder(image_tree, transform=rl_eval()), batch_size=2)  # 2 batches ahead
    ptrs = set()
    for x, y in loader:
        ptrs.add(x.data_ptr())
        del x, y
    stats = loader.stats()
    assert stats["slots_allocated"] <= 4 and len(ptrs) <= stats["slots_allocated"]
    assert stats["slots_held"] == 0


def test_holding_every_slot_is_an_error_not_a_hang(image_tree: Path):
    loader = rl.DataLoader(rl.ImageFolder(image_tree, transform=rl_eval()), batch_size=2, max_slots=3)
    kept = []
    it = iter(loader)
    with pytest.raises(rl.SlotsExhaustedError, match="held by the consumer"):
        for x, _ in it:
            kept.append(x)
    assert len(kept) == 3
    kept.clear()
    del x  # the last image tensor still held the slot; labels never hold one
    rest = sum(1 for _ in it)  # nothing was lost: the iterator continues with the same batch
    assert rest == len(loader) - 3


def test_pin_memory_without_gpu_warns_and_works(image_tree: Path):
    with pytest.warns(UserWarning, match="pin_memory"):
        loader = rl.DataLoader(rl.ImageFolder(image_tree, transform=rl_eval()), batch_size=4, pin_memory=True)
    x, _ = next(iter(loader))
    assert x.shape == (4, 3, 224, 224)


@pytest.mark.parametrize("native", [True, False])
def test_torchvision_image_folder_matches_torch(image_tree: Path, native: bool):
    # Served natively from its samples and transform; with worker_init_fn, on torch's path.
    tv = torchvision.datasets.ImageFolder(image_tree, transform=tvt.Compose([tvt.Resize(64), tvt.CenterCrop(64), tvt.ToTensor()]))
    kwargs = {} if native else dict(num_workers=1, worker_init_fn=abs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if not native else "error")
        ours = rl.DataLoader(tv, batch_size=4, shuffle=True, **kwargs)
    theirs = torch.utils.data.DataLoader(tv, batch_size=4, shuffle=True)
    assert ours.native == native
    torch.manual_seed(0)
    a = list(ours)
    torch.manual_seed(0)
    b = list(theirs)
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


# ---- bad arguments -------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(batch_size=0), ValueError, "batch_size"),
    (dict(num_workers=-1), ValueError, "num_workers"),
    (dict(batch_size=2.5), TypeError, "batch_size"),
    (dict(dtype="int7"), ValueError, "dtype"),
    (dict(layout="CHWN"), ValueError, "layout"),
    (dict(io="carrier-pigeon"), ValueError, "io"),
    (dict(timeout=-1), ValueError, "timeout"),
    (dict(prefetch_factor=0), ValueError, "prefetch_factor"),
    (dict(worker_init_fn=lambda _: None), TypeError, "worker_init_fn"),
    (dict(shuffle=True, sampler=[0, 1]), ValueError, "sampler"),
])
def test_bad_arguments_fail_at_construction(image_tree: Path, kwargs, exc, match):
    ds = rl.ImageFolder(image_tree, transform=rl_eval())
    with pytest.raises(exc, match=match):
        rl.DataLoader(ds, **kwargs)
