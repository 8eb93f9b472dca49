"""NUMA placement and the device option through the Python API (runs on any machine)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader import _C
from ringloader import transforms as T


def eval_tf():
    return T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])


def node0_cpus() -> set:
    try:
        text = Path("/sys/devices/system/node/node0/cpulist").read_text().strip()
    except OSError:
        pytest.skip("no NUMA node 0 under /sys")
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def test_explicit_node_pins_threads_within_the_node(small_tree: Path):
    expected = node0_cpus() & os.sched_getaffinity(0)
    loader = rl.DataLoader(rl.ImageFolder(small_tree, transform=eval_tf()), batch_size=4,
                           num_workers=2, numa=0)
    batches = sum(1 for _ in loader)
    assert batches == 8
    s = loader.stats()
    assert s["numa_node"] == 0
    assert s["threads_pinned"] >= 3  # dispatcher, reader, 2 decoders (all started by now)
    seen = set()
    for part in s["thread_cpus"].split(","):
        lo, _, hi = part.partition("-")
        seen.update(range(int(lo), int(hi or lo) + 1))
    assert seen and seen <= expected
    assert "NUMA node 0" in s["memory"]
    text = loader.describe()
    assert "numa:    node 0" in text and "numa=0 (explicit)" in text
    assert "memory:  host (NUMA node 0" in text


def test_fake_topology_pins_decoders_to_one_cpu(small_tree: Path, tmp_path: Path):
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs 2 allowed CPUs")
    for node, cpus in ((0, str(allowed[-1])), (1, ",".join(map(str, allowed[:-1])))):
        d = tmp_path / "devices" / "system" / "node" / f"node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
    ds = rl.ImageFolder(small_tree, transform=eval_tf())
    paths = [p for p, _ in ds.samples]
    options = dict(batch_size=4, num_workers=2, numa=0, numa_sysfs_root=str(tmp_path), **ds.native_options())
    before = set(os.listdir("/proc/self/task"))  # earlier tests' loaders may still have threads
    loader = _C.Loader(paths, ds.native_targets(), options)
    loader.start_builtin_epoch(0)
    assert loader.next() is not None
    decoders = []
    for _ in range(500):  # threads name and pin themselves as they start
        if loader.stats()["threads_pinned"] == 4:
            break
        time.sleep(0.01)
    for task in set(os.listdir("/proc/self/task")) - before:
        base = f"/proc/self/task/{task}"
        try:
            comm = Path(base, "comm").read_text().strip()
            status = Path(base, "status").read_text()
        except OSError:
            continue
        if comm == "rl-decode":
            line = next(l for l in status.splitlines() if l.startswith("Cpus_allowed_list:"))
            decoders.append(line.split(":", 1)[1].strip())
    assert decoders == [str(allowed[-1])] * 2
    assert sorted(os.sched_getaffinity(0)) == allowed  # the consumer thread is untouched
    loader.stop()


def test_numa_errors_and_defaults(small_tree: Path):
    ds = rl.ImageFolder(small_tree, transform=eval_tf())
    with pytest.raises(ValueError, match="no such NUMA node"):
        rl.DataLoader(ds, batch_size=4, numa=4096)
    for bad in ("bogus", True, -1, 1.5):
        with pytest.raises(ValueError, match="numa must be"):
            rl.DataLoader(ds, batch_size=4, numa=bad)
    plain = rl.DataLoader(ds, batch_size=4)
    assert plain.stats()["numa_node"] == -1
    assert "numa:    not placed" in plain.describe()
    assert "device:  cpu" in plain.describe()
    auto = rl.DataLoader(ds, batch_size=4, numa="auto")
    assert auto.stats()["numa_note"].startswith("numa=auto")


def test_device_option_validation(small_tree: Path):
    ds = rl.ImageFolder(small_tree, transform=eval_tf())
    for bad in ("tpu", "cuda:x", "cuda:-1"):
        with pytest.raises(ValueError, match="device must be"):
            rl.DataLoader(ds, batch_size=4, device=bad)
    assert rl.DataLoader(ds, batch_size=4, device=torch.device("cpu")).stats()["device"] == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error; a GPU is visible")
def test_cuda_device_without_a_gpu_fails_at_construction(small_tree: Path):
    ds = rl.ImageFolder(small_tree, transform=eval_tf())
    with pytest.raises(RuntimeError, match=r"device='cuda:0' but (no CUDA device|cudaGetDeviceCount failed|this build)"):
        rl.DataLoader(ds, batch_size=4, device="cuda")
