"""``fast_decode`` levels: False (exact, the default), True / "scale" (a reduced DCT scale that
still covers the crop at the target size) and "fastest" (a scale covering 3/4 of it, enlarged
by the resampler, and the fast integer IDCT); bad values are refused naming the argument, and
every source that decodes JPEG natively takes the level.

The M/8 choice itself is unit-tested in C++ (jpeg_decoder_test: JpegDecoderScale.*); the
measured fidelity of each level is bench/fast_decode_fidelity.py's (docs/performance.md).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms as tvt
from PIL import Image

import ringloader as rl

from user_datasets import ImageFiles

from imagegen import jpeg_bytes

# An ordinary photo (ImageNet-sized) and a large one.
SIZES = [(500, 375), (2048, 1536)]
# On the 500x375 photo the crop is 375 source pixels: 4/8 gives 187 < 224, so "scale" decodes
# at 8/8 (exactly), while 187 >= 3/4 * 224 lets "fastest" decode at 4/8.
EVAL = [tvt.Resize(224), tvt.CenterCrop(224)]


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a.double() - b.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("photos")
    (root / "a").mkdir()
    for i, (w, h) in enumerate(SIZES):
        (root / "a" / f"{i}_{w}x{h}.jpg").write_bytes(jpeg_bytes(w, h, quality=90, seed=700 + i))
    return root


def reference(ds) -> torch.Tensor:
    return torch.stack([tvt.Compose(EVAL + [tvt.PILToTensor()])(Image.open(p).convert("RGB"))
                        for p, _ in ds.samples])


def batch(ds, **kw) -> torch.Tensor:
    images, _ = next(iter(rl.DataLoader(ds, batch_size=len(ds), **kw)))
    return images


def test_each_level_against_torchvision(photos: Path):
    ds = rl.ImageFolder(photos, transform=tvt.Compose(EVAL))
    ref = reference(ds)
    # The default and False: exactly torchvision's pixels.
    assert torch.equal(batch(ds), ref)
    assert torch.equal(batch(ds, fast_decode=False), ref)
    # "scale" (and True, the same level): the ordinary photo's crop is not twice the output,
    # so it decodes at full scale, exactly; the large photo at a reduced scale that covers the
    # output, within the bound the manual states (PSNR >= 35 dB, max |diff| <= 32).
    scale = batch(ds, fast_decode="scale")
    assert torch.equal(batch(ds, fast_decode=True), scale)
    assert torch.equal(scale[0], ref[0])
    assert 0 < int((scale[1].int() - ref[1].int()).abs().max()) <= 32
    assert psnr(scale[1], ref[1]) >= 35.0
    # "fastest" engages on the ordinary photo too (4/8, enlarged by 224/187; the large one at
    # 1/8, enlarged by 224/192): softer, within PSNR >= 30 dB and mean |diff| < 6 levels
    # (measured 32.1 and 35.5 dB, 4.8 and 3.2 levels).
    fastest = batch(ds, fast_decode="fastest")
    for i in range(len(SIZES)):
        assert not torch.equal(fastest[i], ref[i]), SIZES[i]
        assert psnr(fastest[i], ref[i]) >= 30.0, SIZES[i]
        assert float((fastest[i].double() - ref[i].double()).abs().mean()) < 6.0, SIZES[i]


@pytest.mark.parametrize("value", ["fast", "True", 2, 0.5])
def test_bad_values_are_refused_naming_the_argument(photos: Path, value):
    ds = rl.ImageFolder(photos, transform=tvt.Compose(EVAL))
    with pytest.raises(ValueError, match=r"fast_decode must be False \(or 'off'\), True \(or "
                                         r"'scale'\) or 'fastest'; got '"):
        rl.DataLoader(ds, batch_size=2, fast_decode=value)


def test_level_names_come_from_the_native_parser():
    assert [rl._C.fast_decode_level(v) for v in (False, True, "off", "scale", "fastest")] == [
        "off", "scale", "off", "scale", "fastest"]
    # What the DataLoader passes on: False for the exact default, else the level's name.
    from ringloader.core._options import _check_fast_decode
    # None (a config's unset value) stays off, as bool(None) was before the levels.
    assert [_check_fast_decode(v) for v in (False, True, np.bool_(True), "off", "fastest", None)] == [
        False, "scale", "scale", False, "fastest", False]


class _Bytes(ImageFiles):
    """The same images held in memory (rl.ImageBytes)."""

    def __getitem__(self, i):
        return rl.ImageBytes(Path(self.paths[i]).read_bytes(), transform=self.transform), i


@pytest.mark.parametrize("level", ["scale", "fastest"])
def test_every_native_jpeg_source_takes_the_level(photos: Path, level):
    folder = rl.ImageFolder(photos, transform=tvt.Compose(EVAL))
    paths = [p for p, _ in folder.samples]
    expected = batch(folder, fast_decode=level)
    assert not torch.equal(expected, reference(folder))
    for ds in (ImageFiles(paths, tvt.Compose(EVAL)), _Bytes(paths, tvt.Compose(EVAL))):
        loader = rl.DataLoader(ds, batch_size=len(paths), fast_decode=level)
        assert loader.native, type(ds).__name__
        images, _ = next(iter(loader))
        assert torch.equal(images, expected), type(ds).__name__
