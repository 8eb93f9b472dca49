"""Damaged JPEG scan data: ringloader's verdict against Pillow's on the same bytes.

``strict_decode=False`` refuses exactly the files Pillow refuses; the default (strict) also
refuses what libjpeg only warns about (it decodes past the damage into wrong pixels). The verdict
does not depend on the crop: the scan is read to its end also when a sample needs a few rows."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image
from torch.utils.data import Subset

import ringloader as rl
from ringloader import transforms as T

from imagegen import DAMAGED_JPEG_CASES, damaged_jpeg_cases

NAMES = sorted(DAMAGED_JPEG_CASES)
# A resize reads every row; a small centre crop reads only a few rows in the middle.
TRANSFORMS = {
    "resize": T.Compose([T.Resize((48, 48)), T.ToTensor()]),
    "center_crop": T.Compose([T.CenterCrop(8), T.ToTensor()]),
}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("damaged")
    (root / "a").mkdir()
    for i, (name, data) in enumerate(sorted(damaged_jpeg_cases().items())):
        (root / "a" / f"{i:02d}_{name}.jpg").write_bytes(data)
    return root


def pillow_accepts(path: Path) -> bool:
    try:
        Image.open(io.BytesIO(path.read_bytes())).convert("RGB")
    except (OSError, SyntaxError):  # UnidentifiedImageError is an OSError
        return False
    return True


def verdict(ds: rl.ImageFolder, index: int, strict: bool):
    """None when the sample decodes, else its SampleError."""
    try:
        for _ in rl.DataLoader(Subset(ds, [index]), batch_size=1, strict_decode=strict):
            pass
    except rl.SampleError as e:
        return e
    return None


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
def test_lenient_verdict_is_pillows(root: Path, transform: str):
    ds = rl.ImageFolder(root, transform=TRANSFORMS[transform])
    for index, name in enumerate(NAMES):
        path = Path(ds.samples[index][0])
        assert path.name.endswith(name + ".jpg")
        error = verdict(ds, index, strict=False)
        assert (error is None) == pillow_accepts(path), (name, error)
        assert (error is None) == (DAMAGED_JPEG_CASES[name][0] != "fatal"), (name, error)
        if error is not None:
            assert error.path == str(path) and error.index == index


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
def test_strict_refuses_what_libjpeg_warns_about(root: Path, transform: str):
    ds = rl.ImageFolder(root, transform=TRANSFORMS[transform])
    for index, name in enumerate(NAMES):
        category = DAMAGED_JPEG_CASES[name][0]
        error = verdict(ds, index, strict=True)
        assert (error is None) == (category == "intact"), (name, error)
        if category == "warns":
            assert "corrupt JPEG data" in error.reason and "strict_decode=false" in error.reason
            assert name in str(error)


def test_single_sample_access_is_strict(root: Path):
    ds = rl.ImageFolder(root, transform=TRANSFORMS["resize"])
    index = NAMES.index("scan_run_of_fe")
    with pytest.raises(rl.SampleError, match="corrupt JPEG data"):
        ds[index]
    assert ds[NAMES.index("padding_before_eoi")][0].shape == (3, 48, 48)


def test_skip_policy_counts_damaged_files(root: Path):
    ds = rl.ImageFolder(root, transform=TRANSFORMS["resize"])
    # Most of these files are damaged: all of them skipped is what is checked.
    loader = rl.DataLoader(ds, batch_size=4, on_error="skip", max_skipped_fraction=1)
    delivered = sum(len(y) for _, y in loader)
    intact = sum(1 for c, _ in DAMAGED_JPEG_CASES.values() if c == "intact")
    assert delivered == intact
    assert loader.stats()["skipped"] == len(NAMES) - intact


def test_generic_path_refuses_lenient_decoding(root: Path):
    with pytest.warns(UserWarning, match="run per sample in Python"):
        ds = rl.ImageFolder(root, transform=lambda image: image.size)
    with pytest.raises(ValueError, match="strict_decode"):
        rl.DataLoader(ds, batch_size=2, strict_decode=False)
