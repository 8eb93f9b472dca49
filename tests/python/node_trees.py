"""Recorded /proc and /sys trees of real machine topologies, written under a temporary root for
``ringloader doctor`` (its root prefix) and the ranks' NUMA placement (``_node``).

Only the files the checks read are written, with the contents these machines show:

* ``two_socket_8gpu``: a two-socket Xeon server (2 x 20 cores, SMT) with 8 V100s split 4/4, as
  a DGX-1 lays them out (GPUs 06, 07, 0a, 0b on node 0; 85, 86, 89, 8a on node 1);
* ``gh200``: a GH200 superchip: 72 Grace cores on node 0, the Hopper GPU at 0009:01:00.0 on node
  0, and the GPU's memory as CPU-less nodes 1-8;
* ``workstation_4gpu``: one node of 32 CPUs, four GPUs whose firmware gives numa_node -1 (what
  single-socket boards report);
* ``snc4_8gpu``: two sockets with sub-NUMA clustering (SNC-4): 8 nodes of 14 cores (+ SMT), one
  GPU on each node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

MEMINFO = "MemTotal:       {total} kB\nMemFree:        {free} kB\nMemAvailable:   {avail} kB\n"
LIMITS = ("Limit                     Soft Limit           Hard Limit           Units     \n"
          "Max cpu time              unlimited            unlimited            seconds   \n"
          "Max locked memory         {memlock}            {memlock}            bytes     \n")


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_tree(root: Path, nodes: dict, gpus: dict, cpus: str, *, driver: bool = True,
               memlock: str = "unlimited", mounts: Optional[list] = None, cgroup: str = "0::/\n",
               mem_gib: int = 512) -> Path:
    """nodes: {id: cpulist}; gpus: {bus id: numa_node}; cpus: the online (and allowed) list."""
    for n, cpulist in nodes.items():
        _write(root, f"sys/devices/system/node/node{n}/cpulist", cpulist + "\n")
    _write(root, "sys/devices/system/cpu/online", cpus + "\n")
    _write(root, "proc/self/status", f"Name:\tpython\nCpus_allowed_list:\t{cpus}\nMems_allowed_list:\t0\n")
    for bus, node in gpus.items():
        dev = f"sys/bus/pci/devices/{bus}"
        _write(root, f"{dev}/numa_node", f"{node}\n")
        _write(root, f"{dev}/vendor", "0x10de\n")
        _write(root, f"{dev}/class", "0x030200\n")
        if driver:
            _write(root, f"proc/driver/nvidia/gpus/{bus}/information", f"Bus Location: \t {bus}\n")
    _write(root, "sys/bus/pci/devices/0000:00:1f.2/vendor", "0x8086\n")  # a SATA controller: no GPU
    _write(root, "sys/bus/pci/devices/0000:00:1f.2/class", "0x010601\n")
    if driver and gpus:
        _write(root, "proc/driver/nvidia/version",
               "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n")
    kib = mem_gib << 20
    _write(root, "proc/meminfo", MEMINFO.format(total=kib, free=kib // 2, avail=kib * 3 // 4))
    _write(root, "proc/self/limits", LIMITS.format(memlock=memlock))
    _write(root, "proc/self/cgroup", cgroup)
    _write(root, "proc/mounts", "".join(f"{dev} {point} {fs} rw 0 0\n" for dev, point, fs in mounts or
                                        [("/dev/nvme0n1p2", "/", "ext4")]))
    _write(root, "sys/class/block/nvme0n1/queue/rotational", "0\n")
    _write(root, "sys/class/block/sda/queue/rotational", "1\n")
    _write(root, "proc/sys/kernel/io_uring_disabled", "0\n")
    (root / "sys/fs/cgroup").mkdir(parents=True, exist_ok=True)
    return root


def two_socket_8gpu(root: Path, **kw) -> Path:
    gpus = {f"0000:{b}:00.0": 0 for b in ("06", "07", "0a", "0b")}
    gpus.update({f"0000:{b}:00.0": 1 for b in ("85", "86", "89", "8a")})
    return write_tree(root, {0: "0-19,40-59", 1: "20-39,60-79"}, gpus, "0-79", **kw)


def gh200(root: Path, **kw) -> Path:
    nodes = {0: "0-71"}
    nodes.update({n: "" for n in range(1, 9)})  # the GPU's memory: nodes without CPUs
    return write_tree(root, nodes, {"0009:01:00.0": 0}, "0-71", **{"mem_gib": 480, **kw})


def workstation_4gpu(root: Path, **kw) -> Path:
    gpus = {f"0000:{b}:00.0": -1 for b in ("01", "21", "41", "61")}
    return write_tree(root, {0: "0-31"}, gpus, "0-31", **{"mem_gib": 256, **kw})


def snc4_8gpu(root: Path, **kw) -> Path:
    nodes = {n: f"{14 * n}-{14 * n + 13},{112 + 14 * n}-{112 + 14 * n + 13}" for n in range(8)}
    gpus = {f"0000:{b}:00.0": n for n, b in enumerate(("18", "2a", "3a", "5d", "9a", "ab", "ba", "db"))}
    return write_tree(root, nodes, gpus, "0-223", **{"mem_gib": 2048, **kw})


def cgroup_v2_quota(root: Path, cpus: int = 4, mem_gib: int = 16) -> Path:
    """The workstation inside a container of cgroup v2 with a CPU quota and a memory limit."""
    workstation_4gpu(root, cgroup="0::/job\n")
    _write(root, "sys/fs/cgroup/job/cpu.max", f"{cpus * 100000} 100000\n")
    _write(root, "sys/fs/cgroup/job/memory.max", f"{mem_gib << 30}\n")
    _write(root, "sys/fs/cgroup/job/memory.current", f"{1 << 30}\n")
    _write(root, "sys/fs/cgroup/job/memory.stat", "inactive_file 0\n")
    return root
