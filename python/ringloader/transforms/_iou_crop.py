"""v2's ``RandomIoUCrop`` on a native Joint row in numpy: its draw and its move of the boxes.

:func:`draw` gives what v2's ``make_params`` returns with torch's generator seeded from the
row's seed, without a torch operation. Torch's CPU generator is the standard mt19937, seeded
as numpy's legacy seeding seeds it (the seed's low 32 bits, ``init_genrand``), and each draw
v2's loop makes is one 32-bit output of it: ``torch.randint(0, n)`` takes it modulo ``n``
(``n`` under 2**32), ``torch.rand`` (float32) its low 24 bits times 2**-24. So the stream is
numpy's ``RandomState`` (one per thread) seeded alike; ``test_iou_crop_draws.py`` checks the
stream and the parameters against torch's for many seeds.

v2's loop draws a round's option, then up to ``trials`` trials: two uniforms for the crop's
size, two more for its offset where the size's aspect passes. Where a trial starts depends on
the ones before, so every quantity a trial would compute is computed at once for a trial
starting at each position of the stream (sizes, aspect, offsets, which box centres the crop
holds, their best IoU with it, each in the dtype torch computes it in: float32 products
truncated as ``int()`` truncates them, the boxes' dtype for the IoU); the walk over the trials
is plain Python over those values. :func:`crop_boxes` then moves XYXY float boxes as v2's
``transform`` and the flips after it do (``_box_kernels``: a subtraction, a clamp to the crop,
the boxes whose centre falls outside zeroed, a mirror), the same float operations in order.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Dict, Optional, Tuple

import numpy as np

from . import _box_kernels

__all__ = ["crop_boxes", "draw", "fits"]

#: Box dtypes whose arithmetic :func:`draw` follows as torch does it (numpy, same dtype).
_DTYPES = ("float32", "float64", "int64", "int32")
_F32 = np.float32
#: torch.rand's float32: the low 24 bits of a 32-bit output, times 2**-24 (exact).
_MANTISSA = 0xFFFFFF
_UNIT = _F32(2.0 ** -24)
_LOCAL = threading.local()


def fits(boxes: Any) -> bool:
    """Whether :func:`draw` follows v2 for the ``tv_tensors.BoundingBoxes`` ``boxes``: one box
    per row ([N, 4], unrotated), a dtype of :data:`_DTYPES`, on the CPU, and torch's default
    dtype float32 (``torch.rand`` draws in it)."""
    import torch
    from torchvision import tv_tensors

    plain = boxes.as_subclass(torch.Tensor)  # its attributes without tv_tensors' dispatch
    return (str(plain.dtype)[6:] in _DTYPES and plain.device.type == "cpu"
            and plain.dim() == 2 and plain.shape[-1] == 4
            and not tv_tensors.is_rotated_bounding_format(boxes.format)
            and torch.get_default_dtype() == torch.float32)


def _stream(seed: int) -> Any:
    """This thread's numpy generator, seeded as ``torch.Generator().manual_seed(seed)``."""
    state = getattr(_LOCAL, "state", None)
    if state is None:
        state = _LOCAL.state = np.random.RandomState(0)
    state.seed(seed & 0xFFFFFFFF)
    return state


def _outputs(state: Any, n: int) -> Any:
    """The next ``n`` 32-bit outputs of the generator (one each: the full range's draw)."""
    return state.randint(0, 2 ** 32, size=n, dtype=np.uint64)


@functools.lru_cache(maxsize=16)
def _pairs(count: int) -> Tuple[Any, Any]:
    """Index arrays [2, count]: the positions q and q + 1 (a trial's size: width, height), and
    q + 2 and q + 3 (its offset: left, top), for q in 0 .. count - 1."""
    at = np.arange(count)
    return np.stack([at, at + 1]), np.stack([at + 2, at + 3])


class _Trials:
    """What a trial of v2's loop starting at each position ``q`` of the stream ``raw`` computes
    (positions 0 .. len(raw) - 4), x and y in two rows: lists (and arrays) indexed by ``q``."""

    def __init__(self, step: Any, raw: Any, canvas: Tuple[int, int], boxes: Any):
        orig = np.array([[canvas[1]], [canvas[0]]], dtype=np.int64)  # width, height
        u = (raw & _MANTISSA).astype(_F32) * _UNIT  # torch.rand, each value
        lo, span = _F32(step.min_scale), _F32(step.max_scale - step.min_scale)
        scaled = lo + span * u
        sizes, offsets = _pairs(len(raw) - 3)
        # int(orig_w * r[0]), int(orig_h * r[1]): float32 products, truncated
        size = (orig.astype(_F32) * scaled[sizes]).astype(np.int64)
        # int((orig_w - new_w) * r[0]), int((orig_h - new_h) * r[1]) of the next two uniforms
        corner = ((orig - size).astype(_F32) * u[offsets]).astype(np.int64)
        width, height = size
        with np.errstate(all="ignore"):  # a zero height raises in the walk, as v2's division
            ratio = width / height  # int / int: float64, as Python's true division
        self.size, self.corner = size, corner
        self.aspect = ((step.min_aspect_ratio <= ratio) &
                       (ratio <= step.max_aspect_ratio)).tolist()
        self.zero = (height == 0).tolist()
        self.within, best = _checks(boxes, corner, size)
        # A trial keeps its crop where it is not empty, holds a box centre and its best IoU
        # is not under the round's threshold (a NaN passes, as v2's `max() < t` lets it).
        self.held = (self.within.any(axis=0) & (size != 0).all(axis=0)).tolist()
        self.best = best.tolist()  # float32 values as Python floats: compared exactly


def _checks(boxes: Tuple[Any, ...], corner: Any, size: Any) -> Tuple[Any, Any]:
    """For each candidate crop (a column of ``corner``: left, top; of ``size``: width,
    height): which boxes' centres it holds ([N, P] bool) and the best IoU of those with it
    ([P], -inf where none), each value as v2 computes it (box_iou in the boxes' dtype ``dt``: a
    true division in float32 for integer boxes; the centres in ``fdt``). Boxes run along the
    first axis, x and y along the second, the candidates along the last."""
    centre, near, far_box, area, dt, fdt = boxes
    far = corner + size  # right, bottom
    near_d, far_d = corner.astype(dt), far.astype(dt)
    near_f, far_f = (near_d, far_d) if dt is fdt else (corner.astype(fdt), far.astype(fdt))
    within = ((centre > near_f) & (centre < far_f)).all(axis=1)
    with np.errstate(all="ignore"):
        # box_iou: max of the top-left corners, min of the bottom-right ones, clamped at 0
        side = np.maximum(np.minimum(far_box, far_d) - np.maximum(near, near_d), dt.type(0))
        inter = side[:, 0] * side[:, 1]
        crop = size.astype(dt)
        union = area[:, None] + crop[0] * crop[1] - inter
        iou = inter / union if dt is fdt else inter.astype(fdt) / union.astype(fdt)
        best = np.where(within, iou, -np.inf).max(axis=0, initial=-np.inf)
    return within, best


def _prepared(xyxy: Any) -> Tuple[Any, ...]:
    """XYXY boxes (numpy [N, 4]) as :func:`_checks` takes them: their centres as torch
    computes ``0.5 * (a + b)`` (in their float dtype, else float32), top-left and bottom-right
    corners ([N, 2, 1] each), areas (their dtype), and those dtypes."""
    dt = xyxy.dtype
    fdt = dt if dt.kind == "f" else np.dtype(_F32)
    centre = fdt.type(0.5) * (xyxy[:, :2] + xyxy[:, 2:]).astype(fdt)
    area = (xyxy[:, 2] - xyxy[:, 0]) * (xyxy[:, 3] - xyxy[:, 1])
    return centre[:, :, None], xyxy[:, :2, None], xyxy[:, 2:, None], area, dt, fdt


def draw(step: Any, boxes: Any, seed: int) -> Dict[str, Any]:
    """v2's ``RandomIoUCrop.make_params([boxes])`` for ``step`` with torch's generator seeded
    with ``seed`` (``boxes``: ``tv_tensors.BoundingBoxes`` that :func:`fits`)."""
    import torch
    from torchvision import tv_tensors
    from torchvision.transforms.v2 import functional as F

    plain = boxes.as_subclass(torch.Tensor).detach()
    if boxes.format is not tv_tensors.BoundingBoxFormat.XYXY:
        plain = F.convert_bounding_box_format(plain, boxes.format,
                                              tv_tensors.BoundingBoxFormat.XYXY)
    prepared = _prepared(plain.numpy())
    canvas = tuple(boxes.canvas_size)
    options, count = step.options, 4 * step.trials + 1  # a round's draws at most
    state = _stream(seed)
    raw = _outputs(state, 2 * count + 3)
    trials = _Trials(step, raw, canvas, prepared)
    p = 0  # the stream's position: where the round's option is drawn
    while True:
        if p + count > len(raw) - 3:  # a round that may reach past the values drawn
            raw = np.concatenate([raw, _outputs(state, 2 * count)])
            trials = _Trials(step, raw, canvas, prepared)
        threshold = options[int(raw[p]) % len(options)]  # torch.randint(0, len(options))
        if threshold >= 1.0:
            return {}
        threshold = float(prepared[-1].type(threshold))  # compared in the IoU's dtype
        q, p = _walk(step.trials, trials, p + 1, threshold)
        if q is not None:
            (left, top), (width, height) = trials.corner[:, q].tolist(), trials.size[:, q].tolist()
            return dict(top=top, left=left, height=height, width=width,
                        is_within_crop_area=torch.from_numpy(trials.within[:, q].copy()))


def _walk(count: int, trials: _Trials, q: int, threshold: float) -> Tuple[Optional[int], int]:
    """A round's ``count`` trials from the stream's position ``q``: the position of the trial
    whose crop v2 keeps (None where none is) and where the round's draws end."""
    aspect, zero, held, best = trials.aspect, trials.zero, trials.held, trials.best
    for _ in range(count):
        if zero[q]:
            raise ZeroDivisionError("division by zero")  # v2's new_w / new_h
        if not aspect[q]:
            q += 2
            continue
        if held[q] and not best[q] < threshold:
            return q, q + 4
        q += 4
    return None, q


def crop_boxes(boxes: Any, params: Dict[str, Any], flips: Tuple[bool, bool]) -> Optional[Any]:
    """``boxes`` (``tv_tensors.BoundingBoxes``) after v2's RandomIoUCrop ``transform`` with
    ``params`` and the flips after it (horizontal, vertical) as v2's kernels move them, or None
    where :func:`._box_kernels.boxes_array` does not follow them."""
    import torch
    from torchvision import tv_tensors

    b = _box_kernels.boxes_array(boxes)
    if b is None:
        return None
    if not params and not any(flips):
        return boxes  # v2's transform passes them through
    height, width = boxes.canvas_size
    b = b.copy()
    if params:  # F.crop, then the boxes whose centre is outside the crop zeroed
        height, width = params["height"], params["width"]
        b = _box_kernels.clamp(_box_kernels.shift(b, params["left"], params["top"], -1),
                               height, width, boxes.clamping_mode)
        b[~params["is_within_crop_area"].numpy()] = 0
    for axis, (flip, size) in enumerate(zip(flips, (width, height))):
        if flip:
            _box_kernels.flip(b, axis, size)
    return tv_tensors.wrap(torch.from_numpy(b), like=boxes, canvas_size=(height, width))
