"""Training recipes run natively with torchvision's (and timm's) numerics and distributions.

Every transform is compared with torchvision's PIL path on the same decoded pixels
(fast_decode=False: libjpeg's full-scale ISLOW decode, as Pillow). Deterministic settings must
agree exactly (bounds stated per case); random policies are checked draw by draw: every native
output must equal one of the outputs torchvision/timm can produce for that image, and the ops
drawn must cover the policy's op set with plausible frequencies.
"""

from __future__ import annotations

import collections
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
from torchvision.datasets import ImageFolder as TorchvisionImageFolder
from torchvision.transforms import autoaugment as tv_auto

import ringloader as rl
from imagegen import write_flavour_tree

NEAREST, BILINEAR, BICUBIC = (v1.InterpolationMode.NEAREST, v1.InterpolationMode.BILINEAR,
                              v1.InterpolationMode.BICUBIC)
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


# A shared conftest name is ambiguous when pytest collects tests/python and tests/cuda together,
# so the tree is written here from imagegen's flavours.


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """8 JPEGs of every flavour (4:2:0/4:4:4/4:2:2, progressive, gray, CMYK), 2 classes."""
    return write_flavour_tree(tmp_path_factory.mktemp("recipes"), seed=7000)


def native_batch(root: Path, transform, seed: int = 0):
    torch.manual_seed(seed)
    ds = rl.ImageFolder(str(root), transform=transform)
    images, labels = next(iter(rl.DataLoader(ds, batch_size=len(ds), fast_decode=False)))
    return images, labels


def torchvision_batch(root: Path, transform):
    ref = TorchvisionImageFolder(str(root), transform=transform)
    return torch.stack([ref[i][0] for i in range(len(ref))])


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


# (name, transform chain, max abs difference allowed against torchvision). uint8 outputs are
# compared in levels, float outputs in values.
P = v1.PILToTensor()
BASE = [v1.Resize(72), v1.CenterCrop(64)]
EXACT_CASES = [
    *[(f"Resize {m.name}", v1.Compose([v1.Resize(100, interpolation=m), v1.CenterCrop(96), P]), 0)
      for m in (NEAREST, BILINEAR, v1.InterpolationMode.BICUBIC, v1.InterpolationMode.LANCZOS,
                v1.InterpolationMode.BOX, v1.InterpolationMode.HAMMING)],
    ("Resize((h, w)) bicubic + both flips", v1.Compose([
        v1.Resize((61, 83), interpolation=v1.InterpolationMode.BICUBIC), v1.RandomVerticalFlip(1.0),
        v1.RandomHorizontalFlip(1.0), P]), 0),
    ("Resize up nearest", v1.Compose([v1.Resize(700, interpolation=NEAREST), v1.CenterCrop(600), P]), 0),
    ("Pad constant fill 0 (fused)", v1.Compose([v1.Resize(40), v1.Pad((3, 1, 4, 2)), v1.CenterCrop(44), P]), 0),
    ("Pad fill + reflect + edge + symmetric", v1.Compose([*BASE, v1.Pad((3, 4, 5, 6), fill=(10, 20, 30)),
                                                        v1.Pad(5, padding_mode="reflect"), v1.Pad(2, padding_mode="edge"),
                                                        v1.Pad(3, padding_mode="symmetric"), P]), 0),
    ("brightness", v1.Compose([*BASE, v1.ColorJitter(brightness=(1.3, 1.3)), P]), 0),
    ("flips and CenterCrop after an image step", v1.Compose([
        *BASE, v1.ColorJitter(brightness=(1.3, 1.3)), v1.RandomHorizontalFlip(1.0), v1.CenterCrop((70, 50)),
        v1.RandomVerticalFlip(1.0), P]), 0),
    ("contrast", v1.Compose([*BASE, v1.ColorJitter(contrast=(0.6, 0.6)), P]), 0),
    ("saturation", v1.Compose([*BASE, v1.ColorJitter(saturation=(1.7, 1.7)), P]), 0),
    ("hue", v1.Compose([*BASE, v1.ColorJitter(hue=(-0.3, -0.3)), P]), 0),
    ("Grayscale(3)", v1.Compose([*BASE, v1.Grayscale(3), P]), 0),
    ("RandomGrayscale(p=1)", v1.Compose([*BASE, v1.RandomGrayscale(1.0), P]), 0),
    ("rotation nearest", v1.Compose([*BASE, v1.RandomRotation((33, 33)), P]), 0),
    ("rotation bilinear fill centre", v1.Compose([*BASE, v1.RandomRotation((-20, -20), interpolation=BILINEAR,
                                                                             fill=(9, 99, 199), center=(10, 20)), P]), 0),
    # A fractional fill is made an int as torchvision's _parse_fill makes it (123.675 -> 123).
    ("rotation fractional fill", v1.Compose([*BASE, v1.RandomRotation((33, 33), fill=(123.675, 116.28, 103.53)), P]),
     0),
    ("affine", v1.Compose([*BASE, v1.RandomAffine((10, 10), scale=(1.2, 1.2), shear=(5, 5, -7, -7)), P]), 0),
    ("affine bilinear", v1.Compose([*BASE, v1.RandomAffine((-15, -15), scale=(0.8, 0.8), shear=(12, 12),
                                                           interpolation=BILINEAR, fill=50), P]), 0),
    ("GaussianBlur", v1.Compose([*BASE, v1.GaussianBlur((5, 3), (1.5, 1.5)), P]), 1),
    ("posterize", v1.Compose([*BASE, v1.RandomPosterize(3, p=1), P]), 0),
    ("solarize", v1.Compose([*BASE, v1.RandomSolarize(100, p=1), P]), 0),
    ("sharpness", v1.Compose([*BASE, v1.RandomAdjustSharpness(2.5, p=1), P]), 0),
    ("autocontrast", v1.Compose([*BASE, v1.RandomAutocontrast(p=1), P]), 0),
    ("equalize", v1.Compose([*BASE, v1.RandomEqualize(p=1), P]), 0),
    ("invert", v1.Compose([*BASE, v1.RandomInvert(p=1), P]), 0),
    ("ToTensor + Normalize", v1.Compose([*BASE, v1.ToTensor(), v1.Normalize(MEAN, STD)]), 0),
    ("v2 chain", v2.Compose([v2.Resize(72, interpolation=v2.InterpolationMode.BICUBIC), v2.CenterCrop(64),
                             v2.ColorJitter(saturation=(1.2, 1.2)),
                             v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
                             v2.Normalize(MEAN, STD)]), 0),
]


# torchvision's v2 classes on PIL images: the same kernels, v2's own parameter handling
# (padding order, fill, interpolation enums).
P2 = v2.PILToTensor()
BASE2 = [v2.Resize(72), v2.CenterCrop(64)]
EXACT_CASES += [
    ("v2 Resize bicubic + flips", v2.Compose([v2.Resize((61, 83), interpolation=v2.InterpolationMode.BICUBIC),
                                              v2.RandomVerticalFlip(1.0), v2.RandomHorizontalFlip(1.0), P2]), 0),
    ("v2 RandomCrop padding (l, t, r, b) fill", v2.Compose([*BASE2, v2.RandomCrop(74, padding=(1, 2, 9, 8), fill=7), P2]), 0),
    ("v2 Pad reflect", v2.Compose([*BASE2, v2.Pad((2, 5), padding_mode="reflect"), P2]), 0),
    ("v2 rotation bilinear", v2.Compose([*BASE2, v2.RandomRotation((21, 21), interpolation=v2.InterpolationMode.BILINEAR), P2]), 0),
    ("v2 affine", v2.Compose([*BASE2, v2.RandomAffine((-8, -8), scale=(1.1, 1.1), shear=(4, 4)), P2]), 0),
    ("v2 grayscale", v2.Compose([*BASE2, v2.Grayscale(3), P2]), 0),
    ("v2 posterize", v2.Compose([*BASE2, v2.RandomPosterize(2, p=1), P2]), 0),
    ("v2 equalize", v2.Compose([*BASE2, v2.RandomEqualize(p=1), P2]), 0),
    # Float outputs are torch's float32 operations, bit for bit: v1 divides by 255, v2 multiplies
    # by 1/255, then Normalize subtracts and divides.
    ("PILToTensor + ConvertImageDtype + Normalize", v1.Compose([*BASE, P, v1.ConvertImageDtype(torch.float),
                                                               v1.Normalize(MEAN, STD)]), 0),
    ("v2 ToImage + ToDtype + Normalize + ToPureTensor", v2.Compose([
        *BASE2, v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD), v2.ToPureTensor()]), 0),
    ("v2 ToDtype alone", v2.Compose([*BASE2, P2, v2.ToDtype(torch.float32, scale=True)]), 0),
]


@pytest.mark.parametrize("name,transform,bound", EXACT_CASES, ids=[c[0] for c in EXACT_CASES])
def test_fixed_parameters_match_torchvision(tree: Path, name, transform, bound):
    split = rl.transforms.split(transform)
    assert split.tail is None, f"{name} should be fully native, tail: {split.tail_names}"
    ours, _ = native_batch(tree, transform)
    theirs = torchvision_batch(tree, transform)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    assert max_abs(ours, theirs) <= bound, name


def test_gaussian_blur_psnr(tree: Path):
    transform = v1.Compose([*BASE, v1.GaussianBlur(7, (2.5, 2.5)), P])
    ours, _ = native_batch(tree, transform)
    theirs = torchvision_batch(tree, transform)
    mse = ((ours.double() - theirs.double()) ** 2).mean().item()
    assert mse == 0 or 10 * math.log10(255 ** 2 / mse) > 60  # +-1 level on a few pixels at most


def test_timm_eval_transform_matches_timm(tree: Path):
    timm_data = pytest.importorskip("timm.data")
    transform = timm_data.create_transform(64, is_training=False, interpolation="bicubic", crop_pct=0.9)
    assert rl.transforms.split(transform).tail is None
    ours, _ = native_batch(tree, transform)
    theirs = torchvision_batch(tree, transform)
    assert max_abs(ours, theirs) == 0


def test_timm_train_recipe_is_fully_native(tree: Path):
    timm_data = pytest.importorskip("timm.data")
    transform = timm_data.create_transform(64, is_training=True, auto_augment="rand-m9-mstd0.5-inc1",
                                           re_prob=0.25, re_mode="pixel")
    split = rl.transforms.split(transform)
    assert split.tail is None, split.reason
    kinds = [s["kind"] for s in split.steps]
    assert kinds == ["random_resized_crop", "random_horizontal_flip", "timm_rand_augment", "to_tensor",
                     "normalize", "random_erasing"]
    a, _ = native_batch(tree, transform, seed=3)
    b, _ = native_batch(tree, transform, seed=3)
    assert a.shape == (8, 3, 64, 64) and torch.equal(a, b)  # deterministic for one seed


def test_torchvision_reference_recipe_is_fully_native():
    transform = v1.Compose([v1.RandomResizedCrop(176), v1.RandomHorizontalFlip(), v1.TrivialAugmentWide(),
                            v1.PILToTensor(), v1.ConvertImageDtype(torch.float), v1.Normalize(MEAN, STD),
                            v1.RandomErasing(0.1)])
    split = rl.transforms.split(transform)
    assert split.tail is None, split.reason


def test_policy_filters_map_as_torchvision_hands_them_to_pillow():
    """Every interpolation torchvision runs on PIL images is native: NEAREST_EXACT is Pillow's
    NEAREST there, a Pillow integer its filter, v2 strings their mode."""
    cases = [(v1.RandAugment(interpolation=v1.InterpolationMode.NEAREST_EXACT), "nearest"),
             (v1.TrivialAugmentWide(interpolation=2), "bilinear"),
             (v1.AutoAugment(interpolation=BICUBIC), "bicubic"),
             (v2.TrivialAugmentWide(interpolation="nearest-exact"), "nearest"),
             (v2.RandAugment(interpolation=3), "bicubic"),
             (v1.RandomRotation(10, interpolation=BICUBIC), "bicubic"),
             (v2.RandomAffine(10, interpolation="nearest-exact"), "nearest")]
    for t, filter_name in cases:
        split = rl.transforms.split(v1.Compose([*BASE, t, P]))
        assert split.tail is None, (t, split.reason)
        assert split.steps[-1]["interpolation"] == filter_name, t


@pytest.mark.parametrize("make", [
    lambda m: v1.RandAugment(interpolation=m), lambda m: v2.TrivialAugmentWide(interpolation=m),
    lambda m: v1.AutoAugment(interpolation=m), lambda m: v1.RandomRotation(10, interpolation=m),
    lambda m: v2.RandomAffine(10, interpolation=m),
], ids=["v1-RandAugment", "v2-TrivialAugmentWide", "v1-AutoAugment", "v1-RandomRotation", "v2-RandomAffine"])
@pytest.mark.parametrize("mode", [v1.InterpolationMode.LANCZOS, v1.InterpolationMode.BOX, v1.InterpolationMode.HAMMING])
def test_filters_pillow_transform_rejects_are_refused_like_torchvision(tree: Path, make, mode):
    t = make(mode)
    img = prefix_images(tree)[0]
    # torchvision itself raises Pillow's ValueError at the first geometric op...
    with pytest.raises(ValueError):
        if isinstance(t, (v1.RandomRotation, v2.RandomAffine)):
            t(img)
        else:
            apply_op(t, img, "ShearX", 0.2)
    # ... so ringloader refuses the transform before the epoch, saying what to pass instead.
    with pytest.raises(ValueError, match="NEAREST, BILINEAR or BICUBIC"):
        rl.ImageFolder(str(tree), transform=v1.Compose([*BASE, t, P]))


def test_v1_policy_with_a_string_interpolation_is_refused_like_torchvision(tree: Path):
    t = v1.TrivialAugmentWide(interpolation="bicubic")
    with pytest.raises(TypeError):  # torchvision: F.affine/F.rotate take no strings in v1
        apply_op(t, prefix_images(tree)[0], "Rotate", 10.0)
    with pytest.raises(TypeError, match="InterpolationMode.BICUBIC"):
        rl.transforms.split(v1.Compose([*BASE, t, P]))


def test_timm_rand_augment_refuses_a_resize_only_filter_only_when_an_op_resamples():
    timm_aa = pytest.importorskip("timm.data.auto_augment")
    t = timm_aa.rand_augment_transform("rand-m9-n2", dict(interpolation=1))  # LANCZOS
    with pytest.raises(ValueError, match="nearest, bilinear, bicubic"):
        rl.transforms.split(v1.Compose([*BASE, t, P]))
    colour = timm_aa.RandAugment([op for op in t.ops if op.name in ("Color", "Contrast", "Equalize")], 2)
    split = rl.transforms.split(v1.Compose([*BASE, colour, P]))
    assert split.tail is None, split.reason


def test_ops_after_tensor_or_a_resize_after_colour_go_to_the_python_tail():
    split = rl.transforms.split(v1.Compose([v1.Resize(64), v1.ColorJitter(0.4), v1.CenterCrop(60),
                                            v1.Resize(56), v1.ToTensor()]))
    assert [s["kind"] for s in split.steps] == ["resize", "color_jitter", "center_crop"]
    assert split.tail_names[0].endswith("Resize")
    assert "a resize after an earlier step that cannot fuse into the resample (ColorJitter" in split.reason
    split = rl.transforms.split(v1.Compose([v1.CenterCrop(56), v1.ToTensor(), v1.ColorJitter(0.4)]))
    assert split.tail_names[0].endswith("ColorJitter") and split.tail_input == "tensor"


# ---- random policies: every output is one torchvision/timm can produce --------------------


def prefix_images(root: Path):
    """The PIL images the policies see: Resize(72) + CenterCrop(64) of every sample."""
    ref = TorchvisionImageFolder(str(root), transform=v1.Compose(BASE))
    return [ref[i][0] for i in range(len(ref))]


def native_epochs(root: Path, transform, epochs: int):
    """uint8 HWC outputs of `epochs` epochs (different augmentation seeds), per sample index; the
    whole transform must run natively (no Python-tail warning)."""
    torch.manual_seed(11)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = rl.ImageFolder(str(root), transform=transform)
    loader = rl.DataLoader(ds, batch_size=8, fast_decode=False)
    assert loader.native and not ds.python_steps, ds.python_steps
    out = []
    for _ in range(epochs):
        images, _ = next(iter(loader))
        out.append([img.permute(1, 2, 0).numpy().copy() for img in images])
    return out


def identify(candidates: dict, output: np.ndarray):
    return [key for key, cand in candidates.items() if np.array_equal(cand, output)]


def apply_op(t, img, op: str, magnitude: float):
    """torchvision's own op of policy `t` (v1 or v2, with its interpolation and fill) on a PIL image."""
    if isinstance(t, v2.Transform):
        return t._apply_image_or_video_transform(img, op, magnitude, interpolation=t.interpolation, fill=t._fill)
    fill = t.fill
    if isinstance(fill, (int, float)):
        fill = [float(fill)] * 3
    elif fill is not None:
        fill = [float(f) for f in fill]
    return tv_auto._apply_op(img, op, magnitude, t.interpolation, fill)


def space_of(t, num_bins: int, height: int = 64, width: int = 64):
    """The policy's {op: (magnitudes, signed)} as v1's _augmentation_space gives it."""
    if isinstance(t, v2.Transform):
        space = {}
        for op, (fn, signed) in t._AUGMENTATION_SPACE.items():
            mags = fn(num_bins, height, width)
            space[op] = (torch.tensor(0.0) if mags is None else mags, signed)
        return space
    if isinstance(t, v1.TrivialAugmentWide):
        return t._augmentation_space(num_bins)
    return t._augmentation_space(num_bins, (height, width))


# Each policy with each filter kind Pillow's affine transform takes, v1 and v2 classes (v2 takes
# strings; a Pillow integer is taken by both); the NEAREST cases are the defaults.
@pytest.mark.parametrize("make", [
    lambda: v1.RandAugment(num_ops=1, magnitude=9),
    lambda: v1.RandAugment(num_ops=1, magnitude=9, interpolation=BICUBIC, fill=[30, 60, 90]),
    lambda: v2.RandAugment(num_ops=1, magnitude=9, interpolation="bilinear"),
], ids=["v1-nearest", "v1-bicubic-fill", "v2-bilinear"])
def test_rand_augment_draws_torchvision_ops(tree: Path, make):
    t = make()
    space = space_of(t, t.num_magnitude_bins)
    counts = collections.Counter()
    images = prefix_images(tree)
    for outputs in native_epochs(tree, v1.Compose([*BASE, t, P]), epochs=10):
        for img, out in zip(images, outputs):
            candidates = {}
            for op, (mags, signed) in space.items():
                m = float(mags[9]) if mags.ndim > 0 else 0.0
                for sign in ((1, -1) if signed else (1,)):
                    candidates[(op, sign)] = np.asarray(apply_op(t, img, op, sign * m))
            found = identify(candidates, out)
            assert found, "native RandAugment output matches no torchvision op"
            counts[found[0][0]] += 1
    assert len(counts) >= 11, counts  # 14 equally likely ops, 80 draws
    assert max(counts.values()) <= 20, counts


@pytest.mark.parametrize("make", [
    lambda: v1.TrivialAugmentWide(num_magnitude_bins=3),
    lambda: v1.TrivialAugmentWide(num_magnitude_bins=3, interpolation=3),
    lambda: v2.TrivialAugmentWide(num_magnitude_bins=3, interpolation="bicubic", fill=128),
], ids=["v1-nearest", "v1-bicubic-int", "v2-bicubic-fill"])
def test_trivial_augment_draws_torchvision_ops_and_magnitudes(tree: Path, make):
    t = make()
    space = space_of(t, 3)
    ops, bins = collections.Counter(), collections.Counter()
    images = prefix_images(tree)
    for outputs in native_epochs(tree, v1.Compose([*BASE, t, P]), epochs=10):
        for img, out in zip(images, outputs):
            candidates = {}
            for op, (mags, signed) in space.items():
                for b in range(3 if mags.ndim > 0 else 1):
                    m = float(mags[b]) if mags.ndim > 0 else 0.0
                    for sign in ((1, -1) if signed else (1,)):
                        candidates[(op, b, sign)] = np.asarray(apply_op(t, img, op, sign * m))
            found = identify(candidates, out)
            assert found, "native TrivialAugmentWide output matches no torchvision op/magnitude"
            ops[found[0][0]] += 1
            if len(found) == 1 and found[0][0] in ("Rotate", "ShearX", "TranslateY", "Brightness"):
                bins[found[0][1]] += 1
    assert len(ops) >= 11, ops
    assert set(bins) <= {0, 1, 2} and len(bins) >= 2, bins


@pytest.mark.parametrize("make", [
    lambda: v1.AutoAugment(v1.AutoAugmentPolicy.IMAGENET),
    lambda: v1.AutoAugment(v1.AutoAugmentPolicy.IMAGENET, interpolation=BICUBIC),
    lambda: v2.AutoAugment(v2.AutoAugmentPolicy.IMAGENET, interpolation=v2.InterpolationMode.BILINEAR,
                           fill=[200, 100, 0]),
], ids=["v1-nearest", "v1-bicubic", "v2-bilinear-fill"])
def test_auto_augment_imagenet_draws_its_sub_policies(tree: Path, make):
    t = make()
    policies = t.policies if hasattr(t, "policies") else t._policies
    space = space_of(t, 10)
    images = prefix_images(tree)
    unchanged = total = 0
    for outputs in native_epochs(tree, v1.Compose([*BASE, t, P]), epochs=6):
        for img, out in zip(images, outputs):
            candidates = {}
            for pid, policy in enumerate(policies):
                def apply(im, op, mid, sign):
                    mags, signed = space[op]
                    m = float(mags[mid]) if mid is not None else 0.0
                    return apply_op(t, im, op, -m if (signed and sign < 0) else m)
                (op1, _, m1), (op2, _, m2) = policy
                candidates[(pid, "none")] = np.asarray(img)
                for s1 in (1, -1):
                    a = apply(img, op1, m1, s1)
                    candidates[(pid, "first", s1)] = np.asarray(a)
                    for s2 in (1, -1):
                        candidates[(pid, "both", s1, s2)] = np.asarray(apply(a, op2, m2, s2))
                for s2 in (1, -1):
                    candidates[(pid, "second", s2)] = np.asarray(apply(img, op2, m2, s2))
            assert identify(candidates, out), "native AutoAugment output matches no sub-policy outcome"
            unchanged += np.array_equal(out, np.asarray(img))
            total += 1
    assert 0 < unchanged < total  # some draws apply nothing (p < 1), most change the image


def test_timm_rand_augment_draws_timm_ops(tree: Path, monkeypatch):
    timm_aa = pytest.importorskip("timm.data.auto_augment")
    hparams = dict(translate_const=100, img_mean=(124, 116, 104), interpolation=2)
    t = timm_aa.rand_augment_transform("rand-m9-n1-inc1", hparams)
    images = prefix_images(tree)
    counts = collections.Counter()
    op_args = {}
    for sign in (1, -1):  # timm negates at random: evaluate each level function both ways
        monkeypatch.setattr(timm_aa, "_randomly_negate", (lambda v: v) if sign > 0 else (lambda v: -v))
        for op in t.ops:
            op_args[(op.name, sign)] = op.level_fn(op.magnitude, op.hparams) if op.level_fn else ()
    monkeypatch.undo()
    for outputs in native_epochs(tree, v1.Compose([*BASE, t, P]), epochs=8):
        for img, out in zip(images, outputs):
            candidates = {("skipped",): np.asarray(img)}
            for op in t.ops:
                for sign in (1, -1):
                    res = op.aug_fn(img, *op_args[(op.name, sign)], **dict(op.kwargs, resample=2))
                    candidates[(op.name, sign)] = np.asarray(res)
            found = identify(candidates, out)
            assert found, "native timm RandAugment output matches no timm op"
            counts[found[0][0]] += 1
    assert counts["skipped"] > 0 and len(counts) >= 10, counts  # p=0.5 per op, 15 ops


def test_cifar_random_crop_with_padding_is_a_torchvision_crop(tree: Path):
    base = [v1.Resize((32, 32))]
    transform = v1.Compose([*base, v1.RandomCrop(32, padding=4), v1.RandomHorizontalFlip(), P])
    assert rl.transforms.split(transform).tail is None
    ref = TorchvisionImageFolder(str(tree), transform=v1.Compose(base))
    images = [np.asarray(v1.Pad(4)(ref[i][0])) for i in range(len(ref))]
    offsets = collections.Counter()
    for outputs in native_epochs(tree, transform, epochs=6):
        for padded, out in zip(images, outputs):
            hits = [(i, j, f) for i in range(9) for j in range(9) for f in (0, 1)
                    if np.array_equal((padded[i:i + 32, j:j + 32, :][:, ::-1] if f else padded[i:i + 32, j:j + 32, :]), out)]
            assert hits, "native RandomCrop output is no crop of the padded image"
            offsets[hits[0][:2]] += 1
    assert len(offsets) >= 20  # 81 equally likely offsets, 48 draws


def test_random_erasing_erases_one_box_of_torchvision_shape(tree: Path):
    head = [*BASE, v1.ToTensor(), v1.Normalize(MEAN, STD)]
    clean, _ = native_batch(tree, v1.Compose(head))
    torch.manual_seed(5)
    loader = rl.DataLoader(rl.ImageFolder(str(tree), transform=v1.Compose([*head, v1.RandomErasing(p=0.5)])),
                           batch_size=8, fast_decode=False)
    erased = total = 0
    for _ in range(8):
        images, _ = next(iter(loader))
        for x, ref in zip(images, clean):
            total += 1
            changed = (x != ref).any(0)
            if not changed.any():
                continue
            erased += 1
            rows, cols = changed.any(1).nonzero(), changed.any(0).nonzero()
            h, w = rows.max() - rows.min() + 1, cols.max() - cols.min() + 1
            box = x[:, rows.min():rows.max() + 1, cols.min():cols.max() + 1]
            assert torch.all(box == 0)  # value=0, in normalised units, as torchvision
            assert 0.02 * 64 * 64 * 0.5 <= h * w <= 0.33 * 64 * 64 * 1.5
    assert 0.25 * total <= erased <= 0.75 * total


def test_color_jitter_applies_its_factors_in_a_random_order(tree: Path):
    jitter = v1.ColorJitter(brightness=(0.6, 0.6), contrast=(1.8, 1.8))
    images = prefix_images(tree)
    orders = collections.Counter()
    for outputs in native_epochs(tree, v1.Compose([*BASE, jitter, P]), epochs=4):
        for img, out in zip(images, outputs):
            bc = np.asarray(v1.functional.adjust_contrast(v1.functional.adjust_brightness(img, 0.6), 1.8))
            cb = np.asarray(v1.functional.adjust_brightness(v1.functional.adjust_contrast(img, 1.8), 0.6))
            found = [name for name, cand in (("bc", bc), ("cb", cb)) if np.array_equal(cand, out)]
            assert found, "native ColorJitter output is neither order of torchvision's"
            orders[found[0]] += 1
    assert orders["bc"] > 0 and orders["cb"] > 0, orders


def test_tail_after_pil_to_tensor_gets_a_uint8_tensor(tree: Path):
    transform = v1.Compose([*BASE, v1.PILToTensor(), v1.Lambda(lambda x: x.flip(-1))])
    split = rl.transforms.split(transform)
    assert split.tail_input == "uint8_tensor"
    with pytest.warns(UserWarning, match="Lambda"):
        ds = rl.ImageFolder(str(tree), transform=transform)
    image, _ = ds[0]
    ref = TorchvisionImageFolder(str(tree), transform=transform)[0][0]
    assert image.dtype == torch.uint8 and image.shape == (3, 64, 64)
    assert torch.equal(image, ref)
