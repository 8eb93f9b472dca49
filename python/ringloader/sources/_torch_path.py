"""A Dataset on torch's generic path, as the sources layer sees it: why it runs there, the one
warning (or hint) its loader gives, and its samples wrapped for the generic backend (video
references drawn from each sample's key, image references named in a collate error).

The generic backend (``loader._generic``) asks a :class:`TorchPath` for all of it, which the
loader's finder (``loader._native_sources.torch_path``) builds through ``_user_source``: the
backend imports no source module.
"""

from __future__ import annotations

import warnings
from typing import Any, List, Optional

import numpy as np
import torch.utils.data as tud

from ..core._sample_keys import SampleKey, _run_seeded, tail_seed
from ..core._source import Source, flat_targets
from ..transforms.clips import generator_for
from ._fallback import VIDEO_REASON, FallbackWarning, _describe, warn_refused, warn_video
from ._structures import PIL_HINT, _shape, collate_hint, odd_one
from ._torchvision_folder import torchvision_folder
from .references import ImageReference, Joint, _flat, materialize
from .video import _VideoReference


def _wraps_image_folder(dataset: Any, depth: int = 0) -> bool:
    """True when a ringloader ImageFolder (any ringloader source: a ``NativeDataset``) is inside
    ``dataset`` (``.dataset``/``.datasets``)."""
    if isinstance(dataset, Source):
        return True
    if depth > 8:
        return False
    inner = [getattr(dataset, "dataset", None)] + list(getattr(dataset, "datasets", None) or [])
    return any(d is not None and _wraps_image_folder(d, depth + 1) for d in inner)


def _warn_wrapper(dataset: Any, reason: str) -> None:
    """One warning per loader (Python's default filter then shows it once per call site)."""
    name = f"{type(dataset).__module__}.{type(dataset).__name__}"
    warnings.warn(
        f"ringloader.DataLoader: {name} wraps a ringloader.ImageFolder but {reason}, so it runs on "
        "torch's generic path (per-sample __getitem__ in worker processes, about 4x slower than "
        "the native path). Subset, random_split and ConcatDataset of ImageFolders with one "
        "transform stay native.", FallbackWarning, stacklevel=5)


def _warn_torchvision_folder(dataset: Any, reason: str, converts: bool) -> None:
    """A torchvision ImageFolder/DatasetFolder the native path does not serve: it does not
    convert (``reason``), or it does (``converts``) but an argument asks for torch's workers."""
    name = f"{type(dataset).__module__}.{type(dataset).__name__}"
    advice = ("Without it the folder is served natively (its samples and transform are read "
              "from it)." if converts else
              "Use ringloader.ImageFolder (or DatasetFolder) with the same root and transform: "
              "its files are decoded natively, and its native transform steps run natively.")
    warnings.warn(
        f"ringloader.DataLoader: {name}({str(getattr(dataset, 'root', ''))!r}) runs on torch's "
        f"generic path because {reason}: each sample is decoded with Pillow in worker processes, "
        f"at torch's speed. {advice}", FallbackWarning, stacklevel=5)


# Dataset classes already told that returning rl.ImageFile would make them native.
_hinted: set = set()


def _hint_image_file(dataset: Any, opened: str) -> None:
    """Once per Dataset class and process: a Dataset that decodes its images itself."""
    name = f"{type(dataset).__module__}.{type(dataset).__qualname__}"
    if name in _hinted:
        return
    _hinted.add(name)
    what = {"a PIL image": opened, "<bytes>": "an image from bytes"}.get(
        opened, f"the image {opened!r}")
    reference = "ImageBytes(data, transform)" if opened == "<bytes>" else \
        "ImageFile(path, transform)"
    warnings.warn(
        f"ringloader.DataLoader: {name}.__getitem__ opens {what} with Pillow itself, so it runs "
        f"on torch's generic path at torch's speed. Return ringloader.{reference} "
        "in its place (the rest of the sample unchanged) and the files are decoded and "
        "transformed natively (the manual's \"Your own Dataset\" page). Silence this hint with "
        "warnings.filterwarnings('ignore', category=ringloader.FallbackWarning).",
        FallbackWarning, stacklevel=5)


class _VideoSamples:
    """A Dataset whose samples hold video references, for the generic path: sample ``key.index``
    materialised in the worker, its clip samplers drawing from ``clips.generator_for`` of the
    key's (seed, epoch, index, position) and its other draws (transforms) from the key's tail
    seed, as image references' are: the same clips for any ``num_workers`` and on resume."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: SampleKey) -> Any:
        clip_draws = generator_for(key.seed, key.epoch, key.index, key.position)
        try:
            return _run_seeded(lambda i: materialize(self.dataset[i], clip_draws), key.index,
                               tail_seed(key))
        except Exception as exc:  # the decoder's error names the file; this, the sample
            exc.add_note(f"while decoding the video references of sample {key.index} of "
                         f"{_describe(self.dataset)} (ringloader.materialize)")
            raise


def _holds_reference(value: Any) -> bool:
    """Whether ``value`` holds an image or video reference or an ``rl.Joint`` where
    ``materialize`` finds them (in tuples, lists and dicts, at any depth)."""
    return any(isinstance(leaf, (ImageReference, Joint, _VideoReference)) for leaf in _flat(value))


class _MaterializedStream(tud.IterableDataset):
    """An ``IterableDataset`` for torch's loader: each sample that holds references is
    materialised in the worker as it comes (decoded with Pillow, its transforms and clip
    samplers drawing from torch's RNGs, as a stream of decoded samples would); any other sample
    passes as it is. The stream itself (its sharding by ``get_worker_info()``, its length)
    is the user's."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __iter__(self) -> Any:
        for sample in self.dataset:
            yield materialize(sample) if _holds_reference(sample) else sample

    def __len__(self) -> int:
        return len(self.dataset)  # a TypeError naming the user's class where it has none


class _Tagged:
    """A sample with the flat index it was made for (``_NamedSamples``)."""

    __slots__ = ("index", "sample")

    def __init__(self, index: int, sample: Any):
        self.index, self.sample = index, sample


class _NamedSamples:
    """The generic path's view of a Dataset of image references (``_KeyedView``) whose samples
    carry their index to ``_NamingCollate``, so that a batch torch's collate refuses can name
    the sample that is unlike the others, as the native path does."""

    def __init__(self, view: Any):
        self.view = view

    def __len__(self) -> int:
        return len(self.view)

    def __getitem__(self, key: Any) -> _Tagged:
        view = self.view
        flat = key.index if view.index_map is None else int(view.index_map[key.index])
        return _Tagged(flat, view[key])

    def name(self, flat: int) -> tuple:
        """(what the Dataset of flat sample ``flat`` is, the sample as its errors name it)."""
        view = self.view
        member = int(np.searchsorted(view.starts, flat, side="right")) - 1
        folder, i = view.folders[member], flat - int(view.starts[member])
        row = folder.name_row(i)  # a columnar row without a path, as its source names it
        return folder._name(), f"sample {i}" + (f" ({row})" if row is not None else "")


class _NamingCollate:
    """``collate_fn`` (None: torch's ``default_collate``) over ``_NamedSamples``' samples; a
    batch it refuses is explained by the sample unlike the others, with its index."""

    def __init__(self, collate_fn: Any, samples: _NamedSamples):
        self.collate_fn, self.samples = collate_fn, samples

    def __call__(self, batch: list) -> Any:
        import torch.utils.data as tud

        flat = [t.index for t in batch]
        batch = [t.sample for t in batch]
        try:
            return (self.collate_fn or tud.default_collate)(batch)
        except Exception as exc:
            odd = odd_one(batch)
            if odd is None:
                what = self.samples.name(flat[0])[0]
                shape = _shape(batch[0])
                exc.add_note(f"while collating "
                             f"{', '.join(self.samples.name(i)[1] for i in flat[:8])}"
                             f"{', ...' if len(flat) > 8 else ''} of {what}, each {shape}"
                             + (f"; {PIL_HINT}" if "PIL." in shape else ""))
                raise
            what, odd_name = self.samples.name(flat[odd[0]])
            told = collate_hint(exc, what, odd_name, batch[odd[0]],
                                             self.samples.name(flat[odd[1]])[1], batch[odd[1]],
                                             self.collate_fn is not None)
            try:
                raise told from exc
            finally:
                del told


class TorchPath:
    """What the generic backend needs to know about ``dataset`` (with ``view``, its native view
    or None), given the loader's own verdicts: ``generic_reason`` (why not native),
    ``fallback_reasons`` (each step or leaf that forces torch's path) and ``torch_only`` (an
    argument only torch's workers honour, or None)."""

    def __init__(self, dataset: Any, view: Any, generic_reason: str, fallback_reasons: List[str],
                 torch_only: Optional[str], holds_video: bool, opened: Optional[str]):
        self.dataset, self.view = dataset, view
        self.video = holds_video
        self._generic_reason, self._fallback_reasons = generic_reason, fallback_reasons
        self._torch_only, self._opened = torch_only, opened

    @property
    def why(self) -> str:
        """Why torch's path, in one clause (the error about native-only arguments says it)."""
        return VIDEO_REASON if self.video else self._generic_reason

    def stream(self) -> Any:
        """What torch's loader iterates for an ``IterableDataset``: its samples' references
        materialised (``_MaterializedStream``); any other Dataset as it is."""
        if isinstance(self.dataset, tud.IterableDataset):
            return _MaterializedStream(self.dataset)
        return self.dataset

    def samples(self, source: Any, collate_fn: Any) -> tuple:
        """(the Dataset torch's loader reads for planned batches, its collate_fn): the video
        references drawn from each key, or a Dataset of image references whose collate names
        the odd sample; otherwise ``source`` and ``collate_fn`` as they are."""
        if self.video:
            return _VideoSamples(self.dataset), collate_fn
        if self.view is not None and not isinstance(self.dataset, Source) \
                and flat_targets(self.view[0]) is not None:
            named = _NamedSamples(source)
            return named, _NamingCollate(collate_fn, named)
        return source, collate_fn

    def warn(self, native_video_reason: Optional[str], video_why: str = "") -> List[str]:
        """Gives the loader's one warning (or hint) and returns every reason for ``describe()``;
        ``native_video_reason`` when the clips batch natively (no warning then), else
        ``video_why``: why they do not."""
        dataset, view = self.dataset, self.view
        reasons = list(self._fallback_reasons)
        folder_why, converts = None, False
        if view is None:
            folder, folder_why = torchvision_folder(dataset)
            if folder is not None:  # it converts, but an argument asks for torch's workers
                folder_why, converts = self._torch_only, True
        if native_video_reason is not None:
            reasons = [native_video_reason]
        elif self.video:
            reasons = [f"{VIDEO_REASON}: {video_why}" if video_why else VIDEO_REASON]
            warn_video(dataset, video_why, stacklevel=5)
        elif folder_why is not None:
            reasons = [f"{type(dataset).__name__}: {folder_why}"]
            _warn_torchvision_folder(dataset, folder_why, converts)
        elif not isinstance(dataset, Source) and _wraps_image_folder(dataset):
            _warn_wrapper(dataset, self._generic_reason)
        elif view is not None and flat_targets(view[0]) is not None:
            warn_refused(dataset, reasons, stacklevel=5)
        elif self._opened is not None:
            _hint_image_file(dataset, self._opened)
        return reasons or [self._generic_reason]
