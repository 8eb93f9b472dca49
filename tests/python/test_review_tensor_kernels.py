"""Cases around the resizes after ToImage/PILToTensor that test_tensor_kernels.py leaves out.

torch's nearest index reads source column 0 for a 1-pixel-wide output (floor(0 * scale)), and
the last column after a horizontal flip, where Pillow's NEAREST reads the middle one. The JPEG
decoder then crops its region of interest to those columns and one more: a crop that narrow
leaves 4:2:0 chroma a single column, and libjpeg-turbo's ``jpeg_crop_scanline`` then swaps the
fancy chroma upsampler for plain replication, so the column's pixels were not the whole
decode's (off by up to 19 levels). Every check here is exact (max |diff| 0) against v2 on the
PIL image the file opens as.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torchvision.transforms.v2 as v2
import torchvision.transforms.v2.functional as F
from PIL import Image

import ringloader as rl
from imagegen import jpeg_bytes
from user_datasets import ImageFiles

NEAREST = v2.InterpolationMode.NEAREST
# 4:2:0 photos (chroma in 16-pixel MCUs): their left column, and a right column that starts an
# MCU's last two pixels (width = 2 mod 16), were each cropped to two columns.
WIDTHS = [18, 33, 50]


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> list:
    root = tmp_path_factory.mktemp("review_tensor_kernels")
    paths = []
    for w in WIDTHS:
        path = root / f"photo{w}.jpg"
        path.write_bytes(jpeg_bytes(w, 13, subsampling="4:2:0", seed=w))
        paths.append(path)
    return paths


def _decoded(path: Path) -> Image.Image:
    with Image.open(path) as opened:
        return opened.convert("RGB")


def _native(paths: list, transform, **kwargs) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # native: no fallback, no Python tail
        loader = rl.DataLoader(ImageFiles([str(p) for p in paths], transform), batch_size=1, **kwargs)
    assert loader.native
    return [images[0] for images, _ in loader]


@pytest.mark.parametrize("flip", [False, True], ids=["left-column", "right-column"])
def test_a_one_column_nearest_resize_after_to_image_reads_the_whole_decodes_column(photos, flip):
    transform = v2.Compose([v2.ToImage(), *([v2.RandomHorizontalFlip(1.0)] if flip else []),
                            v2.Resize((13, 1), interpolation=NEAREST)])
    assert rl.transforms.split(transform).steps[-1].get("tensor")
    for path, ours in zip(photos, _native(photos, transform)):
        want = transform(_decoded(path)).as_subclass(torch.Tensor)
        assert torch.equal(ours, want), (path.name, (ours.int() - want.int()).abs().max().item())


def test_a_one_column_crop_at_the_left_edge_is_the_whole_decodes_column(photos):
    """The same narrow region on the Pillow path: RandomCrop((13, 1)) draws columns of the
    18-pixel photo (a seeded generator: the same draws every run), the left one among them;
    each row equals that column of the PIL decode (bound: exact)."""
    path = photos[0]
    image = F.pil_to_tensor(_decoded(path))
    columns = {image[:, :, x:x + 1].contiguous().numpy().tobytes(): x for x in range(image.shape[2])}
    transform = v2.Compose([v2.RandomCrop((13, 1)), v2.ToImage()])
    seen = set()
    for row in _native([path] * 48, transform, generator=torch.Generator().manual_seed(3)):
        key = row.contiguous().numpy().tobytes()
        assert key in columns, "not a column of the decoded image"
        seen.add(columns[key])
    assert 0 in seen, sorted(seen)  # the draws reached the left edge
