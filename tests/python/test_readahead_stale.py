"""The epoch read ahead never delivers a file's old bytes: files rewritten in place between epochs
are read as they are now wherever they fall in the next epoch's order, also past the prefetch
depth (the files the read-ahead is checked against)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader import transforms as T

from imagegen import _encode_other

BATCH = 4
DEPTH = 8  # prefetch_factor=8 x num_workers=1 batches
SAMPLES = 96  # 24 batches: the read-ahead could run well past DEPTH


def image(i: int, seed: int) -> bytes:
    """Sample i's BMP: its size depends on nothing but the 24x24 shape, so a rewrite with
    other pixels keeps the file's size."""
    return _encode_other(24, 24, "BMP", seed=seed + i)


def path_of(root: Path, i: int) -> Path:
    return root / f"c{i // 8:02d}" / f"x{i % 8}.bmp"


def write_tree(root: Path, seed: int) -> Path:
    for i in range(SAMPLES):
        path_of(root, i).parent.mkdir(parents=True, exist_ok=True)
        path_of(root, i).write_bytes(image(i, seed))
    return root


def loader_over(root: Path, **kwargs) -> rl.DataLoader:
    return rl.DataLoader(rl.ImageFolder(str(root), transform=T.Compose([T.Resize((16, 16)), T.ToTensor()])),
                         batch_size=BATCH, num_workers=1, prefetch_factor=8, shuffle=True,
                         generator=torch.Generator().manual_seed(7), **kwargs)


def epoch_accumulating(loader, steps: int = 4) -> list:
    """One epoch as a training loop that accumulates gradients over ``steps`` batches (keeping
    them until then): copies of every batch. While it holds batches the pool has more slots
    than the prefetch depth, and they are all free once it is done."""
    out, held = [], []
    for x, y in loader:
        out.append((x.clone(), y.clone()))
        held.append((x, y))
        if len(held) == steps:
            held = []
    return out


def assert_same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for n, ((xa, ya), (xb, yb)) in enumerate(zip(a, b)):
        assert torch.equal(ya, yb), f"batch {n}: labels (masks) differ"
        assert torch.equal(xa, xb), f"batch {n}: pixels differ (a file's old bytes were delivered)"


def read_ahead_settled(loader) -> int:
    """Samples of the next epoch decoded ahead, once the read-ahead stopped (bounded wait)."""
    deadline = time.monotonic() + 20
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = loader.stats()["samples_ahead"]
        if now != last:
            last, since = now, time.monotonic()
        elif now >= DEPTH * BATCH and time.monotonic() - since > 0.3:
            return now
        time.sleep(0.01)
    raise AssertionError(f"the read-ahead did not settle: {loader.stats()}")


def rewrite(path: Path, data: bytes, keep_mtime: bool) -> None:
    """``data`` written over the file in place (same inode); with ``keep_mtime`` its
    modification time put back, as a copy tool that preserves times leaves it."""
    before = path.stat()
    assert len(data) == before.st_size
    with open(path, "r+b") as f:
        f.write(data)
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert path.stat().st_mtime_ns == before.st_mtime_ns


@pytest.mark.parametrize("keep_mtime", [True, False], ids=["same_size_and_mtime", "mtime_changed"])
def test_files_rewritten_past_the_prefetch_depth_are_read_again(tmp_path: Path, keep_mtime: bool):
    data = write_tree(tmp_path / "data", seed=100)
    overlap = loader_over(data)
    drained = loader_over(data, persistent_workers=False)
    first = epoch_accumulating(overlap)
    assert_same(first, epoch_accumulating(drained))
    # Slots the read-ahead could fill: more than the depth (held batches made the pool grow).
    assert overlap.stats()["slots_allocated"] > DEPTH
    ahead = read_ahead_settled(overlap)
    # The next epoch's rows just past the depth: the batches a read-ahead running beyond its
    # check would hold. Rewritten with other pixels after the read-ahead settled.
    order = overlap._ahead.flat
    past = order[DEPTH * BATCH:(DEPTH + 4) * BATCH].tolist()
    for i in past:
        assert overlap._paths[i] == str(path_of(data, i))  # ImageFolder's sorted order
        rewrite(path_of(data, i), image(i, seed=900), keep_mtime)
    second = epoch_accumulating(overlap)
    assert_same(second, epoch_accumulating(drained))
    assert ahead <= DEPTH * BATCH, \
        f"{ahead} samples read ahead, past the {DEPTH * BATCH} rows whose files are checked"
    # What was read ahead is unchanged: the epoch was used, and the rewritten files read anew.
    assert overlap.stats()["epochs_adopted"] == 1



class Segmentation(torch.utils.data.Dataset):
    """An image and its mask per sample (two files each), as ringloader.Joint."""

    def __init__(self, root: Path, n: int):
        from torchvision.transforms import v2

        self.root, self.n, self.t = root, n, v2.CenterCrop(16)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return rl.Joint(self.t, {"image": rl.ImageFile(str(self.root / f"{i}.bmp")),
                                 "mask": rl.ImageFile(str(self.root / f"{i}_mask.png"), mode="mask")})


def write_mask(path: Path, seed: int) -> None:
    import numpy as np
    from PIL import Image

    labels = np.random.default_rng(seed).integers(0, 6, (24, 24), dtype=np.uint8)
    Image.fromarray(labels, "L").save(path)


def test_a_mask_rewritten_between_epochs_is_read_again(tmp_path: Path):
    # A sample's other files (its mask) are read ahead with it, and checked with it.
    root = tmp_path / "seg"
    root.mkdir()
    n = 48
    for i in range(n):
        (root / f"{i}.bmp").write_bytes(image(i, seed=500))
        write_mask(root / f"{i}_mask.png", seed=i)

    def loader(**kwargs):
        return rl.DataLoader(Segmentation(root, n), batch_size=BATCH, num_workers=1, prefetch_factor=2,
                             shuffle=True, generator=torch.Generator().manual_seed(3), **kwargs)

    def run(l) -> list:
        return [(b["image"].clone(), b["mask"].clone()) for b in l]

    overlap, drained = loader(), loader(persistent_workers=False)
    assert overlap.native
    assert_same(run(overlap), run(drained))
    deadline = time.monotonic() + 20
    while overlap.stats()["samples_ahead"] < 2 * BATCH:
        assert time.monotonic() < deadline, overlap.stats()
        time.sleep(0.01)
    first = int(overlap._ahead.flat[0])  # the next epoch's first sample: decoded ahead
    write_mask(root / f"{first}_mask.png", seed=1000)
    assert_same(run(overlap), run(drained))
    assert overlap.stats()["epochs_adopted"] == 0  # dropped: its first batch holds the old mask
    assert f"{first}_mask.png changed" in overlap.describe()
