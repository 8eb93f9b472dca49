"""``on_error="skip"`` with ``drop_last=True`` on native clip batches: every batch full, as the
image loader keeps its batches (docs/bad-data.md, ``_native_epoch._NativeIter._refilled``).

Rule: the clips of the epoch's planned batches that survive skipping, in epoch order, cut into
batches of ``batch_size``; a short remainder at the end of the epoch is dropped (as
``drop_last`` drops a short last batch). A batch is assembled in the buffer of the planned batch
that completes it (``VideoClipBatches.batch(refill=True)`` keeps all its rows), so it stays
counted in ``max_memory`` as every clip batch is; the clips left over before it are copies
(fewer than one batch). The epoch's checkpoint record says where the next batch begins: the
planned batches passed and the surviving clips of the next one already delivered
(``state["rows"]``, as the image loader records it), so a resumed epoch, even one resumed inside
a refilled batch, delivers the batches the uninterrupted one would have.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from .._C import LoaderTimeoutError, SlotsExhaustedError

__all__ = ["Refilled"]


class Refilled:
    """Full batches of ``batch_size`` clips from ``inner`` (``_video_loader._Prefetched`` or
    ``_WhenAsked`` over ``source.batch(..., refill=True)``: one item per planned batch, its
    ``taken`` the planned batches it has taken), as the module says.

    ``epoch``: the epoch ``inner`` iterates (``_planning._PlannedEpoch``), whose record
    (``progress``, once its plan began) is kept exact here: the loop's count
    (``_planning._CountDelivered``) adds one per batch handed over, and one more at the call
    after an error, which is taken back. That record begins with the surviving clips of the first
    planned batch delivered before the checkpoint the epoch resumes (``rows``, 0 for an epoch
    begun afresh): the epoch's own, whichever checkpoint its plan took, also when
    ``load_state_dict`` came after ``iter()`` or another iterator took the checkpoint.
    ``staged``: device staging takes each batch one ahead of the loop, so the record of a batch
    is set when the one after it has been made (or the epoch ended)."""

    def __init__(self, inner: Any, source: Any, batch_size: int, epoch: Any, staged: bool):
        self._inner, self._source, self._size = inner, source, int(batch_size)
        self._epoch, self._staged = epoch, staged
        self._progress: Any = None
        self._drop = 0  # of the first planned batch: delivered before the checkpoint (bind)
        self._clips: List[Any] = []  # copies of the surviving clips not delivered yet, in order
        self._targets: List[Any] = []
        # The record after the batch handed over, when the clips held are what is left of its
        # planned batch (the next batch may then come from them alone).
        self._carried: Optional[Tuple[int, int]] = None
        self._at: Tuple[int, int] = (0, 0)  # the record after the last batch handed over
        self._made: Optional[Tuple[int, int]] = None  # staged: that of the batch made, not handed over yet
        self._failed = False
        self._done = False
        self._error: Optional[BaseException] = None
        self.bind()

    def __iter__(self) -> "Refilled":
        return self

    def bind(self) -> None:
        """Takes the epoch's record once its plan began, before this iterator changed it: the
        rows it resumes with (``begin_epoch`` recorded them) are dropped from its first planned
        batch."""
        if self._progress is None:
            self._progress = getattr(self._epoch, "progress", None)
            if self._progress is not None:
                self._drop = int(self._progress.rows)
                self._at = (0, self._drop)

    def _record(self, at: Tuple[int, int], counting: int) -> None:
        """Sets the record to ``at`` less the ``counting`` batch the loop's count adds next."""
        if self._progress is not None:
            self._progress.delivered, self._progress.rows = at[0] - counting, at[1]

    def __next__(self) -> Any:
        self.bind()
        if self._failed:  # the loop's count took the last error for a batch passed: none was
            self._failed = False
            self._record(self._at, 0)
        if self._done:
            raise StopIteration
        try:
            if self._error is not None:
                raise self._error
            clips, targets, at = self._assemble()
            targets = self._source.collate(targets)  # its error: this batch's, nothing recorded
        except StopIteration:
            self._done = True  # the surviving clips left over (fewer than a batch) are dropped
            if self._made is not None:  # staged: the last batch made is handed over now
                self._record(self._made, 1)
            raise
        except (SlotsExhaustedError, LoaderTimeoutError):
            raise  # the same batch at the next call, nothing counted
        except Exception:
            self._failed = True  # the next call goes on with the clips after
            raise
        finally:
            self.bind()
        if self._staged:  # the batch made before this one is handed over now
            if self._made is not None:
                self._record(self._made, 1)
            self._made = at
        else:
            self._record(at, 1)
        self._at = at
        return clips, targets

    def _assemble(self) -> Tuple[Any, List[Any], Tuple[int, int]]:
        """The next full batch: its clips, its targets and the record after it."""
        import torch

        size = self._size
        if self._carried is not None and len(self._targets) >= size:
            # A planned batch left a batch or more (a checkpoint of larger batches resumed
            # with a smaller batch_size replays its planned batches): the next comes from it.
            number, rows = self._carried
            held = torch.cat(self._clips)
            rest, batch_targets = held[size:], self._targets[:size]
            self._clips, self._targets = ([rest.clone()] if len(rest) else []), self._targets[size:]
            self._carried = (number, rows + size) if self._targets else None
            return held[:size], batch_targets, (self._carried or (number + 1, 0))
        while True:
            clips, targets = next(self._inner)
            self.bind()  # the plan has begun by now (at the first batch made when asked)
            number = self._inner.taken - 1  # of this planned batch, counted from the epoch's start here
            # Resumed inside the first planned batch: its first surviving clips were delivered.
            first, self._drop = (min(self._drop, len(targets)) if number == 0 else 0), 0
            have, n = len(self._targets), len(targets)
            if n > first and self._clips and tuple(clips.shape[1:]) != tuple(self._clips[0].shape[1:]):
                names = getattr(targets, "names", None)
                where = f"{names[first]}: " if names and len(names) > first else ""
                self._error = ValueError(
                    f"{where}on_error='skip' with drop_last=True fills each clip batch with the clips of the "
                    f"next planned batch, but those are {list(clips.shape[1:])} and the batch's "
                    f"{list(self._clips[0].shape[1:])}: give every clip one size (a Resize or crop "
                    "in the transform), or pass drop_last=False (a batch is then short by its "
                    "skipped clips)")
                raise self._error
            if have + n - first < size:  # not enough yet: keep copies, free the buffer
                if n > first:
                    self._clips.append(clips[first:n].clone())
                    self._targets += targets[first:n]
                del clips  # its buffer freed now, not while the next batch waits for room in the slots
                continue
            take = size - have
            left = (clips[first + take : n].clone(), targets[first + take : n]) if first + take < n else None
            out = clips if clips.shape[0] >= size else \
                torch.empty((size,) + tuple(clips.shape[1:]), dtype=clips.dtype)
            if have != first or out is not clips:
                out[have:size] = clips[first : first + take].clone() if out is clips else clips[first : first + take]
            if have:
                out[:have] = torch.cat(self._clips)
            batch_targets = self._targets + targets[first : first + take]
            self._clips, self._targets = ([left[0]], list(left[1])) if left is not None else ([], [])
            self._carried = (number, first + take) if left is not None else None
            return out[:size], batch_targets, ((number, first + take) if left is not None else (number + 1, 0))

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()
