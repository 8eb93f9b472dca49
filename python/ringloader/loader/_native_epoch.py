"""One epoch of the native backend (``_NativeIter``): the plan drawn as torch's iterator draws
it (or adopted from the epoch read ahead, or resumed from a checkpoint), each source told the
samples it must read, the next epoch queued, and the batches delivered (refilled after skips,
mixed in their slot, rebuilt in a user's structure), with errors named as their source names
them."""

from __future__ import annotations

import os
import re
from typing import Any, Optional, Sequence

import numpy as np

from .. import _C
from . import _mixing
from ..core import _order, _source
from ..core._checkpoint import _restore_generators, _resumed_batches
from ..core._distributed import _sync_epoch
from ._backend import skipped_too_much
from ._planning import _AUGMENT_EPOCH, _changed_files, _file_states, _plan_ahead
from ..core._source import StaleIndexError


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
    return _source.name_rows(error, folders)


def _begin_reads(loader: Any, flat: Optional[np.ndarray]) -> None:
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

    def __init__(self, loader: Any):
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
        # Resumed inside a batch: a state_dict() before this iterator delivers records those rows
        # too, or its resumption would deliver them again.
        self._progress = loader.begin_epoch(self._seed, self._sampler_state, self._skip, self._drop_rows)
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
                self._check_shards(failed=True)  # a rewritten shard: that, not a sample's error
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
            self._check_shards(failed=False)
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

    def _check_shards(self, failed: bool) -> None:
        """Raises ``StaleIndexError`` naming a local ``rl.WebDataset`` shard changed since it was
        indexed, once a sample failed (``failed``, or errors counted since the last check): the
        native reads of a local shard do not compare it mid-epoch, so the rows of a shard
        rewritten after ``iter()``'s check fail, and on_error="replace" or "skip" would pass
        over them (a substitute standing in), though no row of a stale index may be delivered."""
        shards = [f for f in self._loader._folders if f.checks_after_error]
        if not shards or (not failed and self._loader._options["on_error"] == "raise"):
            return
        errors = self._loader._native.stats()["errors"]
        if not failed and errors == getattr(self._loader, "_errors_checked", 0):
            return
        for f in shards:
            f.check_after_error()  # raises again at each later next() while the shard stays stale
        self._loader._errors_checked = errors

    def _check_skipped(self) -> None:
        """Raises once this epoch has skipped more than ``max_skipped_fraction`` of the samples
        it reads: an unreachable server or lost shards, not a few bad samples."""
        stats = self._loader._native.stats()
        skipped = stats["skipped"] - self._skipped_before
        if skipped <= self._skip_limit:
            return
        raise skipped_too_much(skipped, self._planned, self._loader._max_skipped_fraction,
                               [_name_sample(e, self._loader._folders) for e in stats["recent_errors"]],
                               "samples", "a server down, shards or files gone")

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
