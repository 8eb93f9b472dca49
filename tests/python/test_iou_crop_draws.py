"""RandomIoUCrop on a native Joint row in numpy (``transforms._iou_crop``) and the box kernels it
and the float-box replay use (``transforms._box_kernels``), against torch and v2 themselves.

* The stream: numpy's legacy-seeded mt19937 gives torch's CPU generator's draws (``torch.rand``
  float32 and ``torch.randint`` in v2's order) for 300 seeds, 64-bit ones among them.
* The draw: for 2400 random box sets and seeds (dtypes float32/float64/int64/int32, formats
  XYXY/XYWH/CXCYWH, 0 to 40 boxes, degenerate, NaN, -0.0, out-of-frame and tiny ones; step
  settings that reject most trials or rounds, so the stream drawn ahead is extended), the
  parameters equal v2's ``make_params`` with torch's global generator seeded alike, and a
  zero crop height raises where v2's division does.
* The moves: v2's ``transform`` and flips, and pad/crop/flip sequences of v2's kernels, on XYXY
  float boxes (clamping soft, hard and None).

Bound: exact (the same keys, ints, bool masks equal; boxes equal bit for bit, same dtype,
format, canvas_size and clamping_mode).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from ringloader.transforms import _box_kernels, _detection, _iou_crop


def _bits_equal(a, b):
    """Bit for bit (a -0.0 is not a 0.0; NaNs compare by their bits), same dtype and shape."""
    assert a.dtype == b.dtype and a.shape == b.shape, (a, b)
    ints = {torch.float32: torch.int32, torch.float64: torch.int64}
    if a.dtype in ints:
        return torch.equal(a.contiguous().view(ints[a.dtype]), b.contiguous().view(ints[b.dtype]))
    return torch.equal(a, b)


def _same_boxes(ours, want):
    assert type(ours) is type(want)
    assert (ours.format, tuple(ours.canvas_size), ours.clamping_mode) == \
        (want.format, tuple(want.canvas_size), want.clamping_mode)
    assert _bits_equal(ours.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor)), \
        (ours, want)


def test_the_stream_is_torchs_generator():
    rng = np.random.default_rng(3)
    seeds = [0, 1, 2 ** 32 - 1, 2 ** 32, 2 ** 63 - 1] + [int(s) for s in
                                                           rng.integers(0, 2 ** 62, 295)]
    for seed in seeds:
        gen = torch.Generator().manual_seed(seed)
        want = [int(torch.randint(0, 7, (1,), generator=gen))]
        want += torch.rand(2, generator=gen).tolist() + torch.rand(700, generator=gen).tolist()
        want.append(int(torch.randint(0, 3, (1,), generator=gen)))
        raw = _iou_crop._outputs(_iou_crop._stream(seed), 704)
        u = ((raw[1:703] & _iou_crop._MANTISSA).astype(np.float32) * _iou_crop._UNIT).tolist()
        assert [int(raw[0]) % 7] + u + [int(raw[703]) % 3] == want, seed


def _coords(rng, n, w, h):
    """n boxes' XYXY coordinates (float64), the cases the crop decides on among them."""
    xy = rng.uniform(-0.1, 1.1, (n, 2)) * [w, h]
    wh = rng.uniform(0, 0.7, (n, 2)) * [w, h] * (rng.random((n, 1)) < 0.9)  # some zero-size
    out = np.concatenate([xy, xy + wh], 1)
    pool = [0.0, -0.0, float(w), float(h), -3.0, float("nan"), 0.5]
    for i in range(n):
        for j in range(4):
            if rng.random() < 0.04:
                out[i, j] = pool[rng.integers(len(pool))]
    return out


# Each with the leave-as-is option (2.0): without it v2's loop never ends for boxes no crop
# holds (none, or every centre NaN or out of frame).
_STEPS = [v2.RandomIoUCrop(),
          v2.RandomIoUCrop(min_scale=0.05, max_scale=1.0, min_aspect_ratio=0.9,
                           max_aspect_ratio=1.1, trials=3),
          v2.RandomIoUCrop(min_scale=0.2, max_scale=1.3, trials=17,
                           sampler_options=[0.0, 0.7, 0.9, 2.0]),
          v2.RandomIoUCrop(min_scale=0.5, max_scale=0.6, trials=40,  # rounds rejected often
                           sampler_options=[0.95, 0.97, 2.0]),
          v2.RandomIoUCrop(min_scale=0.1, max_scale=0.9, trials=8,
                           sampler_options=[0.2, 0.5, 0.95, 2.0])]


@pytest.mark.parametrize("part", range(4))
def test_the_draw_is_v2s_make_params(part):
    rng = np.random.default_rng(100 + part)
    dtypes = [torch.float32, torch.float64, torch.int64, torch.int32]
    formats = ["XYXY", "XYWH", "CXCYWH"]
    saved = torch.random.get_rng_state()
    raised = 0
    try:
        for case in range(600):
            h, w = (int(v) for v in rng.integers(2, 700, 2))
            n = int(rng.integers(1, 8)) if case % 10 else int(rng.integers(0, 41))
            dtype = dtypes[case % 4]
            coords = torch.tensor(_coords(rng, n, w, h)).reshape(n, 4)
            if not dtype.is_floating_point:
                coords = torch.nan_to_num(coords).round()
            boxes = F.convert_bounding_box_format(
                tv_tensors.BoundingBoxes(coords.to(dtype), format="XYXY", canvas_size=(h, w)),
                new_format=formats[case % 3])
            step = _STEPS[int(rng.integers(len(_STEPS)))]
            seed = int(rng.integers(0, 2 ** 40))
            assert _iou_crop.fits(boxes)
            torch.manual_seed(seed)
            try:
                want = step.make_params([boxes])
            except ZeroDivisionError:
                with pytest.raises(ZeroDivisionError):
                    _iou_crop.draw(step, boxes, seed)
                raised += 1
                continue
            ours = _iou_crop.draw(step, boxes, seed)
            assert ours.keys() == want.keys(), case
            for key in want:
                if key == "is_within_crop_area":
                    assert torch.equal(ours[key], want[key]), case
                else:
                    assert ours[key] == want[key] and type(ours[key]) is int, (case, key)
    finally:
        torch.random.set_rng_state(saved)
    assert raised < 60


def test_boxes_the_draw_does_not_follow_run_v2s_make_params():
    """Under a float64 default dtype (torch.rand draws float64 then): v2's own draw."""
    step = v2.RandomIoUCrop()
    boxes = tv_tensors.BoundingBoxes(torch.tensor([[10.0, 10, 60, 50]]), format="XYXY",
                                     canvas_size=(80, 90))
    assert _iou_crop.fits(boxes)
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert not _iou_crop.fits(boxes)
        for seed in range(40):
            torch.manual_seed(seed)
            want = step.make_params([boxes])
            ours = _detection.iou_crop_params(step, [boxes], seed)
            assert ours.keys() == want.keys()
            assert all(torch.equal(ours[k], want[k]) if isinstance(want[k], torch.Tensor)
                       else ours[k] == want[k] for k in want)
    finally:
        torch.set_default_dtype(saved)


def _float_boxes(rng, dtype, mode):
    h, w = (int(v) for v in rng.integers(5, 400, 2))
    n = int(rng.integers(0, 7))
    return tv_tensors.BoundingBoxes(torch.tensor(_coords(rng, n, w, h)).reshape(n, 4).to(dtype),
                                    format="XYXY", canvas_size=(h, w), clamping_mode=mode)


@pytest.mark.parametrize("mode", ["soft", "hard", None])
def test_the_crop_and_flips_move_boxes_as_v2(mode):
    rng = np.random.default_rng(7)
    step = v2.RandomIoUCrop(sampler_options=[0.0, 0.1, 0.3, 2.0])
    for case in range(400):
        boxes = _float_boxes(rng, [torch.float32, torch.float64][case % 2], mode)
        torch.manual_seed(case)
        params = step.make_params([boxes]) if len(boxes) and case % 5 else {}
        flips = (bool(case & 1), bool(case & 2))
        want = step.transform(boxes, params)
        if flips[0]:
            want = F.horizontal_flip(want)
        if flips[1]:
            want = F.vertical_flip(want)
        _same_boxes(_iou_crop.crop_boxes(boxes, params, flips), want)


@pytest.mark.parametrize("mode", ["soft", "hard", None])
def test_pads_crops_and_flips_replay_v2s_kernels(mode):
    rng = np.random.default_rng(11)
    for case in range(400):
        boxes = _float_boxes(rng, [torch.float32, torch.float64][case % 2], mode)
        ops = []
        for _ in range(int(rng.integers(0, 4))):
            kind = ["pad", "zoom_out", "crop", "horizontal_flip", "vertical_flip"][
                int(rng.integers(5))]
            if kind == "pad":
                ops.append((kind, {"padding": [int(v) for v in rng.integers(0, 30, 4)],
                                   "padding_mode": "constant"}))
            elif kind == "zoom_out":
                ops.append((kind, {"padding": [int(v) for v in rng.integers(0, 60, 4)]}))
            elif kind == "crop":
                ops.append((kind, {"top": int(rng.integers(-20, 60)),
                                   "left": int(rng.integers(-20, 60)),
                                   "height": int(rng.integers(1, 300)),
                                   "width": int(rng.integers(1, 300))}))
            else:
                ops.append((kind, {}))
        want = boxes
        for kernel, kwargs in ops:
            want = getattr(F, "pad" if kernel == "zoom_out" else kernel)(want, **kwargs)
        _same_boxes(_box_kernels.replay(boxes, ops), want)


def test_boxes_the_kernels_do_not_follow_run_v2s():
    xywh = tv_tensors.BoundingBoxes(torch.tensor([[1.0, 2, 3, 4]]), format="XYWH",
                                    canvas_size=(10, 10))
    ints = tv_tensors.BoundingBoxes(torch.tensor([[1, 2, 3, 4]]), format="XYXY",
                                    canvas_size=(10, 10))
    floats = tv_tensors.BoundingBoxes(torch.tensor([[1.0, 2, 3, 4]]), format="XYXY",
                                      canvas_size=(10, 10))
    for boxes in (xywh, ints):
        assert _box_kernels.boxes_array(boxes) is None
        assert _box_kernels.replay(boxes, [("horizontal_flip", {})]) is None
        assert _iou_crop.crop_boxes(boxes, {}, (True, False)) is None
    assert _box_kernels.replay(floats, [("resize", {"size": [5, 5]})]) is None
    assert _box_kernels.replay(floats, [("pad", {"padding": [1], "padding_mode": "edge"})]) is None
    assert _box_kernels.replay(floats, []) is floats
    assert _iou_crop.crop_boxes(floats, {}, (False, False)) is floats


def test_boxes_that_require_grad_draw_alike():
    """The draw as v2's; their moves are v2's kernels (which keep the graph)."""
    step = v2.RandomIoUCrop()
    boxes = tv_tensors.BoundingBoxes(torch.tensor([[10.0, 10, 60, 50], [30, 5, 80, 70]],
                                                  requires_grad=True),
                                     format="XYXY", canvas_size=(80, 90))
    saved = torch.random.get_rng_state()
    try:
        for seed in range(30):
            torch.manual_seed(seed)
            want = step.make_params([boxes])
            ours = _iou_crop.draw(step, boxes, seed)
            assert ours.keys() == want.keys()
            assert all(torch.equal(ours[k], want[k]) if isinstance(want[k], torch.Tensor)
                       else ours[k] == want[k] for k in want)
            assert _iou_crop.crop_boxes(boxes, want, (True, False)) is None  # v2's kernels
    finally:
        torch.random.set_rng_state(saved)
