"""num_workers="auto", prefetch_factor="auto", max_memory and describe().

The CPU budget is read from a fake cgroup tree (as the NUMA tests fake sysfs); adaptive prefetch is
driven by the consumer's pattern (fill the pipeline, then drain it), observed through stats(), never
by timing."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader import _C
from ringloader import transforms as T
from ringloader.loader.dataloader import _format_bytes, _parse_memory, _torch_default_threads

SMALL = T.Compose([T.Resize(32), T.CenterCrop(32)])  # uint8 [3,32,32]: 3 KiB a sample


def fake_cgroup_v2(tmp_path: Path, cpu_max: str) -> dict:
    root = tmp_path / "cgroup"
    (root / "job" / "step").mkdir(parents=True)
    (root / "job" / "cpu.max").write_text(cpu_max + "\n")
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text("0::/job/step\n")
    return {"cgroup_root": str(root), "proc_self_cgroup": str(proc)}


def fake_cgroup_v1(tmp_path: Path, quota_us: int, period_us: int = 100000) -> dict:
    root = tmp_path / "cgroup"
    leaf = root / "cpu,cpuacct" / "docker" / "abc"
    leaf.mkdir(parents=True)
    (leaf / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
    (leaf / "cpu.cfs_period_us").write_text(f"{period_us}\n")
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text("4:cpu,cpuacct:/docker/abc\n5:memory:/docker/abc\n")
    return {"cgroup_root": str(root), "proc_self_cgroup": str(proc)}


def affinity() -> int:
    return len(os.sched_getaffinity(0))


@pytest.fixture
def no_explicit_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    saved = torch.get_num_threads()
    torch.set_num_threads(len(os.sched_getaffinity(0)))  # one of torch's own defaults
    yield
    torch.set_num_threads(saved)


# ---- the CPU budget -------------------------------------------------------------------------

def test_cgroup_quota_of_one_cpu_gives_one_decode_thread(tmp_path, no_explicit_threads):
    plan = _C.choose_auto_threads(fake_cgroup_v2(tmp_path, "100000 100000"))
    assert (plan["usable_cpus"], plan["decode_threads"], plan["reader_threads"]) == (1, 1, 1)
    assert plan["reserved_cpus"] == 0
    assert "cgroup quota 1.0 from cgroup v2 /job cpu.max" in plan["note"]
    assert plan["note"].startswith("decode 1, readers 1: 1 usable CPU (affinity ")


def test_cgroup_v1_fractional_quota_rounds_to_nearest(tmp_path, no_explicit_threads):
    # 1.5 CPUs -> 2 (halves up), unless the affinity mask allows fewer.
    plan = _C.choose_auto_threads(fake_cgroup_v1(tmp_path, 150000))
    assert plan["usable_cpus"] == min(2, affinity())
    assert "cgroup quota 1.5 from cgroup v1 /docker/abc cpu.cfs_quota_us" in plan["note"]


def test_no_quota_uses_the_affinity_mask(tmp_path, no_explicit_threads):
    plan = _C.choose_auto_threads(fake_cgroup_v2(tmp_path, "max 100000"))
    n = affinity()
    assert plan["usable_cpus"] == n
    assert plan["reserved_cpus"] == (1 if n >= 4 else 0)
    rest = n - plan["reserved_cpus"]
    assert plan["decode_threads"] == max(1, rest - rest // 9)
    assert "no cgroup quota" in plan["note"]


def test_malformed_quota_names_the_file(tmp_path):
    options = fake_cgroup_v2(tmp_path, "plenty")
    with pytest.raises(ValueError, match="cpu.max"):
        _C.choose_auto_threads(options)


def test_explicit_training_threads_are_reserved(tmp_path, monkeypatch, no_explicit_threads, image_tree):
    cgroup = fake_cgroup_v2(tmp_path, "400000 100000")  # 4 CPUs, if the mask allows them
    usable = min(4, affinity())
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    plan = _C.choose_auto_threads(cgroup)
    assert plan["reserved_cpus"] == min(2, usable - 1)
    assert plan["decode_threads"] == max(1, usable - min(2, usable - 1))
    assert "OMP_NUM_THREADS=2 set explicitly" in plan["note"]
    monkeypatch.delenv("OMP_NUM_THREADS")
    # torch.set_num_threads(n) with n other than torch's own defaults counts as explicit.
    explicit = next(n for n in (1, 3, 5, 7, 9, 11) if n not in _torch_default_threads())
    torch.set_num_threads(explicit)
    loader = rl.DataLoader(rl.ImageFolder(image_tree, transform=SMALL), batch_size=2, num_workers="auto")
    stats = loader.stats()
    assert f"torch.get_num_threads()={explicit} set explicitly" in stats["threads_note"]
    assert loader.num_workers == stats["decode_threads"] >= 1
    assert stats["reader_threads"] >= 1


# ---- DataLoader arguments -------------------------------------------------------------------

def test_auto_loader_delivers_what_a_fixed_one_does(image_tree, no_explicit_threads):
    ds = rl.ImageFolder(image_tree, transform=SMALL)
    fixed = [(x.clone(), y) for x, y in rl.DataLoader(ds, batch_size=5, num_workers=1)]
    auto = rl.DataLoader(ds, batch_size=5, num_workers="auto", prefetch_factor="auto", max_memory="1MiB")
    got = [(x.clone(), y) for x, y in auto]
    assert len(got) == len(fixed) == 5
    for (a, la), (b, lb) in zip(got, fixed):
        assert torch.equal(a, b) and torch.equal(la, lb)
    plan = _C.choose_auto_threads({"numa": None})
    stats = auto.stats()
    assert stats["decode_threads"] == plan["decode_threads"] == auto.num_workers
    text = auto.describe()
    assert f"threads: {plan['decode_threads']} decode, {plan['reader_threads']} reader" in text
    assert f"chosen:  {plan['note']}" in text
    assert "prefetch: auto, " in text and "max_memory 1.0 MiB: set (max_memory)" in text


def test_explicit_num_workers_keeps_torch_meaning(image_tree):
    ds = rl.ImageFolder(image_tree, transform=SMALL)
    loader = rl.DataLoader(ds, batch_size=4, num_workers=0)  # torch: in-process; here one thread
    assert loader.stats()["decode_threads"] == 1
    assert loader.stats()["threads_note"] == "decode 1, readers 1: set explicitly"
    assert "prefetch: 2 batches" in loader.describe()
    loader = rl.DataLoader(ds, batch_size=4, num_workers=3, prefetch_factor=2, reader_threads=2)
    stats = loader.stats()
    assert (stats["decode_threads"], stats["reader_threads"], stats["prefetch_batches"]) == (3, 2, 6)


def test_auto_threads_keep_given_reader_threads(image_tree):
    loader = rl.DataLoader(rl.ImageFolder(image_tree, transform=SMALL), batch_size=4,
                           num_workers="auto", reader_threads=3)
    assert loader.stats()["reader_threads"] == 3


@pytest.mark.parametrize("kwargs, name, error", [
    (dict(num_workers="many"), "num_workers", ValueError),
    (dict(num_workers=-1), "num_workers", ValueError),
    (dict(num_workers=2.5), "num_workers", TypeError),
    (dict(prefetch_factor="deep"), "prefetch_factor", ValueError),
    (dict(prefetch_factor=0), "prefetch_factor", ValueError),
    (dict(max_memory=-1), "max_memory", ValueError),
    (dict(max_memory=0), "max_memory", ValueError),
    (dict(max_memory="2XB"), "max_memory", ValueError),
    (dict(max_memory="GB"), "max_memory", ValueError),
    (dict(max_memory=True), "max_memory", TypeError),
    (dict(max_memory=2.5e9), "max_memory", TypeError),
    (dict(max_memory=10_000), "max_memory", ValueError),  # not even 2 slots of 2 x 3 KiB
])
def test_bad_values_name_the_argument(image_tree, kwargs, name, error):
    ds = rl.ImageFolder(image_tree, transform=SMALL)
    with pytest.raises(error, match=name):
        rl.DataLoader(ds, batch_size=2, **kwargs)


@pytest.mark.filterwarnings("ignore::ringloader.FallbackWarning")  # a torchvision folder
def test_prefetch_factor_needs_workers_as_in_torch(image_tree):
    import torchvision

    native = rl.ImageFolder(image_tree, transform=SMALL)
    generic = torchvision.datasets.ImageFolder(image_tree)
    with pytest.raises(ValueError, match="prefetch_factor"):  # torch 2.14 refuses it too
        torch.utils.data.DataLoader(generic, batch_size=2, num_workers=0, prefetch_factor=2)
    for ds in (native, generic):
        with pytest.raises(ValueError, match=r"prefetch_factor=2 needs num_workers > 0"):
            rl.DataLoader(ds, batch_size=2, num_workers=0, prefetch_factor=2)
        # None (torch's default), "auto" (ringloader's) and any number of workers are accepted.
        rl.DataLoader(ds, batch_size=2, num_workers=0, prefetch_factor=None)
        rl.DataLoader(ds, batch_size=2, num_workers=0, prefetch_factor="auto")
        rl.DataLoader(ds, batch_size=2, num_workers=1, prefetch_factor=2)
        rl.DataLoader(ds, batch_size=2, num_workers="auto", prefetch_factor=2)
    loader = rl.DataLoader(native, batch_size=2, num_workers=0)
    assert loader.native and loader.stats()["prefetch_batches"] == 2


def test_memory_sizes():
    assert _parse_memory(None) is None
    assert _parse_memory(1234) == 1234
    assert _parse_memory("2GB") == 2 * 10 ** 9
    assert _parse_memory("2 GiB") == 2 << 30
    assert _parse_memory("2g") == 2 << 30
    assert _parse_memory("512MiB") == 512 << 20
    assert _parse_memory("1.5GiB") == 3 << 29
    assert _parse_memory("100") == 100


@pytest.mark.filterwarnings("ignore::ringloader.FallbackWarning")  # a torchvision folder
def test_max_memory_is_native_only_on_the_generic_path(image_tree):
    import torchvision

    ds = torchvision.datasets.ImageFolder(image_tree)
    with pytest.raises(ValueError, match="max_memory"):
        rl.DataLoader(ds, batch_size=2, max_memory="1GB")
    # num_workers="auto" sizes torch's worker processes the same way.
    loader = rl.DataLoader(ds, batch_size=2, num_workers="auto", prefetch_factor="auto")
    assert loader.num_workers == _C.choose_auto_threads({"numa": None})["decode_threads"]


# ---- adaptive prefetch within the memory budget ----------------------------------------------

def wait_for(predicate, what: str, limit: float = 30.0, loader=None):
    """Waits for a state of the pipeline (not a duration): fails after `limit` seconds."""
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() >= deadline:
            state = {k: v for k, v in loader.stats().items() if isinstance(v, int)} if loader else {}
            raise AssertionError(f"timed out waiting for {what}: {state}")
        time.sleep(0.002)


def native_loader(image_tree: Path, max_memory: int, batch_size: int = 2):
    ds = rl.ImageFolder(image_tree, transform=SMALL)
    options = dict(batch_size=batch_size, num_workers=1, reader_threads=1, prefetch_batches=2,
                   auto_prefetch=True, max_memory=max_memory, **ds.native_options())
    return _C.Loader([p for p, _ in ds.samples], list(ds.targets), options), len(ds)


@pytest.fixture(scope="module")
def slow_tree(tmp_path_factory) -> Path:
    """16 copies of one 1200x900 photo: each batch of 2 takes tens of ms to decode on one thread,
    so a consumer that asks for a batch its slot was just freed for always finds it unfinished."""
    from imagegen import jpeg_bytes

    root = tmp_path_factory.mktemp("slow")
    data = jpeg_bytes(1200, 900, seed=5)
    for i in range(16):
        folder = root / f"class_{i % 2}"
        folder.mkdir(exist_ok=True)
        (folder / f"img_{i:02d}.jpg").write_bytes(data)
    return root


def test_prefetch_grows_when_the_consumer_waits_after_the_pipeline_stood_full(slow_tree):
    slot = 3 * 32 * 32 + 2 * 8  # 1 sample + label + index
    loader, n = native_loader(slow_tree, max_memory=8 * slot, batch_size=1)
    s = loader.stats()
    assert (s["slot_bytes"], s["max_slots"], s["prefetch_batches"], s["prefetch_max"]) == (slot, 8, 2, 4)
    depths = []
    for epoch in range(6):  # one epoch is enough unless the drain was descheduled for long
        loader.start_builtin_epoch(epoch)
        taken = 0
        depth = loader.stats()["prefetch_batches"]
        while depth < 4 and taken < n - 1:
            # A slow step: the pipeline completes every batch it can start and stands idle ...
            wait_for(lambda: loader.stats()["batches_completed"] >=
                     epoch * n + min(n, taken + loader.stats()["slots_allocated"]),
                     "the pipeline to stand idle", loader=loader)
            # ... then fast steps drain it until one has to wait: the pipeline deepens by one.
            grown = loader.stats()["prefetch_grown"]
            while loader.stats()["prefetch_grown"] == grown and taken < n:
                batch = loader.next()
                assert batch is not None
                taken += 1
                del batch
            depth = loader.stats()["prefetch_batches"]
            depths.append(depth)
        while loader.next() is not None:
            pass
        if depth == 4:
            break
    s = loader.stats()
    assert depths[-1] == 4, depths  # grew to the cap ...
    assert max(depths) <= 4 and s["prefetch_grown"] == 2  # ... and never past it
    assert s["slots_allocated"] <= 8
    assert s["idle_spells"] >= 2


def test_prefetch_stays_put_when_the_consumer_never_waits(slow_tree):
    slot = 3 * 32 * 32 + 2 * 8
    loader, n = native_loader(slow_tree, max_memory=8 * slot, batch_size=1)
    loader.start_builtin_epoch(0)
    for b in range(n):
        # Every batch the pipeline can have started (it fills every slot it has) is complete, so
        # batch b is, before the consumer asks: it never waits, so the pipeline never deepens,
        # however often it stood idle.
        wait_for(lambda: loader.stats()["batches_completed"] >= min(n, b + loader.stats()["slots_allocated"]),
                 "the pipeline to stand idle", loader=loader)
        assert loader.next() is not None
    assert loader.next() is None
    s = loader.stats()
    assert s["prefetch_grown"] == 0 and s["prefetch_batches"] == 2
    assert s["idle_spells"] >= n - 3


def test_memory_budget_bounds_held_batches_too(image_tree):
    slot = 2 * (3 * 32 * 32) + 2 * 2 * 8
    loader, n = native_loader(image_tree, max_memory=5 * slot)
    assert loader.stats()["max_slots"] == 5
    loader.start_builtin_epoch(0)
    held = [loader.next() for _ in range(5)]
    assert all(b is not None for b in held)
    with pytest.raises(rl.SlotsExhaustedError):
        loader.next()
    assert loader.stats()["slots_allocated"] == 5
    held.clear()
    assert loader.next() is not None  # nothing lost


def test_one_cpu_affinity_picks_one_decode_thread_and_no_false_explicit_torch_threads(tmp_path):
    # As under `taskset -c 0`: torch then defaults to 1 thread by itself, which is not "explicit".
    import json
    import subprocess
    import sys

    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "import json, torch\n"
        "from ringloader.dataloader import _auto_threads\n"
        "print(json.dumps(_auto_threads({'numa': None})))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout.strip().splitlines()[-1])
    assert (plan["usable_cpus"], plan["decode_threads"], plan["reader_threads"]) == (1, 1, 1)
    assert "(affinity 1, " in plan["note"]
    assert "not set explicitly" in plan["note"], plan["note"]


def test_python_bench_tune_runs_the_native_trials(image_tree):
    import subprocess
    import sys

    if not (Path(rl.__file__).parent / "bin" / "ringloader-bench").exists():
        pytest.skip("this ringloader was built without the native CLI (RINGLOADER_BUILD_BENCH=OFF)")

    done = subprocess.run([sys.executable, "-m", "ringloader.bench", "--tune", "--root", str(image_tree),
                           "--batch-size", "4", "--tune-seconds", "1", "--transform", "eval"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("ringloader-bench --tune: eval on ")
    assert sum(line.strip().startswith("trial ") for line in out.splitlines()) >= 4
    assert "  choice        decode " in out
    assert "ringloader.DataLoader(dataset, batch_size=4, num_workers=" in out
    bad = subprocess.run([sys.executable, "-m", "ringloader.bench", "--tune", "--root", str(image_tree),
                          "--transform", "tv-recipe"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--transform train or eval" in bad.stderr


def test_default_memory_budget_is_a_quarter_of_what_is_available(tmp_path, image_tree):
    ds = rl.ImageFolder(image_tree, transform=SMALL)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 8000 kB\nMemAvailable:    4096 kB\n")  # 4 MiB: a 1 MiB budget
    options = dict(batch_size=2, num_workers=1, meminfo_path=str(meminfo),
                   **fake_cgroup_v2(tmp_path, "max 100000"), **ds.native_options())
    loader = _C.Loader([p for p, _ in ds.samples], list(ds.targets), options)
    s = loader.stats()
    assert s["max_memory"] == 1 << 20
    assert s["max_slots"] == (1 << 20) // s["slot_bytes"]
    assert s["memory_budget_note"] == "the default, a quarter of 4.0 MiB available (MemAvailable), at most 2 GiB"
    # The real machine's default, as describe() reports it.
    loader = rl.DataLoader(ds, batch_size=2)
    line = next(line for line in loader.describe().splitlines() if line.strip().startswith("slots:"))
    amount = _format_bytes(loader.stats()["max_memory"])
    assert f"(max_memory {amount}: the default, " in line and line.count(f" {amount}") == 1, line


def test_a_prefetch_factor_that_does_not_fit_is_cut_with_a_warning(image_tree):
    ds = rl.ImageFolder(image_tree, transform=SMALL)
    slot = 2 * (3 * 32 * 32) + 2 * 2 * 8
    fixed = [(x.clone(), y.clone()) for x, y in rl.DataLoader(ds, batch_size=2, num_workers=1)]
    with pytest.warns(UserWarning, match=r"prefetch_factor=2 \(4 batches\) does not fit the memory budget "
                                         r"\(18.1 KiB\): prefetch 4 -> 2 batches \(the budget holds 3 slots"):
        loader = rl.DataLoader(ds, batch_size=2, num_workers=2, prefetch_factor=2, max_memory=3 * slot)
    s = loader.stats()
    assert (s["max_slots"], s["prefetch_batches"], s["read_ahead"]) == (3, 2, False)
    for _ in range(2):  # two epochs within 3 slots, nothing read ahead, the same batches
        got = [(x.clone(), y.clone()) for x, y in loader]
        assert len(got) == len(fixed)
        assert all(torch.equal(a, b) and torch.equal(la, lb) for (a, la), (b, lb) in zip(got, fixed))
        assert loader.stats()["slots_allocated"] <= 3
    assert loader.stats()["epochs_queued"] == 0
    text = loader.describe()
    assert "prefetch: 2 batches (prefetch_factor x num_workers = 4, cut to fit the memory budget: see 'cut')" in text
    assert "  cut:     prefetch 4 -> 2 batches (the budget holds 3 slots of 6.0 KiB; one is the training loop's); " \
           "epoch read-ahead off" in text
    assert "drained between epochs (the memory budget is too tight to read the next epoch ahead" in text
    # The default depth (prefetch_factor not given) is cut the same way, without a warning.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = rl.DataLoader(ds, batch_size=2, num_workers=2, max_memory=3 * slot)
    assert quiet.stats()["prefetch_batches"] == 2


def test_describe_says_what_the_budget_covers(image_tree):
    loader = rl.DataLoader(rl.ImageFolder(image_tree, transform=SMALL), batch_size=2, num_workers=2, io_depth=8)
    text = loader.describe()
    # reader_threads x io_depth + 4 x num_workers file buffers per epoch, outside the budget.
    assert ("  budget:  covers the batch slots, batches you keep included, and decodes that need over 16 MiB "
            "(a large image waits its turn, or fails its sample when the slots leave too little); not the "
            "16 file read buffers per "
            "epoch (each as large as the largest file it read; a second set while the next epoch is read "
            "ahead), nor device buffers") in text
    assert "  cut:" not in text and loader.stats()["slots_note"] == ""


def test_a_budget_below_two_slots_is_refused_with_the_need(image_tree):
    ds = rl.ImageFolder(image_tree, transform=SMALL)
    with pytest.raises(ValueError, match=r"max_memory=10000 bytes holds 1 batch slot of 6176 bytes .* needs at least "
                                         r"2 .*: 2 x 6176 = 12352 bytes .*Raise max_memory to at least 12352 "
                                         r"bytes, or lower batch_size or the output size"):
        rl.DataLoader(ds, batch_size=2, max_memory=10_000)


def test_numa_node_narrows_the_budget(tmp_path, image_tree, no_explicit_threads):
    # A fake two-node machine: node 0 holds one of our CPUs, node 1 the rest.
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs 2 allowed CPUs to split them over two nodes")
    sysfs = tmp_path / "sys"
    for node, cpus in ((0, str(allowed[-1])), (1, ",".join(map(str, allowed[:-1])))):
        d = sysfs / "devices" / "system" / "node" / f"node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
    plan = _C.choose_auto_threads({"numa": 0, "numa_sysfs_root": str(sysfs), **fake_cgroup_v2(tmp_path, "max 100000")})
    assert (plan["usable_cpus"], plan["decode_threads"]) == (1, 1)
    assert f"(affinity {len(allowed)}, NUMA node 0: 1, no cgroup quota)" in plan["note"]
    plan = _C.choose_auto_threads({"numa": 1, "numa_sysfs_root": str(sysfs), **fake_cgroup_v2(tmp_path / "b", "max 100000")})
    assert plan["usable_cpus"] == len(allowed) - 1
