"""What the DataLoader iterates for natively batched clips (``ringloader.video_batches``): the
batches of its planned keys, made ahead on a thread or when asked, and their memory bound,
``max_memory`` (or the default budget images get) held as bytes of clip batches alive at once.

A clip batch is ``B x [N x] T x 3 x H x W`` elements, often hundreds of MB, so the batches a
loader makes ahead (its depth) and the ones the training loop keeps are counted against the
budget as the image loader counts its slots: the slots and depth come from the native slot rule
(``_C.plan_slots``, csrc/pipeline/slot_pool.h's PlanSlots: slots = budget / batch bytes, the
depth cut to the slots less the one the training loop holds, fewer than 2 slots refused naming
max_memory and the bytes needed). Each batch's buffer is charged when it is allocated and
released when its last tensor (or view) is freed, so the bytes alive never pass the slots'
bytes; a producer that would pass them waits, and a ``next()`` that finds every byte held by
batches the loop keeps raises ``SlotsExhaustedError`` (nothing is lost: free some, call again).
``check_unchanged``: the check at ``iter()`` that no ``rl.VideoShards`` shard was rewritten.
Under ``on_error="skip"`` with ``drop_last=True`` the batches are refilled to full size
(``_video_refill.Refilled``), and ``max_skipped_fraction`` is one ``_SkipBudget`` per epoch.
"""

from __future__ import annotations

import atexit
import gc
import threading
import weakref
from typing import Any, Dict, List, Optional

from .. import _C
from .._C import SlotsExhaustedError
from ..core._options import _format_bytes as format_bytes
from ._backend import skipped_too_much
from ._clip_samples import Delivered
from ._video_refill import Refilled

__all__ = ["ClipSlots", "NativeVideoLoader"]


class ClipSlots:
    """Slots of ``slot_bytes`` (one clip batch) within ``max_memory`` (None: the default
    budget), ``prefetch`` batches deep at most.

    Examples:
        >>> from ringloader.loader._video_loader import ClipSlots
        >>> slots = ClipSlots(1000, batch_size=4, prefetch=8, max_memory=3500)
        >>> slots.max_slots, slots.depth
        (3, 2)
        >>> slots.note
        "prefetch 8 -> 2 batches (the budget holds 3 slots of 1000 B; one is the training loop's)"
    """

    def __init__(self, slot_bytes: int, batch_size: int, prefetch: int, max_memory: Optional[int]):
        from ..core._node import default_memory

        given = max_memory is not None
        budget, budget_note = (int(max_memory), "set (max_memory)") if given else default_memory({})
        available = 0 if given else int(_C.available_memory()[0])
        plan = _C.plan_slots(max(int(slot_bytes), 1), max(int(batch_size), 1), int(budget), given,
                             budget_note, available, max(int(prefetch), 1), False)
        self.slot_bytes, self.given, self.budget_note = max(int(slot_bytes), 1), given, budget_note
        self.budget, self.max_slots, self.depth = int(plan["budget"]), int(plan["max_slots"]), int(plan["depth"])
        # The epoch read-ahead the rule turns off is the image loader's; clip batches have none.
        self.note = "; ".join(c for c in str(plan["note"]).split("; ") if c and not c.startswith("epoch read-ahead"))
        self.capacity = self.max_slots * self.slot_bytes
        self._cv = threading.Condition()
        self.held = self.peak = 0
        self.waiting = 0  # producers waiting for bytes to be freed now

    def _refuse(self, nbytes: int) -> None:
        what = (f"max_memory={self.budget} bytes" if self.given
                else f"the memory budget ({format_bytes(self.budget)}: {self.budget_note})")
        raise ValueError(f"{what} holds {self.max_slots} clip batch slots of {self.slot_bytes} bytes, "
                         f"and this clip batch is {nbytes} bytes ({format_bytes(nbytes)}): larger than "
                         f"the slots' {self.capacity} bytes. Raise max_memory to at least "
                         f"{2 * nbytes} bytes (2 batches: one being filled, one the training loop "
                         "holds), or lower batch_size, the frames per clip or the output size")

    def acquire(self, nbytes: int, stop: Optional[threading.Event]) -> bool:
        """Charges a batch of ``nbytes``; waits while the bytes alive leave no room (False when
        ``stop`` is set meanwhile). Without ``stop`` (batches made when asked, on the caller's
        thread) there is no one to wait for: ``SlotsExhaustedError`` when the batches kept fill
        the slots."""
        if nbytes > self.capacity:
            self._refuse(nbytes)
        collected = waited = False
        with self._cv:
            try:
                while self.held + nbytes > self.capacity:
                    if stop is None:
                        if not collected:  # batches dropped in a reference cycle: free them first
                            self._cv.release()
                            try:
                                gc.collect()
                            finally:
                                self._cv.acquire()
                            collected = True
                            continue
                        raise _C.SlotsExhaustedError(self.exhausted())
                    if stop.is_set():
                        return False
                    if not waited:
                        self.waiting, waited = self.waiting + 1, True
                    self._cv.wait(0.1)
            finally:  # a producer stopped while it waited waits no more (a later loop's next() asks)
                if waited:
                    self.waiting -= 1
            self.held += nbytes
            self.peak = max(self.peak, self.held)
        return True

    def track(self, buffer: Any, nbytes: int) -> None:
        """Releases ``nbytes`` when ``buffer`` (the array every tensor of the batch is a view of)
        is freed."""
        weakref.finalize(buffer, self._release, nbytes).atexit = False  # nothing to release at exit

    def _release(self, nbytes: int) -> None:
        with self._cv:
            self.held -= nbytes
            self._cv.notify_all()

    def exhausted_now(self) -> bool:
        """Whether a producer waits for room (with nothing queued, the batches the training loop
        keeps hold every byte)."""
        with self._cv:
            return self.waiting > 0

    def exhausted(self) -> str:
        return (f"all {self.max_slots} clip batch slots ({format_bytes(self.capacity)} of "
                f"{'max_memory' if self.given else 'the memory budget'}) are held by batches the "
                "training loop keeps; release earlier batches (drop their tensors) or raise "
                "max_memory. The next batch is not lost: call again")

    def stats(self) -> Dict[str, Any]:
        with self._cv:
            return {"budget": self.budget, "slot_bytes": self.slot_bytes, "max_slots": self.max_slots,
                    "depth": self.depth, "held_bytes": self.held, "peak_bytes": self.peak}

    def describe(self, ahead: bool = True) -> str:
        """One line: the slots, the prefetch depth (0 when nothing is made ahead: ``ahead``
        False, num_workers=0) and the budget."""
        cut = f"; {self.note}" if self.note else ""
        depth = self.depth if ahead else "0 (num_workers=0: each batch is made when asked)"
        return (f"{self.max_slots} clip batch slots of {format_bytes(self.slot_bytes)}, prefetch "
                f"{depth} (max_memory {format_bytes(self.budget)}: "
                f"{self.budget_note}{cut})")


_LIVE: Dict[threading.Thread, threading.Event] = {}  # the threads making batches ahead, their stop flags
_LIVE_LOCK = threading.Lock()


def _stop_at_exit() -> None:
    """Stops the threads still making batches ahead and waits for them (each ends at its batch
    in progress), while the interpreter still runs them: once it finalizes, a daemon thread
    coming back from a native call with the GIL released is stopped there, and the process
    aborts ('terminate called without an active exception')."""
    with _LIVE_LOCK:
        live = list(_LIVE.items())
    for _, stop in live:
        stop.set()
    for thread, _ in live:
        thread.join(60)


atexit.register(_stop_at_exit)


class _Prefetched:
    """The batches of ``batches`` (lists of keys) from ``source``, made ``depth`` ahead on a
    thread of their own (the decode runs without the GIL, so the training step goes on), their
    bytes charged to ``slots`` (``_video_loader.ClipSlots``: the producer waits while they are
    full). The thread is stopped and waited for at interpreter exit (``_stop_at_exit``). The
    clips a batch skips count toward ``budget``, this epoch's, even when the batch is finished
    after the loop left the epoch; ``refill``: ``VideoClipBatches.batch``'s."""

    def __init__(self, source: Any, batches: Any, depth: int, timeout: float, slots: Any = None,
                 dropped: Any = None, budget: Optional["_SkipBudget"] = None, refill: bool = False):
        import queue

        self._queue: Any = queue.Queue(maxsize=max(depth, 1))
        self._stop = threading.Event()
        self._timeout, self._slots, self._dropped = timeout, slots, dropped
        self._budget = budget
        self.taken = 0  # the planned batches taken (a batch's error included)
        self._ended = False  # the thread ended (the epoch, or its plan's error): nothing more comes
        # The epoch's plan begins here, on the caller's thread, as torch's worker processes
        # begin theirs at iter(): a state_dict() before the first next() records this epoch,
        # whenever the thread gets to run.
        batches = _begun(batches)
        # The thread holds the queue and the flag, not this iterator: dropping it (a loop left)
        # runs __del__, which stops the thread.
        self._thread = threading.Thread(target=_Prefetched._run,
                                        args=(source, batches, self._queue, self._stop, slots, budget, refill),
                                        daemon=True, name="ringloader-video-batches")
        with _LIVE_LOCK:
            _LIVE[self._thread] = self._stop
        self._thread.start()

    @staticmethod
    def _put(queue: Any, stop: threading.Event, item: Any) -> bool:
        """Queues ``item``; False when the consumer left (``close()``) before there was room."""
        while not stop.is_set():
            try:
                queue.put(item, timeout=0.1)
                return True
            except Exception:  # noqa: BLE001 - queue.Full: look at the stop flag again
                continue
        return False

    @staticmethod
    def _run(source: Any, batches: Any, queue: Any, stop: threading.Event, slots: Any, budget: Any,
             refill: bool) -> None:
        try:
            for keys in batches:
                try:
                    batch = source.batch(list(keys), slots, stop, budget, refill)
                except Exception as error:  # noqa: BLE001 - this batch's: raised by its next(), the
                    # epoch goes on with the next batch, as torch's DataLoader and batches made
                    # when asked do after a sample's error
                    if not _Prefetched._put(queue, stop, (None, error)):
                        return
                    continue
                if batch is None or not _Prefetched._put(queue, stop, (True, batch)):
                    return
                del batch  # the consumer's now: its bytes are freed with its last tensor
            _Prefetched._put(queue, stop, (False, None))
        except BaseException as error:  # noqa: BLE001 - handed to the consumer
            _Prefetched._put(queue, stop, (False, error))
        finally:
            with _LIVE_LOCK:
                _LIVE.pop(threading.current_thread(), None)

    def __iter__(self) -> "_Prefetched":
        return self

    def _get(self) -> Any:
        """The next item; SlotsExhaustedError when the producer waits for bytes that only
        batches this loop keeps hold (nothing queued: it would wait forever)."""
        import queue
        import time

        from .._C import LoaderTimeoutError

        deadline = time.monotonic() + self._timeout if self._timeout > 0 else None
        while True:
            try:
                item = self._queue.get(timeout=0.1)
            except queue.Empty:
                pass
            else:
                self.taken += item[0] is not False
                return item
            if self._slots is not None and self._queue.empty() and self._slots.exhausted_now():
                gc.collect()  # batches dropped in a reference cycle are freed first
                time.sleep(0.2)
                if self._queue.empty() and self._slots.exhausted_now():
                    raise SlotsExhaustedError(self._slots.exhausted())
            if deadline is not None and time.monotonic() >= deadline:
                raise LoaderTimeoutError(f"no video batch within timeout={self._timeout:g} s from the "
                                         "native clip decoder") from None

    def __next__(self) -> Any:
        if self._ended:  # as a generator after its end or error: the queue stays empty now
            raise StopIteration
        if self._budget is not None:
            self._budget.check()
        ok, item = self._get()
        while ok and _dropped(item, self._dropped):  # every clip skipped: the batch is dropped
            if self._budget is not None:
                self._budget.check()
            ok, item = self._get()
        if ok:
            return item
        if ok is None:  # one batch's error: the next call gets the next batch
            raise item
        self._stop.set()
        self._ended = True
        if item is None:
            raise StopIteration
        raise item

    def close(self) -> None:
        self._stop.set()

    def __del__(self) -> None:
        self._stop.set()


def _begun(batches: Any) -> Any:
    """``batches`` (lists of keys) iterated from their first: that one drawn now, so an epoch
    plan (``_planning._PlannedBatches``) begins its epoch on the calling thread; an error of the
    plan is raised by the first ``next()`` of what is returned, as it would have been."""
    import itertools

    it = iter(batches)
    try:
        first = next(it)
    except StopIteration:
        return iter(())
    except Exception as error:  # noqa: BLE001 - the plan's: raised where the batches are taken
        # Bound as a default: Python deletes ``error`` when the except clause ends, so a
        # closure over it would raise NameError instead of the plan's error.
        def failed(raised: BaseException = error) -> Any:
            raise raised
            yield  # pragma: no cover - a generator that raises at its first next()

        return failed()
    return itertools.chain([first], it)


class _WhenAsked:
    """The batches of ``batches`` from ``source`` made when asked, on the caller's thread; a
    batch refused for want of room (``SlotsExhaustedError``) is made by the next call."""

    def __init__(self, source: Any, batches: Any, slots: Any, dropped: Any = None,
                 budget: Optional["_SkipBudget"] = None, refill: bool = False):
        self._source, self._batches, self._slots = source, iter(batches), slots
        self._keys: Optional[List[Any]] = None
        self._dropped, self._budget, self._refill = dropped, budget, refill
        self.taken = 0  # the planned batches taken (a batch's error included)

    def __iter__(self) -> "_WhenAsked":
        return self

    def __next__(self) -> Any:
        while True:
            if self._budget is not None:
                self._budget.check()
            if self._keys is None:
                self._keys = list(next(self._batches))
            try:
                batch = self._source.batch(self._keys, self._slots, None, self._budget, self._refill)
            except SlotsExhaustedError:
                raise  # nothing lost: the same keys at the next call
            except BaseException:
                # Another error: iterating again goes on with the next batch.
                self._keys, self.taken = None, self.taken + 1
                raise
            self._keys, self.taken = None, self.taken + 1
            if not _dropped(batch, self._dropped):  # every clip skipped: the batch is dropped
                return batch


class _SkipBudget:
    """``max_skipped_fraction`` for native clip batches, as the image loader applies it: an
    epoch under ``on_error="skip"`` that has skipped more than ``fraction`` of the samples it
    reads raises ``RuntimeError`` (at its next batch, and again at each later one), naming the
    count and the last clips lost. ``planned()`` gives the samples the epoch reads (asked once
    its plan began). One budget per epoch (``NativeVideoLoader.__iter__``), and the clips it
    counts are those its own batches skipped (``count``, called by ``VideoClipBatches.batch``):
    a batch still being made for an epoch the loop left (a ``break``, then ``iter()`` again)
    counts toward that epoch, never toward the next.

    The error comes before a batch is taken, but the loader's count of batches received
    (``_planning._CountDelivered``) takes it for a batch's error and counts a batch passed at
    the next call: ``passed(-1)`` (``NativeVideoLoader._passed_counter``) takes that back, so a
    checkpoint after the error, however often raised, resumes at the first batch not delivered.
    (Refilled batches keep the record themselves: no ``passed`` there, ``_video_refill``.)"""

    def __init__(self, fraction: float, planned: Any, passed: Any = None):
        self.fraction, self._planned = float(fraction), planned
        self.planned: Optional[int] = None
        self.skipped = 0
        self.recent: List[str] = []  # the last clips skipped, newest last
        self._lock = threading.Lock()  # counted on the producer's thread, read on the loop's
        self._passed, self._raised = passed, False

    def count(self, skipped: int, lost: List[str]) -> None:
        """Adds the clips one batch of this epoch skipped (``lost``: what names each)."""
        if skipped:
            with self._lock:
                self.skipped += int(skipped)
                self.recent = (self.recent + list(lost))[-16:]

    def check(self) -> None:
        if self._raised:  # counted passed since the last raise, which took no batch
            self._raised = False
            if self._passed is not None:
                self._passed(-1)
        with self._lock:
            skipped, recent = self.skipped, list(self.recent)
        if skipped <= 0:
            return
        if self.planned is None:
            self.planned = int(self._planned())
        if skipped <= self.fraction * self.planned:
            return
        self._raised = True
        raise skipped_too_much(skipped, self.planned, self.fraction, recent, "clips",
                               "videos gone, a codec missing, a server down")


def _dropped(batch: Any, passed: Any) -> bool:
    """Whether ``batch`` holds no clip (``on_error="skip"`` left out every one) and is dropped,
    as the image loader drops a batch whose every sample failed: then ``passed()`` records its
    planned batch as passed, so a checkpoint resumes after it (``NativeVideoLoader``)."""
    if passed is None or len(batch[0]):
        return False
    passed()
    return True


class NativeVideoLoader:
    """What the DataLoader's generic path iterates for a video dataset whose clips batch
    natively: ``source``'s batches over ``batches`` (the loader's planned batches of keys),
    prefetched ``prefetch`` deep (0: made when asked). Each ``iter()`` first draws the base
    seed torch's DataLoader iterator draws from ``generator`` (with ``persistent``
    workers, only the first, as torch's iterator is made once then), so the planned order and
    the RNG consumption are torch's.

    The bytes of the clip batches alive at once are bounded by ``max_memory`` (None: the
    default budget of images' slots) as ``_video_loader.ClipSlots`` says, slots sized by the
    first sample's clip times ``batch_size``: the depth is cut to fit (``slots.note`` says how),
    a budget below two batches raises ValueError naming max_memory and the bytes needed."""

    def __init__(self, source: Any, batches: Any, prefetch: int, timeout: float,
                 generator: Any = None, batch_size: int = 1, max_memory: Optional[int] = None,
                 max_skipped_fraction: float = 0.5, persistent: bool = False):
        from ..core._sample_keys import SampleKey

        self.source, self.batches, self.timeout = source, batches, timeout
        self.batch_size, self.max_skipped_fraction = max(int(batch_size), 1), float(max_skipped_fraction)
        self.generator = generator
        # persistent_workers with workers: torch's iterator draws its base seed once, at its
        # first iter() (its later epochs reset the same iterator).
        self.persistent, self._drawn = bool(persistent), False
        self.slots: Any = None
        for index in range(min(len(source), 16)):  # the first clip that can be made sizes the slots
            try:
                clip = source.clip_bytes(SampleKey(index, 0, 0, 0))
            except (ValueError, IndexError, OSError, RuntimeError):
                continue
            rows = max(int(batch_size), 1)  # a slot: the clips, and the targets as images' labels and indices
            self.slots = ClipSlots(clip * rows + 16 * rows, rows, max(prefetch, 1), max_memory)
            break
        self.prefetch = min(prefetch, self.slots.depth) if self.slots is not None and prefetch > 0 else prefetch

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Any:
        import torch

        if not (self.persistent and self._drawn):
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)
            self._drawn = True
        skip = self.source.on_error == "skip"
        owner = getattr(self.batches, "_loader", None)  # _planning._PlannedBatches' loader
        # on_error="skip" with drop_last: every batch full, refilled from the following clips
        # (_video_refill, which keeps the epoch's record itself: no batch is dropped there).
        refill = skip and bool(getattr(owner, "drop_last", False)) and getattr(owner, "batch_size", None) is not None
        epoch = iter(self.batches)  # this iter()'s (_planning._PlannedEpoch: its record once begun)
        dropped = self._passed_counter(epoch) if skip and not refill else None
        # One budget per epoch: the clips its own batches skip, whenever they are decoded.
        budget = _SkipBudget(self.max_skipped_fraction, lambda: self._planned_samples(epoch), dropped) \
            if skip and self.max_skipped_fraction < 1 else None
        if self.prefetch <= 0:
            inner: Any = _WhenAsked(self.source, epoch, self.slots, dropped, budget, refill)
        else:
            inner = _Prefetched(self.source, epoch, self.prefetch, self.timeout, self.slots, dropped,
                                budget, refill)
        if refill:
            inner = Refilled(inner, self.source, owner.batch_size, epoch, getattr(owner, "_device", None) is not None)
        if getattr(self.source, "pair", True) and getattr(self.source, "collate_fn", None) is None:
            return inner  # (clips, targets), as made
        return Delivered(inner, self.source)  # as the user's samples shape a batch

    def _planned_samples(self, epoch: Any = None) -> int:
        """The samples ``epoch`` (the iterator's, begun) reads: its planned batches' (torch's
        batch sampler: ``drop_last`` cut, else its sampler's length) less those a resumed epoch
        had delivered (``_checkpoint._Progress.skip``)."""
        inner = getattr(self.batches, "_inner", self.batches)  # _planning._PlannedBatches' sampler
        size = int(getattr(inner, "batch_size", None) or self.batch_size)
        sampler = getattr(inner, "sampler", None)
        total = len(inner) * size
        if not getattr(inner, "drop_last", True) and sampler is not None and hasattr(sampler, "__len__"):
            total = len(sampler)
        progress = _record(epoch, getattr(self.batches, "_loader", None))
        done = int(getattr(progress, "skip", 0) or 0) * size
        return max(total - done, 1)

    def _passed_counter(self, epoch: Any = None) -> Any:
        """What an iterator calls when it drops a batch whose every clip was skipped: its
        planned batch counts as delivered in the epoch's record (``_checkpoint._Progress``, that
        of ``epoch``, the iterator's, never that of an iterator made after it), so
        ``state_dict`` resumes after it as after a batch received. (Counted when the next batch
        is taken, before or after the training loop holds the previous one: either way a resumed
        epoch gives the same batches, the dropped one holding none.) ``passed(-1)`` takes one
        back (``_SkipBudget``)."""
        owner = getattr(self.batches, "_loader", None)  # _planning._PlannedBatches' loader
        progress: List[Any] = []

        def passed(step: int = 1) -> None:
            if not progress:
                progress.append(_record(epoch, owner))
            if progress[0] is not None:
                progress[0].delivered += step

        return passed

    def describe(self) -> str:
        """How the clip batches' memory is bounded (a line of ``describe()``)."""
        if self.slots is None:
            return "memory:  not bounded (no clip of the first samples could be sized)"
        return f"memory:  {self.slots.describe(self.prefetch > 0)}"

    def stats(self) -> Dict[str, Any]:
        return {**self.source.stats(), **({"memory": self.slots.stats()} if self.slots is not None else {})}


def _record(epoch: Any, owner: Any) -> Any:
    """The checkpoint record of ``epoch`` (a ``_planning._PlannedEpoch`` whose plan began), else
    the loader's latest (``owner._current``) for batches of another kind."""
    if hasattr(epoch, "progress"):
        return epoch.progress
    return getattr(owner, "_current", None)


def check_unchanged(dataset: Any) -> None:
    """Raises ``rl.StaleIndexError`` when an ``rl.VideoShards`` in ``dataset`` (itself, or
    inside a ``Subset``/``ConcatDataset``) has a shard rewritten since it was indexed: the
    DataLoader's check at ``iter()``, for native clip batches and torch's path alike."""
    from torch.utils.data import ConcatDataset, Subset

    from ..sources.video_folder import VideoShards

    todo = [dataset]
    while todo:
        d = todo.pop()
        if isinstance(d, VideoShards):
            d.check_unchanged()
        elif isinstance(d, Subset):
            todo.append(d.dataset)
        elif isinstance(d, ConcatDataset):
            todo += list(d.datasets)
