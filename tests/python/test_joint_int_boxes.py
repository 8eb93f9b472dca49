"""Integer boxes (COCO-style int64 XYWH/XYXY) in an ``rl.Joint`` through the common detection
chains, natively: ``RandomResizedCrop`` + flip, ``RandomCrop`` -> ``Resize`` (padding where
needed), ``Pad`` -> ``Resize``, ``CenterCrop`` -> ``RandomRotation`` and the ``ssd`` preset's
``RandomZoomOut`` + ``RandomIoUCrop`` + flip. v2 rounds integer boxes at every step; natively
each step's own v2 kernel runs with the draws the native render made (the row's geometry
record), so the boxes are v2's.

Bounds: boxes max |diff| 0 and dtype int64 against v2 run on the PIL image with the row's draws
(degenerate and out-of-frame boxes among them; labels after ``SanitizeBoundingBoxes`` equal);
the image max |diff| 0 against the same v2 run (so image and boxes are aligned), except in the
``ssd`` chain, whose photometric draws are not recorded (its image is checked in
``test_detection_ssd.py``).
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

import ringloader as rl
from imagegen import jpeg_bytes

SIZES = [(120, 96), (97, 131), (150, 100), (100, 100), (64, 80), (131, 97)]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("joint_int_boxes")
    out = []
    for i, (w, h) in enumerate(SIZES):
        path = root / f"photo{i}.jpg"
        path.write_bytes(jpeg_bytes(w, h, quality=90, seed=300 + i))
        out.append((path, (w, h)))
    return out


def _boxes(w, h, fmt):
    """COCO-style integer boxes: ordinary, at the far edge, zero-width, partly and wholly out
    of frame, tiny."""
    xywh = [[10, 12, 60, 50], [w - 30, h - 40, 80, 60], [5, 5, 0, 10], [-20, -10, 15, 15],
            [w + 5, 3, 10, 10], [20, 30, 2, 3], [30, 20, 25, 40]]
    boxes = tv_tensors.BoundingBoxes(torch.tensor(xywh, dtype=torch.int64), format="XYWH",
                                     canvas_size=(h, w))
    return v2.ConvertBoundingBoxFormat(fmt)(boxes) if fmt != "XYWH" else boxes


class Detection(torch.utils.data.Dataset):
    def __init__(self, t, photos, fmt="XYWH", dtype=torch.int64):
        self.t, self.photos, self.fmt, self.dtype = t, photos, fmt, dtype

    def __len__(self):
        return len(self.photos)

    def target(self, i):
        w, h = self.photos[i][1]
        boxes = _boxes(w, h, self.fmt)
        if self.dtype != torch.int64:
            boxes = tv_tensors.wrap(boxes.to(self.dtype), like=boxes)
        return {"boxes": boxes, "labels": torch.arange(len(boxes)), "image_id": i}

    def __getitem__(self, i):
        return rl.Joint(self.t, (rl.ImageFile(self.photos[i][0]), self.target(i)))


def _rows(dataset, monkeypatch, seed=36):
    """The native rows of ``dataset`` in order, each with its geometry record; no warning."""
    from ringloader.sources import _joint

    records = []
    resolve = _joint.resolve

    def spy(leaf, g):
        records.append([float(v) for v in g])
        return resolve(leaf, g)

    monkeypatch.setattr(_joint, "resolve", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(dataset, batch_size=1, collate_fn=list,
                               generator=torch.Generator().manual_seed(seed))
        rows = [row for (row,) in loader]
    assert loader.native, loader.describe()
    assert len(records) == len(rows) == len(dataset)
    return rows, records


def _fixed(step, params):
    step.make_params = lambda flat_inputs: dict(params)


def _pinned(t, g, size):
    """A copy of v2 chain ``t`` whose random steps make the draws the record ``g`` holds, for
    an image of ``size`` (w, h): each geometric step here is the first, so its draws are the
    record's rectangle in source pixels; the rotation's angle and the IoU crop's seed are
    recorded as they are."""
    t = copy.deepcopy(t)
    w, h = size
    for step in t.transforms:
        name = type(step).__name__
        if name == "RandomHorizontalFlip":
            step.p = float(g[8])
        elif name == "RandomVerticalFlip":
            step.p = float(g[9])
        elif name == "RandomResizedCrop":
            _fixed(step, dict(top=int(g[3]), left=int(g[2]), height=int(g[5] - g[3]),
                              width=int(g[4] - g[2])))
        elif name == "RandomCrop":
            drawn = step.make_params
            mirrored = any(type(s).__name__ == "RandomHorizontalFlip" and g[8]
                           for s in t.transforms[:t.transforms.index(step)])

            def crop_params(flat, drawn=drawn, mirrored=mirrored):
                params = drawn(flat)  # v2's padding; the offset the row drew in it
                pad_left, pad_top, pad_right = params["padding"][:3]
                left = int(g[2]) + pad_left
                if mirrored:  # the record's rectangle is the unflipped source's
                    left = w + pad_left + pad_right - params["width"] - left
                return {**params, "left": left, "top": int(g[3]) + pad_top}

            step.make_params = crop_params
        elif name == "RandomRotation":
            _fixed(step, {"angle": g[13]})
        elif name == "RandomZoomOut":
            canvas_w, canvas_h = int(g[6]), int(g[7])
            left, top = -int(g[2]), -int(g[3])
            step.p = float((canvas_w, canvas_h) != (w, h))
            _fixed(step, {"padding": [left, top, canvas_w - left - w, canvas_h - top - h]})
        elif name == "RandomIoUCrop":
            drawn = step.make_params

            def iou_params(flat, drawn=drawn):
                saved = torch.default_generator.get_state()
                torch.manual_seed(int(g[12]))  # the row's draw seed (views.h kGeoDrawSeed)
                try:
                    return drawn(flat)
                finally:
                    torch.default_generator.set_state(saved)

            step.make_params = iou_params
    return t


def _v2(t, dataset, i, g):
    photo, size = dataset.photos[i]
    with Image.open(photo) as opened:
        image = opened.convert("RGB")
    return _pinned(t, g, size)((image, dataset.target(i)))


def _check(rows, records, t, dataset, image=True):
    for i, ((got_image, got), g) in enumerate(zip(rows, records)):
        want_image, want = _v2(t, dataset, i, g)
        assert got["boxes"].dtype == torch.int64 and isinstance(got["boxes"],
                                                                tv_tensors.BoundingBoxes)
        assert got["boxes"].format == want["boxes"].format
        assert tuple(got["boxes"].canvas_size) == tuple(want["boxes"].canvas_size), i
        assert torch.equal(got["boxes"], want["boxes"]), (i, got["boxes"], want["boxes"], g)
        assert torch.equal(got["labels"], want["labels"]) and got["image_id"] == i
        if image:
            assert got_image.shape == want_image.shape
            assert int((got_image.int() - want_image.int()).abs().max()) == 0, i


TAIL = [v2.ToImage()]
SANITIZE = [v2.ToImage(), v2.SanitizeBoundingBoxes()]
CHAINS = {
    "rrc_flip": [v2.RandomResizedCrop(64), v2.RandomHorizontalFlip()],
    "crop_resize": [v2.RandomCrop(90, pad_if_needed=True), v2.Resize((64, 64))],
    "padded_crop_resize": [v2.RandomCrop(70, padding=[3, 8]), v2.Resize(50)],
    "flip_crop_resize": [v2.RandomHorizontalFlip(), v2.RandomCrop(80, pad_if_needed=True),
                         v2.Resize((48, 48))],
    "pad_resize": [v2.Pad(4), v2.Resize((64, 64))],
    "pad_sides_resize": [v2.Pad([3, 5, 7, 2]), v2.Resize(50, max_size=70)],
    "centre_rotation": [v2.CenterCrop(80), v2.RandomRotation(10)],
    "centre_pads_rotation": [v2.CenterCrop((110, 90)), v2.RandomRotation(15)],
}


@pytest.mark.parametrize("tail", [TAIL, SANITIZE], ids=["raw", "sanitized"])
@pytest.mark.parametrize("name", list(CHAINS))
def test_integer_boxes_equal_v2_for_the_drawn_params(photos, monkeypatch, name, tail):
    """Each chain natively (no warning): boxes exactly v2's (int64, max |diff| 0), labels
    aligned after SanitizeBoundingBoxes, the image v2's (max |diff| 0); three draws a photo."""
    t = v2.Compose(CHAINS[name] + tail)
    dataset = Detection(t, photos * 3)
    rows, records = _rows(dataset, monkeypatch)
    _check(rows, records, t, dataset)
    if name in ("rrc_flip", "crop_resize", "flip_crop_resize"):  # the draws vary
        assert len({(g[2], g[3]) for g in records}) > len(photos)
    if name in ("rrc_flip", "flip_crop_resize"):  # the flip fires and not
        assert {g[8] for g in records} == {0.0, 1.0}


@pytest.mark.parametrize("fmt", ["XYXY", "CXCYWH"])
def test_other_formats(photos, monkeypatch, fmt):
    """XYXY and CXCYWH integer boxes through the crop and resize: exactly v2's."""
    t = v2.Compose(CHAINS["crop_resize"] + [v2.RandomVerticalFlip(), v2.ToImage(),
                                             v2.SanitizeBoundingBoxes()])
    dataset = Detection(t, photos * 2, fmt=fmt)
    rows, records = _rows(dataset, monkeypatch)
    _check(rows, records, t, dataset)


def test_ssd_zoom_out_iou_crop_flip(photos, monkeypatch):
    """The ssd preset's geometry (RandomPhotometricDistort, RandomZoomOut with its fill,
    RandomIoUCrop, flip, SanitizeBoundingBoxes) with integer boxes: natively, boxes and labels
    exactly v2's for the row's draws; the zoom-out both taken and not."""
    t = v2.Compose([v2.RandomPhotometricDistort(p=1.0), v2.RandomZoomOut(fill=(123, 117, 104)),
                    v2.RandomIoUCrop(), v2.RandomHorizontalFlip(p=0.5), v2.PILToTensor(),
                    v2.ToDtype(torch.float, scale=True), v2.SanitizeBoundingBoxes()])
    dataset = Detection(t, photos * 4)
    rows, records = _rows(dataset, monkeypatch)
    _check(rows, records, t, dataset, image=False)
    zoomed = [(g[6], g[7]) != dataset.photos[i][1] for i, g in enumerate(records)]
    assert any(zoomed) and not all(zoomed)


def test_two_drawn_offsets_keep_torchs_path_named(photos):
    """A RandomCrop after a RandomResizedCrop: the record holds only the sum of their offsets,
    so integer boxes stay on torch's path with the step named; float boxes are native."""
    t = v2.Compose([v2.RandomResizedCrop(64), v2.RandomCrop(48), v2.ToImage()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Detection(t, photos), batch_size=2, collate_fn=list)
    assert not loader.native
    said = " ".join(str(w.message) for w in caught)
    assert "RandomCrop" in said and "draws an offset after" in said, said
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        floats = rl.DataLoader(Detection(t, photos, dtype=torch.float32), batch_size=2,
                               collate_fn=list)
    assert floats.native


def test_a_resize_after_a_drawn_canvas_keeps_torchs_path_named(photos):
    """A Resize after a RandomZoomOut: the record holds the resized canvas, not the one the
    zoom-out drew; integer boxes stay on torch's path, named; float boxes are native."""
    t = v2.Compose([v2.RandomZoomOut(side_range=(1.0, 2.0)), v2.Resize((64, 64)), v2.ToImage()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Detection(t, photos), batch_size=2, collate_fn=list)
    assert not loader.native
    said = " ".join(str(w.message) for w in caught)
    assert "v2.Resize((64, 64)) follows v2.RandomZoomOut" in said, said
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        floats = rl.DataLoader(Detection(t, photos, dtype=torch.float32), batch_size=2,
                               collate_fn=list)
    assert floats.native
