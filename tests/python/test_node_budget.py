"""Node-aware budgets: the ranks sharing a machine (torchrun, SLURM, Open MPI, MPICH variables),
each rank's share of the usable CPUs under num_workers="auto" and of the default max_memory, and
what describe() says; nothing changes without the variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ringloader as rl
from ringloader import _C
from ringloader.core import _node
from ringloader import transforms as T
from ringloader.core._options import _auto_threads

import remote_servers as srv

SMALL = T.Compose([T.Resize(32), T.CenterCrop(32)])  # uint8 [3,32,32]
RANK_VARIABLES = [name for pair in _node.LAUNCHERS for name in pair] + ["SLURM_NODEID"]


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch):
    """Every test starts as a single process: no launcher variable from the environment."""
    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("env, expected", [
    ({"LOCAL_WORLD_SIZE": "8", "LOCAL_RANK": "5"}, (5, 8, "LOCAL_RANK/LOCAL_WORLD_SIZE")),
    ({"SLURM_NTASKS_PER_NODE": "4", "SLURM_LOCALID": "3"}, (3, 4, "SLURM_LOCALID/SLURM_NTASKS_PER_NODE")),
    ({"SLURM_NTASKS_PER_NODE": "2(x3)", "SLURM_LOCALID": "1"}, (1, 2, "SLURM_LOCALID/SLURM_NTASKS_PER_NODE")),
    ({"SLURM_NTASKS_PER_NODE": "3,3(x2)", "SLURM_LOCALID": "2"}, (2, 3, "SLURM_LOCALID/SLURM_NTASKS_PER_NODE")),
    ({"SLURM_NTASKS_PER_NODE": "4,2(x2)", "SLURM_NODEID": "2", "SLURM_LOCALID": "1"},
     (1, 2, "SLURM_LOCALID/SLURM_NTASKS_PER_NODE")),
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0"},
     (0, 2, "OMPI_COMM_WORLD_LOCAL_RANK/OMPI_COMM_WORLD_LOCAL_SIZE")),
    ({"MPI_LOCALNRANKS": "6", "MPI_LOCALRANKID": "4"}, (4, 6, "MPI_LOCALRANKID/MPI_LOCALNRANKS")),
    # Precedence: torchrun's variables over SLURM's over Open MPI's over MPICH's.
    ({"LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1", "SLURM_NTASKS_PER_NODE": "4", "SLURM_LOCALID": "3",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "7"}, (1, 2, "LOCAL_RANK/LOCAL_WORLD_SIZE")),
    ({"SLURM_NTASKS_PER_NODE": "4", "SLURM_LOCALID": "3", "MPI_LOCALNRANKS": "8", "MPI_LOCALRANKID": "7"},
     (3, 4, "SLURM_LOCALID/SLURM_NTASKS_PER_NODE")),
    # srun without --ntasks-per-node sets SLURM_LOCALID alone: the next launcher decides.
    ({"SLURM_LOCALID": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
     (1, 2, "OMPI_COMM_WORLD_LOCAL_RANK/OMPI_COMM_WORLD_LOCAL_SIZE")),
])
def test_each_launcher_names_the_rank_and_the_ranks_on_the_machine(env, expected):
    r = _node.local_ranks(env)
    assert (r.rank, r.size, r.source) == expected


def test_the_process_environment_is_read_and_nothing_set_is_one_process(monkeypatch):
    assert _node.local_ranks() is None
    assert _node.local_ranks({"SLURM_LOCALID": "0", "LOCAL_RANK": "0"}) is None  # ranks without sizes
    monkeypatch.setenv("MPI_LOCALNRANKS", "3")
    monkeypatch.setenv("MPI_LOCALRANKID", "2")
    assert _node.local_ranks() == _node.LocalRanks(2, 3, "MPI_LOCALRANKID/MPI_LOCALNRANKS")


@pytest.mark.parametrize("env, message", [
    ({"LOCAL_WORLD_SIZE": "two", "LOCAL_RANK": "0"}, "LOCAL_WORLD_SIZE='two'"),
    ({"LOCAL_WORLD_SIZE": "0", "LOCAL_RANK": "0"}, r"LOCAL_WORLD_SIZE='0' .* >= 1"),
    ({"LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "2"}, "LOCAL_RANK=2 should be below LOCAL_WORLD_SIZE=2"),
    ({"LOCAL_WORLD_SIZE": "2"}, "LOCAL_WORLD_SIZE=2 is set but LOCAL_RANK is not"),
    ({"SLURM_NTASKS_PER_NODE": "2(x)", "SLURM_LOCALID": "0"}, r"SLURM_NTASKS_PER_NODE='2\(x\)'"),
    ({"SLURM_NTASKS_PER_NODE": "4,2", "SLURM_LOCALID": "0"}, "SLURM_NODEID is not set"),
    ({"SLURM_NTASKS_PER_NODE": "4,2", "SLURM_NODEID": "2", "SLURM_LOCALID": "0"}, "SLURM_NODEID='2' is past"),
    ({"SLURM_NTASKS_PER_NODE": "4", "SLURM_LOCALID": "x"}, "SLURM_LOCALID='x'"),
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "-1"}, "OMPI_COMM_WORLD_LOCAL_RANK='-1'"),
    ({"MPI_LOCALNRANKS": "1.5", "MPI_LOCALRANKID": "0"}, "MPI_LOCALNRANKS='1.5'"),
])
def test_invalid_values_name_the_variable(env, message):
    with pytest.raises(ValueError, match=message):
        _node.local_ranks(env)


def test_a_bad_variable_is_refused_by_the_data_loader(monkeypatch, image_tree):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "5")
    with pytest.raises(ValueError, match="LOCAL_RANK=5 should be below LOCAL_WORLD_SIZE=2"):
        rl.DataLoader(rl.ImageFolder(str(image_tree), transform=SMALL), batch_size=4, num_workers="auto")


def test_the_thread_rule_is_the_native_one(tmp_path, monkeypatch):
    # The per-rank rule mirrors csrc/common/cpu_budget.h's PlanThreads: same answers where the
    # native one can be asked (this machine's CPUs, cut by a faked cgroup quota to 1).
    from test_auto import fake_cgroup_v2

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the native rule would count it
    cases = [({"numa": None}, -1), ({"numa": None, "training_threads": 1, "training_threads_source": "t"}, 1),
             ({"numa": None, "reader_threads": 3}, -1),
             (dict(fake_cgroup_v2(tmp_path, "100000 100000"), numa=None), -1)]
    for options, training in cases:
        native = _C.choose_auto_threads(options)
        mine = _node.plan_threads(native["usable_cpus"], training, "t", options.get("reader_threads", 0))
        assert [mine[k] for k in ("decode_threads", "reader_threads", "reserved_cpus")] == \
            [native[k] for k in ("decode_threads", "reader_threads", "reserved_cpus")], options


@pytest.mark.parametrize("usable, mask, machine, size, share", [
    (96, 96, 96, 8, 12),   # 8 ranks, nothing pinned: 12 CPUs each
    (95, 96, 96, 8, 11),   # a cgroup quota of 95: 11 each (the rest idle rather than oversubscribed)
    (12, 12, 96, 8, 12),   # each rank pinned to its own 12 (numactl, srun --cpu-bind): kept
    (16, 16, 96, 8, 2),    # a container's 16 CPUs shared by 8 ranks: 2 each
    (2, 2, 2, 4, 1),       # more ranks than CPUs: at least 1
    (2, 2, 2, 1, 2),       # one rank: the machine
])
def test_each_rank_gets_its_share_of_the_usable_cpus(usable, mask, machine, size, share):
    assert _node.cpu_share(usable, _node.LocalRanks(0, size, "LOCAL_RANK/LOCAL_WORLD_SIZE"), mask, machine) == share


def test_the_training_loop_is_counted_per_rank():
    # 96 CPUs, 8 ranks: 12 a rank; torch.set_num_threads(4) in each rank keeps 4 of its 12.
    plan = _node.plan_threads(12, 4, "torch.get_num_threads()")
    assert (plan["reserved_cpus"], plan["decode_threads"], plan["reader_threads"]) == (4, 8, 1)
    plan = _node.plan_threads(12, -1, "")  # not set: 1 kept, as for one process from 4 CPUs
    assert (plan["reserved_cpus"], plan["decode_threads"], plan["reader_threads"]) == (1, 10, 2)


def _whole_machine() -> bool:
    return _node.mask_cpus() == _node.machine_cpus()


def test_auto_threads_take_the_ranks_share_on_this_machine():
    one = _auto_threads({"numa": None})
    assert one["node"] is None
    env = {"LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1"}
    plan = _auto_threads({"numa": None}, env)
    usable = one["usable_cpus"]
    pinned = _node.pinned_per_rank(_node.mask_cpus(), _node.machine_cpus(), 2)
    share = usable if pinned else max(1, usable // 2)
    assert plan["node"] == {"rank": 1, "size": 2, "source": "LOCAL_RANK/LOCAL_WORLD_SIZE", "usable": usable,
                            "share": share, "pinned": pinned}
    assert plan["usable_cpus"] == share
    if usable == 2 and _whole_machine():  # this 2-CPU machine: one decode thread per rank
        assert (plan["decode_threads"], plan["reader_threads"]) == (1, 1)
        assert plan["note"].startswith("decode 1, readers 1: 1 of 2 usable CPUs for rank 1 of 2 on this machine "
                                       "(LOCAL_RANK/LOCAL_WORLD_SIZE; 2 usable CPUs (affinity 2"), plan["note"]


def test_a_rank_pinned_to_its_own_cpus_keeps_them(monkeypatch, image_tree):
    # As if this machine had twice the CPUs of the mask and each of the 2 ranks were pinned to
    # its half (taskset, numactl): the mask is the rank's share already.
    mask = _node.mask_cpus()
    monkeypatch.setattr(_node, "machine_cpus", lambda: 2 * mask)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    one = _C.choose_auto_threads({"numa": None})
    plan = _auto_threads({"numa": None})
    assert plan["node"]["pinned"] and plan["usable_cpus"] == plan["node"]["share"] == one["usable_cpus"]
    assert (f"{one['usable_cpus']} usable CPUs, not divided among the 2 ranks on this machine: the affinity mask is "
            "already this rank's own slice") in plan["note"]
    loader = _loader(image_tree, num_workers="auto")
    assert loader.num_workers == plan["decode_threads"]
    assert (f"  node:    rank 0 of 2 on this machine (LOCAL_RANK/LOCAL_WORLD_SIZE): {one['usable_cpus']} usable CPUs, "
            "not divided (the affinity mask is already this rank's), max_memory 1/2 of the default") in loader.describe()


def _loader(tree: Path, **kw):
    return rl.DataLoader(rl.ImageFolder(str(tree), transform=SMALL), batch_size=4, **kw)


def test_a_rank_divides_threads_and_default_memory_and_describe_says_how(monkeypatch, image_tree):
    alone = _loader(image_tree, num_workers="auto")
    default = alone.stats()["max_memory"]
    alone_text = alone.describe()
    assert "node:" not in alone_text and "1/2 of" not in alone_text

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    loader = _loader(image_tree, num_workers="auto")
    s = loader.stats()
    plan = _auto_threads({"numa": None})
    assert loader.num_workers == s["decode_threads"] == plan["decode_threads"]
    assert s["reader_threads"] == plan["reader_threads"]
    assert s["max_memory"] == default // 2
    text = loader.describe()
    share, usable = plan["node"]["share"], plan["node"]["usable"]
    assert (f"  node:    rank 1 of 2 on this machine (LOCAL_RANK/LOCAL_WORLD_SIZE): {share} of {usable} usable "
            f"CPUs") in text, text
    assert "max_memory 1/2 of the default" in text, text
    if not plan["node"]["pinned"]:  # its threads on CPUs no other rank's use
        mine = _C.share_of_cpus(",".join(map(str, sorted(os.sched_getaffinity(0)))), 1, 2)
        assert s["numa_cpus"] == mine
        assert f"threads on CPUs {mine} (share 1 of 2, disjoint from the other ranks')" in text, text
    assert f"  chosen:  {plan['note']}" in text, text
    assert "1/2 of " in text and "for rank 1 of 2 on this machine (LOCAL_RANK/LOCAL_WORLD_SIZE))" in text, text
    if usable == 2 and _whole_machine():
        assert s["decode_threads"] == 1
    # The epoch is whole.
    assert sum(len(labels) for _, labels in loader) == 24


def test_a_share_too_small_for_two_slots_says_it_was_divided(monkeypatch, image_tree):
    # As if the machine had 20000 bytes of default budget: 10000 a rank holds no 2 slots of 6 KiB.
    monkeypatch.setattr(_node, "default_memory", lambda options: (20000, "the default, faked"))
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    with pytest.raises(ValueError, match=r"max_memory=10000 bytes holds 1 batch slot.*\(max_memory here is the default "
                                         r"divided among the ranks on this machine: 1/2 of 19.5 KiB, the default, "
                                         r"faked, for rank 1 of 2 on this machine \(OMPI_COMM_WORLD_LOCAL_RANK/"
                                         r"OMPI_COMM_WORLD_LOCAL_SIZE\); pass max_memory= explicitly"):
        rl.DataLoader(rl.ImageFolder(str(image_tree), transform=SMALL), batch_size=2, num_workers=1)


def test_given_values_are_not_divided(monkeypatch, image_tree):
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "2(x4)")
    monkeypatch.setenv("SLURM_LOCALID", "0")
    loader = _loader(image_tree, num_workers=1, max_memory="64MiB")
    s = loader.stats()
    assert (s["decode_threads"], s["max_memory"]) == (1, 64 << 20)
    assert ("  node:    rank 0 of 2 on this machine (SLURM_LOCALID/SLURM_NTASKS_PER_NODE): num_workers=1 given, "
            "CPUs not divided, max_memory given, not divided") in loader.describe()


def test_one_rank_on_the_machine_is_one_process(monkeypatch, image_tree):
    alone = _loader(image_tree, num_workers="auto").stats()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    loader = _loader(image_tree, num_workers="auto")
    s = loader.stats()
    assert (s["decode_threads"], s["reader_threads"], s["max_memory"]) == \
        (alone["decode_threads"], alone["reader_threads"], alone["max_memory"])
    assert "node:" not in loader.describe()


WORKER = r"""
import json, os, sys
import torch.distributed as dist
import ringloader as rl
from ringloader import transforms as T
dist.init_process_group("gloo")
ds = rl.ImageFolder(sys.argv[1], transform=T.Compose([T.Resize(32), T.CenterCrop(32)]))
loader = rl.DataLoader(ds, batch_size=2, num_workers="auto", shuffle=True, seed=3)
epochs, threads = [], {}
for epoch in range(2):
    loader.set_epoch(epoch)
    labels = []
    for _, batch in loader:
        labels += [int(i) for i in batch]
        for tid in os.listdir("/proc/self/task"):  # the decode threads while they run
            try:
                if open(f"/proc/self/task/{tid}/comm").read().strip() != "rl-decode":
                    continue
                stat = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
                t = threads.setdefault(tid, {"allowed": sorted(os.sched_getaffinity(int(tid))), "ran_on": []})
                t["ran_on"].append(int(stat[36]))  # the CPU the kernel last ran it on (stat field 39)
            except OSError:
                pass
    epochs.append(labels)
out = {"rank": dist.get_rank(), "decode": loader.stats()["decode_threads"], "epochs": epochs, "threads": threads,
       "node": [l for l in loader.describe().splitlines() if l.startswith("  node:")]}
with open(os.path.join(sys.argv[2], f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump(out, f)
dist.destroy_process_group()
"""


def test_two_ranks_under_torchrun_share_the_machine(tmp_path, unique_tree):
    # unique_tree: 24 classes of one image, so a label is its sample.
    if not (usable := _auto_threads({"numa": None})["usable_cpus"]) == 2 or not _whole_machine():
        pytest.skip("sized for a 2-CPU machine whose affinity mask is the whole machine")
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    port = srv.free_port()
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES and k != "OMP_NUM_THREADS"}
    env.update(TMPDIR=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
                           f"--master-addr=127.0.0.1", f"--master-port={port}", str(worker), str(unique_tree),
                           str(tmp_path)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:
        assert r["decode"] == 1, r
        assert r["node"] == [f"  node:    rank {r['rank']} of 2 on this machine (LOCAL_RANK/LOCAL_WORLD_SIZE): "
                             f"1 of {usable} usable CPUs, threads on CPUs {r['rank']} (share {r['rank']} of 2, "
                             "disjoint from the other ranks'), max_memory 1/2 of the default"], r
        # Disjoint CPUs: rank i's decode thread may run on CPU i alone, and the kernel ran it there.
        assert r["threads"] and {tuple(t["allowed"]) for t in r["threads"].values()} == {(r["rank"],)}, r
        assert {c for t in r["threads"].values() for c in t["ran_on"]} == {r["rank"]}, r
    for epoch in (0, 1):
        seen = ranks[0]["epochs"][epoch] + ranks[1]["epochs"][epoch]
        assert sorted(seen) == list(range(24)), (epoch, seen)  # every sample once across the ranks
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]  # shuffled per epoch


def test_torchs_worker_processes_take_the_ranks_share_too(monkeypatch):
    # The generic path (any Dataset) sizes torch's worker processes by the same rule.
    import torch

    ds = torch.utils.data.TensorDataset(torch.arange(8))
    alone = rl.DataLoader(ds, batch_size=2, num_workers="auto").num_workers
    alone_plan = _auto_threads({"numa": None})
    assert alone == alone_plan["decode_threads"]
    monkeypatch.setenv("MPI_LOCALNRANKS", "2")
    monkeypatch.setenv("MPI_LOCALRANKID", "0")
    plan = _auto_threads({"numa": None})
    assert plan["node"]["size"] == 2
    assert rl.DataLoader(ds, batch_size=2, num_workers="auto").num_workers == plan["decode_threads"]
    if plan["node"]["usable"] == 2 and not plan["node"]["pinned"] and alone_plan["reserved_cpus"] == 0:
        assert (alone, plan["decode_threads"]) == (2, 1)
