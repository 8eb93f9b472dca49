"""The ranks that share this machine: how many there are and which one this process is, from
the launcher's environment, and each rank's share of the node's CPUs and default memory.

Launchers, in order of precedence (the first whose size variable is set wins; its rank variable
must then be set too):

* torchrun: ``LOCAL_WORLD_SIZE`` / ``LOCAL_RANK``
* SLURM: ``SLURM_NTASKS_PER_NODE`` / ``SLURM_LOCALID`` (the size may read ``"4"``, ``"2(x3)"``
  or a list of them, ``"4,2(x2)"``: with a list the node's entry is taken by ``SLURM_NODEID``,
  or the one count when all entries agree)
* Open MPI: ``OMPI_COMM_WORLD_LOCAL_SIZE`` / ``OMPI_COMM_WORLD_LOCAL_RANK``
* MPICH / Intel MPI: ``MPI_LOCALNRANKS`` / ``MPI_LOCALRANKID``

``torch.distributed`` has no local (per-machine) size of its own to ask, so an initialised
process group without these variables counts as one rank on the machine.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping, Optional

#: (size variable, rank variable) per launcher, in order of precedence.
LAUNCHERS = (
    ("LOCAL_WORLD_SIZE", "LOCAL_RANK"),
    ("SLURM_NTASKS_PER_NODE", "SLURM_LOCALID"),
    ("OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("MPI_LOCALNRANKS", "MPI_LOCALRANKID"),
)


@dataclass(frozen=True)
class LocalRanks:
    """This process is rank ``rank`` of ``size`` on its machine, read from ``source``."""
    rank: int
    size: int
    source: str  # "LOCAL_RANK/LOCAL_WORLD_SIZE"


def _whole(name: str, text: str, minimum: int) -> int:
    value = text.strip()
    if not value.isdigit() or int(value) < minimum:
        raise ValueError(f"{name}={text!r} in the environment should be a whole number >= {minimum}: "
                         f"fix or unset it (it tells the loader how the machine is shared among ranks)")
    return int(value)


def _slurm_tasks(text: str, env: Mapping[str, str]) -> int:
    """SLURM_NTASKS_PER_NODE: "4", "2(x3)" or "4,2(x2)" (counts per node, repeated)."""
    name = "SLURM_NTASKS_PER_NODE"
    counts = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m or int(m.group(1)) < 1 or (m.group(2) is not None and int(m.group(2)) < 1):
            raise ValueError(f"{name}={text!r} in the environment should be a task count per node such as "
                             f"'4', '2(x3)' or '4,2(x2)': fix or unset it")
        counts += [int(m.group(1))] * (int(m.group(2)) if m.group(2) else 1)
    if len(set(counts)) == 1:
        return counts[0]
    node = env.get("SLURM_NODEID")
    if node is None:
        raise ValueError(f"{name}={text!r} gives different task counts per node and SLURM_NODEID is not "
                         f"set to tell which is this one: set SLURM_NODEID or a single count")
    index = _whole("SLURM_NODEID", node, 0)
    if index >= len(counts):
        raise ValueError(f"SLURM_NODEID={node!r} is past the {len(counts)} nodes of {name}={text!r}")
    return counts[index]


def local_ranks(env: Optional[Mapping[str, str]] = None) -> Optional[LocalRanks]:
    """The ranks on this machine from the launcher's variables (see the module), or None when no
    launcher set them. Invalid values raise ValueError naming the variable."""
    env = os.environ if env is None else env
    for size_name, rank_name in LAUNCHERS:
        size_text = env.get(size_name)
        if size_text is None or not size_text.strip():
            continue
        size = _slurm_tasks(size_text, env) if size_name == "SLURM_NTASKS_PER_NODE" \
            else _whole(size_name, size_text, 1)
        rank_text = env.get(rank_name)
        if rank_text is None:
            raise ValueError(f"{size_name}={size_text} is set but {rank_name} is not: the loader needs both "
                             f"to know which of the {size} ranks on this machine it is")
        rank = _whole(rank_name, rank_text, 0)
        if rank >= size:
            raise ValueError(f"{rank_name}={rank} should be below {size_name}={size_text} "
                             f"(ranks on this machine count from 0)")
        return LocalRanks(rank, size, f"{rank_name}/{size_name}")
    return None


def pinned_per_rank(mask_cpus: int, machine_cpus: int, size: int) -> bool:
    """Whether each rank's affinity mask already looks like its own slice of the machine (a
    launcher or the user pinned the ranks: ``numactl``, ``taskset``, ``srun --cpu-bind``): the
    mask is smaller than the machine and the ranks' masks fit in it side by side. Then the
    mask is the rank's share and is not divided again."""
    return 0 < mask_cpus < machine_cpus and mask_cpus * size <= machine_cpus


def cpu_share(usable: int, ranks: LocalRanks, mask_cpus: int, machine_cpus: int) -> int:
    """This rank's CPUs of the ``usable`` ones: usable / local ranks (at least 1), unless the
    mask is already the rank's own (``pinned_per_rank``)."""
    if ranks.size <= 1 or pinned_per_rank(mask_cpus, machine_cpus, ranks.size):
        return usable
    return max(1, usable // ranks.size)


def plan_threads(usable: int, training: int, training_source: str, fixed_readers: int = 0) -> dict:
    """csrc/common/cpu_budget.h's PlanThreads for ``usable`` CPUs (a rank's share): the CPUs
    kept for the training loop, then decode and reader threads (``decode_threads``,
    ``reader_threads``, ``usable_cpus``, ``reserved_cpus``, ``reason``)."""
    from . import _C

    return _C.plan_threads(usable, training, training_source, fixed_readers)


def machine_cpus() -> int:
    """The machine's online CPUs."""
    return os.cpu_count() or 1


def mask_cpus() -> int:
    """The CPUs in this process's affinity mask."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else machine_cpus()


def default_memory(options: dict) -> tuple:
    """(bytes, note): the slot-memory budget a loader with these options gets by default
    (csrc/common/cpu_budget.h's DefaultMemoryBudget: a quarter of the available memory, at most
    2 GiB)."""
    from . import _C

    probe = {k: options[k] for k in ("meminfo_path", "cgroup_root", "proc_self_cgroup") if k in options}
    return _C.default_memory_budget(probe)
