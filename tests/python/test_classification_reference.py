"""torchvision's classification reference swapped onto ringloader, the parts that used to fall back.

* A pretrained model's preset (``weights.transforms()``, torchvision's ``ImageClassification``)
  translates to Resize + CenterCrop + ConvertImageDtype + Normalize; the float output equals
  torchvision's exactly (max |diff| 0: the same uint8 pixels, level / 255 and Normalize in float32).
* AugMix (v1 and v2) runs natively: see the AugMix tests below for its bound.

Images are small JPEG photos (imagegen) of landscape, portrait and square shapes.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torchvision.transforms as v1
from torchvision.datasets import ImageFolder as TorchvisionImageFolder
from torchvision.models import ResNet50_Weights, ViT_B_16_Weights

import ringloader as rl

from user_datasets import ImageFiles
from imagegen import jpeg_bytes

SHAPES = [(333, 500), (300, 260), (120, 360), (256, 256)]


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("classification_reference")
    for k, (w, h) in enumerate(SHAPES):
        d = root / f"c{k % 2}"
        d.mkdir(exist_ok=True)
        (d / f"{k}.jpg").write_bytes(jpeg_bytes(w, h, seed=360 + k))
    return root


def _native_loader(dataset, batch_size: int, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback would warn
        return rl.DataLoader(dataset, batch_size=batch_size, fast_decode=False, **kwargs)


def _torchvision_stack(root: Path, transform) -> torch.Tensor:
    ref = TorchvisionImageFolder(str(root), transform=transform)
    return torch.stack([ref[i][0] for i in range(len(ref))])


PRESETS = [
    ("resnet50-v2 (232 bilinear)", lambda: ResNet50_Weights.IMAGENET1K_V2.transforms()),
    ("vit_b_16 (256 bilinear)", lambda: ViT_B_16_Weights.IMAGENET1K_V1.transforms()),
    ("bicubic 160/150", lambda: ResNet50_Weights.IMAGENET1K_V2.transforms().__class__(
        crop_size=150, resize_size=160, interpolation=v1.InterpolationMode.BICUBIC,
        mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3))),
]


@pytest.mark.parametrize("name,make", PRESETS, ids=[p[0] for p in PRESETS])
def test_weights_preset_in_image_folder_is_native_and_exact(tree: Path, name, make):
    preset = make()
    split = rl.transforms.split(preset)
    assert split.tail is None, split.reason
    kinds = [s["kind"] for s in split.steps]
    assert kinds == ["resize", "center_crop", "to_tensor", "normalize"], kinds
    loader = _native_loader(rl.ImageFolder(str(tree), transform=preset), batch_size=len(SHAPES))
    assert loader.native
    assert "why:" not in loader.describe(), loader.describe()
    images, _ = next(iter(loader))
    expected = _torchvision_stack(tree, preset)
    assert images.dtype == expected.dtype == torch.float32
    assert images.shape == expected.shape
    assert (images - expected).abs().max().item() == 0  # bound: exact


def test_weights_preset_on_image_file_references_is_native_and_exact(tree: Path):
    preset = ResNet50_Weights.IMAGENET1K_V2.transforms()
    ref = TorchvisionImageFolder(str(tree))
    paths = [p for p, _ in ref.samples]
    loader = _native_loader(ImageFiles(paths, preset), batch_size=len(paths))
    assert loader.native
    assert "why:" not in loader.describe(), loader.describe()
    images, index = next(iter(loader))
    expected = _torchvision_stack(tree, preset)
    assert torch.equal(index, torch.arange(len(paths)))
    assert (images - expected).abs().max().item() == 0  # bound: exact


# ---- AugMix ---------------------------------------------------------------------------------
#
# torchvision's AugMix converts a PIL image to a uint8 tensor first, so its ops run torch's tensor
# kernels. For fixed draws (the Beta pair, the Dirichlet chain weights, each chain's ops, bins and
# signs) the native step gives torchvision's output exactly (bound: max |diff| 0) on these photos:
# the enhance ops, autocontrast, solarize and posterize are float32 element-wise maths done in
# torch's order (v2 with its fused multiply-adds), the sharpness blur is rounded from a value that
# is never a half, and the affine grid and grid_sample follow torch's float32 evaluation.

import numpy as np  # noqa: E402
import torchvision.transforms.v2 as v2  # noqa: E402
from PIL import Image  # noqa: E402

from ringloader import _C  # noqa: E402
from ringloader.transforms._tv_converters import torch_grid_fuses  # noqa: E402

# How this process's torch rounds the affine ops' grid (MKL: fused on Intel CPUs, not on AMD's):
# the native step is told, as the converter tells it.
FUSED = torch_grid_fuses()

MIX_OPS_ALL = 13
_SIGNED = {0, 1, 2, 3, 4, 9, 10, 11, 12}  # shears, translations, rotation, the enhance ops
_NO_BINS = {7, 8}  # AutoContrast, Equalize


def _photo(w: int, h: int, seed: int) -> np.ndarray:
    import io

    return np.asarray(Image.open(io.BytesIO(jpeg_bytes(w, h, seed=seed))).convert("RGB")).copy()


def _random_draws(rng: np.random.Generator, width: int, depth: int, ops: int, severity: int):
    m = rng.dirichlet([1.0, 1.0]).astype(np.float32)
    weights = rng.dirichlet([1.0] * width).astype(np.float32)
    chains = []
    for _ in range(width):
        chain = []
        for _ in range(depth if depth > 0 else int(rng.integers(1, 4))):
            index = int(rng.integers(0, ops))
            chain.append((index, 0 if index in _NO_BINS else int(rng.integers(0, severity)),
                          int(index in _SIGNED and rng.integers(0, 2))))
        chains.append(chain)
    return float(m[0]), float(m[1]), [float(w) for w in weights], chains


def _torchvision_augmix(aug, image: np.ndarray, draws, monkeypatch) -> np.ndarray:
    """torchvision's own AugMix.forward on the PIL image, its draws replaced by `draws`."""
    m0, m1, weights, chains = draws
    is_v2 = type(aug).__module__.startswith("torchvision.transforms.v2")
    dirichlet = [torch.tensor([[m0, m1]], dtype=torch.float32), torch.tensor([weights], dtype=torch.float32)]
    ints, signs = [], []
    for chain in chains:
        if aug.chain_depth <= 0:
            ints.append(len(chain))
        for index, bin_, negate in chain:
            ints.append(index)
            if index not in _NO_BINS:
                ints.append(bin_)
            if index in _SIGNED:
                (signs if is_v2 else ints).append(negate)

    def randint(*args, size=None, **kwargs):
        shape = size if size is not None else args[-1]
        value = ints.pop(0)
        return torch.tensor(value) if tuple(shape) == () else torch.tensor([value])

    def rand(*args, **kwargs):
        return torch.tensor(0.25 if signs.pop(0) else 0.75)

    monkeypatch.setattr(aug, "_sample_dirichlet", lambda params: dirichlet.pop(0))
    with monkeypatch.context() as m:
        m.setattr(torch, "randint", randint)
        m.setattr(torch, "rand", rand)
        out = np.asarray(aug(Image.fromarray(image)))
    assert ints == [] and signs == [] and dirichlet == []
    return out


@pytest.mark.parametrize("api", ["v1", "v2"])
@pytest.mark.parametrize("interpolation", ["bilinear", "nearest"])
def test_augmix_equals_torchvision_for_fixed_draws(api, interpolation, monkeypatch):
    module = v1 if api == "v1" else v2
    mode = {"bilinear": v1.InterpolationMode.BILINEAR, "nearest": v1.InterpolationMode.NEAREST}[interpolation]
    aug = module.AugMix(severity=10, interpolation=mode)
    rng = np.random.default_rng(36 + len(api) + len(interpolation))
    worst, total = 0, 0
    for k, (w, h) in enumerate([(61, 47), (40, 72), (64, 64)]):
        image = _photo(w, h, seed=700 + k)
        for _ in range(3):
            draws = _random_draws(rng, width=3, depth=-1, ops=MIX_OPS_ALL, severity=10)
            ours = _C._augmix_for_testing(image, api == "v2", 2 if interpolation == "bilinear" else 0,
                                          True, *draws, fused_grid=FUSED)
            theirs = _torchvision_augmix(aug, image, draws, monkeypatch)
            d = np.abs(ours.astype(np.int16) - theirs.astype(np.int16))
            worst, total = max(worst, int(d.max())), total + int((d > 0).sum())
    assert worst == 0, f"{total} values differ, max {worst}"  # bound: exact


@pytest.mark.parametrize("api", ["v1", "v2"])
def test_each_augmix_op_at_every_bin_equals_torchvision(api, monkeypatch):
    """One op per chain, one chain, all its weight on the chain: the op's own kernel at bins
    across the range (with severity 10), both signs."""
    module = v1 if api == "v1" else v2
    aug = module.AugMix(severity=10, mixture_width=1, chain_depth=1)
    image = _photo(53, 39, seed=801)
    for index in range(MIX_OPS_ALL):
        for bin_ in ([0] if index in _NO_BINS else (0, 3, 6, 9)):  # 3, 6, 9: v2's near-integer Solarize
            for negate in ((0, 1) if index in _SIGNED else (0,)):
                draws = (0.0, 1.0, [1.0], [[(index, bin_, negate)]])
                ours = _C._augmix_for_testing(image, api == "v2", 2, True, *draws, fused_grid=FUSED)
                theirs = _torchvision_augmix(aug, image, draws, monkeypatch)
                d = np.abs(ours.astype(np.int16) - theirs.astype(np.int16))
                assert d.max() == 0, (index, bin_, negate, int((d > 0).sum()), int(d.max()))


def test_the_grid_rounding_asked_of_torch_is_the_one_that_matches(monkeypatch):
    """The affine ops' grid is rounded as this process's torch rounds it (torch_grid_fuses):
    the other rounding gives other pixels on the same shear, so the probe decides something."""
    aug = v2.AugMix(severity=10, mixture_width=1, chain_depth=1)
    image = _photo(53, 39, seed=801)
    draws = (0.0, 1.0, [1.0], [[(1, 3, 0)]])  # ShearY, bin 3
    theirs = _torchvision_augmix(aug, image, draws, monkeypatch)
    for fused, same in ((FUSED, True), (not FUSED, False)):
        ours = _C._augmix_for_testing(image, True, 2, True, *draws, fused_grid=fused)
        assert np.array_equal(ours, theirs) is same, fused


sys_path_presets = Path(__file__).resolve().parent


def _reference_train(api: str, interpolation=v1.InterpolationMode.BILINEAR):
    import sys

    sys.path.insert(0, str(sys_path_presets))
    try:
        from classification_presets import ClassificationPresetTrain
    finally:
        sys.path.remove(str(sys_path_presets))
    return ClassificationPresetTrain(crop_size=64, auto_augment_policy="augmix", interpolation=interpolation,
                                     use_v2=api == "v2")


@pytest.mark.parametrize("api", ["v1", "v2"])
def test_reference_recipe_with_augmix_is_native_and_deterministic(tree: Path, api):
    """train.py --auto-augment augmix (its ClassificationPresetTrain): no fallback, describe()
    names no reason, the same seed gives the same batch and another epoch other draws."""
    preset = _reference_train(api)
    split = rl.transforms.split(preset)
    assert split.tail is None, split.reason
    assert "augmix" in [s["kind"] for s in split.steps]

    def batches(seed: int):
        torch.manual_seed(seed)
        loader = _native_loader(rl.ImageFolder(str(tree), transform=preset), batch_size=len(SHAPES))
        assert loader.native and "why:" not in loader.describe(), loader.describe()
        return [next(iter(loader))[0] for _ in range(2)]  # two epochs

    first, again = batches(5), batches(5)
    assert first[0].shape == (len(SHAPES), 3, 64, 64) and first[0].dtype == torch.float32
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[0], first[1])


def test_augmix_settings_without_a_native_equivalent_fall_back_with_the_reason():
    for aug, why in [(v1.AugMix(fill=[128, 128, 128]), "fill"),
                     (v2.AugMix(interpolation=v2.InterpolationMode.BICUBIC), "interpolation")]:
        split = rl.transforms.split(v1.Compose([aug, v1.PILToTensor()]))
        assert split.tail is not None and split.tail_names[0].endswith(".AugMix"), split
        assert why in split.reason, split.reason


# ---- MixUp/CutMix in the reference's collate_fn ---------------------------------------------

from torch.utils.data import default_collate  # noqa: E402


def _reference_collate(mixup_cutmix):
    """train.py: ``collate_fn = lambda batch: mixup_cutmix(*default_collate(batch))``."""
    return lambda batch: mixup_cutmix(*default_collate(batch))  # noqa: E731


def _nested_def_collate(mixup_cutmix):
    def collate_fn(batch):
        return mixup_cutmix(*default_collate(batch))
    return collate_fn


@pytest.mark.parametrize("make", [_reference_collate, _nested_def_collate], ids=["lambda", "def"])
def test_mixup_cutmix_collate_closure_runs_as_the_native_batch_stage(tree: Path, make):
    mixup_cutmix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=2), v2.CutMix(alpha=1.0, num_classes=2)])
    preset = ResNet50_Weights.IMAGENET1K_V2.transforms()

    def first_batches(**kwargs):
        torch.manual_seed(9)
        loader = _native_loader(rl.ImageFolder(str(tree), transform=preset), batch_size=2, **kwargs)
        return loader, [b for b in loader]

    loader, got = first_batches(collate_fn=make(mixup_cutmix))
    assert "(collate_fn " in loader.describe() and "default_collate followed by it" in loader.describe()
    _, expected = first_batches(batch_transform=mixup_cutmix)
    assert len(got) == len(expected) == 2
    for (images, labels), (want_images, want_labels) in zip(got, expected):
        assert labels.dtype == torch.float32 and labels.shape == (2, 2)
        assert torch.equal(images, want_images) and torch.equal(labels, want_labels)


def test_a_collate_fn_that_does_more_runs_as_given(tree: Path):
    mixup = v2.MixUp(alpha=0.2, num_classes=2)
    calls = []

    def collate_fn(batch):
        calls.append(len(batch))
        return mixup(*default_collate(batch))

    loader = _native_loader(rl.ImageFolder(str(tree), transform=ResNet50_Weights.IMAGENET1K_V2.transforms()),
                            batch_size=2, collate_fn=collate_fn)
    assert "default_collate followed by it" not in loader.describe()
    for images, labels in loader:
        assert labels.shape == (2, 2)
    assert calls == [2, 2]
