"""The DataLoader's argument checks and what ``num_workers="auto"`` chooses: plain functions
of the arguments, shared by both backends, each error naming the argument."""

from __future__ import annotations

import os
from typing import Any, Optional, Tuple

import numpy as np

from .. import _C
from . import _node, _sizes


_DTYPES = ("uint8", "float32", "float16", "bfloat16")


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} should be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} should be >= {minimum}, got {value}")
    return int(value)


def _check_workers(num_workers: Any) -> Any:
    """``num_workers``: an int >= 0 (torch's meaning) or ``"auto"``."""
    if isinstance(num_workers, str):
        if num_workers != "auto":
            raise ValueError(f"num_workers should be an int >= 0 or 'auto', got {num_workers!r}")
        return "auto"
    return _check_int("num_workers", num_workers, 0)


def _check_prefetch(prefetch_factor: Any, num_workers: Any) -> Any:
    """``prefetch_factor``: None (2), an int >= 1 or ``"auto"``. As torch, a number needs
    ``num_workers`` > 0 (or ``"auto"``, which is at least one): with ``num_workers=0`` torch
    loads in the calling process, so it has nothing to prefetch with and refuses one."""
    if isinstance(prefetch_factor, str):
        if prefetch_factor != "auto":
            raise ValueError(f"prefetch_factor should be an int >= 1, None or 'auto', got {prefetch_factor!r}")
        return "auto"
    if prefetch_factor is not None:
        _check_int("prefetch_factor", prefetch_factor, 1)
        if num_workers == 0:
            raise ValueError(
                f"prefetch_factor={prefetch_factor} needs num_workers > 0 (or 'auto'), as with torch's "
                "DataLoader: with num_workers=0 leave prefetch_factor=None (or 'auto')")
    return prefetch_factor


#: The default ``max_skipped_fraction``: an epoch under ``on_error="skip"`` that skipped more
#: than half of its samples raises (see ``_check_skipped_fraction``).
MAX_SKIPPED_FRACTION = 0.5


def _check_skipped_fraction(value: Any) -> float:
    """``max_skipped_fraction``: a number in [0, 1]; 1 never raises."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not 0 <= value <= 1:
        raise ValueError(f"max_skipped_fraction should be a number from 0 to 1 (1: never raise), "
                         f"got {value!r}")
    return float(value)


def _parse_memory(max_memory: Any) -> Optional[int]:
    """``max_memory``: None, a number of bytes > 0, or a size string: "2GB" (10**9), "2GiB" or
    "2G" (2**30), "512MB", "1.5GiB"..."""
    if max_memory is None:
        return None
    if isinstance(max_memory, bool):
        raise TypeError(f"max_memory should be bytes (an int) or a size like '2GB', got {max_memory!r}")
    if isinstance(max_memory, (int, np.integer)):
        if max_memory <= 0:
            raise ValueError(f"max_memory should be > 0 bytes, got {max_memory}")
        return int(max_memory)
    if isinstance(max_memory, str):
        return _sizes.parse_size(max_memory, "max_memory")
    raise TypeError(f"max_memory should be bytes (an int) or a size like '2GB', got "
                    f"{type(max_memory).__name__} {max_memory!r}")


def _torch_default_threads() -> set:
    """The intra-op thread counts torch may pick by itself: the physical cores (distinct
    (package, core) pairs in sysfs) of the machine or of the affinity mask, or the CPUs of the
    mask (OpenMP's default under `taskset`)."""
    mask = os.sched_getaffinity(0)
    cores, cores_in_mask = set(), set()
    base = "/sys/devices/system/cpu"
    try:
        names = os.listdir(base)
    except OSError:
        names = []
    for name in names:
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        try:
            with open(f"{base}/{name}/topology/physical_package_id") as f:
                package = f.read().strip()
            with open(f"{base}/{name}/topology/core_id") as f:
                core = f.read().strip()
        except OSError:
            continue
        cores.add((package, core))
        if int(name[3:]) in mask:
            cores_in_mask.add((package, core))
    return {n for n in (len(cores), len(cores_in_mask), len(mask), os.cpu_count()) if n}


def _training_threads() -> Tuple[int, str]:
    """The training loop's compute threads when they were set explicitly, else (-1, "").

    ``OMP_NUM_THREADS`` in the environment (its first value), or ``torch.get_num_threads()`` when
    it differs from every count torch picks by itself (see ``_torch_default_threads``): that is,
    after ``torch.set_num_threads(n)``. (Setting it to a default count is indistinguishable from
    not setting it; then 1 CPU is reserved from 4 usable ones, as when unset.)"""
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env), "OMP_NUM_THREADS"
    import torch

    n = torch.get_num_threads()
    if n not in _torch_default_threads():
        return n, "torch.get_num_threads()"
    return -1, ""


def _format_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _training_options() -> dict:
    count, source = _training_threads()
    if count < 0:
        return {}
    return {"training_threads": count, "training_threads_source": source}


def _auto_threads(options: dict, env: Optional[dict] = None) -> dict:
    """What num_workers='auto' chooses (decode_threads, reader_threads, usable_cpus,
    reserved_cpus, note, node) for these native options.

    When several ranks share the machine (``_node.local_ranks``: torchrun, SLURM, MPI), each
    gets its share of the usable CPUs and keeps the training loop's CPUs from that share; then
    ``node`` says how (a dict: rank, size, source, usable: the machine's usable CPUs, share), and
    the threads are passed to the native loader as numbers. ``node`` is None otherwise (the
    native rule as it is)."""
    ranks = _node.local_ranks(env)
    options = {k: v for k, v in options.items() if v is not None or k == "numa"}
    options.update(_training_options())
    # A rank's disjoint CPU share (_node.rank_placement): the native rule sizes the threads
    # from the share; the CPUs it was taken from are counted without it.
    shared = {k: options.pop(k) for k in ("numa_share_index", "numa_share_count") if k in options}
    plan = dict(_C.choose_auto_threads(options))
    plan["node"] = None
    if ranks is None or ranks.size <= 1:
        return plan
    usable = plan["usable_cpus"]
    share = (_C.choose_auto_threads({**options, **shared})["usable_cpus"] if shared else
             _node.cpu_share(usable, ranks, _node.mask_cpus(), _node.machine_cpus()))
    mine = _node.plan_threads(share, options.get("training_threads", -1),
                              options.get("training_threads_source", ""), options.get("reader_threads") or 0)
    # The native note: "decode D, readers R: <the CPU budget>, N reserved for the training loop (...)".
    note = plan["note"]
    start, end = note.find(": ") + 2, note.rfind(f", {plan['reserved_cpus']} reserved for the training loop")
    budget = note[start:end] if start >= 2 and end > start else note
    pinned = _node.pinned_per_rank(_node.mask_cpus(), _node.machine_cpus(), ranks.size)
    divided = (f"{usable} usable CPUs, not divided among the {ranks.size} ranks on this machine: the affinity "
               f"mask is already this rank's own slice" if pinned else
               f"{share} of {usable} usable CPUs for rank {ranks.rank} of {ranks.size} on this machine")
    mine["note"] = (f"decode {mine['decode_threads']}, readers {mine['reader_threads']}: {divided} "
                    f"({ranks.source}; {budget}), {mine['reserved_cpus']} reserved for the training loop "
                    f"({mine.pop('reason')})")
    mine["node"] = {"rank": ranks.rank, "size": ranks.size, "source": ranks.source, "usable": usable,
                    "share": share, "pinned": pinned}
    return mine


def _check_fast_decode(fast_decode: Any) -> Any:
    """False for the exact default, else the level's name ("scale" for True, or "fastest").
    The names and their meaning are the native parser's (``_C.fast_decode_level``): ValueError
    naming ``fast_decode`` for anything else."""
    if fast_decode is None or isinstance(fast_decode, np.bool_):
        # None (a config's unset value) is off, as bool(None) was before the levels; a numpy
        # bool is a flag read from a config array.
        fast_decode = bool(fast_decode)
    level = _C.fast_decode_level(fast_decode)
    return False if level == "off" else level


def _check_dtype(dtype: Any) -> Optional[str]:
    """The native dtype name for a string or a torch dtype, or None for the default."""
    if dtype is None:
        return None
    import torch

    name = str(dtype)[len("torch."):] if isinstance(dtype, torch.dtype) else dtype
    if isinstance(name, str) and name in _DTYPES:
        return name
    raise ValueError(f"dtype must be one of {', '.join(_DTYPES)} (a string or the torch dtype), "
                     f"got {dtype!r}")


def _check_layout(layout: Any, memory_format: Any) -> Tuple[str, bool]:
    """(native layout, whether batches are viewed as NCHW with channels-last strides)."""
    import torch

    if memory_format is not None and memory_format not in (torch.contiguous_format, torch.channels_last):
        raise ValueError("memory_format must be None, torch.contiguous_format or torch.channels_last, "
                         f"got {memory_format!r}")
    if layout is torch.channels_last:
        layout, memory_format = "NCHW", torch.channels_last
    elif layout is torch.contiguous_format:
        layout = "NCHW"
    if not isinstance(layout, str) or layout not in ("NCHW", "NHWC"):
        raise ValueError(f"layout must be 'NCHW', 'NHWC' (raw [B,H,W,3]) or torch.channels_last, got {layout!r}")
    if memory_format is torch.channels_last:
        if layout == "NHWC":
            raise ValueError("layout='NHWC' (a raw [B,H,W,3] tensor) and memory_format=torch.channels_last "
                             "(an NCHW-shaped view of it) contradict each other: pass one of them")
        return "NHWC", True
    return layout, False


def _check_numa(numa: Any, device: str = "cpu") -> Any:
    """The placement the native loader gets: ``"auto"``, a node number, or None (not placed).
    ``None`` (the default) is ``"auto"`` when batches go to a GPU (``device``, as
    ``_check_device`` gives it), where a rank's threads and slots belong near that GPU; ``"off"``
    leaves them where the OS puts them in any case."""
    if numa is None:
        return "auto" if device.startswith("cuda") else None
    if numa == "off":
        return None
    if numa == "auto":
        return numa
    if isinstance(numa, bool) or not isinstance(numa, (int, np.integer)) or numa < 0:
        raise ValueError(f"numa must be None, 'auto', 'off' or a node number >= 0, got {numa!r}")
    return int(numa)


def _check_device(device: Any) -> str:
    """``None``/``"cpu"``/``"cuda"``/``"cuda:N"`` or a ``torch.device``, as the native string."""
    if device is None:
        return "cpu"
    text = str(device)  # torch.device("cuda", 1) -> "cuda:1"
    if text == "cpu" or text == "cuda" or (text.startswith("cuda:") and text[5:].isdigit()):
        return text
    raise ValueError(f"device must be None, 'cpu', 'cuda' or 'cuda:N', got {device!r}")
