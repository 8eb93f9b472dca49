"""Which datasets the native backend serves: its view of a dataset's sources (a ringloader
dataset, a Subset/ConcatDataset chain of them, or the source the sources layer finds for
another Dataset, ``_user_source.find_source``: a torchvision folder, a user's Dataset of image
references: ``_native_view``), every reason those sources fall back to torch's path (each
source's ``fallback_reasons()``), the arguments that keep a convertible torchvision folder
there, and the generic path's view of a native chain (``_KeyedView``). Everything else is asked
of the sources through the protocol (``_source``)."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np

from ..core._sample_keys import SampleKey
from ..core._source import Source
from ..sources._user_source import find_source, torch_path_of  # the one place a loader module knows source classes


def _native_view(dataset: Any):
    """(ImageFolders, index map) of ``dataset`` when it is a ringloader ImageFolder, or a
    ``Subset`` (``random_split``'s parts) or ``ConcatDataset`` built from them at any depth: the
    folders' samples concatenated are the native loader's samples, and position ``i`` of
    ``dataset`` is sample ``index_map[i]`` of them (no map: the identity). None otherwise."""
    import torch.utils.data as tud

    if isinstance(dataset, Source):
        return [dataset], None
    if type(dataset) is tud.Subset:
        inner = _native_view(dataset.dataset)
        if inner is None:
            return None
        folders, index_map = inner
        indices = np.asarray(dataset.indices, dtype=np.int64).reshape(-1)
        indices = np.where(indices < 0, indices + len(dataset.dataset), indices)
        return folders, indices if index_map is None else index_map[indices]
    if type(dataset) is tud.ConcatDataset:
        folders, maps, base = [], [], 0
        for member in dataset.datasets:
            inner = _native_view(member)
            if inner is None:
                return None
            member_folders, index_map = inner
            size = sum(len(f) for f in member_folders)
            maps.append((np.arange(size, dtype=np.int64) if index_map is None else index_map) + base)
            folders += member_folders
            base += size
        return folders, np.concatenate(maps) if maps else np.zeros(0, dtype=np.int64)
    # A torchvision folder, or a user's Dataset of image references; None: torch's path (with a
    # warning naming the reason, _generic).
    source = find_source(dataset)
    return None if source is None else ([source], None)


def _torch_only(args: Any) -> Optional[str]:
    """Why a loader over a torchvision folder (``_torchvision_folder``) keeps torch's
    path though the folder converts: an argument that only torch's worker processes honour, which
    the native path refuses for ringloader's own datasets. None when there is none."""
    if args.worker_init_fn is not None:
        return "worker_init_fn is given (natively there are no worker processes to run it in)"
    if args.multiprocessing_context is not None:
        return "multiprocessing_context is given (natively there are no worker processes)"
    return None


class _KeyedView:
    """A Subset/ConcatDataset chain of ringloader ImageFolders (``_native_view``) for the generic
    path: position ``key.index`` of the chain is made by the ImageFolder it resolves to, with the
    key's seed. Subset and ConcatDataset only map indices, so the samples are the chain's own."""

    def __init__(self, folders: Sequence[Source], index_map: Optional[np.ndarray]):
        self.folders = list(folders)
        self.index_map = index_map
        self.starts = np.cumsum([0] + [len(f) for f in self.folders])

    def __len__(self) -> int:
        return int(self.starts[-1]) if self.index_map is None else len(self.index_map)

    def __getitem__(self, key: SampleKey):
        flat = key.index if self.index_map is None else int(self.index_map[key.index])
        member = int(np.searchsorted(self.starts, flat, side="right")) - 1
        return self.folders[member][key._replace(index=flat - int(self.starts[member]))]


def _fallback_reasons(folders: Sequence[Source]) -> List[str]:
    """Every reason the native pipeline cannot batch these folders together, the one to act on
    first ([] when it can): a user source's refusal, then each transform step or leaf that
    makes a source run per sample, by class and position (each source's
    ``fallback_reasons()``)."""
    reasons: List[str] = []
    users = [f for f in folders if f.structured]
    if users and len(users) != len(folders):
        reasons.append("mixes a Dataset of image references with ringloader datasets")
    for f in folders:
        found = f.fallback_reasons()
        if f.per_sample and not found:
            found.append("its transform runs per sample (Python transform steps, or an output "
                         "size that depends on the image)")
        refusals = (f.refused, *f.also_refused)
        reasons += [r if r in refusals else f"runs per sample: {r}"
                    for r in found if r not in reasons]
    if not reasons:
        first = folders[0].native_options()
        if any(f.native_options() != first for f in folders[1:]):
            reasons.append("combines ImageFolders with different transforms")
    return reasons


def _servable(folders: Sequence[Source]) -> Optional[str]:
    """Why the native pipeline cannot batch these folders together (the first reason), or None
    when it can."""
    reasons = _fallback_reasons(folders)
    return reasons[0] if reasons else None


def _generic_reason(dataset: Any, view: Any) -> str:
    if view is None:
        return (f"{type(dataset).__module__}.{type(dataset).__name__} is not a ringloader "
                "ImageFolder, DatasetFolder or FileList")
    return "the dataset " + _servable(view[0])


def torch_path(dataset: Any, view: Any, args: Any) -> Any:
    """The generic backend's view of ``dataset`` on torch's path (``sources._torch_path``):
    why it runs there, its warning, its samples; given this module's verdicts on it."""
    return torch_path_of(dataset, view, generic_reason=_generic_reason(dataset, view),
                         fallback_reasons=[] if view is None else _fallback_reasons(view[0]),
                         torch_only=_torch_only(args))
