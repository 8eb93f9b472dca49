"""A flip before a NEAREST resize: torchvision flips the PIL image, then Pillow's NEAREST picks
the source pixel under each output centre of the flipped image. Flip and nearest-neighbour
resize do not commute (a centre on a pixel edge picks the pixel to its right either way), so the
native resample must pick the mirrored centres of the flipped image, not mirror its output.
Every check here is exact: max |diff| 0 against v2 on the PIL image the user's own code opens
(and, for a Joint's mask, v2 on the ``tv_tensors.Mask``, resized with torch's nearest)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

import ringloader as rl
from imagegen import jpeg_bytes

NEAREST = v2.InterpolationMode.NEAREST
# Landscape, portrait, square and odd-sized photos (subsampled JPEG, as cameras write them).
SIZES = [(211, 150), (150, 203), (170, 170), (257, 131)]

CHAINS = {
    "hflip-resize": [v2.RandomHorizontalFlip(p=1.0), v2.Resize(97, interpolation=NEAREST)],
    "vflip-resize-crop": [v2.RandomVerticalFlip(p=1.0), v2.Resize(97, interpolation=NEAREST),
                          v2.CenterCrop(90)],
    "both-flips-upscale": [v2.RandomHorizontalFlip(p=1.0), v2.RandomVerticalFlip(p=1.0),
                           v2.Resize((301, 233), interpolation=NEAREST)],
    "crop-flip-resize": [v2.CenterCrop((120, 140)), v2.RandomHorizontalFlip(p=1.0),
                         v2.Resize((77, 61), interpolation=NEAREST)],
    "pad-flip-resize": [v2.Pad((7, 3, 2, 5)), v2.RandomHorizontalFlip(p=1.0),
                        v2.RandomVerticalFlip(p=1.0), v2.Resize((91, 83), interpolation=NEAREST)],
    "flip-resize-flip": [v2.RandomHorizontalFlip(p=1.0), v2.Resize(97, interpolation=NEAREST),
                         v2.RandomHorizontalFlip(p=1.0)],
    "resize-then-flip": [v2.Resize(97, interpolation=NEAREST), v2.RandomHorizontalFlip(p=1.0)],
    "flip-bilinear": [v2.RandomHorizontalFlip(p=1.0), v2.Resize(97)],
}


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("flip_nearest")
    rng = np.random.default_rng(7)
    out = []
    for i, (w, h) in enumerate(SIZES):
        photo = root / f"photo{i}.jpg"
        photo.write_bytes(jpeg_bytes(w, h, quality=88, seed=70 + i))
        labels = np.zeros((h, w), np.uint8)
        for label in range(1, 6):
            x, y = int(rng.integers(0, w - 20)), int(rng.integers(0, h - 20))
            labels[y:y + int(rng.integers(8, h - y)), x:x + int(rng.integers(8, w - x))] = label
        Image.fromarray(labels, "L").save(root / f"mask{i}.png")
        out.append((photo, root / f"mask{i}.png", (w, h)))
    return out


def _opened(path):
    with Image.open(path) as image:
        return image.convert("RGB")


class Photos(torch.utils.data.Dataset):
    def __init__(self, t, photos):
        self.t, self.photos = t, photos

    def __len__(self):
        return len(self.photos)

    def __getitem__(self, i):
        return rl.ImageFile(self.photos[i][0], transform=self.t), i


class Scenes(Photos):
    def boxes(self, i):
        w, h = self.photos[i][2]
        return tv_tensors.BoundingBoxes([[10.0, 12.5, w - 30.0, h - 20.0]], format="XYXY",
                                        canvas_size=(h, w))

    def __getitem__(self, i):
        photo, mask, _ = self.photos[i]
        return rl.Joint(self.t, {"image": rl.ImageFile(photo), "index": i,
                                 "mask": rl.ImageFile(mask, mode="mask"), "boxes": self.boxes(i)})


def _native(dataset):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # natively, with no warning
        loader = rl.DataLoader(dataset, batch_size=2, collate_fn=list)
    assert loader.native
    return [row for batch in loader for row in batch]


def _diff(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a.double() - b.double()).abs().max())


@pytest.mark.parametrize("name", list(CHAINS))
def test_classification_path_equals_v2_on_pil(photos, name):
    """Bound: max |diff| 0 against v2 on the PIL photo."""
    t = v2.Compose(CHAINS[name] + [v2.PILToTensor()])
    rows = _native(Photos(t, photos))
    assert len(rows) == len(photos)
    for image, i in rows:
        assert _diff(image, t(_opened(photos[int(i)][0]))) == 0, (name, int(i))


@pytest.mark.parametrize("name", list(CHAINS))
def test_joint_image_and_mask_equal_v2(photos, name):
    """Bound: max |diff| 0 for the image (v2 on PIL) and the mask (v2 on a tv_tensors.Mask);
    boxes within 1e-4 px (the native path moves them in float64)."""
    t = v2.Compose(CHAINS[name] + [v2.ToImage()])
    dataset = Scenes(t, photos)
    rows = _native(dataset)
    assert len(rows) == len(photos)
    for row in rows:
        i = row["index"]
        with Image.open(photos[i][1]) as mask:
            labels = tv_tensors.Mask(torch.from_numpy(np.array(mask)))
        want = t({"image": _opened(photos[i][0]), "mask": labels, "boxes": dataset.boxes(i)})
        assert _diff(row["image"], want["image"]) == 0, (name, i)
        assert _diff(row["mask"], want["mask"]) == 0, (name, i)
        torch.testing.assert_close(row["boxes"], want["boxes"], atol=1e-4, rtol=0)
