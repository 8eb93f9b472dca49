"""The per-pixel steps of an :class:`ringloader.Joint` that follow its tensor conversion and that
torch runs with its tensor kernels (colour steps after ``ToImage``/``PILToTensor``): run by v2
itself on the natively rendered image, as the classification path runs its Python tail.

The native chain renders the prefix (decode, geometry, the steps whose tensor result equals
Pillow's); :func:`tail_of` takes the rest when every step of it changes only the image's pixels
(v2's colour steps, ``RandomApply`` over them, ``ToDtype``, ``Normalize``) and nothing after it
moves pixels, so boxes, keypoints and masks are final once the prefix is. :func:`run_tails`
then runs those steps on each row's image tensor, wrapped as v2 would hold it there (a
``tv_tensors.Image`` after ``ToImage``, a plain tensor after ``PILToTensor``), in the iterating
thread where the Joint's boxes are moved. On such a sample v2 transforms the image alone (an
``Image`` present, its plain tensors and its boxes and masks are passed through by colour steps;
with a plain-tensor image, the first plain tensor: ``_joint.refusal`` checks it is the image),
so the image's result is the one v2 gives the whole sample. The draws come from torch's, Python's
and numpy's generators seeded per sample from the row's draw seed (``views.h`` kGeoDrawSeed,
keyed by the loader's seed, the epoch and the sample, as every native draw), mixed once more:
the same for a seeded generator, whatever the thread count. The image is handed over in the
memory layout v2 would hold it in there (:func:`_channels_last`): torch's float reductions (a
contrast's mean) depend on it. The Joint's ``ToDtype(torch.uint8)`` on a still-uint8 image is
no step at all (:func:`keeps_uint8`).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import _C
from .. import transforms as T
from ..transforms import _detection
from ..core._sample_keys import _MASK64, _run_seeded, one_intra_op_thread
from ._tail_pool import drawn_run, run_all
from .references import _flat

__all__ = ["colour_apply", "image_dtype", "joint_tails", "keeps_uint8", "run_tails",
           "split_tail", "tail_names", "tail_of", "tail_note"]

#: v2's colour steps: they change the image's pixel values only, each pixel from the image's own
#: values (a mean, a histogram), so they give the same result on the rendered image.
_COLOURS = {"ColorJitter", "Grayscale", "RandomGrayscale", "GaussianBlur", "RandomPosterize",
            "RandomSolarize", "RandomAdjustSharpness", "RandomAutocontrast", "RandomEqualize",
            "RandomInvert", "RandomPhotometricDistort"}
#: Steps that change the image's pixel values or dtype and nothing else it holds.
_PIXELS = _COLOURS | {"ToDtype", "ConvertImageDtype", "Normalize"}
#: The steps a distort moved after the padding may follow in v2's chain, for v2's image there
#: to be the converted photo as decoded: the conversions and the box-only steps.
_REGION_AFTER = {"ToImage", "PILToTensor", "ConvertBoundingBoxFormat", "ClampBoundingBoxes",
                 "SanitizeBoundingBoxes", "ClampKeyPoints"}


_NO_DTYPE = object()


def image_dtype(step: Any, kind: str) -> Any:
    """The dtype v2's ``ToDtype`` gives an image of ``kind`` ("image": a tv_tensors.Image,
    "plain": a plain tensor); ``_NO_DTYPE`` where v2 raises (a dict with neither)."""
    dtype = step.dtype
    if not isinstance(dtype, dict):
        return dtype
    import torch
    from torchvision import tv_tensors

    key = tv_tensors.Image if kind == "image" else torch.Tensor
    if key in dtype:
        return dtype[key]
    return dtype["others"] if "others" in dtype else _NO_DTYPE


def keeps_uint8(step: Any, dtype: Any, kind: str, image: List[Any]) -> bool:
    """Whether v2's ``ToDtype``/``ConvertImageDtype`` ``step`` giving the image ``dtype`` leaves
    it as it is: the image is a uint8 tensor (``kind`` "image" or "plain", after the image steps
    ``image``: no float conversion since ``ToImage``/``PILToTensor``) and ``dtype`` is uint8.
    torchvision returns such an image unchanged (its own v2 recipe begins ``ToImage(),
    ToDtype(torch.uint8, scale=True)``), so it adds no step, as in the classification path
    (``transforms._keeps_uint8``)."""
    import torch

    if kind == "pil" or type(step).__name__ not in ("ToDtype", "ConvertImageDtype") \
            or dtype is not torch.uint8:
        return False
    for earlier in image:
        name = type(earlier).__name__
        if name == "ToTensor" or (name in ("ToDtype", "ConvertImageDtype")
                                  and earlier.dtype is not torch.uint8):
            return False
    return True


def colour_apply(step: Any) -> bool:
    """Whether ``step`` is v2's ``RandomApply`` over colour steps only (DINO's
    ``RandomApply([ColorJitter(...)], p=0.8)``): a per-pixel step with its own draw."""
    if type(step).__name__ != "RandomApply" or \
            not type(step).__module__.startswith("torchvision.transforms.v2"):
        return False
    inner = T._flatten(v2_compose(list(step.transforms)))
    return bool(inner) and all(type(t).__name__ in _COLOURS
                               and type(t).__module__.startswith("torchvision.transforms.v2")
                               for t in inner)


def v2_compose(steps: Sequence[Any]) -> Any:
    from torchvision.transforms import v2

    return v2.Compose(list(steps))


def split_tail(image: List[Any], iou: Any) -> Any:
    """The Joint's image chain ``image`` divided: ``(the native chain, the tail or None, the
    image's kind at the tail)`` (v2 Composes), or a string saying why a step of it runs neither
    natively nor in the tail (:func:`tail_of`)."""
    from torchvision.transforms import v2

    split = T.split(v2.Compose(image))
    if split.tail is None:
        return v2.Compose(image), None, ""
    start, found = tail_of(image, split, iou)
    if start is not None and T.split(v2.Compose(image[:start])).tail is not None:
        start, found = None, "a step before it does not run natively"
    if start is None:
        name, reason = split.tail_names[0], split.reason
        reason = reason[len(name) + 2:] if reason.startswith(f"{name}: ") else reason
        return (f"{name} cannot run natively here: {reason}; nor in Python after the native "
                f"steps: {found}")
    return v2.Compose(image[:start]), v2.Compose(image[start:]), found


def tail_of(image: List[Any], split: Any, iou: Any) -> Tuple[Optional[int], str]:
    """Where the Python tail of the Joint's image chain ``image`` starts, when it can run after
    the native prefix (:func:`run_tails`), and the image's type there (v2's ``ToImage`` makes
    it "image", a ``tv_tensors.Image``, ``PILToTensor``/``ToTensor`` "plain"; after a
    ``ToPureTensor`` it is a plain tensor too, which v2's colour kernels treat alike):
    ``(index into image, kind)``, or ``(None, why not)``. ``split``: ``T.split`` of the chain;
    ``iou``: the chain's RandomIoUCrop, or None."""
    start = len(image) - len(split.tail.transforms)
    kind = "pil"
    for step in image[:start]:
        name = type(step).__name__
        if name in ("ToImage", "PILToTensor", "ToTensor") and (kind == "pil" or name == "ToImage"):
            kind = "image" if name == "ToImage" else "plain"
    if split.tail_input == "pil" or kind == "pil":
        return None, "before the chain's tensor conversion (Pillow's image)"
    odd = [t for t in image[start:] if type(t).__name__ not in _PIXELS and not colour_apply(t)]
    if odd:
        return None, f"{T._step_name(odd[0])} follows it (not a per-pixel step)"
    # With a RandomIoUCrop the tail runs on the canvas before it is cropped (_run_parts): only
    # flips and per-pixel steps follow the crop (_detection.split_iou_crop), so these steps came
    # before it. _detection.distort_after_padding moved a RandomPhotometricDistort after the
    # padding and flips (v2 distorts the photo before they move it: the fill stays as it is);
    # it runs on the pixels showing the photo (_region), v2's image at the distort when nothing
    # but the pads and flips it was moved over came before it.
    for t in image[start:]:
        before = [n for n in getattr(t, "_after_steps", ()) if n not in _REGION_AFTER]
        if getattr(t, "_before_padding", False) and before:
            return None, (f"v2.{type(t).__name__} comes before padding or flips and after "
                          f"v2.{before[0]} (on a tensor v2 distorts that step's output before "
                          "padding it; natively only Pillow's numerics do so)")
    return start, kind


def tail_note(names: Sequence[str]) -> str:
    """What ``describe()`` says of a Joint's tail."""
    return (f"a Joint's steps {', '.join(names)} follow its tensor conversion and run per sample "
            "with torch's tensor kernels (v2 itself, on the natively rendered image), in the "
            "iterating thread, their draws keyed per sample")


def _tail_seed(g: Any) -> int:
    """The seed of a row's tail: the draw seed of its record ``g`` (kGeoDrawSeed), mixed once
    more so the tail and a RandomIoUCrop of the same row draw independently."""
    return _C.mix64((int(g[_detection._DRAW_SEED]) + 0x7461696C) & _MASK64)


# Whether v2's image after the chain's native steps is laid out channels last, by (plan, source
# width, height): v2's ToImage/PILToTensor give an HWC array's view, crops, flips and resizes
# keep that layout and pads, rotations and RandomResizedCrop make a new CHW one (whether a crop
# pads depends on the source's size). torch's float reductions (a contrast's mean) sum in
# another order on another layout or alignment, so the tail gets the image as v2 holds it.
_LAYOUTS: Dict[Tuple[int, int, int], Tuple[Any, bool]] = {}  # the plan kept: its id stays its own
_LAYOUTS_KEPT = 4096


def _channels_last(plan: Any, width: int, height: int) -> bool:
    key = (id(plan), width, height)
    found = _LAYOUTS.get(key)
    if found is None or found[0] is not plan:
        from PIL import Image

        if len(_LAYOUTS) >= _LAYOUTS_KEPT:
            _LAYOUTS.clear()
        # v2 on a blank image of the source's size (its draws from a fixed seed; the layout
        # does not depend on them), the caller's generators left as they were.
        try:
            probe = _run_seeded(plan.image, Image.new("RGB", (width, height)), 0)
            last = probe.dim() == 3 and probe.stride()[0] == 1 and probe.shape[0] > 1
        except Exception:  # noqa: BLE001 - a step that wants more than an image: v2's CHW
            last = False
        found = _LAYOUTS[key] = (plan, last)
    return found[1]


def _held(plan: Any, chw: Any, g: Any, kind_of: Any = None) -> Any:
    """``chw`` as a tensor of its own, laid out as v2 holds the image at the tail
    (:func:`_channels_last`; ``kind_of``: True or False to say it), wrapped as v2 holds it."""
    import torch
    from torchvision import tv_tensors

    last = _channels_last(plan, int(g[0]), int(g[1])) if kind_of is None else kind_of
    if last:
        chw = chw.permute(1, 2, 0).clone(memory_format=torch.contiguous_format).permute(2, 0, 1)
    else:
        chw = chw.clone(memory_format=torch.contiguous_format)
    return chw.as_subclass(tv_tensors.Image) if plan.tail_kind == "image" else chw


#: Steps that change each value alone and draw nothing: with a RandomIoUCrop they run after
#: the crop, on the pixels it keeps (v2 runs them there too), not on the whole canvas.
_ELEMENTWISE = {"ToDtype", "ConvertImageDtype", "Normalize"}


def _segments(plan: Any) -> List[Tuple[Any, str]]:
    """The tail's steps in runs: (a v2 Compose, where it runs): "region", the photo's pixels (a
    RandomPhotometricDistort moved after the padding, ``_detection.distort_after_padding``);
    "canvas", the whole rendered image; "crop", the last per-value steps of a chain with a
    RandomIoUCrop, run on the crop (:data:`_ELEMENTWISE`)."""
    found = _SEGMENTS.get(id(plan.tail))
    if found is None or found[0] is not plan.tail:
        steps = list(plan.tail.transforms)
        last = len(steps)
        while plan.iou is not None and last and type(steps[last - 1]).__name__ in _ELEMENTWISE:
            last -= 1
        runs: List[Tuple[List[Any], str]] = []
        for i, step in enumerate(steps):
            where = ("crop" if i >= last else
                     "region" if getattr(step, "_before_padding", False) else "canvas")
            if runs and runs[-1][1] == where:
                runs[-1][0].append(step)
            else:
                runs.append(([step], where))
        if len(_SEGMENTS) >= _LAYOUTS_KEPT:
            _SEGMENTS.clear()
        found = _SEGMENTS[id(plan.tail)] = (plan.tail, [(v2_compose(r), w) for r, w in runs])
    return found[1]


def _simple(plan: Any) -> bool:
    """Whether the tail runs whole on the rendered image, after the geometry."""
    return plan.iou is None and all(where == "canvas" for _, where in _segments(plan))


_SEGMENTS: Dict[int, Tuple[Any, List[Tuple[Any, str]]]] = {}


def _flips(t: Any, g: Any) -> Any:
    """``t`` ([C, H, W]) with the flips of the record ``g`` undone (or done: each its inverse)."""
    dims = [d for d, on in ((-1, g[8]), (-2, g[9])) if on]
    return t.flip(dims) if dims else t


def _region(g: Any) -> Tuple[int, int, int, int]:
    """Where the photo lies on the unflipped canvas of the record ``g`` (top, left, height,
    width): the chain before the distort only padded it (``tail_of``), so the crop rectangle
    reaches outside the source by the padding, at scale 1."""
    left, top, right, bottom, out_w, out_h = (float(v) for v in g[2:8])
    if (right - left, bottom - top) != (out_w, out_h) or not (left.is_integer()
                                                              and top.is_integer()):
        raise RuntimeError("ringloader: a distort moved after the padding found a resampled "
                           f"canvas (record {list(g[:8])}); please report this")
    return int(-top), int(-left), int(g[1]), int(g[0])


def _run_parts(plan: Any, chw: Any, g: Any, after_crop: bool) -> Any:
    """The tail on the canvas ``chw`` in runs (:func:`_segments`): a distort moved after the
    padding on the photo's pixels, unflipped, as v2 held the converted photo (channels last),
    written back in place (``chw`` is the row's own: its slot row or output); the others on
    the whole canvas, unflipped where a RandomIoUCrop comes later (v2 runs them before its crop
    and the flips after it); ``after_crop``: only the runs on the crop."""
    import torch

    unflipped = False  # the canvas as rendered, the record's flips done
    out = chw
    for i, (steps, where) in enumerate(_segments(plan)):
        if (where == "crop") != after_crop:
            continue
        seed = _C.mix64((_tail_seed(g) + i) & _MASK64)
        if where == "region":  # the photo alone unflipped, not the canvas
            top, left, height, width = _region(g)
            if not unflipped:  # its place on the rendered canvas: mirrored by the flips
                left = int(g[6]) - left - width if g[8] else left
                top = int(g[7]) - top - height if g[9] else top
            photo = out[:, top:top + height, left:left + width]
            shown = photo if unflipped else _flips(photo, g)
            done = drawn_run(steps, _held(plan, shown, g, True), seed).as_subclass(torch.Tensor)
            photo.copy_(done if unflipped else _flips(done, g))
            continue
        need = where == "canvas" and plan.iou is not None
        if need != unflipped:
            out, unflipped = _flips(out, g), need
        out = drawn_run(steps, _held(plan, out, g), seed).as_subclass(torch.Tensor)
    return _flips(out, g) if unflipped else out


def _run_one(plan: Any, image: Any, g: Any, hwc: bool, after_crop: bool) -> Any:
    import torch

    # A tensor of its own, laid out as v2 holds the image there (_channels_last): a row of the
    # batch starts anywhere in the slot.
    chw = image.permute(2, 0, 1) if hwc else image
    if _simple(plan):
        out = drawn_run(plan.tail, _held(plan, chw, g), _tail_seed(g))
    else:
        out = _run_parts(plan, chw, g, after_crop)
    out = out.as_subclass(torch.Tensor)
    return out.permute(1, 2, 0) if hwc else out


def run_tails(views: List[Any], tails: List[List[Tuple[int, Any, Any]]], hwc: bool,
              after_crop: bool = False) -> List[Any]:
    """A batch's views with each row's Joint tails run: ``tails[row]`` lists the (view, plan,
    geometry record) of the row's Joints that have one; a view that was one batch tensor
    becomes the list of its rows (each tail's output a tensor of its own). ``hwc``: the views
    are [H, W, C] (v2 gets the image as [C, H, W] and its output goes back as it came).
    Called before a RandomIoUCrop's crops are taken, then with ``after_crop`` for the steps
    that run on them (:func:`_segments`). The rows run side by side on the tail threads
    (``_tail_pool``), torch's kernels on one intra-op thread each, as on every path
    (``one_intra_op_thread``)."""
    views = list(views)
    work = []
    for row, found in enumerate(tails):
        for k, plan, g in found:
            if after_crop and (_simple(plan) or all(w != "crop" for _, w in _segments(plan))):
                continue
            if not isinstance(views[k], list):
                views[k] = list(views[k].unbind(0))
            work.append((row, k, plan, g))
    with one_intra_op_thread():
        done = run_all(lambda w: _run_one(w[2], views[w[1]][w[0]], w[3], hwc, after_crop), work)
    for (row, k, _, _), out in zip(work, done):
        views[k][row] = out
    return views


def joint_tails(structure: Any, records: Any, row: int,
                leaf_type: type) -> List[Tuple[int, Any, Any]]:
    """(view, plan, geometry record) of each native Joint (a ``leaf_type``, ``JointLeaf``) with
    a tail in a row's stripped structure (``records``: each view's records of the batch)."""
    return [(j.k, j.plan, records[j.k][row]) for j in _flat(structure)
            if isinstance(j, leaf_type) and j.plan.tail is not None]


def tail_names(structure: Any, leaf_type: type) -> List[str]:
    """The names of the tail steps of the native Joints in a stripped structure."""
    return [f"v2.{type(t).__name__}" for j in _flat(structure) if isinstance(j, leaf_type)
            and j.plan.tail is not None for t in j.plan.tail.transforms]
