"""Image transforms with torchvision's names, parameters and semantics, executed natively.

Each transform describes itself as a step for the native pipeline; the whole chain runs in C++
(scaled/region-of-interest JPEG decode, one antialiased resample, fused flip/normalise/write-out).
A torchvision ``transforms.Compose`` of the supported transforms is accepted too: see
:func:`from_torchvision`.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _C

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

Size = Union[int, Sequence[int]]


def _pair(size: Size, name: str) -> Tuple[int, int]:
    if isinstance(size, numbers.Integral):
        return int(size), int(size)
    if isinstance(size, Sequence) and len(size) == 1:
        return int(size[0]), int(size[0])
    if isinstance(size, Sequence) and len(size) == 2:
        return int(size[0]), int(size[1])
    raise ValueError(f"{name}: size must be an int or a sequence of 1 or 2 ints, got {size!r}")


class Transform:
    """Base class: a transform is a list of native steps."""

    def steps(self) -> List[Dict[str, Any]]:
        raise NotImplementedError

    def __call__(self, img):  # pragma: no cover - guidance for misuse
        raise TypeError(
            f"{type(self).__name__} runs inside ringloader's native pipeline; pass it to "
            "ringloader.ImageFolder(transform=...) instead of calling it on an image"
        )


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
            step = {"kind": "resize", "size_h": self.size, "size_w": 0}
        else:
            step = {"kind": "resize", "size_h": self.size[0], "size_w": self.size[1]}
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
        return [{"kind": "center_crop", "size_h": self.size[0], "size_w": self.size[1]}]

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
            {
                "kind": "random_resized_crop",
                "size_h": self.size[0],
                "size_w": self.size[1],
                "scale": self.scale,
                "ratio": self.ratio,
            }
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
        return [{"kind": "random_horizontal_flip", "p": self.p}]

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


class ToTensor(Transform):
    """Float output in [0, 1] (without it, batches are uint8 in [0, 255]). Takes no argument."""

    def steps(self) -> List[Dict[str, Any]]:
        return [{"kind": "to_tensor"}]

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
        return [{"kind": "normalize", "mean": self.mean, "std": self.std}]

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std})"


_INTERPOLATIONS = {
    "nearest": "nearest", "bilinear": "bilinear", "bicubic": "bicubic", "box": "box",
    "hamming": "hamming", "lanczos": "lanczos",
    # PIL's Image.Resampling numbers, which torchvision and timm also accept
    "0": "nearest", "1": "lanczos", "2": "bilinear", "3": "bicubic", "4": "box", "5": "hamming",
}


def _interpolation(value: Any, where: str) -> str:
    """The native filter name of a torchvision InterpolationMode, a PIL resampling enum/int or a
    string; TypeError for modes PIL has no native equivalent of here (NEAREST_EXACT)."""
    raw = getattr(value, "value", value)
    key = str(raw).lower()
    if key in _INTERPOLATIONS:
        return _INTERPOLATIONS[key]
    raise TypeError(f"{where}: interpolation {value!r} has no native equivalent")


class _Refused(TypeError):
    """An argument torchvision itself rejects with a TypeError: split() raises it at once rather
    than running the step in Python, where it would fail mid-epoch."""


def _transform_filter(value: Any, where: str) -> str:
    """The filter of a step torchvision runs on PIL images with Image.transform/Image.rotate
    (RandomRotation, RandomAffine, the AutoAugment policies). torchvision hands Pillow its
    number for the mode (NEAREST_EXACT becomes NEAREST); Pillow takes nearest, bilinear and
    bicubic only and raises ValueError for the others at the first geometric op, so those are
    refused here with the same error, before the epoch starts. v1 classes keep the argument as
    given and F.affine/F.rotate raise TypeError for a string, so a string is refused there too."""
    raw = getattr(value, "value", value)
    if isinstance(value, str) and not where.startswith("torchvision.transforms.v2"):
        known = value.lower() in _INTERPOLATIONS or value.lower() == "nearest-exact"
        mode = f"InterpolationMode.{value.upper().replace('-', '_')}" if known else "an InterpolationMode"
        raise _Refused(f"{where}: interpolation {value!r} is a string, which torchvision's v1 "
                       f"F.affine/F.rotate reject with a TypeError; pass {mode} (or use "
                       "torchvision.transforms.v2, which takes strings)")
    if str(raw).lower() == "nearest-exact":
        return "nearest"  # torchvision's pil_modes_mapping: Pillow's NEAREST
    name = _interpolation(value, where)
    if name not in ("nearest", "bilinear", "bicubic"):
        raise ValueError(f"{where}: interpolation {value!r} is not a filter Pillow's "
                         "Image.transform/rotate accept (torchvision raises ValueError at the first "
                         "geometric op); use InterpolationMode.NEAREST, BILINEAR or BICUBIC")
    return name


def _fill(value: Any, where: str) -> List[float]:
    """A fill colour as three levels (torchvision's PIL path: an int or a 1/3-sequence)."""
    if value is None:
        return [0.0, 0.0, 0.0]
    if isinstance(value, dict):
        raise TypeError(f"{where}: a per-type fill dict has no native equivalent")
    if isinstance(value, numbers.Number):
        return [float(value)] * 3
    values = [float(v) for v in value]
    if len(values) == 1:
        return values * 3
    if len(values) != 3:
        raise TypeError(f"{where}: fill needs 1 or 3 values for RGB images, got {value!r}")
    return values


def _padding(padding: Any, where: str) -> List[int]:
    """torchvision's padding argument as (left, top, right, bottom)."""
    if padding is None:
        return [0, 0, 0, 0]
    if isinstance(padding, numbers.Integral):
        return [int(padding)] * 4
    values = [int(v) for v in padding]
    if len(values) == 1:
        return values * 4
    if len(values) == 2:
        return [values[0], values[1], values[0], values[1]]
    if len(values) == 4:
        return values
    raise TypeError(f"{where}: padding must be an int or a sequence of 1, 2 or 4 ints")


def _range(value: Any) -> Optional[Tuple[float, float]]:
    if value is None:
        return None
    lo, hi = (float(v) for v in value)
    return (lo, hi)


def _center(value: Any) -> Optional[Tuple[float, float]]:
    return None if value is None else (float(value[0]), float(value[1]))


_AUTO_AUGMENT_POLICIES = {"imagenet": 0, "cifar10": 1, "svhn": 2}

# timm/data/auto_augment.py op names ringloader runs natively (NAME_TO_OP keys).
_TIMM_OPS = {
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "PosterizeIncreasing",
    "PosterizeOriginal", "Solarize", "SolarizeIncreasing", "SolarizeAdd", "Color",
    "ColorIncreasing", "Contrast", "ContrastIncreasing", "Brightness", "BrightnessIncreasing",
    "Sharpness", "SharpnessIncreasing", "ShearX", "ShearY", "TranslateX", "TranslateY",
    "TranslateXRel", "TranslateYRel",
}

# The timm ops that resample (Image.transform / Image.rotate with the op's resample).
_TIMM_GEOMETRIC = {"Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY", "TranslateXRel",
                   "TranslateYRel"}


def _timm_rand_augment(t: Any, where: str) -> List[Dict[str, Any]]:
    """timm's RandAugment (rand-m*-n*-mstd*-inc*...): one native step when every op is native and
    the ops share their settings (as rand_augment_transform makes them)."""
    if t.choice_weights is not None:
        raise TypeError(f"{where}: weighted op choice (the 't' config section) has no native equivalent")
    ops = list(t.ops)
    if not ops:
        return []
    first = ops[0]
    names = []
    for op in ops:
        if op.name not in _TIMM_OPS:
            raise TypeError(f"{where}: timm op {op.name} has no native equivalent")
        same = (op.prob, op.magnitude, op.magnitude_std, op.magnitude_max, op.kwargs.get("fillcolor"),
                op.kwargs.get("resample"), op.hparams.get("translate_pct", 0.45),
                op.hparams.get("translate_const"))
        if same != (first.prob, first.magnitude, first.magnitude_std, first.magnitude_max,
                    first.kwargs.get("fillcolor"), first.kwargs.get("resample"),
                    first.hparams.get("translate_pct", 0.45), first.hparams.get("translate_const")):
            raise TypeError(f"{where}: ops with different settings have no native equivalent")
        names.append(op.name)
    resample = first.kwargs.get("resample")
    random_interp = isinstance(resample, (list, tuple))
    if random_interp:
        modes = sorted(_interpolation(r, where) for r in resample)
        if modes != ["bicubic", "bilinear"]:
            raise TypeError(f"{where}: a random choice among {resample!r} has no native equivalent")
        interp = "bilinear"
    else:
        interp = _interpolation(resample, where)
    if interp not in ("nearest", "bilinear", "bicubic"):
        if _TIMM_GEOMETRIC.intersection(names):
            raise ValueError(f"{where}: resample {resample!r} is not a filter Pillow's "
                             "Image.transform/rotate accept (timm's geometric ops raise ValueError "
                             "with it); use nearest, bilinear, bicubic or 'random'")
        interp = "bilinear"  # no op of this policy transforms geometry: the filter is never used
    mstd = float(first.magnitude_std or 0.0)
    return [{
        "kind": "timm_rand_augment", "timm_ops": names, "num_ops": int(t.num_layers),
        "p": float(first.prob), "magnitude": float(first.magnitude), "magnitude_std": mstd,
        "magnitude_max": float(first.magnitude_max or 10.0),
        "translate_pct": float(first.hparams.get("translate_pct", 0.45)),
        "translate_const": float(first.hparams.get("translate_const", 250)),
        "fill": _fill(first.kwargs.get("fillcolor", (128, 128, 128)), where),
        "interpolation": interp, "random_interpolation": random_interp,
    }]


def _timm_random_erasing(t: Any, where: str) -> List[Dict[str, Any]]:
    import math

    if getattr(t, "num_splits", 0):
        raise TypeError(f"{where}: num_splits (AugMix splits) has no native equivalent")
    mode = {"const": 0, "pixel": 1, "rand": 2}.get(t.mode)
    if mode is None:
        raise TypeError(f"{where}: mode {t.mode!r} has no native equivalent")
    lo, hi = t.log_aspect_ratio
    if int(t.min_count) != 1:
        raise TypeError(f"{where}: min_count other than 1 has no native equivalent")
    return [{
        "kind": "random_erasing", "p": float(t.probability), "timm_erasing": True,
        "ranges": [(float(t.min_area), float(t.max_area)), (math.exp(lo), math.exp(hi))],
        "erase_mode": mode, "erase_count": int(t.max_count), "fill": [0.0, 0.0, 0.0],
    }]


def _random_erasing(t: Any, where: str) -> List[Dict[str, Any]]:
    value = t.value
    step: Dict[str, Any] = {
        "kind": "random_erasing", "p": float(t.p),
        "ranges": [_range(t.scale), _range(t.ratio)],
    }
    if value is None or (isinstance(value, str) and value == "random"):
        step["erase_mode"] = 1
    else:
        step["fill"] = _fill(value, where)
    return [step]


def _aug_op(name: str, magnitude: float, p: float) -> List[Dict[str, Any]]:
    return [{"kind": "aug_op", "op": name, "magnitude": float(magnitude), "p": float(p)}]


# ---- torchvision and timm transforms -> native steps -----------------------------------------

#: The converter of each supported torchvision (v1, v2) and timm transform class: a function of
#: (the transform, its "module.Class" name for messages) returning native steps, or raising
#: TypeError (no native equivalent) / ValueError (a setting the library itself refuses).
_CONVERTERS: Dict[type, Callable[[Any, str], List[Dict[str, Any]]]] = {}
#: Registrations whose module is not imported yet: (module, class name, converter). A transform
#: object's class is always importable from a module already loaded, so registrations resolve
#: on demand and ringloader never imports torchvision or timm itself.
_PENDING: List[Tuple[str, str, Callable[[Any, str], List[Dict[str, Any]]]]] = []

_TORCHVISION = ("torchvision.transforms", "torchvision.transforms.v2")
_TIMM = ("timm.data.transforms", "timm.data.auto_augment", "timm.data.random_erasing")


def _converts(*names: str, modules: Sequence[str] = _TORCHVISION):
    """Registers the decorated function as the converter of the classes ``names`` of each of
    ``modules`` (the public modules the classes are imported from; a name a module lacks,
    such as v2-only classes in v1, is skipped)."""
    def register(fn: Callable[[Any, str], List[Dict[str, Any]]]):
        _PENDING.extend((module, name, fn) for module in modules for name in names)
        return fn
    return register


def _converter(cls: type) -> Optional[Callable[[Any, str], List[Dict[str, Any]]]]:
    fn = _CONVERTERS.get(cls)
    if fn is None and _PENDING:
        import sys

        waiting = []
        for module, name, register in _PENDING:
            loaded = sys.modules.get(module)
            if loaded is None:
                waiting.append((module, name, register))
                continue
            found = getattr(loaded, name, None)
            if isinstance(found, type):
                _CONVERTERS.setdefault(found, register)
        _PENDING[:] = waiting
        fn = _CONVERTERS.get(cls)
    return fn


def _is_v2(t: Any) -> bool:
    return type(t).__module__.startswith("torchvision.transforms.v2")


@_converts("Compose")
def _compose(t: Any, where: str) -> List[Dict[str, Any]]:
    return Compose(t.transforms).steps()


@_converts("Resize")
def _resize(t: Any, where: str) -> List[Dict[str, Any]]:
    interp = _interpolation(getattr(t, "interpolation", "bilinear"), where)
    if t.size is None:
        raise TypeError(f"{where}: size=None (max_size only) has no native equivalent")
    step = Resize(t.size, max_size=getattr(t, "max_size", None)).steps()[0]
    step["interpolation"] = interp
    return [step]


@_converts("RandomResize")
def _random_resize(t: Any, where: str) -> List[Dict[str, Any]]:
    """v2's RandomResize: the shorter side drawn per sample from [min_size, max_size) (the
    sample's keyed draws), then resized as ``Resize(drawn)``."""
    interp = _interpolation(getattr(t, "interpolation", "bilinear"), where)
    if int(t.max_size) <= int(t.min_size):
        raise TypeError(f"{where}: max_size must be greater than min_size (torch.randint draws "
                        "from [min_size, max_size))")
    return [{"kind": "resize", "size_h": int(t.min_size), "size_w": 0,
             "size_max": int(t.max_size), "interpolation": interp}]


@_converts("RandomShortestSize")
def _random_shortest_size(t: Any, where: str) -> List[Dict[str, Any]]:
    """v2's RandomShortestSize: the shorter side drawn per sample from ``min_size`` (the
    sample's keyed draws), the longer side capped at ``max_size``."""
    interp = _interpolation(getattr(t, "interpolation", "bilinear"), where)
    choices = [int(c) for c in t.min_size]
    if not choices or min(choices) <= 0:
        raise TypeError(f"{where}: min_size must hold sizes > 0")
    return [{"kind": "resize", "size_h": min(choices), "size_w": 0,
             "size_choices": choices, "max_size": int(t.max_size or 0),
             "interpolation": interp}]


@_converts("RandomResizedCrop")
@_converts("RandomResizedCropAndInterpolation", modules=_TIMM)
def _random_resized_crop(t: Any, where: str) -> List[Dict[str, Any]]:
    interp = getattr(t, "interpolation", "bilinear")
    if isinstance(interp, (list, tuple)):
        raise TypeError(f"{where}: interpolation='random' has no native equivalent")
    step = RandomResizedCrop(t.size, scale=tuple(t.scale), ratio=tuple(t.ratio)).steps()[0]
    step["interpolation"] = _interpolation(interp, where)
    return [step]


@_converts("CenterCrop")
def _center_crop(t: Any, where: str) -> List[Dict[str, Any]]:
    return CenterCrop(t.size).steps()


@_converts("RandomHorizontalFlip")
def _horizontal_flip(t: Any, where: str) -> List[Dict[str, Any]]:
    return RandomHorizontalFlip(t.p).steps()


@_converts("RandomVerticalFlip")
def _vertical_flip(t: Any, where: str) -> List[Dict[str, Any]]:
    return [{"kind": "random_vertical_flip", "p": float(t.p)}]


@_converts("RandomCrop", "Pad")
def _crop_or_pad(t: Any, where: str) -> List[Dict[str, Any]]:
    crop = type(t).__name__ == "RandomCrop"
    mode = getattr(t, "padding_mode", "constant")
    if mode not in ("constant", "edge", "reflect", "symmetric"):
        raise TypeError(f"{where}: padding_mode {mode!r} has no native equivalent")
    pad = _padding(t.padding, where)
    if _is_v2(t) and crop and t.padding:
        pad = [pad[0], pad[2], pad[1], pad[3]]  # v2's RandomCrop keeps [left, right, top, bottom]
    step = {"kind": "random_crop" if crop else "pad",
            "pad": pad, "fill": _fill(t.fill, where), "pad_mode": mode}
    if crop:
        size = _pair(t.size, where)
        step.update(size_h=size[0], size_w=size[1], pad_if_needed=bool(t.pad_if_needed))
    return [step]


@_converts("ColorJitter")
def _color_jitter(t: Any, where: str) -> List[Dict[str, Any]]:
    ranges = [_range(t.brightness), _range(t.contrast), _range(t.saturation), _range(t.hue)]
    if all(r is None for r in ranges):
        return []
    return [{"kind": "color_jitter", "ranges": ranges}]


@_converts("Grayscale", "RandomGrayscale")
def _grayscale(t: Any, where: str) -> List[Dict[str, Any]]:
    always = type(t).__name__ == "Grayscale"
    if always and int(getattr(t, "num_output_channels", 1)) != 3:
        raise TypeError(f"{where}: num_output_channels=1 (a 1-channel image) has no native "
                        "equivalent; use num_output_channels=3")
    return [{"kind": "grayscale", "p": 1.0 if always else float(t.p)}]


@_converts("RandomRotation")
def _rotation(t: Any, where: str) -> List[Dict[str, Any]]:
    if t.expand:
        raise TypeError(f"{where}: expand=True (a size that depends on the angle) has no native equivalent")
    return [{"kind": "random_rotation", "ranges": [_range(t.degrees)],
             "interpolation": _transform_filter(t.interpolation, where), "fill": _fill(t.fill, where),
             "center": _center(t.center)}]


@_converts("RandomAffine")
def _affine(t: Any, where: str) -> List[Dict[str, Any]]:
    shear = None if t.shear is None else [float(v) for v in t.shear]
    ranges = [_range(t.degrees), _range(t.translate), _range(t.scale),
              None if shear is None else (shear[0], shear[1]),
              None if shear is None or len(shear) < 4 else (shear[2], shear[3])]
    return [{"kind": "random_affine", "ranges": ranges,
             "interpolation": _transform_filter(t.interpolation, where), "fill": _fill(t.fill, where),
             "center": _center(t.center)}]


@_converts("GaussianBlur")
def _gaussian_blur(t: Any, where: str) -> List[Dict[str, Any]]:
    kx, ky = (int(v) for v in t.kernel_size)
    return [{"kind": "gaussian_blur", "size_w": kx, "size_h": ky, "ranges": [_range(t.sigma)]}]


@_converts("RandomApply")
def _random_apply(t: Any, where: str) -> List[Dict[str, Any]]:
    """torchvision's RandomApply (v1 and v2): a ``random_apply`` step guarding the native steps
    of its transforms. Natively it draws one uniform per sample and, when the draw is below
    ``p``, runs the guarded steps, which then make their own draws (torchvision calls them only
    then). Only image steps that keep the size can be guarded (the stage rule says so)."""
    inner: List[Dict[str, Any]] = []
    for sub in t.transforms:
        try:
            inner.extend(to_steps(sub))
        except _Refused:
            raise
        except TypeError as error:
            raise TypeError(f"{where} over {_step_name(sub)}: {error}") from None
    if not inner:
        return []  # nothing to apply (e.g. a ColorJitter with no factor)
    return [{"kind": "random_apply", "p": float(t.p), "num_steps": len(inner)}] + inner


@_converts("RandomPosterize")
def _posterize(t: Any, where: str) -> List[Dict[str, Any]]:
    return _aug_op("Posterize", t.bits, t.p)


@_converts("RandomSolarize")
def _solarize(t: Any, where: str) -> List[Dict[str, Any]]:
    return _aug_op("Solarize", t.threshold, t.p)


@_converts("RandomAdjustSharpness")
def _sharpness(t: Any, where: str) -> List[Dict[str, Any]]:
    return _aug_op("Sharpness", float(t.sharpness_factor) - 1.0, t.p)


@_converts("RandomAutocontrast")
def _autocontrast(t: Any, where: str) -> List[Dict[str, Any]]:
    return _aug_op("AutoContrast", 0, t.p)


@_converts("RandomEqualize")
def _equalize(t: Any, where: str) -> List[Dict[str, Any]]:
    return _aug_op("Equalize", 0, t.p)


@_converts("RandomInvert")
def _invert(t: Any, where: str) -> List[Dict[str, Any]]:
    return _aug_op("Invert", 0, t.p)


@_converts("RandAugment", "TrivialAugmentWide", "AutoAugment")
def _auto_augment(t: Any, where: str) -> List[Dict[str, Any]]:
    name = type(t).__name__
    step: Dict[str, Any] = {"interpolation": _transform_filter(t.interpolation, where),
                            "fill": _fill(t.fill, where), "v2_magnitudes": _is_v2(t)}
    if name == "AutoAugment":
        policy = str(getattr(t.policy, "value", t.policy)).lower()
        step.update(kind="auto_augment", policy=_AUTO_AUGMENT_POLICIES[policy])
    else:
        step.update(kind="rand_augment" if name == "RandAugment" else "trivial_augment_wide",
                    num_bins=int(t.num_magnitude_bins))
        if name == "RandAugment":
            step.update(num_ops=int(t.num_ops), magnitude=float(t.magnitude))
    return [step]


@_converts("AugMix")
def _augmix(t: Any, where: str) -> List[Dict[str, Any]]:
    """torchvision's AugMix (v1 and v2). It turns a PIL image into a uint8 tensor first, so its
    ops run torch's tensor kernels (grid_sample for the affine ops), which take nearest and
    bilinear only; the native step follows those kernels (augment.cc)."""
    if t.fill is not None:
        raise TypeError(f"{where}: a fill colour has no native equivalent (only fill=None)")
    raw = str(getattr(t.interpolation, "value", t.interpolation)).lower()
    interp = _interpolation(t.interpolation, where) if raw != "nearest-exact" else "nearest-exact"
    if interp not in ("nearest", "bilinear"):
        raise TypeError(f"{where}: interpolation {t.interpolation!r} has no native equivalent "
                        "(AugMix's tensor kernels take nearest or bilinear)")
    return [{"kind": "augmix", "severity": int(t.severity), "mixture_width": int(t.mixture_width),
             "chain_depth": int(t.chain_depth), "alpha": float(t.alpha), "all_ops": bool(t.all_ops),
             "interpolation": interp, "v2_magnitudes": _is_v2(t)}]


_converts("RandAugment", modules=_TIMM)(_timm_rand_augment)
_converts("RandomErasing", modules=_TIMM)(_timm_random_erasing)
_converts("RandomErasing")(_random_erasing)


@_converts("ToTensor")
@_converts("ToTensor", "MaybeToTensor", modules=_TIMM)
def _to_tensor(t: Any, where: str) -> List[Dict[str, Any]]:
    return ToTensor().steps()


@_converts("Normalize")
def _normalize(t: Any, where: str) -> List[Dict[str, Any]]:
    return Normalize([float(v) for v in t.mean], [float(v) for v in t.std]).steps()


@_converts("PILToTensor", "ToImage", "ToImageTensor")
@_converts("MaybePILToTensor", modules=_TIMM)
def _to_uint8_tensor(t: Any, where: str) -> List[Dict[str, Any]]:
    return []  # uint8 CHW tensor: the native default without ToTensor


@_converts("ToPureTensor", modules=("torchvision.transforms.v2",))
def _to_pure_tensor(t: Any, where: str) -> List[Dict[str, Any]]:
    return []  # only unwraps tv_tensors subclasses: values and plain tensors pass unchanged


@_converts("ConvertImageDtype", "ToDtype")
def _to_dtype(t: Any, where: str) -> List[Dict[str, Any]]:
    import torch

    dtype = getattr(t, "dtype", None)
    if isinstance(dtype, dict):
        dtype = next(iter(dtype.values()), None)
    scale = getattr(t, "scale", True) if type(t).__name__ == "ToDtype" else True
    if dtype is torch.float32 and scale:
        step = ToTensor().steps()[0]
        if _is_v2(t):
            step["by_reciprocal"] = True  # v2 multiplies by 1/255 where v1 divides by 255
        return [step]
    raise TypeError(f"{where}: only a conversion to torch.float32 with scaling is native")


@_converts("ImageClassification", modules=("torchvision.transforms._presets",))
def _image_classification(t: Any, where: str) -> List[Dict[str, Any]]:
    """A pretrained model's preset (``weights.transforms()``): its forward is F.resize of the
    shorter side (Pillow's resize on a PIL image, where ``antialias`` does not apply), F.center_crop,
    PILToTensor, v1's ConvertImageDtype(float) (level / 255) and Normalize."""
    resize = Resize(list(t.resize_size)).steps()[0]
    resize["interpolation"] = _interpolation(t.interpolation, where)
    return ([resize] + CenterCrop(list(t.crop_size)).steps() + ToTensor().steps()
            + Normalize(list(t.mean), list(t.std)).steps())


def _from_torchvision_one(t: Any) -> List[Dict[str, Any]]:
    """Native steps for one torchvision (v1 or v2) or timm transform; TypeError says why not."""
    where = f"{type(t).__module__}.{type(t).__name__}"
    convert = _converter(type(t))
    if convert is None:
        raise TypeError(f"transform {where} has no native equivalent")
    return convert(t, where)


# Which stage a native step belongs to (see TransformPipeline::Create): geometric steps fuse into
# one resample; after the first step on the 8-bit image, flips and CenterCrop move that image's
# pixels but a resize is not native; after ToTensor only output steps follow.
def _stage_error(steps: List[Dict[str, Any]], new: List[Dict[str, Any]]) -> Optional[str]:
    """Why `new` cannot follow `steps` natively, or None: the extension's stage-order rule (the
    one the native loader enforces), so the split and the loader cannot disagree."""
    return _C.check_transform(steps + new, len(steps))


# What a preset class may define besides __init__ and __call__: bookkeeping Python adds to every
# class, and methods that only display the object.
_PRESET_INERT = {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__",
                 "__firstlineno__", "__static_attributes__", "__init__", "__call__", "__repr__", "__str__"}
_CODE_SHAPE_FLAGS = 0x04 | 0x08 | 0x20 | 0x80 | 0x100 | 0x200  # *args, **kwargs, generators, coroutines


def _applies_transforms(self, img):
    return self.transforms(img)


def _unwrap_preset(obj: Any) -> Optional[Any]:
    """The ``transforms`` a preset object only applies, or None.

    torchvision's classification references (and many training scripts) wrap their Compose in a
    class whose ``__call__`` is ``return self.transforms(img)``. Such an object is unwrapped when
    all of these hold, so calling it is exactly calling its ``transforms``:

    * ``__call__`` is a plain function whose bytecode is that one line (any argument name; no
      decorator, default, ``*args``/``**kwargs`` or closure);
    * ``transforms`` is an attribute of the instance itself (no property, slot or custom
      ``__getattribute__``), not None;
    * the class and its bases (other than ``object``) define nothing but ``__init__``,
      ``__call__``, ``__repr__`` and ``__str__``, under the plain ``type`` metaclass.

    Anything else (a ``__call__`` that does more, another method that could change the object)
    stays an opaque Python callable.
    """
    cls = type(obj)
    if type(cls) is not type or isinstance(obj, Transform) or cls.__module__.startswith(("torchvision", "timm")):
        return None
    call = getattr(cls, "__call__", None)
    if not isinstance(call, type(_applies_transforms)) or call.__closure__ or call.__defaults__ \
            or call.__kwdefaults__:
        return None
    code, ref = call.__code__, _applies_transforms.__code__
    if (code.co_code != ref.co_code or code.co_names != ref.co_names
            or code.co_argcount != 2 or code.co_kwonlyargcount or code.co_freevars
            or code.co_flags & _CODE_SHAPE_FLAGS):
        return None
    for base in cls.__mro__[:-1]:
        if set(vars(base)) - _PRESET_INERT:
            return None
    inner = getattr(obj, "__dict__", {}).get("transforms")
    return None if inner is obj else inner


def from_torchvision(transform: Any) -> List[Dict[str, Any]]:
    """Native steps for a torchvision (v1 or v2) or timm transform, or a Compose of them.

    Args:
        transform: the transform object.

    Returns:
        the list of native step descriptions the pipeline runs.

    Raises:
        TypeError: a transform, or an argument of one, with no native equivalent (the message
            names it and why).
        ValueError: an interpolation Pillow's geometric ops refuse, as torchvision would raise
            mid-epoch.
    """
    return _from_torchvision_one(transform)


def to_steps(transform: Any) -> List[Dict[str, Any]]:
    """Native steps for a ringloader transform, a torchvision/timm transform, a preset object
    that only applies one, or None (no steps).

    Args:
        transform: the transform.

    Returns:
        the list of native step descriptions.

    Raises:
        TypeError: anything else (a user callable), or a step with no native equivalent; use
            :func:`split` to run such steps in Python instead.
    """
    if transform is None:
        return []
    if isinstance(transform, Transform):
        return transform.steps()
    inner = _unwrap_preset(transform)
    if inner is not None:
        return to_steps(inner)
    module = type(transform).__module__
    if callable(transform) and (module.startswith("torchvision") or module.startswith("timm")):
        return from_torchvision(transform)
    raise TypeError(
        f"transform {type(transform).__module__}.{type(transform).__name__} is neither a "
        "ringloader.transforms nor a supported torchvision transform; use the generic path "
        "(any torch Dataset) for arbitrary Python transforms"
    )


def has_to_tensor(steps: List[Dict[str, Any]]) -> bool:
    """True when the chain produces float values in [0, 1] (ToTensor present)."""
    return any(s["kind"] == "to_tensor" for s in steps)


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


def _step_name(t: Any) -> str:
    return f"{type(t).__module__}.{type(t).__name__}"


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
# reproduce, so those run in the Python tail.
_SAME_ON_UINT8_TENSOR = {"random_horizontal_flip", "random_vertical_flip", "center_crop",
                         "random_crop", "pad", "to_tensor", "random_apply",
                         "augmix"}  # AugMix runs the tensor kernels on a PIL image too


def _tensor_numerics_error(conversion: str, new: List[Dict[str, Any]]) -> Optional[str]:
    """Why `new`, following the uint8 tensor conversion `conversion`, cannot run natively."""
    def same(step: Dict[str, Any]) -> bool:
        # torchvision's tensor padding takes one fill for all channels (v1 refuses a tuple) and
        # casts it to uint8; Pillow rounds a per-channel fill its own way.
        fill = step.get("fill", [0.0])
        return step["kind"] in _SAME_ON_UINT8_TENSOR and len(set(fill)) == 1 and float(fill[0]).is_integer()

    if not all(same(step) for step in new):
        return (f"it follows {conversion}, so torchvision runs it on the uint8 tensor with "
                "torch's tensor numerics, not Pillow's; it runs in Python with them (move it "
                f"before {conversion} to run it natively with Pillow's numerics)")
    return None


def split(transform: Any) -> Split:
    """Splits ``transform`` (None, one transform or a Compose, ringloader's or torchvision's, a
    preset object that only applies one (see :func:`_unwrap_preset`), or anything callable) at the first step without a native equivalent, or whose numerics would
    differ natively (a step on the uint8 tensor after PILToTensor/ToImage that torchvision runs
    with tensor kernels).

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
            new = to_steps(t)
            # After a uint8 tensor conversion, tensor numerics are the first reason (and the one
            # that says what to do: move the step before the conversion).
            why = _tensor_numerics_error(conversion, new) if conversion and not has_to_tensor(steps) else None
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
