"""The native backend: a :class:`ringloader.NativeDataset` source (or a Subset/ConcatDataset
chain of them sharing one transform) read, decoded, transformed and batched by ``_C.Loader``;
batches arrive zero-copy through DLPack. See ``ringloader.dataloader`` for the behaviour and
``_backend`` for the protocol.

Here the backend is built (its sampling chain, options and ``_C.Loader``); which datasets it
serves is decided in ``_native_sources``, an epoch runs in ``_native_epoch`` and what it says of
itself (``describe()``) is written in ``_native_report``.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any, Optional

import numpy as np

from .. import _C
from . import _mixing, _native_report
from ..core import _node, _order, _source
from ._backend import Backend
from ..core._distributed import _shard_sampler
from ._native_epoch import _NativeIter
from ._native_report import _remote_links
from ._native_sources import _servable
from ..core._options import (_auto_threads, _check_device, _check_int, _check_numa, _format_bytes,
                             _training_options)
from ._planning import _Ahead
from ..core._sample_table import _PathsView, _SampleTable

_log = logging.getLogger("ringloader")
_reported_io_notes: set = set()


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
        elif batch_size is None:  # torch's unbatched loading: one-row batches, each row alone
            if args.drop_last:
                raise ValueError("batch_size=None option disables auto-batching and is mutually "
                                 "exclusive with drop_last")
            if args.batch_transform is not None:
                raise ValueError("batch_transform mixes batches; batch_size=None delivers samples "
                                 "one by one (mix them in the training step)")
            batch_size = 1
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
        self._unbatched = args.batch_size is None and args.batch_sampler is None
        self.batch_size = None if self._unbatched else batch_size
        self.drop_last = args.drop_last
        if not args.in_order:
            warnings.warn("in_order=False has no effect: ringloader always delivers in sampler order",
                          stacklevel=3)

        self._folders, self._index_map = view
        # A user's Dataset of image references: batches rebuilt in its own structure.
        structured = [f for f in self._folders if f.structured]
        self._batcher = (structured[0].batcher(self._folders, self._channels_last,
                                               args.layout == "NHWC") if structured else None)
        if self._batcher is not None and args.dtype is not None and \
                any(len(f.view_transforms) > 1 for f in self._folders):
            raise ValueError("dtype= sets one output dtype; samples with several views take each view's "
                             "dtype from its transform (ToTensor: float32, else uint8)")
        if self._batcher is not None and args.dtype is not None and self._batcher.tail_note:
            raise ValueError("dtype= converts the native image before the Joint's steps that v2 "
                             "runs after its tensor conversion (" + self._batcher.tail_note +
                             "): end the Joint's transform with a ToDtype instead")
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
        if self._unbatched:  # as torch: collate_fn (default_convert) on each sample alone
            convert = args.collate_fn if args.collate_fn is not None else tud.default_convert
            self.collate_fn = convert
            self._default_collate, self._collate = False, lambda samples: convert(samples[0])
        auto = args.num_workers == "auto"
        prefetch_given = self._choose_options(args, batch_size, batch_sampler, steps_options)
        options = self._options
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

    def _choose_options(self, args: Any, batch_size: Optional[int], batch_sampler: Any,
                        steps_options: dict) -> Optional[int]:
        """The native loader's options (``self._options``) from the DataLoader's arguments and
        this machine: threads (``num_workers="auto"``, a rank's share of the node), placement,
        prefetch depth and memory budget. Returns ``prefetch_factor`` when it was given as a
        number (None: "auto" or the default), for the warning when the budget cuts it."""
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
        return prefetch_given

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
        flat = _source.flat_targets(self._folders)
        if flat is not None:
            targets = flat  # each row's label is its sample's flat index (Source.structured)
        ranges = [f.byte_ranges() for f in self._folders]
        memory = _source.memory_column(self._folders)  # ImageBytes references' bytes
        # Which samples are held in memory: they read no file, so the read-ahead check stats none.
        self._in_memory = _source.in_memory(memory)
        more_files = _source.more_files_column(self._folders)  # an image's mask, ...
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

    def describe(self) -> str:
        """Where the pipeline runs: threads, CPUs, NUMA node, slot memory, device, I/O."""
        return _native_report.describe(self)

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
        s["recent_errors"] = [_source.name_rows(e, self._folders) for e in s["recent_errors"]]
        if s.get("last_error"):
            s["last_error"] = _source.name_rows(s["last_error"], self._folders)
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
