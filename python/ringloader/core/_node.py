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
    from .. import _C

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
    from .. import _C

    probe = {k: options[k] for k in ("meminfo_path", "cgroup_root", "proc_self_cgroup") if k in options}
    return _C.default_memory_budget(probe)


# Each rank near its GPU: the rank's GPU, its PCI address and NUMA node. `ringloader doctor`
# and the loader's placement both use these (one mapping); `root` prefixes every path read
# ("" = the real /proc and /sys) so tests point it at recorded trees.

#: PCI vendor id of NVIDIA, and the classes of a GPU (VGA controller, 3D controller).
_NVIDIA = "0x10de"
_GPU_CLASSES = ("0x0300", "0x0302")


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def gpu_bus_ids(root: str = "") -> tuple:
    """(the machine's NVIDIA GPUs as canonical PCI bus ids in bus order, where they were found):
    the driver's ``/proc/driver/nvidia/gpus/<bus id>`` when a driver is loaded, else the PCI
    devices of NVIDIA's vendor id with a display class in ``/sys/bus/pci/devices`` (a GPU the
    driver does not drive)."""
    from .. import _C

    driver = f"{root}/proc/driver/nvidia/gpus"
    if os.path.isdir(driver):
        ids = sorted(_C.pci_numa_node(f"{root}/sys", name)[0] for name in os.listdir(driver))
        return ids, "/proc/driver/nvidia/gpus"
    pci = f"{root}/sys/bus/pci/devices"
    found = []
    for name in sorted(os.listdir(pci)) if os.path.isdir(pci) else []:
        vendor = (_read(f"{pci}/{name}/vendor") or "").strip().lower()
        klass = (_read(f"{pci}/{name}/class") or "").strip().lower()
        if vendor == _NVIDIA and klass[:6] in _GPU_CLASSES:
            found.append(_C.pci_numa_node(f"{root}/sys", name)[0])
    return found, "/sys/bus/pci/devices (vendor 0x10de, no driver loaded)"


def visible(bus_ids: list, env: Optional[Mapping[str, str]] = None) -> list:
    """The GPUs CUDA numbers 0, 1, ... under ``CUDA_VISIBLE_DEVICES`` (numeric indices into the
    bus order; UUIDs and MIG names cannot be mapped without the driver, so they keep all)."""
    env = os.environ if env is None else env
    text = env.get("CUDA_VISIBLE_DEVICES")
    if text is None:
        return list(bus_ids)
    parts = [p.strip() for p in text.split(",")]
    if parts[0] in ("", "-1"):
        return []
    if not all(p.isdigit() for p in parts):
        return list(bus_ids)
    return [bus_ids[int(p)] for p in parts if int(p) < len(bus_ids)]


@dataclass(frozen=True)
class RankGpu:
    """GPU ``index`` (CUDA's numbering) of this rank at PCI ``bus_id`` on NUMA ``node`` (-1:
    unknown), chosen by ``source``."""
    index: int
    bus_id: str
    node: int
    source: str


def _torch_bus_ids() -> Optional[list]:
    """Bus ids of torch's CUDA devices in its order, or None without CUDA (torch not imported
    or no device)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    ids = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        ids.append(f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0")
    return ids


def rank_gpus(ranks: Optional[LocalRanks], root: str = "", env: Optional[Mapping[str, str]] = None) -> list:
    """Every local rank's GPU (``RankGpu``, rank r on GPU r mod the GPUs visible, as torchrun's
    ``cuda:LOCAL_RANK`` convention has it; one process: the current CUDA device, else GPU 0):
    from torch's device properties when CUDA is available, else from the driver's or the PCI
    tree. [] without a GPU."""
    from .. import _C

    ids = _torch_bus_ids() if not root else None
    source = "torch.cuda device properties"
    if ids is None:
        ids, where = gpu_bus_ids(root)
        ids, source = visible(ids, env), where
    if not ids:
        return []
    if ranks is None:
        import sys

        torch = sys.modules.get("torch")
        current = torch.cuda.current_device() if source.startswith("torch") else 0
        owners = [(current, "the current CUDA device")]
    else:
        owners = [(r % len(ids), f"{ranks.source.split('/')[0]}={r}") for r in range(ranks.size)]
    out = []
    for index, why in owners:
        bus, node = _C.pci_numa_node(f"{root}/sys", ids[index])
        out.append(RankGpu(index, bus, node, f"{why} -> GPU {index} ({source})"))
    return out


def rank_placement(ranks: Optional[LocalRanks], numa, device: Optional[str], divide: bool = True,
                   root: str = "", env: Optional[Mapping[str, str]] = None) -> dict:
    """The native loader options that place this rank (csrc/numa/topology.h): with
    ``numa="auto"`` and no staging device, ``numa_gpu_bus_id`` (its GPU, whose node takes its
    threads and slots); with several ranks whose affinity masks overlap (not pinned per rank),
    ``numa_share_index``/``numa_share_count``: its part of the CPUs it is placed on, so the
    ranks' threads run on disjoint CPUs (with ``numa="auto"``, parts among the ranks whose GPUs
    share its node; only when ``divide``: threads sized by num_workers="auto"). {} for one
    process without a GPU: nothing changes."""
    options: dict = {}
    several = ranks is not None and ranks.size > 1
    gpus = rank_gpus(ranks, root, env) if numa == "auto" else []
    mine = gpus[ranks.rank] if several and gpus else (gpus[0] if gpus and not several else None)
    staging = isinstance(device, str) and device.startswith("cuda")
    if mine is not None and not staging:
        options["numa_gpu_bus_id"] = mine.bus_id
    if divide and several and not pinned_per_rank(mask_cpus(), machine_cpus(), ranks.size):
        index, count = ranks.rank, ranks.size
        if mine is not None and mine.node >= 0:  # a staging device is taken to be cuda:LOCAL_RANK
            peers = [r for r, g in enumerate(gpus) if g.node == mine.node]
            index, count = peers.index(ranks.rank), len(peers)
        if count > 1:
            options["numa_share_index"], options["numa_share_count"] = index, count
    return options
