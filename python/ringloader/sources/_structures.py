"""The structure of a user's samples around their image references. Listing a sample
(``_strip``) replaces each reference by a placeholder leaf (``_Leaf``; a native ``Joint`` by a
``_joint.JointLeaf`` holding a ``_JointImage`` and its ``_JointMask`` leaves); building its batch
fills each leaf with its rendered image (``_fill``), a Joint's after its geometry is resolved
(``_resolve_joints``). A columnar source's structures are made when asked (``_Structures``). A
sample's structure in words and the sample unlike the others of a batch make collate errors
(``_shape``, ``odd_one``, ``collate_hint``).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from . import _joint
from .references import ImageFile, ImageReference, Joint, rebuild


class _Leaf:
    """Where reference ``k`` of a sample was in its structure."""

    __slots__ = ("k",)

    def __init__(self, k: int):
        self.k = k

    def __reduce__(self) -> Any:
        return (_leaf, (self.k,))


class _JointImage(_Leaf):
    """The image of a native Joint: a ``tv_tensors.Image`` in the sample, as v2 returns it."""

    __slots__ = ()

    def __reduce__(self) -> Any:
        return (_JointImage, (self.k,))


class _JointMask(_Leaf):
    """A mask of a native Joint: a ``tv_tensors.Mask`` [H, W] in the sample, as v2 returns a
    mask decoded as stored (a plain tensor after ToPureTensor)."""

    __slots__ = ("pure", "dtype")

    def __init__(self, k: int, pure: bool, dtype: Any = None):
        super().__init__(k)
        self.pure = pure
        self.dtype = dtype  # a ToDtype's for masks (JointPlan.mask_dtype), or None

    def __reduce__(self) -> Any:
        return (_JointMask, (self.k, self.pure, self.dtype))


_LEAVES = [_Leaf(k) for k in range(64)]


def _leaf(k: int) -> _Leaf:
    return _LEAVES[k] if k < len(_LEAVES) else _Leaf(k)


def _strip(sample: Any, refs: List[ImageReference]) -> Any:
    """``sample`` with each reference replaced by its ``_Leaf`` (appended to ``refs``)."""
    if isinstance(sample, ImageReference):
        refs.append(sample)
        return _leaf(len(refs) - 1)
    if isinstance(sample, Joint):
        if _joint.refusal(sample) is None:
            return _native_joint(sample, refs)
        _strip(sample.structure, refs)  # its references are listed; it stays on torch's path
        return sample
    return rebuild(sample, lambda v: _strip(v, refs))


def _native_joint(joint: Joint, refs: List[ImageReference]) -> "_joint.JointLeaf":
    """A natively servable Joint as a JointLeaf: its one image reference listed (with the image
    part of the v2 transform as its chain) and replaced by a ``_JointImage``, then each mask
    reference listed with the mask chain and replaced by a ``_JointMask``: the image comes
    first, so that a Joint that is its sample's first reference has its image in view 0, whose
    geometric draws the masks replay."""
    plan = _joint.plan(joint.transform)

    def listed(value: ImageReference, chain: Any) -> int:
        if isinstance(value, ImageFile):
            refs.append(ImageFile(value.path, chain, value.mode))
        else:
            refs.append(type(value)(value.data, chain, value.mode))
        return len(refs) - 1

    def references(value: Any) -> List[ImageReference]:
        if isinstance(value, ImageReference):
            return [value]
        if isinstance(value, (tuple, list)):
            return [r for v in value for r in references(v)]
        if isinstance(value, dict):
            return [r for v in value.values() for r in references(v)]
        return []

    image = next(r for r in references(joint.structure) if r.mode != "mask")
    image_k = listed(image, plan.image)
    masks: List[tuple] = []

    def walk(value: Any) -> Any:
        if value is image:
            # A tv_tensors.Image in the sample, as v2 returns it (a plain tensor after
            # ToPureTensor, or PILToTensor/ToTensor with no ToImage after it).
            return _leaf(image_k) if plan.image_pure else _JointImage(image_k)
        if isinstance(value, ImageReference):  # a mask (refusal() lets no other through)
            k = listed(value, plan.mask)
            masks.append((k, value.describe()))
            return _JointMask(k, plan.pure, plan.mask_dtype)
        return rebuild(value, walk)

    structure = walk(joint.structure)
    return _joint.JointLeaf(plan, structure, image.describe(), image_k, tuple(masks))


def _joint_views(structure: Any) -> List[int]:
    """The views that render a native Joint's image in a stripped structure."""
    if isinstance(structure, _joint.JointLeaf):
        return [structure.k]
    if isinstance(structure, (tuple, list)):
        return [k for v in structure for k in _joint_views(v)]
    if isinstance(structure, dict):
        return [k for v in structure.values() for k in _joint_views(v)]
    return []


def _joint_masks(structure: Any) -> List[int]:
    """The views that render a native Joint's masks in a stripped structure."""
    if isinstance(structure, _joint.JointLeaf):
        return [k for k, _ in structure.masks]
    if isinstance(structure, (tuple, list)):
        return [k for v in structure for k in _joint_masks(v)]
    if isinstance(structure, dict):
        return [k for v in structure.values() for k in _joint_masks(v)]
    return []


def _resolve_joints(structure: Any, records: Any, row: int) -> Any:
    """``structure`` with each JointLeaf replaced by its structure for this row's geometry."""
    if isinstance(structure, _joint.JointLeaf):
        image = records[structure.k][row]
        for k, source in structure.masks:
            # v2 refuses leaves of different sizes; natively the mask's own size would draw
            # another crop than the image's.
            w, h = int(records[k][row][0]), int(records[k][row][1])
            if (w, h) != (int(image[0]), int(image[1])):
                raise ValueError(
                    f"ringloader.Joint: {source} is {w}x{h} (width x height) but its image "
                    f"{structure.source} is {int(image[0])}x{int(image[1])}: a mask must have its "
                    "image's size")
        return _joint.resolve(structure, image)
    return rebuild(structure, lambda v: _resolve_joints(v, records, row))


def _has_reference(sample: Any) -> bool:
    refs: List[ImageReference] = []
    _strip(sample, refs)
    return bool(refs)


def _fill(structure: Any, images: Sequence[Any]) -> Any:
    """``structure`` with each ``_Leaf`` replaced by its image."""
    if isinstance(structure, _JointMask):
        from torchvision import tv_tensors

        mask = images[structure.k]
        if structure.dtype is not None:
            mask = mask.to(structure.dtype)
        return mask if structure.pure else mask.as_subclass(tv_tensors.Mask)
    if isinstance(structure, _JointImage):
        from torchvision import tv_tensors

        return images[structure.k].as_subclass(tv_tensors.Image)
    if isinstance(structure, _Leaf):
        return images[structure.k]
    return rebuild(structure, lambda v: _fill(v, images))


def _kind(value: Any, depth: int = 0) -> Any:
    """What torch's collate needs alike in the samples of a batch, as a hashable value: the
    containers (a tuple and a list are one kind: both are batched position by position) and, at
    each leaf, the kind of value. Numbers are one kind (torch batches ints and floats together);
    a tensor's or array's shape counts (they are stacked)."""
    if depth > 32:
        return "..."
    if isinstance(value, (_Leaf, ImageReference)):
        return "image"
    if isinstance(value, (_joint.JointLeaf, Joint)):
        return "Joint"
    if value is None:
        return "None"
    if isinstance(value, (bool, int, float, np.number, np.bool_)):
        return "number"
    if isinstance(value, (str, bytes)):
        return type(value).__name__
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return (type(value).__name__, tuple(shape))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((repr(k), _kind(v, depth + 1)) for k, v in value.items())))
    if isinstance(value, (tuple, list)):
        return ("sequence", tuple(_kind(v, depth + 1) for v in value))
    return f"{type(value).__module__}.{type(value).__qualname__}"


def _shape(value: Any, depth: int = 0) -> str:
    """A sample's structure in a few words for an error: ``(image reference, int)``,
    ``{'image': ImageFile, 'label': str}``, ``None``, ``(PIL.Image.Image, int)``."""
    if depth > 4:
        return "..."
    if isinstance(value, (_Leaf, ImageReference)):
        return "image reference" if isinstance(value, _Leaf) else type(value).__name__
    if isinstance(value, (_joint.JointLeaf, Joint)):
        return "Joint"
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return "None" if value is None else type(value).__name__
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return f"{type(value).__name__}{list(shape)}"
    if isinstance(value, dict):
        items = list(value.items())
        text = ", ".join(f"{k!r}: {_shape(v, depth + 1)}" for k, v in items[:8])
        return "{" + text + (", ..." if len(items) > 8 else "") + "}"
    if isinstance(value, (tuple, list)):
        text = ", ".join(_shape(v, depth + 1) for v in value[:8])
        if isinstance(value, list):
            return f"[{text}{', ...' if len(value) > 8 else ''}]"
        return f"({text}{', ...' if len(value) > 8 else ',' if len(value) == 1 else ''})"
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"


def odd_one(samples: Sequence[Any]) -> Optional[tuple]:
    """(the position of the first sample whose structure differs from most of ``samples``',
    the position of one of those) when they differ, else None."""
    kinds = [_kind(s) for s in samples]
    counts: Dict[Any, int] = {}
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
    if len(counts) < 2:
        return None
    common = max(counts, key=lambda k: (counts[k], -kinds.index(k)))
    return kinds.index(next(k for k in kinds if k != common)), kinds.index(common)


PIL_HINT = ("a PIL image is what a reference without a transform gives (as torchvision's "
            "datasets do): end its transform with ToTensor() or PILToTensor()")


def collate_hint(exc: BaseException, what: str, odd: str, odd_value: Any, usual: str,
                 usual_value: Any, custom: bool) -> BaseException:
    """An error for a batch that torch's collate (or ``collate_fn`` when ``custom``) refused
    because one sample is unlike the others: ``odd`` and ``usual`` name the two samples (``what``
    the Dataset), ``odd_value`` and ``usual_value`` are them. Of ``exc``'s type where that is a
    plain TypeError/ValueError/RuntimeError, as torch raises, else a TypeError."""
    by = "collate_fn" if custom else "torch's collate"
    odd_shape, usual_shape = _shape(odd_value), _shape(usual_value)
    text = (f"ringloader.DataLoader: {odd} of {what} is {odd_shape} but {usual} in the "
            f"same batch is {usual_shape}; {by} cannot batch them together "
            f"({type(exc).__name__}: {exc}). Make __getitem__ return the same structure and "
            "value types for every index (e.g. class indices rather than class names as labels; "
            "no None), or pass a collate_fn that takes them as they are"
            + (f"; {PIL_HINT}" if "PIL." in odd_shape + usual_shape else "") + ".")
    kind = type(exc) if type(exc) in (TypeError, ValueError, RuntimeError) else TypeError
    return kind(text)


def _files_of(refs: List[ImageReference]) -> tuple:
    """A sample's distinct files (references to one image share one) in order of first
    appearance, and which of them each reference renders."""
    keys: Dict[Any, int] = {}
    files: List[ImageReference] = []
    which: List[int] = []
    for ref in refs:
        key = ref._source_key()
        if key not in keys:
            keys[key] = len(files)
            files.append(ref)
        which.append(keys[key])
    return files, which


class _Structures:
    """``UserSource.structures`` of a columnar source: samples' structures made when asked,
    a batch's at once (``many``)."""

    __slots__ = ("many", "_n")

    def __init__(self, many: Callable[[Sequence[int]], List[Any]], n: int):
        self.many, self._n = many, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> Any:
        return self.many([i])[0]
