"""A native Joint row's ``SanitizeBoundingBoxes`` (``sources._sanitize``: v2's forward with its
mask computed in numpy) against v2's own call on the same structure.

Random and degenerate box sets (NaN, inf, negative, zero-size, on and just past the canvas
edge, integer areas that wrap), every supported dtype and unrotated format, non-default
min_size/min_area (float and int, values float32 rounds), labels as a tensor under the default
getter's keys, a callable's tuple, none, per-instance masks. Bound: exact equality (torch.equal,
same dtype, same tv_tensor type, format, canvas_size and clamping_mode; the same errors).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from ringloader.sources import _sanitize

DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32]
FORMATS = ["XYXY", "XYWH", "CXCYWH"]
LIMITS = [(1.0, 1.0), (1, 1), (2.5, 7.0), (3, 10.5), (1.00000001, 1.0000001), (4.0, 2)]


class _Leaf:
    """What a native row holds in the image's place (a leaf v2 passes through)."""

    k = 0


def _same(a, b, where="out"):
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), (where, a, b)
        if isinstance(a, tv_tensors.BoundingBoxes):
            assert (a.format, tuple(a.canvas_size), a.clamping_mode) == \
                (b.format, tuple(b.canvas_size), b.clamping_mode), where
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert a is b or a == b, where


def _coords(rng, n, w, h, dtype):
    """n boxes' XYXY-like coordinates mixing the cases SanitizeBoundingBoxes decides on."""
    floating = dtype.is_floating_point
    pool = [0, w, h, -1, w + 1, h + 1, 1, 2]
    if floating:
        pool += [float("nan"), float("inf"), -float("inf"), w + 4e-6, h - 4e-6, 0.5, -1e-7,
                 np.nextafter(np.float32(w), np.float32(1e9)).item()]
    out = rng.uniform(-0.3, 1.3, (n, 4)) * np.array([w, h, w, h])
    if not floating:
        out = np.round(out)
    for i in range(n):
        for j in range(4):
            if rng.random() < 0.25:
                out[i, j] = pool[rng.integers(len(pool))]
        if rng.random() < 0.15:  # zero-size
            out[i, 2], out[i, 3] = out[i, 0], out[i, 1]
    if floating:
        return torch.tensor(out, dtype=dtype)
    return torch.tensor(out.astype(np.int64)).to(dtype)


def _cases(seed, count):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        dtype = DTYPES[rng.integers(len(DTYPES))]
        fmt = FORMATS[rng.integers(len(FORMATS))]
        h, w = int(rng.integers(1, 70)), int(rng.integers(1, 70))
        n = int(rng.integers(0, 9))
        boxes = tv_tensors.BoundingBoxes(_coords(rng, n, w, h, dtype), format=fmt,
                                         canvas_size=(h, w))
        yield rng, boxes, LIMITS[rng.integers(len(LIMITS))]


def _check(step, structure):
    """The fast path equals v2's own call; errors alike."""
    try:
        want = step(structure)
    except Exception as exc:  # noqa: BLE001 - the same error, the same message
        with pytest.raises(type(exc)) as got:
            _sanitize.sanitize(step, structure)
        assert str(got.value) == str(exc)
        return None
    got = _sanitize.sanitize(step, structure)
    _same(got, want)
    return got


@pytest.mark.parametrize("seed", range(4))
def test_mask_equals_v2s_own(seed):
    """The mask alone, on the fast path for every supported case."""
    for _, boxes, (min_size, min_area) in _cases(seed, 300):
        got = _sanitize.mask(boxes, min_size, min_area)
        assert got is not None, (boxes.dtype, boxes.format)
        want = F._misc._get_sanitize_bounding_boxes_mask(
            boxes, format=boxes.format, canvas_size=boxes.canvas_size, min_size=min_size,
            min_area=min_area)
        assert got.dtype == want.dtype == torch.bool
        assert torch.equal(got, want), (boxes, min_size, min_area, got, want)


@pytest.mark.parametrize("seed", range(3))
def test_step_equals_v2s_own_on_row_structures(seed):
    """Whole rows: (image leaf, target) and flat dicts, labels under the default getter's
    keys, a callable's tuple, or none; per-instance and semantic masks."""
    for rng, boxes, (min_size, min_area) in _cases(100 + seed, 150):
        n, (h, w) = boxes.shape[0], boxes.canvas_size
        labels = torch.arange(n) + 1
        kind = int(rng.integers(5))
        if kind == 0:
            step, target = v2.SanitizeBoundingBoxes(min_size, min_area), {"boxes": boxes,
                                                                           "labels": labels}
        elif kind == 1:
            step, target = v2.SanitizeBoundingBoxes(min_size, min_area), {"Labels": labels,
                                                                           "boxes": boxes}
        elif kind == 2:
            step = v2.SanitizeBoundingBoxes(min_size, min_area, labels_getter=None)
            target = {"boxes": boxes, "labels": labels}
        elif kind == 3:
            step = v2.SanitizeBoundingBoxes(
                min_size, min_area,
                labels_getter=lambda s: (s[1]["class_label"], s[1]["iscrowd"]))
            target = {"boxes": boxes, "class_label": labels,
                      "iscrowd": torch.zeros(n, dtype=torch.uint8),
                      "masks": tv_tensors.Mask(torch.ones(n, h, w, dtype=torch.uint8)),
                      "semantic": tv_tensors.Mask(torch.zeros(h, w, dtype=torch.uint8))}
        else:
            step = v2.SanitizeBoundingBoxes(min_size, min_area)
            target = {"boxes": boxes, "my_label_ids": labels.to(torch.int32), "name": "x"}
        leaf = _Leaf()
        got = _check(step, (leaf, target))
        assert got is None or got[0] is leaf
        if kind in (0, 1, 2):
            _check(step, {"image": leaf, **target})


def test_integer_areas_wrap_and_float32_rounding():
    """Integer areas past the dtype wrap (torch's product), integer widths compared with a
    float min_size in float32 (16777219 rounds to 16777220), int min_size in the dtype."""
    big = tv_tensors.BoundingBoxes(torch.tensor([[0, 0, 70000, 70000], [0, 0, 3, 3]],
                                                dtype=torch.int32),
                                   format="XYXY", canvas_size=(70000, 70000))
    wide = tv_tensors.BoundingBoxes(torch.tensor([[0, 0, 16777219, 16777219]]), format="XYXY",
                                    canvas_size=(20000000, 20000000))
    huge = tv_tensors.BoundingBoxes(torch.tensor([[-2 ** 62, 0, 2 ** 62, 5]]),
                                    format="XYWH", canvas_size=(10, 10))
    for boxes, limits in ((big, (1.0, 1.0)), (big, (1, 1)), (wide, (16777220.0, 1.0)),
                          (wide, (16777220, 1)), (huge, (1.0, 1.0))):
        got = _sanitize.mask(boxes, *limits)
        want = F._misc._get_sanitize_bounding_boxes_mask(
            boxes, format=boxes.format, canvas_size=boxes.canvas_size, min_size=limits[0],
            min_area=limits[1])
        assert got is not None and torch.equal(got, want), (boxes, limits, got, want)
    assert _sanitize.mask(wide, 16777220.0, 1.0).tolist() == [True]  # float32's comparison


def test_default_dtype_float64_compares_integer_boxes_in_float64():
    boxes = tv_tensors.BoundingBoxes(torch.tensor([[0, 0, 16777219, 16777219]]), format="XYXY",
                                     canvas_size=(20000000, 20000000))
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got = _sanitize.mask(boxes, 16777220.0, 1.0)
        want = F._misc._get_sanitize_bounding_boxes_mask(
            boxes, format=boxes.format, canvas_size=boxes.canvas_size, min_size=16777220.0)
    finally:
        torch.set_default_dtype(saved)
    assert got is not None and torch.equal(got, want) and got.tolist() == [False]


def test_other_cases_run_v2s_own_call():
    """Other dtypes, rotated boxes, scalars outside what is followed, a subclass or a hooked
    step: no numpy mask, and the step's result still equals v2's."""
    half = tv_tensors.BoundingBoxes(torch.tensor([[0.0, 0, 5, 5]], dtype=torch.float16),
                                    format="XYXY", canvas_size=(10, 10))
    rotated = tv_tensors.BoundingBoxes(torch.tensor([[5.0, 5, 4, 4, 30]]), format="CXCYWHR",
                                       canvas_size=(10, 10))
    plain = tv_tensors.BoundingBoxes(torch.tensor([[0.0, 0, 5, 5], [1, 1, 1, 1]]),
                                     format="XYXY", canvas_size=(10, 10))
    assert _sanitize.mask(half, 1.0, 1.0) is None
    assert _sanitize.mask(rotated, 1.0, 1.0) is None
    assert _sanitize.mask(plain, float("inf"), 1.0) is None
    assert _sanitize.mask(plain, torch.tensor(1.0), 1.0) is None
    for boxes in (half, rotated, plain):
        target = {"boxes": boxes, "labels": torch.arange(boxes.shape[0])}
        _check(v2.SanitizeBoundingBoxes(), (_Leaf(), target))
        _check(v2.SanitizeBoundingBoxes(min_size=float("inf")), (_Leaf(), target))

    class Mine(v2.SanitizeBoundingBoxes):
        pass

    assert not _sanitize._plain_module(Mine())
    hooked = v2.SanitizeBoundingBoxes()
    seen = []
    hooked.register_forward_hook(lambda *args: seen.append(1))
    assert not _sanitize._plain_module(hooked)
    _check(hooked, (_Leaf(), {"boxes": plain, "labels": torch.arange(2)}))
    assert seen == [1, 1]  # v2's call ran (its hook), once for v2 and once for the fast path
    assert _sanitize._plain_module(v2.SanitizeBoundingBoxes())


def test_errors_are_v2s():
    boxes = tv_tensors.BoundingBoxes(torch.tensor([[0.0, 0, 5, 5]]), format="XYXY",
                                     canvas_size=(10, 10))
    step = v2.SanitizeBoundingBoxes()
    for structure in ((_Leaf(), {"boxes": boxes, "labels": torch.arange(2)}),
                      (_Leaf(), {"boxes": boxes, "labels": [1]}),
                      (_Leaf(), {"boxes": boxes, "labels": 3}),
                      (_Leaf(), {"boxes": boxes}),
                      (_Leaf(), {"labels": torch.arange(1)})):
        with pytest.raises(ValueError):
            step(structure)
        assert _check(step, structure) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_iou_crop_trials_equal_v2s_make_params(dtype):
    """RandomIoUCrop's trial rounds, their sizes, aspect checks and offsets computed a round at
    once: for settings that reject most trials (narrow aspect range, few trials, tiny scales)
    the parameters equal v2's make_params with torch's generator seeded alike (exact)."""
    from ringloader.transforms import _detection

    gen = torch.Generator().manual_seed(5)
    steps = [v2.RandomIoUCrop(min_scale=0.05, max_scale=1.0, min_aspect_ratio=0.9,
                              max_aspect_ratio=1.1, trials=3),
             v2.RandomIoUCrop(min_scale=0.2, max_scale=1.3, trials=17,
                              sampler_options=[0.0, 0.7, 0.9]),
             v2.RandomIoUCrop()]
    saved = torch.random.get_rng_state()
    raised = []
    try:
        for seed in range(90):
            h, w = (int(v) for v in torch.randint(40, 500, (2,), generator=gen))
            n = int(torch.randint(1, 5, (1,), generator=gen))
            xy = torch.rand(n, 2, generator=gen) * torch.tensor([w, h])
            wh = torch.rand(n, 2, generator=gen) * torch.tensor([w, h]) * 0.8
            boxes = tv_tensors.BoundingBoxes(torch.cat([xy, xy + wh], 1).to(dtype),
                                             format="XYXY", canvas_size=(h, w))
            step = steps[seed % 3]
            torch.manual_seed(seed * 31 + 7)
            try:
                want = step.make_params([boxes])
            except ZeroDivisionError:  # a zero crop height: v2's aspect division, ours alike
                with pytest.raises(ZeroDivisionError):
                    _detection.iou_crop_params(step, [boxes], seed * 31 + 7)
                raised.append(seed)
                continue
            ours = _detection.iou_crop_params(step, [boxes], seed * 31 + 7)
            assert ours.keys() == want.keys(), seed
            for key in want:
                if key == "is_within_crop_area":
                    assert torch.equal(ours[key], want[key]), seed
                else:
                    assert ours[key] == want[key] and type(ours[key]) is int, (seed, key)
    finally:
        torch.random.set_rng_state(saved)
    assert len(raised) < 10  # (sizes from 40 px: v2 divides by a zero height rarely)
