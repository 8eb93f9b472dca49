"""Image transforms with torchvision's names, parameters and semantics, executed natively.

Each transform describes itself as a step for the native pipeline; the whole chain runs in C++
(scaled/region-of-interest JPEG decode, one antialiased resample, fused flip/normalise/write-out).
A torchvision ``transforms.Compose`` of the supported transforms is accepted too: see
:func:`from_torchvision`.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

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
    """Chains transforms, as ``torchvision.transforms.Compose``."""

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
    """Resize with bilinear antialiasing. An int ``size`` sets the shorter side (torchvision)."""

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
    """Crop the centre (torchvision rounding; zero padding when the crop is larger)."""

    def __init__(self, size: Size):
        self.size = _pair(size, "CenterCrop")

    def steps(self) -> List[Dict[str, Any]]:
        return [{"kind": "center_crop", "size_h": self.size[0], "size_w": self.size[1]}]

    def __repr__(self) -> str:
        return f"CenterCrop(size={self.size})"


class RandomResizedCrop(Transform):
    """torchvision's RandomResizedCrop: same parameter sampling, bilinear antialiased resize.

    Random draws come from a per-sample generator seeded by (seed, epoch, index).
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
    """Mirror left-right with probability ``p``."""

    def __init__(self, p: float = 0.5):
        self.p = float(p)

    def steps(self) -> List[Dict[str, Any]]:
        return [{"kind": "random_horizontal_flip", "p": self.p}]

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


class ToTensor(Transform):
    """Float output in [0, 1] (without it, batches are uint8 in [0, 255])."""

    def steps(self) -> List[Dict[str, Any]]:
        return [{"kind": "to_tensor"}]

    def __repr__(self) -> str:
        return "ToTensor()"


class Normalize(Transform):
    """``(x - mean) / std`` per channel, after ToTensor."""

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


def _is_bilinear(interpolation: Any) -> bool:
    name = getattr(interpolation, "value", interpolation)
    return str(name).lower() in ("bilinear", "2", "interpolationmode.bilinear")


def _from_torchvision_one(t: Any) -> List[Dict[str, Any]]:
    """Translate one torchvision transform (v1 or v2) into native steps."""
    name = type(t).__name__
    module = type(t).__module__
    where = f"{module}.{name}"
    if name == "Compose":
        return Compose(t.transforms).steps()
    if name in ("Resize", "RandomResizedCrop"):
        if not _is_bilinear(getattr(t, "interpolation", "bilinear")):
            raise TypeError(f"{where}: only InterpolationMode.BILINEAR is supported natively")
        if getattr(t, "antialias", True) is False:
            raise TypeError(f"{where}: antialias=False is not supported (PIL always antialiases)")
        if name == "Resize":
            return Resize(t.size, max_size=getattr(t, "max_size", None)).steps()
        return RandomResizedCrop(t.size, scale=tuple(t.scale), ratio=tuple(t.ratio)).steps()
    if name == "CenterCrop":
        return CenterCrop(t.size).steps()
    if name == "RandomHorizontalFlip":
        return RandomHorizontalFlip(t.p).steps()
    if name == "ToTensor":
        return ToTensor().steps()
    if name == "Normalize":
        return Normalize(t.mean, t.std).steps()
    if name in ("PILToTensor", "ToImage", "ToImageTensor"):
        return []  # uint8 CHW tensor: the native default without ToTensor
    if name in ("ConvertImageDtype", "ToDtype"):
        import torch

        dtype = getattr(t, "dtype", None)
        if isinstance(dtype, dict):
            dtype = next(iter(dtype.values()), None)
        scale = getattr(t, "scale", True) if name == "ToDtype" else True
        if dtype is torch.float32 and scale:
            return ToTensor().steps()
        raise TypeError(f"{where}: only a conversion to torch.float32 with scaling is supported")
    raise TypeError(
        f"transform {where} is not supported by ringloader's native pipeline "
        "(supported: Compose, Resize, CenterCrop, RandomResizedCrop, RandomHorizontalFlip, "
        "ToTensor, Normalize, PILToTensor/ToImage, ConvertImageDtype/ToDtype(float32))"
    )


def from_torchvision(transform: Any) -> List[Dict[str, Any]]:
    """Native steps for a torchvision transform or Compose; TypeError names what is unsupported."""
    return _from_torchvision_one(transform)


def to_steps(transform: Any) -> List[Dict[str, Any]]:
    """Native steps for a ringloader transform, a torchvision transform, or None."""
    if transform is None:
        return []
    if isinstance(transform, Transform):
        return transform.steps()
    if callable(transform) and type(transform).__module__.startswith("torchvision"):
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
    (``tail_input == "pil"``: the prefix is decoded to uint8 HWC) or, once the prefix holds
    ``ToTensor``, a float tensor (``"tensor"``). ``tail_names`` names the Python steps.
    """

    steps: List[Dict[str, Any]]
    tail: Optional[Callable[[Any], Any]]
    tail_names: List[str]
    tail_input: str


def _flatten(transform: Any) -> List[Any]:
    if transform is None:
        return []
    inner = getattr(transform, "transforms", None)
    if type(transform).__name__ == "Compose" and isinstance(inner, (list, tuple)):
        out: List[Any] = []
        for t in inner:
            out.extend(_flatten(t))
        return out
    return [transform]


def _step_name(t: Any) -> str:
    return f"{type(t).__module__}.{type(t).__name__}"


def split(transform: Any) -> Split:
    """Splits ``transform`` (None, one transform or a Compose, ringloader's or torchvision's or
    anything callable) at the first step without a native equivalent."""
    parts = _flatten(transform)
    steps: List[Dict[str, Any]] = []
    for i, t in enumerate(parts):
        try:
            steps.extend(to_steps(t))
        except TypeError:
            rest = parts[i:]
            for r in rest:
                if isinstance(r, Transform):
                    raise TypeError(
                        f"ringloader.transforms.{type(r).__name__} follows the Python step "
                        f"{_step_name(parts[i])} and cannot run in Python: use torchvision's "
                        f"{type(r).__name__} there") from None
            tail = _PythonTail(rest)
            return Split(steps, tail, [_step_name(r) for r in rest],
                         "tensor" if has_to_tensor(steps) else "pil")
    return Split(steps, None, [], "tensor" if has_to_tensor(steps) else "pil")


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
