"""Soak: many epochs on one loader must not grow memory or leave threads behind.

20 epochs over 64 generated ~200 px JPEGs (plus two corrupt files, so the error path runs every
epoch), mixing full epochs, early ``break``s, superseded iterators and batches kept across the
epoch boundary. Resident memory is read from ``/proc/self/statm`` after epoch 2 (pools, malloc
arenas and torch's allocator are warm by then) and after epoch 20; threads are counted in
``/proc/self/task`` before the loader exists and after it is gone.

The 8 MiB margin catches a leaked batch slot per epoch (~4.8 MB each: 8 x 3x224x224 float32)
or a leaked file buffer per sample (~10 KB x 64 x 18 epochs = 11 MB) well before it adds up,
while staying clear of allocator noise (measured growth here: under 1 MiB, see settle()).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import time
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader import transforms as T

from imagegen import jpeg_bytes, make_image_tree

EPOCHS = 20
MARGIN_MIB = 8
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not os.path.exists("/proc/self/statm"),
                                                   reason="needs Linux /proc")]


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def thread_count() -> int:
    return len(os.listdir("/proc/self/task"))


def _malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_MALLOC_TRIM = _malloc_trim()


def settle() -> None:
    """Collect Python garbage (DLPack capsules release slots), let exiting threads finish, and
    hand glibc's cached free memory back. Decode threads are new every epoch, so which malloc
    arena keeps how much free memory varies: untrimmed RSS wanders by +-10 MiB between epochs,
    trimmed it stays within 1 MiB, so the margin below measures live memory, not caching."""
    for _ in range(3):
        gc.collect()
    time.sleep(0.05)
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def make_dataset(root: Path) -> Path:
    flavours = [{}, {"subsampling": "4:4:4"}, {"progressive": True}, {"mode": "L"}, {"mode": "CMYK"},
                {"subsampling": "4:2:2"}, {}, {"quality": 75}]
    spec = {}
    for c in range(4):
        spec[f"class_{c}"] = [dict(flavours[(c * 16 + i) % len(flavours)],
                                   width=184 + 8 * (i % 5), height=150 + 6 * (i % 4))
                              for i in range(16)]
    make_image_tree(root, spec, seed=17)
    good = jpeg_bytes(200, 150, seed=3)
    (root / "class_1" / "truncated.jpg").write_bytes(good[: len(good) // 2])
    (root / "class_2" / "not_a_jpeg.jpg").write_bytes(b"plain text, not an image\n" * 8)
    return root


def run_epoch(loader, epoch: int, keep: list) -> int:
    """One epoch shaped by its number; returns the batches taken. Keeps one batch alive."""
    taken = 0

    def take(it, limit=None):
        nonlocal taken
        while limit is None or taken < limit:
            try:
                x, y = next(it)
            except StopIteration:
                return
            except rl.SampleError:
                taken += 1
                continue
            assert x.shape[1:] == (3, 224, 224) and bool(torch.isfinite(x).all())
            taken += 1
            keep[:] = [(x, y)]  # released one epoch later: slots must not be lost meanwhile

    kind = epoch % 4
    if kind == 1:
        take(iter(loader), limit=3)  # early break: the abandoned epoch is cancelled
    elif kind == 3:
        first = iter(loader)
        take(first, limit=1)
        take(iter(loader))  # supersedes `first` mid-epoch
        del first
    else:
        take(iter(loader))
    return taken


def test_soak_memory_and_threads_stay_flat(tmp_path: Path):
    root = make_dataset(tmp_path / "data")
    ds = rl.ImageFolder(root, transform=T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                                    T.ToTensor(), T.Normalize(MEAN, STD)]))
    assert len(ds) == 66
    # Warm torch's own thread pools before counting: the checks below use them.
    torch.isfinite(torch.zeros(8, 3, 224, 224)).all()
    settle()
    threads_before = thread_count()

    t0 = time.monotonic()
    loader = rl.DataLoader(ds, batch_size=8, shuffle=True, num_workers=2)
    keep: list = []
    rss_after = {}
    batches = 0
    most_threads = 0
    for epoch in range(1, EPOCHS + 1):
        batches += run_epoch(loader, epoch, keep)
        most_threads = max(most_threads, thread_count())
        if epoch in (2, EPOCHS):
            settle()
            rss_after[epoch] = rss_bytes()
    elapsed = time.monotonic() - t0
    stats = loader.stats()
    keep.clear()
    del loader
    settle()
    threads_after = thread_count()

    growth = rss_after[EPOCHS] - rss_after[2]
    print(f"soak: {EPOCHS} epochs, {batches} batches in {elapsed:.1f} s; RSS after epoch 2 "
          f"{rss_after[2] / 2**20:.1f} MiB, after epoch {EPOCHS} {rss_after[EPOCHS] / 2**20:.1f} MiB "
          f"(growth {growth / 2**20:+.2f} MiB); threads {threads_before} -> {threads_after}")
    assert stats["errors"] > 0, "the corrupt files were never read"
    assert growth < MARGIN_MIB * 2**20, f"RSS grew {growth / 2**20:.1f} MiB over {EPOCHS - 2} epochs"
    assert threads_after == threads_before, f"threads leaked: {threads_before} -> {threads_after}"
    # Between epochs at most two epochs' threads exist (dispatcher, reader, 2 decode workers
    # each): the epoch just delivered and the next one, read ahead. An abandoned or superseded
    # epoch's threads are joined, never accumulated.
    assert most_threads - threads_before <= 8, f"{most_threads - threads_before} extra threads"
