"""The generic backend: any ``torch.utils.data.Dataset``. torch's ``DataLoader`` reads,
calls ``__getitem__`` and collates, with the same arguments, so results match torch's;
ringloader adds sharding (``_distributed``), device staging (``_staging``) and checkpoints
(``_planning._PlannedBatches``, ``_checkpoint``). See ``ringloader.dataloader`` for the
behaviour and ``_backend`` for the protocol.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import Any, Iterator

from . import video_batches
from .._C import LoaderTimeoutError
from ._backend import Backend
from ..core import _checkpoint
from ..core._distributed import _shard_sampler
from ._native_sources import _KeyedView, torch_path
from ..core._options import MAX_SKIPPED_FRACTION, _auto_threads, _check_device
from ._planning import _CountDelivered, _PlannedBatches
from ..core._source import Source
from ._staging import _device_prefetch, _generic_device


def _timeouts_named(batches: Iterator[Any], timeout: float) -> Iterator[Any]:
    """``batches``, with torch's ``RuntimeError`` for a worker that sent no batch within
    ``timeout`` raised as :class:`ringloader.LoaderTimeoutError` (a ``RuntimeError`` too), as the
    native path raises it: one exception to catch whichever path runs the dataset."""
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except RuntimeError as e:
            # torch's own message for its worker timeout; a Dataset's own error that merely
            # says "timed out" comes as "Caught ... in DataLoader worker process" and stays.
            if not str(e).startswith("DataLoader timed out after") or isinstance(e, LoaderTimeoutError):
                raise
            raise LoaderTimeoutError(
                f"no batch within timeout={timeout:g} s from torch's worker processes (this "
                f"dataset runs on torch's generic path: describe() says why): {e}") from e
        yield batch


def _start_generic(torch_loader: Any) -> Iterator[Any]:
    """``iter(torch_loader)``, where torch forks its worker processes, without losing a Ctrl-C.

    A SIGINT that arrives while ``os.fork()`` runs is handled at the first Python line of the
    interpreter's fork callbacks (``logging`` registers some), and CPython reports an exception
    raised there as "Exception ignored" and drops it: the KeyboardInterrupt vanishes and the
    training loop carries on as if Ctrl-C had never been pressed. Here such an interrupt is kept
    and raised once the iterator is made (whose workers then shut down as on any Ctrl-C). It
    cannot be signalled again from the report: the handler would run, and be dropped, there."""
    import sys
    import threading

    pid, thread = os.getpid(), threading.get_ident()
    previous = sys.unraisablehook
    dropped: list = []
    starting = True

    def hook(unraisable: Any) -> None:
        # Fork callbacks run on the forking thread; a forked child keeps the default report, and
        # so does everything once the start is over (another thread may have chained onto this).
        if (starting and unraisable.exc_type is not None
                and issubclass(unraisable.exc_type, KeyboardInterrupt)
                and os.getpid() == pid and threading.get_ident() == thread):
            dropped.append(unraisable.exc_value)
            return
        previous(unraisable)

    sys.unraisablehook = hook
    try:
        batches = iter(torch_loader)
    finally:
        starting = False
        if sys.unraisablehook is hook:  # unless something replaced it meanwhile
            sys.unraisablehook = previous
    if dropped:
        del batches  # shuts its workers down
        raise dropped[0].with_traceback(None)
    return batches


@contextlib.contextmanager
def _quiet_workers(quiet: bool) -> Iterator[None]:
    """With ``quiet``: torch's warning that the DataLoader "will create N worker processes" (N
    above the CPUs it sees) is not shown. Native clip batches take num_workers as decode
    threads; the DataLoader torch builds for them (its arguments checked, its batch sampler)
    starts no process."""
    if not quiet:
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
        yield


class _OneSample:
    """torch's unbatched collate on a one-sample planned batch: ``collate_fn`` (torch's
    ``default_convert`` when None) of the sample alone. A class: pickled to spawned workers."""

    def __init__(self, collate_fn: Any):
        self.collate_fn = collate_fn

    def __call__(self, batch: list) -> Any:
        import torch.utils.data as tud

        return (self.collate_fn or tud.default_convert)(batch[0])


class GenericBackend(Backend):
    """torch's DataLoader over ``dataset`` (through an epoch plan when it has batches)."""

    def __init__(self, dataset: Any, view: Any, args: Any):
        import torch.utils.data as tud

        super().__init__(dataset, args)
        # The DataLoader's arguments (those both paths share already checked by the facade).
        self._channels_last = args.channels_last
        path = torch_path(dataset, view, args)  # why torch's path, its warning, its samples
        video = path.video
        # A video dataset whose clips batch natively (video_batches): native decode threads.
        threads = _auto_threads({"numa": None})["decode_threads"] if args.num_workers == "auto" \
            else args.num_workers
        # torch's unbatched loading over references: one-sample planned batches, each sample
        # materialised in the workers, then collate_fn (default_convert) on it alone.
        unbatched = args.batch_size is None and args.batch_sampler is None and \
            (view is not None or video) and not isinstance(dataset, tud.IterableDataset)
        self._video, video_why = video_batches.for_loader(dataset, args, threads) \
            if video and not unbatched else (None, "batch_size=None (one sample at a time)" if video else "")
        self._unbatched = unbatched
        # torch's persistent workers carry their RNG from one epoch into the next: the epochs'
        # augmentation seeds differ though torch's RNG need not move (_planning._epoch_seed).
        self._persistent = bool(args.persistent_workers) and args.num_workers not in (0, None)
        native_only = [name for name, given in (
            ("dtype", args.dtype is not None), ("layout", args.layout != "NCHW"),
            ("memory_format", self._channels_last), ("io", args.io != "auto"),
            ("reader_threads", args.reader_threads not in (None, 1)),
            ("io_depth", args.io_depth != 32),
            ("max_memory", args.max_memory is not None and self._video is None),
            ("max_slots", args.max_slots != 0), ("fast_decode", bool(args.fast_decode)),
            ("strict_decode", not args.strict_decode),
            ("max_image_pixels", args.max_image_pixels is not None),
            ("on_error", args.on_error != "raise" and self._video is None),
            ("max_skipped_fraction", args.max_skipped_fraction != MAX_SKIPPED_FRACTION and self._video is None),
            ("numa", args.numa not in (None, "off")), ("stall_seconds", args.stall_seconds != 60),
            ("batch_transform", args.batch_transform is not None)) if given]
        if native_only and self._video is not None:
            verb = "applies" if len(native_only) == 1 else "apply"
            raise ValueError(
                f"{', '.join(native_only)} only {verb} to the native image pipeline; this loader "
                "batches video clips natively (ringloader.video_batches), whose dtype comes from "
                "the transform (ToDtype): leave them at their defaults")
        if native_only:
            verb = "applies" if len(native_only) == 1 else "apply"
            raise ValueError(
                f"{', '.join(native_only)} only {verb} to natively batched datasets; this loader "
                f"runs on torch's generic path ("
                f"{path.why}), "
                "where samples come from __getitem__ as with torch (a bad sample raises there): "
                "leave them at their defaults, or convert dtype/layout in the transform or "
                "collate_fn (which can also call CutMix/MixUp on the collated batch)")
        # Sharding and device staging apply to the generic path too.
        sampler, shuffle = args.sampler, args.shuffle
        shard = _shard_sampler(dataset, sampler, args.batch_sampler, args.rank, args.world_size,
                               shuffle, args.seed, args.drop_last, args.generator)
        if shard is not None:
            sampler, shuffle = shard, None
        self._device = _generic_device(_check_device(args.device))
        num_workers = args.num_workers
        if num_workers == "auto":
            # torch's worker processes, as many as the native path would run decode threads.
            num_workers = _auto_threads({"numa": None})["decode_threads"]
            self.num_workers = num_workers
        # "auto": torch's default (2 per worker); no adaptive depth here.
        prefetch_factor = None if args.prefetch_factor == "auto" else args.prefetch_factor
        kwargs = dict(
            batch_size=args.batch_size, shuffle=shuffle, sampler=sampler,
            batch_sampler=args.batch_sampler, num_workers=num_workers, collate_fn=args.collate_fn,
            pin_memory=args.pin_memory, drop_last=args.drop_last, timeout=args.timeout,
            worker_init_fn=args.worker_init_fn,
            multiprocessing_context=args.multiprocessing_context, generator=args.generator,
            prefetch_factor=prefetch_factor, persistent_workers=bool(args.persistent_workers),
            pin_memory_device=args.pin_memory_device,
        )
        if not args.in_order:
            kwargs["in_order"] = False
        # torch validates the arguments (a video dataset whose clips batch natively: without
        # its warning of worker processes, none is made; _quiet_workers).
        with _quiet_workers(self._video is not None):
            torch_loader = tud.DataLoader(path.stream(), **kwargs)
        self.batch_size = torch_loader.batch_size
        self.drop_last = torch_loader.drop_last
        self.sampler = torch_loader.sampler
        self.batch_sampler = torch_loader.batch_sampler
        self._planned = None
        # The epoch of an iterator made but not begun (a weak reference to its
        # _planning._PlannedEpoch): state_dict() plans it. And torch's global RNG at a resumed
        # iter() (_planning._undo_base_seed).
        self._pending: Any = None
        self._rng_at_iter: Any = None
        self._made: Any = None  # a weak reference to the epoch the last iter() made
        batches = tud.BatchSampler(self.sampler, 1, False) if unbatched else self.batch_sampler
        if batches is not None and not isinstance(dataset, tud.IterableDataset):
            # torch's loader again, drawing its batches from an epoch plan: the same order and
            # RNG consumption, and a plan can be resumed mid-epoch (state_dict). ringloader
            # ImageFolders (also inside Subset/ConcatDataset) get SampleKeys, which carry each
            # sample's augmentation seed.
            self._planned = _PlannedBatches(self, batches, len(dataset),
                                            keyed=view is not None or video)
            for name in ("batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"):
                kwargs.pop(name)
            source = dataset if view is None or isinstance(dataset, Source) else _KeyedView(*view)
            # Video references: each sample's clips drawn from its key; image references: a
            # batch torch's collate refuses names the sample.
            source, kwargs["collate_fn"] = path.samples(
                source, _OneSample(args.collate_fn) if unbatched else args.collate_fn)
            with _quiet_workers(self._video is not None):
                torch_loader = tud.DataLoader(source, batch_sampler=self._planned, **kwargs)
            if self._video is not None:  # the same planned batches, decoded natively
                torch_loader = video_batches.NativeVideoLoader(
                    self._video, self._planned, (prefetch_factor or 2) if num_workers else 0, args.timeout,
                    args.generator, self.batch_size or 1, args.max_memory, args.max_skipped_fraction,
                    persistent=bool(args.persistent_workers) and bool(num_workers))
                if prefetch_factor is not None and 0 < torch_loader.prefetch < prefetch_factor:
                    warnings.warn(f"prefetch_factor={prefetch_factor} does not fit the memory budget of the "
                                  f"clip batches: {torch_loader.slots.describe()}; pass max_memory= to "
                                  "allow more", stacklevel=4)
                # What torch's iterator would say, which the native clip batches stand in for.
                if args.pin_memory and not self._video.pin_memory:
                    warnings.warn("pin_memory=True ignored: no CUDA GPU is visible; clip batches use "
                                  "ordinary host memory", stacklevel=4)
                if not args.in_order:
                    warnings.warn("in_order=False has no effect: native clip batches are always "
                                  "delivered in sampler order", stacklevel=4)
        if self._video is not None and not isinstance(torch_loader, video_batches.NativeVideoLoader):
            torch_loader.check_worker_number_rationality()  # torch's processes after all: its warning
        self._generic = torch_loader
        # Why torch's path: every reason for describe(), the first in one warning per loader
        # (once the arguments are known good: an error comes without it).
        self._reasons = path.warn(video_batches.NATIVE_REASON if self._video is not None else None,
                                  video_why)

    @property
    def resumable(self) -> bool:
        # Unbatched references are planned one sample a batch, but torch's unbatched loader has
        # no batch sampler to replay: no order to resume, as torch's path says.
        return self._planned is not None and not self._unbatched

    def __len__(self) -> int:
        return len(self._generic)

    def __iter__(self) -> Iterator[Any]:
        video_batches.check_unchanged(self.dataset)  # an rl.VideoShards shard rewritten: StaleIndexError
        if self._planned is not None:
            import torch

            self._pending = self._made = None  # torch's iter() makes the epoch (_PlannedBatches.__iter__)
            resumed = self._resume is not None and self.generator is None
            self._rng_at_iter = torch.get_rng_state() if resumed else None
        try:
            batches = _start_generic(self._generic)
        except BaseException:
            self._pending = self._rng_at_iter = None
            raise
        # Native clip batches name their own timeout (and their SlotsExhaustedError, which a
        # generator around them would turn into the end of the epoch, says to call again).
        if self._generic.timeout > 0 and not isinstance(self._generic, video_batches.NativeVideoLoader):
            batches = _timeouts_named(batches, self._generic.timeout)
        if self._device is not None:
            batches = _device_prefetch(batches, self._device)
        if self._planned is None:
            return batches
        epoch = self._made() if self._made is not None else None  # this iter()'s (_PlannedBatches.__iter__)
        return _CountDelivered(self, batches, epoch)

    def state_dict(self) -> dict:
        # iter() made, no batch drawn yet (torch with no workers plans at the first next()): the
        # epoch is planned now, drawing what that next() would draw, which then follows the
        # plan; the checkpoint holds the epoch's order, as any other.
        pending = self._pending() if self._pending is not None else None  # None: that iterator was dropped
        if pending is not None:
            pending.begin()
        return _checkpoint.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        _checkpoint.load_state_dict(self, state)
        self._pending = None  # an iterator made before does not begin the loaded epoch at state_dict()

    def stats(self) -> dict:
        if isinstance(self._generic, video_batches.NativeVideoLoader):
            return {"native": False, "video": self._generic.stats()}
        return {"native": False, **({"video": self._video.stats()} if self._video is not None else {})}

    def describe(self) -> str:
        clips = isinstance(self._generic, video_batches.NativeVideoLoader)
        memory = [f"  {self._generic.describe()}"] if clips else []
        head = ("ringloader.DataLoader (native clip batches: clips decoded and batched in native "
                "threads, not torch's worker processes)" if clips else
                "ringloader.DataLoader (generic path: torch.utils.data.DataLoader does the work)")
        return "\n".join([head] + [f"  why:     {r}" for r in self._reasons] + memory)
