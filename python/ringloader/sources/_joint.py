"""An :class:`ringloader.Joint` on the native path: its image rendered by the native chain, its
boxes and keypoints moved in Python by the geometry that chain recorded for the row.

A v2 transform is divided into three parts (:func:`plan`): the image's chain (what an
``ImageFile`` with that transform would run natively: geometric steps fused into one resample,
then colour and output steps), and the steps that touch only boxes (``SanitizeBoundingBoxes``,
``ClampBoundingBoxes``, ``ConvertBoundingBoxFormat``, ``ClampKeyPoints``) before the first
geometric step and after the last. The native loader records, per row, the crop rectangle in
source pixels, the output size and the flips it drew (``pipeline/views.h``); :func:`resolve` moves
each ``BoundingBoxes``/``KeyPoints`` leaf of the row's structure by that geometry as v2's kernels
would (one affine map per axis: v2's crops, resizes, pads and flips compose into it), clamps
where v2 clamps, and runs the box-only steps (a RandomIoUCrop: drawn and taken in Python,
``_detection.iou_crop``). A RandomRotation or RandomAffine after those steps turns the rendered
image natively, its draws recorded with the geometry: boxes, keypoints and masks follow it with
v2's own kernels (``_detection.turn``); with ``expand=True`` it is not planned.

A ``mode="mask"`` reference in the structure is rendered by its own view of its file
(:attr:`JointPlan.mask`): the same geometric steps with torch's nearest interpolation (v2
resizes a Mask as a tensor: ``View::tensor_nearest``), replaying the image view's geometric draws
(``View::share_geometry``), and none of the colour or output steps,
which v2 does not apply to a ``tv_tensors.Mask``. Padding gives the mask the fill a per-type dict
gives masks (``{tv_tensors.Mask: 255, "others": 0}``, as torchvision's segmentation reference
pads; ``views.h`` TakeMaskFill) and the image its own (zero, fused), and a ``ToDtype`` dtype for
masks (int64 there) converts the native mask (:attr:`JointPlan.mask_dtype`). A step that would
change a Mask otherwise (``ConvertImageDtype``, a ``ToDtype`` dict without an entry for it) or a
fill the label view cannot give keeps such a Joint on torch's path.

One semantics on every path (``references.runnable``): a Joint's image references are decoded to the
PIL images the user's own code would have opened, its masks to ``tv_tensors.Mask``, and v2 runs
the transform on them, with a ``ToImage()`` added where a chain without a tensor conversion
first needs a tensor (before ``ToDtype``, ``ConvertImageDtype``, ``Normalize`` or
``ToPureTensor``, else at its end). So the steps before the chain's tensor conversion run with
Pillow's kernels and those after it with torch's tensor kernels, on every path alike: natively,
the steps after one whose tensor result equals Pillow's (``T.split``), then the per-pixel rest
(colour steps, ``ToDtype``, ``Normalize``) run by v2 on the rendered image (``_joint_tail``); a
Joint with any other such step stays on torch's path, named. The plan follows the image's type
(a PIL image, a ``tv_tensors.Image``, or a plain tensor after ``PILToTensor``, ``ToTensor`` or
``ToPureTensor``) as v2 dispatches on it: a ``ToDtype`` takes the image's entry of its dict, a
step v2 passes the image through (a PIL image, or uint8 to uint8) is no step for it.
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import copy

import numpy as np

from ..transforms import _detection
from .. import transforms as T  # noqa: F401 (_detection: converters it registers)
from . import _integer_boxes
from . import _joint_tail
from . import _sanitize
from ._joint_tail import _NO_DTYPE, image_dtype as _image_dtype
from .references import _CONVERSIONS, _TENSOR_ONLY, Spread, first_plain, rebuild, runnable

__all__ = ["JointPlan", "plan", "refusal", "resolve"]

#: v2 classes whose effect on pixels is a crop, resize, pad or flip: fused into the native
#: geometry, so boxes and keypoints follow the recorded rectangle (RandomResize: its size drawn
#: per sample, natively from the loader's per-sample seed).
_GEOMETRIC = {"Resize", "RandomResize", "RandomShortestSize", "ScaleJitter", "CenterCrop",
              "RandomResizedCrop", "RandomHorizontalFlip", "RandomVerticalFlip", *_detection.PADS}
#: Of those, the ones after which v2 clamps boxes to the new canvas: always (their kernel runs
#: for every sample), or only when they pad or crop (see ``_clamping``).
_CLAMPING = {"CenterCrop", "RandomResizedCrop", "Pad"}
_CLAMPING_WHEN_RUN = {"RandomCrop", "RandomZoomOut"}
#: v2 classes that change pixel values only (boxes and keypoints pass through them unchanged).
_VALUES = {"ColorJitter", "Grayscale", "RandomGrayscale", "GaussianBlur", "RandomPosterize",
           "RandomSolarize", "RandomAdjustSharpness", "RandomAutocontrast", "RandomEqualize",
           "RandomInvert", "ToDtype", "ConvertImageDtype", "Normalize", *_detection.COLOURS}
#: v2 classes that touch boxes or keypoints only: run in Python on the row's structure.
_BOXES_ONLY = {"SanitizeBoundingBoxes", "ClampBoundingBoxes", "ConvertBoundingBoxFormat",
               "ClampKeyPoints"}


class JointPlan(NamedTuple):
    """How a v2 transform runs natively for a Joint (see the module docstring)."""

    image: Any                # the image's chain: a v2 Compose (the reference's transform)
    before: Tuple[Any, ...]   # box-only steps before the first geometric step
    after: Tuple[Any, ...]    # box-only steps after the last geometric step
    # Whether v2 clamps float boxes to the output: "always" (a step whose kernel always runs
    # pads or crops), "framed" (only a RandomZoomOut or a RandomCrop, whose kernels run only
    # when the sample is padded or cropped: the row's rectangle says) or "" (never).
    clamps: str
    pure: bool                # ToPureTensor: every leaf a plain tensor, the image too
    mask: Any                 # a mask reference's chain: the geometric steps, nearest
    mask_refusal: Optional[str]  # why a mask reference cannot follow natively, or None
    image_pure: bool = False  # the image comes out a plain tensor (PILToTensor, ToTensor...)
    # The first step that v2 runs on the image while it is a plain tensor, and whether every
    # leaf is one then (after ToPureTensor): v2 takes the sample's first plain tensor for the
    # image, so natively the image must be that one (``refusal``).
    plain_step: Optional[Tuple[str, bool]] = None
    # The dtype v2's ToDtype gives a Mask (``{..., tv_tensors.Mask: torch.int64}``, as
    # torchvision's segmentation reference asks), or None: the mask keeps its stored uint8.
    mask_dtype: Any = None
    iou: Any = None  # v2's RandomIoUCrop: drawn against the boxes (``_detection.iou_crop``)
    turn: Any = None  # v2's RandomRotation/RandomAffine after the geometry (``_detection.turn``)
    # The per-pixel steps after the tensor conversion that torch runs with its tensor kernels:
    # v2 itself on the rendered image (``_joint_tail``), the image a "image" or "plain" there.
    tail: Any = None
    tail_kind: str = ""


# Plans (or why not) by the transform's id; the transform is kept so the id stays its own. A
# Dataset that builds its Compose in __getitem__ brings a new object each sample: the table is
# emptied when it grows past _PLANS_KEPT rather than holding every one.
_PLANS: Dict[int, Tuple[Any, Any]] = {}
_PLANS_KEPT = 256


def _fill_for(step: Any, kind: str) -> Any:
    """The fill v2's Pad/RandomCrop gives a leaf of ``kind`` ("pil", "image", "plain" or "mask"):
    as v2's ``_get_fill``, the entry of the leaf's exact type in a per-type dict, else its
    "others" (None, zero, without either)."""
    fill = getattr(step, "fill", 0)
    if not isinstance(fill, dict):
        return fill
    import torch
    from PIL import Image
    from torchvision import tv_tensors

    key = {"pil": Image.Image, "image": tv_tensors.Image, "plain": torch.Tensor,
           "mask": tv_tensors.Mask}[kind]
    return fill[key] if key in fill else fill.get("others")


def _mask_fill(step: Any) -> Optional[int]:
    """The level v2 pads a ``tv_tensors.Mask`` with at a constant Pad/RandomCrop, or None when it
    is not one integer level in 0..255 (the label view pads with one: ``views.h`` TakeMaskFill)."""
    value = _fill_for(step, "mask")
    if isinstance(value, (list, tuple)):
        if len(set(float(v) for v in value)) != 1:
            return None
        value = value[0]
    value = 0.0 if value is None else float(value)
    return int(value) if value.is_integer() and 0 <= value <= 255 else None


def _with_fill(step: Any, fill: Any) -> Any:
    """A copy of the v2 Pad/RandomCrop ``step`` padding every leaf with ``fill``: the one its
    leaf gets from a per-type dict (the image's chain, the mask's view)."""
    if not isinstance(getattr(step, "fill", 0), dict):
        return step
    from torchvision.transforms.v2._utils import _setup_fill_arg

    step = copy.copy(step)
    step.fill = fill
    step._fill = _setup_fill_arg(fill)
    return step


def _pads(step: Any) -> bool:
    return bool(getattr(step, "padding", None) or getattr(step, "pad_if_needed", False)
                or _detection.zooms(step))


def _clamping(step: Any, clamps: str) -> str:
    """``JointPlan.clamps`` after the geometric ``step``, ``clamps`` before it. v2's Pad,
    CenterCrop and RandomResizedCrop run their box kernel (which clamps) for every sample; its
    RandomCrop pads (every sample where it has a ``padding``) and crops only where the canvas
    asks, its RandomZoomOut pads only where its p draw says so: neither touches boxes otherwise."""
    name = type(step).__name__
    if (name in _CLAMPING or (name == "RandomCrop" and any(step.padding or ()))
            or (name == "RandomZoomOut" and step.p >= 1.0)):
        return "always"
    if name in _CLAMPING_WHEN_RUN and not (name == "RandomZoomOut" and step.p <= 0.0):
        return clamps or "framed"
    return clamps


def _nearest(step: Any) -> Any:
    """``step`` resampling nearest, as v2 resamples a Mask whatever the step's interpolation."""
    if getattr(step, "interpolation", None) is None:
        return step
    from torchvision.transforms import v2

    step = copy.copy(step)
    step.interpolation = v2.InterpolationMode.NEAREST
    return step


def _mask_dtype(step: Any) -> Any:
    """What v2's ``step`` (a value step) does to a ``tv_tensors.Mask``: None (nothing), the dtype
    a ``ToDtype`` converts it to (its values unchanged: v2 scales only images and videos), or
    ``_NO_DTYPE`` where natively the mask cannot follow (``ConvertImageDtype``, or a dict with
    neither a Mask entry nor "others": v2 raises)."""
    from torchvision import tv_tensors

    name = type(step).__name__
    if name == "ConvertImageDtype":
        return _NO_DTYPE
    if name == "ToDtype" and isinstance(step.dtype, dict):
        dtypes = step.dtype
        if tv_tensors.Mask in dtypes:
            return dtypes[tv_tensors.Mask]
        return dtypes["others"] if "others" in dtypes else _NO_DTYPE
    return None


def _plan(transform: Any) -> Any:
    """A :class:`JointPlan`, or a string saying which step keeps it off the native path."""
    parts, iou, why = _detection.split_iou_crop(flat := T._flatten(runnable(transform)),
                                                _GEOMETRIC)
    if why:
        return why
    iou_at = _detection.at_index(flat, iou)  # box steps after it follow it: it moves boxes
    parts = _detection.distort_after_padding(parts)
    odd = [p for p in parts if not type(p).__module__.startswith("torchvision.transforms.v2")]
    if odd:
        spread = isinstance(odd[0], Spread)  # a preset called with the structure's items
        step = odd[0].preset if spread else odd[0]
        qualname = getattr(step, "__qualname__", None)
        what = (f"the Python function {getattr(step, '__module__', '?')}.{qualname}"
                if qualname is not None and not isinstance(step, type) else T._step_name(step))
        hint = _detection.REFERENCE_HINTS.get(type(step).__name__, Spread.hint if spread else "")
        return f"its transform holds {what}, which is not a torchvision v2 transform{hint}"
    from torchvision.transforms import v2

    image: List[Any] = []
    before: List[Any] = []  # box steps before the geometry, and after it
    after: List[Any] = []
    geometric_seen = cropped = False
    first_value: Optional[Any] = None
    clamps = ""
    mask: List[Any] = []
    mask_refusal: Optional[str] = None
    mask_dtype = turn = None  # ToDtype's dtype for masks; v2's rotation or affine step
    kind = "pil"  # what v2 holds for the image: "pil", "image" (tv_tensors.Image) or "plain"
    unwrapped = False  # after ToPureTensor: every leaf a plain tensor
    plain_step: Optional[Tuple[str, bool]] = None
    moves = (*_GEOMETRIC, *_detection.TURNS)  # the steps boxes follow
    for i, step in enumerate(parts):
        name = type(step).__name__
        where = T._step_name(step)
        geometric_seen |= 0 <= iou_at <= i
        moved_later = i < iou_at or any(type(p).__name__ in moves for p in parts[i + 1:])
        if name in _BOXES_ONLY:
            if geometric_seen and moved_later:
                return f"{where} sits between geometric steps (natively before or after them)"
            (after if geometric_seen else before).append(step)
            continue
        if name == "ToPureTensor":
            # Unwraps every leaf: the image (JointPlan.pure) and, run on the row's structure,
            # the boxes; before a geometric step it would leave v2 no boxes to move.
            if moved_later:
                return f"{where} comes before a geometric step"
            if kind == "pil":
                return (f"{where} comes before the chain's tensor conversion (v2 passes the PIL "
                        "image through it)")
            (after if geometric_seen else before).append(step)
            kind, unwrapped = "plain", True
            continue
        if name in _CONVERSIONS:
            if kind == "pil":
                kind = "image" if name == "ToImage" else "plain"
                image.append(step)
            elif name == "ToImage" and kind == "plain":
                # v2 takes the sample's first plain tensor for the image and wraps it.
                plain_step = plain_step or (where, unwrapped)
                kind = "image"
                image.append(step)
            # Otherwise v2 passes the tensor through (natively ToTensor would convert it).
            continue
        if name in _detection.TURNS:
            why = _detection.turn_refusal(step, kind, first_value or turn or iou)
            if why:
                return why
            turn = step  # boxes, keypoints and masks: v2's own step, in Python (resolve)
            mask_refusal = mask_refusal or _detection.turn_mask_refusal(step)
            image.append(_with_fill(step, _fill_for(step, kind) or 0))  # the image's fill
            geometric_seen = True
            continue
        if name in _GEOMETRIC:
            if first_value is not None or turn is not None:
                first_value = first_value or turn
                return (f"{where} follows {T._step_name(first_value)}: natively it would move "
                        "the pixels after the resample, where boxes cannot follow it")
            why = name in _detection.PADS and _detection.image_fill_refusal(
                step, [p for p in parts if type(p).__name__ in _GEOMETRIC],
                lambda p: _fill_for(p, kind), _with_fill)
            if why:  # the image's fill fuses as its one padding (a Mask's is its view's)
                return f"{where} {why}"
            if name in _detection.PADS and mask_refusal is None and _pads(step):
                if _mask_fill(step) is None:
                    mask_refusal = (f"{where} pads a tv_tensors.Mask with {_fill_for(step, 'mask')!r} "
                                    "(natively a mask pads with one integer level in 0..255)")
                elif _mask_fill(step) and any(type(p).__name__ == "CenterCrop"
                                              or (type(p).__name__ in _detection.PADS
                                                  and _pads(p) and not _mask_fill(p))
                                              for p in parts if p is not step):
                    mask_refusal = (f"{where} pads a tv_tensors.Mask with {_mask_fill(step)} and "
                                    "another step pads it with 0 (natively a mask pads with one "
                                    "level)")
            if name in _detection.PADS:
                mask.append(_nearest(_with_fill(step, _mask_fill(step) or 0)))
                step = _with_fill(step, _fill_for(step, kind) or 0)
            if name in _detection.PADS and _pads(step) and cropped:
                return (f"{where} pads after a crop (v2 clamps boxes to each canvas in turn, "
                        "which one rectangle does not say)")
            geometric_seen = True
            cropped |= name in ("CenterCrop", "RandomResizedCrop", "RandomCrop")
            clamps = _clamping(step, clamps)
            if name not in _detection.PADS:
                mask.append(_nearest(step))
        elif name in _VALUES:
            to_mask = _mask_dtype(step)
            if mask_refusal is None and to_mask is _NO_DTYPE:
                mask_refusal = (f"{where} converts a tv_tensors.Mask as an image, or has no dtype "
                                "for it (v2 raises): give masks a dtype or None, as "
                                "ToDtype({tv_tensors.Image: ..., tv_tensors.Mask: torch.int64, "
                                "'others': None}) does")
            elif to_mask is not None:
                mask_dtype = to_mask
            if kind == "pil" and name in _TENSOR_ONLY:
                if name == "Normalize":
                    return (f"{where} comes before the chain's tensor conversion (v2 refuses a "
                            "PIL image there)")
                continue  # v2 passes a PIL image through ToDtype and ConvertImageDtype
            if name == "ToDtype":
                dtype = _image_dtype(step, kind)
                if dtype is _NO_DTYPE:
                    return (f"{where} has no dtype for the image (a "
                            f"{'tv_tensors.Image' if kind == 'image' else 'plain tensor'} "
                            "there) and no 'others' (v2 raises)")
                if dtype is None:
                    continue  # v2 leaves the image as it is
                if isinstance(step.dtype, dict):
                    step = v2.ToDtype(dtype, scale=step.scale)
            if _joint_tail.keeps_uint8(step, getattr(step, "dtype", None), kind, image):
                if kind == "plain":  # v2 still takes the sample's first plain tensor for it
                    plain_step = plain_step or (where, unwrapped)
                continue
        elif not _joint_tail.colour_apply(step):  # RandomApply over colour steps: one of them
            return (f"{where} is not a crop, resize, pad, flip, rotation, affine or colour step "
                    "(boxes follow those natively)")
        if kind == "plain":
            plain_step = plain_step or (where, unwrapped)
        if name not in _GEOMETRIC:  # a value step, or a RandomApply over colour steps
            first_value = first_value or step
        image.append(step)

    found = _joint_tail.split_tail(image, iou)  # the per-pixel steps v2 runs after it
    if isinstance(found, str):
        return found
    chain, tail, tail_kind = found
    # No geometric step: the mask is rendered as decoded (v2's Compose takes no empty list).
    return JointPlan(chain, tuple(before), tuple(after), clamps, unwrapped,
                     v2.Compose(mask) if mask else None, mask_refusal, kind == "plain",
                     plain_step, mask_dtype, iou, turn, tail, tail_kind)


def plan(transform: Any) -> Any:
    """The :class:`JointPlan` of a Joint's v2 transform, or why it has none (a string naming
    the step). Computed once per transform object."""
    found = _PLANS.get(id(transform))
    if found is None or found[0] is not transform:
        if len(_PLANS) >= _PLANS_KEPT:
            _PLANS.clear()
        found = _PLANS[id(transform)] = (transform, _plan(transform))
    return found[1]


def _structure_refusal(value: Any, where: str, images: List[str],
                       masks: List[str], integer: Optional[str] = None) -> Optional[str]:
    """Why a leaf of a Joint's structure keeps it off the native path, or None; lists the
    places of its image references in `images`, of its mask references in `masks`. `integer`:
    why the transform's integer boxes cannot follow natively (None: they can)."""
    import torch
    from torchvision import tv_tensors

    from .references import ImageReference, _FrameLeaf, _VideoReference

    if isinstance(value, (_VideoReference, _FrameLeaf)):
        return (f"{where} is a video clip or a leaf of one ({type(value).__name__}): a Joint "
                "with a video batches as a clip (ringloader.video_batches)")
    if isinstance(value, ImageReference):
        if value.mode == "mask":
            masks.append(where)
            return None
        if value.mode != "RGB":
            return (f"{where} is {value.describe()} in mode {value.mode!r} (a Joint's images are "
                    "native in mode 'RGB', its label images in mode 'mask')")
        images.append(where)
        return None
    if isinstance(value, tv_tensors.BoundingBoxes):
        if not value.is_floating_point() and integer is not None:
            return f"{where} holds {value.dtype} boxes and {integer}"
        if tv_tensors.is_rotated_bounding_format(value.format):
            return f"{where} holds rotated boxes ({value.format.name})"
        return None
    if isinstance(value, tv_tensors.KeyPoints):
        return None if value.is_floating_point() else (
            f"{where} holds {value.dtype} keypoints (float keypoints are native)")
    if isinstance(value, tv_tensors.Mask):
        return f"{where} is a tv_tensors.Mask (a mask tensor is transformed by v2 in Python)"
    if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
        return f"{where} is a {type(value).__name__}"
    if isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            why = _structure_refusal(item, f"{where}[{i}]", images, masks, integer)
            if why is not None:
                return why
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            why = _structure_refusal(item, f"{where}[{key!r}]", images, masks, integer)
            if why is not None:
                return why
    return None


def refusal(joint: Any) -> Optional[str]:
    """Why ``joint`` cannot run natively (naming the step or the leaf), or None."""
    found = plan(joint.transform)
    if isinstance(found, str):
        return f"its Joint transform cannot run natively: {found}"
    images: List[str] = []
    masks: List[str] = []
    steps = _integer_boxes.steps(found.mask)
    why = _structure_refusal(joint.structure, "structure", images, masks,
                             steps if isinstance(steps, str) else None)
    if why is not None:
        return f"its Joint {why}"
    if len(images) != 1:
        return (f"its Joint holds {len(images)} image references (one image a Joint is native; "
                "with its masks, boxes, keypoints and values)")
    if masks and found.mask_refusal is not None:
        return f"its Joint transform cannot run natively on {masks[0]}: {found.mask_refusal}"
    if found.plain_step is not None:
        first = first_plain(joint.structure, found.plain_step[1])
        if first is not None:
            return (f"its Joint transform runs {found.plain_step[0]} on the image as a plain "
                    f"tensor, and v2 then transforms the sample's first plain tensor, {first}, "
                    "not the image (put the image first in the structure, or convert it with "
                    "ToImage())")
    return None


class JointLeaf:
    """A Joint in a stripped structure: its structure with the image and masks replaced by
    their ``_Leaf``, and the plan that moves its boxes."""

    __slots__ = ("plan", "structure", "source", "k", "masks")

    def __init__(self, plan: JointPlan, structure: Any, source: str, k: int,
                 masks: Tuple[Tuple[int, str], ...] = ()):
        self.plan = plan
        self.structure = structure
        self.source = source  # the image reference, for errors
        self.k = k  # the view that renders the image
        self.masks = masks  # (view, reference) of each mask: rendered with the image's draws


def _affine(g: Any, axis: int) -> Tuple[float, float]:
    """(scale, offset) of the recorded geometry along x (axis 0) or y (1): a source coordinate
    c lands at c * scale + offset, mirrored when flipped (boxes' and pixels' convention)."""
    lo, hi, out, flip = (g[2], g[4], g[6], g[8]) if axis == 0 else (g[3], g[5], g[7], g[9])
    scale = out / (hi - lo)
    if flip:
        return -scale, out + lo * scale
    return scale, -lo * scale


def _framed(g: Any) -> bool:
    """Whether the row's rectangle (the source pixels its output shows) is not the whole source
    image: a pad or crop ran. A RandomZoomOut that drew a canvas of the image's own size (a side
    ratio under 1 + 1 / side) looks like one not applied; v2 would clamp its boxes to it."""
    return bool(abs(g[2]) > 1e-6 or abs(g[3]) > 1e-6 or abs(g[4] - g[0]) > 1e-6
                or abs(g[5] - g[1]) > 1e-6)


# Numpy rather than torch for these few numbers a row: torch's per-op overhead (and its thread
# pool, contending with the native workers) made the batch's boxes cost more than its pixels.
def _move_boxes(boxes: Any, g: Any, clamps: str) -> Any:
    import torch
    from torchvision import tv_tensors

    fmt = boxes.format.name
    xyxy = _detection.to_xyxy(
        boxes.as_subclass(torch.Tensor).detach().cpu().numpy().astype(np.float64), fmt)
    (ax, bx), (ay, by) = _affine(g, 0), _affine(g, 1)
    x = xyxy[..., 0::2] * ax + bx  # a mirrored axis swaps the two edges
    y = xyxy[..., 1::2] * ay + by
    out_w, out_h = int(g[6]), int(g[7])
    x0, x1 = np.minimum(x[..., 0], x[..., 1]), np.maximum(x[..., 0], x[..., 1])
    y0, y1 = np.minimum(y[..., 0], y[..., 1]), np.maximum(y[..., 0], y[..., 1])
    moved = np.stack([x0, y0, x1, y1], -1)
    if boxes.clamping_mode is not None and (clamps == "always" or (clamps and _framed(g))):
        np.clip(moved, 0, [out_w, out_h, out_w, out_h], out=moved)
    moved = torch.from_numpy(_detection.from_xyxy(moved, fmt)).to(boxes.dtype)
    return tv_tensors.wrap(moved, like=boxes, canvas_size=(out_h, out_w))


def _move_keypoints(points: Any, g: Any) -> Any:
    import torch
    from torchvision import tv_tensors

    (ax, bx), (ay, by) = _affine(g, 0), _affine(g, 1)
    xy = points.as_subclass(torch.Tensor).detach().cpu().numpy().astype(np.float64)
    moved = xy * np.array([ax, ay]) + np.array([bx + g[10], by + g[11]])
    return tv_tensors.wrap(torch.from_numpy(moved).to(points.dtype), like=points,
                           canvas_size=(int(g[7]), int(g[6])))


def _move(value: Any, g: Any, clamps: str, source: str, steps: Any = None) -> Any:
    from torchvision import tv_tensors

    if isinstance(value, (tv_tensors.BoundingBoxes, tv_tensors.KeyPoints)):
        if tuple(value.canvas_size) != (int(g[1]), int(g[0])):
            raise ValueError(
                f"ringloader.Joint: {source} decodes to {int(g[0])}x{int(g[1])} (width x height) "
                f"but its {type(value).__name__} say canvas_size={tuple(value.canvas_size)} "
                "(height, width): boxes and keypoints must be in the image's pixels")
        if isinstance(value, tv_tensors.BoundingBoxes):
            # v2's own box kernels replayed step by step wherever the chain allows (integer
            # boxes: refusal() let only such chains through), so float boxes take v2's float32
            # values and SanitizeBoundingBoxes keeps what v2 keeps; else one affine map an axis.
            if not value.is_floating_point() or not isinstance(steps, str):
                return _integer_boxes.move(value, g, steps)
            return _move_boxes(value, g, clamps)
        return _move_keypoints(value, g)
    return rebuild(value, lambda v: _move(v, g, clamps, source, steps))


def resolve(leaf: JointLeaf, geometry: Any) -> Any:
    """The row's structure as v2 returns it, the image still a ``_Leaf``: boxes and keypoints
    moved by ``geometry`` (the row's record, ``_C.GEOMETRY_FIELDS`` float64) and the box-only
    steps applied."""
    structure = leaf.structure
    for step in leaf.plan.before:
        structure = _run(step, structure)
    iou = leaf.plan.iou  # drawn on the canvas before the flips that follow it
    structure = _move(structure, geometry if iou is None else _detection.unflipped(geometry),
                      leaf.plan.clamps, leaf.source, _integer_boxes.steps(leaf.plan.mask))
    if iou is not None:
        structure = _detection.iou_crop(iou, structure, geometry, rebuild)
    if leaf.plan.turn is not None:
        structure = _detection.turn(leaf.plan.turn, structure, geometry, rebuild)
    for step in leaf.plan.after:
        structure = _run(step, structure)
    return structure


#: Box-only v2 steps that transform each leaf of their types alone, without parameters: run as
#: v2's own ``transform`` on each such leaf, without v2's per-call flattening and checks (a few
#: hundred microseconds a row in the iterating thread, most of a detection batch's cost there).
_PER_LEAF = {"ConvertBoundingBoxFormat", "ToPureTensor"}


def _run(step: Any, structure: Any) -> Any:
    """v2's ``step`` applied to a row's structure."""
    kernel = getattr(step, "transform", None)
    if type(step).__name__ == "SanitizeBoundingBoxes":
        # v2's own step without tv_tensors' per-operation dispatch (the boxes it keeps are
        # wrapped again by the step itself), its mask in numpy where that follows torch.
        return _sanitize.sanitize(step, structure)
    if type(step).__name__ not in _PER_LEAF or not callable(kernel):
        return step(structure)
    types = step._transformed_types

    def walk(value: Any) -> Any:
        if isinstance(value, types):
            return kernel(value, {})
        return rebuild(value, walk)

    return walk(structure)
