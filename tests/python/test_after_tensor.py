"""Steps after PILToTensor/ToImage: native only where torchvision's tensor kernels give Pillow's
levels (or, for v2's antialiased bilinear and nearest resizes, where the native resampler runs
torch's kernel: test_tensor_kernels.py), otherwise in the Python tail (with torch's kernels, as
torchvision) and a warning.

torchvision runs a step that follows PILToTensor (v1) or ToImage (v2) on the uint8 tensor:
Resize with torch's antialiased interpolate, colour steps in float. Those levels are not
Pillow's, so such a step must not run natively with Pillow's numerics. Pure pixel moves (flips,
crops, padding) and the float conversion are the same on both and stay native; each is checked
here against torchvision with max |diff| 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
from torchvision.datasets import ImageFolder as TorchvisionImageFolder

import ringloader as rl
from imagegen import jpeg_bytes

IM = v1.InterpolationMode


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("after_tensor")
    d = root / "c"
    d.mkdir()
    for k, (w, h) in enumerate([(333, 500), (300, 260), (120, 360)]):
        (d / f"{k}.jpg").write_bytes(jpeg_bytes(w, h, seed=40 + k))
    return root


def _both(root: Path, transform):
    with pytest.warns(UserWarning) as caught:
        ds = rl.ImageFolder(str(root), transform=transform)
        caught_now = list(caught)
    ours = [ds[i][0] for i in range(len(ds))]
    ref = TorchvisionImageFolder(str(root), transform=transform)
    theirs = [ref[i][0] for i in range(len(ref))]
    return ours, theirs, caught_now


def _max_diff(ours, theirs) -> float:
    assert [o.shape for o in ours] == [t.shape for t in theirs]
    assert all(o.dtype == t.dtype for o, t in zip(ours, theirs))
    return max((o.double() - t.double()).abs().max().item() for o, t in zip(ours, theirs))


# Steps torchvision runs with tensor numerics after a uint8 tensor conversion: each must go to the
# Python tail (named in the warning) and then match torchvision exactly.
TO_TENSOR = {"v1": v1.PILToTensor, "v2": v2.ToImage}
TENSOR_NUMERICS = [
    # v1 interpolates in float; v2's bicubic on uint8 runs natively (test_tensor_kernels.py),
    # its Lanczos does not.
    ("Resize bicubic (v1), lanczos (v2) + CenterCrop", lambda m: [
        m.Resize(72, interpolation=(m.InterpolationMode.BICUBIC if m is v1 else
                                    m.InterpolationMode.LANCZOS)), m.CenterCrop(64)], "Resize"),
    # Bilinear with antialias runs torch's kernel natively in v2 (test_tensor_kernels.py); without
    # antialias it is another kernel.
    ("Resize((h, w)) bilinear", lambda m: [m.Resize((50, 70), antialias=False)], "Resize"),
    ("RandomResizedCrop", lambda m: [m.RandomResizedCrop(64, scale=(1, 1), ratio=(1, 1), antialias=False)],
     "RandomResizedCrop"),
    ("ColorJitter", lambda m: [m.ColorJitter(brightness=(1.3, 1.3))], "ColorJitter"),
    ("Grayscale", lambda m: [m.Grayscale(3)], "Grayscale"),
    ("RandomRotation", lambda m: [m.RandomRotation((20, 20))], "RandomRotation"),
    ("RandomAdjustSharpness", lambda m: [m.RandomAdjustSharpness(2.0, p=1)], "RandomAdjustSharpness"),
    ("RandomAutocontrast", lambda m: [m.RandomAutocontrast(p=1)], "RandomAutocontrast"),
    ("Pad fractional fill", lambda m: [m.Pad(2, fill=7.6)], "Pad"),
]


@pytest.mark.parametrize("api", ["v1", "v2"])
@pytest.mark.parametrize("name,steps,first", TENSOR_NUMERICS, ids=[c[0] for c in TENSOR_NUMERICS])
def test_steps_with_tensor_numerics_run_in_python(tree: Path, api, name, steps, first):
    m = v1 if api == "v1" else v2
    transform = m.Compose([m.Resize(80), TO_TENSOR[api](), *steps(m)])
    split = rl.transforms.split(transform)
    assert split.tail is not None and split.tail_names[0].endswith("." + first), split
    assert split.tail_input == "uint8_tensor"
    assert "tensor" in split.reason and "before" in split.reason, split.reason
    ours, theirs, caught = _both(tree, transform)
    message = str(caught[0].message)
    assert first in message and "before" in message, message
    assert _max_diff(ours, theirs) == 0, name


# Pure pixel moves: the same on a uint8 tensor as on a PIL image, so they stay native.
PIXEL_MOVES = [
    ("flips", lambda m: [m.RandomHorizontalFlip(1.0), m.RandomVerticalFlip(1.0)]),
    ("CenterCrop smaller", lambda m: [m.CenterCrop((40, 52))]),
    ("CenterCrop larger (zero padding)", lambda m: [m.CenterCrop(96)]),
    # The padded image is 74 x 74: the crop has one position.
    ("RandomCrop padding fill", lambda m: [m.RandomCrop(74, padding=(1, 2, 9, 8), fill=7)]),
    ("Pad constant", lambda m: [m.Pad((3, 1, 4, 2))]),
    ("Pad reflect edge symmetric", lambda m: [m.Pad(5, padding_mode="reflect"), m.Pad(2, padding_mode="edge"),
                                              m.Pad(3, padding_mode="symmetric")]),
]


@pytest.mark.parametrize("api", ["v1", "v2"])
@pytest.mark.parametrize("name,steps", PIXEL_MOVES, ids=[c[0] for c in PIXEL_MOVES])
def test_pixel_moves_after_the_tensor_stay_native_and_exact(tree: Path, api, name, steps):
    m = v1 if api == "v1" else v2
    transform = m.Compose([m.Resize((64, 64)), TO_TENSOR[api](), *steps(m)])
    split = rl.transforms.split(transform)
    assert split.tail is None, split.reason
    ds = rl.ImageFolder(str(tree), transform=transform)
    ours = [ds[i][0] for i in range(len(ds))]
    ref = TorchvisionImageFolder(str(tree), transform=transform)
    assert _max_diff(ours, [ref[i][0] for i in range(len(ref))]) == 0, name


@pytest.mark.parametrize("api", ["v1", "v2"])
def test_float_conversion_and_normalize_after_the_tensor_stay_native(tree: Path, api):
    m = v1 if api == "v1" else v2
    convert = v1.ConvertImageDtype(torch.float) if api == "v1" else v2.ToDtype(torch.float32, scale=True)
    transform = m.Compose([m.Resize(80), m.CenterCrop(72), TO_TENSOR[api](), m.RandomHorizontalFlip(1.0),
                           convert, m.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    split = rl.transforms.split(transform)
    assert split.tail is None, split.reason
    ds = rl.ImageFolder(str(tree), transform=transform)
    ours = [ds[i][0] for i in range(len(ds))]
    ref = TorchvisionImageFolder(str(tree), transform=transform)
    assert _max_diff(ours, [ref[i][0] for i in range(len(ref))]) <= 1e-6


def test_the_reported_chain_matches_torchvision(tree: Path):
    # Compose([PILToTensor(), Resize(256, BICUBIC), CenterCrop(224)]): all of it after the tensor.
    transform = v1.Compose([v1.PILToTensor(), v1.Resize(256, interpolation=IM.BICUBIC), v1.CenterCrop(224)])
    split = rl.transforms.split(transform)
    assert split.steps == [] and split.tail_names[0].endswith("Resize")
    ours, theirs, _ = _both(tree, transform)
    assert _max_diff(ours, theirs) == 0


def test_a_per_channel_fill_on_the_tensor_is_torchvisions_to_refuse():
    # v1 pads a tensor with one value only: the step stays in Python, where torchvision raises.
    split = rl.transforms.split(v1.Compose([v1.PILToTensor(), v1.Pad(2, fill=(10, 20, 30))]))
    assert split.steps == [] and split.tail_names[0].endswith("Pad")


@pytest.mark.parametrize("fill", [(10, 20, 30), (123.675, 116.28, 103.53)])
def test_a_v2_per_channel_fill_on_the_tensor_stays_native_and_exact(tree: Path, fill):
    # v2 paints each channel with its own level cast to uint8 (truncated), as the native fill does.
    transform = v2.Compose([v2.Resize((64, 64)), v2.PILToTensor(),
                            v2.RandomCrop(74, padding=(1, 2, 9, 8), fill=fill), v2.Pad(3, fill=fill)])
    split = rl.transforms.split(transform)
    assert split.tail is None, split.reason
    ds = rl.ImageFolder(str(tree), transform=transform)
    ours = [ds[i][0] for i in range(len(ds))]
    ref = TorchvisionImageFolder(str(tree), transform=transform)
    assert _max_diff(ours, [ref[i][0] for i in range(len(ref))]) == 0
    assert ours[0][:, 0, 0].tolist() == [int(v) for v in fill]


def test_a_fill_torch_pads_otherwise_is_named_with_what_to_give():
    # A level over 255: torch's uint8 cast wraps it where the native fill would clamp.
    split = rl.transforms.split(v2.Compose([v2.ToImage(), v2.Pad(2, fill=(10, 20, 300))]))
    assert split.tail_names[0].endswith("Pad")
    assert "fill (10, 20, 300) is not one integer level in 0..255" in split.reason, split.reason
    assert "move it before ToImage" in split.reason and "flips, crops" not in split.reason


def test_strict_refuses_with_the_reason(tree: Path):
    transform = v2.Compose([v2.ToImage(), v2.Resize(64, interpolation=IM.LANCZOS)])
    with pytest.raises(TypeError, match="tensor.*before"):
        rl.ImageFolder(str(tree), transform=transform, strict=True)
