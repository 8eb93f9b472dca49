"""The native pipeline does not drain between epochs: the next epoch is read and decoded while
the current one is delivered, and kept only when the next iter() plans exactly that epoch."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import ringloader as rl
from ringloader import transforms as T

from imagegen import jpeg_bytes

TRAIN = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """10 classes x 2 images: 20 samples, 5 batches of 4."""
    root = tmp_path_factory.mktemp("overlap")
    for i in range(20):
        d = root / f"c{i // 2:02d}"
        d.mkdir(exist_ok=True)
        (d / f"x{i % 2}.jpg").write_bytes(jpeg_bytes(80 + 3 * i, 64, seed=500 + i))
    return root


def loader_over(tree: Path, **kwargs) -> rl.DataLoader:
    kwargs.setdefault("batch_size", 4)
    kwargs.setdefault("num_workers", 2)
    return rl.DataLoader(rl.ImageFolder(str(tree), transform=TRAIN), **kwargs)


def epoch(loader) -> list:
    return [(x.clone(), y.clone()) for x, y in loader]


def assert_same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(ya, yb)
        assert torch.equal(xa, xb)  # bit-identical, not close


def wait_ahead(loader, samples: int) -> None:
    """Until the pipeline decoded `samples` of the epoch read ahead (on its own threads)."""
    deadline = time.monotonic() + 20
    while loader.stats()["samples_ahead"] < samples:
        assert time.monotonic() < deadline, loader.stats()
        time.sleep(0.005)


def test_two_shuffled_epochs_equal_a_loader_that_drains(tree: Path):
    overlap = loader_over(tree, shuffle=True, generator=torch.Generator().manual_seed(3))
    drained = loader_over(tree, shuffle=True, generator=torch.Generator().manual_seed(3),
                          persistent_workers=False)
    first = epoch(overlap)
    # Nothing of epoch 1 was asked for, yet the pipeline went on with it.
    wait_ahead(overlap, 4)
    assert overlap.stats()["samples"] == 20, "work ahead is counted apart until used"
    second = epoch(overlap)
    assert_same(first, epoch(drained))
    assert_same(second, epoch(drained))
    assert not torch.equal(first[0][1], second[0][1]), "the epochs differ in order"
    stats = overlap.stats()
    assert (stats["epochs_queued"], stats["epochs_adopted"]) == (2, 1)
    assert stats["samples"] == 40, "epoch 1 was not decoded twice"
    assert drained.stats()["epochs_queued"] == 0
    assert "read and decoded while this one is delivered (1 of 2" in overlap.describe()
    assert "drained between epochs (persistent_workers=False" in drained.describe()


def test_default_loader_leaves_torchs_rng_stream_as_torch_would(tree: Path):
    # No generator: the base seed and the shuffle come from torch's global RNG. Reading ahead
    # peeks at it and puts it back, so the stream the training loop sees is unchanged.
    def run(**kwargs):
        torch.manual_seed(11)
        loader = loader_over(tree, shuffle=True, **kwargs)
        out = [epoch(loader) for _ in range(3)]
        return out, torch.rand(4), loader

    overlapped, after_overlap, loader = run()
    drained, after_drain, _ = run(persistent_workers=False)
    for a, b in zip(overlapped, drained):
        assert_same(a, b)
    assert torch.equal(after_overlap, after_drain)
    assert loader.stats()["epochs_adopted"] == 2


def test_rng_drawn_between_epochs_cancels_and_stops_predicting(tree: Path):
    def run(**kwargs):
        torch.manual_seed(12)
        loader = loader_over(tree, shuffle=True, **kwargs)
        out = []
        for _ in range(3):
            out.append(epoch(loader))
            torch.rand(1)  # a training loop drawing from torch's global RNG
        return out, loader

    overlapped, loader = run()
    drained, _ = run(persistent_workers=False)
    for a, b in zip(overlapped, drained):
        assert_same(a, b)
    stats = loader.stats()
    assert (stats["epochs_queued"], stats["epochs_adopted"]) == (1, 0)
    assert "torch's random generator is drawn from or re-seeded between epochs" in loader.describe()


def test_set_epoch_to_another_epoch_takes_effect_exactly(tree: Path):
    def fresh(e):
        loader = loader_over(tree, shuffle=True, rank=0, world_size=2, seed=4,
                             generator=torch.Generator().manual_seed(1))
        loader.set_epoch(e)
        return loader

    loader = fresh(0)
    reference = fresh(0)
    for e in range(3):  # the usual loop: set_epoch(e) before each epoch
        loader.set_epoch(e)
        reference.set_epoch(e)
        assert_same(epoch(loader), epoch(reference))
    assert loader.stats()["epochs_adopted"] == 2
    # Epoch 3 was read ahead; jumping to epoch 7 cancels it and gives epoch 7 as planned.
    wait_ahead(loader, 4)
    loader.set_epoch(7)
    assert not loader._native.has_queued_epoch()
    reference.set_epoch(7)
    assert_same(epoch(loader), epoch(reference))
    assert loader.stats()["epochs_adopted"] == 2


def test_load_state_dict_mid_epoch_cancels_the_queued_epoch(tree: Path):
    gen = torch.Generator().manual_seed(5)
    first = loader_over(tree, shuffle=True, generator=gen)
    it = iter(first)
    for _ in range(2):
        next(it)
    state = first.state_dict()
    remaining = [(x.clone(), y.clone()) for x, y in it]

    other = loader_over(tree, shuffle=True, generator=torch.Generator().manual_seed(99))
    epoch(other)
    wait_ahead(other, 4)
    assert other._native.has_queued_epoch()
    other.load_state_dict(state)
    assert not other._native.has_queued_epoch()
    assert_same(epoch(other), remaining)
    assert other.stats()["epochs_adopted"] == 0


def test_samplers_with_state_of_their_own_are_not_read_ahead(tree: Path):
    class Halves(tud.Sampler):
        """Alternates between the two halves of the dataset: state the loader cannot see."""

        def __init__(self):
            self.calls = 0

        def __len__(self):
            return 10

        def __iter__(self):
            self.calls += 1
            start = 0 if self.calls % 2 else 10
            return iter(range(start, start + 10))

    sampler = Halves()
    loader = loader_over(tree, sampler=sampler)
    labels = [torch.cat([y for _, y in loader]).tolist() for _ in range(2)]
    assert labels == [[i // 2 for i in range(10)], [i // 2 for i in range(10, 20)]]
    assert sampler.calls == 2, "never iterated ahead"
    assert loader.stats()["epochs_queued"] == 0


def test_generic_path_loaders_are_unaffected():
    data = tud.TensorDataset(torch.arange(10.0), torch.arange(10))
    for kwargs in ({}, {"persistent_workers": False}):
        ours = rl.DataLoader(data, batch_size=4, shuffle=True,
                             generator=torch.Generator().manual_seed(0), **kwargs)
        theirs = tud.DataLoader(data, batch_size=4, shuffle=True,
                                generator=torch.Generator().manual_seed(0))
        assert not ours.native
        for _ in range(2):
            for (a, b), (c, d) in zip(ours, theirs):
                assert torch.equal(a, c) and torch.equal(b, d)


def test_a_prediction_that_holds_is_the_next_plan(tree: Path, monkeypatch):
    # Each epoch is planned once: the prediction made at iter() k is iter() k+1's plan (with the
    # RNGs advanced as drawing it would), so reading ahead costs no second plan per epoch.
    from ringloader.core import _order

    calls = []
    real = _order.plan_epoch
    monkeypatch.setattr(_order, "plan_epoch", lambda *a: calls.append(1) or real(*a))
    loader = loader_over(tree, shuffle=True, generator=torch.Generator().manual_seed(8))
    for _ in range(3):
        epoch(loader)
    assert len(calls) == 4  # epoch 0, then one prediction per iter()
    assert loader.stats()["epochs_adopted"] == 2


@pytest.mark.parametrize("kind", ["weighted", "distributed_without_set_epoch"])
def test_other_replayable_samplers_match_a_loader_that_drains(tree: Path, kind: str):
    def run(**kwargs):
        torch.manual_seed(21)
        if kind == "weighted":
            sampler = tud.WeightedRandomSampler(torch.linspace(1, 2, 20), 16)
        else:
            sampler = tud.DistributedSampler(range(20), num_replicas=2, rank=1, shuffle=True)
        loader = loader_over(tree, sampler=sampler, **kwargs)
        return [epoch(loader) for _ in range(3)], torch.rand(2), loader

    overlapped, after_overlap, loader = run()
    drained, after_drain, _ = run(persistent_workers=False)
    for a, b in zip(overlapped, drained):
        assert_same(a, b)
    assert torch.equal(after_overlap, after_drain)
    # Weighted: every epoch predicted right. Distributed without set_epoch: the first prediction
    # (epoch + 1) misses, then the epoch is taken to stay.
    assert loader.stats()["epochs_adopted"] == (2 if kind == "weighted" else 1)


def test_describe_counts_used_waiting_and_cancelled_epochs(tree: Path):
    loader = loader_over(tree, shuffle=True, generator=torch.Generator().manual_seed(5))
    epoch(loader)
    epoch(loader)
    assert "(1 of 2 epochs read ahead were used, 1 is waiting for the next iter())" in loader.describe()
    loader.set_epoch(7)  # not the epoch queued: cancelled at once or at the next iter()
    epoch(loader)
    text = loader.describe()
    assert "1 of 3 epochs read ahead were used, 1 is waiting for the next iter(), 1 cancelled" in text, text


def write_tree(root: Path, seed: int) -> Path:
    """The 20-sample layout of `tree`, its pixels drawn from `seed`."""
    for i in range(20):
        d = root / f"c{i // 2:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"x{i % 2}.jpg").write_bytes(jpeg_bytes(80 + 3 * i, 64, seed=seed + i))
    return root


def swap_folder(data: Path, new: Path) -> None:
    """The usual atomic swap of a dataset folder: the new one renamed into place."""
    data.rename(data.with_name(data.name + ".old"))
    new.rename(data)


def rewrite_in_place(data: Path, seed: int) -> None:
    """Every file truncated and written again with new pixels (same inode, same directory)."""
    for i in range(20):
        with open(data / f"c{i // 2:02d}" / f"x{i % 2}.jpg", "r+b") as f:
            f.truncate(0)
            f.write(jpeg_bytes(80 + 3 * i, 64, seed=seed + i))


@pytest.mark.parametrize("change", ["swap", "in_place"])
def test_files_changed_between_epochs_are_read_again(tmp_path: Path, change: str):
    data = write_tree(tmp_path / "data", seed=500)
    overlap = loader_over(data, shuffle=True, generator=torch.Generator().manual_seed(3))
    drained = loader_over(data, shuffle=True, generator=torch.Generator().manual_seed(3),
                          persistent_workers=False)
    assert_same(epoch(overlap), epoch(drained))
    wait_ahead(overlap, 4)  # epoch 1 was read (from the old files) before they change
    if change == "swap":
        swap_folder(data, write_tree(tmp_path / "new", seed=900))
    else:
        rewrite_in_place(data, seed=900)
    second = epoch(overlap)
    assert_same(second, epoch(drained))  # the new files' pixels, as torch would read them
    assert overlap.stats()["epochs_adopted"] == 0
    text = overlap.describe()
    why = "was replaced (another inode)" if change == "swap" else ".jpg changed ("
    assert "1 read ahead dropped because their files changed before the epoch began" in text, text
    assert why in text, text
    # Unchanged files from then on: the read-ahead is used again.
    assert_same(epoch(overlap), epoch(drained))
    assert overlap.stats()["epochs_adopted"] == 1


def test_the_check_only_covers_what_can_be_read_ahead(tree: Path):
    # The pipeline holds at most its prefetch depth of the next epoch: only those rows' files
    # (and their folders) are compared, whatever the dataset's size.
    loader = loader_over(tree, shuffle=True, generator=torch.Generator().manual_seed(3))
    epoch(loader)
    files = loader._ahead.files
    depth = loader.stats()["prefetch_batches"] * 4
    leading = {loader._paths[i] for i in loader._ahead.flat[:depth].tolist()}
    assert {p for p in files if p.endswith(".jpg")} == leading
    assert {p for p in files if not p.endswith(".jpg")} == {str(Path(p).parent) for p in leading}
    assert all(state is not None for state in files.values())
