"""Drop-in semantics around the loop: error policies, resumable state, sharding, lifecycle."""

from __future__ import annotations

import _thread
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.utils.data as tud

import ringloader as rl
from ringloader import transforms as T

from imagegen import jpeg_bytes

SMALL = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])
EVAL = T.Compose([T.Resize(32), T.CenterCrop(32)])


@pytest.fixture(scope="module")
def ids_tree(tmp_path_factory) -> Path:
    """30 classes x 1 image: a label is its sample's index."""
    root = tmp_path_factory.mktemp("ids")
    for i in range(30):
        (root / f"c{i:02d}").mkdir()
        (root / f"c{i:02d}" / "x.jpg").write_bytes(jpeg_bytes(96 + i, 80, seed=i))
    return root


def labels_of(loader):
    return [y.tolist() for _, y in loader]


# ---- error policies ---------------------------------------------------------------------

def bad_tree(tmp_path: Path) -> Path:
    root = tmp_path / "bad"
    (root / "a").mkdir(parents=True)
    for i in range(8):
        data = b"not a jpeg" if i in (2, 5) else jpeg_bytes(80, 64, seed=i)
        (root / "a" / f"{i}.jpg").write_bytes(data)
    return root


def test_on_error_skip(tmp_path: Path):
    ds = rl.ImageFolder(bad_tree(tmp_path), transform=EVAL)
    loader = rl.DataLoader(ds, batch_size=3, on_error="skip", num_workers=2)
    sizes = [x.shape[0] for x, _ in loader]
    assert sizes == [2, 2, 2]  # [0,1,x] [3,4,x] [6,7]
    stats = loader.stats()
    assert stats["skipped"] == 2 and stats["errors"] == 2
    assert len(stats["recent_errors"]) == 2 and "2.jpg" in stats["recent_errors"][0]


def test_on_error_replace_is_deterministic(tmp_path: Path):
    ds = rl.ImageFolder(bad_tree(tmp_path), transform=EVAL)
    runs = []
    for workers in (1, 3):
        torch.manual_seed(0)
        loader = rl.DataLoader(ds, batch_size=3, on_error="replace", num_workers=workers)
        runs.append([x.clone() for x, _ in loader])
        assert [b.shape[0] for b in runs[-1]] == [3, 3, 2]
        assert loader.stats()["replaced"] == 2
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_on_error_bad_value(ids_tree: Path):
    with pytest.raises(ValueError, match="on_error"):
        rl.DataLoader(rl.ImageFolder(ids_tree, transform=EVAL), on_error="ignore")


# ---- resumable state ----------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["sequential", "shuffle", "generator"])
def test_state_dict_resume_is_bit_identical(ids_tree: Path, kind: str):
    def make():
        kw = {}
        if kind == "shuffle":
            kw["shuffle"] = True
        if kind == "generator":
            kw.update(shuffle=True, generator=torch.Generator().manual_seed(11))
        return rl.DataLoader(rl.ImageFolder(ids_tree, transform=SMALL), batch_size=4, num_workers=2, **kw)

    torch.manual_seed(3)
    full_loader = make()
    full = [(x.clone(), y.clone()) for x, y in full_loader]

    torch.manual_seed(3)
    first = make()
    it = iter(first)
    seen = [next(it) for _ in range(3)]
    state = first.state_dict()
    assert state["delivered"] == 3 and state["epoch"] == 0
    assert all(isinstance(v, (int, bool, str, dict, list, torch.Tensor)) for v in state.values())
    del it, first

    torch.manual_seed(999)  # the resumed run must not depend on the RNG's state
    resumed = make()
    resumed.load_state_dict(state)
    rest = [(x.clone(), y.clone()) for x, y in resumed]
    got = [(x, y) for x, y in seen] + rest
    assert len(got) == len(full)
    for (xa, ya), (xb, yb) in zip(got, full):
        assert torch.equal(ya, yb) and torch.equal(xa, xb)
    # After the resumed epoch, the next one is a fresh epoch 1.
    assert resumed.state_dict()["epoch"] == 1


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["sequential", "shuffle", "generator"])
def test_generic_path_keeps_torchs_order_and_resumes_mid_epoch(kind: str, workers: int):
    data = list(range(37))  # any map-style dataset

    def kwargs():
        kw = dict(batch_size=4, num_workers=workers)
        if kind == "shuffle":
            kw["shuffle"] = True
        if kind == "generator":
            kw.update(shuffle=True, generator=torch.Generator().manual_seed(11))
        return kw

    def order(loader):
        return [b.tolist() for b in loader]

    torch.manual_seed(3)
    reference = order(tud.DataLoader(data, **kwargs()))
    torch.manual_seed(3)
    full_loader = rl.DataLoader(data, **kwargs())
    assert not full_loader.native
    assert order(full_loader) == reference, "planning the epoch changed torch's order or RNG use"
    following = order(full_loader)
    assert following != reference or kind == "sequential"  # a new epoch, a new order

    torch.manual_seed(3)
    first = rl.DataLoader(data, **kwargs())
    it = iter(first)
    seen = [next(it).tolist() for _ in range(3)]
    state = first.state_dict()
    assert state["delivered"] == 3 and state["epoch"] == 0 and not state["complete"]
    assert "base_seed" not in state
    del it

    torch.manual_seed(999)  # the resumed order must not depend on the RNG's state
    resumed = rl.DataLoader(data, **kwargs())
    resumed.load_state_dict(state)
    assert seen + order(resumed) == reference
    after = resumed.state_dict()
    assert ("generators" in after) == (kind == "generator")
    after.pop("generators", None)
    assert after == {"version": 1, "epoch": 1, "delivered": 0, "complete": True}
    if kind != "shuffle":  # torch's global RNG is the training script's to restore
        assert order(resumed) == following, "the epoch after the resumed one is the next, not epoch 0"


def test_generic_path_resumes_onto_another_world_size():
    data = list(range(30))
    seen = set()
    states = []
    for rank in range(2):
        loader = rl.DataLoader(data, batch_size=2, shuffle=True, rank=rank, world_size=2, seed=5)
        it = iter(loader)
        for _ in range(3):
            seen.update(next(it).tolist())
        states.append(loader.state_dict())
    assert states[0]["sampler"]["kind"] == "distributed"
    remaining, counts = [], set()
    for rank in range(3):
        loader = rl.DataLoader(data, batch_size=2, shuffle=True, rank=rank, world_size=3, seed=5)
        loader.load_state_dict(states[0])
        got = [i for b in loader for i in b.tolist()]
        counts.add(len(got))
        remaining += got
    assert len(counts) == 1
    assert set(remaining) | seen == set(data) and not (set(remaining) & seen)
    assert len(remaining) - len(set(remaining)) < 3


def test_a_resharded_epoch_can_be_checkpointed_and_resharded_again():
    data = list(range(41))

    def ranks(world, state, steps=None):
        """Each rank of `world` resumes `state`; takes `steps` batches (all if None)."""
        out = []
        for rank in range(world):
            loader = rl.DataLoader(data, batch_size=3, shuffle=True, rank=rank, world_size=world, seed=8)
            loader.load_state_dict(state)
            it = iter(loader)
            got = [b.tolist() for b in (it if steps is None else (next(it) for _ in range(steps)))]
            out.append((got, loader.state_dict() if steps is not None else None))
        return out

    seen = []
    for rank in range(2):
        loader = rl.DataLoader(data, batch_size=3, shuffle=True, rank=rank, world_size=2, seed=8)
        it = iter(loader)
        seen += [i for _ in range(2) for i in next(it).tolist()]
        state = loader.state_dict()
    # 2 -> 3 ranks, one batch each, then a checkpoint of the resharded epoch...
    step = ranks(3, state, steps=1)
    seen += [i for got, _ in step for b in got for i in b]
    resharded = step[0][1]
    assert resharded["sampler"]["kind"] == "resharded" and resharded["delivered"] == 1
    # ...resumed on the same 3 ranks: exactly the uninterrupted resharded epoch's remainder...
    whole = ranks(3, state)
    again = ranks(3, resharded)
    for r in range(3):
        assert step[r][0] + again[r][0] == whole[r][0]
    # ...and resharded again, 3 -> 2: every sample not yet seen, once, plus padding.
    rest = [i for got, _ in ranks(2, resharded) for b in got for i in b]
    assert set(seen) | set(rest) == set(data)
    assert not (set(seen) & set(rest))
    assert len(seen) - len(set(seen)) < 3 and len(rest) - len(set(rest)) < 2


def test_generic_path_state_dict_refuses_what_has_no_order(ids_tree: Path):
    class Stream(tud.IterableDataset):
        def __iter__(self):
            return iter(range(5))

    with pytest.raises(TypeError, match="IterableDataset"):
        rl.DataLoader(Stream(), batch_size=2).state_dict()
    unbatched = rl.DataLoader(list(range(5)), batch_size=None)
    assert [int(x) for x in unbatched] == list(range(5))
    with pytest.raises(TypeError, match="batch_size=None"):
        unbatched.state_dict()
    # A generic checkpoint has no augmentation seed: the native path says so instead of guessing.
    generic = rl.DataLoader(list(range(30)), batch_size=2)
    it = iter(generic)
    next(it)
    native = rl.DataLoader(rl.ImageFolder(ids_tree, transform=EVAL), batch_size=2)
    with pytest.raises(ValueError, match="generic-path"):
        native.load_state_dict(generic.state_dict())


def test_state_after_complete_epoch(ids_tree: Path):
    loader = rl.DataLoader(rl.ImageFolder(ids_tree, transform=EVAL), batch_size=8)
    list(loader)
    state = loader.state_dict()
    assert state["complete"] and state["epoch"] == 1
    other = rl.DataLoader(rl.ImageFolder(ids_tree, transform=EVAL), batch_size=8)
    other.load_state_dict(state)
    assert len(list(other)) == 4


# ---- distributed ----------------------------------------------------------------------------

@pytest.mark.parametrize("world,shuffle,drop_last", [(2, True, False), (3, True, False), (4, False, True)])
def test_sharding_equals_distributed_sampler(ids_tree: Path, world, shuffle, drop_last):
    ds = rl.ImageFolder(ids_tree, transform=EVAL)
    union = []
    counts = set()
    for rank in range(world):
        loader = rl.DataLoader(ds, batch_size=3, shuffle=shuffle, rank=rank, world_size=world, seed=7,
                               drop_last=drop_last)
        ref_sampler = tud.DistributedSampler(list(range(30)), num_replicas=world, rank=rank, shuffle=shuffle,
                                             seed=7, drop_last=drop_last)
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            ref_sampler.set_epoch(epoch)
            ours = [i for b in labels_of(loader) for i in b]
            ref = list(tud.BatchSampler(ref_sampler, 3, drop_last))
            assert ours == [i for b in ref for i in b]
            if epoch == 0:
                union += ours
                counts.add(len(ours))
        # A DistributedSampler passed as sampler gives the same.
        passed = rl.DataLoader(ds, batch_size=3, sampler=tud.DistributedSampler(
            ds, num_replicas=world, rank=rank, shuffle=shuffle, seed=7, drop_last=drop_last), drop_last=drop_last)
        assert [i for b in labels_of(passed) for i in b] == [i for b in list(tud.BatchSampler(
            tud.DistributedSampler(list(range(30)), num_replicas=world, rank=rank, shuffle=shuffle, seed=7,
                                   drop_last=drop_last), 3, drop_last)) for i in b]
    assert len(counts) == 1, "every rank gets the same number of samples"
    if not drop_last:
        assert set(union) == set(range(30))


@pytest.mark.parametrize("old_world,new_world", [(2, 3), (4, 2), (3, 1)])
def test_resume_onto_another_world_size_sees_each_remaining_sample_once(ids_tree: Path, old_world, new_world):
    ds = rl.ImageFolder(ids_tree, transform=EVAL)
    seen = set()
    states = []
    for rank in range(old_world):
        loader = rl.DataLoader(ds, batch_size=2, shuffle=True, rank=rank, world_size=old_world, seed=5)
        it = iter(loader)
        for _ in range(2):
            seen.update(next(it)[1].tolist())
        states.append(loader.state_dict())
    assert len(seen) == 2 * 2 * old_world
    remaining = []
    counts = set()
    for rank in range(new_world):
        loader = rl.DataLoader(ds, batch_size=2, shuffle=True, rank=rank, world_size=new_world, seed=5)
        loader.load_state_dict(states[0])
        got = [i for b in labels_of(loader) for i in b]
        counts.add(len(got))
        remaining += got
    assert len(counts) == 1
    assert set(remaining) | seen == set(range(30))
    assert not (set(remaining) & seen)
    # Each not-yet-seen sample once, plus fewer than new_world padding duplicates.
    assert len(remaining) - len(set(remaining)) < new_world


def test_generic_path_shards_and_refuses_a_missing_gpu(ids_tree: Path):
    import torchvision

    tv = torchvision.datasets.ImageFolder(ids_tree)
    targets = list(range(30))
    for rank in range(3):
        ours = rl.DataLoader(targets, batch_size=4, shuffle=True, rank=rank, world_size=3, seed=2)
        assert not ours.native
        ref = tud.DataLoader(targets, batch_size=4, sampler=tud.DistributedSampler(
            targets, num_replicas=3, rank=rank, shuffle=True, seed=2))
        ours.set_epoch(1)
        ref.sampler.set_epoch(1)
        assert [b.tolist() for b in ours] == [b.tolist() for b in ref]
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA device"):
            rl.DataLoader(tv, batch_size=4, device="cuda")


def test_rank_arguments_validated(ids_tree: Path):
    ds = rl.ImageFolder(ids_tree, transform=EVAL)
    with pytest.raises(ValueError, match="rank"):
        rl.DataLoader(ds, rank=2, world_size=2)
    with pytest.raises(ValueError, match="together"):
        rl.DataLoader(ds, rank=0)
    with pytest.raises(ValueError, match="mutually exclusive"):
        rl.DataLoader(ds, rank=0, world_size=2, sampler=[0, 1])


DIST_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import torch, torch.distributed as dist
    import ringloader as rl
    from ringloader import transforms as T
    dist.init_process_group("gloo")
    root, out = sys.argv[1], sys.argv[2]
    loader = rl.DataLoader(rl.ImageFolder(root, transform=T.Compose([T.Resize(32), T.CenterCrop(32)])),
                           batch_size=4, shuffle=True)
    result = {}
    for epoch in range(2):
        loader.set_epoch(epoch)
        labels = [y.tolist() for _, y in loader]
        n = torch.tensor([len(labels)])
        dist.all_reduce(n)   # a DDP-style collective per epoch: hangs if ranks disagree
        result[epoch] = labels
    with open(os.path.join(out, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump({"world": dist.get_world_size(), "epochs": result}, f)
    dist.destroy_process_group()
""")


@pytest.mark.parametrize("nproc", [2, 3])
def test_torchrun_multi_process(tmp_path: Path, ids_tree: Path, nproc: int):
    script = tmp_path / "train.py"
    script.write_text(DIST_SCRIPT)
    # TMPDIR: torchrun leaves its torchelastic_* folder behind; keep it in the test's own.
    env = dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           str(script), str(ids_tree), str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(nproc)]
    for epoch in ("0", "1"):
        per_rank = [[i for b in r["epochs"][epoch] for i in b] for r in results]
        assert len({len(r["epochs"][epoch]) for r in results}) == 1, "same number of batches"
        union = [i for r in per_rank for i in r]
        assert set(union) == set(range(30))
        assert len(union) - 30 < nproc  # DistributedSampler padding only
    assert results[0]["epochs"]["0"] != results[0]["epochs"]["1"], "set_epoch reshuffles"


# ---- lifecycle ------------------------------------------------------------------------------

def test_two_iterators_newer_supersedes_older(ids_tree: Path):
    loader = rl.DataLoader(rl.ImageFolder(ids_tree, transform=EVAL), batch_size=4)
    a = iter(loader)
    next(a)
    b = iter(loader)
    assert len(list(b)) == len(loader)
    with pytest.raises(RuntimeError, match="superseded"):
        next(a)


def test_break_stops_the_epoch_threads_and_keeps_the_checkpoint(ids_tree: Path):
    loader = rl.DataLoader(rl.ImageFolder(ids_tree, transform=EVAL), batch_size=2, num_workers=2)
    before = len(os.listdir("/proc/self/task"))
    for i, _ in enumerate(loader):
        if i == 1:
            break
    assert len(os.listdir("/proc/self/task")) == before, "abandoned epoch's threads still running"
    state = loader.state_dict()
    assert state["delivered"] == 2 and not state["complete"]


def test_exception_in_loop_then_reiterate(ids_tree: Path):
    loader = rl.DataLoader(rl.ImageFolder(ids_tree, transform=EVAL), batch_size=4, num_workers=2)
    with pytest.raises(ZeroDivisionError):
        for _ in loader:
            1 / 0
    assert len(list(loader)) == len(loader)


@pytest.fixture(scope="module")
def slow_tree(tmp_path_factory) -> Path:
    """Large images: each takes long enough to decode that a short timeout fires."""
    root = tmp_path_factory.mktemp("slow")
    (root / "a").mkdir()
    big = jpeg_bytes(4000, 3000, seed=1)
    for i in range(6):
        (root / "a" / f"{i}.jpg").write_bytes(big)
    return root


def test_timeout_raises(slow_tree: Path):
    loader = rl.DataLoader(rl.ImageFolder(slow_tree, transform=T.Compose([T.Resize(64), T.CenterCrop(64)])),
                           batch_size=6, timeout=0.01, fast_decode=False)
    with pytest.raises(rl.LoaderTimeoutError, match="timed out"):
        next(iter(loader))
    with pytest.raises(ValueError):
        rl.DataLoader(rl.ImageFolder(slow_tree), timeout=-1)


class _SlowItems(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        time.sleep(1.0)
        return i


def test_timeout_raises_the_same_error_on_torchs_path():
    # A Dataset of plain values runs in torch's workers: their timeout is the same
    # LoaderTimeoutError as the native path's (still a RuntimeError, as torch raises).
    loader = rl.DataLoader(_SlowItems(), batch_size=2, num_workers=1, timeout=0.2)
    with pytest.raises(rl.LoaderTimeoutError, match="timeout=0.2 s.*torch's generic path"):
        next(iter(loader))
    assert list(rl.DataLoader(_SlowItems(), batch_size=2, num_workers=1, timeout=30))[1].tolist() == [2, 3]


class _StoreTimesOut(torch.utils.data.Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        raise RuntimeError("connection to the feature store timed out")


def test_a_datasets_own_timed_out_error_is_not_a_loader_timeout():
    loader = rl.DataLoader(_StoreTimesOut(), batch_size=2, num_workers=1, timeout=30)
    with pytest.raises(RuntimeError, match="feature store timed out") as caught:
        next(iter(loader))
    assert not isinstance(caught.value, rl.LoaderTimeoutError)


def test_keyboard_interrupt_during_next_and_recovery(slow_tree: Path):
    loader = rl.DataLoader(rl.ImageFolder(slow_tree, transform=T.Compose([T.Resize(64), T.CenterCrop(64)])),
                           batch_size=6, fast_decode=False)
    it = iter(loader)
    timer = threading.Timer(0.05, _thread.interrupt_main)
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        next(it)
    assert time.monotonic() - t0 < 5
    timer.join()
    x, _ = next(it)  # the loader is still usable
    assert x.shape == (6, 3, 64, 64)


def test_del_with_work_in_flight_does_not_hang(slow_tree: Path):
    t0 = time.monotonic()
    for _ in range(3):
        loader = rl.DataLoader(rl.ImageFolder(slow_tree, transform=T.Compose([T.Resize(64), T.CenterCrop(64)])),
                               batch_size=2, num_workers=2)
        it = iter(loader)
        del it, loader
    assert time.monotonic() - t0 < 30


def run_python(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout)


def test_interpreter_exit_with_loader_alive(ids_tree: Path):
    proc = run_python(f"""
        import ringloader as rl
        from ringloader import transforms as T
        loader = rl.DataLoader(rl.ImageFolder({str(ids_tree)!r}, transform=T.Compose([T.Resize(32), T.CenterCrop(32)])),
                               batch_size=2, num_workers=2)
        it = iter(loader)
        x, y = next(it)
        keep = x
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_fork_child_restarts_and_stale_iterator_raises(ids_tree: Path):
    proc = run_python(f"""
        import os, sys
        import ringloader as rl
        from ringloader import transforms as T
        loader = rl.DataLoader(rl.ImageFolder({str(ids_tree)!r}, transform=T.Compose([T.Resize(32), T.CenterCrop(32)])),
                               batch_size=4, num_workers=2)
        it = iter(loader)
        next(it)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                next(it)
                code = 3
            except RuntimeError as e:
                if "fork" not in str(e):
                    code = 4
            if code == 0 and len(list(loader)) != len(loader):
                code = 5
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        rest = sum(1 for _ in it)
        print(os.waitstatus_to_exitcode(status), rest + 1 == len(loader))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "True"], proc.stdout + proc.stderr
