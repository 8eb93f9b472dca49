"""Distributed layout: which rank reads what, from ``rank``/``world_size`` or an initialised
``torch.distributed`` group, as torch's ``DistributedSampler`` (or a source's own order) lays
it out."""

from __future__ import annotations

from typing import Any, Optional

from . import _order
from ._options import _check_int
from ._source import Source


def _shard_sampler(dataset: Any, sampler: Any, batch_sampler: Any, rank: Optional[int],
                   world_size: Optional[int], shuffle: Any, seed: int, drop_last: bool,
                   generator: Any = None):
    """The sampler of the default order when it is not torch's plain one: the source's own
    (``Source.default_sampler``, sharded), else a DistributedSampler when distributed; None
    otherwise.

    Both paths shard the same way: by ``rank``/``world_size`` or an initialised process group,
    and only when the user gave no sampler of their own.
    """
    import torch.utils.data as tud

    if sampler is not None or batch_sampler is not None:
        if rank is not None or world_size is not None:
            raise ValueError("rank/world_size shard the default sampler; they are mutually "
                             "exclusive with sampler and batch_sampler (use a DistributedSampler)")
        return None
    rank, world_size = _distributed_layout(rank, world_size)
    # A source's own order; a Dataset read in its own order (ringloader.Parquet(copy=False))
    # names it as _default_sampler.
    default = dataset.default_sampler if isinstance(dataset, Source) else \
        getattr(dataset, "_default_sampler", None)
    if default is not None:
        own = default(world_size, rank, bool(shuffle), seed, drop_last, generator)
        if own is not None:
            return own
    if world_size is None:
        return None
    return tud.distributed.DistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                              shuffle=bool(shuffle), seed=seed, drop_last=drop_last)


def _sync_epoch(loader: Any) -> None:
    """A source's own order (``_order.ShardOrder``) takes the loader's epoch (its count of
    iter() calls, or set_epoch's)."""
    target = getattr(loader.batch_sampler, "sampler", loader.sampler)
    if isinstance(target, _order.ShardOrder):
        target.set_epoch(loader._epoch)


def _distributed_layout(rank: Optional[int], world_size: Optional[int]):
    """(rank, world_size) from the arguments or an initialised torch.distributed group."""
    if rank is None and world_size is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return None, None
    if rank is None or world_size is None:
        raise ValueError("rank and world_size must be given together")
    world_size = _check_int("world_size", world_size, 1)
    rank = _check_int("rank", rank, 0)
    if rank >= world_size:
        raise ValueError(f"rank should be in [0, world_size), got rank={rank} world_size={world_size}")
    return rank, world_size
