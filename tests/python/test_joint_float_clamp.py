"""Float boxes in an ``rl.Joint`` are clamped exactly when v2 clamps them.

v2 clamps boxes to the canvas only in the kernels of the steps that pad or crop, and only when
those run: a ``RandomZoomOut`` whose p draw said no leaves the boxes as they are, and so does a
``RandomCrop`` (``pad_if_needed`` or not) on an image of exactly its size, with nothing to pad
or crop. ``Pad``, ``CenterCrop`` and ``RandomResizedCrop`` always run their kernel. Boxes
partly and wholly outside the image show the difference (clamped or not, kept or dropped by
``SanitizeBoundingBoxes``).

Bound: boxes within 1e-4 px (max |diff|) of v2 run on the PIL photo with the parameters the
native row drew (its geometry record), canvas sizes and labels equal; ``loader.native`` True.
"""

from __future__ import annotations

import copy

import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

import ringloader as rl
from imagegen import jpeg_bytes
from test_joint_int_boxes import _rows

#: (width, height); RandomCrop(100) pads the smaller, crops the larger, leaves 100x100 alone.
SIZES = [(120, 96), (100, 100), (64, 80), (131, 97), (100, 100), (90, 110)]
BOUND = 1e-4


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("joint_float_clamp")
    out = []
    for i, (w, h) in enumerate(SIZES):
        path = root / f"photo{i}.jpg"
        path.write_bytes(jpeg_bytes(w, h, quality=90, seed=700 + i))
        out.append((path, (w, h)))
    return out


def _boxes(w, h):
    """Float XYWH boxes: inside, past the far edge, before the near edge, wholly outside on
    the right and above, and one covering the whole image with a margin."""
    xywh = [[10.5, 12.25, 40.0, 30.0], [w - 30.5, h - 40.0, 80.0, 60.0],
            [-20.0, -10.5, 35.0, 25.0], [w + 5.0, 3.0, 10.0, 10.0], [4.0, -30.0, 20.0, 12.0],
            [-3.0, -2.0, w + 6.0, h + 4.0]]
    return tv_tensors.BoundingBoxes(torch.tensor(xywh, dtype=torch.float32), format="XYWH",
                                    canvas_size=(h, w))


class Detection(torch.utils.data.Dataset):
    def __init__(self, t, photos):
        self.t, self.photos = t, photos

    def __len__(self):
        return len(self.photos)

    def target(self, i):
        w, h = self.photos[i][1]
        boxes = _boxes(w, h)
        return {"boxes": boxes, "labels": torch.arange(len(boxes)), "image_id": i}

    def __getitem__(self, i):
        return rl.Joint(self.t, (rl.ImageFile(self.photos[i][0]), self.target(i)))


def _fixed(step, params):
    step.make_params = lambda flat_inputs: dict(params)


def _pinned(t, g, size):
    """A copy of v2 chain ``t`` making the draws of the record ``g`` for an image of ``size``
    (w, h). Its first geometric step is the one that draws, so its draws are the record's
    rectangle [g2, g4) x [g3, g5) in source pixels. A RandomZoomOut of p 0 or 1 keeps its p
    (v2's own decision); one of 0.5 is taken where the rectangle leaves the image."""
    t = copy.deepcopy(t)
    w, h = size
    for step in t.transforms:
        name = type(step).__name__
        if name == "RandomHorizontalFlip":
            step.p = float(g[8])
        elif name == "RandomCrop":
            drawn = step.make_params

            def crop_params(flat, drawn=drawn):
                params = drawn(flat)  # v2's padding; the offset the row drew in it
                pad_left, pad_top = params["padding"][:2]
                return {**params, "left": int(round(g[2])) + pad_left,
                        "top": int(round(g[3])) + pad_top}

            step.make_params = crop_params
        elif name == "RandomZoomOut":
            left, top = -int(round(g[2])), -int(round(g[3]))
            canvas_w, canvas_h = int(round(g[4] - g[2])), int(round(g[5] - g[3]))
            if step.p not in (0.0, 1.0):
                step.p = float((canvas_w, canvas_h, left, top) != (w, h, 0, 0))
            _fixed(step, {"padding": [left, top, canvas_w - left - w, canvas_h - top - h]})
        elif name == "RandomIoUCrop":
            drawn = step.make_params

            def iou_params(flat, drawn=drawn):
                saved = torch.default_generator.get_state()
                torch.manual_seed(int(g[12]))  # the row's draw seed
                try:
                    return drawn(flat)
                finally:
                    torch.default_generator.set_state(saved)

            step.make_params = iou_params
    return t


def _check(rows, records, t, dataset):
    for i, ((_, got), g) in enumerate(zip(rows, records)):
        photo, size = dataset.photos[i]
        with Image.open(photo) as opened:
            image = opened.convert("RGB")
        _, want = _pinned(t, g, size)((image, dataset.target(i)))
        assert isinstance(got["boxes"], tv_tensors.BoundingBoxes)
        assert got["boxes"].dtype == torch.float32 and got["boxes"].format == want["boxes"].format
        assert tuple(got["boxes"].canvas_size) == tuple(want["boxes"].canvas_size), (i, g)
        assert got["boxes"].shape == want["boxes"].shape, (i, got["boxes"], want["boxes"], g)
        diff = float((got["boxes"] - want["boxes"]).abs().max()) if len(want["boxes"]) else 0.0
        assert diff <= BOUND, (i, got["boxes"], want["boxes"], g)
        assert torch.equal(got["labels"], want["labels"]) and got["image_id"] == i


def _unclamped(rows, records, dataset):
    """The rows whose output shows exactly the whole image (no pad, no crop)."""
    return [i for i, g in enumerate(records)
            if (g[2], g[3], g[4], g[5]) == (0.0, 0.0) + tuple(map(float, dataset.photos[i][1]))]


TAILS = {"raw": [v2.ToImage()], "sanitized": [v2.ToImage(), v2.SanitizeBoundingBoxes()]}
CHAINS = {
    "zoom_never": [v2.RandomZoomOut(side_range=(1.2, 2.0), p=0.0)],
    "zoom_always": [v2.RandomZoomOut(side_range=(1.2, 2.0), p=1.0)],
    # p=1 with a canvas of the image's own size: v2 pads by 0 and still clamps.
    "zoom_always_same_size": [v2.RandomZoomOut(side_range=(1.0, 1.0), p=1.0)],
    "zoom_half": [v2.RandomZoomOut(side_range=(1.0, 2.0), p=0.5)],
    "zoom_half_flip": [v2.RandomZoomOut(side_range=(1.0, 2.0), p=0.5),
                       v2.RandomHorizontalFlip()],
    "zoom_half_resize": [v2.RandomZoomOut(side_range=(1.0, 2.0), p=0.5), v2.Resize((64, 72))],
    "zoom_iou_flip": [v2.RandomZoomOut(p=0.5), v2.RandomIoUCrop(), v2.RandomHorizontalFlip()],
    "crop_pad_if_needed": [v2.RandomCrop(100, pad_if_needed=True)],
    "crop_pad_if_needed_resize": [v2.RandomCrop(100, pad_if_needed=True), v2.Resize((50, 50))],
    # v2 resizes in float32: a box clamped to the far edge lands at 100 * 0.6f = 60.000004,
    # which SanitizeBoundingBoxes drops; the native path replays v2's kernels, so it does too.
    "crop_pad_if_needed_resize_inexact": [v2.RandomCrop(100, pad_if_needed=True),
                                          v2.Resize((50, 60))],
    "crop_exact": [v2.RandomCrop((97, 131))],
    "pad": [v2.Pad([3, 5, 7, 2])],
    "pad_resize": [v2.Pad(4), v2.Resize((64, 64))],
    "flip_only": [v2.RandomHorizontalFlip()],
}


@pytest.mark.parametrize("tail", list(TAILS))
@pytest.mark.parametrize("name", list(CHAINS))
def test_float_boxes_clamped_where_v2_clamps(photos, monkeypatch, name, tail):
    """Each chain natively: float boxes within 1e-4 px of v2's for the row's draws, labels
    equal (SanitizeBoundingBoxes drops the same boxes)."""
    t = v2.Compose(CHAINS[name] + TAILS[tail])
    chosen = [p for p in photos if p[1] == (131, 97)] if name == "crop_exact" else photos
    dataset = Detection(t, chosen * 2)
    rows, records = _rows(dataset, monkeypatch, seed=36)
    _check(rows, records, t, dataset)
    if name in ("zoom_never", "crop_exact", "flip_only"):  # v2 never clamps these
        assert len(_unclamped(rows, records, dataset)) == len(dataset)
    if name == "zoom_always":
        assert not _unclamped(rows, records, dataset)
    if name == "zoom_always_same_size":  # yet clamped (past the edge: checked against v2)
        assert len(_unclamped(rows, records, dataset)) == len(dataset)


@pytest.mark.parametrize("seed", [0, 1, 7, 36, 1234])
@pytest.mark.parametrize("name", ["zoom_half", "zoom_half_resize", "zoom_iou_flip"])
def test_zoom_out_half_applied_and_not(photos, monkeypatch, name, seed):
    """RandomZoomOut(p=0.5) over several seeds: both outcomes occur across them, and every row
    matches v2 (1e-4 px) with SanitizeBoundingBoxes after it."""
    t = v2.Compose(CHAINS[name] + TAILS["sanitized"])
    dataset = Detection(t, photos * 2)
    rows, records = _rows(dataset, monkeypatch, seed=seed)
    _check(rows, records, t, dataset)
    kept = _unclamped(rows, records, dataset)
    assert 0 < len(kept) < len(dataset), (seed, kept)


def test_untouched_boxes_keep_their_size(photos, monkeypatch):
    """The case v2 leaves alone, by value: with the zoom-out not applied, a box running past
    the image's edge keeps its size (unclamped) and one wholly outside stays outside."""
    t = v2.Compose(CHAINS["zoom_never"] + TAILS["raw"])
    dataset = Detection(t, photos[:1])
    rows, _ = _rows(dataset, monkeypatch, seed=3)
    boxes = rows[0][1]["boxes"]
    assert torch.equal(boxes, _boxes(*photos[0][1]))
