"""What :class:`ringloader.DataLoader` delegates to: one backend per loader, chosen once.

* ``_native.NativeBackend``: the source's samples read, decoded, transformed and batched by the
  native pipeline (``_C.Loader``).
* ``_generic.GenericBackend``: torch's ``DataLoader`` does the work; ringloader adds sharding,
  device staging and checkpoints.

The protocol is :class:`Backend`: the torch surface (``__len__``, ``__iter__``, ``set_epoch``,
``state_dict``/``load_state_dict``) plus ``stats``, ``describe`` and ``close``, and the
attributes torch's DataLoader exposes (``dataset``, ``batch_size``, ``sampler``...). The epoch
bookkeeping both backends share (``_epoch``, ``_resume``, ``_current``) changes only through
``take_resume``/``begin_epoch`` (an epoch starting), ``set_epoch`` and ``_checkpoint``
(``load_state_dict``); ``_planning`` and ``_distributed`` read it. ``skipped_too_much``: the
error both backends raise when an epoch skips more than ``max_skipped_fraction``.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

from ..core import _checkpoint

__all__ = ["Backend"]


class Backend:
    """The base of both backends: checkpoints and ``set_epoch``, shared; the rest per backend."""

    #: Whether the native pipeline batches (``DataLoader.native``).
    native = False
    #: A checkpoint of the native path needs the epoch's base seed (its augmentations).
    needs_base_seed = False

    def __init__(self, dataset: Any, args: Any):
        self.dataset = dataset
        self.num_workers = args.num_workers
        self.timeout = float(args.timeout)
        self.pin_memory = bool(args.pin_memory)
        self.generator = args.generator
        self.collate_fn: Any = None
        self.batch_transform: Any = None
        self.batch_size: Optional[int] = None
        self.drop_last = False
        self.sampler: Any = None
        self.batch_sampler: Any = None
        self._epoch = 0
        self._resume: Optional[dict] = None
        self._current: Optional[_checkpoint._Progress] = None

    # ---- per backend ----------------------------------------------------------------------------

    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError

    def stats(self) -> dict:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        """Stops whatever runs in the background (when the backend is collected: the DataLoader
        and its iterators hold it)."""

    @property
    def resumable(self) -> bool:
        """Whether the epoch has a sample order a checkpoint can resume."""
        return True

    def _cancel_queued(self) -> None:
        """Drops work done ahead for a predicted next epoch (none by default)."""

    # ---- shared -------------------------------------------------------------------------------

    def take_resume(self) -> Optional[dict]:
        """The checkpoint ``load_state_dict`` left for the next epoch, or None; it is used once."""
        resume, self._resume = self._resume, None
        return resume

    def begin_epoch(self, seed: Optional[int], sampler_state: dict, skip: int,
                    rows: int = 0) -> _checkpoint._Progress:
        """Records the epoch that starts now (``state_dict`` reads the record; the iterator
        updates what it delivered) and counts it: the next one is ``epoch + 1``. ``rows``: of a
        checkpoint taken inside a refilled batch (on_error="skip" with drop_last), the rows of
        the next batch it had delivered, recorded from the start so that a ``state_dict()``
        before any batch keeps them."""
        self._current = _checkpoint._Progress(self._epoch, seed, sampler_state, skip)
        self._current.rows = rows
        self._epoch += 1
        return self._current

    def set_epoch(self, epoch: int) -> None:
        target = getattr(self.batch_sampler, "sampler", self.sampler)
        if hasattr(target, "set_epoch"):
            target.set_epoch(epoch)
        self._epoch = int(epoch)

    def state_dict(self) -> dict:
        return _checkpoint.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        _checkpoint.load_state_dict(self, state)


def skipped_too_much(skipped: int, planned: int, fraction: float, recent: Any, what: str,
                     causes: str) -> RuntimeError:
    """The error of an epoch under ``on_error="skip"`` that skipped ``skipped`` of the
    ``planned`` ``what`` (samples, clips) it reads, more than ``fraction``: lost data
    (``causes``), not a few bad ones. ``recent``: the places of the last errors, oldest first;
    the last three distinct are named."""
    lost = list(dict.fromkeys(reversed(list(recent))))
    return RuntimeError(
        f"ringloader.DataLoader: this epoch skipped {skipped} of the {planned} {what} it reads "
        f"(on_error='skip'), more than max_skipped_fraction={fraction:g} of them: that is lost "
        f"data ({causes}), not a few bad {what}. Last errors: {'; '.join(lost[:3]) or 'none recorded'}. "
        f"Fix the source, or pass max_skipped_fraction=1 to train on what is left.")
