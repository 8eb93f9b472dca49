"""Zero padding after, before and between crops and resizes, against torchvision's PIL path.

Padding (Pad, RandomCrop's padding and pad_if_needed, a CenterCrop larger than the image) fuses
into the resample: pixels a crop has cut off must come back as zeros when a later step pads over
them, and a resize after padding must blend those zeros in as Pillow does. Every case must be
exact (max |diff| 0) on the same decoded pixels (lossless PNG, so the decoder plays no part).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
from torchvision.datasets import ImageFolder as TorchvisionImageFolder

import ringloader as rl
from imagegen import _encode_other
from test_resize_parity import _mismatches

IM = v1.InterpolationMode
# (width, height): portrait, square, landscape, odd and small.
SHAPES = [(100, 120), (64, 64), (90, 70), (33, 47)]


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("croppad")
    d = root / "c"
    d.mkdir()
    for k, (w, h) in enumerate(SHAPES):
        (d / f"{k}_{w}x{h}.png").write_bytes(_encode_other(w, h, "PNG", seed=300 + k))
    return root


CASES = {
    "Resize + CenterCrop + Pad": [v1.Resize(80), v1.CenterCrop(64), v1.Pad((3, 1, 4, 2))],
    "CenterCrop + larger CenterCrop": [v1.CenterCrop(64), v1.CenterCrop(96)],
    "CenterCrop larger than the image": [v1.CenterCrop((130, 110))],
    "CenterCrop + Pad + CenterCrop": [v1.CenterCrop(50), v1.Pad((-3, 2, 1, -4)), v1.CenterCrop(60)],
    "CenterCrop + RandomCrop padding (no draw)": [v1.CenterCrop(30), v1.RandomCrop(38, padding=4)],
    "CenterCrop + Pad + Resize": [v1.CenterCrop(40), v1.Pad(5), v1.Resize((50, 50))],
    "larger CenterCrop + Resize bicubic": [v1.CenterCrop(96), v1.Resize((48, 30), interpolation=IM.BICUBIC)],
    "larger CenterCrop + Resize lanczos + flip": [
        v1.CenterCrop((70, 140)), v1.Resize((35, 44), interpolation=IM.LANCZOS), v1.RandomHorizontalFlip(1.0)],
    "larger CenterCrop + Resize nearest": [v1.CenterCrop(70), v1.Resize((25, 25), interpolation=IM.NEAREST)],
    "Pad + CenterCrop + Resize box + vflip": [
        v1.Pad((7, 0, 2, 9)), v1.CenterCrop(44), v1.Resize((20, 31), interpolation=IM.BOX),
        v1.RandomVerticalFlip(1.0)],
}


@pytest.mark.parametrize("name", list(CASES))
def test_zero_padding_chains_are_exact(tree: Path, name: str):
    assert not _mismatches(tree, v1.Compose(CASES[name] + [v1.PILToTensor()]))


def test_v2_center_crop_then_pad(tree: Path):
    t = v2.Compose([v2.Resize(80), v2.CenterCrop(64), v2.Pad([3, 1, 4, 2]), v2.PILToTensor()])
    assert not _mismatches(tree, t)


def _window_of(image: torch.Tensor, padded: torch.Tensor) -> bool:
    """Whether `image` (C,H,W) equals some window of `padded` (torchvision's deterministic
    padding before the random crop draws a position)."""
    _, h, w = image.shape
    _, ph, pw = padded.shape
    return any(torch.equal(padded[:, t:t + h, l:l + w], image)
               for t in range(ph - h + 1) for l in range(pw - w + 1))


@pytest.mark.parametrize("random_crop", [
    v1.RandomCrop(32, padding=4),
    v1.RandomCrop((40, 28), padding=(2, 5), pad_if_needed=True),
    v1.RandomCrop(48, pad_if_needed=True),
], ids=["padding", "padding+pad_if_needed", "pad_if_needed"])
def test_random_crop_after_a_smaller_crop_shows_zeros(tree: Path, random_crop):
    # The position differs from torchvision's draw, so each output must equal the crop of
    # torchvision's padded image at some position: image pixels the first crop cut off may
    # not appear in the padding.
    prefix = [v1.Resize(60), v1.CenterCrop(36)]
    t = v1.Compose(prefix + [random_crop, v1.PILToTensor()])
    assert rl.transforms.split(t).tail is None
    ds = rl.ImageFolder(str(tree), transform=t)
    ref = TorchvisionImageFolder(str(tree), transform=v1.Compose(prefix + [v1.PILToTensor()]))
    size = random_crop.size
    for epoch_seed in range(3):
        torch.manual_seed(epoch_seed)
        ours = [x[0] for x, _ in rl.DataLoader(ds, batch_size=1)]
        for i, image in enumerate(ours):
            base = ref[i][0]
            pad = random_crop.padding or 0
            padded = v1.functional.pad(base, pad) if pad else base
            _, ph, pw = padded.shape
            if random_crop.pad_if_needed:
                if pw < size[1]:
                    padded = v1.functional.pad(padded, [size[1] - pw, 0])
                if ph < size[0]:
                    padded = v1.functional.pad(padded, [0, size[0] - ph])
            assert image.shape[1:] == torch.Size(size)
            assert _window_of(image, padded), (ref.samples[i][0], epoch_seed)


def test_a_second_resize_goes_to_the_python_tail_and_is_exact(tree: Path):
    """One fused resample cannot equal torchvision's two (the second filters the first's rounded
    levels): the second resize and what follows run in Python, with the warning, and the result
    is torchvision's."""
    t = v1.Compose([v1.Resize(80), v1.CenterCrop(64), v1.Pad((3, 1, 4, 2)), v1.Resize((33, 40)),
                    v1.PILToTensor()])
    split = rl.transforms.split(t)
    assert [s["kind"] for s in split.steps] == ["resize", "center_crop", "pad"]
    assert split.tail_names[0].endswith("Resize") and "second resize" in split.reason
    with pytest.warns(UserWarning, match="second resize"):
        ds = rl.ImageFolder(str(tree), transform=t)
    ref = TorchvisionImageFolder(str(tree), transform=t)
    for i in range(len(ref)):
        assert torch.equal(ds[i][0], ref[i][0]), ref.samples[i][0]


@pytest.mark.parametrize("steps", [
    [v1.Pad(3, fill=(123.675, 116.28, 103.53))],
    [v1.Resize(40), v1.Pad(2, fill=(0.6, 255.9, 254.5)), v1.Pad(1, fill=100.5)],
], ids=["fused-fill", "image-stage-fills"])
def test_a_fractional_fill_is_truncated_as_torchvision_does(tree: Path, steps):
    # torchvision makes a fill an int (Pillow's path: int(x); a uint8 tensor's: the cast), so
    # 123.675 pads with 123, not 124.
    assert not _mismatches(tree, v1.Compose(steps + [v1.PILToTensor()]))
