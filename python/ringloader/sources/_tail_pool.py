"""A batch's Joint tails (``_joint_tail``) run on a few threads of their own: v2's colour kernels
on tensors release the GIL, so rows proceed side by side, as torch's worker processes would run
them, instead of one after another in the iterating thread.

The draws stay each row's own: v2 draws from the global generators, so a row's draws are made
first, one row at a time under the seeded generators (``_run_seeded``), in the order v2's
``forward`` makes them (every step's ``make_params`` before any kernel: no kernel draws), and
the kernels then run unlocked with those draws (:func:`drawn_run`). A step whose draws cannot be
made ahead (a ``forward`` of its own, or a ``Grayscale`` to one channel, which changes what the
next steps draw from) runs the whole chain under the lock, as before.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Any, Callable, List, Optional, Sequence

from ..core._sample_keys import _run_seeded

__all__ = ["drawn_run", "run_all"]


def _forwards() -> tuple:
    from torchvision.transforms.v2 import Transform
    from torchvision.transforms.v2._transform import _RandomApplyTransform

    return Transform.forward, _RandomApplyTransform.forward


def _ahead(steps: Sequence[Any]) -> bool:
    """Whether every step's draws can be made before the kernels run."""
    from torchvision.transforms.v2 import RandomApply

    plain = _forwards()
    for step in steps:
        if isinstance(step, RandomApply) and type(step).forward is RandomApply.forward:
            if not _ahead(list(step.transforms)):
                return False
        elif type(step).forward not in plain or (
                type(step).__name__ == "Grayscale" and step.num_output_channels != 3):
            return False
    return True


def _draw(steps: Sequence[Any], value: Any) -> List[Any]:
    """Each step's draws on ``value`` as v2's ``forward`` makes them: None where the step does
    not run (its p), else (whether it transforms the value, its params); a RandomApply's the
    list of its steps' draws."""
    import torch
    from torchvision.transforms.v2 import RandomApply

    random_apply = _forwards()[1]
    out: List[Any] = []
    for step in steps:
        if isinstance(step, RandomApply):
            out.append(None if torch.rand(1) >= step.p else _draw(list(step.transforms), value))
            continue
        step.check_inputs([value])
        if type(step).forward is random_apply and torch.rand(1) >= step.p:
            out.append(None)
            continue
        needs = step._needs_transform_list([value])[0]
        out.append((needs, step.make_params([value] if needs else [])))
    return out


def _apply(steps: Sequence[Any], drawn: List[Any], value: Any) -> Any:
    from torchvision.transforms.v2 import RandomApply

    for step, made in zip(steps, drawn):
        if made is None:
            continue
        if isinstance(step, RandomApply):
            value = _apply(list(step.transforms), made, value)
        elif made[0]:
            value = step.transform(value, made[1])
    return value


_AHEAD: dict = {}


def drawn_run(compose: Any, value: Any, seed: int) -> Any:
    """v2's ``compose`` (a Compose of a tail's steps) on ``value`` with the global generators
    seeded from ``seed``: the same result as ``_run_seeded(compose, value, seed)``, the lock held
    only while the draws are made."""
    steps = list(compose.transforms)
    found = _AHEAD.get(id(compose))
    if found is None or found[0] is not compose:
        if len(_AHEAD) >= 4096:
            _AHEAD.clear()
        found = _AHEAD[id(compose)] = (compose, _ahead(steps))
    if not found[1]:
        return _run_seeded(compose, value, seed)
    drawn = _run_seeded(lambda v: _draw(steps, v), value, seed)
    return _apply(steps, drawn, value)


class _Pool:
    """Threads that run the tails: each sets torch to one intra-op thread for itself when it
    starts (an OpenMP setting of the thread), before the pool is used."""

    def __init__(self, size: int):
        self.tasks: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        ready = threading.Barrier(size + 1)
        for i in range(size):
            threading.Thread(target=self._work, args=(ready,), daemon=True,
                             name=f"rl-tail-{i}").start()
        ready.wait()
        self.size = size

    def _work(self, ready: threading.Barrier) -> None:
        import torch

        torch.set_num_threads(1)  # the caller holds one thread meanwhile (run_all)
        ready.wait()
        while True:
            fn, item, done = self.tasks.get()
            try:
                done(item, fn(item), None)
            except BaseException as error:  # noqa: BLE001 - handed to the caller
                done(item, None, error)


_POOL: Optional[_Pool] = None
_POOL_LOCK = threading.Lock()


def _forget_pool() -> None:
    """In a forked child: the parent's threads are not there; the child starts its own."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _threads() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


def run_all(fn: Callable[[Any], Any], items: Sequence[Any]) -> List[Any]:
    """``[fn(item) for item in items]``, the items run side by side on the tail threads (in the
    calling thread when there is one item or one CPU); the first error raised again here, after
    every item has finished. Call it with torch on one intra-op thread
    (``one_intra_op_thread``): a thread's first start changes torch's count for the process."""
    global _POOL
    if len(items) < 2 or _threads() < 2:
        return [fn(item) for item in items]
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = _Pool(_threads())
    pool = _POOL
    results: List[Any] = [None] * len(items)
    errors: List[BaseException] = []
    left = [len(items)]
    finished = threading.Condition()

    def done(i: int, result: Any, error: Optional[BaseException]) -> None:
        with finished:
            results[i] = result
            if error is not None:
                errors.append(error)
            left[0] -= 1
            finished.notify()

    for i in range(len(items)):
        pool.tasks.put((lambda i: fn(items[i]), i, done))
    with finished:
        finished.wait_for(lambda: left[0] == 0)
    if errors:
        raise errors[0]
    return results
