"""A Joint's RandomRotation/RandomAffine natively against v2's own draws: torchvision draws the
angle, translation, scale and shears with ``torch.empty(1).uniform_(lo, hi)``, a float32 value,
so a range pinned to one value (``scale=(0.8, 0.8)``) gives float32(0.8) on torch's path and
in ``rl.materialize``; the native step and the row's geometry record must use that same value.

Bounds: max |diff| 0 between the native row and ``rl.materialize`` of the same sample (image,
mask); float32 boxes within 1e-4 pixel (the native path moves them through the resize in
float64 before v2's kernel).
"""

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

SIZES = [(96, 72), (64, 88), (80, 80)]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("joint_affine_review")
    out = []
    for i, (w, h) in enumerate(SIZES):
        photo = root / f"photo{i}.jpg"
        photo.write_bytes(jpeg_bytes(w, h, quality=90, seed=70 + i))
        y, x = np.mgrid[:h, :w]
        mask = Image.fromarray(((x // 6 + 3 * (y // 6) + i) % 21).astype(np.uint8), "P")
        mask.putpalette(bytes(range(256)) * 3)
        mask.save(root / f"photo{i}_mask.png")
        out.append((photo, root / f"photo{i}_mask.png", (w, h)))
    return out


class Dataset(torch.utils.data.Dataset):
    def __init__(self, t, photos):
        self.t, self.photos = t, photos

    def __len__(self):
        return len(self.photos)

    def __getitem__(self, i):
        photo, mask, (w, h) = self.photos[i]
        boxes = tv_tensors.BoundingBoxes([[4, 6, 30, 20], [10, 10, w - 20, h - 20]],
                                         format="XYWH", canvas_size=(h, w), dtype=torch.float32)
        return rl.Joint(self.t, (rl.ImageFile(photo), rl.ImageFile(mask, mode="mask"),
                                 {"boxes": boxes}, i))


def _native(dataset, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(dataset, batch_size=2, collate_fn=list, **kwargs)
    assert loader.native, loader.describe()
    return sorted((s for batch in loader for s in batch), key=lambda s: s[3])


def _diff(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    return float((a.double() - b.double()).abs().max())


FILL = {tv_tensors.Mask: 255, "others": (10, 200, 30)}
PINNED = [
    v2.RandomAffine(0, scale=(0.8, 0.8)),
    v2.RandomAffine((12.0, 12.0), scale=(0.9, 0.9), shear=(5.3, 5.3, -7.1, -7.1),
                    interpolation=v2.InterpolationMode.BICUBIC, fill=FILL),
    v2.RandomRotation((17.3, 17.3), interpolation=v2.InterpolationMode.BILINEAR, fill=FILL),
]


@pytest.mark.parametrize("turn", PINNED, ids=["scale", "affine", "rotation"])
def test_a_pinned_range_equals_materialize(photos, turn):
    """v2 draws float32(0.8) for scale=(0.8, 0.8): the native row equals the sample run by v2
    itself (``rl.materialize``), image and mask exactly."""
    t = v2.Compose([v2.Resize(60), v2.RandomHorizontalFlip(p=1.0), turn, v2.PILToTensor()])
    dataset = Dataset(t, photos)
    for image, mask, target, i in _native(dataset):
        want_image, want_mask, want, _ = rl.materialize(dataset[i])
        assert _diff(image, want_image) == 0, i
        assert _diff(mask, want_mask) == 0, i
        assert _diff(target["boxes"], want["boxes"]) <= 1e-4, i


def test_recorded_draws_are_float32_values_as_torch_draws_them(photos, monkeypatch):
    """Random ranges: every angle, scale and shear the rows recorded (and turned the image by)
    is a float32 value, as ``torch.empty(1).uniform_`` gives; the translation whole pixels."""
    from ringloader.sources import _joint

    recorded = []
    resolve = _joint.resolve

    def spy(leaf, g):
        recorded.append([float(v) for v in g])
        return resolve(leaf, g)

    monkeypatch.setattr(_joint, "resolve", spy)
    t = v2.Compose([v2.Resize(60), v2.RandomAffine(20, translate=(0.2, 0.2), scale=(0.7, 1.3),
                                                   shear=(-8, 8, -4, 4)), v2.PILToTensor()])
    _native(Dataset(t, photos * 2))
    assert len(recorded) == 2 * len(photos)
    for g in recorded:
        angle, tx, ty, scale, shear_x, shear_y = g[13:19]
        for value in (angle, scale, shear_x, shear_y):
            assert float(np.float32(value)) == value, g
        assert tx == round(tx) and ty == round(ty)
    assert len({g[13] for g in recorded}) > 3  # the draws vary


def _pinned(t, g):
    """A copy of v2 chain ``t`` whose random steps make the draws a row's geometry record ``g``
    holds (RandomResizedCrop's rectangle, the flip, the rotation's or affine's draws)."""
    import copy

    t = copy.deepcopy(t)
    for step in t.transforms:
        name = type(step).__name__
        if name == "RandomHorizontalFlip":
            step.p = float(g[8])
            continue
        if name == "RandomResizedCrop":
            params = dict(top=int(g[3]), left=int(g[2]), height=int(g[5] - g[3]),
                          width=int(g[4] - g[2]))
        elif name == "RandomRotation":
            params = dict(angle=g[13])
        elif name == "RandomAffine":
            params = dict(angle=g[13], translate=(int(g[14]), int(g[15])), scale=g[16],
                          shear=(g[17], g[18]))
        else:
            continue
        step.make_params = lambda flat, params=params: dict(params)
    return t


def test_each_joint_of_a_sample_turns_by_its_own_recorded_draws(photos, monkeypatch):
    """Three Joints of one photo (the first with its mask listed before the image): each row's
    image, mask and boxes equal v2 run with the draws of that Joint's own record."""
    from ringloader.sources import _joint

    records = []
    resolve = _joint.resolve

    def spy(leaf, g):
        records.append([float(v) for v in g])
        return resolve(leaf, g)

    monkeypatch.setattr(_joint, "resolve", spy)
    fill = {tv_tensors.Mask: 255, "others": (10, 200, 30)}
    first = v2.Compose([v2.RandomResizedCrop(48), v2.RandomAffine(
        30, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=5, fill=fill), v2.PILToTensor()])
    second = v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(),
                         v2.RandomRotation(90, fill=fill), v2.PILToTensor()])

    def boxes(w, h):
        return tv_tensors.BoundingBoxes([[4, 6, 30, 20], [10, 10, w - 20, h - 20]],
                                        format="XYWH", canvas_size=(h, w), dtype=torch.float32)

    class Views(torch.utils.data.Dataset):
        def __len__(self):
            return len(photos)

        def __getitem__(self, i):
            photo, mask, (w, h) = photos[i]
            return (rl.Joint(first, (rl.ImageFile(mask, mode="mask"), rl.ImageFile(photo),
                                     boxes(w, h))),
                    rl.Joint(second, (rl.ImageFile(photo), boxes(w, h))),
                    rl.Joint(first, (rl.ImageFile(photo), boxes(w, h))), i)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(Views(), batch_size=1, collate_fn=list)
    assert loader.native, loader.describe()
    angles = set()
    for (sample,) in loader:
        i = sample[3]
        photo, mask, (w, h) = photos[i]
        with Image.open(photo) as opened:
            image = opened.convert("RGB")
        with Image.open(mask) as opened:
            labels = tv_tensors.Mask(torch.from_numpy(np.array(opened)))
        g = records.pop(0)
        got_mask, got_image, got_boxes = sample[0]
        want_mask, want_image, want_boxes = _pinned(first, g)((labels, image, boxes(w, h)))
        assert _diff(got_image, want_image) == 0 and _diff(got_mask, want_mask) == 0
        assert _diff(got_boxes, want_boxes) <= 1e-4
        angles.add(g[13])
        for chain, (got_image, got_boxes) in ((second, sample[1]), (first, sample[2])):
            g = records.pop(0)
            want_image, want_boxes = _pinned(chain, g)((image, boxes(w, h)))
            assert _diff(got_image, want_image) == 0 and _diff(got_boxes, want_boxes) <= 1e-4
            angles.add(g[13])
    assert not records and len(angles) == 3 * len(photos)  # each Joint drew its own


@pytest.mark.parametrize("wrap", [lambda t: v2.RandomApply([t], p=0.5),
                                  lambda t: v2.RandomChoice([t, v2.RandomAffine(0, translate=(0.1, 0.1))]),
                                  lambda t: v2.RandomOrder([t, v2.RandomHorizontalFlip()])],
                         ids=["RandomApply", "RandomChoice", "RandomOrder"])
def test_a_rotation_run_by_chance_stays_on_torchs_path_named(photos, wrap):
    """A rotation that may or may not run (or runs in a drawn order) has no draw the record could
    hold: the Joint falls back, the warning naming the wrapping step."""
    wrapped = wrap(v2.RandomRotation(30))
    t = v2.Compose([v2.Resize((56, 64)), wrapped, v2.PILToTensor()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Dataset(t, photos), batch_size=2, collate_fn=list)
    assert not loader.native
    message = " ".join(str(w.message) for w in caught)
    assert f"v2.{type(wrapped).__name__} at position 1" in message, message
