"""What the generic path asks a native dataset for, a sample and the seed of its augmentations
(``SampleKey``), the seed of a sample's Python tail drawn from it as the native pipeline draws
its own (``tail_seed``), and a function run with the global RNGs seeded from it."""

from __future__ import annotations

import contextlib
import os
import random
import threading
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from .. import _C

_MASK64 = (1 << 64) - 1


class SampleKey(NamedTuple):
    """What ``ringloader.DataLoader``'s generic path asks an :class:`ImageFolder` for: a sample and
    the seed of its augmentations, (base seed, epoch, index and position of the sample in the
    epoch). The DataLoader always gives epoch 0, as to its native path: its base seed, drawn
    anew at each ``iter()``, is what tells epochs apart."""

    index: int
    seed: int
    epoch: int
    position: int

    def row_key(self) -> int:
        """The key of this sample's per-sample seed, as the native pipeline's RowKey: the index
        when the sample sits at its own position, else the index with (position ^ index) in the
        high 32 bits."""
        return _C.row_key(self.index, self.position)


def tail_seed(key: SampleKey) -> int:
    """The seed of the Python tail of ``key``'s sample: the native pipeline's per-sample seed,
    SampleSeed(seed, epoch, row key), mixed once more so the two draw independently."""
    seed = _C.sample_seed(key.seed & _MASK64, key.epoch & _MASK64, key.row_key())
    return _C.mix64((seed + 1) & _MASK64)


# Held while a function runs on the seeded global RNGs: two threads iterating loaders at once (a
# Joint's or a dataset's Python tail runs in the iterating thread) would otherwise draw from, and
# restore, each other's seeds.
_SEEDED = threading.RLock()


def _release_seeded() -> None:
    _SEEDED.release()


if hasattr(os, "register_at_fork"):
    # A fork waits for the lock, so that no child is born with it held by a thread it does not
    # have (a tail thread mid-draw, say), which would deadlock the child's first draw; parent
    # and child then let it go.
    os.register_at_fork(before=_SEEDED.acquire, after_in_parent=_release_seeded,
                        after_in_child=_release_seeded)


def _run_seeded(fn: Callable[[Any], Any], value: Any, seed: int) -> Any:
    """``fn(value)`` with torch's, Python's and numpy's global RNGs seeded from ``seed``. In the
    main process the caller's RNG states are restored afterwards (a worker process owns its own).
    One thread at a time (``_SEEDED``), so that the draws are the seed's whatever other threads
    of ringloader do; a thread of the caller's own that draws from those generators meanwhile
    still shares them."""
    import torch
    import torch.utils.data as tud

    in_main = tud.get_worker_info() is None
    with _SEEDED:
        if in_main:
            saved = torch.default_generator.get_state(), random.getstate(), np.random.get_state()
        try:
            torch.default_generator.manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed & 0xFFFFFFFF)
            return fn(value)
        finally:
            if in_main:
                torch.default_generator.set_state(saved[0])
                random.setstate(saved[1])
                np.random.set_state(saved[2])


@contextlib.contextmanager
def one_intra_op_thread() -> Iterator[None]:
    """torch's kernels on one intra-op thread meanwhile, as in torch's DataLoader workers, then
    the caller's count again. A v2 step's float reductions (a contrast's mean) sum in an order
    that depends on that count, so a Joint's steps run so on every path (the iterating thread's
    tail, ``materialize``, worker processes); and beside the busy decode threads torch's thread
    team would wait for them spinning (the ssd preset's tensor backend ran 5x slower with 2 on
    2 cores)."""
    import torch

    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
