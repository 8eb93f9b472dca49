"""Device staging (``DataLoader(device="cuda")``) on a real GPU. Skipped without one.

Run by ``bench/gpu_check.sh`` on a GPU machine; here every test reports why it was skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader import transforms as T

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible (torch.cuda.is_available() is False)"),
]

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def train_tf():
    return T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])


def loader_for(root: Path, **kw) -> rl.DataLoader:
    g = torch.Generator()
    g.manual_seed(1234)
    kw.setdefault("batch_size", 4)
    kw.setdefault("num_workers", 2)
    return rl.DataLoader(rl.ImageFolder(root, transform=train_tf()), shuffle=True, generator=g, **kw)


def test_device_batches_equal_host_batches_bit_for_bit(small_tree: Path):
    host = [(x.clone(), y.clone()) for x, y in loader_for(small_tree)]
    device = loader_for(small_tree, device="cuda")
    n = 0
    for (xd, yd), (xh, yh) in zip(device, host):
        assert xd.is_cuda and yd.is_cuda
        assert xd.device.index == 0
        assert torch.equal(xd.cpu(), xh), f"batch {n} differs"
        assert torch.equal(yd.cpu(), yh)
        n += 1
    assert n == len(host) == 8
    s = device.stats()
    assert s["device"] == "cuda:0"
    assert s["memory"].startswith("cuda-pinned")  # device staging pins the slots itself


def test_consumer_on_another_stream_sees_complete_data_without_host_sync(small_tree: Path):
    if not hasattr(torch.cuda, "_sleep"):
        pytest.skip("torch.cuda._sleep is not available in this torch")
    host = [x.clone() for x, _ in loader_for(small_tree)]
    device = loader_for(small_tree, device="cuda")
    it = iter(device)
    side = torch.cuda.Stream()
    # Roughly a second of GPU time queued on the consumer's stream: if next() waited on the
    # host for that stream (or for the device), it would take about that long.
    cycles = int(torch.cuda.get_device_properties(0).clock_rate * 1000)  # clock_rate is in kHz
    with torch.cuda.stream(side):
        torch.cuda._sleep(cycles)
        t0 = time.perf_counter()
        x, _ = next(it)
        took = time.perf_counter() - t0
        total = x.double().sum()  # read right away, on the consumer's stream
        copy = x.clone()
    assert took < 0.5, f"next() took {took:.3f}s while the consumer stream was busy: a host sync"
    side.synchronize()
    assert torch.equal(copy.cpu(), host[0])
    assert total.item() == pytest.approx(host[0].double().sum().item(), rel=1e-9, abs=1e-6)
    for i, (x, _) in enumerate(it, start=1):  # the rest, each read immediately on the stream
        with torch.cuda.stream(side):
            c = x.clone()
        side.synchronize()
        assert torch.equal(c.cpu(), host[i])


def test_batches_are_copied_ahead_of_a_slow_step(small_tree: Path):
    loader = loader_for(small_tree, device="cuda")  # P = 4 batches staged ahead
    it = iter(loader)
    x, _ = next(it)
    slot_bytes = 4 * 3 * 64 * 64 * 4 + 2 * 4 * 8  # images, labels, indices: one copy per batch
    time.sleep(0.5)  # the training step
    # Batches after the one in use were copied while the step ran, before next() asked.
    assert loader.stats()["device_bytes"] >= 3 * slot_bytes
    t0 = time.perf_counter()
    x, _ = next(it)
    assert time.perf_counter() - t0 < 0.05
    assert x.is_cuda


def test_pin_memory_gives_pinned_host_tensors(small_tree: Path):
    loader = loader_for(small_tree, pin_memory=True)
    x, y = next(iter(loader))
    assert x.is_pinned()
    assert loader.stats()["memory"].startswith("cuda-pinned")


def test_no_device_or_pinned_memory_growth_over_1000_batches(tiny_tree: Path):
    tf = T.Compose([T.Resize(24), T.CenterCrop(16), T.ToTensor()])
    loader = rl.DataLoader(rl.ImageFolder(tiny_tree, transform=tf), batch_size=2, num_workers=2,
                           device="cuda", prefetch_factor=2)
    batches = 0

    def epoch():
        nonlocal batches
        for x, y in loader:
            assert x.shape == (2, 3, 16, 16)
            batches += 1

    epoch()  # warm up: the ring and the slots reach their working size
    torch.cuda.synchronize()
    free_before = torch.cuda.mem_get_info()[0]
    s0 = loader.stats()
    while batches < 1000 + 50:
        epoch()
    torch.cuda.synchronize()
    free_after = torch.cuda.mem_get_info()[0]
    s1 = loader.stats()
    # prefetch_factor 2 x 2 workers: P = 4 staged ahead, ring of P + 1
    assert s1["device_buffers"] == s0["device_buffers"] <= 4 + 1
    assert s1["slots_allocated"] == s0["slots_allocated"]
    assert s1["device_buffers_held"] == 0
    assert free_before - free_after < 16 << 20, "device memory grew by more than 16 MiB"


def test_holding_every_device_buffer_raises_and_loses_nothing(small_tree: Path):
    loader = loader_for(small_tree, device="cuda", prefetch_factor=1, num_workers=2)
    kept = []
    it = iter(loader)
    with pytest.raises(rl.SlotsExhaustedError, match="device buffers"):
        for x, y in it:
            kept.append((x, y))
    assert len(kept) == loader.stats()["device_buffers"] == 2 + 1  # P = max(2, 1 * 2), ring P + 1
    held = len(kept)
    kept.clear()
    del x, y  # the loop variables still hold the last batch's buffer
    assert sum(1 for _ in it) == len(loader) - held


def test_clean_shutdown_with_copies_in_flight(small_tree: Path):
    script = textwrap.dedent(f"""
        import torch, ringloader as rl
        from ringloader import transforms as T
        tf = T.Compose([T.RandomResizedCrop(64), T.ToTensor()])
        keep = []
        for _ in range(3):
            loader = rl.DataLoader(rl.ImageFolder({str(small_tree)!r}, transform=tf), batch_size=8,
                                   num_workers=2, device="cuda", prefetch_factor=4)
            it = iter(loader)
            keep.append(next(it))   # copies in flight; the loader is dropped right away
            del it, loader
        # tensors still alive at interpreter exit: their buffers outlive the loaders
        print("ok", sum(float(x.sum()) for x, _ in keep) != 0)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok True"
    assert "ringloader:" not in proc.stderr, proc.stderr


def test_generic_path_stages_batches_to_the_device(small_tree: Path):
    import torchvision
    from torchvision import transforms as tvt

    tv = torchvision.datasets.ImageFolder(small_tree, transform=tvt.Compose(
        [tvt.Resize(48), tvt.CenterCrop(48), tvt.ToTensor()]))
    host = [(x, y) for x, y in rl.DataLoader(tv, batch_size=4)]
    staged = rl.DataLoader(tv, batch_size=4, device="cuda")
    assert not staged.native
    got = []
    for x, y in staged:
        assert x.is_cuda and y.is_cuda
        got.append((x.sum().item(), y.cpu()))  # a device op right away: no host sync needed
    assert len(got) == len(host)
    for (sx, sy), (hx, hy) in zip(got, host):
        assert abs(sx - hx.sum().item()) < 1e-3 and torch.equal(sy, hy)
