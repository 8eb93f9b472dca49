"""Epoch planning: each epoch's order drawn once, as torch would draw it, and the next epoch's
predicted ahead so the native pipeline can read it while this one is delivered (``_Ahead``);
the generic path's batch sampler that plans through torch's loader (``_PlannedBatches``).

The functions take the loader's backend (its samplers, generator and epoch bookkeeping).
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Iterator, List, Optional

import numpy as np

from ..core import _order
from ..core._checkpoint import _generators, _restore_generators, _resumed_batches
from ..core._distributed import _sync_epoch
from ..core._sample_keys import _SEEDED, SampleKey
from ..core._source import file_identity


# The epoch number the DataLoader gives the per-sample augmentation seeds (native SampleSeed and
# the hybrid path's SampleKey): always 0, so a sample's augmentations follow from the base seed
# drawn at iter() (and its index and position) alone, as torch's worker seeds follow from its
# base seed: torch.manual_seed(s) before iter() repeats the epoch's augmentations too. Epochs
# still differ, each iter() drawing a new base seed.
_AUGMENT_EPOCH = 0


def _attributes(obj: Any) -> dict:
    """A shallow snapshot of ``obj``'s attributes: numbers and strings by value, anything else
    by identity (a sampler's dataset, weights or generator)."""
    return {k: v if isinstance(v, (bool, int, float, str, type(None))) else id(v)
            for k, v in vars(obj).items()}


class _Ahead:
    """The epoch the next ``iter()`` is predicted to plan: its base seed and batches, computed
    with every RNG involved set back afterwards (torch's global one, the loader's and the
    sampler's generators), and the RNG states before and after those draws.

    A guess, never a draw. At the next ``iter()``, if every input of the plan is still what it
    was (the RNG states, the sampler's and batch sampler's attributes, a DistributedSampler's
    epoch as predicted), drawing again would give the very same seed and batches and leave the
    RNGs in the recorded after-states: the plan is used and the RNGs are set to those states,
    so order and RNG consumption are exactly torch's without planning twice. Otherwise it is
    dropped and the epoch planned as usual (and the native loader cancels the queued work).
    """

    def __init__(self, loader: Any):
        import torch

        self.kind = _order._sampler_kind(loader.batch_sampler.sampler)
        sampler = loader.batch_sampler.sampler
        self.generators = _generators(loader)
        saved_epoch = getattr(sampler, "epoch", None)
        if self.kind == "webdataset":
            sampler.epoch = loader._epoch  # what _sync_epoch will set at the next iter()
        if self.kind == "distributed":
            # The next epoch is one more than this one while set_epoch advances it, else the same.
            last, loader._last_sampler_epoch = loader._last_sampler_epoch, saved_epoch
            sampler.epoch = saved_epoch + 1 if last is None or last != saved_epoch else saved_epoch
        self.attributes = (_attributes(loader.batch_sampler), _attributes(sampler))
        self.dataset_len = len(loader.dataset)
        with _SEEDED:  # not while another thread runs a tail on the seeded global RNG
            self.rng_before = torch.get_rng_state()
            self.before = [g.get_state() for g in self.generators]
            try:
                self.seed = int(torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item())
                plan = _order.plan_epoch(loader.batch_sampler, len(loader.dataset))
                self.rng_after = torch.get_rng_state()
                self.after = [g.get_state() for g in self.generators]
            finally:
                torch.set_rng_state(self.rng_before)
                for g, state in zip(self.generators, self.before):
                    g.set_state(state)
                if self.kind in ("distributed", "webdataset"):
                    sampler.epoch = saved_epoch
        self.batches, self.sampler_state = plan.batches, plan.sampler_state
        self.files: Optional[dict] = None  # set by the caller before the epoch is queued
        self.flat, self.offsets = _order.to_arrays(plan.batches)
        if loader._index_map is not None:
            self.flat = loader._index_map[self.flat]

    def miss(self, loader: Any) -> Optional[str]:
        """None when the prediction holds now; else "rng" (torch's RNG was drawn from in
        between) or "inputs" (set_epoch, a changed sampler...)."""
        import torch

        sampler = loader.batch_sampler.sampler
        if (_attributes(loader.batch_sampler), _attributes(sampler)) != self.attributes:
            return "inputs"
        if len(loader.dataset) != self.dataset_len:  # samples reassigned
            return "inputs"
        if not torch.equal(torch.get_rng_state(), self.rng_before):
            return "rng"
        if any(not torch.equal(g.get_state(), state) for g, state in zip(self.generators, self.before)):
            return "rng"
        return None

    def draw(self) -> None:
        """Leaves the RNGs as drawing the plan would have."""
        import torch

        with _SEEDED:
            torch.set_rng_state(self.rng_after)
            for g, state in zip(self.generators, self.after):
                g.set_state(state)


def _file_states(loader: Any, flat: np.ndarray) -> dict:
    """{path: (device, inode, size, mtime, ctime) or None if it cannot be stat'ed} of the files
    an epoch read ahead in the order ``flat`` may read before it is adopted (each sample's file
    and its other files: a mask...), and of their directories. Before adoption a queued epoch
    dispatches at most the depth its pipeline may grow to, ``max(prefetch_batches,
    prefetch_max)`` batches, however many slots are free (csrc/pipeline/epoch.h:
    ``Epoch::Adopted``), so only that many leading rows can be read ahead; the rest of the epoch
    is read after adoption, as the files are then."""
    s = loader._native.stats()
    rows = max(s["prefetch_batches"], s["prefetch_max"]) * loader._options["batch_size"]
    ahead = flat[:rows]
    in_memory = getattr(loader, "_in_memory", None)
    if in_memory is not None:
        ahead = ahead[~in_memory[ahead]]  # a sample held in memory reads no file
    files = dict.fromkeys(loader._paths[i] for i in ahead.tolist())
    more = getattr(loader, "_more_files", None)
    if more is not None:
        for i in flat[:rows].tolist():  # a sample in memory may have its mask in a file
            files.update((f, None) for f in more[i] or () if isinstance(f, str))
    folders = dict.fromkeys(os.path.dirname(p) or "." for p in files)
    return {path: _file_state(path) for path in list(folders) + list(files)}


def _file_state(path: str) -> Optional[tuple]:
    """``file_identity(path)``, or None when it cannot be stat'ed."""
    try:
        return file_identity(path)
    except OSError:
        return None


def _changed_files(before: Optional[dict]) -> str:
    """What changed since ``before`` (``_file_states``) was taken, or "" when nothing did."""
    for path, was in (before or {}).items():
        now = _file_state(path)
        if now == was:
            continue
        if now is None or was is None:
            return f"{path} {'disappeared' if now is None else 'appeared'}"
        if now[:2] != was[:2]:
            return f"{path} was replaced (another inode)"
        what = "size" if now[2] != was[2] else "modification time" if now[3] != was[3] else \
            "status change time"
        return f"{path} changed ({what})"
    return ""


def _plan_ahead(loader: Any) -> Optional["_Ahead"]:
    """The next epoch's prediction, or None where the next order cannot be computed without
    side effects (a sampler other than torch's, which might keep its own state)."""
    import torch.utils.data as tud

    if type(loader.batch_sampler) is not tud.BatchSampler:
        return None
    if _order._sampler_kind(loader.batch_sampler.sampler) == "opaque":
        return None
    return _Ahead(loader)


def _peek_seed(generator: Any) -> int:
    """A seed from torch's RNG (``generator``'s, else the global one) without advancing it: the
    generic path's augmentation seed, taken where torch's own RNG use is already done, so the
    RNG stream the caller sees is exactly torch's."""
    import torch

    source = generator if generator is not None else torch.default_generator
    state = source.get_state()
    seed = int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())
    source.set_state(state)
    return seed


def _epoch_seed(seed: int, epoch: int) -> int:
    """The augmentation seed of epoch ``epoch`` with persistent workers, from the seed peeked at
    its start: mixed with the epoch's number, since torch's RNG need not move between such
    epochs (torch's persistent iterator draws no base seed, an unshuffled sampler nothing) while
    torch's workers go on drawing from where they were. Epoch 0 keeps the peeked seed."""
    mixed = (int(seed) ^ (int(epoch) * 0x9E3779B97F4A7C15)) & ((1 << 64) - 1)
    return mixed - (1 << 64) if mixed >= 1 << 63 else mixed


class _PlannedBatches:
    """The generic path's batch sampler: torch's own batch sampler, evaluated as an epoch plan.

    torch's loader iterates it in the main process when it first needs indices, after drawing its
    base seed, the moment torch's own sampler would draw: so order and RNG consumption are
    torch's. Each ``iter()`` gives a :class:`_PlannedEpoch`, planned at its first ``next()`` or
    earlier by a ``state_dict()`` (``GenericBackend.state_dict``). A pending ``load_state_dict``
    replays the recorded epoch from where it stopped.

    With ``keyed``, batches hold :class:`SampleKey` s instead of indices: each sample's
    augmentations are seeded by (base seed, index, position in the epoch), whichever worker
    process makes it, and a resumed epoch keeps the positions (so its samples equal an
    uninterrupted run's). The base seed is peeked from torch's RNG after torch's own draws
    (``_peek_seed``) and saved in ``state_dict``.
    """

    def __init__(self, loader: Any, batch_sampler: Any, dataset_len: int, keyed: bool):
        # The backend weakly: it holds torch's loader, whose persistent iterator holds this
        # sampler, and a strong reference would make a cycle that keeps the worker processes
        # alive after the loader is dropped, until a garbage collection (torch's loader
        # shuts them down at once). Iterating holds the backend (_CountDelivered).
        self._backend = weakref.ref(loader)
        self._inner, self._n, self._keyed = batch_sampler, dataset_len, keyed

    @property
    def _loader(self) -> Any:
        return self._backend()

    def __len__(self) -> int:
        return len(self._inner)

    def __iter__(self) -> "_PlannedEpoch":
        epoch = _PlannedEpoch(self)
        # Until it begins, a state_dict() plans it (torch's loader with no workers asks for the
        # first batch at the first next(); with workers, within iter()). Weakly: an iterator
        # dropped before its first next() drew only its base seed, and no state_dict() plans it.
        self._loader._pending = weakref.ref(epoch)
        self._loader._made = weakref.ref(epoch)  # the epoch of the iter() under way (_CountDelivered)
        return epoch

    def _begin(self) -> Iterator[Any]:
        """Plans the epoch (draws its order, or replays a loaded checkpoint's) and records it:
        the batches it yields, from the first not yet delivered."""
        loader = self._loader
        resume = loader.take_resume()
        if resume is None:
            _sync_epoch(loader)
            plan = _order.plan_epoch(self._inner, self._n)
            batches, sampler_state, skip = plan.batches, plan.sampler_state, 0
            seed = _peek_seed(loader.generator) if self._keyed else None
            if seed is not None and getattr(loader, "_persistent", False):
                seed = _epoch_seed(seed, loader._epoch)
        else:
            batches, sampler_state, skip = _resumed_batches(loader, resume, self._n)
            _restore_generators(loader, resume.get("generators"))
            _undo_base_seed(loader)
            seed = resume.get("base_seed") if self._keyed else None
            if self._keyed and seed is None:
                raise ValueError("this checkpoint has no base_seed (it comes from a loader over another "
                                 "dataset); a ringloader ImageFolder needs it to repeat its augmentations")
        loader.begin_epoch(seed, sampler_state, skip, int(resume.get("rows", 0)) if resume else 0)
        loader._pending = None  # the epoch's own record from here
        if not self._keyed:
            return iter(batches[skip:])
        return self._keys(batches, skip, seed)

    @staticmethod
    def _keys(batches: Any, skip: int, seed: Optional[int]) -> Iterator[List[SampleKey]]:
        position = sum(len(b) for b in batches[:skip])
        for batch in batches[skip:]:
            yield [SampleKey(int(i), seed, _AUGMENT_EPOCH, position + k) for k, i in enumerate(batch)]
            position += len(batch)


class _PlannedEpoch:
    """One ``iter()`` of :class:`_PlannedBatches`: its epoch planned at the first ``next()``, as
    torch's sampler would draw then, or earlier by :meth:`begin` (a ``state_dict()`` before
    that ``next()``), which draws exactly what that ``next()`` would have drawn: the batches
    then follow that plan, drawn once. An error of the plan is raised by whichever of the two
    comes first, and by the ``next()`` after a ``begin()`` that raised it (then the epoch is
    over, as a generator is after its error)."""

    def __init__(self, owner: _PlannedBatches):
        self._owner = owner
        self._batches: Optional[Iterator[Any]] = None
        self._error: Optional[BaseException] = None  # begin()'s, not yet raised by next()
        self.progress: Any = None  # the epoch's record (begin_epoch's), once planned

    def __iter__(self) -> "_PlannedEpoch":
        return self

    def begin(self) -> None:
        """Plans the epoch now, if it has not begun."""
        if self._batches is not None:
            return
        self._batches = iter(())  # planned once, whatever happens
        try:
            self._batches = self._owner._begin()
            self.progress = self._owner._loader._current  # begin_epoch's, just made
        except BaseException as error:
            self._error = error
            pending = self._owner._loader._pending
            if pending is not None and pending() is self:
                self._owner._loader._pending = None  # no plan to record: state_dict() reads the rest
            raise

    def __next__(self) -> Any:
        if self._batches is None:
            try:
                self.begin()
            finally:
                self._error = None  # raised here already
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return next(self._batches)


def _undo_base_seed(loader: Any) -> None:
    """A resumed epoch draws nothing: the base seed torch's iterator drew from the global RNG at
    this ``iter()`` (with no ``generator``; ``GenericBackend.__iter__`` kept the state from
    before it) is taken back, so the epochs after this one draw where the checkpointed run's did
    (from the RNG state saved beside the checkpoint). Only when that one draw is all that
    happened since: persistent workers draw none, and a draw of the script's stays."""
    import torch

    before = getattr(loader, "_rng_at_iter", None)
    loader._rng_at_iter = None
    if before is None or loader.generator is not None:
        return
    with _SEEDED:
        now = torch.get_rng_state()
        torch.set_rng_state(before)
        torch.empty((), dtype=torch.int64).random_()  # torch's base seed, drawn again
        torch.set_rng_state(before if torch.equal(torch.get_rng_state(), now) else now)


class _CountDelivered:
    """Counts the batches the caller received (after torch's prefetching and any device
    staging, which run ahead), for the generic path's state_dict. An iterator, not a generator:
    an error from ``next()`` that says to call again (``SlotsExhaustedError`` of clip batches,
    ``LoaderTimeoutError``) leaves it going on with the same batch. After another error (a
    sample's), torch's iterator goes on with the next batch: the failed one counts as passed once
    the caller asks for more (a checkpoint taken at the error resumes at that batch, one taken
    later does not repeat the batches received since). A generator in between (the timeout or
    device wrappers) ends at any error: so does the iteration here, the epoch not recorded
    complete."""

    def __init__(self, loader: Any, batches: Iterator[Any], epoch: Any = None):
        self._loader, self._batches = loader, batches
        self._epoch = epoch  # the _PlannedEpoch it iterates: its record, whichever epoch began last
        self._progress: Any = None
        self._finished = False
        self._failed = False  # the last next() raised a sample's error: its batch was passed

    def __iter__(self) -> "_CountDelivered":
        return self

    def _count(self) -> None:
        if self._progress is None:
            self._progress = self._record()  # made by _PlannedBatches when torch first drew from it
        if self._progress is not None:
            self._progress.delivered += 1

    def _record(self) -> Any:
        """Its epoch's record (that epoch's plan has begun by now): the one its own plan made,
        never that of an iterator made after it (with workers, each plans at iter())."""
        if self._epoch is not None:
            return self._epoch.progress
        return self._loader._current

    def __next__(self) -> Any:
        import types

        from .._C import LoaderTimeoutError, SlotsExhaustedError

        if self._finished:
            raise StopIteration
        if self._failed:  # the caller goes on past the failed batch
            self._failed = False
            self._count()
        try:
            batch = next(self._batches)
        except StopIteration:
            self._finished = True
            # Its own epoch's (a later iter() may have begun another since).
            progress = self._progress if self._progress is not None else self._record()
            if progress is not None:
                progress.done = True
            raise
        except Exception as error:
            if isinstance(self._batches, types.GeneratorType):
                self._finished = True  # over at its error, whatever it was
            elif not isinstance(error, (SlotsExhaustedError, LoaderTimeoutError)):
                self._failed = True  # else the same batch comes at the next call
            raise
        self._count()
        return batch
