"""Epoch order for the native path: torch's samplers, made replayable from a few integers.

For the samplers torch ships, the order of an epoch follows from a handful of numbers (a seed, the
epoch, the shard layout), so a checkpoint stores those numbers, never the order itself:

* ``SequentialSampler``: nothing.
* ``RandomSampler`` without a generator: the seed it draws from torch's global RNG.
* ``RandomSampler`` with a generator: that generator's state before the draw (torch's RNG state;
  the one case that is bytes rather than integers).
* ``DistributedSampler``: seed, epoch, shuffle, drop_last, num_replicas, rank.
* ``WeightedRandomSampler``, ``SubsetRandomSampler`` and ``RandomSampler`` with replacement or
  ``num_samples``: torch's global RNG state before the draw (and their generator's, if any), as
  bytes. These draw only from torch's RNGs, so setting them back replays the epoch.
* an epoch resumed onto another world size ("resharded"): the checkpoint it was resumed from,
  how many batches each old rank had delivered, and the new num_replicas and rank; nested as
  deep as the run was resharded, so a resharded epoch can be checkpointed and resharded again.
* a ``WebDataset`` epoch ("webdataset", see ``ringloader.webdataset.WebDatasetSampler``): seed,
  epoch, shuffle, drop_last, num_replicas, rank, shuffle_buffer; resharded onto another world
  size as "webdataset_resharded", nested the same way.

Any other sampler is evaluated as it is; resuming it needs a ``state_dict``/``load_state_dict``
pair on the sampler, else ``load_state_dict`` explains what is missing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Any, Dict, Iterator, List, Optional

import numpy as np

__all__ = ["Batches", "EpochPlan", "ShardOrder", "plan_epoch", "replay_epoch", "reshard", "to_arrays", "webdataset_order"]


class Batches(Sequence):
    """The batches of an epoch as two int64 arrays, all indices in order and where each batch
    starts (``offsets``, one more than there are batches): a 1.28M-sample epoch is planned
    without a Python int per index. Reads as a list of lists of ints (``len``, ``batches[i]``,
    slices, iteration, ``==`` with a list)."""

    __slots__ = ("flat", "offsets")

    def __init__(self, flat: np.ndarray, offsets: np.ndarray):
        self.flat, self.offsets = flat, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            lo, hi, step = key.indices(len(self))
            if step != 1:
                return [self[i] for i in range(lo, hi, step)]
            return Batches(self.flat, self.offsets[lo:max(lo, hi) + 1])
        i = int(key)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("batch index out of range")
        return self.flat[self.offsets[i]:self.offsets[i + 1]].tolist()

    def __iter__(self) -> Iterator[List[int]]:
        bounds = self.offsets.tolist()
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            yield self.flat[lo:hi].tolist()

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, (Batches, list, tuple)):
            return len(self) == len(other) and all(list(a) == list(b) for a, b in zip(self, other))
        return NotImplemented

    def arrays(self):
        """(flat indices, offsets from 0)."""
        lo, hi = int(self.offsets[0]), int(self.offsets[-1])
        return self.flat[lo:hi], self.offsets - lo


@dataclass
class EpochPlan:
    """Batches of one epoch for this rank, plus what is needed to replay them."""

    batches: Sequence[List[int]]
    sampler_state: Dict[str, Any] = field(default_factory=dict)


def _batch(indices: Any, batch_size: int, drop_last: bool) -> Batches:
    """``indices`` (a list or an int64 array) cut as torch's BatchSampler cuts them."""
    flat = np.asarray(indices, dtype=np.int64)
    n = len(flat)
    if drop_last:
        n -= n % batch_size
    offsets = np.append(np.arange(0, n, batch_size, dtype=np.int64), np.int64(n))
    return Batches(flat[:n], offsets)


def _distributed_order(n: int, seed: int, epoch: int, shuffle: bool, drop_last: bool,
                       num_replicas: int) -> List[int]:
    """torch.utils.data.DistributedSampler's padded (or truncated) global order."""
    import torch

    if shuffle:
        g = torch.Generator()
        g.manual_seed(seed + epoch)
        order = torch.randperm(n, generator=g).tolist()
    else:
        order = list(range(n))
    if drop_last and n % num_replicas != 0:
        per_rank = math.ceil((n - num_replicas) / num_replicas)
    else:
        per_rank = math.ceil(n / num_replicas)
    total = per_rank * num_replicas
    if not drop_last:
        padding = total - len(order)
        if padding <= len(order):
            order += order[:padding]
        else:
            order += (order * math.ceil(padding / len(order)))[:padding]
    else:
        order = order[:total]
    return order


def _random_order(n: int, seed: int) -> np.ndarray:
    import torch

    g = torch.Generator()
    g.manual_seed(seed)
    return torch.randperm(n, generator=g).numpy()


def _generator_order(n: int, generator: Any) -> np.ndarray:
    """What RandomSampler(generator=...) yields (num_samples = n, no replacement), drawn as it
    draws: one randperm(n), then the randperm its tail slice ``[:num_samples % n]`` takes
    (empty, but drawn once iteration runs to the end, as a BatchSampler's does)."""
    import torch

    order = torch.randperm(n, generator=generator).numpy()
    torch.randperm(n, generator=generator)
    return order


def _sampler_kind(sampler: Any) -> str:
    import torch.utils.data as tud

    if type(sampler) is tud.SequentialSampler:
        return "sequential"
    if type(sampler) is tud.RandomSampler and not sampler.replacement and \
            sampler._num_samples is None:
        return "random"
    if isinstance(sampler, tud.distributed.DistributedSampler):
        return "distributed"
    if _is_webdataset_sampler(sampler):
        return "webdataset"
    if type(sampler) in (tud.RandomSampler, tud.WeightedRandomSampler, tud.SubsetRandomSampler):
        return "torch_rng"
    return "opaque"


def _replay_rng(state: Dict[str, Any], batch_sampler: Any) -> List[List[int]]:
    """A ``torch_rng`` epoch: the batches drawn with torch's RNG states set back to the recorded
    ones; the caller's states are restored afterwards."""
    import torch

    generator = batch_sampler.sampler.generator
    saved, saved_generator = torch.get_rng_state(), None
    torch.set_rng_state(state["rng_state"])
    if state["generator_state"] is not None:
        saved_generator = generator.get_state()
        generator.set_state(state["generator_state"])
    try:
        return [list(b) for b in batch_sampler]
    finally:
        torch.set_rng_state(saved)
        if saved_generator is not None:
            generator.set_state(saved_generator)


def plan_epoch(batch_sampler: Any, dataset_len: int) -> EpochPlan:
    """Evaluate one epoch of ``batch_sampler`` exactly as torch would, recording replay state.

    Consumes torch's RNG exactly as iterating the sampler does.
    """
    import torch
    import torch.utils.data as tud

    if type(batch_sampler) is not tud.BatchSampler:
        state = {"kind": "opaque"}
        if hasattr(batch_sampler, "state_dict"):
            state["state"] = batch_sampler.state_dict()
        return EpochPlan([list(b) for b in batch_sampler], state)
    sampler, bs, drop = batch_sampler.sampler, batch_sampler.batch_size, batch_sampler.drop_last
    kind = _sampler_kind(sampler)
    common = {"batch_size": bs, "drop_last": drop}
    if kind == "sequential":
        return EpochPlan(_batch(np.arange(dataset_len, dtype=np.int64), bs, drop),
                         {"kind": kind, **common})
    if kind == "random" and sampler.generator is None:
        # RandomSampler.__iter__: a seed from the global RNG, then randperm on a fresh generator.
        seed = int(torch.empty((), dtype=torch.int64).random_().item())
        return EpochPlan(_batch(_random_order(dataset_len, seed), bs, drop),
                         {"kind": "random", "seed": seed, **common})
    if kind == "random":
        state = {"kind": "random_generator", "generator_state": sampler.generator.get_state(), **common}
        if len(sampler.data_source) != dataset_len:
            return EpochPlan([list(b) for b in batch_sampler], state)
        return EpochPlan(_batch(_generator_order(dataset_len, sampler.generator), bs, drop), state)
    if kind == "distributed":
        s = sampler
        state = {"kind": "distributed", "seed": int(s.seed), "epoch": int(s.epoch),
                 "shuffle": bool(s.shuffle), "sampler_drop_last": bool(s.drop_last),
                 "num_replicas": int(s.num_replicas), "rank": int(s.rank), **common}
        order = _distributed_order(dataset_len, s.seed, s.epoch, s.shuffle, s.drop_last, s.num_replicas)
        return EpochPlan(_batch(order[s.rank::s.num_replicas], bs, drop), state)
    if kind == "webdataset":
        state = dict(sampler.state(), **common)
        return EpochPlan(_batch(webdataset_order(state, sampler.shard_sizes), bs, drop),
                         state)
    if kind == "torch_rng":
        generator = sampler.generator
        state = {"kind": kind, "rng_state": torch.get_rng_state(),
                 "generator_state": None if generator is None else generator.get_state(), **common}
        return EpochPlan([list(b) for b in batch_sampler], state)
    state = {"kind": "opaque", **common}
    if hasattr(sampler, "state_dict"):
        state["state"] = sampler.state_dict()
    return EpochPlan([list(b) for b in batch_sampler], state)


def replay_epoch(state: Dict[str, Any], batch_sampler: Any, dataset_len: int) -> List[List[int]]:
    """The batches of the epoch ``state`` was recorded in, without consuming any RNG."""
    kind = state["kind"]
    bs, drop = state.get("batch_size"), state.get("drop_last")
    if kind == "sequential":
        return _batch(np.arange(dataset_len, dtype=np.int64), bs, drop)
    if kind == "random":
        return _batch(_random_order(dataset_len, state["seed"]), bs, drop)
    if kind == "random_generator":
        sampler = batch_sampler.sampler
        generator = sampler.generator
        saved = generator.get_state()
        generator.set_state(state["generator_state"])
        try:
            if len(sampler.data_source) == dataset_len:
                return _batch(_generator_order(dataset_len, generator), bs, drop)
            return [list(b) for b in batch_sampler]
        finally:
            generator.set_state(saved)
    if kind == "torch_rng":
        return _replay_rng(state, batch_sampler)
    if kind in ("webdataset", "webdataset_resharded"):
        sizes = batch_sampler.sampler.shard_sizes
        if state.get("num_shards", len(sizes)) != len(sizes):
            raise ValueError(f"checkpoint is for a WebDataset of {state['num_shards']} shards, "
                             f"this one has {len(sizes)}")
        return _batch(webdataset_order(state, sizes), bs, drop)
    if kind in ("distributed", "resharded"):
        order, _ = _global_order(state, dataset_len)
        return _batch(order[state["rank"]::state["num_replicas"]], bs, drop)
    target = getattr(batch_sampler, "sampler", batch_sampler)
    if "state" in state and hasattr(target, "load_state_dict"):
        target.load_state_dict(state["state"])
        return [list(b) for b in batch_sampler]
    raise ValueError(
        "cannot resume: the sampler is none of torch's Sequential-, Random-, WeightedRandom-, "
        "SubsetRandom- or DistributedSampler and has no state_dict()/load_state_dict(); give it "
        "that pair to make it resumable"
    )


def _global_order(state: Dict[str, Any], dataset_len: int):
    """(order, real) of a distributed or resharded epoch: the padded global order whose position
    p belongs to rank p % num_replicas, and how many leading positions are real (not padding)."""
    if state["kind"] == "distributed":
        order = _distributed_order(dataset_len, state["seed"], state["epoch"], state["shuffle"],
                                   state["sampler_drop_last"], state["num_replicas"])
        return order, min(dataset_len, len(order))
    if state["kind"] != "resharded":
        raise ValueError("resuming onto a different world size needs a DistributedSampler checkpoint")
    parent = state["parent"]
    order, real = _global_order(parent, dataset_len)
    consumed = state["parent_delivered"] * parent["batch_size"] * parent["num_replicas"]
    remaining = order[consumed:real] if consumed < real else []
    world = state["num_replicas"]
    per_rank = math.ceil(len(remaining) / world)
    padded = remaining + (remaining * world)[: per_rank * world - len(remaining)]
    return padded, len(remaining)


def reshard(state: Dict[str, Any], delivered: int, new_rank: int, new_world: int, batch_size: int,
            drop_last: bool) -> Dict[str, Any]:
    """The sampler state of an epoch recorded on another world size, finished on ``new_world``.

    Rule: with the old layout, every rank had delivered ``delivered`` batches of ``batch_size``, so
    the first ``delivered * batch_size * old_world`` positions of the epoch's global order are done
    (shards interleave: rank r holds positions r, r + W, ...). The rest of the real (unpadded)
    order is dealt round-robin to the new ranks, padded from its own head so every rank gets the
    same count. Every sample not yet seen is seen exactly once, plus that padding. Replay the
    result with :func:`replay_epoch`; it can itself be checkpointed and resharded again.
    """
    if state["kind"] in ("webdataset", "webdataset_resharded"):
        return {"kind": "webdataset_resharded", "parent": state, "parent_delivered": int(delivered),
                "num_replicas": int(new_world), "rank": int(new_rank), "batch_size": batch_size,
                "drop_last": drop_last, "num_shards": state.get("num_shards")}
    if state["kind"] not in ("distributed", "resharded"):
        raise ValueError("resuming onto a different world size needs a DistributedSampler checkpoint")
    return {"kind": "resharded", "parent": state, "parent_delivered": int(delivered),
            "num_replicas": int(new_world), "rank": int(new_rank), "batch_size": batch_size,
            "drop_last": drop_last}


def to_arrays(batches: Sequence[List[int]]):
    """(flat indices, offsets) int64 arrays for the native loader."""
    if isinstance(batches, Batches):
        return batches.arrays()
    sizes = np.fromiter((len(b) for b in batches), dtype=np.int64, count=len(batches))
    offsets = np.zeros(len(batches) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    flat = np.fromiter((i for b in batches for i in b), dtype=np.int64, count=int(offsets[-1]))
    return flat, offsets


# ---- WebDataset epochs ----------------------------------------------------------------------

_WDS_FIELDS = ("seed", "epoch", "shuffle", "sampler_drop_last", "shuffle_buffer")


class ShardOrder:
    """Base of a sampler whose epoch order is :func:`webdataset_order` of its ``state()`` (a
    dict of the integers named in the module docstring, kind "webdataset") over its
    ``shard_sizes``. The loader sets its ``epoch`` to its own count of epochs (``set_epoch``),
    and a streamed source accepts no other order. ``ringloader.webdataset.WebDatasetSampler``
    is one; this module depends on no source, so sources may depend on it."""

    shard_sizes: List[int]
    epoch: int

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def state(self) -> Dict[str, Any]:
        raise NotImplementedError

    def indices(self) -> List[int]:
        return webdataset_order(self.state(), self.shard_sizes).tolist()

    def __iter__(self):
        return iter(self.indices())


def _is_webdataset_sampler(sampler: Any) -> bool:
    return isinstance(sampler, ShardOrder)


def _wds_root(state: Dict[str, Any]) -> Dict[str, Any]:
    while state["kind"] == "webdataset_resharded":
        state = state["parent"]
    return state


def _wds_depth(state: Dict[str, Any]) -> int:
    depth = 0
    while state["kind"] == "webdataset_resharded":
        state, depth = state["parent"], depth + 1
    return depth


def _wds_layout(n: int, world: int, rank: int, drop_last: bool) -> np.ndarray:
    """Positions of rank ``rank``'s contiguous part of a sequence of ``n`` (padded by wrapping
    round when ``drop_last`` is False; positions >= n stand for position p % n)."""
    per_rank = n // world if drop_last else -(-n // world)
    return np.arange(rank * per_rank, (rank + 1) * per_rank, dtype=np.int64)


def _buffer_shuffle(items: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """A bounded shuffle buffer: fill ``size`` items, then each step emits a random buffered item
    and puts the next input in its place; the rest leaves in a random order."""
    n = len(items)
    size = min(size, n)
    if size <= 1:
        return items.copy()
    out = np.empty(n, dtype=items.dtype)
    buffer = items[:size].tolist()
    picks = rng.integers(0, size, n - size).tolist()
    k = 0
    for item, j in zip(items[size:].tolist(), picks):
        out[k] = buffer[j]
        buffer[j] = item
        k += 1
    out[k:] = np.asarray(buffer, dtype=items.dtype)[rng.permutation(size)]
    return out


def _wds_sequence(state: Dict[str, Any], shard_sizes: List[int]) -> np.ndarray:
    """The global sequence of the epoch's layer ``state`` (sample indices, unpadded)."""
    if state["kind"] == "webdataset":
        starts = np.concatenate([[0], np.cumsum(shard_sizes, dtype=np.int64)])
        shards = np.arange(len(shard_sizes))
        if state["shuffle"]:
            rng = np.random.default_rng([state["seed"] & 0xFFFFFFFFFFFFFFFF, state["epoch"], 0])
            shards = rng.permutation(len(shard_sizes))
        parts = [np.arange(starts[s], starts[s + 1], dtype=np.int64) for s in shards]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    # Resharded: what the parent layer had not delivered, in its order.
    parent = state["parent"]
    sequence = _wds_sequence(parent, shard_sizes)
    n, world = len(sequence), parent["num_replicas"]
    drop = _wds_root(parent)["sampler_drop_last"]
    real = (n // world) * world if drop else n
    done = np.zeros(max(n, 1), dtype=bool)
    take = state["parent_delivered"] * parent["batch_size"]
    for rank in range(world):
        positions = _wds_positions(parent, sequence, rank)[:take]
        done[positions[positions < n]] = True
    return sequence[:real][~done[:real]]


def _wds_positions(state: Dict[str, Any], sequence: np.ndarray, rank: int) -> np.ndarray:
    """Rank ``rank``'s positions in ``sequence`` for the layer ``state``, after the buffer
    (positions >= len(sequence) are padding: position p % len(sequence) again)."""
    root = _wds_root(state)
    positions = _wds_layout(len(sequence), state["num_replicas"], rank, root["sampler_drop_last"])
    if root["shuffle"] and root["shuffle_buffer"] > 1:
        rng = np.random.default_rng([root["seed"] & 0xFFFFFFFFFFFFFFFF, root["epoch"], 1,
                                     _wds_depth(state), rank])
        positions = _buffer_shuffle(positions, root["shuffle_buffer"], rng)
    return positions


def webdataset_order(state: Dict[str, Any], shard_sizes: List[int]) -> np.ndarray:
    """Sample indices of one rank's epoch of a WebDataset (the rule of
    ``ringloader.webdataset.WebDatasetSampler``; a resharded epoch: what no old rank delivered,
    in the old global order, laid out again over the new ranks by the same rule)."""
    sequence = _wds_sequence(state, [int(s) for s in shard_sizes])
    if len(sequence) == 0:
        return np.zeros(0, dtype=np.int64)
    return sequence[_wds_positions(state, sequence, state["rank"]) % len(sequence)]
