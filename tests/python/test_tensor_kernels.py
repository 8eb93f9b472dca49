"""Resizes after ToImage/PILToTensor run natively with torch's kernels.

torchvision's v2 recipe converts first (``v2.ToImage()`` then ``RandomResizedCrop``...), so v2
resizes the uint8 tensor: bilinear with antialias is torch's uint8 interpolate (on CPUs where
v2 interpolates uint8 directly), nearest is torch's nearest index. The native resampler runs
those kernels itself (taps of ``TensorAxisTaps``, the horizontal pass first, a full-scale
decode), so these chains stay native and every check here is exact against torchvision applied
to the PIL image the same files open as (max |diff| 0; after ToDtype + Normalize within 1e-6,
as the float write-out's other tests). Bicubic, antialias=False and v1's float interpolation
stay in Python, with the reason.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
import torchvision.transforms.v2.functional as F
from PIL import Image
from torchvision.datasets import ImageFolder as TorchvisionImageFolder

import ringloader as rl
from imagegen import jpeg_bytes
from user_datasets import ImageFiles

IM = v2.InterpolationMode
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
# Portrait, landscape, 1:3 and small (upscaled by the 64-pixel outputs), 4:2:0 as cameras write.
SHAPES = [(203, 278), (333, 250), (120, 360), (50, 41)]


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tensor_kernels")
    d = root / "c"
    d.mkdir()
    for k, (w, h) in enumerate(SHAPES):
        (d / f"{k}.jpg").write_bytes(jpeg_bytes(w, h, seed=3600 + k))
    return root


def _native(root: Path, transform, **kwargs) -> list:
    """ds[i] (the single-sample path, any output size) and, for a fixed size, the batches."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback or a Python tail would warn
        ds = rl.ImageFolder(str(root), transform=transform)
        single = [ds[i][0] for i in range(len(ds))]
        if not rl._C.fixed_size(rl.transforms.split(transform).steps):
            return single
        loader = rl.DataLoader(ds, batch_size=1, **kwargs)
    assert loader.native
    batched = [images[0] for images, _ in loader]
    assert all(torch.equal(a, b) for a, b in zip(single, batched))
    return batched


def _torchvision(root: Path, transform) -> list:
    ref = TorchvisionImageFolder(str(root), transform=transform)
    return [ref[i][0] for i in range(len(ref))]


def _max_diff(ours, theirs) -> float:
    assert [o.shape for o in ours] == [t.shape for t in theirs]
    assert all(o.dtype == t.dtype for o, t in zip(ours, theirs))
    return max((o.double() - t.double()).abs().max().item() for o, t in zip(ours, theirs))


# Chains after the conversion with fixed draws (flips with p=1, RandomResizedCrop whose scale 1
# falls back to its central box, a RandomCrop as large as its input).
CHAINS = {
    "Resize(64)": [v2.Resize(64)],
    "Resize((50, 70))": [v2.Resize((50, 70))],
    "Resize(60, max_size=70)": [v2.Resize(60, max_size=70)],
    "Resize((130, 90)) upscale": [v2.Resize((130, 90))],
    "Resize(72) + CenterCrop(64)": [v2.Resize(72), v2.CenterCrop(64)],
    "Resize(40) + CenterCrop(64) padded": [v2.Resize(40), v2.CenterCrop(64)],
    "CenterCrop(100) + Resize((48, 40))": [v2.CenterCrop(100), v2.Resize((48, 40))],
    "flip + Resize((50, 70)) + flip": [v2.RandomHorizontalFlip(1.0), v2.Resize((50, 70)),
                                       v2.RandomVerticalFlip(1.0)],
    "RandomResizedCrop tall + flip": [v2.RandomResizedCrop(64, scale=(1, 1), ratio=(0.75, 0.75)),
                                      v2.RandomHorizontalFlip(1.0)],
    "RandomResizedCrop wide, nearest": [v2.RandomResizedCrop((40, 56), scale=(1, 1), ratio=(4 / 3, 4 / 3),
                                                             interpolation=IM.NEAREST)],
    "Resize(97, NEAREST) + CenterCrop(90)": [v2.Resize(97, interpolation=IM.NEAREST), v2.CenterCrop(90)],
    "Resize(48) + RandomCrop(48 x 48 of a square) + Pad": [v2.Resize((48, 48)), v2.RandomCrop(48), v2.Pad(2)],
    # torch's antialiased bicubic on uint8 (Keys' cubic, a = -0.5): its negative lobes
    # overshoot, saturated after each pass as torch does
    "Resize(64, BICUBIC)": [v2.Resize(64, interpolation=IM.BICUBIC)],
    "Resize((130, 90), BICUBIC) upscale": [v2.Resize((130, 90), interpolation=IM.BICUBIC)],
    "CenterCrop(100) + Resize((48, 40), BICUBIC) + flip": [
        v2.CenterCrop(100), v2.Resize((48, 40), interpolation=IM.BICUBIC),
        v2.RandomHorizontalFlip(1.0)],
    "RandomResizedCrop wide, BICUBIC": [v2.RandomResizedCrop((40, 56), scale=(1, 1), ratio=(4 / 3, 4 / 3),
                                                             interpolation=IM.BICUBIC)],
}


@pytest.mark.parametrize("conversion", [v2.ToImage, v1.PILToTensor])
@pytest.mark.parametrize("name", list(CHAINS))
def test_resizes_after_the_conversion_are_native_and_equal_torchvision(tree: Path, conversion, name):
    transform = v2.Compose([conversion(), *CHAINS[name]])
    split = rl.transforms.split(transform)
    assert split.tail is None, split.reason
    resizes = [s for s in split.steps if s["kind"] in ("resize", "random_resized_crop")]
    assert resizes and all(s.get("tensor") for s in resizes), split.steps
    assert _max_diff(_native(tree, transform), _torchvision(tree, transform)) == 0, name  # bound: exact


def test_the_canonical_v2_recipe_is_native_on_image_folder_and_image_files(tree: Path):
    # Fixed draws: the central box of scale 1, a flip with p=1. Every step native, the float
    # write-out as torchvision's (bound 1e-6, as the other ToDtype + Normalize checks).
    transform = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(64, scale=(1, 1), ratio=(1, 1), antialias=True),
                            v2.RandomHorizontalFlip(1.0), v2.ToDtype(torch.float32, scale=True),
                            v2.Normalize(MEAN, STD)])
    theirs = _torchvision(tree, transform)
    for fast_decode in (False, True):  # the tensor's kernels decode at full scale either way
        assert _max_diff(_native(tree, transform, fast_decode=fast_decode), theirs) <= 1e-6
    paths = [p for p, _ in TorchvisionImageFolder(str(tree)).samples]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(ImageFiles(paths, transform), batch_size=1)
    assert loader.native and "why:" not in loader.describe(), loader.describe()
    assert _max_diff([images[0] for images, _ in loader], theirs) <= 1e-6


def test_random_boxes_are_torchs_resize_of_the_drawn_crop(tree: Path):
    """Random draws: scale and ratio fixed, so the box's size is fixed and its place drawn. Each
    native output must equal v2's resized_crop of one of the possible boxes (every place tried)
    on the decoded tensor, and the places must differ between samples."""
    transform = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(24, scale=(0.3, 0.3), ratio=(1, 1))])
    paths = [p for p, _ in TorchvisionImageFolder(str(tree)).samples][3:]  # the 50 x 41 photo
    image = v2.functional.pil_to_tensor(Image.open(paths[0]).convert("RGB"))
    _, h, w = image.shape
    side = int(round((h * w * 0.3) ** 0.5))
    boxes = {}
    for top in range(h - side + 1):
        for left in range(w - side + 1):
            out = F.resized_crop(image, top, left, side, side, [24, 24], antialias=True)
            boxes.setdefault(out.numpy().tobytes(), (top, left))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(ImageFiles(paths * 12, transform), batch_size=4, seed=5)
    assert loader.native
    found = set()
    for images, _ in loader:
        for row in images:
            key = row.contiguous().numpy().tobytes()
            assert key in boxes, "not torch's resize of any box of the drawn size"
            found.add(boxes[key])
    assert len(found) > 3, found


def _tail(transform) -> rl.transforms.Split:
    split = rl.transforms.split(transform)
    assert split.tail is not None
    assert "tensor" in split.reason and "before" in split.reason, split.reason
    return split


@pytest.mark.parametrize("name,step", [
    ("lanczos", v2.Resize(64, interpolation=IM.LANCZOS)),
    ("bicubic, antialias=False", v2.Resize(64, interpolation=IM.BICUBIC, antialias=False)),
    ("antialias=False", v2.Resize(64, antialias=False)),
    ("RandomResizedCrop antialias=False", v2.RandomResizedCrop(64, antialias=False)),
    ("v1 bilinear (float interpolate)", v1.Resize(64)),
])
def test_other_tensor_kernels_stay_in_python_and_equal_torchvision(tree: Path, name, step):
    transform = v2.Compose([v2.ToImage(), step])
    split = _tail(transform)
    assert split.steps == [] and split.tail_names[0].endswith("Resize" if "Crop" not in name else "RandomResizedCrop")
    if "Random" in name:
        return  # random draws: the tail is torchvision's own step
    with pytest.warns(UserWarning, match="tensor"):
        ds = rl.ImageFolder(str(tree), transform=transform)
    assert _max_diff([ds[i][0] for i in range(len(ds))], _torchvision(tree, transform)) == 0


def test_the_native_chain_refuses_a_tensor_kernel_it_does_not_have():
    steps = rl.transforms.split(v2.Compose([v2.ToImage(), v2.Resize((50, 70))])).steps
    assert [s.get("tensor") for s in steps] == [True]
    assert rl._C.fixed_size(steps)
    with pytest.raises(ValueError, match="tensor=True needs interpolation bilinear, bicubic or nearest"):
        rl._C.fixed_size([dict(steps[0], interpolation="lanczos")])


def test_multi_crop_views_after_the_conversion_are_native_and_exact(tree: Path):
    """Several ImageFile views of one file (multi-crop), each ToImage first: one decode, each
    view resized with torch's kernel, equal to v2 on the PIL image (fixed draws; bound: exact)."""
    paths = [p for p, _ in TorchvisionImageFolder(str(tree)).samples]
    big = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(64, scale=(1, 1), ratio=(1, 1)),
                      v2.RandomHorizontalFlip(1.0)])
    small = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(32, scale=(1, 1), ratio=(0.75, 0.75))])

    class MultiCrop(torch.utils.data.Dataset):
        def __len__(self):
            return len(paths)

        def __getitem__(self, i):
            return [rl.ImageFile(paths[i], big), rl.ImageFile(paths[i], small)], i

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(MultiCrop(), batch_size=2)
    assert loader.native
    seen = 0
    for crops, index in loader:
        for b, i in enumerate(index.tolist()):
            with Image.open(paths[i]) as opened:
                image = opened.convert("RGB")
            for crop, t in zip(crops, (big, small)):
                assert torch.equal(crop[b], t(image).as_subclass(torch.Tensor))
                seen += 1
    assert seen == 2 * len(paths)


def test_bicubic_on_the_tensor_equals_torch_over_many_sizes(tmp_path: Path):
    """v2's antialiased bicubic Resize after ToImage natively over 24 random source and output
    sizes (downscales to a tenth, upscales to 7x, one axis alone): torch's uint8 kernel (max
    |diff| 0), saturated overshoots included."""
    import random

    rng = random.Random(41)
    root = tmp_path / "sizes"
    (root / "c").mkdir(parents=True)
    cases = []
    for k in range(24):
        w, h = rng.randint(12, 400), rng.randint(12, 400)
        ow = w if k % 6 == 0 else rng.randint(max(1, w // 10), min(7 * w, 600))
        oh = h if k % 6 == 1 else rng.randint(max(1, h // 10), min(7 * h, 600))
        (root / "c" / f"{k:02d}.jpg").write_bytes(jpeg_bytes(w, h, seed=4100 + k))
        cases.append((oh, ow))
    ref = TorchvisionImageFolder(str(root))
    for k, (oh, ow) in enumerate(cases):
        transform = v2.Compose([v2.ToImage(), v2.Resize((oh, ow), interpolation=IM.BICUBIC)])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ours = rl.ImageFolder(str(root), transform=transform)[k][0]
        want = transform(ref[k][0])
        assert ours.shape == want.shape and torch.equal(ours, want), (k, ref.samples[k][0], oh, ow)
