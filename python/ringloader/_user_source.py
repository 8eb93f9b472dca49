"""A user's map-style Dataset whose samples hold :class:`ringloader.ImageFile` references, as a
native sample table.

When the DataLoader is built, ``__getitem__`` runs once per index in the calling process (it
only builds references). Each sample's structure is kept with its references replaced by
placeholders (``_Leaf``); the referenced files become the native loader's samples (a sample's
first file, its others in ``more_files``: an image and its mask), decoded and transformed on
the native threads. The native label of sample i is its flat index, so every row
of a batch (a replacement's included) finds its own structure again, and the batch is collated
by torch's own ``collate`` with each placeholder position standing for the native image tensor.

A ``torchvision.datasets.ImageFolder``/``DatasetFolder`` is a user's dataset too: served natively
from its samples and transform when they convert (:class:`TorchvisionFolder`). Why a Dataset
stays on torch's path is said here as well (:func:`chain_reasons`, :func:`warn_refused`,
:class:`FallbackWarning`).
"""

from __future__ import annotations

import operator
import os
import random
import re
import threading
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from . import _C
from . import _joint
from . import transforms as T
from .datasets import FileList, NativeDataset, SampleKey, _run_seeded, _SampleTable, tail_seed
from .references import _CONVERSIONS, ImageFile, ImageReference, Joint, materialize, rebuild

__all__ = ["FallbackWarning", "TorchvisionFolder", "UserSource", "source_for", "torchvision_folder"]


class FallbackWarning(UserWarning):
    """``ringloader.DataLoader`` runs a dataset on torch's path instead of natively: the warning
    names the first step or leaf that forces it and what to change (``loader.describe()`` lists
    every reason), or hints that a Dataset opening images itself could return
    :class:`ringloader.ImageFile` instead. Silence it with
    ``warnings.filterwarnings("ignore", category=ringloader.FallbackWarning)``.

    Examples:
        >>> import warnings
        >>> import torch
        >>> from PIL import Image
        >>> import ringloader as rl
        >>> from ringloader.sample_data import make_sample_dataset
        >>> root = make_sample_dataset("photos", num_images=8, num_classes=2)
        >>> class Opened(torch.utils.data.Dataset):  # opens images itself: runs on torch's path
        ...     def __len__(self):
        ...         return 2
        ...     def __getitem__(self, i):
        ...         return Image.open(root / "class_00" / f"img_0000{2 * i}.jpg").convert("RGB"), i
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     loader = rl.DataLoader(Opened(), batch_size=2, collate_fn=lambda batch: batch)
        ...     _ = next(iter(loader))
        >>> any(issubclass(w.category, rl.FallbackWarning) for w in caught)
        True
    """


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


def _flat(structure: Any) -> List[Any]:
    """The leaves of a stripped structure (a Joint is one leaf)."""
    if isinstance(structure, (tuple, list)):
        return [leaf for v in structure for leaf in _flat(v)]
    if isinstance(structure, dict):
        return [leaf for v in structure.values() for leaf in _flat(v)]
    return [structure]


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


class _SavedRng:
    """Python's, numpy's and torch's global RNG states, restored on exit: listing references
    must not move the draws the loader (or the user) makes afterwards."""

    def __enter__(self) -> "_SavedRng":
        import torch

        self._states = torch.get_rng_state(), random.getstate(), np.random.get_state()
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch

        torch.set_rng_state(self._states[0])
        random.setstate(self._states[1])
        np.random.set_state(self._states[2])


class Columns:
    """A Dataset of one image reference a sample, handed over whole instead of listed sample by
    sample (``dataset._native_columns()``, e.g. :class:`ringloader.HFDataset`): ``model`` is
    sample 0's reference (the transform and mode of every sample's), ``memory`` each sample's
    bytes as ``(buffers, which, starts, lengths)`` (the native loader's columnar ``memory``:
    ``buffers[which[i]][starts[i]:starts[i] + lengths[i]]``, ``which[i] == -1`` for a sample
    read from its path), ``paths`` the samples' paths as an arena ``(bytes, ends)`` as
    ``_SampleTable`` holds them, a sample in memory having none (None: no sample has a path),
    ``structures(positions)`` those samples with their reference
    replaced by ``_leaf(0)`` (built when their batch is) and ``name(i)`` what sample i is, for
    its errors. ``feed`` (None: every row's bytes are there) hands the native loader the row
    groups of rows whose ``which`` is -2 while an epoch runs (``hf._Feed``: ``begin(native,
    order, per_row)``, ``stop(native)``, ``budget``); the source is then read group by group, in its own
    order (``streamed``)."""

    __slots__ = ("model", "memory", "paths", "structures", "name", "feed")

    def __init__(self, model: ImageReference, memory: tuple, paths: Optional[tuple],
                 structures: Callable[[Sequence[int]], List[Any]], name: Callable[[int], str],
                 feed: Any = None):
        self.model, self.memory, self.paths = model, memory, paths
        self.structures, self.name, self.feed = structures, name, feed


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


def source_for(dataset: Any) -> Optional["UserSource"]:
    """A :class:`UserSource` over ``dataset`` when its first sample holds an image reference,
    else None (a Dataset of decoded values: torch's generic path, unchanged)."""
    import torch.utils.data as tud

    if isinstance(dataset, tud.IterableDataset) or not hasattr(dataset, "__getitem__"):
        return None
    try:
        n = len(dataset)
    except TypeError:
        return None
    if n == 0:
        return None
    if callable(getattr(dataset, "_native_columns", None)):
        return UserSource(dataset)  # a table of references by construction: nothing to probe
    with _SavedRng():
        try:
            first, opened = _first_sample(dataset)
        except Exception:  # the generic path raises it where torch would
            return None
        if not _has_reference(first):
            if opened is None and _holds_pil(first):
                opened = "a PIL image"
            _probes.seen = (id(dataset), opened)
            return None
        return UserSource(dataset, first)


# What the last ``source_for`` on this thread saw a Dataset without image references do:
# (id of the Dataset, the image file its __getitem__ opened with PIL, or None).
_probes = threading.local()


def opened_images(dataset: Any) -> Optional[str]:
    """The image file (``"<bytes>"`` for one opened from memory, ``"a PIL image"`` for one the
    sample holds) that ``dataset[0]`` opened with Pillow when
    ``source_for`` last probed ``dataset`` on this thread, else None: a Dataset that decodes
    images itself, which returning :class:`ringloader.ImageFile` would make native."""
    seen = getattr(_probes, "seen", None)
    _probes.seen = None
    return seen[1] if seen is not None and seen[0] == id(dataset) else None


def _first_sample(dataset: Any) -> tuple:
    """``(dataset[0], the first file it opened with PIL.Image.open or None)``. Watched with a
    profile function on this thread only (other threads, and the Dataset's own code, are left
    as they are; a profiler already set keeps receiving its events)."""
    import sys

    try:
        from PIL import Image

        code = Image.open.__code__
    except (ImportError, AttributeError):
        return dataset[0], None
    opened: List[Any] = []
    previous = sys.getprofile()

    def watch(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is code and not opened:
            fp = frame.f_locals.get("fp")
            name = fp if isinstance(fp, (str, os.PathLike)) else getattr(fp, "name", None)
            opened.append("<bytes>" if not isinstance(name, (str, os.PathLike)) else str(name))
        if previous is not None:
            previous(frame, event, arg)

    sys.setprofile(watch)
    try:
        first = dataset[0]
    finally:
        sys.setprofile(previous)
    return first, (opened[0] if opened else None)


def _holds_pil(sample: Any, depth: int = 0) -> bool:
    """True when ``sample`` is or holds a PIL image (tuples, lists, dicts)."""
    if depth > 8:
        return False
    if type(sample).__module__.startswith("PIL."):
        return True
    if isinstance(sample, (tuple, list)):
        return any(_holds_pil(v, depth + 1) for v in sample[:16])
    if isinstance(sample, dict):
        return any(_holds_pil(v, depth + 1) for v in list(sample.values())[:16])
    return False


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


class UserSource(NativeDataset):
    """The samples of a user's Dataset as a native sample table: the files each sample's image
    references point to, and each sample's structure around them. A sample's references are
    its views (multi-crop; an image and its mask; a stereo pair): reference k of every sample
    has the same transform and mode, view k's, and renders the same one of its sample's files;
    each file is read and decoded once and each view rendered with its own draws.
    ``refused`` says why the native path cannot serve it (None when it can): then the
    DataLoader warns and runs the Dataset on torch's path, each sample materialised."""

    _warns_on_python_steps = False  # no strict=; the DataLoader's warning names the step

    def __init__(self, dataset: Any, first: Any = None):
        self.dataset = dataset
        self._row_name: Optional[Callable[[int], str]] = None
        columns = getattr(dataset, "_native_columns", None)
        if callable(columns):
            self._from_columns(columns())
            return
        n = len(dataset)
        structures: List[Any] = []
        paths: List[str] = []
        memory: List[Optional[memoryview]] = []  # an ImageBytes sample's bytes, else None
        more: List[Optional[list]] = []  # files 1.. of a sample: a path, or (description, bytes)
        file_of: Optional[List[int]] = None  # which of its sample's files each view renders
        refused: Optional[str] = None
        model: Optional[List[ImageReference]] = None
        counts: Optional[int] = None
        for i in range(n):
            try:
                sample = first if i == 0 and first is not None else dataset[i]
            except Exception as exc:
                exc.add_note(f"while listing the image references of sample {i} of "
                             f"{_describe(dataset)} (ringloader.DataLoader calls __getitem__ "
                             "once per index when it is built)")
                raise
            refs: List[ImageReference] = []
            structures.append(_strip(sample, refs))
            if counts is None:
                counts = len(refs)
            elif len(refs) != counts:
                raise ValueError(
                    f"{_describe(dataset)}: sample {i} holds {len(refs)} image references, "
                    f"as {_shape(structures[-1])}, but sample 0 holds {counts}, as "
                    f"{_shape(structures[0])}; samples batched together need the same "
                    "structure. Return it for every "
                    "index, with image references (rl.ImageFile, rl.ImageBytes) in the same "
                    "places, not decoded images or None"
                    + ("; leave a sample without an image out of the Dataset" if sample is None
                       else ""))
            if not refs:
                more.append(None)
                continue
            files, which = _files_of(refs)
            ref = files[0]
            if model is None:
                model = refs
            if i == 0:
                sample0 = sample
            if refused is None:
                joint = next((v for v in _flat(structures[-1]) if isinstance(v, Joint)), None)
                if joint is not None:
                    refused = (f"sample {i} holds a ringloader.Joint that is not native: "
                               + _joint_refusal_at(joint))
                elif _joint_views(structures[-1]) != _joint_views(structures[0]):
                    refused = (f"sample {i} and sample 0 differ in which image references are "
                               "a Joint's (each position is one or the other in every sample)")
                elif any(j.k != 0 for j in _flat(structures[-1])
                         if isinstance(j, _joint.JointLeaf) and j.masks):
                    refused = (f"sample {i} holds a ringloader.Joint with masks after another "
                               "image reference (natively a Joint's masks replay the draws of "
                               "the sample's first image reference: put that Joint first)")
            if refused is None:
                refused = _refusal(refs, model, i)
            if file_of is None:
                file_of = which
            elif refused is None and which != file_of:
                refused = (f"the references of sample {i} point to files {which} (by position), "
                           f"those of sample 0 to {file_of} (each position renders the same one "
                           "of its sample's files)")
            more.append([f.path if isinstance(f, ImageFile) else (f"<sample {i}: {f.describe()}>",
                                                                  f._view)
                         for f in files[1:]] or None)
            if isinstance(ref, ImageFile):
                paths.append(ref.path)
                memory.append(None)
            else:
                paths.append(f"<sample {i}: {ref.describe()}>")
                memory.append(ref._view)
        if model is None:
            raise ValueError(f"{_describe(dataset)} holds no image reference")
        self.structures = structures
        self.refused = refused
        # Held (with the references' objects) for the loader's lifetime: the native loader
        # decodes these bytes where they are.
        self.memory = memory if any(m is not None for m in memory) else None
        self.more_files = more if any(m is not None for m in more) else None
        self.view_files = file_of or [0] * len(model)
        self.view_transforms = [r.transform for r in model]
        self.view_modes = [r.mode for r in model]
        # Views whose rows record their geometry: the images of native Joints (sample 0's
        # structure says which; every sample has the same).
        self.joint_views = sorted(set(_joint_views(structures[0])))
        # Views rendering a native Joint's masks: view 0's geometric draws replayed on the
        # label image, its geometry recorded to check the mask's size against the image's.
        self.joint_masks = sorted(set(_joint_masks(structures[0])))
        # The transform each native Joint's image view came from (its chain is a part of it):
        # fallback reasons count a step's position there, where the user wrote it.
        leaves = [v for v in _flat(structures[0]) if isinstance(v, (Joint, _joint.JointLeaf))]
        joints = [v for v in _flat(sample0) if isinstance(v, Joint)]
        self.view_origins = {leaf.k: j.transform for leaf, j in zip(leaves, joints)
                             if isinstance(leaf, _joint.JointLeaf)}
        super().__init__(None, paths, [0] * n, [], model[0].transform)
        self._view_splits = [T.split(t) for t in self.view_transforms[1:]]

    def fallback_reasons(self) -> List[str]:
        """Every reason this source is not batched natively ([] when it is): a sample's
        refusal, then each view's transform step (or leaf) that keeps it per sample."""
        out = [self.refused] if self.refused is not None else []
        splits = [self._split] + list(self._view_splits)
        in_joints = self._refused_joint_views()
        for k, (transform, split) in enumerate(zip(self.view_transforms, splits)):
            if k in in_joints:
                continue
            origin = self.view_origins.get(k)
            if origin is not None:
                where = "the Joint's transform"
            else:
                where = ("the references' transform" if len(self.view_transforms) == 1
                         else f"the transform of reference {k}")
            if split.tail is None:
                # An output size that depends on the image is native too when it is a tensor:
                # a tensor per sample (``variable_views``); a PIL image stays one, as in torch.
                if not _C.fixed_size(split.steps) and self._pil_view(k):
                    out.append(f"{where} gives each sample a PIL image of its own size, as "
                               "torch's path does (end it with PILToTensor() or ToImage() to run "
                               "natively: a tensor per sample)")
                continue
            out += chain_reasons(transform, where, origin)
        return out

    def _refused_joint_views(self) -> set:
        """The views of sample 0 that are references inside a Joint that is not native (they
        take no transform of their own: the Joint's refusal is their reason)."""
        if not isinstance(self.structures, list):
            return set()
        out, listed = set(), 0  # references are listed in the order of the structure's leaves
        for leaf in _flat(self.structures[0]):
            if isinstance(leaf, _Leaf):
                listed = max(listed, leaf.k + 1)
            elif isinstance(leaf, _joint.JointLeaf):
                listed = max([listed, leaf.k + 1] + [k + 1 for k, _ in leaf.masks])
            elif isinstance(leaf, Joint):
                count: List[ImageReference] = []
                _strip(leaf.structure, count)
                out.update(range(listed, listed + len(count)))
                listed += len(count)
        return out

    def _from_columns(self, columns: Columns) -> None:
        """The sample table from whole columns: no reference, path or structure per sample; the
        rows held in memory have no path (their errors are named by ``explain_error``)."""
        which = np.asarray(columns.memory[1])
        n = len(which)
        self.structures = _Structures(columns.structures, n)
        self.refused = None
        self.memory = columns.memory
        self.more_files = None
        self.view_files = [0]
        self.view_transforms = [columns.model.transform]
        self.view_modes = [columns.model.mode]
        self.joint_views: List[int] = []
        self.joint_masks: List[int] = []
        self.view_origins: Dict[int, Any] = {}
        self._row_name = columns.name
        self._feed = columns.feed
        blob, ends = columns.paths or (np.zeros(0, dtype=np.uint8), np.zeros(n, dtype=np.int64))
        table = _SampleTable(blob, ends, np.zeros(n, dtype=np.int32))
        super().__init__(None, table, None, [], columns.model.transform)
        self._view_splits = []

    @property
    def streamed(self) -> bool:
        """Rows whose bytes come a row group at a time (``Columns.feed``): own order only."""
        return getattr(self, "_feed", None) is not None

    stream_kind = "row groups read on demand (Parquet copy=False)"
    reads_by_plan = True  # begin_feed: the row groups the epoch reads, in its order
    feed_budget = property(lambda self: self._feed.budget if self.streamed else None)

    @property
    def read_ahead_off(self) -> Optional[str]:
        if not self.streamed:
            return None
        return "row groups are read as the epoch needs them, so the next epoch is not read ahead"

    def begin_feed(self, native: Any, order: Optional[np.ndarray], per_row: bool = True) -> None:
        """The rows the epoch reads, in order: their row groups are read as it gets to them
        (``per_row``: a group's decoded rows may be freed before its last)."""
        if self.streamed and order is not None:
            self._feed.begin(native, order, per_row)

    def check_unchanged(self) -> None:
        """Rows read a row group at a time: their files must be those the table was built from."""
        if self.streamed:
            self._feed.check_unchanged()

    def stop_feed(self, native: Any) -> None:
        if self.streamed:
            self._feed.stop(native)

    @property
    def per_sample(self) -> bool:
        """True when some view runs Python steps, or gives a PIL image of its own size. A view
        whose output size depends on the image is rendered natively all the same when it is a
        tensor, each sample into a buffer of its own (``variable_views``), and reaches the batch
        as a list of tensors."""
        splits = [self._split] + list(self._view_splits)
        return any(s.tail is not None or (not _C.fixed_size(s.steps) and self._pil_view(k))
                   for k, s in enumerate(splits))

    def _pil_view(self, k: int) -> bool:
        """View ``k`` is a PIL image where the user's code runs it (``materialize``, torch's
        workers): a plain reference whose transform converts to no tensor. A Joint's image is a
        tensor on every path (``references.runnable`` ends such a chain with ``ToImage()``)."""
        if k in self.joint_views or k in self.joint_masks:
            return False
        return not any(type(step).__name__ in _CONVERSIONS for step in T._flatten(self.view_transforms[k]))

    @property
    def variable_views(self) -> List[int]:
        """The views whose output size depends on the image and that are tensors (native, a
        tensor per sample; the others are rows of the batch's slot)."""
        splits = [self._split] + list(self._view_splits)
        return [k for k, s in enumerate(splits)
                if s.tail is None and not _C.fixed_size(s.steps) and not self._pil_view(k)]

    def native_options(self):
        options = super().native_options()
        variable = self.variable_views
        if len(self.view_transforms) == 1 and self.view_modes[0] == "RGB" and not self.joint_views \
                and not variable:
            return options
        # Several views, or a gray or label one (rendered replicated, one channel kept), each
        # of its sample's files: views.h.
        views = [{"transform": options.pop("transform"), "dtype": options.pop("dtype")}]
        for split in self._view_splits:
            views.append({"transform": split.steps,
                          "dtype": "float32" if T.has_to_tensor(split.steps) else "uint8"})
        for view, mode, file in zip(views, self.view_modes, self.view_files):
            view["luma"] = mode == "L"
            view["mask"] = mode == "mask"
            view["file"] = file
        for k in variable:
            views[k]["variable"] = True
        for k in self.joint_views:
            views[k]["geometry"] = True
        for k in self.joint_masks:
            views[k]["geometry"] = True
            views[k]["share_geometry"] = True
            views[k]["tensor_nearest"] = True  # v2 resizes a Mask as a tensor (views.h)
        options["views"] = views
        return options

    def _name(self) -> str:
        return _describe(self.dataset)

    def native_targets(self) -> np.ndarray:
        # Local indices; the DataLoader offsets them into flat indices (see ``flat_targets``).
        return np.arange(len(self), dtype=np.int64)

    def __getitem__(self, key: Any) -> Any:
        """The user's sample, materialised (the generic path's SampleKey: its transforms draw
        from the key's seed, so the sample is the same for any worker count and on resume)."""
        if isinstance(key, SampleKey):
            return _run_seeded(lambda i: materialize(self.dataset[i]), key.index, tail_seed(key))
        return materialize(self.dataset[operator.index(key)])

    def __getstate__(self) -> Dict[str, Any]:
        # A copy (a spawned worker of the generic path) materialises samples from the Dataset;
        # the memoryviews the native loader reads (which do not pickle) stay here.
        state = super().__getstate__()
        state["memory"] = None
        state["more_files"] = None
        return state

    def describe(self) -> str:
        """What the source is (``ringloader._source``): the user's Dataset, its samples, how many
        views each, and how many are held in memory (ImageBytes) rather than read from files."""
        held = in_memory(self.memory)
        return (f"{_describe(self.dataset)} (image references): {len(self)} samples, "
                f"{len(self.view_transforms)} view(s) of {1 + max(self.view_files)} file(s) a "
                f"sample, {0 if held is None else int(np.count_nonzero(held))} in memory")

    def explain_error(self, exc: BaseException, index: Optional[int]) -> BaseException:
        """A sample held in memory by a columnar source has no path: its error names the row
        (e.g. the Parquet file, row group and row)."""
        if index is None or self._row_name is None or getattr(exc, "path", None) != "":
            return exc
        name = self._row_name(index)
        text = str(exc)
        text = text.replace(" (): ", f" ({name}): ", 1) if " (): " in text else f"{text} [{name}]"
        new = type(exc)(text)
        for attr in ("index", "reason", "code"):
            if hasattr(exc, attr):
                setattr(new, attr, getattr(exc, attr))
        new.path = name
        return new

    def __repr__(self) -> str:
        return f"ringloader.UserSource({_describe(self.dataset)}, samples={len(self)})"


def _describe(dataset: Any) -> str:
    return f"{type(dataset).__module__}.{type(dataset).__name__}"


def _same_native_chain(a: Any, b: Any) -> bool:
    """True when two transform objects are the same native chain (a Dataset that builds its
    Compose in ``__getitem__``); chains with Python steps are only the same object."""
    split_a, split_b = T.split(a), T.split(b)
    return split_a.tail is None and split_b.tail is None and split_a.steps == split_b.steps


def _refusal(refs: List[ImageReference], model: List[ImageReference], i: int) -> Optional[str]:
    """Why sample i's references keep the Dataset off the native path, or None."""
    for k, (ref, first) in enumerate(zip(refs, model)):
        if ref.mode != first.mode:
            return (f"reference {k} of sample {i} has mode {ref.mode!r}, reference {k} of sample 0 "
                    f"{first.mode!r} (each position has one mode)")
        if ref.transform is not first.transform and not _same_native_chain(ref.transform,
                                                                           first.transform):
            return (f"reference {k} of sample {i} has another transform than reference {k} of "
                    "sample 0 (the native path applies one transform to each position)")
    return None


class Batcher:
    """Builds the user's batch from a native one: ordinary leaves collated by torch's own
    ``collate``, the image position given the batch tensor (or, with a ``collate_fn``, each
    sample rebuilt with its row)."""

    def __init__(self, folders: Sequence[UserSource], channels_last: bool = False,
                 nhwc: bool = False):
        import torch
        from torch.utils.data._utils.collate import collate, default_collate_fn_map

        self._torch = torch
        self._channels_last = channels_last
        self._nhwc = nhwc  # the native layout (channels_last is an NHWC layout too)
        self._folders = list(folders)
        self._starts = np.cumsum([0] + [len(f) for f in self._folders])
        self._collate = collate
        self._map = dict(default_collate_fn_map)
        self._joints = any(getattr(f, "joint_views", None) for f in self._folders)
        self._masks = sorted({k for f in self._folders for k in getattr(f, "joint_masks", [])})

    def _structures(self, flat: List[int]) -> List[Any]:
        if len(self._folders) == 1:
            table = self._folders[0].structures
            if isinstance(table, _Structures):
                return table.many(flat)
            return [table[i] for i in flat]
        out = []
        for i in flat:
            member = int(np.searchsorted(self._starts, i, side="right")) - 1
            out.append(self._folders[member].structures[i - int(self._starts[member])])
        return out

    def _split(self, images: Any, views: Optional[list], native: Any = None) -> List[Any]:
        """The batch tensor of each view: zero-copy, strided views of the slot's rows; for a
        view whose size depends on the image, the list of its samples' tensors, each the
        buffer it was rendered in (taken from the batch by the records in its rows). ``views``:
        (byte offset in a row, shape of one sample, dtype) of each, None for one image."""
        if views is None:
            out = [images]
        else:
            torch = self._torch
            out = []
            variable = (native.variable_views if native is not None else None) or [False] * len(views)
            for (offset, shape, dtype, channels), sized in zip(views, variable):
                if sized:
                    out.append(self._outputs(images, offset, channels, native))
                    continue
                dt = getattr(torch, dtype)
                nbytes = int(np.prod(shape)) * torch.empty((), dtype=dt).element_size()
                view = images[:, offset:offset + nbytes].view(dt).view(images.shape[0], *shape)
                if channels == 1:  # a gray view, rendered replicated: keep one channel
                    view = view[..., :1] if self._nhwc else view[:, :1]
                out.append(view)
        if self._channels_last:
            out = [[t.permute(2, 0, 1) for t in v] if isinstance(v, list) else v.permute(0, 3, 1, 2)
                   for v in out]
        for k in self._masks:  # a Joint's mask: [B, H, W], as v2 keeps a mask decoded as stored
            if isinstance(out[k], list):
                out[k] = [t[..., 0] if self._nhwc and not self._channels_last else t[0]
                          for t in out[k]]
            else:
                out[k] = out[k][..., 0] if self._nhwc and not self._channels_last else out[k][:, 0]
        return out

    def _outputs(self, images: Any, offset: int, channels: int, native: Any) -> List[Any]:
        """A variable-size view's tensors, one a row: the records (int64 id, height, width,
        bytes) at ``offset`` in the rows name the outputs, taken from the batch."""
        torch = self._torch
        records = images[:, offset:offset + 32].view(torch.int64).cpu().numpy()
        tensors = [torch.from_dlpack(t) for t in native.take_outputs(records[:, 0].copy())]
        if channels == 1:  # a gray view, rendered replicated: keep one channel
            tensors = [t[..., :1] if self._nhwc else t[:1] for t in tensors]
        return tensors

    def _records(self, images: Any, geometry: Optional[list]) -> Dict[int, Any]:
        """Each recording view's geometry records of the batch: float64 [B, GEOMETRY_FIELDS]."""
        out = {}
        nbytes = _C.GEOMETRY_FIELDS * 8
        for k, offset in enumerate(geometry or []):
            if offset is not None:
                rows = images[:, offset:offset + nbytes].view(self._torch.float64)
                out[k] = rows.cpu().numpy()
        return out

    def batch(self, images: Any, labels: Any, collate_fn: Optional[Callable],
              views: Optional[list], geometry: Optional[list] = None, native: Any = None) -> Any:
        flat = labels.tolist()
        structures = self._structures(flat)
        if self._joints:
            records = self._records(images, geometry)
            structures = [_resolve_joints(s, records, row) for row, s in enumerate(structures)]
        views = self._split(images, views, native)
        del images
        try:
            if collate_fn is not None:
                # torch's contract: the list of samples; each image a view of its slot row (or,
                # sized by its image, its own tensor).
                rows = list(zip(*[v if isinstance(v, list) else v.unbind(0) for v in views]))
                return collate_fn([_fill(s, row) for s, row in zip(structures, rows)])
            fn_map = dict(self._map)

            def leaf(batch: Any, *, collate_fn_map: Any = None) -> Any:
                view = views[batch[0].k]
                dtype = getattr(batch[0], "dtype", None)  # a Joint's masks: ToDtype's for them
                if isinstance(view, list):  # sized by each image: stacked as torch's collate does
                    view = view if dtype is None else [v.to(dtype) for v in view]
                    return self._collate(view, collate_fn_map=self._map)
                return view if dtype is None else view.to(dtype)

            fn_map[_Leaf] = leaf
            return self._collate(structures, collate_fn_map=fn_map)
        except Exception as exc:
            told = self._explain(exc, flat, structures, collate_fn is not None)
            if told is exc:
                raise
            try:
                raise told from exc
            finally:
                del told

    def _sample_name(self, flat: int) -> tuple:
        """(what the Dataset of flat sample ``flat`` is, the sample as its errors name it)."""
        member = int(np.searchsorted(self._starts, flat, side="right")) - 1
        folder, i = self._folders[member], flat - int(self._starts[member])
        name = getattr(folder, "_row_name", None)
        return folder._name(), f"sample {i}" + (f" ({name(i)})" if name is not None else "")

    def _explain(self, exc: BaseException, flat: List[int], structures: List[Any],
                 custom: bool) -> BaseException:
        """``exc`` raised collating the samples ``flat``: an error that names the sample unlike
        the others and says what to change, or ``exc`` with a note naming the batch's samples."""
        odd = odd_one(structures)
        if odd is None:
            names = [self._sample_name(i) for i in flat[:8]]
            exc.add_note(f"while collating {', '.join(n for _, n in names)}"
                         f"{', ...' if len(flat) > 8 else ''} of {names[0][0]}")
            return exc
        what, odd_name = self._sample_name(flat[odd[0]])
        _, usual_name = self._sample_name(flat[odd[1]])
        return collate_hint(exc, what, odd_name, structures[odd[0]], usual_name,
                            structures[odd[1]], custom)


def _column(folders: Sequence[NativeDataset], name: str) -> Optional[list]:
    """Each sample's entry of the per-sample column ``name`` over all folders (None for a
    folder without it); None when no folder has one."""
    columns = [getattr(f, name, None) for f in folders]
    if all(c is None for c in columns):
        return None
    out: list = []
    for f, c in zip(folders, columns):
        out += c if c is not None else [None] * len(f)
    return out


def name_rows(text: str, folders: Sequence[NativeDataset]) -> str:
    """``text`` (a native error message) with a columnar source's sample that has no path,
    ``sample N ()``, named as its errors name it (``UserSource.explain_error``)."""
    match = re.search(r"sample (\d+) \(\)", text)
    if match is None:
        return text
    flat = int(match.group(1))
    for f in folders:
        if flat < len(f):
            name = getattr(f, "_row_name", None)
            if name is None:
                return text
            return text.replace(match.group(0), f"sample {match.group(1)} ({name(flat)})", 1)
        flat -= len(f)
    return text


def in_memory(memory: Any) -> Optional[np.ndarray]:
    """Of a ``memory_column``: a bool per sample, True where its bytes are in memory (it reads
    no file); None when no sample is."""
    if memory is None:
        return None
    if isinstance(memory, tuple):
        return np.asarray(memory[1]) != -1  # a buffer, or deferred (-2): no file
    return np.fromiter((m is not None for m in memory), dtype=bool, count=len(memory))


def memory_column(folders: Sequence[NativeDataset]) -> Any:
    """The native loader's ``memory`` argument: each sample's in-memory bytes (ImageBytes) or
    None (a file), over all folders; None when no sample is in memory. With a columnar source
    among them, columns for all: ``(buffers, which, starts, lengths)`` (``Columns.memory``)."""
    columns = [getattr(f, "memory", None) for f in folders]
    if not any(isinstance(c, tuple) for c in columns):
        return _column(folders, "memory")
    # A columnar source among them: every folder's rows as columns, end to end (a listed
    # source's bytes each their own buffer).
    buffers: List[Any] = []
    which, starts, lengths = [], [], []
    for f, c in zip(folders, columns):
        if isinstance(c, tuple):
            w = np.asarray(c[1], dtype=np.int64)
            which.append(np.where(w >= 0, w + len(buffers), w))  # -1 a path, -2 deferred
            starts.append(np.asarray(c[2], dtype=np.int64))
            lengths.append(np.asarray(c[3], dtype=np.int64))
            buffers += list(c[0])
            continue
        rows = c if c is not None else [None] * len(f)
        w = np.full(len(rows), -1, dtype=np.int64)
        size = np.zeros(len(rows), dtype=np.int64)
        for i, m in enumerate(rows):
            if m is not None:
                w[i] = len(buffers)
                size[i] = memoryview(m).nbytes
                buffers.append(m)
        which.append(w)
        starts.append(np.zeros(len(rows), dtype=np.int64))
        lengths.append(size)
    return (buffers, np.concatenate(which), np.concatenate(starts), np.concatenate(lengths))


def more_files_column(folders: Sequence[NativeDataset]) -> Optional[list]:
    """The native loader's ``more_files`` argument: each sample's files after its first (a path,
    or a (description, bytes) pair), over all folders; None when every sample has one file."""
    return _column(folders, "more_files")


def flat_targets(folders: Sequence[NativeDataset]) -> Optional[np.ndarray]:
    """The native labels of user sources: each sample's flat index (None for other folders)."""
    if not any(isinstance(f, UserSource) for f in folders):
        return None
    return np.arange(sum(len(f) for f in folders), dtype=np.int64)


def warn_refused(dataset: Any, reasons: Sequence[str], stacklevel: int = 3) -> None:
    """The one warning of a loader over a Dataset of image references that runs on torch's
    path: the first of ``reasons`` (``_native._fallback_reasons``), and how many more
    ``describe()`` lists."""
    more = (f" loader.describe() lists all {len(reasons)} reasons." if len(reasons) > 1 else "")
    warnings.warn(
        f"ringloader.DataLoader: {_describe(dataset)} returns image references but "
        f"{reasons[0]}, so it runs on torch's generic path: each sample is materialised with "
        "Pillow and transformed in worker processes (ringloader.materialize), at torch's "
        f"speed.{more}", FallbackWarning, stacklevel=stacklevel)


def step_label(step: Any) -> str:
    """A transform step as fallback reasons name it: ``v2.Resize(200)``,
    ``transforms.RandomApply``, ``mymodule.Jitter``."""
    kind = type(step)
    module = kind.__module__
    if module.startswith("torchvision.transforms.v2"):
        name = f"v2.{kind.__name__}"
    elif module.startswith("torchvision.transforms"):
        name = f"transforms.{kind.__name__}"
    elif module.startswith("ringloader.transforms"):
        name = f"ringloader.transforms.{kind.__name__}"
    else:
        name = f"{module}.{kind.__qualname__}"
    if kind.__name__ == "Resize":
        size = getattr(step, "size", None)
        if isinstance(size, (list, tuple)):
            size = size[0] if len(size) == 1 else tuple(size)
        max_size = getattr(step, "max_size", None)
        name += f"({size}" + (f", max_size={max_size}" if max_size is not None else "") + ")"
    return name


def _refusal_text(step: Any, reason: str) -> str:
    """``reason`` (``transforms.split``'s, which names the step by its full class name) without
    the step's name."""
    full = T._step_name(step)
    for head in (f"transform {full} ", f"{full}: "):
        if reason.startswith(head):
            return reason[len(head):]
    return reason


def chain_reasons(chain: Any, where: str, origin: Any = None) -> List[str]:
    """Why the transform ``chain`` keeps its dataset off the native batches, naming each step
    by class and position ([] when it runs natively to a fixed size): the first step that runs
    in Python and every later one with no native equivalent, or the step whose output size
    depends on the image. ``where`` names the transform; positions count in ``origin`` (the
    transform the user wrote, of which ``chain`` holds steps: a Joint's), by default ``chain``."""
    parts = T._flatten(chain)
    origin_parts = T._flatten(origin) if origin is not None else parts

    def at(j: int) -> str:
        step = parts[j]
        position = next((o for o, p in enumerate(origin_parts) if p is step), j)
        return f"{step_label(step)} at position {position} of {where}"

    if not parts:
        return [f"{where} is None: each sample is a PIL image of its own size (give it a "
                "transform that ends in a crop or Resize((height, width)) and a tensor "
                "conversion to batch natively)"]
    split = T.split(chain)
    if split.tail is not None:
        i = len(parts) - len(split.tail.transforms)
        why = _refusal_text(parts[i], split.reason)
        advice = "" if "move it" in why else (
            ": replace it with a step that runs natively (the manual's transforms page lists "
            "them) or leave it out")
        out = [f"{at(i)} runs in Python ({why}){advice}"]
        for j in range(i + 1, len(parts)):
            try:
                T.to_steps(parts[j])
            except Exception:
                out.append(f"{at(j)} has no native equivalent either")
        return out
    if _C.fixed_size(split.steps):
        return []
    for j in reversed(range(len(parts))):
        try:
            steps = T.to_steps(parts[j])
        except Exception:
            continue
        if any(s["kind"] == "resize" and not s.get("size_w") for s in steps):
            return [f"{at(j)}: an output size that depends on the image (give it a (height, "
                    f"width) size, or end {where} with a crop, to batch natively)"]
    return [f"{where} leaves each image its own size (no crop or Resize((height, width))): an "
            "output size that depends on the image (end it with one to batch natively)"]


def _joint_refusal_at(joint: Joint) -> str:
    """``_joint.refusal(joint)`` with the step it names given its position in the Joint's
    transform (the first step whose prefix of the transform is refused, or the last step of that
    class before it: a step refused for what follows it)."""
    why = _joint.refusal(joint)
    parts = T._flatten(joint.transform)
    named = [j for j, p in enumerate(parts) if T._step_name(p) in why]
    if not named:
        return why  # a leaf of the structure: the reason names its place
    j = named[0]
    if len(named) > 1:
        from torchvision.transforms import v2

        first = next((k for k in range(len(parts))
                      if isinstance(_joint.plan(v2.Compose(parts[:k + 1])), str)), None)
        if first is not None:
            j = max((k for k in named if k <= first), default=named[0])
    full, label = T._step_name(parts[j]), step_label(parts[j])
    why = why.replace(full, f"{label} at position {j}", 1).replace(full, label)
    for part in parts:  # other steps it names, as the warning names steps
        why = why.replace(T._step_name(part), step_label(part))
    return why


class TorchvisionFolder(FileList):
    """A ``torchvision.datasets.ImageFolder``/``DatasetFolder`` served natively: its samples,
    classes, transform and target_transform as a :class:`ringloader.FileList`. A transform,
    target_transform or samples list assigned on the torchvision dataset later is taken up at
    the loader's next ``iter()``, as with a ringloader ImageFolder."""

    _warns_on_python_steps = False  # no strict=; the DataLoader's warning names the step

    #: A torch dataset served natively: arguments only torch's worker processes honour
    #: (``_native._torch_only``) keep the loader on torch's path instead of being refused.
    serves_torch_dataset = True

    def __init__(self, folder: Any):
        self._folder = folder  # first: ``version`` reads it
        self._seen = (folder.transform, folder.target_transform, folder.samples)
        super().__init__([p for p, _ in folder.samples], [t for _, t in folder.samples],
                         transform=folder.transform, target_transform=folder.target_transform,
                         classes=list(folder.classes))

    @property
    def version(self) -> int:
        folder = self.__dict__.get("_folder")
        if folder is not None:
            seen = (folder.transform, folder.target_transform, folder.samples)
            if any(a is not b for a, b in zip(seen, self._seen)):
                self._seen = seen
                self.samples = folder.samples
                self.transform = folder.transform
                self.target_transform = folder.target_transform
        return self._version

    @version.setter
    def version(self, value: int) -> None:
        self._version = value

    def _name(self) -> str:
        folder = self._folder
        return f"{type(folder).__module__}.{type(folder).__name__}({folder.root!r})"

    def describe(self) -> str:
        return (f"{self._name()} served natively: {len(self)} samples, {len(self.classes)} "
                "classes")


def torchvision_folder(dataset: Any) -> tuple:
    """``(source, None)`` when ``dataset`` is a torchvision ``DatasetFolder`` (``ImageFolder``)
    the native path serves as it is: its own ``__getitem__`` and ``__len__``, torchvision's
    Pillow loader, a transform that runs natively to a fixed size and int targets after its
    target_transform; ``(None, why not)`` for another torchvision folder; ``(None, None)`` for
    any other dataset."""
    try:
        from torchvision import get_image_backend
        from torchvision.datasets import folder as tvf
    except ImportError:
        return None, None
    if not isinstance(dataset, tvf.DatasetFolder):
        return None, None
    kind = type(dataset)
    if kind.__getitem__ is not tvf.DatasetFolder.__getitem__ or \
            kind.__len__ is not tvf.DatasetFolder.__len__:
        return None, "its class overrides __getitem__ or __len__"
    loader = getattr(dataset, "loader", None)
    if not (loader is tvf.pil_loader or
            (loader is tvf.default_loader and get_image_backend() == "PIL")):
        return None, (f"its loader {getattr(loader, '__qualname__', type(loader).__name__)} is "
                      "not torchvision's Pillow loader (ringloader decodes the files itself)")
    if not dataset.samples:
        return None, "it has no samples"
    try:
        reasons = chain_reasons(dataset.transform, "its transform")
    except (TypeError, ValueError) as exc:
        return None, f"its transform is refused: {exc}"
    if reasons:
        return None, reasons[0]
    try:
        source = TorchvisionFolder(dataset)
        source.native_targets()  # target_transform must map each target to an int
    except (TypeError, ValueError) as exc:
        return None, f"{exc}"
    return source, None
