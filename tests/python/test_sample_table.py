"""The compact sample table behind ImageFolder/DatasetFolder/FileList: list-like views of
samples/targets/imgs with torchvision's behaviour, reassignment honoured by the DataLoader,
cheap pickling, the bytes a sample costs at scale, and the epoch plan's index order."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.utils.data as tud
import torchvision

import ringloader as rl
from ringloader.core import _order
from ringloader import transforms as T

EVAL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])


@pytest.fixture(scope="module")
def pair(image_tree: Path):
    return rl.ImageFolder(str(image_tree), transform=EVAL), torchvision.datasets.ImageFolder(str(image_tree))


def test_views_read_as_torchvision_lists(pair):
    ours, theirs = pair
    for name in ("samples", "imgs", "targets"):
        mine, want = getattr(ours, name), getattr(theirs, name)
        assert len(mine) == len(want)
        assert mine == want and want == mine and not (mine != want)
        assert list(mine) == want
        assert mine[0] == want[0] and mine[-1] == want[-1] and mine[-len(want)] == want[0]
        assert mine[2:7] == want[2:7] and mine[::-3] == want[::-3] and mine[5:2] == []
        assert isinstance(mine[1:3], list)
        assert mine + [] == want and [] + mine == want
        assert want[3] in mine and mine.index(want[3]) == want.index(want[3]) and mine.count(want[0]) == want.count(want[0])
        with pytest.raises(IndexError):
            mine[len(want)]
        with pytest.raises(IndexError):
            mine[-len(want) - 1]
    assert all(type(t) is int for t in ours.targets)
    path, target = ours.samples[0]
    assert type(path) is str and type(target) is int
    assert np.asarray(ours.targets).tolist() == theirs.targets
    assert torch.as_tensor(np.asarray(ours.targets)).tolist() == theirs.targets


def test_views_refuse_in_place_changes_clearly(pair):
    ours, _ = pair
    with pytest.raises(TypeError, match=r"samples is a read-only view.*dataset.samples = \[\.\.\.\]"):
        ours.samples[0] = ("x.jpg", 0)
    with pytest.raises(TypeError, match="targets is a read-only view"):
        ours.targets.append(1)
    with pytest.raises(TypeError, match="imgs is a read-only view"):
        del ours.imgs[0]


def test_reassigned_samples_and_targets_are_honoured(image_tree: Path):
    ds = rl.ImageFolder(str(image_tree), transform=EVAL)
    loader = rl.DataLoader(ds, batch_size=4, num_workers=1)
    first_images, first_labels = next(iter(loader))
    # The common subsetting idiom: keep every other sample, relabel them, assign.
    kept = [(p, 3 - t) for p, t in ds.samples[::2]]
    ds.samples = kept
    assert ds.samples == kept and ds.imgs == kept and ds.targets == [t for _, t in kept]
    assert len(ds) == len(kept)
    images, labels = next(iter(loader))
    assert labels.tolist() == [t for _, t in kept[:4]]
    fresh = rl.FileList([p for p, _ in kept], [t for _, t in kept], transform=EVAL)
    assert torch.equal(images, next(iter(rl.DataLoader(fresh, batch_size=4, num_workers=1)))[0])
    assert torch.equal(images[0], first_images[0]) and not torch.equal(images[1], first_images[1])
    # A list assigned to targets is the one used (and kept, mutations included).
    new = [7] * len(ds)
    ds.targets = new
    assert ds.targets is new
    new[0] = 9
    assert next(iter(loader))[1].tolist() == [9, 7, 7, 7] and ds[0][1] == 9
    ds.targets = [1, 2]
    with pytest.raises(ValueError, match="targets has 2 entries for 12 samples"):
        iter(loader)
    with pytest.raises(TypeError, match=r"samples\[1\] must be a \(path, target\) pair"):
        ds.samples = [("a.jpg", 0), "b.jpg"]
    with pytest.raises(TypeError, match=r"labels\[0\] is 'x'"):
        ds.samples = [("a.jpg", "x")]


def test_pickles_as_a_few_buffers(image_tree: Path):
    ds = rl.ImageFolder(str(image_tree), transform=EVAL)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.samples == ds.samples and copy.targets == ds.targets
    assert torch.equal(copy[3][0], ds[3][0])
    # No tuple or str per sample in the pickle: its size is the path bytes plus a few per sample.
    path_bytes = sum(len(os.fsencode(p)) for p, _ in ds.samples)
    table = pickle.dumps(ds._table)
    assert len(table) < path_bytes + 12 * len(ds) + 600
    assert pickle.loads(pickle.dumps(ds.samples)) == ds.samples  # a view alone comes back a list


def test_file_list_and_surrogate_paths_round_trip(tmp_path: Path, image_tree: Path):
    paths = [str(p) for p in sorted(image_tree.rglob("*.jpg"))][:3]
    odd = tmp_path / os.fsdecode(b"caf\xe9.jpg")  # not UTF-8: kept as os.fsdecode spells it
    odd.write_bytes(Path(paths[0]).read_bytes())
    ds = rl.FileList(paths + [str(odd)], [0, 1, 2, 3], transform=EVAL)
    assert ds.samples == list(zip(paths + [str(odd)], [0, 1, 2, 3]))
    assert torch.equal(ds[3][0], ds[0][0])


MEMORY_CHILD = textwrap.dedent("""
    import gc, json, os, sys
    import ringloader as rl
    from ringloader import transforms as T
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    def peak():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak (VmHWM) restarts from here
    before = rss()
    ds = rl.ImageFolder(sys.argv[1], transform=T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()]))
    gc.collect()
    grown = rss() - before
    loader = rl.DataLoader(ds, batch_size=256, num_workers=2)
    gc.collect()
    print(json.dumps({"n": len(ds), "grown": grown, "loader": rss() - before - grown,
                      "peak": peak() - before, "native": loader.native,
                      "path_bytes": int(ds._table.ends[-1])}))
""")


def test_a_sample_costs_its_path_and_a_few_bytes(tmp_path: Path, image_tree: Path):
    """50k hard links in 50 classes: the dataset grows the process by its path bytes plus
    little (a list of (str, int) tuples would be ~250 bytes a sample more), and a DataLoader
    over it by a few bytes a sample (it reads the dataset's paths where they are, not a copy
    of each), the scan's peak included."""
    sources = sorted(image_tree.rglob("*.jpg"))  # several: a file takes at most 65,000 links
    root = tmp_path / "links"
    for c in range(50):
        folder = root / f"n{c:08d}"
        folder.mkdir(parents=True)
        for j in range(1000):
            os.link(sources[j % len(sources)], folder / f"n{c:08d}_{j}.JPEG")
    out = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(root)], capture_output=True,
                         text=True, check=True)
    got = json.loads(out.stdout)
    assert got["n"] == 50_000
    per_sample = got["grown"] / got["n"]
    path_len = got["path_bytes"] / got["n"]
    assert per_sample <= path_len + 40, (per_sample, path_len)
    assert per_sample <= 200
    assert got["native"]
    assert got["loader"] / got["n"] <= 32, got  # its labels (8 bytes a sample), and little else
    assert got["peak"] / got["n"] <= path_len + 64, (got, path_len)


@pytest.mark.parametrize("drop_last", [False, True])
def test_random_sampler_with_a_generator_plans_torchs_order(drop_last: bool):
    data = range(103)
    g_ours, g_torch = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    ours = tud.BatchSampler(tud.RandomSampler(data, generator=g_ours), 10, drop_last)
    theirs = tud.BatchSampler(tud.RandomSampler(data, generator=g_torch), 10, drop_last)
    for _ in range(2):  # the generator advances alike, so the next epoch matches too
        plan = _order.plan_epoch(ours, len(data))
        assert isinstance(plan.batches, _order.Batches)
        assert plan.batches == [list(b) for b in theirs]
        assert torch.equal(g_ours.get_state(), g_torch.get_state())
    assert _order.replay_epoch(plan.sampler_state, ours, len(data)) == plan.batches


def test_sequential_and_seeded_plans_are_arrays_equal_to_torchs():
    data = range(25)
    for sampler in (tud.SequentialSampler(data), tud.RandomSampler(data)):
        torch.manual_seed(3)
        plan = _order.plan_epoch(tud.BatchSampler(sampler, 4, False), len(data))
        torch.manual_seed(3)
        want = [list(b) for b in tud.BatchSampler(sampler, 4, False)]
        assert plan.batches == want
        flat, offsets = _order.to_arrays(plan.batches)
        assert flat.tolist() == [i for b in want for i in b]
        assert offsets.tolist() == [0, 4, 8, 12, 16, 20, 24, 25]
        tail = plan.batches[5:]
        assert list(tail) == want[5:] and len(tail) == 2 and tail[-1] == want[-1]
        assert _order.to_arrays(tail)[1].tolist() == [0, 4, 5]
