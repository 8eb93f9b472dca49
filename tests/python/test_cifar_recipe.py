"""The CIFAR training recipe runs natively: RandomCrop(32, padding=4, padding_mode="reflect"),
then RandomHorizontalFlip, ToTensor and Normalize.

Reflect padding cannot fuse into the resample, so it runs on the 8-bit image; the flip after it
mirrors that image. The crop position and flip are drawn by ringloader's generator, so each
output must equal torchvision's result for one of the 81 positions and 2 flips: the levels
exactly, the normalised floats within the float rounding of the fused ToTensor + Normalize.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
from PIL import Image

import ringloader as rl
from imagegen import _encode_other, jpeg_bytes

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cifar")
    for cls in ("a", "b"):
        (root / cls).mkdir()
    for k in range(6):
        cls = "ab"[k % 2]
        if k < 3:
            (root / cls / f"{k}.png").write_bytes(_encode_other(32, 32, "PNG", seed=500 + k))
        else:
            (root / cls / f"{k}.jpg").write_bytes(jpeg_bytes(32, 32, seed=500 + k))
    return root


def _recipe(m, tail):
    return m.Compose([m.RandomCrop(32, padding=4, padding_mode="reflect"), m.RandomHorizontalFlip(), *tail])


def _candidates(path: str, to_output) -> list[torch.Tensor]:
    """torchvision's output for every crop position and flip of the reflect-padded image."""
    with Image.open(path) as im:
        padded = v1.functional.pad(im.convert("RGB"), 4, padding_mode="reflect")
    out = []
    for top in range(9):
        for left in range(9):
            crop = v1.functional.crop(padded, top, left, 32, 32)
            out += [to_output(crop), to_output(v1.functional.hflip(crop))]
    return out


@pytest.mark.parametrize("m", [v1, v2], ids=["v1", "v2"])
def test_cifar_recipe_is_native_and_exact(tree: Path, m):
    tail = ([m.ToTensor(), m.Normalize(MEAN, STD)] if m is v1 else
            [m.ToImage(), m.ToDtype(torch.float32, scale=True), m.Normalize(MEAN, STD)])
    transform = _recipe(m, tail)
    levels = _recipe(m, [m.PILToTensor()] if m is v1 else [m.ToImage()])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        ds = rl.ImageFolder(str(tree), transform=transform)
        ds_levels = rl.ImageFolder(str(tree), transform=levels)
    loader = rl.DataLoader(ds, batch_size=3)
    assert loader.native
    normalize = m.Compose(tail)  # the recipe's own conversion: v1 divides by 255, v2 multiplies
    positions = set()
    for seed in range(3):
        torch.manual_seed(seed)
        floats = torch.cat([x for x, _ in loader])
        torch.manual_seed(seed)
        uint8 = torch.cat([x for x, _ in rl.DataLoader(ds_levels, batch_size=3)])
        for i, (path, _) in enumerate(ds.samples):
            # The uint8 chain draws the same positions: find which one, then compare the floats.
            cands = _candidates(path, v1.functional.pil_to_tensor)
            hits = [k for k, c in enumerate(cands) if torch.equal(c, uint8[i])]
            assert hits, f"{path}: no crop position and flip of the padded image gives this output"
            positions.add(hits[0])
            expected = normalize(v1.functional.to_pil_image(cands[hits[0]]))
            # Each level's float is computed once as torch's steps compute it: bit for bit.
            assert torch.equal(floats[i], expected), (path, (floats[i] - expected).abs().max().item())
    assert len(positions) >= 8  # 162 equally likely (position, flip) pairs, 18 draws


def test_a_resize_after_reflect_padding_names_the_reason(tree: Path):
    t = v1.Compose([v1.RandomCrop(32, padding=4, padding_mode="reflect"), v1.RandomHorizontalFlip(),
                    v1.Resize(24), v1.PILToTensor()])
    split = rl.transforms.split(t)
    assert split.tail_names[0].endswith("Resize")
    assert "RandomCrop with padding_mode='reflect' runs on the 8-bit image" in split.reason
    with pytest.warns(UserWarning, match="padding_mode='reflect'"):
        rl.ImageFolder(str(tree), transform=t)
