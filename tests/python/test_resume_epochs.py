"""A run killed at any batch and resumed from its checkpoint yields exactly what the uninterrupted
run yields: the rest of the checkpointed epoch and the epochs after it (orders, augmentations)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.utils.data as tud

import ringloader as rl
from ringloader import transforms as T

from imagegen import jpeg_bytes

TRAIN = T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ToTensor()])
EPOCHS = 5  # epochs 0 and 1 are checkpointed in, then at least three more follow


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """12 classes x 1 image: a label is its sample's index; 3 batches of 4 (2 per rank of 2)."""
    root = tmp_path_factory.mktemp("resume")
    for i in range(12):
        (root / f"c{i:02d}").mkdir()
        (root / f"c{i:02d}" / "x.jpg").write_bytes(jpeg_bytes(40 + i, 36, seed=i))
    return root


def make(tree: Path, config: dict) -> rl.DataLoader:
    """A loader as a fresh process builds it: its own generator, seeded as the first run's."""
    kwargs = dict(batch_size=4, num_workers=1, shuffle=True)
    if config["generator"]:
        kwargs["generator"] = torch.Generator().manual_seed(5)
    if not config["persistent"]:
        kwargs["persistent_workers"] = False
    if config["ranks"]:
        kwargs.update(rank=1, world_size=2, seed=3)
    return rl.DataLoader(rl.ImageFolder(str(tree), transform=TRAIN), **kwargs)


def run_epochs(loader: rl.DataLoader, first: int, last: int, config: dict) -> list:
    """Epochs first..last-1 as a training loop runs them (set_epoch with ranks)."""
    out = []
    for e in range(first, last):
        if config["ranks"]:
            loader.set_epoch(e)
        out.append([(x.clone(), y.clone()) for x, y in loader])
    return out


def resumed_run(tree: Path, config: dict, epoch: int, k) -> list:
    """Killed after `k` batches of `epoch` (k="end": after the epoch's loop ended), then resumed
    by a fresh loader: what the whole run saw, epoch by epoch."""
    torch.manual_seed(0)
    loader = make(tree, config)
    seen = run_epochs(loader, 0, epoch, config)
    if config["ranks"]:
        loader.set_epoch(epoch)
    if k == "end":
        seen.append([(x.clone(), y.clone()) for x, y in loader])
        part = None
    else:
        it = iter(loader)
        part = [(x.clone(), y.clone()) for x, y in (next(it) for _ in range(k))]
    state, rng = loader.state_dict(), torch.get_rng_state()  # what a training script saves
    del loader
    if k == "end":
        assert state["complete"] and state["epoch"] == epoch + 1
    else:
        assert not state["complete"] and state["delivered"] == k, state
        del it

    torch.manual_seed(0)  # the new process seeds as the first one did...
    resumed = make(tree, config)
    resumed.load_state_dict(state)
    torch.set_rng_state(rng)  # ...and restores torch's RNG from the checkpoint
    start = state["epoch"]
    rest = run_epochs(resumed, start, EPOCHS, config)
    if part is not None:
        rest[0] = part + rest[0]
    return seen + rest


def assert_same_epochs(got: list, want: list, where: str) -> None:
    assert len(got) == len(want), where
    for e, (a, b) in enumerate(zip(got, want)):
        assert [y.tolist() for _, y in a] == [y.tolist() for _, y in b], f"{where}: epoch {e} order"
        for (xa, _), (xb, _) in zip(a, b):
            assert torch.equal(xa, xb), f"{where}: epoch {e} augmentations"


CONFIGS = [dict(generator=g, persistent=p, ranks=r)
           for g in (True, False) for p in (True, False) for r in (False, True)]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(
    k if v else f"no_{k}" for k, v in c.items()))
def test_killed_at_every_batch_resumes_the_uninterrupted_run(tree: Path, config: dict):
    torch.manual_seed(0)
    reference = make(tree, config)
    want = run_epochs(reference, 0, EPOCHS, config)
    per_epoch = len(reference)
    assert per_epoch == (2 if config["ranks"] else 3)
    # The uninterrupted run is torch's order: the same sampler over the same generator/seed.
    torch.manual_seed(0)
    if config["ranks"]:
        sampler = tud.DistributedSampler(range(12), num_replicas=2, rank=1, seed=3)
        theirs = tud.DataLoader(range(12), batch_size=4, sampler=sampler)
    else:
        theirs = tud.DataLoader(range(12), batch_size=4, shuffle=True, generator=(
            torch.Generator().manual_seed(5) if config["generator"] else None))
    torch_orders = []
    for e in range(EPOCHS):
        if config["ranks"]:
            sampler.set_epoch(e)
        torch_orders.append([b.tolist() for b in theirs])
    assert [[y.tolist() for _, y in e] for e in want] == torch_orders
    # Every checkpoint position of epochs 0 and 1, "after the last batch" (delivered == len,
    # complete=False) and "after the loop ended" (complete=True) included.
    for epoch in (0, 1):
        for k in list(range(per_epoch + 1)) + ["end"]:
            got = resumed_run(tree, config, epoch, k)
            assert_same_epochs(got, want, f"killed at epoch {epoch}, batch {k}")


def test_checkpoint_holds_the_generators_and_checks_them(tree: Path):
    gen = torch.Generator().manual_seed(5)
    loader = rl.DataLoader(rl.ImageFolder(str(tree), transform=TRAIN), batch_size=4, shuffle=True,
                           generator=gen)
    for _ in loader:
        pass
    state = loader.state_dict()
    assert state["complete"] and torch.equal(state["generators"][0], gen.get_state())
    plain = rl.DataLoader(rl.ImageFolder(str(tree), transform=TRAIN), batch_size=4, shuffle=True)
    assert "generators" not in plain.state_dict()
    with pytest.raises(ValueError, match="1 random generator.*this loader has 0"):
        plain.load_state_dict(state)


def test_sigkill_then_resume_in_a_new_process(tree: Path, tmp_path: Path):
    config = dict(generator=True, persistent=True, ranks=False)
    torch.manual_seed(0)
    want = run_epochs(make(tree, config), 0, EPOCHS, config)
    checkpoint = tmp_path / "ckpt.pt"
    # The child checkpoints after every batch, as a training loop would, and is killed (SIGKILL)
    # right after the last batch of epoch 1 is checkpointed.
    code = f"""
        import os, signal, torch
        import ringloader as rl
        from ringloader import transforms as T
        torch.manual_seed(0)
        loader = rl.DataLoader(
            rl.ImageFolder({str(tree)!r}, transform=T.Compose(
                [T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ToTensor()])),
            batch_size=4, num_workers=1, shuffle=True, generator=torch.Generator().manual_seed(5))
        seen = []
        for epoch in range(2):
            for k, (x, y) in enumerate(loader):
                seen.append((epoch, x.clone(), y.clone()))
                torch.save({{"state": loader.state_dict(), "rng": torch.get_rng_state(),
                            "seen": seen}}, {str(checkpoint) + ".tmp"!r})
                os.replace({str(checkpoint) + ".tmp"!r}, {str(checkpoint)!r})
                if epoch == 1 and k == 2:
                    os.kill(os.getpid(), signal.SIGKILL)
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    saved = torch.load(checkpoint, weights_only=False)
    assert saved["state"]["epoch"] == 1 and saved["state"]["delivered"] == 3
    assert not saved["state"]["complete"]
    torch.manual_seed(0)
    resumed = make(tree, config)
    resumed.load_state_dict(saved["state"])
    torch.set_rng_state(saved["rng"])
    got = [[(x, y) for e, x, y in saved["seen"] if e == epoch] for epoch in range(2)]
    rest = run_epochs(resumed, 1, EPOCHS, config)
    assert rest[0] == [], "the killed epoch had no batch left"
    assert_same_epochs(got + rest[1:], want, "SIGKILL after epoch 1's last batch")
