"""The native backend: a :class:`ringloader.NativeDataset` source (or a Subset/ConcatDataset
chain of them sharing one transform) read, decoded, transformed and batched by ``_C.Loader``;
batches arrive zero-copy through DLPack. See ``ringloader.dataloader`` for the behaviour and
``_backend`` for the protocol.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from typing import Any, List, Optional, Sequence

import numpy as np

from . import _C, _batcher, _columns, _fallback, _mixing, _node, _order, _source
from . import _torchvision_folder, _user_source
from ._backend import Backend
from ._checkpoint import _restore_generators, _resumed_batches
from ._distributed import _shard_sampler, _sync_epoch
from ._options import (_auto_threads, _check_device, _check_int, _check_numa, _format_bytes,
                       _training_options)
from ._planning import _AUGMENT_EPOCH, _Ahead, _changed_files, _file_states, _plan_ahead
from .datasets import NativeDataset, SampleKey, _PathsView, _SampleTable
from ._source import StaleIndexError

_log = logging.getLogger("ringloader")
_reported_io_notes: set = set()


def _native_view(dataset: Any):
    """(ImageFolders, index map) of ``dataset`` when it is a ringloader ImageFolder, or a
    ``Subset`` (``random_split``'s parts) or ``ConcatDataset`` built from them at any depth: the
    folders' samples concatenated are the native loader's samples, and position ``i`` of
    ``dataset`` is sample ``index_map[i]`` of them (no map: the identity). None otherwise."""
    import torch.utils.data as tud

    if isinstance(dataset, NativeDataset):
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
    folder, why = _torchvision_folder.torchvision_folder(dataset)
    if folder is not None:
        return [folder], None
    if why is not None:
        return None  # torch's path, with a warning naming the reason (_generic)
    source = _user_source.source_for(dataset)  # a user's Dataset of image references
    return None if source is None else ([source], None)


def _torch_only(args: Any) -> Optional[str]:
    """Why a loader over a torchvision folder (``_torchvision_folder``) keeps torch's
    path though the folder converts: an argument that only torch's worker processes honour, which
    the native path refuses for ringloader's own datasets. None when there is none."""
    if args.worker_init_fn is not None:
        return "worker_init_fn is given (natively there are no worker processes to run it in)"
    if args.multiprocessing_context is not None:
        return "multiprocessing_context is given (natively there are no worker processes)"
    if args.batch_size is None and args.batch_sampler is None:
        return "batch_size=None (the native path delivers batches)"
    return None


class _KeyedView:
    """A Subset/ConcatDataset chain of ringloader ImageFolders (``_native_view``) for the generic
    path: position ``key.index`` of the chain is made by the ImageFolder it resolves to, with the
    key's seed. Subset and ConcatDataset only map indices, so the samples are the chain's own."""

    def __init__(self, folders: Sequence[NativeDataset], index_map: Optional[np.ndarray]):
        self.folders = list(folders)
        self.index_map = index_map
        self.starts = np.cumsum([0] + [len(f) for f in self.folders])

    def __len__(self) -> int:
        return int(self.starts[-1]) if self.index_map is None else len(self.index_map)

    def __getitem__(self, key: SampleKey):
        flat = key.index if self.index_map is None else int(self.index_map[key.index])
        member = int(np.searchsorted(self.starts, flat, side="right")) - 1
        return self.folders[member][key._replace(index=flat - int(self.starts[member]))]


def _mixed_after_default_collate(collate_fn: Any, batcher: Any, dtype: str,
                                 batch_size: Optional[int]) -> Optional[tuple]:
    """(batch_transform, its describe() text) for a ``collate_fn`` that only applies CutMix/MixUp
    to torch's ``default_collate`` of the samples (torchvision's classification reference:
    ``lambda batch: mixup_cutmix(*default_collate(batch))``), which the native batch stage runs
    in the slot; None otherwise, and then the collate_fn runs as given."""
    if collate_fn is None or batcher is not None:
        return None
    mix = _mixing.after_default_collate(collate_fn)
    if mix is None:
        return None
    try:
        note = _mixing.check(mix, dtype, batch_size)
    except (TypeError, ValueError):  # e.g. MixUp on a uint8 loader: torch's path decides
        return None
    name = getattr(collate_fn, "__qualname__", type(collate_fn).__name__)
    return mix, f"{note} (collate_fn {name} is default_collate followed by it)"


def _is_default_collate(collate_fn: Any) -> bool:
    """True when ``collate_fn`` is torch's ``default_collate`` (the function object, whatever
    name it was imported under)."""
    if collate_fn is None:
        return False
    import torch.utils.data as tud

    return collate_fn is tud.default_collate


def _fallback_reasons(folders: Sequence[NativeDataset]) -> List[str]:
    """Every reason the native pipeline cannot batch these folders together, the one to act on
    first ([] when it can): a user source's refusal, then each transform step or leaf that
    makes a source run per sample, by class and position (``_fallback.chain_reasons``)."""
    reasons: List[str] = []
    users = [f for f in folders if isinstance(f, _user_source.UserSource)]
    if users and len(users) != len(folders):
        reasons.append("mixes a Dataset of image references with ringloader datasets")
    for f in folders:
        found = f.fallback_reasons() if isinstance(f, _user_source.UserSource) else []
        if not isinstance(f, _user_source.UserSource) and f.per_sample:
            found = _fallback.chain_reasons(f.transform, "the transform")
        if f.per_sample and not found:
            found.append("its transform runs per sample (Python transform steps, or an output "
                         "size that depends on the image)")
        reasons += [r if r is f.refused else f"runs per sample: {r}"
                    for r in found if r not in reasons]
    if not reasons:
        first = folders[0].native_options()
        if any(f.native_options() != first for f in folders[1:]):
            reasons.append("combines ImageFolders with different transforms")
    return reasons


def _servable(folders: Sequence[NativeDataset]) -> Optional[str]:
    """Why the native pipeline cannot batch these folders together (the first reason), or None
    when it can."""
    reasons = _fallback_reasons(folders)
    return reasons[0] if reasons else None


def _generic_reason(dataset: Any, view: Any) -> str:
    if view is None:
        return (f"{type(dataset).__module__}.{type(dataset).__name__} is not a ringloader "
                "ImageFolder, DatasetFolder or FileList")
    return "the dataset " + _servable(view[0])


def _check_streams(dataset: Any, view: Any, sampler: Any, batch_sampler: Any) -> None:
    """A streamed source (``pipe:`` shards) is read front to back: only its own order can read
    it (``Source.streamed``, ``Source.default_sampler``)."""
    folders = view[0] if view is not None else []
    streamed = [f for f in folders if f.streamed]
    if not streamed:
        return
    source = streamed[0]
    if source.stream_kind is None:
        what, itself, instead = "a WebDataset with pipe: shards", "the WebDataset", "local shards"
    else:
        what, itself, instead = (f"{source._name()} with {source.stream_kind}", "the dataset",
                                 "copy=True")
    if source.per_sample:
        raise ValueError(
            f"{what}: its transform runs per sample (Python steps, or an output size that "
            "depends on the image" + ("; it has none: its samples are PIL images"
                                      if source.transform is None else "") + "), "
            "which needs random access to samples: use a transform that "
            f"runs natively to a fixed size, or {instead}")
    if dataset is not source and dataset is not source.dataset:
        raise ValueError(
            f"{type(dataset).__name__} over {what}: it is read front to back, so only "
            f"{itself} itself, in its own order, can be loaded. Use {instead} for "
            "Subset/ConcatDataset/random_split.")
    custom = batch_sampler if batch_sampler is not None else sampler
    if custom is not None and not isinstance(custom, _order.ShardOrder) and not isinstance(
            getattr(custom, "sampler", None), _order.ShardOrder):
        raise ValueError(
            f"sampler/batch_sampler {type(custom).__name__} over {what}: it is read front to "
            "back and cannot serve an arbitrary order. Leave sampler unset (its own order "
            "permutes the shards or row groups and shuffles a buffer; rank/world_size shard "
            "it), or use "
            f"{instead}, which allows any sampler.")


def _read_ahead_counts(s: dict, waiting: bool) -> str:
    """describe()'s count of queued epochs: adopted, cancelled, and one waiting for iter()."""
    queued, adopted = s["epochs_queued"], s["epochs_adopted"]
    cancelled = queued - adopted - (1 if waiting else 0)
    text = f"{adopted} of {queued} epochs read ahead were used"
    if waiting:
        text += ", 1 is waiting for the next iter()"
    return text + (f", {cancelled} cancelled" if cancelled else "")


def _scan_memo_line(s: dict) -> str:
    """describe()'s line on the memo of JPEG scans read clean to their end (docs/bad-data.md)."""
    memo = s["scan_memo"]
    if memo == "unused":
        return ("no strict JPEG decode in this process yet (the memo is chosen at the first; "
                "RINGLOADER_SCAN_MEMO)")
    if memo == "off":
        return "every strict JPEG decode reads its scan to the end (RINGLOADER_SCAN_MEMO=off)"
    fill = (f"{s['scan_memo_entries']:,} of {s['scan_memo_slots']:,} slots filled "
            f"({100 * s['scan_memo_entries'] / max(s['scan_memo_slots'], 1):.1f}%)")
    if memo == "process":
        where = f"memo of this process only ({s['scan_memo_note']})" if s["scan_memo_note"] \
            else "memo of this process only (RINGLOADER_SCAN_MEMO=process)"
    else:
        where = f"memo shared by this machine's processes, {memo}"
    return f"JPEG files read clean to their end: {where}; {fill}"


class NativeBackend(Backend):
    """One native pipeline (``_C.Loader``) over the sources of ``view`` (``_native_view``)."""

    native = True
    needs_base_seed = True

    def __init__(self, dataset: Any, view: Any, args: Any):
        import torch.utils.data as tud

        super().__init__(dataset, args)
        # The DataLoader's arguments (those both paths share already checked by the facade).
        batch_size, sampler, batch_sampler = args.batch_size, args.sampler, args.batch_sampler
        self._channels_last = args.channels_last

        # Validate like torch, then build the sampling chain with torch's own
        # samplers so index order (and RNG consumption) is exactly torch's.
        if args.worker_init_fn is not None:
            raise TypeError("worker_init_fn is not supported: ringloader workers are native threads, not Python processes")
        if args.multiprocessing_context is not None:
            raise TypeError("multiprocessing_context is not supported: ringloader uses native threads")
        if batch_sampler is not None:
            if batch_size != 1 or args.shuffle or sampler is not None or args.drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last")
            batch_size = None
        elif batch_size is None:
            raise ValueError("batch_size=None (unbatched samples) is not supported by the native path")
        else:
            _check_int("batch_size", batch_size, 1)
        if sampler is not None and args.shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if args.on_error not in ("raise", "skip", "replace"):
            raise ValueError(f"on_error must be 'raise', 'skip' or 'replace', got {args.on_error!r}")
        shard = _shard_sampler(dataset, sampler, batch_sampler, args.rank, args.world_size,
                               args.shuffle, args.seed, args.drop_last, args.generator)
        if shard is not None:
            sampler = shard
        elif sampler is None:
            sampler = (tud.RandomSampler(dataset, generator=args.generator) if args.shuffle
                       else tud.SequentialSampler(dataset))
        if batch_sampler is None:
            batch_sampler = tud.BatchSampler(sampler, batch_size, args.drop_last)
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.batch_size = batch_size
        self.drop_last = args.drop_last
        if not args.in_order:
            warnings.warn("in_order=False has no effect: ringloader always delivers in sampler order",
                          stacklevel=3)

        self._folders, self._index_map = view
        # A user's Dataset of image references: batches rebuilt in its own structure.
        self._batcher = (
            _batcher.Batcher(self._folders, self._channels_last, args.layout == "NHWC")
            if _user_source.flat_targets(self._folders) is not None else None)
        if self._batcher is not None and args.dtype is not None and \
                any(len(f.view_transforms) > 1 for f in self._folders):
            raise ValueError("dtype= sets one output dtype; samples with several views take each view's "
                             "dtype from its transform (ToTensor: float32, else uint8)")
        if self._batcher is not None and args.batch_transform is not None:
            raise ValueError("batch_transform needs ringloader's (images, labels) batches; a Dataset of "
                             "image references is batched in its own structure: call CutMix/MixUp in "
                             "collate_fn or in the training step")
        self._dtype = args.dtype
        self._versions = [f.version for f in self._folders]
        steps_options = self._steps_options()
        if args.collate_fn is not None and not callable(args.collate_fn):
            raise TypeError(f"collate_fn should be callable, got {type(args.collate_fn).__name__}")
        if args.collate_fn is not None and args.batch_transform is not None:
            raise ValueError("collate_fn and batch_transform were both given: batch_transform mixes the "
                             "batch in its slot, collate_fn builds the batch from samples; pass one (a "
                             "collate_fn can call CutMix/MixUp itself)")
        self.collate_fn = args.collate_fn
        # torch's default_collate, under any name, is the default: the batch tensors stay the
        # slot's, zero-copy (stacking views of the rows would copy them), as a list, which is
        # what default_collate makes of (image, label) tuples.
        self._default_collate = _is_default_collate(args.collate_fn)
        self._collate = None if self._default_collate else args.collate_fn
        self.batch_transform = args.batch_transform
        self._mix_note = None if args.batch_transform is None else _mixing.check(
            args.batch_transform, steps_options["dtype"], batch_size)
        mixes = _mixed_after_default_collate(args.collate_fn, self._batcher, steps_options.get("dtype"), batch_size)
        if mixes is not None:  # collate_fn only mixes default_collate's batch: the batch stage does
            self.batch_transform, self._mix_note = mixes
            self._default_collate, self._collate = True, None
        auto = args.num_workers == "auto"
        self._auto_threads = None
        # Several ranks on this machine (torchrun, SLURM, MPI): each takes its share (_node).
        ranks = _node.local_ranks()
        self._ranks = ranks if ranks is not None and ranks.size > 1 else None
        self._node_memory: Optional[str] = None  # how the default max_memory was divided
        # Near its GPU (numa="auto") and, with several ranks, on CPUs of its own (_node).
        placement = _node.rank_placement(ranks, _check_numa(args.numa, _check_device(args.device)), _check_device(args.device), divide=auto)
        if auto:
            # Chosen natively (common/cpu_budget.h): here only to size prefetch_factor * workers;
            # a rank's share of the node is chosen here and passed as numbers.
            self._auto_threads = _auto_threads({"numa": _check_numa(args.numa, _check_device(args.device)),
                                                "device": _check_device(args.device),
                                                "reader_threads": args.reader_threads or 0, **placement})
            workers = self._auto_threads["decode_threads"]
        else:
            workers = max(1, args.num_workers)
        self._auto_prefetch = args.prefetch_factor == "auto"
        prefetch_given = args.prefetch_factor if isinstance(args.prefetch_factor, int) else None
        prefetch = 2 if args.prefetch_factor in (None, "auto") else args.prefetch_factor
        max_batch = batch_size or getattr(batch_sampler, "batch_size", None) or \
            max(1, max((len(b) for b in batch_sampler), default=1))
        options = dict(
            batch_size=int(max_batch),
            num_workers=workers,
            reader_threads=(args.reader_threads if args.reader_threads is not None
                            else (0 if auto else 1)),
            io_depth=_check_int("io_depth", args.io_depth, 1),
            # auto: start at 2 batches; the pipeline deepens while the training loop waits.
            prefetch_batches=2 if self._auto_prefetch else max(2, prefetch * workers),
            auto_prefetch=self._auto_prefetch,
            max_slots=_check_int("max_slots", args.max_slots, 0),
            io=args.io,
            layout=args.layout,
            fast_decode=args.fast_decode,  # False or a level's name (_check_fast_decode)
            strict_decode=bool(args.strict_decode),
            pin_memory=self.pin_memory,
            on_error=args.on_error,
            device=_check_device(args.device),
            numa=_check_numa(args.numa, _check_device(args.device)),
            **placement,
            **steps_options,
        )
        if args.max_image_pixels is not None:
            options["max_image_pixels"] = _check_int("max_image_pixels", args.max_image_pixels, 1)
        if args.max_memory is not None:
            options["max_memory"] = args.max_memory
        stall = args.stall_seconds
        if isinstance(stall, bool) or not isinstance(stall, (int, float)) or not stall > 0:
            raise ValueError(f"stall_seconds should be a number of seconds > 0, got {stall!r}")
        options["stall_seconds"] = float(args.stall_seconds)
        if auto and self._auto_threads["node"] is not None:
            options["reader_threads"] = self._auto_threads["reader_threads"]
        elif auto:
            options.update(_training_options())
            options["auto_threads"] = True
        if self._ranks is not None and args.max_memory is None:
            default, note = _node.default_memory(options)
            options["max_memory"] = max(1, default // self._ranks.size)
            self._node_memory = (f"1/{self._ranks.size} of {_format_bytes(default)}, {note}, for rank "
                                 f"{self._ranks.rank} of {self._ranks.size} on this machine ({self._ranks.source})")
        self._options = options
        # on_error="skip": an epoch that loses more than this fraction raises (_NativeIter).
        self._max_skipped_fraction = float(args.max_skipped_fraction)
        # Epoch overlap (see the class docstring): off only when persistent_workers=False is given.
        self._overlap_off: Optional[str] = (
            "persistent_workers=False: the pipeline starts empty every epoch"
            if args.persistent_workers is False else None)
        for f in self._folders:
            # A remote source whose shards exceed its cache (the next epoch's first shards would
            # be evicted by this one's) reads no epoch ahead.
            self._overlap_off = self._overlap_off or f.read_ahead_off
        self._queued: Optional[tuple] = None  # (epoch, seed) of the epoch queued natively
        self._ahead: Optional[_Ahead] = None  # its prediction, reused by the next iter()
        # Read-ahead epochs dropped because their files changed before adoption, and the last why.
        self._stale_drops = 0
        self._stale_why = ""
        self._last_sampler_epoch: Optional[int] = None
        try:
            self._native = self._make_native()
        except ValueError as e:
            if self._node_memory is None:
                raise
            raise ValueError(f"{e} (max_memory here is the default divided among the ranks on this machine: "
                             f"{self._node_memory}; pass max_memory= explicitly to give this rank more)") from None
        if any(self._native.variable_views or ()) and args.on_error == "skip" and self.drop_last \
                and batch_size is not None:
            self._native.stop()
            raise ValueError(
                "on_error='skip' with drop_last=True refills each batch with rows of the next, but "
                "this Dataset's outputs have sizes that depend on the image (a tensor a sample, "
                "freed with its batch): pass drop_last=False (a batch is then short by its skipped "
                "samples) or on_error='replace'")
        if auto:
            self.num_workers = self._native.stats()["decode_threads"]
        self._generation = 0
        started = self._native.stats()
        note = started["io_note"]
        if note and note not in _reported_io_notes:
            _reported_io_notes.add(note)
            _log.warning("ringloader: %s", note)
        # Why pin_memory=True could not be honoured (the facade warns once per process).
        self.unpinned_note: Optional[str] = None
        if self.pin_memory and not started["memory"].startswith("cuda-pinned"):
            self.unpinned_note = started["memory_note"]
        if started["slots_note"]:
            # The memory budget cut the depth or the slots (never exceeded: see describe()).
            if prefetch_given is not None and started["prefetch_batches"] < options["prefetch_batches"]:
                warnings.warn(f"prefetch_factor={prefetch_given} ({options['prefetch_batches']} batches) does not "
                              f"fit the memory budget ({_format_bytes(started['max_memory'])}): "
                              f"{started['slots_note']}; pass max_memory= to allow more", stacklevel=3)
            if not started["read_ahead"] and self._overlap_off is None:
                self._overlap_off = "the memory budget is too tight to read the next epoch ahead (see 'cut')"

    def _steps_options(self) -> dict:
        options = self._folders[0].native_options()
        if self._dtype is not None:
            views = options.get("views")
            if views is not None and len(views) == 1:
                views[0]["dtype"] = self._dtype  # a lone view (a gray image, a Joint's image)
            else:
                options["dtype"] = self._dtype
        return options

    def _make_native(self) -> "_C.Loader":
        self._pid = os.getpid()
        # The folders' compact sample tables, end to end: the native loader is built from the
        # path arena (no str per sample); native sample i is read from self._paths[i].
        table = _SampleTable.concat([f.sample_table for f in self._folders])
        self._paths = _PathsView(table, "paths")
        paths = table.arena()
        targets = np.concatenate([np.asarray(f.native_targets(), dtype=np.int64) for f in self._folders])
        flat = _user_source.flat_targets(self._folders)
        if flat is not None:
            targets = flat  # each row's label is its sample's flat index (see _user_source)
        ranges = [f.byte_ranges() for f in self._folders]
        memory = _columns.memory_column(self._folders)  # ImageBytes references' bytes
        # Which samples are held in memory: they read no file, so the read-ahead check stats none.
        self._in_memory = _columns.in_memory(memory)
        more_files = _columns.more_files_column(self._folders)  # an image's mask, ...
        self._more_files = more_files  # read ahead too: the read-ahead check stats their paths
        if not any(ranges):
            return _C.Loader(paths, targets, self._options, memory=memory, more_files=more_files)
        # Shard members: byte ranges of the shards (whole files elsewhere: length -1), and which
        # are members of a pipe: stream (only a WebDataset's own pipe: URLs; any path else is a
        # file, whatever its name).
        offsets, lengths, errors, pipes, tar_members, ends = [], [], [], [], [], []
        for f, r in zip(self._folders, ranges):
            none = np.zeros(len(f), dtype=bool)
            # A pipe: stream's length when indexed, on its last member (appended members).
            no_end = np.zeros(len(f), dtype=np.int64)
            if r:
                offsets.append(r["offsets"])
                lengths.append(r["lengths"])
                errors += r["errors"]
                pipes.append(np.asarray(r.get("pipes", none), dtype=bool))
                tar_members.append(np.asarray(r.get("tar_members", none), dtype=bool))
                ends.append(np.asarray(r.get("stream_ends", no_end), dtype=np.int64))
            else:
                offsets.append(np.zeros(len(f), dtype=np.int64))
                lengths.append(np.full(len(f), -1, dtype=np.int64))
                errors += [""] * len(f)
                pipes.append(none)
                tar_members.append(none)
                ends.append(no_end)
        return _C.Loader(paths, targets, self._options, offsets=np.concatenate(offsets),
                         lengths=np.concatenate(lengths), errors=errors,
                         pipes=np.concatenate(pipes), tar_members=np.concatenate(tar_members),
                         memory=memory, more_files=more_files, stream_ends=np.concatenate(ends))

    def _node_line(self) -> str:
        """How the machine was divided among its ranks (describe()'s 'node' line)."""
        r, plan = self._ranks, self._auto_threads
        node = plan["node"] if plan is not None else None
        cpus = (f"num_workers={self.num_workers} given, CPUs not divided" if node is None
                else f"{node['usable']} usable CPUs, not divided (the affinity mask is already this rank's)"
                if node["pinned"] else f"{node['share']} of {node['usable']} usable CPUs")
        memory = (f"max_memory 1/{r.size} of the default" if self._node_memory is not None
                  else "max_memory given, not divided")
        share = self._options.get("numa_share_count")
        pinned = (f", threads on CPUs {self._native.stats()['numa_cpus']} (share {self._options['numa_share_index']} "
                  f"of {share}, disjoint from the other ranks')" if share else "")
        return f"rank {r.rank} of {r.size} on this machine ({r.source}): {cpus}{pinned}, {memory}"

    def describe(self) -> str:
        """Where the pipeline runs: threads, CPUs, NUMA node, slot memory, device, I/O."""
        s = self._native.stats()
        node = s["numa_node"]
        lines = [
            "ringloader.DataLoader (native)",
            f"  threads: {s['decode_threads']} decode, {s['reader_threads']} reader, "
            f"1 dispatcher" + (", 1 device stage thread" if s["device"] != "cpu" else ""),
            f"  numa:    {'node ' + str(node) if node >= 0 else 'not placed'} ({s['numa_note']})",
            f"  cpus:    {s['numa_cpus'] or 'not pinned'}"
            + (f"; {s['threads_pinned']} threads pinned, read back: {s['thread_cpus']}"
               if s["threads_pinned"] else ""),
            f"  memory:  {s['memory']}" + (f" ({s['memory_note']})" if s["memory_note"] else "")
            + f", {s['slots_allocated']} slots allocated",
            f"  device:  {s['device']}" + (f", {s['device_buffers']} device buffers allocated, "
                                            f"{s['device_buffers_held']} held"
                                            if s["device"] != "cpu" else ""),
            f"  io:      {s['io_backend']}" + (f" ({s['io_note']})" if s["io_note"] else ""),
            f"  chosen:  {s['threads_note']}" if self._options.get("auto_threads")
            else f"  chosen:  {self._auto_threads['note']}" if self._auto_threads is not None
            else f"  chosen:  {s['threads_note']} (num_workers='auto' sizes them from the usable CPUs)",
            "  prefetch: " + (
                f"auto, {s['prefetch_batches']} batches deep now (starts at 2, grew {s['prefetch_grown']} "
                f"times, at most {s['prefetch_max']}: half the slots max_memory allows)"
                if self._auto_prefetch else f"{s['prefetch_batches']} batches (prefetch_factor x num_workers"
                + (f" = {self._options['prefetch_batches']}, cut to fit the memory budget: see 'cut')"
                   if s["prefetch_batches"] < self._options["prefetch_batches"] else ")")),
            f"  slots:   at most {s['max_slots']} of {_format_bytes(s['slot_bytes'])} "
            f"(max_memory {_format_bytes(s['max_memory'])}: {self._node_memory or s['memory_budget_note']})"
            f"; the pipeline waited for a free slot {s['producer_waits']} times",
            "  budget:  covers the batch slots, batches you keep included, and decodes that need over 16 MiB "
            "(a large image waits its turn, or fails its sample when the slots leave too little); not the "
            f"{s['read_buffers']} file "
            "read buffers per epoch (each as large as the largest file it read; a second set while the next "
            "epoch is read ahead), nor device buffers",
        ] + ([f"  node:    {self._node_line()}"] if self._ranks is not None else []) + (
            [f"  cut:     {s['slots_note']}"] if s["slots_note"] else []) + (
            [f"  batch:   batch_transform={self._mix_note}, applied in place in the slot by the iterating thread"]
            if self._mix_note else []) + (
            ["  batch:   collate_fn receives the samples (views of the slot's rows) in the iterating thread"]
            if self._collate is not None else []) + (
            ["  batch:   collate_fn is torch's default_collate: the batch stays in its slot, zero-copy"]
            if self._default_collate else []) + [
            "  epochs:  " + ("the next epoch is read and decoded while this one is delivered "
                             f"({_read_ahead_counts(s, self._native.has_queued_epoch())})"
                             if self._overlap_off is None else f"drained between epochs ({self._overlap_off})")
            + (f"; {self._stale_drops} read ahead dropped because their files changed before "
               f"the epoch began, last: {self._stale_why}" if self._stale_drops else ""),
        ]
        for link in _remote_links(self):
            measured = f"measured over {link['latency_samples']} responses" \
                if link["latency_samples"] else "not measured yet: the prior"
            lines.append(f"  remote:  {link['host']}: {link['latency_s'] * 1e3:.0f} ms to the first byte, "
                         f"{link['bytes_per_s'] / 1e6:.1f} MB/s per transfer ({measured}; "
                         f"{s['range_requests']} range requests in this process)")
        downloads = _C.downloads_in_flight()
        if downloads:
            lines.append(f"  remote:  {downloads}")
        lines.append(f"  scans:   {_scan_memo_line(s)}")
        budget = [f.feed_budget for f in self._folders if f.feed_budget is not None]
        if budget:
            lines.append(
                f"  row groups: {s['row_groups_read']} read ({_format_bytes(s['row_group_bytes_read'])}) "
                f"as the epochs reached them, at most {_format_bytes(s['row_group_bytes_peak'])} held "
                f"(read_ahead_bytes {_format_bytes(budget[0])}; over it {s['row_groups_over_budget']} "
                f"times, for a group the readers waited for); the readers waited {s['row_group_waits']} "
                f"times, {s['row_group_wait_seconds']:.2f} s")
        if s["errors"]:
            lines.append(f"  errors:  {s['errors']} samples failed ({s['skipped']} skipped, {s['replaced']} "
                         f"replaced); last: {_columns.name_rows(s['last_error'], self._folders)}")
        if s["stalled"]:
            lines.append(f"  stalled: {s['pipeline_state']}")
        return "\n".join(lines)


    # ---- torch-compatible surface -----------------------------------------------------------

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> "_NativeIter":
        versions = [f.version for f in self._folders]
        if versions != self._versions:
            # transform or target_transform was reassigned: rebuild the pipeline with the new one.
            why = _servable(self._folders)
            if why is not None:
                raise TypeError(f"the dataset's transform changed and it {why}; the native path built "
                                "for it cannot serve it: create a new ringloader.DataLoader")
            self._versions = versions
            self._options.update(self._steps_options())
            self._native.stop()
            self._native = self._make_native()
        elif self._pid != os.getpid():
            # A fork()ed child: the parent's native threads do not exist here. Start afresh.
            self._native = self._make_native()
        return _NativeIter(self)

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        if self._queued is not None and self._queued[0] != self._epoch:
            self._cancel_queued()  # another epoch than the one read ahead: stop its work now

    def _cancel_queued(self) -> None:
        self._queued = self._ahead = None
        self._native.cancel_queued()

    def stats(self) -> dict:
        s = self._native.stats()
        s["native"] = True
        # A sample held in a column has no path: its errors name its row as the source does.
        s["recent_errors"] = [_columns.name_rows(e, self._folders) for e in s["recent_errors"]]
        if s.get("last_error"):
            s["last_error"] = _columns.name_rows(s["last_error"], self._folders)
        s["remote_links"] = _remote_links(self)
        return s

    def close(self) -> None:
        native = getattr(self, "_native", None)
        if native is None:
            return
        for f in getattr(self, "_folders", []):
            f.stop_feed(native)  # a feeding thread holds the native loader while it waits for room
        native.stop()

    def __del__(self):
        # Once neither the DataLoader nor an iterator holds this backend, its threads stop.
        self.close()


def _remote_links(loader: NativeBackend) -> list:
    """Each remote host's link estimate (WebDataset.link_estimates), once per host."""
    out: dict = {}
    for f in loader._folders:
        for link in f.link_estimates():
            out.setdefault(link["host"], link)
    return list(out.values())


def _name_sample(error: str, folders: Sequence[Any]) -> str:
    """A native error message (``sample N (path): reason``) with its sample named as its source
    names it (a WebDataset: the shard's URL and the member, not the cache entry's path)."""
    match = re.match(r"sample (\d+) \((.*?)\): ", error)
    if match is not None:
        flat = int(match.group(1))
        for f in folders:
            if flat < len(f):
                named = f.describe_sample(flat)
                if named is not None:
                    return f"{named}: {error[match.end():]}"
                break
            flat -= len(f)
    return _columns.name_rows(error, folders)


def _begin_reads(loader: NativeBackend, flat: Optional[np.ndarray]) -> None:
    """Each source's remote reads for the epoch (WebDataset.begin_reads), told the samples the
    plan wants of it (None: an epoch read ahead, whose reads started already)."""
    end = 0
    for f in loader._folders:
        start, end = end, end + len(f)
        if not f.reads_by_plan:
            continue  # a folder: no pass over the plan for it
        mine = None if flat is None else flat[(flat >= start) & (flat < end)] - start
        # on_error="replace" draws substitutes from the failing row's group: keep it whole.
        f.begin_feed(loader._native, mine, loader._options["on_error"] != "replace")
        if f.begin_reads(mine) and loader._overlap_off is None:
            loader._overlap_off = ("remote shards were read by HTTP range requests (a "
                                   "range copy holds one epoch's members only)")


class _NativeIter:
    """One epoch of a native DataLoader. A newer ``iter(loader)`` supersedes this one."""

    def __init__(self, loader: NativeBackend):
        import torch

        self._loader = loader
        self._torch = torch
        try:
            # A local shard changed since its index was built: nothing of this epoch may be read
            # with that index (before any RNG is drawn, so a retry after rebuilding is the same).
            for f in loader._folders:
                f.check_unchanged()
        except StaleIndexError:
            loader._native.cancel_queued()
            raise
        resume = loader.take_resume()
        n = len(loader.dataset)
        self._skip = 0
        self._drop_rows = 0
        ahead, loader._ahead = loader._ahead, None
        if resume is None:
            _sync_epoch(loader)  # a WebDataset's order takes the loader's epoch (before the check)
        miss = "inputs" if ahead is None or resume is not None else ahead.miss(loader)
        if miss == "rng" and loader._overlap_off is None:
            # Something draws from torch's RNG between epochs, so predictions would keep missing
            # (wasted work): stop predicting.
            loader._overlap_off = ("torch's random generator is drawn from or re-seeded between "
                                   "epochs, so the next epoch's seed cannot be known ahead")
        if miss is None:
            # The prediction holds: the same seed and batches as drawing now, RNGs advanced alike.
            ahead.draw()
            changed = _changed_files(ahead.files)
            if changed:
                # Its order and seed are right, but rows read ahead may hold the old files'
                # bytes: start the epoch afresh, reading the files as they are now.
                loader._native.cancel_queued()
                loader._stale_drops += 1
                loader._stale_why = changed
            self._seed, batches, self._sampler_state = ahead.seed, ahead.batches, ahead.sampler_state
            flat, offsets = ahead.flat, ahead.offsets
        else:
            if resume is None:
                # Same RNG consumption as torch's iterator: the base seed first, then the sampler.
                self._seed = int(torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item())
                plan = _order.plan_epoch(loader.batch_sampler, n)
                batches, self._sampler_state = plan.batches, plan.sampler_state
            else:
                self._seed = resume["base_seed"]
                batches, self._sampler_state, self._skip = _resumed_batches(loader, resume, n)
                _restore_generators(loader, resume.get("generators"))
                self._drop_rows = int(resume.get("rows", 0))
            flat, offsets = _order.to_arrays(batches)
            if loader._index_map is not None:
                flat = loader._index_map[flat]  # a Subset/ConcatDataset's positions -> samples
        # A resumed epoch reads only the batches after those delivered before the checkpoint.
        first = offsets[min(self._skip, len(offsets) - 1)]
        _begin_reads(loader, None if miss is None else flat[first:])
        loader._generation += 1
        self._generation = loader._generation
        self._pid = os.getpid()
        # The loader keeps only this record (for state_dict), never the iterator itself, so an
        # abandoned iterator is collected and its __del__ stops the epoch's threads.
        self._progress = loader.begin_epoch(self._seed, self._sampler_state, self._skip)
        self._len = len(batches) - self._skip
        # on_error="skip" with drop_last: every batch full (see the class docstring). _carry holds
        # [batch number, first row, images, labels] of rows received and not yet delivered.
        self._refill = loader._options["on_error"] == "skip" and loader.drop_last and \
            loader.batch_size is not None
        # on_error="skip": more than max_skipped_fraction of the samples this epoch reads lost
        # raises (_check_skipped); the loader's count before the epoch is the baseline.
        fraction = loader._max_skipped_fraction
        self._skip_limit = None
        if loader._options["on_error"] == "skip" and fraction < 1:
            self._planned = len(flat) - int(first)
            self._skip_limit = fraction * self._planned
            self._skipped_before = loader._native.stats()["skipped"]
        self._carry: list = []
        loader._queued = None
        # Whole order, started at the first undelivered batch: rows keep their positions (seeds).
        # A queued epoch with this very order and seed is adopted (its batches decoded ahead are
        # delivered); anything else cancels it.
        loader._native.start_epoch(_AUGMENT_EPOCH, self._seed & (2**64 - 1), flat, offsets, self._skip)
        self._done = False
        if loader._overlap_off is None:
            ahead = _plan_ahead(loader)
            if ahead is not None:
                # Before anything of it is read: what the next iter() compares the files with.
                ahead.files = _file_states(loader, ahead.flat)
                loader._native.queue_epoch(_AUGMENT_EPOCH, ahead.seed & (2**64 - 1), ahead.flat, ahead.offsets)
                loader._queued, loader._ahead = (loader._epoch, ahead.seed), ahead

    def __iter__(self) -> "_NativeIter":
        return self

    def __len__(self) -> int:
        return self._len

    def __next__(self):
        if self._done:
            raise StopIteration
        if self._pid != os.getpid():
            raise RuntimeError(
                "this ringloader iterator was created before fork(); its native threads live in the "
                f"parent (pid {self._pid}). Call iter(loader) again in this process to restart.")
        if self._generation != self._loader._generation:
            raise RuntimeError(
                "this iterator was superseded: a newer iter() over the same ringloader.DataLoader "
                "started another epoch (one epoch runs at a time per loader)"
            )
        while True:
            try:
                item = self._loader._native.next(self._loader.timeout)
            except StaleIndexError as exc:
                # A pipe: shard's index (cached) no longer matches its stream: the epoch ended.
                told = exc
                for f in self._loader._folders:
                    told = f.explain_error(told, None)
                try:
                    if told is exc:
                        raise
                    raise told from None
                finally:
                    del told
            except _C.SampleError as exc:
                annotated = _source.explain_error(exc, self._loader._folders)
                try:
                    if annotated is exc:
                        raise
                    raise annotated from None
                finally:
                    # A local holding the exception raised from this frame would be a cycle
                    # (exception -> traceback -> frame -> exception) keeping the iterator, and
                    # the batches it references, alive until the garbage collector runs.
                    del annotated
            if self._skip_limit is not None:
                self._check_skipped()
            if item is None:
                self._done = self._progress.done = True  # refill: a short remainder is dropped
                raise StopIteration
            images, labels, _indices, number = item
            from_dlpack = self._torch.from_dlpack
            images, labels = from_dlpack(images), from_dlpack(labels)
            if labels.is_cuda:
                # A copy on the current stream, after the wait from_dlpack queued: keeping labels
                # (for metrics) must not keep the batch's device buffer out of the ring.
                labels = labels.clone()
            if self._refill:
                batch = self._refilled(number, images, labels)
                if batch is None:
                    continue
                images, labels, number = batch
            else:
                self._progress.delivered = number + 1 - self._skip
            loader = self._loader
            if loader._batcher is not None:
                native = loader._native
                return loader._batcher.batch(images, labels, loader._collate, native.views,
                                             native.geometry, native)
            if loader._channels_last:
                images = images.permute(0, 3, 1, 2)  # NCHW shape, channels-last strides, no copy
            if loader.batch_transform is not None:
                labels = self._mix(images, labels, number)
            if loader._collate is not None:
                # torch's contract: the list of samples. Each image is a view of its slot row;
                # the slot is recycled only once every view of it is released.
                samples = list(zip(images.unbind(0), labels.tolist()))
                del images, labels
                return loader._collate(samples)
            if loader._default_collate:
                return [images, labels]
            return images, labels

    def _check_skipped(self) -> None:
        """Raises once this epoch has skipped more than ``max_skipped_fraction`` of the samples
        it reads: an unreachable server or lost shards, not a few bad samples."""
        stats = self._loader._native.stats()
        skipped = stats["skipped"] - self._skipped_before
        if skipped <= self._skip_limit:
            return
        lost: list = []
        for error in reversed(stats["recent_errors"]):
            where = _name_sample(error, self._loader._folders)
            if where not in lost:
                lost.append(where)
        raise RuntimeError(
            f"ringloader.DataLoader: this epoch skipped {skipped} of the {self._planned} samples "
            f"it reads (on_error='skip'), more than max_skipped_fraction="
            f"{self._loader._max_skipped_fraction:g} of them: that is lost data (a server down, "
            f"shards or files gone), not a few bad samples. Last errors: "
            f"{'; '.join(lost[:3]) or 'none recorded'}. Fix the source, or pass "
            f"max_skipped_fraction=1 to train on what is left.")

    def _mix(self, images: Any, labels: Any, number: int) -> Any:
        """batch_transform on the batch in its slot (``_mixing``), seeded by (base seed, batch
        number in the epoch); returns the soft labels."""
        view = images
        if self._loader._options["layout"] == "NHWC" and not self._loader._channels_last:
            view = images.permute(0, 3, 1, 2)  # the raw [B,H,W,3] batch, mixed through NCHW
        gen = _mixing.rng(self._seed, number)
        params = _mixing.sample(self._loader.batch_transform, gen, view.shape[0], view.shape[2],
                                view.shape[3])
        return _mixing.apply(view, labels, params)

    def _refilled(self, number: int, images: Any, labels: Any):
        """A full batch from the rows received so far, or None when more rows are needed.

        Rule: the rows that survive skipping, in epoch order, cut into batches of batch_size.
        """
        first = 0
        if self._drop_rows:  # resumed inside this batch: its first rows were delivered before
            first, self._drop_rows = self._drop_rows, 0
            images, labels = images[first:], labels[first:]
        size = self._loader.batch_size
        if not self._carry and images.shape[0] == size:
            self._progress.delivered, self._progress.rows = number + 1 - self._skip, 0
            return images, labels, number
        self._carry.append([number, first, images, labels])
        if sum(segment[2].shape[0] for segment in self._carry) < size:
            self._carry[-1][2] = images.clone()  # kept across next(): a copy, not the slot
            return None
        # The batch's number (its mixing seed) is that of the planned batch its first row is from:
        # distinct for every delivered batch, and the same after a resume.
        parts_images, parts_labels, need, start = [], [], size, self._carry[0][0]
        while need:
            segment = self._carry[0]
            take = min(need, segment[2].shape[0])
            parts_images.append(segment[2][:take])
            parts_labels.append(segment[3][:take])
            need -= take
            if take == segment[2].shape[0]:
                self._carry.pop(0)
            else:
                segment[1] += take
                segment[2], segment[3] = segment[2][take:].clone(), segment[3][take:]
        if self._carry:
            self._progress.delivered = self._carry[0][0] - self._skip
            self._progress.rows = self._carry[0][1]
        else:
            self._progress.delivered, self._progress.rows = number + 1 - self._skip, 0
        cat = self._torch.cat
        return cat(parts_images), cat(parts_labels), start

    def __del__(self):
        # An abandoned epoch (break, exception in the loop) stops its threads now rather than at
        # the next iter(); a superseded iterator leaves the newer epoch alone.
        loader = getattr(self, "_loader", None)
        try:
            if loader is not None and not self._done and self._generation == loader._generation \
                    and self._pid == os.getpid():
                loader._native.stop()
        except Exception:  # interpreter shutdown: the loader's own destructor stops it
            pass
