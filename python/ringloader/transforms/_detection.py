"""Native equivalents of the steps of torchvision's detection references that the classification
converters in :mod:`ringloader.transforms` do not cover.

Importing this module registers their converters (``_steps._converts``); ``_joint`` imports
it, so they are known wherever a Dataset's transform is converted.

* ``ScaleJitter`` (the ``lsj`` preset's first step): a resize whose size is drawn per sample
  (``scale`` uniform in ``scale_range``, then v2's formula in float32, each side truncated), so
  its output size depends on the image: natively a per-sample buffer, like ``RandomResize``.
* A ``Pad``/``RandomCrop`` padding the image with a constant fill other than zero (the ``lsj``
  preset's ``RandomCrop(size, pad_if_needed=True, fill=mean)``): fused into the native geometry
  when it is the output's one padding and no resize follows it (the render paints the padded
  pixels; ``TransformPipeline::Create``), so boxes follow it (:func:`image_fill_refusal`).
* ``RandomZoomOut`` (the ``ssd`` preset's second step): such a pad, its canvas ratio, offset and
  ``p`` drawn per sample as v2 draws them.
* ``RandomIoUCrop`` (the ``ssd`` and ``ssdlite`` presets): it draws its crop against the
  boxes, so the native chain renders the canvas without it (the steps before it and the flips
  after it: flip(crop(c)) is a crop of flip(c)) and :func:`iou_crop`, run on the row's boxes,
  draws the crop as v2's ``make_params`` draws it (its rejection loop, :func:`iou_crop_params`)
  from torch's generator seeded from the row's draw seed (``views.h`` kGeoDrawSeed: keyed per sample, as every native
  draw, not torch's global stream), moves boxes with v2's kernels and takes the crop of the
  rendered image as a slice (:func:`take_crops`).
* ``RandomPhotometricDistort`` (the ``ssd`` preset's first step): natively a colour step on the
  8-bit image (``transform/photometric.h``), its draws made per sample as v2 makes them. Before
  padding and flips only (the ``ssd`` preset's zoom-out), a Joint runs it after them on the
  pixels that show the source (:func:`distort_after_padding`): each adjustment is per pixel
  and the contrast's mean is the whole source's, so the result is v2's, the fill undistorted.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import copy

import numpy as np

from . import _iou_crop
from ._steps import Step, _converts, _fill, _interpolation, _pair, _range, _step_name, to_steps

__all__: List[str] = []

#: The v2 classes that pad (and RandomCrop crops): natively fused into the geometry.
PADS = ("Pad", "RandomCrop", "RandomZoomOut")


def zooms(step: Any) -> bool:
    """Whether ``step`` is v2's RandomZoomOut (it pads with a probability, by a drawn share)."""
    return type(step).__name__ == "RandomZoomOut"


#: v2 colour classes of the detection references (beside those of ``_joint._VALUES``).
COLOURS = ("RandomPhotometricDistort",)
#: The steps a RandomPhotometricDistort may precede and still run natively after them.
_MOVES = ("Pad", "RandomZoomOut", "RandomHorizontalFlip", "RandomVerticalFlip")
#: Steps that may pad the image (CenterCrop with zeros, when it is smaller): v2 distorts their
#: padding with the photo when they come before the distort.
_PADDING = (*PADS, "CenterCrop")


def distort_after_padding(parts: List[Any]) -> List[Any]:
    """A Joint's flattened chain with each RandomPhotometricDistort that only constant padding
    and flips follow up to the next step of another kind moved after them, marked so that it
    distorts only the output pixels showing the source (v2 distorts the image, then pads it
    with the fill; adjustments per pixel and the contrast's mean of the whole image commute
    with those moves). After a step that may pad, whose padding v2 distorts too, a distort
    moves after flips only and stays on the whole image. Any other distort stays where it is
    (the plan names a geometric step after it)."""
    out = list(parts)
    for i in range(len(out) - 1, -1, -1):
        if type(out[i]).__name__ != "RandomPhotometricDistort":
            continue
        padded = any(type(p).__name__ in _PADDING for p in out[:i])
        j = i + 1
        while j < len(out) and type(out[j]).__name__ in _MOVES and \
                not (padded and type(out[j]).__name__ in _PADDING) and \
                getattr(out[j], "padding_mode", "constant") == "constant":
            j += 1
        if j > i + 1:
            moved = copy.copy(out[i])
            moved._before_padding = not padded
            moved._after_steps = tuple(type(p).__name__ for p in out[:i])
            out[i:j] = out[i + 1:j] + [moved]
    return out


@_converts("RandomPhotometricDistort")
def _photometric(t: Any, where: str) -> List[Dict[str, Any]]:
    """v2's RandomPhotometricDistort: ColorJitter's kind with v2's draws (each adjustment with
    probability p, contrast first or after hue, a channel permutation with p); 2: only on the
    pixels showing the source (moved after the padding by :func:`distort_after_padding`)."""
    ranges = [_range(r) for r in (t.brightness, t.contrast, t.saturation, t.hue)]
    if any(r is None for r in ranges):
        raise TypeError(f"{where}: brightness, contrast, saturation and hue must be (lo, hi)")
    return [Step("color_jitter", ranges=ranges, p=float(t.p),
                 photometric=2 if getattr(t, "_before_padding", False) else 1)]


#: v2 classes that turn a Joint's image natively: Pillow's rotation or affine on the rendered
#: image (its first step after the resample), its draws recorded in the row's geometry record
#: (``views.h`` kGeoAngle, then the translation, scale and shears), which boxes, keypoints and
#: masks follow in Python with v2's own kernels (:func:`turn`).
TURNS = ("RandomRotation", "RandomAffine")
#: The geometry record's kGeoAngle (``views.h``): translate x, y, scale, shear x, y follow it.
_ANGLE = 13


def turn_refusal(step: Any, kind: str, before: Any) -> Optional[str]:
    """Why v2's RandomRotation or RandomAffine ``step`` cannot turn a Joint natively (a string
    naming it), or None. ``kind``: what v2 holds for the image there ("pil", "image", "plain");
    ``before``: a step after the resample that comes before it (a colour step, or a first
    rotation), or None."""
    where = _step_name(step)
    if getattr(step, "expand", False):
        return (f"{where} has expand=True (v2 grows the canvas to the rotated image's hull, by the "
                "drawn angle; natively the output keeps its size): it runs on torch's path")
    if kind != "pil":
        return (f"{where} follows the chain's tensor conversion (v2 rotates a tensor with torch's "
                "kernel; natively a rotation is Pillow's, on the PIL image): put it before the "
                "conversion")
    if type(before).__name__ == "RandomIoUCrop":
        return (f"{where} and {_step_name(before)} in one Joint (natively the crop is drawn on "
                "the canvas before any rotation or affine)")
    if before is not None:
        return (f"{where} follows {_step_name(before)} (natively one rotation or affine, the "
                "first step after the crops, resizes, pads and flips: its draws are recorded for "
                "the boxes, keypoints and masks)")
    return None


def turn_mask_refusal(step: Any) -> Optional[str]:
    """Why v2's RandomRotation or RandomAffine ``step`` cannot turn a ``tv_tensors.Mask`` (v2
    raises: a fill of several values for the mask's one channel), or None."""
    from torchvision import tv_tensors
    from torchvision.transforms.v2._utils import _get_fill

    fill = _get_fill(step._fill, tv_tensors.Mask)
    if isinstance(fill, (list, tuple)) and len(fill) > 1:
        return (f"{_step_name(step)} fills a tv_tensors.Mask with {fill!r} (v2 raises: a mask has "
                "one channel; give masks their own, fill={tv_tensors.Mask: 0, 'others': ...})")
    return None


def turn_params(step: Any, g: Any) -> Dict[str, Any]:
    """The parameters v2's ``make_params`` gives ``step`` (a RandomRotation or RandomAffine),
    from a row's geometry record ``g``: the draws the native image step made."""
    angle = float(g[_ANGLE])
    if type(step).__name__ == "RandomRotation":
        return {"angle": angle}
    return {"angle": angle, "translate": (int(g[_ANGLE + 1]), int(g[_ANGLE + 2])),
            "scale": float(g[_ANGLE + 3]), "shear": (float(g[_ANGLE + 4]), float(g[_ANGLE + 5]))}

#: What to write instead of the steps of torchvision's references that are the references' own
#: code (not v2 classes, so not recognised), by class name: the end of a fallback warning.
REFERENCE_HINTS = {
    # The segmentation reference (v2_extras.py).
    "PadIfSmaller": (" (torchvision's segmentation reference pads with it; "
                     "v2.RandomCrop(crop_size, pad_if_needed=True, fill={tv_tensors.Mask: 255, "
                     "'others': 0}) in place of it and the RandomCrop after it pads natively, "
                     "on both sides rather than right and bottom)"),
    # The detection reference's lsj preset (transforms.py): it takes (image, target), so inside
    # a Joint it would see the whole structure as its image and move no box.
    "FixedSizeCrop": (" (torchvision's detection reference crops with it in its lsj preset, "
                      "taking (image, target) rather than a v2 structure; "
                      "v2.RandomCrop(size, pad_if_needed=True, fill=mean) in place of it crops "
                      "and pads natively, its boxes following, padding on both sides rather "
                      "than right and bottom)"),
}


@_converts("ScaleJitter")
def _scale_jitter(t: Any, where: str) -> List[Dict[str, Any]]:
    """v2's ScaleJitter: the output size drawn per sample (the sample's keyed draws) as v2 draws
    it, then resized as ``Resize((height, width))``."""
    interp = _interpolation(getattr(t, "interpolation", "bilinear"), where)
    height, width = _pair(t.target_size, where)
    lo, hi = (float(v) for v in t.scale_range)
    if not 0 < lo <= hi:
        raise TypeError(f"{where}: scale_range must be (lo, hi) with 0 < lo <= hi, got "
                        f"{tuple(t.scale_range)}")
    return [Step("resize", size_h=height, size_w=width, scale_jitter=[lo, hi],
                 interpolation=interp)]


@_converts("RandomZoomOut")
def _zoom_out(t: Any, where: str) -> List[Dict[str, Any]]:
    """v2's RandomZoomOut: with probability p, the image at a drawn offset in a canvas of its
    size times a drawn ratio, padded with the fill (the draws the sample's keyed ones, made as
    v2 makes them); natively where that is the output's one padding (TransformPipeline)."""
    lo, hi = (float(v) for v in t.side_range)
    return [Step("pad", pad=[0, 0, 0, 0], fill=_fill(t.fill, where), pad_mode="constant",
                 zoom_out=[lo, hi], p=float(t.p))]


def image_fill_refusal(step: Any, geometric: List[Any], fill_of: Callable[[Any], Any],
                       with_fill: Callable[[Any, Any], Any]) -> Optional[str]:
    """Why the v2 Pad/RandomCrop/RandomZoomOut ``step`` among a Joint chain's ``geometric``
    steps cannot pad the image natively with its fill (``fill_of(step)``: the image's entry of
    a per-type fill; ``with_fill(p, fill)``: ``p`` padding every leaf with it), or None. The
    native rule decides (``_C.fuses``, ``TransformPipeline::Create``: a zero fill fuses always,
    another constant fill where it is the image's one padding and no resize follows it), asked
    of the geometric steps and, to name the step in its way, of ``step`` beside each of them."""
    from .. import _C

    try:
        steps = [to_steps(with_fill(p, fill_of(p) or 0) if type(p).__name__ in PADS else p)
                 for p in geometric]
    except (TypeError, ValueError):
        return None  # a step without a native form: the chain's split names it

    def fuses(beside: List[Any]) -> bool:
        flat: List[Any] = []
        at = 0
        for p, native in zip(geometric, steps):
            if p is step:
                at = len(flat)
            if p is step or any(p is b for b in beside):
                flat += native
        return bool(_C.fuses(flat, at))

    fill = fill_of(step)
    if not fuses([]):
        return (f"pads the image with {fill!r} and padding_mode "
                f"{getattr(step, 'padding_mode', 'constant')!r} (natively a constant fill, one "
                "level or three)")
    if fuses(geometric):
        return None
    for other in geometric:
        if other is not step and not fuses([other]):
            return (f"pads the image with {fill!r} beside {_step_name(other)}, which pads it "
                    "otherwise or resizes it after (natively a fill other than zero is the "
                    "image's one padding, after the one resample)")
    return f"pads the image with {fill!r}, which is not its one padding natively"


def to_xyxy(b: Any, fmt: str) -> Any:
    """Boxes ``b`` (numpy, [..., 4]) of format ``fmt`` as XYXY."""
    if fmt == "XYWH":
        return np.concatenate([b[..., :2], b[..., :2] + b[..., 2:]], -1)
    if fmt == "CXCYWH":
        return np.concatenate([b[..., :2] - b[..., 2:] / 2, b[..., :2] + b[..., 2:] / 2], -1)
    return b


def from_xyxy(b: Any, fmt: str) -> Any:
    """XYXY boxes ``b`` (numpy) in format ``fmt``."""
    if fmt == "XYWH":
        return np.concatenate([b[..., :2], b[..., 2:] - b[..., :2]], -1)
    if fmt == "CXCYWH":
        return np.concatenate([(b[..., :2] + b[..., 2:]) / 2, b[..., 2:] - b[..., :2]], -1)
    return b


#: The geometry record's field with the seed of the row's draws made in Python (``views.h``
#: kGeoDrawSeed; the rotation's draws follow it, :data:`_ANGLE`).
_DRAW_SEED = 12
#: v2 classes flipping the image: after a RandomIoUCrop they move the slice taken.
_FLIPS = ("RandomHorizontalFlip", "RandomVerticalFlip")
#: Steps that may follow a RandomIoUCrop natively besides flips: they change each pixel alone
#: (or the type), so they commute with the crop (the slice of the rendered image).
_PER_PIXEL = ("ToImage", "PILToTensor", "ToTensor", "ToPureTensor", "ToDtype",
              "ConvertImageDtype", "Normalize", "SanitizeBoundingBoxes", "ClampBoundingBoxes",
              "ConvertBoundingBoxFormat", "ClampKeyPoints")


def split_iou_crop(parts: List[Any], geometric: Any) -> Tuple[List[Any], Any, Optional[str]]:
    """A Joint's flattened chain without its RandomIoUCrop, that step (None without one; its
    place in the chain in ``at_index``), and
    why it cannot run natively (a string naming the step) or None. ``geometric``: the class names of
    the steps fused into the native geometry. Natively the crop is a slice of the rendered
    canvas, so only flips and per-pixel steps may follow it, and no flip may precede it (the
    boxes it draws against are the canvas's before the flips)."""
    at = [i for i, p in enumerate(parts) if type(p).__name__ == "RandomIoUCrop"]
    if not at:
        return parts, None, None
    step = parts[at[0]]
    if len(at) > 1:
        return parts, step, (f"{_step_name(parts[at[1]])} crops a second time (natively one "
                             "RandomIoUCrop)")
    for p in parts[:at[0]]:
        if type(p).__name__ in _FLIPS:
            return parts, step, (f"{_step_name(step)} follows {_step_name(p)} "
                                 "(natively the crop is drawn on the canvas before any flip)")
    for p in parts[at[0] + 1:]:
        name = type(p).__name__
        if name not in _FLIPS and (name in geometric or name not in _PER_PIXEL):
            return parts, step, (f"{_step_name(p)} follows {_step_name(step)} (natively "
                                 "the crop is a slice of the rendered image: only flips and "
                                 "per-pixel steps may follow it)")
    return parts[:at[0]] + parts[at[0] + 1:], step, None


def at_index(parts: List[Any], iou: Any) -> int:
    """Where ``split_iou_crop`` took the RandomIoUCrop ``iou`` from ``parts`` (its flattened
    chain): the index of the first step after it in what it returned; -1 without one."""
    return next((i for i, p in enumerate(parts) if p is iou), -1) if iou is not None else -1


def unflipped(g: Any) -> Any:
    """A row's geometry record without its flips: the canvas a RandomIoUCrop crops."""
    g = np.array(g, dtype=np.float64)
    g[8] = g[9] = 0.0
    return g


class Crop:
    """An image or mask leaf of a row (``_structures._Leaf``) with the crop a RandomIoUCrop drew:
    (top, left, height, width) on the unflipped canvas, and the flips after it."""

    __slots__ = ("leaf", "top", "left", "height", "width")

    def __init__(self, leaf: Any, top: int, left: int, height: int, width: int):
        self.leaf, self.top, self.left, self.height, self.width = leaf, top, left, height, width

    def take(self, t: Any, hwc: bool) -> Any:
        """The crop of ``t``, the rendered (flipped) canvas ([C, H, W]; [H, W, C] when ``hwc``;
        a mask [H, W]): a slice, the pixels v2's crop keeps."""
        if t.dim() == 2 or hwc:
            return t[self.top:self.top + self.height, self.left:self.left + self.width]
        return t[..., self.top:self.top + self.height, self.left:self.left + self.width]


class Turn(Crop):
    """A mask leaf of a row with the rotation or affine its image drew (:func:`turn`): v2's step
    on the rendered mask, as v2 turns a ``tv_tensors.Mask`` (nearest, the fill its per-type
    fill gives masks, torch's kernel)."""

    __slots__ = ("step", "params")

    def __init__(self, leaf: Any, step: Any, params: Dict[str, Any]):
        self.leaf, self.step, self.params = leaf, step, params

    def take(self, t: Any, hwc: bool) -> Any:
        import torch
        from torchvision import tv_tensors

        return self.step.transform(tv_tensors.Mask(t), self.params).as_subclass(torch.Tensor)


def turn(step: Any, structure: Any, g: Any, rebuild: Callable[[Any, Any], Any]) -> Any:
    """A row's structure, its boxes and keypoints moved to the rendered image before ``step``
    (v2's RandomRotation or RandomAffine), after it: boxes and keypoints by v2's ``transform``
    with the draws the record ``g`` holds (v2's kernels: the corners through the affine map,
    their hull, clamped, integer boxes rounded as v2 rounds them), each mask leaf wrapped in a
    :class:`Turn` (taken by :func:`take_crops`)."""
    from torchvision import tv_tensors

    params = turn_params(step, g)

    def move(value: Any) -> Any:
        if isinstance(value, (tv_tensors.BoundingBoxes, tv_tensors.KeyPoints)):
            return step.transform(value, params)
        if type(value).__name__ == "_JointMask":  # _structures' leaf of a mask view
            return Turn(value, step, params)
        return rebuild(value, move)

    return move(structure)


def iou_crop_params(step: Any, flat: List[Any], seed: int) -> Dict[str, Any]:
    """v2's RandomIoUCrop ``step``'s parameters for the leaves ``flat`` (its boxes and
    keypoints), drawn from ``seed``: what ``step.make_params(flat)`` returns with torch's
    global generator seeded from ``seed``. v2's loop costs a few hundred torch operations a
    sample in the iterating thread; :func:`._iou_crop.draw` makes the same draws from the same
    mt19937 stream in numpy and does the arithmetic in the boxes' dtype as torch does it, every
    trial's at once, so the parameters are the same (``test_iou_crop_draws.py`` and
    ``test_detection_ssd.py`` check them against v2's for many draws); boxes it does not
    follow, or a subclass of the step, run v2's own make_params."""
    import torch
    from torchvision import tv_tensors
    from torchvision.transforms.v2 import RandomIoUCrop

    boxes = [v for v in flat if isinstance(v, tv_tensors.BoundingBoxes)]
    v2s = getattr(step.make_params, "__func__", None) is RandomIoUCrop.make_params
    if not v2s or len(boxes) != 1 or not _iou_crop.fits(boxes[0]):
        # A make_params of the user's own, several boxes leaves (v2 raises) or another dtype.
        from ..core._sample_keys import _SEEDED

        with _SEEDED:  # the global generator, seeded: one thread at a time (_run_seeded)
            saved = torch.default_generator.get_state()
            try:
                torch.default_generator.manual_seed(seed)
                return step.make_params(flat)
            finally:
                torch.default_generator.set_state(saved)
    return _iou_crop.draw(step, boxes[0], seed)


def iou_crop(step: Any, structure: Any, g: Any, rebuild: Callable[[Any, Any], Any]) -> Any:
    """A row's structure, its boxes and keypoints on the canvas before ``step`` (v2's
    RandomIoUCrop), after the crop and the flips that follow it as v2 moves them: the crop
    drawn as v2's ``make_params`` draws it from torch's generator seeded from the row's draw
    seed (:func:`iou_crop_params`), the leaves moved by v2's ``transform`` (boxes whose centre
    falls outside zeroed, for SanitizeBoundingBoxes to drop), then flipped with v2's kernels
    where the record says the row flipped (XYXY float boxes by :func:`._iou_crop.crop_boxes`,
    the same arithmetic in numpy); each image and mask leaf wrapped in a :class:`Crop`. ``rebuild``:
    the walk over sample structures (``references.rebuild``)."""
    import torch
    from torchvision import tv_tensors
    from torch.utils._pytree import tree_flatten
    from torchvision.transforms.v2 import RandomIoUCrop
    from torchvision.transforms.v2 import functional as F

    # What v2 hands make_params beside the image (whose size the boxes' canvas is): the boxes
    # and keypoints; the plain tensors (labels) v2 passes by when the sample has an image.
    found = [v for v in tree_flatten(structure)[0]
             if isinstance(v, (tv_tensors.BoundingBoxes, tv_tensors.KeyPoints))]
    params = iou_crop_params(step, found, int(g[_DRAW_SEED]))
    width, height = int(g[6]), int(g[7])
    if params:
        top, left, height, width = (params[k] for k in ("top", "left", "height", "width"))
        # The rendered canvas is flipped: the crop's mirror image there.
        left = int(g[6]) - left - width if g[8] else left
        top = int(g[7]) - top - height if g[9] else top

    own = getattr(step.transform, "__func__", None) is RandomIoUCrop.transform

    def move(value: Any) -> Any:
        if own and isinstance(value, tv_tensors.BoundingBoxes):
            moved = _iou_crop.crop_boxes(value, params, (bool(g[8]), bool(g[9])))
            if moved is not None:  # XYXY float boxes: numpy, as v2's kernels compute them
                return moved
        if isinstance(value, (tv_tensors.BoundingBoxes, tv_tensors.KeyPoints)):
            value = step.transform(value, params)
            if g[8]:
                value = F.horizontal_flip(value)
            if g[9]:
                value = F.vertical_flip(value)
            return value
        if hasattr(value, "k") and not isinstance(value, torch.Tensor):  # an image or mask leaf
            return Crop(value, top, left, height, width) if params else value
        return rebuild(value, move)

    return move(structure)


def take_crops(views: List[Any], structures: List[Any], hwc: bool,
               rebuild: Callable[[Any, Any], Any]) -> Tuple[List[Any], List[Any]]:
    """A batch's views and rows' structures with each :class:`Crop` (:func:`iou_crop`; a
    :class:`Turn`, :func:`turn`) taken:
    the view's tensor of that row replaced by its crop (a view that was one batch tensor
    becomes the list of its rows) and the Crop by its leaf."""
    views = list(views)

    def walk(value: Any, row: int) -> Any:
        if isinstance(value, Crop):
            k = value.leaf.k
            if not isinstance(views[k], list):
                views[k] = list(views[k].unbind(0))
            views[k][row] = value.take(views[k][row], hwc)
            return value.leaf
        return rebuild(value, lambda v: walk(v, row))

    return views, [walk(s, row) for row, s in enumerate(structures)]
