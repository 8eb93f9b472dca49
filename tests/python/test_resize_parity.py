"""Resize parity with torchvision's PIL path for every filter and image shape.

Pillow runs its two resampling passes (each rounded to 8 bits) in an order that depends on the
sizes: the vertical pass first when the height shrinks by more than twice as many pixels as
the width. The order changes levels (by one for bilinear, by several for bicubic and lanczos,
whose overshoot is clipped in between), so portrait, square, 1:3 and 3:1 images are all checked
here, through Resize((h, w)), Resize(size), Resize + CenterCrop and RandomResizedCrop with a
fixed box. Every case must be exact (max |diff| 0) on the same decoded pixels.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
from torchvision.datasets import ImageFolder as TorchvisionImageFolder

import ringloader as rl
from imagegen import jpeg_bytes

IM = v1.InterpolationMode
FILTERS = [IM.NEAREST, IM.BOX, IM.BILINEAR, IM.HAMMING, IM.BICUBIC, IM.LANCZOS]
# (width, height): portrait (the reported cases), square, 1:3, 3:1, landscape.
SHAPES = [(203, 278), (333, 500), (300, 300), (120, 360), (360, 120), (500, 375)]


def _write_tree(root: Path, subsampling: str) -> Path:
    d = root / "c"
    d.mkdir(parents=True)
    for k, (w, h) in enumerate(SHAPES):
        (d / f"{k}_{w}x{h}.jpg").write_bytes(jpeg_bytes(w, h, seed=900 + k, subsampling=subsampling))
    return root


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return _write_tree(tmp_path_factory.mktemp("resize420"), "4:2:0")


@pytest.fixture(scope="module")
def tree444(tmp_path_factory) -> Path:
    # 4:4:4 has no chroma upsampling, so the region-of-interest decode of the fast path gives
    # the same pixels as a full decode and the streamed resampler can be compared too.
    return _write_tree(tmp_path_factory.mktemp("resize444"), "4:4:4")


def _transforms(m):
    return {
        "Resize((224, 224))": v1.Resize((224, 224), interpolation=m),
        "Resize((150, 60))": v1.Resize((150, 60), interpolation=m),
        "Resize(224)": v1.Resize(224, interpolation=m),
        "Resize(256) + CenterCrop(224)": v1.Compose([v1.Resize(256, interpolation=m), v1.CenterCrop(224)]),
        # scale (1, 1) never fits the ratio here, so torchvision falls back to its central box:
        # a tall box for 0.75, a wide one for 4/3.
        "RandomResizedCrop tall": v1.RandomResizedCrop(224, scale=(1, 1), ratio=(0.75, 0.75), interpolation=m),
        "RandomResizedCrop wide": v1.RandomResizedCrop(224, scale=(1, 1), ratio=(4 / 3, 4 / 3), interpolation=m),
    }


def _mismatches(root: Path, transform, fast_decode: bool = False) -> list[str]:
    """Per image where ``transform`` (ending in a tensor conversion) differs from torchvision."""
    split = rl.transforms.split(transform)
    assert split.tail is None, split.reason
    ds = rl.ImageFolder(str(root), transform=transform)
    ours = [images[0] for images, _ in rl.DataLoader(ds, batch_size=1, fast_decode=fast_decode)]
    ref = TorchvisionImageFolder(str(root), transform=transform)
    bad = []
    for i, image in enumerate(ours):
        theirs = ref[i][0]
        assert image.shape == theirs.shape, (ref.samples[i][0], image.shape, theirs.shape)
        diff = (image.int() - theirs.int()).abs()
        if diff.max() > 0:
            bad.append(f"{Path(ref.samples[i][0]).name}: max {int(diff.max())}, "
                       f"{float((diff > 0).float().mean()):.1%} of values")
    return bad


@pytest.mark.parametrize("m", FILTERS, ids=[m.name for m in FILTERS])
def test_every_filter_and_shape_is_exact(tree: Path, m):
    failures = {name: bad for name, t in _transforms(m).items()
                if (bad := _mismatches(tree, v1.Compose([t, v1.PILToTensor()])))}
    assert not failures, failures


@pytest.mark.parametrize("m", [IM.BILINEAR, IM.BICUBIC, IM.LANCZOS], ids=lambda m: m.name)
def test_streamed_region_decode_is_exact(tree444: Path, m):
    # fast_decode=True feeds the resampler row by row from a cropped decode. Only outputs more
    # than half the source size: smaller ones are decoded DCT-scaled, which is not exact.
    # Resize(224) has an image-dependent size and runs per sample.
    full_scale = ["Resize((224, 224))", "Resize(256) + CenterCrop(224)", "RandomResizedCrop tall",
                  "RandomResizedCrop wide"]
    failures = {name: bad for name, t in _transforms(m).items()
                if name in full_scale
                and (bad := _mismatches(tree444, v1.Compose([t, v1.PILToTensor()]), fast_decode=True))}
    assert not failures, failures


def test_v2_classes_take_the_same_path(tree: Path):
    m = v2.InterpolationMode.BICUBIC
    for t in (v2.Resize((224, 224), interpolation=m),
              v2.RandomResizedCrop(224, scale=(1, 1), ratio=(0.75, 0.75), interpolation=m)):
        assert not _mismatches(tree, v2.Compose([t, v2.PILToTensor()])), t


def test_flips_after_a_vertical_first_resize(tree: Path):
    # Flips mirror the taps of both passes: the order must hold for mirrored axes too.
    t = v1.Compose([v1.Resize((200, 180), interpolation=IM.LANCZOS), v1.RandomHorizontalFlip(1.0),
                    v1.RandomVerticalFlip(1.0), v1.PILToTensor()])
    assert not _mismatches(tree, t)
