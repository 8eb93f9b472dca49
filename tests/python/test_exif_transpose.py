"""exif_transpose=True turns images upright exactly as Pillow's ImageOps.exif_transpose, for every
EXIF orientation and every format that carries one, before the transform."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image, ImageOps

import ringloader as rl
from ringloader import transforms as T

from imagegen import pixels

FORMATS = {"JPEG": ".jpg", "PNG": ".png", "WEBP": ".webp", "TIFF": ".tif"}


def encode(image: Image.Image, fmt: str, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    if fmt == "TIFF":
        image.save(out, fmt, tiffinfo={0x0112: orientation}, compression="tiff_lzw")
    elif fmt == "WEBP":
        image.save(out, fmt, lossless=True, exif=exif.tobytes())
    else:
        image.save(out, fmt, exif=exif.tobytes())
    return out.getvalue()


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("exif")
    image = Image.fromarray(pixels(40, 24, seed=3))  # not square: rotations change the size
    for fmt, ext in FORMATS.items():
        (root / fmt).mkdir()
        for orientation in range(1, 9):
            (root / fmt / f"o{orientation}{ext}").write_bytes(encode(image, fmt, orientation))
    return root


def pillow_upright(path: str) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(ImageOps.exif_transpose(im).convert("RGB"))


def pillow_stored(path: str) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def test_every_orientation_of_every_format_as_pillow(tree: Path):
    # Pillow applies a TIFF's own Orientation tag when it reads the file, so TIFFs come upright
    # with or without exif_transpose (as torchvision's loader gives them).
    upright = rl.ImageFolder(str(tree), exif_transpose=True)
    stored = rl.ImageFolder(str(tree))
    assert len(upright) == 8 * len(FORMATS)
    for i, (path, _) in enumerate(upright.samples):
        want = pillow_upright(path)
        assert want.shape[:2] == ((24, 40) if int(Path(path).stem[1]) < 5 else (40, 24)), path
        assert np.array_equal(np.asarray(upright[i][0]), want), path
        assert np.array_equal(np.asarray(stored[i][0]), pillow_stored(path)), path


def test_transform_sees_the_upright_size(tree: Path):
    # A size-keeping step (Resize of the shorter side) and a crop: the output differs by
    # orientation unless the geometry is planned on the upright image.
    tv = torchvision.transforms
    tv_tf = tv.Compose([tv.Resize(20), tv.CenterCrop((20, 12)), tv.ToTensor()])
    ds = rl.ImageFolder(str(tree), exif_transpose=True,
                        transform=T.Compose([T.Resize(20), T.CenterCrop((20, 12)), T.ToTensor()]))
    loader = rl.DataLoader(ds, batch_size=8, num_workers=2)
    assert loader.native
    got = torch.cat([x for x, _ in loader])
    want = torch.stack([tv_tf(Image.fromarray(pillow_upright(p))) for p, _ in ds.samples])
    assert torch.equal((got * 255).round(), (want * 255).round())


def test_option_pickles_and_reaches_every_dataset(tree: Path, tmp_path: Path):
    import pickle

    listing = tmp_path / "list.txt"
    listing.write_text(f"{tree}/PNG/o6.png 0\n")
    ds = rl.FileList(listing, exif_transpose=True)
    assert pickle.loads(pickle.dumps(ds)).exif_transpose
    assert ds[0][0].size == (24, 40)
    folder = rl.DatasetFolder(str(tree), extensions=(".png",), allow_empty=True,
                              exif_transpose=True)
    index = [Path(p).name for p, _ in folder.samples].index("o6.png")
    assert folder[index][0].size == (24, 40)
