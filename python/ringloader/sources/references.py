"""Lazily decoded images that a user's own ``torch.utils.data.Dataset`` returns.

``__getitem__`` returns :class:`ImageFile` (or :class:`ImageBytes`) references where it would
return a decoded, transformed image. :class:`ringloader.DataLoader` reads, decodes and transforms
them on its native threads; anywhere else :func:`materialize` decodes them with Pillow and applies
their transforms, exactly as the same Dataset decoding with PIL would.
"""

from __future__ import annotations

import io
import os
from typing import Any, Dict, Optional, Tuple

from .frame_leaves import DrawnClips, _FrameLeaf, check_leaves
from . import video as video_module
from .video import _VideoReference


def _flat(structure: Any) -> list:
    """The leaves of a stripped sample structure (tuples, lists and dicts walked; a Joint is one
    leaf)."""
    if isinstance(structure, (tuple, list)):
        return [leaf for v in structure for leaf in _flat(v)]
    if isinstance(structure, dict):
        return [leaf for v in structure.values() for leaf in _flat(v)]
    return [structure]


def rebuild(value: Any, walk: Any) -> Any:
    """``value`` rebuilt with ``walk`` applied to each item when it is a container the sample
    structures use (a tuple, namedtuple, list, dict or other mapping type, kept as that type);
    ``value`` itself otherwise. Every walker over samples recurses through this one rule."""
    if isinstance(value, tuple):
        items = [walk(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [walk(v) for v in value]
    if isinstance(value, dict):
        items = {k: walk(v) for k, v in value.items()}
        return items if type(value) is dict else type(value)(items)
    return value

__all__ = ["ImageBytes", "ImageFile", "ImageReference", "Joint", "materialize"]

_MODES = ("RGB", "L", "mask")


def _check_mode(mode: Any) -> str:
    if mode not in _MODES:
        raise ValueError(f"mode must be 'RGB', 'L' or 'mask', got {mode!r}")
    return mode


# Transforms already found fit for label images, by id (a Dataset builds a reference per sample
# with the same transform object: it is walked once).
_MASK_CHECKED: Dict[int, Any] = {}


def _steps_of(transform: Any) -> list:
    """The steps of a Compose (torchvision's or ringloader's, nested), or the transform itself."""
    inner = getattr(transform, "transforms", None)
    if isinstance(inner, (list, tuple)):
        return [step for t in inner for step in _steps_of(t)]
    return [transform]


def _is_nearest(interpolation: Any) -> bool:
    name = getattr(interpolation, "value", interpolation)  # InterpolationMode, or a str/int
    return name in ("nearest", "nearest-exact", 0) or str(name).lower() in ("nearest",
                                                                              "nearest-exact")


def _check_mask_transform(transform: Any) -> None:
    """A label image keeps its values only under nearest resampling: refuse any step that
    resamples otherwise, naming it."""
    if transform is None or _MASK_CHECKED.get(id(transform)) is transform:
        return
    for step in _steps_of(transform):
        interpolation = getattr(step, "interpolation", None)
        if interpolation is not None and not _is_nearest(interpolation):
            raise ValueError(
                f"mode='mask': transform step {type(step).__name__} resamples with "
                f"{getattr(interpolation, 'value', interpolation)} interpolation, which blends "
                "label values; a label image takes only nearest interpolation (pass "
                "interpolation=InterpolationMode.NEAREST)")
    _MASK_CHECKED[id(transform)] = transform


class ImageReference:
    """What :class:`ImageFile` and :class:`ImageBytes` share: a transform and a decode mode.

    ``mode``: ``"RGB"`` (Pillow's ``convert("RGB")``), ``"L"`` (``convert("L")``) or ``"mask"``
    (a label image decoded as stored: palette indices are kept, never converted)."""

    __slots__ = ("transform", "mode")

    def __init__(self, transform: Any, mode: str):
        self.transform = transform
        self.mode = _check_mode(mode)
        if mode == "mask":
            _check_mask_transform(transform)

    def _source_key(self) -> Tuple[Any, ...]:
        """Two references with equal keys name the same encoded image."""
        raise NotImplementedError

    def _open(self) -> Any:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def _decode(self) -> Any:
        """The image as Pillow decodes it in this reference's mode (not yet transformed); an
        error Pillow raises names the reference (a missing file keeps its FileNotFoundError,
        which names the path)."""
        try:
            image = self._open()
        except FileNotFoundError:
            raise
        except OSError as exc:  # a header Pillow cannot read: "Truncated File Read", say
            raise type(exc)(f"{self.describe()}: {exc}") from exc
        try:
            if self.mode == "mask":
                image.load()
                return image
            return image.convert(self.mode)
        except OSError as exc:
            raise OSError(f"{self.describe()}: {exc}") from exc

    def materialize(self) -> Any:
        """Decodes with Pillow and applies the transform (torch's RNG draws, as in torch)."""
        return _apply(self, self._decode())

    def __eq__(self, other: Any) -> bool:
        return (type(other) is type(self) and self._source_key() == other._source_key()
                and self.mode == other.mode and self.transform is other.transform)

    __hash__ = None  # type: ignore[assignment]


def _apply(reference: ImageReference, image: Any) -> Any:
    return image if reference.transform is None else reference.transform(image)


class ImageFile(ImageReference):
    """The image in the file at ``path``, decoded in ``mode`` and then transformed by
    ``transform`` (a :mod:`ringloader.transforms` chain, a torchvision ``Compose`` or any callable,
    as ``ImageFolder(transform=)``).

    Examples:
        >>> import torch
        >>> from torchvision.transforms import v2
        >>> import ringloader as rl
        >>> from ringloader.sample_data import make_sample_dataset
        >>> root = make_sample_dataset("photos", num_images=8, num_classes=2)
        >>> class Photos(torch.utils.data.Dataset):  # a user's own Dataset, made native
        ...     def __init__(self, paths):
        ...         self.paths = paths
        ...         self.transform = v2.Compose([v2.RandomResizedCrop(64), v2.PILToTensor()])
        ...     def __len__(self):
        ...         return len(self.paths)
        ...     def __getitem__(self, i):  # was: Image.open(path).convert("RGB") + transform
        ...         return rl.ImageFile(self.paths[i], transform=self.transform), {"index": i}
        >>> ds = Photos(sorted(str(p) for p in root.rglob("*.jpg")))
        >>> images, extra = next(iter(rl.DataLoader(ds, batch_size=8)))
        >>> tuple(images.shape), extra["index"].tolist()
        ((8, 3, 64, 64), [0, 1, 2, 3, 4, 5, 6, 7])
        >>> tuple(rl.materialize(ds[0])[0].shape)  # the same sample decoded with Pillow
        (3, 64, 64)
    """

    __slots__ = ("path",)

    def __init__(self, path: Any, transform: Any = None, mode: str = "RGB"):
        super().__init__(transform, mode)
        self.path = os.fspath(path)
        if not isinstance(self.path, str):
            self.path = os.fsdecode(self.path)

    def _source_key(self) -> Tuple[Any, ...]:
        return ("file", self.path)

    def _open(self) -> Any:
        from PIL import Image

        return Image.open(self.path)

    def describe(self) -> str:
        return f"ImageFile({self.path!r})"

    def __repr__(self) -> str:
        return f"ringloader.ImageFile({self.path!r}, transform={self.transform!r}, mode={self.mode!r})"

    def __reduce__(self) -> Any:
        return (ImageFile, (self.path, self.transform, self.mode))


class ImageBytes(ImageReference):
    """An encoded image held in memory: ``data`` is any bytes-like object (``bytes``,
    ``memoryview``, a numpy ``uint8`` array, an Arrow buffer). It is referenced, not copied: the
    reference keeps the object alive.

    Examples:
        >>> import ringloader as rl
        >>> from ringloader.sample_data import make_sample_dataset
        >>> root = make_sample_dataset("photos", num_images=8, num_classes=2)
        >>> data = (root / "class_00" / "img_00000.jpg").read_bytes()
        >>> image = rl.ImageBytes(data)  # any bytes-like object; referenced, not copied
        >>> image.nbytes == len(data), image.materialize().size
        (True, (400, 533))
    """

    __slots__ = ("data", "_view")

    def __init__(self, data: Any, transform: Any = None, mode: str = "RGB"):
        super().__init__(transform, mode)
        try:
            view = memoryview(data)
        except TypeError:
            raise TypeError(f"ImageBytes(data=...) needs a bytes-like object, got "
                            f"{type(data).__name__}") from None
        if not view.contiguous:
            raise ValueError("ImageBytes(data=...) needs contiguous bytes")
        self.data = data
        self._view = view.cast("B") if view.format != "B" or view.ndim != 1 else view

    @property
    def nbytes(self) -> int:
        return self._view.nbytes

    def _source_key(self) -> Tuple[Any, ...]:
        # The same buffer (not merely equal bytes): one object, one decode.
        return ("bytes", id(self.data), self._view.nbytes)

    def _open(self) -> Any:
        from PIL import Image

        try:
            return Image.open(io.BytesIO(self._view))
        except OSError as exc:
            raise OSError(f"{self.describe()}: {exc}") from exc

    def describe(self) -> str:
        return f"ImageBytes({self._view.nbytes} bytes)"

    def __repr__(self) -> str:
        return (f"ringloader.ImageBytes(<{self._view.nbytes} bytes>, transform={self.transform!r}, "
                f"mode={self.mode!r})")

    def __reduce__(self) -> Any:
        data = self.data
        if isinstance(data, memoryview):
            data = data.tobytes()  # a memoryview does not pickle
        return (ImageBytes, (data, self.transform, self.mode))


_PLAIN = (bool, int, float, complex, str, bytes, type(None))


class Joint:
    """A torchvision v2 ``transform`` applied at once to ``structure``: image references,
    ``mode="mask"`` references, ``tv_tensors.BoundingBoxes``/``KeyPoints`` and plain values, in
    tuples, lists and dicts. Every geometric leaf sees the same random draws (v2's contract).
    References inside take no transform of their own: the joint transform is theirs.

    A video reference (``rl.VideoFile``/``rl.VideoBytes``) is its clip decoded as a
    ``tv_tensors.Video`` (``uint8`` ``[T, 3, H, W]``, ``[N, T, 3, H, W]`` for several clips), its
    sampler drawing from the sample's clip generator; ``rl.PerFrame(video, boxes_by_frame)``
    gives the boxes (or other values) of the frames drawn, moved with the clip's one draw, and
    ``rl.ClipIndices``/``rl.ClipTimes`` which frames they are. A Joint holding a video batches
    as a clip: natively when its transform is one the native clip chain runs (boxes moved by
    v2's kernels with the clip's draws), else in torch's worker processes
    (``ringloader.materialize``).

    ``transform`` is called as the user's code would call it: with the structure as its one
    argument (a v2 transform or ``Compose``), or, when it takes the items of a tuple structure
    as its arguments instead (torchvision's segmentation and detection reference presets:
    ``preset(image, target)``), with those items (:func:`joint_callable`): a preset whose
    ``__call__`` only returns ``self.transforms(image, target)`` is replaced by its
    ``transforms``, so it runs natively as that ``Compose`` would.

    One result on every path (natively, in torch's workers, :func:`materialize`): v2 runs on
    the PIL images the user's own code would have opened and the masks as
    ``tv_tensors.Mask``, a chain without a tensor conversion getting a ``ToImage()`` before its
    first step that takes tensors only (``ToDtype``, ``ConvertImageDtype``, ``Normalize``,
    ``ToPureTensor``) or at its end.

    Examples:
        >>> import torch
        >>> from torchvision import tv_tensors
        >>> from torchvision.transforms import v2
        >>> import ringloader as rl
        >>> from ringloader.sample_data import make_sample_dataset
        >>> root = make_sample_dataset("photos", num_images=8, num_classes=2)
        >>> path = str(root / "class_00" / "img_00000.jpg")  # 400 x 533
        >>> boxes = tv_tensors.BoundingBoxes([[10, 20, 110, 220]], format="XYXY", canvas_size=(533, 400))
        >>> transform = v2.Compose([v2.Resize((266, 200)), v2.RandomHorizontalFlip(p=1.0),
        ...                         v2.PILToTensor()])
        >>> sample = rl.Joint(transform, (rl.ImageFile(path), {"boxes": boxes, "labels": torch.tensor([3])}))
        >>> image, target = rl.materialize(sample)  # the DataLoader gives the same, natively
        >>> tuple(image.shape), target["boxes"].tolist(), target["labels"].tolist()
        ((3, 266, 200), [[145, 9, 195, 109]], [3])
    """

    __slots__ = ("transform", "structure")

    def __init__(self, transform: Any, structure: Any):
        if not callable(transform):
            raise TypeError(f"Joint(transform=...) needs a callable v2 transform, got "
                            f"{type(transform).__name__}")
        _check_joint_leaves(structure, "structure")
        self.transform = joint_callable(transform, structure)
        self.structure = structure

    def materialize(self, generator: Any = None) -> Any:
        """Decodes every reference (images as the PIL images the user's own code would open,
        masks as ``tv_tensors.Mask`` of the stored values, videos as ``tv_tensors.Video``, their
        clip samplers drawing from ``generator``) and applies the transform to the whole
        structure, with a ``ToImage()`` where a chain without a tensor conversion first needs a
        tensor, else at its end (:func:`runnable`): what the native path gives."""
        return _run_joint(self, {}, DrawnClips(generator))

    def __repr__(self) -> str:
        return f"ringloader.Joint({self.transform!r}, {self.structure!r})"

    def __reduce__(self) -> Any:
        return (Joint, (self.transform, self.structure))


video_module._WRAPPERS[Joint] = "structure"  # holds_video looks inside a Joint


class Spread:
    """A callable that takes a Joint's tuple structure as its arguments (``preset(image,
    target)``), called so with the structure's items: what a Joint applies in its place."""

    __slots__ = ("preset",)
    #: What the native path's refusal adds (its steps are not seen: it does more than apply them).
    hint = (" (called with the structure's items, as preset(image, target); its __call__ does "
            "more than return self.transforms(image, target), so its steps cannot be read: give "
            "the Joint its v2 transforms to run them natively)")

    def __init__(self, preset: Any):
        self.preset = preset

    def __call__(self, structure: Any) -> Any:
        return self.preset(*structure)

    def __repr__(self) -> str:
        return f"{self.preset!r} (called with the structure's items)"

    def __reduce__(self) -> Any:
        return (Spread, (self.preset,))


# joint_callable's answers by (the transform's id, the tuple structure's length or None), the
# transform kept so that its id stays its own (a Joint is made for every sample).
_CALLABLES: Dict[Tuple[int, Optional[int]], Tuple[Any, Any]] = {}


def joint_callable(transform: Any, structure: Any) -> Any:
    """What a Joint applies to ``structure`` in one call, calling ``transform`` as the user's code
    would: ``transform`` itself when it takes the structure as its one argument (v2's classes
    and ``Compose``; anything whose signature is not known); for one that takes a tuple
    structure's items as its arguments, its ``transforms`` when it only applies them (a
    reference preset: ``_unwrap_preset``), else a :class:`Spread` of it.

    Raises:
        TypeError: ``transform``'s signature takes neither, naming it.
    """
    if isinstance(transform, Spread) or type(transform).__module__.startswith(
            "torchvision.transforms"):
        return transform
    items = len(structure) if isinstance(structure, tuple) else None
    key = (id(transform), items)
    found = _CALLABLES.get(key)
    if found is None or found[0] is not transform:
        if len(_CALLABLES) >= _RUNNABLE_KEPT:
            _CALLABLES.clear()
        found = _CALLABLES[key] = (transform, _joint_callable(transform, structure, items))
    return found[1]


def _joint_callable(transform: Any, structure: Any, items: Optional[int]) -> Any:
    import inspect

    try:
        signature = inspect.signature(transform)
    except (TypeError, ValueError):  # a builtin's: called with the structure, as before
        return transform
    try:
        signature.bind(structure)
        return transform
    except TypeError:
        pass
    if items:
        try:
            signature.bind(*structure)
        except TypeError:
            pass
        else:
            from ..transforms import _unwrap_preset

            inner = _unwrap_preset(transform, items)  # its transforms, called with the items
            return Spread(transform) if inner is None else joint_callable(inner, structure)
    kind = transform if isinstance(transform, type) or inspect.isroutine(transform) \
        else type(transform)
    name = f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', kind)}"
    given = f"a tuple of {items}" if items is not None else type(structure).__name__
    raise TypeError(f"Joint(transform=...): {name} takes {signature}, which takes neither the "
                    f"structure ({given}) as its one argument nor its items as its arguments "
                    "(a reference preset's preset(image, target) takes a 2-tuple (image, "
                    "target)); give a structure it takes, or a v2 transform")


def _check_joint_leaves(value: Any, where: str) -> None:
    """Refuses, naming its place, a leaf v2 could not transform jointly."""
    import torch
    from torchvision import tv_tensors

    if isinstance(value, (ImageReference, _VideoReference)):
        if value.transform is not None:
            what = value.describe() if isinstance(value, ImageReference) else repr(value)
            raise ValueError(f"Joint: {where} is {what} with a transform of its own; "
                             "inside Joint the joint transform applies to every leaf (pass "
                             "transform=None)")
        return
    if isinstance(value, _FrameLeaf):
        return
    if isinstance(value, (tv_tensors.BoundingBoxes, tv_tensors.KeyPoints, tv_tensors.Mask,
                          torch.Tensor)) or isinstance(value, _PLAIN):
        return
    if isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            _check_joint_leaves(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _check_joint_leaves(item, f"{where}[{key!r}]")
        return
    raise TypeError(f"Joint: {where} is a {type(value).__name__}, which Joint does not transform; "
                    "a leaf is an ImageFile/ImageBytes, a VideoFile/VideoBytes or a leaf of one "
                    "(PerFrame, ClipIndices, ClipTimes), a tv_tensors.BoundingBoxes, KeyPoints "
                    "or Mask, a tensor or a plain value")


def _decode_joint(value: Any, decoded: Dict[Tuple[Any, ...], Any], images: list,
                  drawn: DrawnClips) -> Any:
    """``value`` with its references decoded: an image as the PIL image Pillow opens (listed
    in ``images``), a mask as a ``tv_tensors.Mask`` of its stored values, a video as a
    ``tv_tensors.Video`` of its clip (drawn in ``drawn``), a frame leaf as its value."""
    if isinstance(value, _VideoReference):
        from torchvision import tv_tensors

        return tv_tensors.Video(drawn.decode(value))
    if isinstance(value, _FrameLeaf):
        return value.value(drawn)
    if isinstance(value, ImageReference):
        key = value._source_key() + (value.mode,)
        image = decoded.get(key)
        if image is None:
            image = decoded[key] = value._decode()
        if value.mode == "mask":
            import numpy as np
            import torch
            from torchvision import tv_tensors

            return tv_tensors.Mask(torch.from_numpy(np.array(image, copy=True)))
        images.append(image)
        return image
    return rebuild(value, lambda v: _decode_joint(v, decoded, images, drawn))


def _run_joint(joint: "Joint", decoded: Dict[Tuple[Any, ...], Any], drawn: DrawnClips) -> Any:
    """``joint`` decoded and transformed, one rule on every path (:func:`runnable`)."""
    from ..core._sample_keys import one_intra_op_thread

    images: list = []
    structure = _decode_joint(joint.structure, decoded, images, drawn)
    with one_intra_op_thread():  # as the native path runs v2's steps (its tail)
        if not images:  # no image for a ToImage to convert (it would take a plain tensor)
            return joint.transform(structure)
        return runnable(joint.transform)(structure)


#: v2 classes that turn a PIL image into a tensor: ToImage into a ``tv_tensors.Image``,
#: PILToTensor and ToTensor into a plain tensor.
_CONVERSIONS = {"ToImage", "PILToTensor", "ToTensor"}
#: v2 classes that take tensors only: v2 passes a PIL image through them unchanged (ToDtype,
#: ConvertImageDtype, ToPureTensor) or refuses one (Normalize).
_TENSOR_ONLY = {"ToDtype", "ConvertImageDtype", "Normalize", "ToPureTensor"}
# The transform each Joint transform runs as (``runnable``), by id, the transform kept so that
# the id stays its own; emptied past _RUNNABLE_KEPT (a Compose built in every __getitem__).
_RUNNABLE: Dict[int, Tuple[Any, Any]] = {}
_RUNNABLE_KEPT = 256


def runnable(transform: Any) -> Any:
    """What a Joint whose structure holds an image reference applies to its decoded structure
    (PIL images, ``tv_tensors.Mask`` masks), on every path: ``transform`` itself when it holds
    a tensor conversion (``ToImage``, ``PILToTensor``, ``ToTensor``), else its steps with a
    ``ToImage()`` before the first step that takes tensors only (v2 would pass a PIL image
    through ``ToDtype`` and refuse it in ``Normalize``) or at the end: the image comes out a
    tensor, rendered with Pillow's kernels up to there."""
    found = _RUNNABLE.get(id(transform))
    if found is None or found[0] is not transform:
        if len(_RUNNABLE) >= _RUNNABLE_KEPT:
            _RUNNABLE.clear()
        found = _RUNNABLE[id(transform)] = (transform, _runnable(transform))
    return found[1]


def _runnable(transform: Any) -> Any:
    from ..transforms import _flatten

    parts = _flatten(transform)
    if isinstance(transform, Spread) or any(type(p).__name__ in _CONVERSIONS for p in parts):
        return transform  # a Spread: its preset's result, as the user's own call gives it
    from torchvision.transforms import v2

    at = next((i for i, p in enumerate(parts) if type(p).__name__ in _TENSOR_ONLY
               and type(p).__module__.startswith("torchvision.transforms.v2")), len(parts))
    return v2.Compose(parts[:at] + [v2.ToImage()] + parts[at:])


def materialize(sample: Any, generator: Any = None) -> Any:
    """``sample`` with every :class:`ImageFile`/:class:`ImageBytes` in it decoded with Pillow and
    transformed (tuples, lists, namedtuples and dicts are walked at any depth; other values are
    returned as they are). Several references to one image in a sample decode it once; each
    still applies its own transform, in the order they appear. A video reference
    (:class:`ringloader.VideoFile`/:class:`ringloader.VideoBytes`) is decoded as its
    ``decode()`` decodes it: its clip, its clip sampler drawing from ``generator`` (a
    ``torch.Generator``; None: torch's global one), then its transform. Each reference object
    draws once, where the sample first holds it or a leaf of it
    (:class:`ringloader.ClipIndices`, :class:`ringloader.ClipTimes`,
    :class:`ringloader.PerFrame`, which give its clip's frames), in the order they appear: one
    object held twice gives one clip twice; two objects of one file, two clips. A leaf of an
    object the sample does not hold, beside one of the same video that it does, raises
    ``ValueError`` (its frames would not be that clip's).

    Examples:
        >>> import ringloader as rl
        >>> from ringloader.sample_data import make_sample_dataset
        >>> root = make_sample_dataset("photos", num_images=8, num_classes=2)
        >>> path = str(root / "class_00" / "img_00000.jpg")
        >>> sample = {"image": rl.ImageFile(path), "gray": rl.ImageFile(path, mode="L"), "label": 0}
        >>> out = rl.materialize(sample)  # decoded once, each reference's mode and transform applied
        >>> out["image"].mode, out["gray"].mode, out["label"]
        ('RGB', 'L', 0)
    """
    decoded: Dict[Tuple[Any, ...], Any] = {}
    drawn = DrawnClips(generator)
    check_leaves(sample)

    def walk(value: Any) -> Any:
        if isinstance(value, Joint):
            return _run_joint(value, decoded, drawn)
        if isinstance(value, ImageReference):
            key = value._source_key() + (value.mode,)
            image = decoded.get(key)
            if image is None:
                image = decoded[key] = value._decode()
            return _apply(value, image)
        if isinstance(value, _VideoReference):
            out = drawn.decode(value)
            return value.transform(out) if value.transform is not None else out
        if isinstance(value, _FrameLeaf):
            return value.value(drawn)
        return rebuild(value, walk)

    return walk(sample)


def first_plain(structure: Any, unwrapped: bool) -> Optional[str]:
    """What v2 takes for the image in ``structure`` (flattened as v2 flattens it) when the image
    is a plain tensor and so are, ``unwrapped`` (after ToPureTensor), the masks, boxes and
    keypoints: None when that is the image reference."""
    import torch
    from torch.utils._pytree import tree_flatten

    leaves, _ = tree_flatten(structure)
    for n, value in enumerate(leaves):
        if isinstance(value, ImageReference) and value.mode != "mask":
            return None
        if (type(value) is torch.Tensor or (unwrapped and isinstance(value, torch.Tensor))
                or (unwrapped and isinstance(value, ImageReference))):
            what = value.describe() if isinstance(value, ImageReference) else type(value).__name__
            return f"leaf {n} ({what})"
    return None
