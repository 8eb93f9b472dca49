"""Integer boxes of an :class:`ringloader.Joint` on the native path, moved as v2 moves them.

v2 rounds integer boxes at every step (its resize multiplies by float32 ratios and truncates
back to the boxes' dtype; its crops and pads translate and clamp to each canvas in turn), so
one affine map per axis, which float boxes follow (``_joint._move_boxes``), would not give its
values. Instead each geometric step of the chain (the mask view's steps: ``JointPlan.mask``)
runs v2's own box kernel in turn, with the parameters the native render drew for the row.

The row's geometry record (``_C.GEOMETRY_FIELDS``) holds one rectangle: the source pixels the
output shows, the output size and the flips. :func:`draws` walks the chain forward, each step's
canvas known from the one before, and takes what a step drew from that record: a drawn size
(``RandomResize``, ``RandomShortestSize``, ``ScaleJitter``, ``RandomResizedCrop``'s crop,
``RandomZoomOut``'s canvas) from the record's scale or output size, a drawn offset
(``RandomCrop``, ``RandomResizedCrop``, ``RandomZoomOut``) from where the rectangle starts
(linear in it). That determines one drawn size and one drawn offset a chain, with no resize
after a drawn size (only flips after a ``RandomZoomOut``); :func:`steps` names the step of any
other chain, which stays on torch's path with integer boxes (float boxes follow every chain).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..transforms import _box_kernels
from ..transforms._steps import _step_name

__all__ = ["draws", "move", "steps"]

_RESIZES = ("Resize", "RandomResize", "RandomShortestSize", "ScaleJitter")
#: Steps whose output scales the canvas.
_SCALES = (*_RESIZES, "RandomResizedCrop")
#: Steps that draw a size (of the output, a crop or a canvas) per sample.
_SIZED = ("RandomResize", "RandomShortestSize", "ScaleJitter", "RandomResizedCrop",
          "RandomZoomOut")
#: Steps that draw an offset per sample.
_OFFSET = ("RandomCrop", "RandomResizedCrop", "RandomZoomOut")
_FLIPS = ("RandomHorizontalFlip", "RandomVerticalFlip")
_KNOWN = {*_SCALES, *_OFFSET, *_FLIPS, "CenterCrop", "Pad"}
_TAIL = ("integer boxes follow one drawn size and one drawn offset a chain, each step replayed "
         "with v2's kernel; float boxes every chain")


def steps(chain: Any) -> Any:
    """The geometric steps of a Joint's mask chain (``JointPlan.mask``, a v2 Compose or None)
    that integer boxes replay, or why they cannot (a string naming the step)."""
    found = list(chain.transforms) if chain is not None else []
    sized: Optional[Any] = None
    offset: Optional[Any] = None
    for n, step in enumerate(found):
        name = type(step).__name__
        where = _step_name(step)
        if name not in _KNOWN:
            return f"{where} moves them ({_TAIL})"
        if name in _FLIPS and sum(type(s).__name__ == name for s in found) > 1:
            return (f"{where} comes twice (the row's record holds whether the image ended up "
                    f"flipped, not each flip; {_TAIL})")
        if name in _SIZED:
            if sized is not None:
                return (f"{where} draws a size after {_step_name(sized)} (the row's record "
                        f"holds their product; {_TAIL})")
            sized = step
            after = [s for s in found[n + 1:] if (type(s).__name__ not in _FLIPS
                                                  if name == "RandomZoomOut"
                                                  else type(s).__name__ in _SCALES)]
            if after:
                return (f"{_step_name(after[0])} follows {where} (the row's record cannot say "
                        f"the size {where} drew there; {_TAIL})")
        if name in _OFFSET:
            if offset is not None:
                return (f"{where} draws an offset after {_step_name(offset)} (the row's record "
                        f"holds their sum; {_TAIL})")
            offset = step
    return found


class _Axes:
    """The map from the source's pixels to the current canvas along x (0) and y (1): a source
    coordinate c lands at c * s + oc + ot * t, t the one offset drawn on that axis (unknown
    until the end), the canvas n pixels long."""

    def __init__(self, width: int, height: int):
        self.n = [width, height]
        self.s = [1.0, 1.0]
        self.oc = [0.0, 0.0]
        self.ot = [0.0, 0.0]

    def scale(self, a: int, size: int) -> None:
        r = size / self.n[a]
        self.s[a] *= r
        self.oc[a] *= r
        self.ot[a] *= r
        self.n[a] = size

    def window(self, a: int, offset: Optional[int], size: int) -> None:
        """The canvas becomes [offset, offset + size) of itself (a crop; a pad where the offset
        is negative); offset None: the drawn one."""
        if offset is None:
            self.ot[a] -= 1.0
        else:
            self.oc[a] -= offset
        self.n[a] = size

    def mirror(self, a: int) -> None:
        self.s[a] = -self.s[a]
        self.oc[a] = self.n[a] - self.oc[a]
        self.ot[a] = -self.ot[a]

    def hw(self) -> Tuple[int, int]:
        return self.n[1], self.n[0]


def _record(g: Any) -> Tuple[List[float], List[float], List[int]]:
    """Scale, offset and size along x and y of the row's map from source to output (mirrored
    where it flipped): the record's rectangle [left, right) x [top, bottom) lands on the output."""
    scales, offsets, sizes = [], [], []
    for a in (0, 1):
        lo, hi, out, flip = (g[2], g[4], g[6], g[8]) if a == 0 else (g[3], g[5], g[7], g[9])
        scale = out / (hi - lo)
        scales.append(-scale if flip else scale)
        offsets.append(out + lo * scale if flip else -lo * scale)
        sizes.append(int(out))
    return scales, offsets, sizes


def draws(chain: List[Any], g: Any, canvas: Tuple[int, int]) -> List[Tuple[str, Dict[str, Any]]]:
    """v2's box kernels for ``chain`` (what :func:`steps` returned), in order, each with its
    arguments as the row drew them: (name in ``torchvision.transforms.v2.functional``, kwargs).
    ``canvas``: the boxes' (height, width) before the chain, the record's source size."""
    from torchvision.transforms.v2.functional._geometry import (
        _center_crop_parse_output_size, _compute_resized_output_size, _parse_pad_padding)

    scales, offsets, sizes = _record(g)
    m = _Axes(canvas[1], canvas[0])
    ops: List[Tuple[str, Dict[str, Any]]] = []
    for step in chain:
        name = type(step).__name__
        if name == "Resize":
            h, w = _compute_resized_output_size(m.hw(), size=step.size, max_size=step.max_size)
            m.scale(0, w), m.scale(1, h)
            ops.append(("resize", {"size": [h, w]}))
        elif name in _RESIZES:  # a drawn size: the rest of the scale (steps() allows none after)
            w, h = (round(m.n[a] * abs(scales[a] / m.s[a])) for a in (0, 1))
            m.scale(0, w), m.scale(1, h)
            ops.append(("resize", {"size": [h, w]}))
        elif name == "RandomResizedCrop":
            out_h, out_w = step.size
            w, h = (round(abs(m.s[a] / scales[a]) * out) for a, out in ((0, out_w), (1, out_h)))
            m.window(0, None, w), m.window(1, None, h)
            m.scale(0, out_w), m.scale(1, out_h)
            ops.append(("resized_crop", {"height": h, "width": w, "size": [out_h, out_w]}))
        elif name == "CenterCrop":
            h, w = _center_crop_parse_output_size(list(step.size))
            for a, size in ((0, w), (1, h)):
                m.window(a, int(round((m.n[a] - size) / 2.0)), size)
            ops.append(("center_crop", {"output_size": [h, w]}))
        elif name == "Pad":
            left, right, top, bottom = _parse_pad_padding(step.padding)
            m.window(0, -left, m.n[0] + left + right), m.window(1, -top, m.n[1] + top + bottom)
            ops.append(("pad", {"padding": step.padding, "padding_mode": step.padding_mode}))
        elif name == "RandomCrop":
            _random_crop(step, m, ops)
        elif name == "RandomZoomOut":
            # Only flips after it (steps()): its canvas is the output. A canvas of the image's
            # size is taken for the step not applied (v2 leaves the boxes as they are; drawn
            # with a ratio under 1 + 1/side, it would clamp them to the unchanged canvas),
            # unless it always applies (p=1).
            if (sizes[0], sizes[1]) != (m.n[0], m.n[1]) or float(step.p) >= 1.0:
                ops.append(("zoom_out", {"before": (m.n[0], m.n[1]),
                                         "canvas": (sizes[0], sizes[1])}))
                m.window(0, None, sizes[0]), m.window(1, None, sizes[1])
        elif name in _FLIPS:
            a = int(name == "RandomVerticalFlip")
            if g[8 + a]:
                m.mirror(a)
                ops.append(("vertical_flip" if a else "horizontal_flip", {}))
    drawn = _offsets(m, scales, offsets, sizes, chain)
    return [(kernel, _with_offsets(kernel, kwargs, drawn)) for kernel, kwargs in ops]


def _random_crop(step: Any, m: _Axes, ops: List[Tuple[str, Dict[str, Any]]]) -> None:
    """v2's RandomCrop: its padding as its ``make_params`` computes it from the canvas (its
    ``padding`` held parsed: left, right, top, bottom), then the crop at the drawn offset on the
    axes where the padded canvas is larger."""
    pads = step.padding if step.padding is not None else [0, 0, 0, 0]
    pad_left, pad_right, pad_top, pad_bottom = pads
    crop_h, crop_w = step.size
    padded = [m.n[0] + pad_left + pad_right, m.n[1] + pad_top + pad_bottom]
    if step.pad_if_needed:
        if padded[1] < crop_h:
            diff = crop_h - padded[1]
            pad_top, pad_bottom, padded[1] = pad_top + diff, pad_bottom + diff, padded[1] + 2 * diff
        if padded[0] < crop_w:
            diff = crop_w - padded[0]
            pad_left, pad_right, padded[0] = (pad_left + diff, pad_right + diff,
                                              padded[0] + 2 * diff)
    padding = [pad_left, pad_top, pad_right, pad_bottom]
    if any(padding):
        m.window(0, -pad_left, padded[0]), m.window(1, -pad_top, padded[1])
        ops.append(("pad", {"padding": padding, "padding_mode": step.padding_mode}))
    if padded[0] > crop_w or padded[1] > crop_h:
        m.window(0, None if padded[0] > crop_w else 0, crop_w)
        m.window(1, None if padded[1] > crop_h else 0, crop_h)
        ops.append(("crop", {"height": crop_h, "width": crop_w}))


def _offsets(m: _Axes, scales: List[float], offsets: List[float], sizes: List[int],
             chain: List[Any]) -> List[int]:
    """The offset drawn on x and y (0 where none was): where the record's map starts, solved
    from the chain's map (linear in it); the chain's map checked against the record."""
    drawn = []
    for a in (0, 1):
        t = (offsets[a] - m.oc[a]) / m.ot[a] if m.ot[a] else 0.0
        drawn.append(int(round(t)))
        scale = abs(scales[a])
        if (m.n[a] != sizes[a] or abs(m.s[a] - scales[a]) > 1e-6 * scale
                or abs(t - round(t)) > 1e-3):
            steps_named = ", ".join(_step_name(s) for s in chain)
            raise RuntimeError(
                f"ringloader.Joint: the row's geometry record does not follow {steps_named} "
                f"(axis {'xy'[a]}: size {m.n[a]} against {sizes[a]}, scale {m.s[a]} against "
                f"{scales[a]}, offset {t}); please report this")
    return drawn


def _with_offsets(kernel: str, kwargs: Dict[str, Any], drawn: List[int]) -> Dict[str, Any]:
    """A kernel's arguments with the drawn offsets put in."""
    if kernel in ("crop", "resized_crop"):
        return {**kwargs, "top": drawn[1], "left": drawn[0]}
    if kernel == "zoom_out":  # v2's RandomZoomOut: F.pad by [left, top, right, bottom]
        (w, h), (canvas_w, canvas_h) = kwargs["before"], kwargs["canvas"]
        left, top = -drawn[0], -drawn[1]
        return {"padding": [left, top, canvas_w - left - w, canvas_h - top - h]}
    return kwargs


def move(boxes: Any, g: Any, chain: List[Any]) -> Any:
    """``boxes`` moved through ``chain`` (:func:`steps`) as v2 moves them: v2's own kernel for
    each step in turn, with the row's draws (:func:`draws`), integer boxes rounding at each;
    XYXY float boxes through pads, crops and flips by the same arithmetic in numpy
    (``_box_kernels.replay``)."""
    from torchvision.transforms.v2 import functional as F

    ops = draws(chain, g, tuple(boxes.canvas_size))
    moved = _box_kernels.replay(boxes, ops)  # XYXY float boxes through pads, crops, flips
    if moved is not None:
        return moved
    for kernel, kwargs in ops:
        boxes = getattr(F, "pad" if kernel == "zoom_out" else kernel)(boxes, **kwargs)
    return boxes
