"""A user's map-style Dataset whose samples hold :class:`ringloader.ImageFile` references, as a
native sample table.

When the DataLoader is built, ``__getitem__`` runs once per index in the calling process (it
only builds references). Each sample's structure is kept with its references replaced by
placeholders (``_Leaf``); the referenced files become the native loader's samples (a sample's
first file, its others in ``more_files``: an image and its mask), decoded and transformed on
the native threads. The native label of sample i is its flat index, so every row
of a batch (a replacement's included) finds its own structure again, and the batch is collated
by torch's own ``collate`` with each placeholder position standing for the native image tensor.

The parts it is built from have their own modules: the samples' structures and placeholder
leaves (``_structures``), a columnar source's table (``_columns``), the batch rebuilt from a
native one (``_batcher``), why a Dataset stays on torch's path (``_fallback``); a torchvision
``ImageFolder`` is served by ``_torchvision_folder``. :func:`find_source` finds which of them
stands for a Dataset the loader was given.
"""

from __future__ import annotations

import operator
import os
import random
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from .. import _C
from . import _joint
from . import video
from .. import transforms as T
from ._batcher import Batcher
from ._columns import Columns
from ._fallback import _describe, _refusal, chain_reasons, joint_reasons
from ._structures import (_files_of, _has_reference, _joint_masks, _joint_views, _Leaf,
                          _shape, _strip, _Structures)
from ..transforms.clips import generator_for
from ..core._sample_keys import _SEEDED
from .datasets import NativeDataset, SampleKey, _run_seeded, _SampleTable, tail_seed
from .references import _CONVERSIONS, ImageFile, ImageReference, Joint, _flat, materialize
from ..core._source import Source, in_memory
from ._torchvision_folder import torchvision_folder
from ._torch_path import TorchPath

__all__ = ["UserSource", "find_source", "holds_video", "opened_images",
           "source_for"]


def find_source(dataset: Any) -> Optional[Source]:
    """The source the native loader reads for ``dataset``, a Dataset that is no ringloader
    source: a torchvision folder whose samples and transforms convert
    (``_torchvision_folder``), else a :class:`UserSource` when its samples hold image
    references; None when it stays on torch's path (a torchvision folder that does not convert,
    whose reason ``_generic`` gives, or a Dataset of decoded values). The one place that knows
    the source classes a Dataset may stand for: the loader asks here."""
    folder, why = torchvision_folder(dataset)
    if folder is not None or why is not None:
        return folder
    return source_for(dataset)


class _SavedRng:
    """Python's, numpy's and torch's global RNG states, restored on exit: listing references
    must not move the draws the loader (or the user) makes afterwards."""

    def __enter__(self) -> "_SavedRng":
        import torch

        _SEEDED.acquire()  # not while another thread runs a tail on the seeded global RNGs
        self._states = torch.get_rng_state(), random.getstate(), np.random.get_state()
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch

        try:
            torch.set_rng_state(self._states[0])
            random.setstate(self._states[1])
            np.random.set_state(self._states[2])
        finally:
            _SEEDED.release()


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
            _probes.video = (id(dataset), video.holds_video(first))
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


def holds_video(dataset: Any) -> bool:
    """True when ``dataset``'s samples hold video references (``ringloader.VideoFile``): its
    ``dataset[0]`` did, when ``source_for`` last probed ``dataset`` on this thread, or it is
    (or wraps, through ``.dataset``/``.datasets``) a ``ringloader.VideoFolder`` or
    ``ringloader.VideoShards`` (whose first sample may be a bad one)."""
    seen = getattr(_probes, "video", None)
    _probes.video = None
    if seen is not None and seen[0] == id(dataset):
        return seen[1]
    from .video_folder import VideoFolder, VideoShards

    def wraps(d: Any, depth: int) -> bool:
        if isinstance(d, (VideoFolder, VideoShards)):
            return True
        inner = [getattr(d, "dataset", None)] + list(getattr(d, "datasets", None) or [])
        return depth < 8 and any(i is not None and wraps(i, depth + 1) for i in inner)

    return wraps(dataset, 0)


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
        also_refused: List[str] = []  # a Joint's reasons after its first (describe())
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
                    refused, *also_refused = [f"sample {i} holds a ringloader.Joint that is not "
                                              f"native: {r}" for r in joint_reasons(joint)]
                elif _joint_views(structures[-1]) != _joint_views(structures[0]):
                    refused = (f"sample {i} and sample 0 differ in which image references are "
                               "a Joint's (each position is one or the other in every sample)")
                elif any(j.k != 0 for j in _flat(structures[-1])
                         if isinstance(j, _joint.JointLeaf) and j.masks):
                    refused = (f"sample {i} holds a ringloader.Joint with masks after another "
                               "image reference (natively a Joint's masks replay the draws of "
                               "the sample's first image reference: put that Joint first)")
            if refused is None and video.holds_video(structures[-1]):
                refused = (f"sample {i} holds video references (ringloader.VideoFile) next to its "
                           "image references: video clips are decoded by ringloader's native "
                           "decoder in worker processes, not yet in the native pool")
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
        self.also_refused = tuple(also_refused)
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
        out = [self.refused, *self.also_refused] if self.refused is not None else []
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

    structured = True  # each row's label is its flat index; batches rebuilt in its structure

    def batcher(self, sources: Sequence[Source], channels_last: bool, nhwc: bool) -> Any:
        """The batch rebuilt in the samples' structure from a native one (``_batcher``)."""
        return Batcher(sources, channels_last, nhwc)

    def name_row(self, index: int) -> Optional[str]:
        """A columnar row without a path, as its errors name it (the Parquet file, row group
        and row); None for a listed sample."""
        return None if self._row_name is None else self._row_name(index)

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
        # Local indices; the DataLoader offsets them into flat indices (``_source.flat_targets``).
        return np.arange(len(self), dtype=np.int64)

    def __getitem__(self, key: Any) -> Any:
        """The user's sample, materialised (the generic path's SampleKey: its transforms draw
        from the key's seed, so the sample is the same for any worker count and on resume)."""
        if isinstance(key, SampleKey):
            clip_draws = generator_for(key.seed, key.epoch, key.index, key.position)
            return _run_seeded(lambda i: materialize(self.dataset[i], clip_draws), key.index,
                               tail_seed(key))
        return materialize(self.dataset[operator.index(key)])

    def __getstate__(self) -> Dict[str, Any]:
        # A copy (a spawned worker of the generic path) materialises samples from the Dataset;
        # the memoryviews the native loader reads (which do not pickle) stay here.
        state = super().__getstate__()
        state["memory"] = None
        state["more_files"] = None
        return state

    def describe(self) -> str:
        """What the source is (``ringloader.core._source``): the user's Dataset, its samples, how many
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


def torch_path_of(dataset: Any, view: Any, generic_reason: str, fallback_reasons: List[str],
                  torch_only: Optional[str]) -> TorchPath:
    """The :class:`~ringloader.sources._torch_path.TorchPath` of a Dataset the native path does
    not serve (``view``: its native view, or None), for the generic backend."""
    video = view is None and holds_video(dataset)
    opened = opened_images(dataset) if view is None else None
    return TorchPath(dataset, view, generic_reason, fallback_reasons, torch_only, video, opened)
