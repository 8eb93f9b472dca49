"""``ringloader doctor``: findings on recorded /proc and /sys trees of real topologies (through
its root prefix), and on this machine (no GPU here: it says so)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ringloader import _C, doctor
from ringloader.core import _node

import node_trees as trees


def by_check(findings) -> dict:
    out = {}
    for f in findings:
        out.setdefault(f.check, f)
    return out


def test_two_socket_server_names_each_gpus_node_and_the_threads_of_eight_ranks(tmp_path):
    root = trees.two_socket_8gpu(tmp_path)
    f = by_check(doctor.diagnose(str(root), env={}))
    numa = f["numa"]
    assert numa.level == "info"
    assert "node 0: CPUs 0-19,40-59, GPUs [0, 1, 2, 3]; node 1: CPUs 20-39,60-79, GPUs [4, 5, 6, 7]" in numa.finding
    assert "numa='auto'" in numa.fix
    assert [g["node"] for g in numa.data["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert f["gpus"].level == "ok" and "8 GPU(s)" in f["gpus"].finding and "580.95.05" in f["gpus"].finding
    assert f["cpus"].data["usable"] == 80 and f["cpus"].level == "ok"
    # Ranks default to the GPUs: 8 ranks, each torch's 80 intra-op threads without OMP_NUM_THREADS.
    threads = f["threads"]
    assert threads.level == "warn" and threads.data["ranks"] == 8 and threads.data["share"] == 10
    plan = _C.plan_threads(10, -1, "", 0)
    assert threads.data["decode_threads"] == plan["decode_threads"]
    assert threads.fix.startswith(f"set OMP_NUM_THREADS={max(1, plan['reserved_cpus'])} ")
    calm = by_check(doctor.diagnose(str(root), env={"OMP_NUM_THREADS": "1"}))["threads"]
    assert calm.level == "ok" and calm.data["threads_per_cpu"] <= 1.5, calm


def test_gh200_memory_only_nodes_and_its_one_gpu(tmp_path):
    root = trees.gh200(tmp_path)
    f = by_check(doctor.diagnose(str(root), env={}))
    assert f["numa"].level == "ok"
    assert f["numa"].finding.startswith("9 NUMA node(s), CPUs on one: node 0: CPUs 0-71, GPUs [0]; "
                                        "node 1: CPUs none (memory only)")
    assert f["gpus"].data["gpus"] == [{"index": 0, "bus_id": "0009:01:00.0", "node": 0}]
    assert f["threads"].data["ranks"] == 1


def test_workstation_one_node_with_unknown_gpu_nodes_is_not_a_warning(tmp_path):
    root = trees.workstation_4gpu(tmp_path)
    f = by_check(doctor.diagnose(str(root), ranks=4, env={"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}))
    assert "gpu-numa" not in f  # one node: nothing to place
    assert [g["node"] for g in f["numa"].data["gpus"]] == [-1] * 4
    assert f["allocator"].level == "ok" and f["allocator"].finding.startswith("jemalloc (LD_PRELOAD)")
    # Two nodes whose firmware gives no GPU node: named, with the explicit numa= fix.
    (root / "sys/devices/system/node/node1").mkdir()
    (root / "sys/devices/system/node/node1/cpulist").write_text("32-63\n")
    warn = by_check(doctor.diagnose(str(root), ranks=4, env={}))["gpu-numa"]
    assert warn.level == "warn" and "0000:01:00.0" in warn.finding and "numa=<node>" in warn.fix


def test_sub_numa_clustering_puts_each_gpu_on_its_own_node(tmp_path):
    root = trees.snc4_8gpu(tmp_path)
    f = by_check(doctor.diagnose(str(root), env={}))
    assert [n["gpus"] for n in f["numa"].data["nodes"]] == [[i] for i in range(8)]
    assert "node 5: CPUs 70-83,182-195, GPUs [5]" in f["numa"].finding


def test_cgroup_v2_quota_and_memory_limit(tmp_path):
    root = trees.cgroup_v2_quota(tmp_path, cpus=4, mem_gib=16)
    f = by_check(doctor.diagnose(str(root), ranks=1, env={"MALLOC_ARENA_MAX": "2"}))
    cpus = f["cpus"]
    assert cpus.level == "warn" and cpus.data["usable"] == 4 and cpus.data["quota"] == 4
    assert "cgroup CPU quota 4 (cgroup v2 /job cpu.max)" in cpus.finding and "docker --cpus" in cpus.fix
    memory = f["memory"]
    assert memory.data["available"] == 15 << 30 and "cgroup" in memory.data["source"]
    assert f["allocator"].finding == "glibc malloc, MALLOC_ARENA_MAX=2"


def test_missing_driver_and_memlock_and_io_uring_sysctl(tmp_path):
    root = trees.two_socket_8gpu(tmp_path, driver=False, memlock="8388608")
    (root / "proc/sys/kernel/io_uring_disabled").write_text("2\n")
    f = by_check(doctor.diagnose(str(root), env={}))
    assert f["gpus"].level == "fail" and "no driver loaded" in f["gpus"].finding
    assert f["memlock"].level == "warn" and "8.0 MiB" in f["memlock"].finding and "ulimit -l" in f["memlock"].fix
    assert f["io_uring"].level == "warn" and "io_uring_disabled=2" in f["io_uring"].finding
    # The command's exit status says a check failed.
    assert doctor.main(["--root", str(root), "--json"]) == 1


def test_storage_network_rotational_and_page_cache(tmp_path, image_tree):
    data = os.path.realpath(image_tree)
    for mounts, level, words in (
            ([("/dev/nvme0n1p2", "/", "ext4")], "ok", "solid-state"),
            ([("/dev/nvme0n1p2", "/", "ext4"), ("/dev/sda1", data, "xfs")], "warn", "rotational disk"),
            ([("/dev/nvme0n1p2", "/", "ext4"), ("fs1:/export", data, "nfs4")], "warn", "network file system")):
        root = trees.workstation_4gpu(tmp_path / level / words.replace(" ", "-"), mounts=mounts)
        f = by_check(doctor.diagnose(str(root), data=str(image_tree), trial_seconds=0, env={}))
        assert f["storage"].level == level and words in f["storage"].finding, f["storage"]
        assert f["page-cache"].level == "ok" and f["page-cache"].data["files"] == 24
    small = trees.workstation_4gpu(tmp_path / "tiny")
    (small / "proc/meminfo").write_text("MemTotal: 64 kB\nMemFree: 8 kB\nMemAvailable: 4 kB\n")  # < 24 images
    f = by_check(doctor.diagnose(str(small), data=str(image_tree), trial_seconds=0, env={}))
    assert f["page-cache"].level == "warn" and "does not fit" in f["page-cache"].finding


def run_doctor(args, tmp_path) -> subprocess.CompletedProcess:
    env = dict(os.environ, RINGLOADER_CACHE=str(tmp_path / "cache"))
    env.pop("RINGLOADER_DOCTOR_ROOT", None)
    exe = Path(sys.executable).with_name("ringloader")
    return subprocess.run([str(exe), "doctor", *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.timeout(60)
def test_this_machine_in_json_says_if_there_is_no_gpu_and_a_trial_names_the_bottleneck(tmp_path, image_tree):
    # One run of the installed command (its start, torch's import included, is most of the time).
    done = run_doctor(["--json", "--data", str(image_tree), "--trial-seconds", "1"], tmp_path)
    assert done.returncode in (0, 1), done.stderr
    record = json.loads(done.stdout)
    assert record["schema"] == "ringloader-doctor/1"
    f = {x["check"]: x for x in record["findings"]}
    if not _node.gpu_bus_ids()[0]:
        assert f["gpus"]["finding"].startswith("no GPU") and done.returncode == 0
    assert f["cpus"]["data"]["affinity"] == len(os.sched_getaffinity(0))
    assert f["io_uring"]["level"] == ("ok" if not _C.io_uring_refusal() else "warn")
    assert {"cpus", "memory", "numa", "io_uring", "memlock", "storage", "page-cache", "threads", "allocator",
            "versions", "trial"} <= set(f)
    trial = f["trial"]
    assert trial["finding"].startswith(f"{trial['data']['images_per_s']:.0f} images/s over 1 s, "), trial
    assert trial["data"]["verdict"]["label"] in ("I/O-bound", "decode-bound", "consumer-bound", "error-bound")
    assert trial["data"]["verdict"]["label"] in trial["finding"]


def test_bad_arguments_are_named(tmp_path, capsys):
    for args, words in ((["--data", str(tmp_path / "nowhere")], "not a folder"), (["--ranks", "0"], "1 or more")):
        with pytest.raises(SystemExit) as e:
            doctor.main(args)
        assert e.value.code == 2 and words in capsys.readouterr().err
