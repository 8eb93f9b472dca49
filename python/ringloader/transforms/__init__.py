"""Image transforms with torchvision's names, parameters and semantics, executed natively.

Each transform describes itself as a step for the native pipeline; the whole chain runs in C++
(scaled/region-of-interest JPEG decode, one antialiased resample, fused flip/normalise/write-out).
A torchvision ``transforms.Compose`` of the supported transforms is accepted too: see
:func:`from_torchvision`.

The transforms layer, in this folder:

* ``clips``: video clip sampling as ``torchcodec.samplers`` samples (``random_indices``...), explicit frames, keyed draws, ``VideoMeta``.
* ``_steps``: the ``Transform`` protocol, the registry of converters of torchvision's and timm's classes, the parameter readers they share, ``to_steps``.
* ``_tv_converters``: the converters of torchvision's (v1, v2) and timm's classes, registered on import.
* ``_detection``: converters of the steps of torchvision's detection references (``ScaleJitter``, ``RandomZoomOut``), and why the others are not native.
* ``_iou_crop``: ``RandomIoUCrop`` on a Joint row in numpy: its draw from torch's mt19937 stream (as v2's ``make_params``), its move of the boxes.
* ``_box_kernels``: v2's pad, crop and flip box kernels for XYXY float boxes in numpy, the same float operations.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

# The protocol, the converter registry and the readers every converter shares (_steps); the
# converters of torchvision's and timm's classes register from _tv_converters and _detection.
from ._steps import (Size, Step, Transform, _Refused, _pair, _stage_error, _step_name, _unwrap_preset,
                     from_torchvision, has_to_tensor, to_steps)

__all__ = [
    "Compose",
    "Resize",
    "CenterCrop",
    "RandomResizedCrop",
    "RandomHorizontalFlip",
    "ToTensor",
    "Normalize",
    "from_torchvision",
    "to_steps",
    "split",
    "Split",
]


class Compose(Transform):
    """Chains transforms, as ``torchvision.transforms.Compose``.

    Args:
        transforms: ringloader transforms, torchvision/timm transforms, or a mix; each is
            translated when the chain is given to a dataset (:func:`to_steps` says which are
            native), not here.
    """

    def __init__(self, transforms: Sequence[Any]):
        self.transforms = list(transforms)

    def steps(self) -> List[Dict[str, Any]]:
        out: List[Dict[str, Any]] = []
        for t in self.transforms:
            out.extend(to_steps(t))
        return out

    def __repr__(self) -> str:
        inner = "".join(f"\n    {t!r}" for t in self.transforms)
        return f"{type(self).__name__}({inner}\n)"


class Resize(Transform):
    """Resize with bilinear antialiasing. An int ``size`` sets the shorter side (torchvision).

    Args:
        size: an int (the shorter side, aspect kept) or ``(height, width)``.
        max_size: with an int ``size``, the bound on the longer side (torchvision's rule).
        antialias: must be True (Pillow's resize, which torchvision's PIL path uses).

    Raises:
        ValueError: ``antialias=False``, a ``size`` that is not an int or 1-2 ints, or
            ``max_size`` with a ``(height, width)`` size.
    """

    def __init__(self, size: Size, max_size: int | None = None, antialias: bool = True):
        if not antialias:
            raise ValueError("Resize: only antialias=True (PIL's behaviour) is supported")
        if isinstance(size, numbers.Integral) or (isinstance(size, Sequence) and len(size) == 1):
            self.size: Any = int(size if isinstance(size, numbers.Integral) else size[0])
        else:
            self.size = _pair(size, "Resize")
        if max_size is not None and not isinstance(self.size, int):
            raise ValueError("Resize: max_size is only allowed when size is a single int")
        self.max_size = max_size

    def steps(self) -> List[Dict[str, Any]]:
        if isinstance(self.size, int):
            step = Step("resize", size_h=self.size, size_w=0)
        else:
            step = Step("resize", size_h=self.size[0], size_w=self.size[1])
        if self.max_size:
            step["max_size"] = int(self.max_size)
        return [step]

    def __repr__(self) -> str:
        return f"Resize(size={self.size}, max_size={self.max_size})"


class CenterCrop(Transform):
    """Crop the centre (torchvision rounding; zero padding when the crop is larger).

    Args:
        size: an int (a square) or ``(height, width)``.

    Raises:
        ValueError: a ``size`` that is not an int or a sequence of 1 or 2 ints.
    """

    def __init__(self, size: Size):
        self.size = _pair(size, "CenterCrop")

    def steps(self) -> List[Dict[str, Any]]:
        return [Step("center_crop", size_h=self.size[0], size_w=self.size[1])]

    def __repr__(self) -> str:
        return f"CenterCrop(size={self.size})"


class RandomResizedCrop(Transform):
    """torchvision's RandomResizedCrop: same parameter sampling, bilinear antialiased resize.

    Random draws come from a per-sample generator seeded by (seed, epoch, index and position in
    the epoch).

    Args:
        size: the output, an int (a square) or ``(height, width)``.
        scale: the range of the crop's area, as a fraction of the image's.
        ratio: the range of the crop's aspect ratio (width / height), drawn log-uniformly.
        antialias: must be True (Pillow's resize).

    Raises:
        ValueError: ``antialias=False`` or a ``size`` that is not an int or 1-2 ints.
    """

    def __init__(
        self,
        size: Size,
        scale: Tuple[float, float] = (0.08, 1.0),
        ratio: Tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
        antialias: bool = True,
    ):
        if not antialias:
            raise ValueError("RandomResizedCrop: only antialias=True is supported")
        self.size = _pair(size, "RandomResizedCrop")
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))

    def steps(self) -> List[Dict[str, Any]]:
        return [
            Step("random_resized_crop", size_h=self.size[0], size_w=self.size[1], scale=self.scale,
                 ratio=self.ratio)
        ]

    def __repr__(self) -> str:
        return f"RandomResizedCrop(size={self.size}, scale={self.scale}, ratio={self.ratio})"


class RandomHorizontalFlip(Transform):
    """Mirror left-right with probability ``p``.

    Args:
        p: the probability of a flip, drawn per sample.
    """

    def __init__(self, p: float = 0.5):
        self.p = float(p)

    def steps(self) -> List[Dict[str, Any]]:
        return [Step("random_horizontal_flip", p=self.p)]

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


class ToTensor(Transform):
    """Float output in [0, 1] (without it, batches are uint8 in [0, 255]). Takes no argument."""

    def steps(self) -> List[Dict[str, Any]]:
        return [Step("to_tensor")]

    def __repr__(self) -> str:
        return "ToTensor()"


class Normalize(Transform):
    """``(x - mean) / std`` per channel, after ToTensor.

    Args:
        mean: 1 or 3 values (one for every channel, or one each).
        std: 1 or 3 non-zero values.
        inplace: accepted for torchvision's signature; the write-out never copies anyway.

    Raises:
        ValueError: ``mean`` or ``std`` without 1 or 3 values, or a zero ``std``.
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False):
        self.mean = [float(m) for m in mean]
        self.std = [float(s) for s in std]
        if len(self.mean) not in (1, 3) or len(self.std) not in (1, 3):
            raise ValueError("Normalize: mean and std need 1 or 3 values each")
        if any(s == 0 for s in self.std):
            raise ValueError(f"Normalize: std evaluated to zero: {self.std}")

    def steps(self) -> List[Dict[str, Any]]:
        return [Step("normalize", mean=self.mean, std=self.std)]

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std})"


class Split(NamedTuple):
    """A transform divided into what runs natively and what runs on each sample in Python.

    ``steps`` is the longest prefix with a native equivalent; ``tail`` (None when everything is
    native) runs the rest exactly as torchvision would, on the prefix's output: a PIL image
    (``tail_input == "pil"``: the prefix is decoded to uint8 HWC), a uint8 CHW tensor
    (``"uint8_tensor"``: the prefix ends in PILToTensor/ToImage) or, once the prefix holds
    ``ToTensor``, a float tensor (``"tensor"``). ``tail_names`` names the Python steps.
    """

    steps: List[Dict[str, Any]]
    tail: Optional[Callable[[Any], Any]]
    tail_names: List[str]
    tail_input: str
    reason: str = ""  #: why the first tail step is not native ("" when there is no tail)


def _flatten(transform: Any) -> List[Any]:
    if transform is None:
        return []
    preset = _unwrap_preset(transform)
    if preset is not None:
        return _flatten(preset)
    inner = getattr(transform, "transforms", None)
    if type(transform).__name__ == "Compose" and isinstance(inner, (list, tuple)):
        out: List[Any] = []
        for t in inner:
            out.extend(_flatten(t))
        return out
    return [transform]


_TO_UINT8_TENSOR = {"PILToTensor", "ToImage", "ToImageTensor", "MaybePILToTensor"}


def _tail_input(steps: List[Dict[str, Any]], parts: Sequence[Any]) -> str:
    """What the native prefix hands the Python tail: a float tensor after ToTensor, a uint8 CHW
    tensor after PILToTensor/ToImage, else a PIL image."""
    if has_to_tensor(steps):
        return "tensor"
    if any(type(p).__name__ in _TO_UINT8_TENSOR for p in parts):
        return "uint8_tensor"
    return "pil"


# Native steps whose result on a uint8 CHW tensor (torchvision's tensor kernels) equals their
# result on a PIL image: pure pixel moves, the float conversion, and RandomApply's draw (the
# steps it guards are judged on their own). After PILToTensor/ToImage
# torchvision runs every other step with tensor numerics (Resize: torch's antialiased
# interpolate; colour and affine steps: float maths), which Pillow's native numerics do not
# reproduce, so those run in the Python tail, except the resizes whose tensor kernel the native
# resampler runs itself (_on_tensor_kernel).
_SAME_ON_UINT8_TENSOR = {"random_horizontal_flip", "random_vertical_flip", "center_crop",
                         "random_crop", "pad", "to_tensor", "random_apply",
                         "augmix"}  # AugMix runs the tensor kernels on a PIL image too


_RESIZES = {"resize", "random_resized_crop"}


def _on_tensor_kernel(t: Any, step: Dict[str, Any]) -> bool:
    """Whether torchvision's `t` resizes a uint8 tensor with a kernel the native resampler runs
    (the step's ``tensor`` flag): torch's nearest index (v1 and v2: a pick of pixels, whatever
    the dtype), or v2's antialiased bilinear or bicubic on the uint8 tensor itself, which it
    uses where its ``_do_native_uint8_resize_on_cpu`` says so (v1 and v2 elsewhere interpolate
    in float, and antialias=False or Lanczos are other kernels: those stay in Python)."""
    if step["kind"] not in _RESIZES or not type(t).__module__.startswith("torchvision"):
        return False
    if step.get("interpolation") == "nearest":
        return True
    mode = step.get("interpolation", "bilinear")
    if mode not in ("bilinear", "bicubic") or getattr(t, "antialias", True) is not True:
        return False
    if not type(t).__module__.startswith("torchvision.transforms.v2"):
        return False
    try:
        from torchvision.transforms.v2.functional._geometry import _do_native_uint8_resize_on_cpu
        from torchvision.transforms.v2.functional import InterpolationMode
    except ImportError:  # another torchvision: its kernel is not known here
        return False
    return bool(_do_native_uint8_resize_on_cpu(InterpolationMode(mode)))


def _fill_error(conversion: str, step: Dict[str, Any], t: Any) -> Optional[str]:
    """Why the padding fill of `step` (torchvision's `t`, a pure pixel move), following the uint8
    tensor conversion `conversion`, would differ natively from torch's tensor padding, or None.

    torch pads a uint8 tensor with one fill for every channel, which must be an integer level
    (it refuses another value); v2 also takes a sequence of per-channel levels, painted as
    ``torch.tensor(fill).to(torch.uint8)`` (each level truncated) in constant mode. The native
    fill truncates each level to an int and clamps it to 0..255: the same pixels for levels in
    [0, 256)."""
    fill = step.get("fill")
    if fill is None:
        return None
    raw = getattr(t, "fill", None)
    per_channel = isinstance(raw, (list, tuple)) and len(raw) > 1
    if per_channel and step["kind"] in ("random_crop", "pad") and \
            type(t).__module__.startswith("torchvision.transforms.v2"):
        if step.get("pad_mode", "constant") == "constant" and all(0 <= v < 256 for v in fill):
            return None
    elif len(set(fill)) == 1 and float(fill[0]).is_integer() and 0 <= fill[0] <= 255:
        return None
    return (f"its fill {raw!r} is not one integer level in 0..255 for every channel: after "
            f"{conversion} torchvision pads the uint8 tensor with torch's kernel, which takes "
            "that (v2 also a sequence of per-channel levels in 0..255 with "
            "padding_mode='constant'); it runs in Python (give fill=<int 0..255>, a v2 sequence "
            f"of levels in 0..255, or move it before {conversion} to pad with Pillow natively)")


def _tensor_numerics_error(conversion: str, new: List[Dict[str, Any]], t: Any = None) -> Optional[str]:
    """Why `new` (the steps of torchvision's `t`), following the uint8 tensor conversion
    `conversion`, cannot run natively; marks the resizes that run torch's kernel natively."""
    for step in new:
        if _on_tensor_kernel(t, step):
            step["tensor"] = True
            continue
        if step["kind"] not in _SAME_ON_UINT8_TENSOR:
            return (f"it follows {conversion}, so torchvision runs it on the uint8 tensor with "
                    "torch's tensor numerics, not Pillow's; it runs in Python with them (move it "
                    f"before {conversion} to run it natively with Pillow's numerics; after it, "
                    "flips, crops, padding, nearest resizes and v2's bilinear and bicubic ones "
                    "with antialias=True (where torchvision resizes uint8 directly) run natively "
                    "with torch's kernels)")
        why = _fill_error(conversion, step, t)
        if why is not None:
            return why
    return None


def _keeps_uint8(t: Any, steps: List[Dict[str, Any]]) -> bool:
    """Whether torchvision's ``ToDtype``/``ConvertImageDtype`` `t` converts to ``torch.uint8``
    where the image is still uint8 (asked after a uint8 tensor conversion; no ToTensor or float
    conversion among `steps`): torchvision returns such an image unchanged (its own v2 recipe
    begins ``ToImage(), ToDtype(torch.uint8, scale=True)``), so it adds no step."""
    if type(t).__name__ not in ("ToDtype", "ConvertImageDtype") or has_to_tensor(steps):
        return False
    import torch

    dtype = getattr(t, "dtype", None)
    dtypes = [d for d in dtype.values() if d is not None] if isinstance(dtype, dict) else [dtype]
    return bool(dtypes) and all(d is torch.uint8 for d in dtypes)


def split(transform: Any) -> Split:
    """Splits ``transform`` (None, one transform or a Compose, ringloader's or torchvision's, a
    preset object that only applies one (see :func:`_unwrap_preset`), or anything callable) at the first step without a native equivalent, or whose numerics would
    differ natively (a step on the uint8 tensor after PILToTensor/ToImage that torchvision runs
    with tensor kernels, except the resizes whose torch kernel the native path runs, marked
    ``tensor``: v2's antialiased bilinear and nearest).

    Args:
        transform: the transform to divide.

    Returns:
        a :class:`Split`: the native prefix's steps, the Python tail (or None) and the reason
        the tail starts where it does. Never raises for a step without a native equivalent:
        that step starts the tail.

    Raises:
        ValueError: an interpolation Pillow's geometric ops refuse (torchvision would raise it
            mid-epoch).
        TypeError: a v1 rotation/affine/policy given a string interpolation (torchvision's own
            error), or a ``ringloader.transforms`` step after a Python step (it cannot run in
            Python: use torchvision's class of that name there).
    """
    parts = _flatten(transform)
    steps: List[Dict[str, Any]] = []
    conversion = ""  # the PILToTensor/ToImage the steps so far end in ("" before one)
    for i, t in enumerate(parts):
        try:
            module = type(t).__module__
            if not isinstance(t, Transform) and not module.startswith(("torchvision", "timm")):
                raise TypeError(f"{_step_name(t)} has no native equivalent")
            new = [] if conversion and _keeps_uint8(t, steps) else to_steps(t)
            # After a uint8 tensor conversion, tensor numerics are the first reason (and the one
            # that says what to do: move the step before the conversion).
            why = _tensor_numerics_error(conversion, new, t) if conversion and not has_to_tensor(steps) else None
            if why is None:
                why = _stage_error(steps, new)
            if why is not None:
                raise TypeError(f"{_step_name(t)}: {why}")
            steps.extend(new)
            if type(t).__name__ in _TO_UINT8_TENSOR:
                conversion = type(t).__name__
        except _Refused:
            raise
        except TypeError as error:
            rest = parts[i:]
            for r in rest:
                if isinstance(r, Transform):
                    raise TypeError(
                        f"ringloader.transforms.{type(r).__name__} follows the Python step "
                        f"{_step_name(parts[i])} and cannot run in Python: use torchvision's "
                        f"{type(r).__name__} there") from None
            tail = _PythonTail(rest)
            return Split(steps, tail, [_step_name(r) for r in rest], _tail_input(steps, parts[:i]),
                         str(error))
    return Split(steps, None, [], _tail_input(steps, parts))


class _PythonTail:
    """The Python part of a split transform: calls each step in order, like Compose."""

    def __init__(self, transforms: Sequence[Any]):
        self.transforms = list(transforms)

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img

    def __repr__(self) -> str:
        return "PythonTail(" + ", ".join(type(t).__name__ for t in self.transforms) + ")"
