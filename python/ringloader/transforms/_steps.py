"""Native steps: what a transform becomes for the native pipeline, and the registry of converters.

A transform object becomes a list of step dicts, which the extension checks. This module owns
the protocol (``Transform``: a ringloader transform knows its steps), the converter registry of
torchvision's and timm's classes (``_converts``; the converters themselves live in
``_tv_converters`` and ``_detection``, which register on import), the parameter readers those
converters share, and :func:`to_steps` / :func:`from_torchvision`, public through
``ringloader.transforms``.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .. import _C

Size = Union[int, Sequence[int]]


def _pair(size: Size, name: str) -> Tuple[int, int]:
    if isinstance(size, numbers.Integral):
        return int(size), int(size)
    if isinstance(size, Sequence) and len(size) == 1:
        return int(size[0]), int(size[0])
    if isinstance(size, Sequence) and len(size) == 2:
        return int(size[0]), int(size[1])
    raise ValueError(f"{name}: size must be an int or a sequence of 1 or 2 ints, got {size!r}")


class Step(dict):
    """One native step: its kind (the binding's key, ``"random_resized_crop"``) and that kind's
    parameters, checked where the step is built against the kind's one declaration, the C++
    table every kind is parsed, described and applied from (``_C.step_kinds()``): an unknown
    kind or a parameter the kind does not declare is an error here, naming the converter's
    step, not at the loader's creation. A dict, as the binding takes it.

        >>> Step("resize", size_h=256, size_w=0)
        {'kind': 'resize', 'size_h': 256, 'size_w': 0}
        >>> Step("resize", size=256)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: native step 'resize' (Resize) has no parameter 'size'; its parameters: size_h ...
    """

    def __init__(self, kind: str, **params: Any):
        if kind not in _kinds():
            raise ValueError(f"unknown native step kind {kind!r}; the kinds: {', '.join(sorted(_kinds()))}")
        super().__init__(kind=kind)
        self.update(params)

    def __setitem__(self, key: str, value: Any) -> None:
        if key == "kind":
            if "kind" in self and value != self["kind"]:  # the parameters were checked against it
                raise TypeError(f"the kind of a native step is fixed when it is built: build "
                                f"Step({value!r}, ...) instead of changing {self['kind']!r}")
        else:
            name, params = _kinds()[self["kind"]]
            if key not in params:
                raise TypeError(f"native step {self['kind']!r} ({name}) has no parameter {key!r}; "
                                f"its parameters: {' '.join(params)}")
        super().__setitem__(key, value)

    def update(self, *args: Any, **params: Any) -> None:
        for key, value in dict(*args, **params).items():
            self[key] = value

    def __ior__(self, other: Any) -> "Step":
        self.update(other)
        return self

    def setdefault(self, key: str, value: Any = None) -> Any:
        if key not in self:
            self[key] = value
        return self[key]

    def __reduce__(self):
        params = {k: v for k, v in self.items() if k != "kind"}
        return (_rebuild_step, (self["kind"], params))


def _rebuild_step(kind: str, params: Dict[str, Any]) -> Step:
    return Step(kind, **params)


_KINDS: Optional[Dict[str, Tuple[str, Tuple[str, ...]]]] = None


def _kinds() -> Dict[str, Tuple[str, Tuple[str, ...]]]:
    """{kind: (torchvision's class name, the kind's parameter keys)}, from the C++ table."""
    global _KINDS
    if _KINDS is None:
        _KINDS = {key: (name, tuple(params)) for key, name, params in _C.step_kinds()}
    return _KINDS


class Transform:
    """Base class: a transform is a list of native steps."""

    def steps(self) -> List[Dict[str, Any]]:
        raise NotImplementedError

    def __call__(self, img):  # pragma: no cover - guidance for misuse
        raise TypeError(
            f"{type(self).__name__} runs inside ringloader's native pipeline; pass it to "
            "ringloader.ImageFolder(transform=...) instead of calling it on an image"
        )


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


# ---- the converter registry: torchvision and timm classes -> native steps ---------------------

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


def _step_name(t: Any) -> str:
    return f"{type(t).__module__}.{type(t).__name__}"



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


def _applies_transforms_to_two(self, img, target):
    return self.transforms(img, target)


def _unwrap_preset(obj: Any, arguments: int = 1) -> Optional[Any]:
    """The ``transforms`` a preset object only applies, or None.

    torchvision's classification references (and many training scripts) wrap their Compose in a
    class whose ``__call__`` is ``return self.transforms(img)``; its segmentation and detection
    references in one whose ``__call__`` is ``return self.transforms(img, target)`` (``arguments``
    2: how :class:`ringloader.Joint` calls it with an ``(image, target)`` structure). Such an
    object is unwrapped when all of these hold, so calling it is exactly calling its
    ``transforms``:

    * ``__call__`` is a plain function whose bytecode is that one line (any argument names; no
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
    shapes = {1: _applies_transforms, 2: _applies_transforms_to_two}
    if arguments not in shapes:
        return None
    code, ref = call.__code__, shapes[arguments].__code__
    if (code.co_code != ref.co_code or code.co_names != ref.co_names
            or code.co_argcount != arguments + 1 or code.co_kwonlyargcount or code.co_freevars
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
