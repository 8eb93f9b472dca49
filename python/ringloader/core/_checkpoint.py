"""Mid-epoch checkpoints (``DataLoader.state_dict``/``load_state_dict``): the record of the
epoch in progress, resuming a recorded epoch (also onto another world size), and the random
generators a checkpoint saves and sets back. ``_order`` holds the sampler part.

The functions take the loader's backend: what they read and write (``_epoch``, ``_resume``,
``_current``, the samplers and the generator) is the epoch bookkeeping both backends share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from . import _order


class _Progress:
    """What state_dict() needs to know about the epoch in progress."""

    __slots__ = ("epoch", "seed", "sampler_state", "skip", "delivered", "rows", "done")

    def __init__(self, epoch: int, seed: Optional[int], sampler_state: dict, skip: int):
        self.epoch, self.seed, self.sampler_state, self.skip = epoch, seed, sampler_state, skip
        self.delivered = 0
        self.rows = 0  # rows of the next planned batch already delivered (skip refill)
        self.done = False


def _resumed_batches(loader: Any, state: dict, n: int):
    """(the batches of the epoch ``state`` was taken in, sampler state, batches already
    delivered): iteration resumes at that batch of those batches."""
    delivered = int(state["delivered"])
    sampler_state = state["sampler"]
    if sampler_state["kind"] in ("distributed", "resharded", "webdataset",
                                 "webdataset_resharded"):
        target = getattr(loader.batch_sampler, "sampler", loader.sampler)
        rank, world = getattr(target, "rank", 0), getattr(target, "num_replicas", 1)
        if sampler_state["num_replicas"] != world:
            # The new layout's epoch is what remains; its own checkpoints count from there.
            resharded = _order.reshard(sampler_state, delivered, rank, world, loader.batch_size,
                                       loader.drop_last)
            return _order.replay_epoch(resharded, loader.batch_sampler, n), resharded, 0
        # Same world size: this rank's part of the layout, whichever rank wrote the checkpoint.
        sampler_state = dict(sampler_state, rank=rank)
    return _order.replay_epoch(sampler_state, loader.batch_sampler, n), sampler_state, delivered


def _generators(loader: Any) -> list:
    """The random generators an epoch's plan draws from besides torch's global one: the loader's
    ``generator`` (the base seed) and its sampler's (the order), each once."""
    sampler = getattr(loader.batch_sampler, "sampler", loader.sampler)
    found = []
    for g in (loader.generator, getattr(sampler, "generator", None)):
        if g is not None and all(g is not h for h in found):
            found.append(g)
    return found


def _restore_generators(loader: Any, states: Optional[list]) -> None:
    """Sets the loader's generators to a checkpoint's states: the epochs after the resumed one
    then draw their seed and order where the checkpointed run would have (a fresh generator would
    repeat epoch 0's)."""
    for g, state in zip(_generators(loader), states or ()):
        g.set_state(state)


def state_dict(loader: Any) -> dict:
    """``DataLoader.state_dict`` (see its docstring) of a backend."""
    if not loader.resumable:
        raise TypeError("state_dict() needs a map-style dataset with batches (batch_size or batch_sampler): "
                        "an IterableDataset or batch_size=None has no sample order to resume")
    # A loaded checkpoint whose epoch has not begun: the next iter() resumes it. (An iterator
    # made but not begun is begun by the generic path's state_dict first: GenericBackend.)
    if loader._resume is not None:
        return dict(loader._resume)
    it = loader._current
    generators = [g.get_state() for g in _generators(loader)]
    if it is None or it.done:
        state = {"version": 1, "epoch": loader._epoch, "delivered": 0, "complete": True}
        if generators:
            state["generators"] = generators
        return state
    state = {
        "version": 1,
        "epoch": it.epoch,
        "delivered": it.skip + it.delivered,
        "rows": it.rows,
        "complete": False,
        "sampler": it.sampler_state,
        "dataset_size": len(loader.dataset),
    }
    if it.seed is not None:
        state["base_seed"] = it.seed  # the augmentation seed of the epoch
    if generators:
        # Where the epochs after this one draw from: as they are now, the epoch's own draws done.
        state["generators"] = generators
    return state


def load_state_dict(loader: Any, state: dict) -> None:
    """``DataLoader.load_state_dict`` (see its docstring) on a backend."""
    if not loader.resumable:
        raise TypeError("load_state_dict() needs a map-style dataset with batches (batch_size or batch_sampler)")
    if not isinstance(state, Mapping):
        raise TypeError(f"load_state_dict(state): state is a {type(state).__name__}; pass the dict "
                        "a ringloader DataLoader's state_dict() returned")
    if state.get("version") != 1:
        raise ValueError(f"load_state_dict(state): unknown ringloader state version "
                         f"{state.get('version')!r}; pass the dict a ringloader DataLoader's "
                         "state_dict() returned")
    if not state["complete"] and state["dataset_size"] != len(loader.dataset):
        raise ValueError(f"checkpoint is for a dataset of {state['dataset_size']} samples, "
                         f"this one has {len(loader.dataset)}")
    if loader.needs_base_seed and not state["complete"] and "base_seed" not in state:
        raise ValueError("this checkpoint comes from a generic-path loader over a dataset other than "
                         "a ringloader ImageFolder (no base_seed); the native path needs one to "
                         "reproduce its augmentations")
    generators = _generators(loader)
    saved = state.get("generators")
    if saved is not None and len(saved) != len(generators):
        raise ValueError(
            f"checkpoint holds the state of {len(saved)} random generator(s) (the loader's "
            f"generator= and its sampler's), this loader has {len(generators)}: pass the same "
            "generator arguments as the run that wrote it")
    loader._epoch = int(state["epoch"])
    loader._resume = None if state["complete"] else dict(state)
    loader._cancel_queued()  # the next iter() follows the checkpoint, not the prediction
    if state["complete"]:
        _restore_generators(loader, saved)
    # Else the resumed iter() restores them, after any draw of its own (torch's loader draws
    # a base seed at each iter() on the generic path).
