"""``ringloader doctor``: inspects the node as a training job would run on it and prints what it
finds, each finding with its fix.

Checks: the CPUs a process may use (affinity, cgroup CPU quota) and the memory (cgroup limit),
the NUMA nodes and which GPU sits on which, GPUs and their driver, io_uring (seccomp),
``RLIMIT_MEMLOCK``, the storage under ``--data`` (rotational, network file system, data size
against the memory the page cache may hold), ``OMP_NUM_THREADS`` and thread oversubscription for
``--ranks``, the allocator, torch's and ringloader's versions, and with ``--data`` a short trial
of the native benchmark naming the bottleneck by its rule (``ringloader tune``'s).

Every file read goes through one root prefix (``--root``, hidden, or ``RINGLOADER_DOCTOR_ROOT``;
default ``/``), so tests point it at recorded ``/proc`` and ``/sys`` trees. The native rules are
asked through ``_C`` (cgroup quota, available memory, NUMA topology, the io_uring probe, the
thread plan), the GPU-to-node mapping through ``_node`` (the loader's placement uses the same).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Sequence

from .core import _node

#: File systems whose reads go over a network (or a user-space daemon).
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs",
              "9p", "afs", "ocfs2", "orangefs", "pvfs2", "wekafs", "fuse")

LEVELS = ("ok", "info", "warn", "fail")


@dataclass
class Finding:
    """One check: ``level`` (ok, info, warn, fail), what was found and what to do about it."""
    check: str
    level: str
    finding: str
    fix: str = ""
    data: dict = field(default_factory=dict)


def _size(n: float) -> str:
    from .core import _options

    return _options._format_bytes(int(n))


class Node:
    """The files of one machine under ``root`` ("" = this one)."""

    def __init__(self, root: str, env: Optional[dict] = None):
        self.root = "" if root in ("", "/") else root.rstrip("/")
        self.env = dict(os.environ if env is None else env)

    def path(self, p: str) -> str:
        return self.root + p

    def read(self, p: str) -> Optional[str]:
        return _node._read(self.path(p))

    def status_field(self, name: str) -> Optional[str]:
        for line in (self.read("/proc/self/status") or "").splitlines():
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
        return None


def _cpu_count(text: Optional[str]) -> int:
    """CPUs in a kernel CPU list ("0-3,8-11")."""
    return sum((int(b) - int(a) + 1) if b else 1 for a, b in re.findall(r"(\d+)(?:-(\d+))?", text or ""))


def check_cpus(node: Node) -> tuple[Finding, int]:
    """Affinity and cgroup quota; returns the finding and the usable CPU count."""
    from . import _C

    online = _cpu_count(node.read("/sys/devices/system/cpu/online")) or os.cpu_count() or 1
    allowed = node.status_field("Cpus_allowed_list")
    affinity = _cpu_count(allowed) or online
    quota, rounded, where = _C.cpu_quota(node.path("/sys/fs/cgroup"), node.path("/proc/self/cgroup"))
    usable = min(affinity, rounded) if rounded else affinity
    data = {"online": online, "affinity": affinity, "affinity_list": allowed, "quota": quota,
            "quota_source": where, "usable": usable}
    text = f"{usable} usable CPUs: {affinity} of {online} online in the affinity mask ({allowed or 'all'})" + (
        f", cgroup CPU quota {quota:g} ({where})" if quota else ", no cgroup CPU quota")
    if quota and rounded < affinity:
        return Finding("cpus", "warn", text, f"the quota ({quota:g} CPUs) is below the {affinity} CPUs the process "
                       "may run on: threads beyond it are throttled. num_workers='auto' sizes to the quota; raise "
                       "it (docker --cpus, Kubernetes resources.limits.cpu, SLURM --cpus-per-task) for more "
                       "decode throughput", data), usable
    if affinity < online:
        return Finding("cpus", "info", text, "the mask is narrower than the machine (taskset, numactl, "
                       "srun --cpu-bind, a cpuset): loaders size and place themselves within it", data), usable
    return Finding("cpus", "ok", text, "", data), usable


def check_memory(node: Node) -> Finding:
    from . import _C

    available, where = _C.available_memory(node.path("/proc/meminfo"), node.path("/sys/fs/cgroup"),
                                           node.path("/proc/self/cgroup"))
    total = 0
    for line in (node.read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            total = int(line.split()[1]) * 1024
    data = {"available": available, "source": where, "total": total}
    text = f"{_size(available)} available ({where}) of {_size(total)} total"
    if "cgroup" in where:
        return Finding("memory", "info", text + ": a cgroup memory limit binds", "each rank's default max_memory "
                       "is a quarter of this divided among the ranks; raise the container's memory limit, or "
                       "pass max_memory= per rank, if slots run short", data)
    return Finding("memory", "ok", text, "", data)


def check_numa_and_gpus(node: Node, ranks: int) -> list[Finding]:
    """NUMA nodes, GPUs and which node each sits on, and the driver."""
    from . import _C

    nodes = _C.numa_nodes(node.path("/sys"))
    bus_ids, source = _node.gpu_bus_ids(node.root)
    gpus = [_C.pci_numa_node(node.path("/sys"), b) for b in bus_ids]
    out = []
    per_node = {n: [i for i, (_, g) in enumerate(gpus) if g == n] for n, _ in nodes}
    parts = [f"node {n}: CPUs {cpus or 'none (memory only)'}" + (f", GPUs {per_node[n]}" if per_node[n] else "")
             for n, cpus in nodes]
    data = {"nodes": [{"id": n, "cpus": c, "gpus": per_node[n]} for n, c in nodes],
            "gpus": [{"index": i, "bus_id": b, "node": g} for i, (b, g) in enumerate(gpus)]}
    if not nodes:
        out.append(Finding("numa", "info", "no NUMA information in /sys/devices/system/node (one node)", "", data))
    elif len([1 for _, c in nodes if c]) <= 1:
        out.append(Finding("numa", "ok", f"{len(nodes)} NUMA node(s), CPUs on one: " + "; ".join(parts), "", data))
    else:
        out.append(Finding("numa", "info", f"{len(nodes)} NUMA nodes: " + "; ".join(parts),
                           "DataLoader(numa='auto') puts each rank's decode threads and slots on its GPU's node "
                           "(as numactl --cpunodebind/--membind would)", data))
    unknown = [b for b, g in gpus if g < 0]
    if unknown and len(nodes) > 1:
        out.append(Finding("gpu-numa", "warn", f"the firmware gives no NUMA node for GPU(s) {', '.join(unknown)} "
                           "(numa_node -1)", "numa='auto' cannot place those ranks: pass numa=<node> per rank, or "
                           "enable the node in the BIOS/ACPI (SRAT)", data))
    driver = node.read("/proc/driver/nvidia/version")
    if not bus_ids:
        out.append(Finding("gpus", "info", "no GPU: no NVIDIA device in /proc/driver/nvidia or the PCI tree",
                           "the loader runs on the CPU; pin_memory and device='cuda' need a GPU and its driver"))
    elif driver is None:
        out.append(Finding("gpus", "fail", f"{len(bus_ids)} NVIDIA GPU(s) on PCI ({', '.join(bus_ids)}) but no "
                           "driver loaded (/proc/driver/nvidia missing)", "install or load the NVIDIA driver "
                           "(580 or newer for the wheel's CUDA 13), or in a container run with the NVIDIA "
                           "container toolkit (--gpus all)", data))
    else:
        version = driver.splitlines()[0].strip() if driver.strip() else "unknown"
        finding = Finding("gpus", "ok", f"{len(bus_ids)} GPU(s) ({source}), driver: {version}", "", data)
        if ranks > len(bus_ids):
            finding.level, finding.fix = "warn", (f"{ranks} ranks for {len(bus_ids)} GPUs: ranks share GPUs; "
                                                  "use --nproc-per-node equal to the GPU count")
        out.append(finding)
    return out


def check_io_uring(node: Node) -> Finding:
    from . import _C

    disabled = (node.read("/proc/sys/kernel/io_uring_disabled") or "0").strip()
    # The probe is this process's (seccomp, kernel); a recorded tree has only its sysctl.
    why = _C.io_uring_refusal() if not node.root else ""
    if disabled != "0":
        why = "; ".join(w for w in (why, f"kernel.io_uring_disabled={disabled}") if w)
    if why:
        return Finding("io_uring", "warn", f"io_uring refused here ({why})",
                       "readers fall back to pread (fewer reads in flight: slower on network or cold storage); "
                       "allow io_uring_setup in the seccomp profile (docker --security-opt seccomp=<profile>) "
                       "and set kernel.io_uring_disabled=0", {"refusal": why, "sysctl": disabled})
    return Finding("io_uring", "ok", "io_uring allowed (the readers use it)", "", {"sysctl": disabled})


def check_memlock(node: Node, have_gpus: bool) -> Finding:
    m = re.search(r"^Max locked memory\s+(\S+)\s+(\S+)", node.read("/proc/self/limits") or "", re.M)
    soft = m.group(1) if m else "unknown"
    data = {"soft": soft, "hard": m.group(2) if m else "unknown"}
    text = f"RLIMIT_MEMLOCK {soft if not soft.isdigit() else _size(int(soft))} (soft)"
    if soft in ("unlimited", "unknown"):
        return Finding("memlock", "ok" if soft == "unlimited" else "info", text, "", data)
    return Finding("memlock", "warn" if have_gpus else "info", text,
                   "pinned slots come from the CUDA driver (not counted), but RDMA (NCCL over InfiniBand, "
                   "GPUDirect) registers memory under this limit: raise it (ulimit -l unlimited, docker --ulimit "
                   "memlock=-1, limits.conf memlock)", data)


def _mount_of(node: Node, path: str) -> tuple[str, str, str]:
    """(device, mount point, fs type) of the longest mount in /proc/mounts holding ``path``."""
    best = ("", "", "")
    for line in (node.read("/proc/mounts") or "").splitlines():
        f = line.split()
        if len(f) < 3:
            continue
        point = f[1].replace("\\040", " ")
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best[1]):
            best = (f[0], point, f[2])
    return best


def _rotational(node: Node, device: str) -> Optional[bool]:
    name = os.path.basename(device)
    for cand in (name, re.sub(r"p?\d+$", "", name) if re.search(r"\d$", name) else name):
        text = node.read(f"/sys/class/block/{cand}/queue/rotational")
        if text is not None and text.strip() in ("0", "1"):
            return text.strip() == "1"
    return None


def _data_size(path: str, cap: int = 500_000) -> tuple[int, int, bool]:
    """(bytes, files, complete) under ``path``, stopping after ``cap`` files."""
    total = files = 0
    for top, _, names in os.walk(path):
        for n in names:
            try:
                total += os.stat(os.path.join(top, n)).st_size
            except OSError:
                continue
            files += 1
            if files >= cap:
                return total, files, False
    return total, files, True


def check_storage(node: Node, data: str, available: int) -> list[Finding]:
    path = os.path.realpath(data)
    device, point, fstype = _mount_of(node, path)
    out = []
    info = {"path": path, "device": device, "mount": point, "fstype": fstype}
    if any(fstype == n or fstype.startswith(n + ".") or fstype.startswith(n) for n in NETWORK_FS):
        out.append(Finding("storage", "warn", f"{path} is on a network file system ({fstype} at {point})",
                           "the first epoch reads over the network: pack the images into shards (ringloader "
                           "pack) and copy them to local disk, or keep io='auto' with io_uring allowed and a "
                           "deeper io_depth", info))
    else:
        rot = _rotational(node, device)
        info["rotational"] = rot
        if rot:
            out.append(Finding("storage", "warn", f"{path} is on a rotational disk ({device}, {fstype})",
                               "random reads of single images seek: pack into shards (ringloader pack) so an "
                               "epoch reads sequentially, or move the data to an SSD (virtual disks such as "
                               "vda often say rotational whatever backs them: the trial shows the reads)", info))
        else:
            kind = "solid-state" if rot is False else "of unknown kind"
            out.append(Finding("storage", "ok", f"{path}: {fstype or 'unknown fs'} on {device or '?'} ({kind})",
                               "", info))
    size, files, complete = _data_size(path)
    info2 = {"bytes": size, "files": files, "complete": complete, "available": available}
    text = f"data {'' if complete else 'at least '}{_size(size)} in {files} files; {_size(available)} available memory"
    if size > available:
        out.append(Finding("page-cache", "warn", text + ": it does not fit in the page cache",
                           "every epoch reads from storage: the trial below shows whether reads keep up; "
                           "a smaller copy (ringloader pack with resized images) or more memory keeps it cached",
                           info2))
    else:
        out.append(Finding("page-cache", "ok", text + ": it fits in the page cache after the first epoch", "", info2))
    return out


def check_threads(node: Node, ranks: int, usable: int) -> Finding:
    """OMP_NUM_THREADS and runnable threads per CPU for ``ranks`` ranks (the native thread plan)."""
    from . import _C

    omp = node.env.get("OMP_NUM_THREADS", "")
    share = max(1, usable // max(1, ranks))
    training = int(omp.split(",")[0]) if omp.split(",")[0].isdigit() and int(omp.split(",")[0]) > 0 else -1
    plan = _C.plan_threads(share, training, "OMP_NUM_THREADS" if training > 0 else "", 0)
    # torch's intra-op threads default to the physical cores when OMP_NUM_THREADS is unset.
    compute = training if training > 0 else usable
    per_rank = compute + plan["decode_threads"]  # readers mostly wait on I/O (io_uring: the kernel reads)
    ratio = ranks * per_rank / max(1, usable)
    data = {"omp_num_threads": omp or None, "ranks": ranks, "share": share, "decode_threads": plan["decode_threads"],
            "reader_threads": plan["reader_threads"], "training_threads": compute, "threads_per_cpu": round(ratio, 2)}
    text = (f"{ranks} rank(s) x ({compute} training + {plan['decode_threads']} decode + "
            f"{plan['reader_threads']} reader threads) on {usable} CPUs: {ratio:.1f} busy threads per CPU "
            f"(OMP_NUM_THREADS={omp or 'unset'})")
    if ratio > 1.5:
        suggest = max(1, plan["reserved_cpus"])
        return Finding("threads", "warn", text, f"set OMP_NUM_THREADS={suggest} (the CPUs each rank's share of "
                       f"{share} keeps for its training loop) and keep num_workers='auto', which divides the CPUs "
                       "among the ranks", data)
    return Finding("threads", "ok", text, "", data)


def check_allocator(node: Node) -> Finding:
    preload = node.env.get("LD_PRELOAD", "")
    maps = node.read("/proc/self/maps") or ""
    for name in ("jemalloc", "tcmalloc", "mimalloc"):
        if name in preload or f"lib{name}" in maps:
            return Finding("allocator", "ok", f"{name} ({'LD_PRELOAD' if name in preload else 'loaded'})", "",
                           {"allocator": name})
    arenas = node.env.get("MALLOC_ARENA_MAX")
    text = f"glibc malloc, MALLOC_ARENA_MAX={arenas or 'unset (8 arenas per CPU)'}"
    return Finding("allocator", "info" if arenas else "warn", text,
                   "" if arenas else "many threads freeing and allocating image buffers grow glibc's arenas: "
                   "LD_PRELOAD=libjemalloc.so.2 (or libtcmalloc_minimal.so.4), or MALLOC_ARENA_MAX=4",
                   {"allocator": "glibc", "malloc_arena_max": arenas})


def check_versions() -> Finding:
    from . import __version__

    data = {"ringloader": __version__, "python": sys.version.split()[0]}
    try:
        import torch

        data["torch"], data["torch_cuda"] = torch.__version__, torch.version.cuda
    except ImportError:
        return Finding("versions", "warn", f"ringloader {__version__}; torch not installed", "pip install torch", data)
    return Finding("versions", "ok", f"ringloader {__version__}, torch {data['torch']} (CUDA "
                   f"{data['torch_cuda'] or 'none'}), Python {data['python']}", "", data)


def trial(data: str, seconds: float, exe: Optional[str]) -> Finding:
    """A short run of the native benchmark ``exe`` on ``data``: its verdict (pipeline/verdict.h,
    as ``ringloader tune`` judges a trial)."""
    if not exe or not os.access(exe, os.X_OK):
        return Finding("trial", "info", f"no trial: the native benchmark {exe or ''} is missing (built "
                       "without it: RINGLOADER_BUILD_BENCH=OFF)", "rebuild with the benchmark on for the trial")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "trial.json")
        cmd = [str(exe), f"--data={data}", f"--duration={seconds:g}", "--warmup=1", "--progress=false",
               f"--json={out}"]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
        if run.returncode != 0 or not os.path.exists(out):
            tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
            return Finding("trial", "fail", f"the trial on {data} failed: {tail[0]}", "run `ringloader bench "
                           f"--data {data}` to see the whole error")
        with open(out, encoding="utf-8") as f:
            record = json.load(f)
    verdict, rate = record["verdict"], record["throughput"].get("images_per_s", 0)
    return Finding("trial", "info", f"{rate:.0f} images/s over {seconds:g} s, {verdict['label']}: "
                   f"{verdict['evidence']}", f"ringloader tune --data {data} tries thread and prefetch "
                   "settings and prints the DataLoader(...) line to paste",
                   {"images_per_s": rate, "verdict": verdict})


def diagnose(root: str = "", data: Optional[str] = None, ranks: Optional[int] = None,
             trial_seconds: float = 3.0, env: Optional[dict] = None, bench_exe: Optional[str] = None) -> list[Finding]:
    """Every finding for the node under ``root`` (see the module); the trial runs ``bench_exe``
    (the package's ``ringloader bench`` binary, which ``ringloader doctor`` passes)."""
    from . import _C

    node = Node(root, env)
    cpus, usable = check_cpus(node)
    if ranks is None:
        local = _node.local_ranks(node.env)
        ranks = local.size if local is not None else max(1, len(_node.visible(_node.gpu_bus_ids(node.root)[0],
                                                                             node.env)))
    findings = [cpus, check_memory(node)]
    gpu = check_numa_and_gpus(node, ranks)
    findings += gpu + [check_io_uring(node), check_memlock(node, any(f.check == "gpus" and f.level != "info"
                                                                     for f in gpu))]
    if data is not None:
        available = _C.available_memory(node.path("/proc/meminfo"), node.path("/sys/fs/cgroup"),
                                        node.path("/proc/self/cgroup"))[0]
        findings += check_storage(node, data, available)
    findings += [check_threads(node, ranks, usable), check_allocator(node), check_versions()]
    if data is not None and trial_seconds > 0:
        findings.append(trial(data, trial_seconds, bench_exe))
    return findings


def render(findings: Sequence[Finding]) -> str:
    lines = []
    for f in findings:
        lines.append(f"[{f.level:<4}] {f.check}: {f.finding}")
        if f.fix:
            lines.append(f"       fix: {f.fix}")
    counts = {lv: sum(f.level == lv for f in findings) for lv in LEVELS}
    lines.append(", ".join(f"{n} {lv}" for lv, n in counts.items()))
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None, prog: str = "ringloader doctor",
         bench_exe: Optional[str] = None) -> int:
    p = argparse.ArgumentParser(prog=prog, description="Inspect this node as a training job would run on it: "
                                "CPUs, memory, NUMA and GPUs, io_uring, memlock, storage, threads, allocator, "
                                "versions; each finding with its fix. Exit status 1 when a check fails.")
    p.add_argument("--data", metavar="DIR", help="the data path: its storage, size against the page cache, and "
                   "a short trial naming the bottleneck")
    p.add_argument("--ranks", type=int, metavar="N", help="ranks (processes) per node for the thread check "
                   "(default: the launcher's variables, else the GPUs visible, else 1)")
    p.add_argument("--trial-seconds", type=float, default=3.0, metavar="S",
                   help="length of the trial with --data (0: none; default 3)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.add_argument("--root", default=os.environ.get("RINGLOADER_DOCTOR_ROOT", ""), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.data is not None and not os.path.isdir(args.data):
        p.error(f"--data {args.data}: not a folder; name the image folder (or shard folder) training reads")
    if args.ranks is not None and args.ranks < 1:
        p.error(f"--ranks {args.ranks}: should be 1 or more (processes per node)")
    findings = diagnose(args.root, args.data, args.ranks, args.trial_seconds, bench_exe=bench_exe)
    if args.json:
        print(json.dumps({"schema": "ringloader-doctor/1", "findings": [asdict(f) for f in findings]}, indent=2))
    else:
        print(render(findings))
    return 1 if any(f.level == "fail" for f in findings) else 0
