"""The hybrid path: native decode and prefix, the rest of the transform per sample in Python."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.utils.data as tud
import torchvision
import torchvision.transforms as tvt
from PIL import Image

import ringloader as rl
from ringloader import transforms as T

from imagegen import jpeg_bytes

PREFIX = [tvt.Resize(40), tvt.CenterCrop(32)]


class Jitter:
    """A user's Python step on a tensor: draws from torch's, Python's and numpy's RNGs."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand(()) + random.random() + float(np.random.rand())


class AddOne:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """10 classes x 1 image of different sizes: a label is its sample's index."""
    root = tmp_path_factory.mktemp("hybrid")
    for i in range(10):
        (root / f"c{i}").mkdir()
        (root / f"c{i}" / "x.jpg").write_bytes(jpeg_bytes(60 + 3 * i, 50 + i, seed=700 + i))
    return root


def hybrid(root: Path, tail, prefix=PREFIX, **kwargs) -> rl.ImageFolder:
    with pytest.warns(UserWarning, match="run per sample in Python"):
        return rl.ImageFolder(root, transform=tvt.Compose(prefix + tail), **kwargs)


def batches(loader):
    return [tuple(t.clone() for t in batch) for batch in loader]


def assert_same(a, b):
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(ya, yb) and torch.equal(xa, xb)


def test_warning_names_python_steps_and_strict_refuses(tree: Path):
    with pytest.warns(UserWarning, match=r"Jitter run per sample in Python.*has no native equivalent") as record:
        ds = rl.ImageFolder(tree, transform=tvt.Compose(PREFIX + [tvt.ToTensor(), Jitter()]))
    assert len(record) == 1
    assert ds.per_sample and ds.python_steps == [f"{__name__}.Jitter"]
    assert [s["kind"] for s in ds.steps] == ["resize", "center_crop", "to_tensor"]
    with pytest.raises(TypeError, match="strict=True: transform step .*Jitter"):
        rl.ImageFolder(tree, transform=tvt.Compose(PREFIX + [tvt.ToTensor(), Jitter()]), strict=True)


def test_the_hybrid_warning_is_a_fallback_warning_its_filter_silences(tree: Path):
    # The documented filter: category=rl.FallbackWarning (still a UserWarning for older filters).
    transform = tvt.Compose(PREFIX + [tvt.ToTensor(), AddOne()])
    with pytest.warns(rl.FallbackWarning, match="AddOne run per sample in Python") as record:
        rl.ImageFolder(tree, transform=transform)
    assert [w.category for w in record] == [rl.FallbackWarning]
    assert issubclass(rl.FallbackWarning, UserWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=rl.FallbackWarning)
        ds = rl.ImageFolder(tree, transform=transform)
        images, labels = next(iter(rl.DataLoader(ds, batch_size=4)))
    assert images.shape == (4, 3, 32, 32) and float(images.min()) >= 1.0


def test_tensor_tail_runs_on_the_native_prefix(tree: Path):
    ds = hybrid(tree, [tvt.ToTensor(), AddOne()])
    native = rl.ImageFolder(tree, transform=tvt.Compose(PREFIX + [tvt.ToTensor()]))
    for i in (0, 7, -1):
        x, y = ds[i]
        assert y == native[i][1]
        assert torch.equal(x, native[i][0] + 1)


def test_pil_tail_gets_the_decoded_prefix(tree: Path):
    ds = hybrid(tree, [tvt.Grayscale(3), tvt.Lambda(np.asarray)], prefix=[tvt.Resize(40), tvt.CenterCrop(32),
                                                                          tvt.ElasticTransform(alpha=0.0)])
    ref = torchvision.datasets.ImageFolder(
        tree, transform=tvt.Compose(PREFIX + [tvt.ElasticTransform(alpha=0.0), tvt.Grayscale(3)]))
    x, y = ds[3]
    assert isinstance(x, np.ndarray) and x.shape == (32, 32, 3) and y == 3
    assert np.abs(x.astype(int) - np.asarray(ref[3][0]).astype(int)).max() <= 1


def test_loader_is_deterministic_for_any_workers_and_keeps_the_rng_stream(tree: Path):
    ds = hybrid(tree, [tvt.ToTensor(), Jitter()], prefix=[tvt.RandomResizedCrop(32)])

    def run(workers):
        torch.manual_seed(4)
        loader = rl.DataLoader(ds, batch_size=4, shuffle=True, num_workers=workers)
        assert not loader.native
        out = batches(loader)
        return out, torch.get_rng_state()

    zero, rng_after = run(0)
    assert_same(zero, run(0)[0])
    assert_same(zero, run(2)[0])
    # The loop drew nothing from the caller's RNG beyond what torch's own loader draws.
    torch.manual_seed(4)
    list(tud.DataLoader(range(len(ds)), batch_size=4, shuffle=True))
    assert torch.equal(rng_after, torch.get_rng_state())
    # Python-side randomness differs between samples and epochs.
    images = torch.cat([x for x, _ in zero])
    assert len({float(x.mean()) for x in images}) == len(images)
    torch.manual_seed(4)
    loader = rl.DataLoader(ds, batch_size=4, shuffle=True)
    first, second = batches(loader), batches(loader)
    assert not torch.equal(first[0][0], second[0][0])


def test_loader_resumes_with_the_same_augmentations(tree: Path):
    ds = hybrid(tree, [tvt.ToTensor(), Jitter()], prefix=[tvt.RandomResizedCrop(32)])

    def make():
        return rl.DataLoader(ds, batch_size=3, shuffle=True, num_workers=2)

    torch.manual_seed(9)
    full = batches(make())
    torch.manual_seed(9)
    first = make()
    it = iter(first)
    seen = [tuple(t.clone() for t in next(it)) for _ in range(2)]
    state = first.state_dict()
    del it, first
    torch.manual_seed(123)
    resumed = make()
    resumed.load_state_dict(state)
    assert_same(seen + batches(resumed), full)


def test_repeated_indices_differ_on_the_hybrid_path(tree: Path):
    ds = hybrid(tree, [tvt.ToTensor(), Jitter()], prefix=[tvt.RandomResizedCrop(32)])
    torch.manual_seed(0)
    loader = rl.DataLoader(ds, batch_size=4, sampler=[2] * 8)
    images = torch.cat([x for x, _ in loader])
    assert len({x.numpy().tobytes() for x in images}) == 8


def test_subset_and_concat_of_hybrid_datasets_use_the_same_keys(tree: Path):
    ds = hybrid(tree, [tvt.ToTensor(), Jitter()], prefix=[tvt.RandomResizedCrop(32)])
    other = rl.ImageFolder(tree, transform=tvt.Compose([tvt.Resize(40), tvt.CenterCrop(32), tvt.ToTensor()]))

    def run(dataset, workers=0, **kwargs):
        torch.manual_seed(2)
        return batches(rl.DataLoader(dataset, batch_size=3, num_workers=workers, **kwargs))

    with pytest.warns(UserWarning, match="Subset .*runs per sample.*generic path"):
        subset = run(tud.Subset(ds, [3, 3, 1, 8]))
    # Position p of the Subset is made as position p of the ImageFolder with that sampler.
    assert_same(subset, run(ds, sampler=[3, 3, 1, 8]))
    assert not torch.equal(subset[0][0][0], subset[0][0][1])
    concat = tud.ConcatDataset([other, ds])
    with pytest.warns(UserWarning, match="ConcatDataset"):
        one, two = run(concat), run(concat, workers=2)
    assert_same(one, two)
    assert [y.tolist() for _, y in one][3] == [9, 0, 1]


def test_sample_keys_draw_what_the_native_batches_draw(tree: Path):
    """A SampleKey's native prefix uses the native pipeline's per-row seed: same key, same pixels."""
    ds = rl.ImageFolder(tree, transform=tvt.Compose([tvt.RandomResizedCrop(32), tvt.RandomHorizontalFlip()]))
    torch.manual_seed(5)
    loader = rl.DataLoader(ds, batch_size=4, sampler=[3, 3, 1, 8, 8, 0, 2, 3])
    it = iter(loader)
    rows = torch.cat([next(it)[0], next(it)[0]])
    seed = loader.state_dict()["base_seed"]
    for position, index in enumerate([3, 3, 1, 8, 8, 0, 2, 3]):
        x, _ = ds[rl.datasets.SampleKey(index, seed, 0, position)]
        assert torch.equal(x, rows[position])


def test_collate_fn_and_plain_indexing(tree: Path):
    ds = hybrid(tree, [tvt.ToTensor(), AddOne()])
    loader = rl.DataLoader(ds, batch_size=4, collate_fn=lambda rows: [y for _, y in rows])
    assert list(loader) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    with pytest.raises(IndexError):
        ds[10]


@pytest.mark.parametrize("kwargs", [dict(on_error="skip"), dict(max_skipped_fraction=1),
                                    dict(fast_decode=True), dict(dtype=torch.float16),
                                    dict(memory_format=torch.channels_last)])
def test_native_only_arguments_are_refused_on_the_hybrid_path(tree: Path, kwargs):
    ds = hybrid(tree, [tvt.ToTensor(), AddOne()])
    with pytest.raises(ValueError, match=f"{next(iter(kwargs))} only appl(y|ies) to natively batched.*runs per sample"):
        rl.DataLoader(ds, batch_size=2, **kwargs)


def test_sizes_that_depend_on_the_image(tree: Path):
    # No transform: PIL images, as torchvision's ImageFolder.
    plain = rl.ImageFolder(tree)
    assert plain.per_sample and plain.python_steps == []
    image, label = plain[4]
    reference = Image.open(plain.samples[4][0]).convert("RGB")
    assert isinstance(image, Image.Image) and image.size == reference.size and label == 4
    assert np.abs(np.asarray(image).astype(int) - np.asarray(reference).astype(int)).max() <= 2
    # ToTensor() alone: float CHW of each image's own size; batches collate as torch's do.
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing runs in Python: no warning
        ds = rl.ImageFolder(tree, transform=T.ToTensor())
    x, _ = ds[2]
    assert x.dtype == torch.float32 and x.shape == (3, 52, 66)
    assert [tuple(x.shape) for x, _ in rl.DataLoader(ds, batch_size=1)][:2] == [(1, 3, 50, 60), (1, 3, 51, 63)]
    with pytest.raises(RuntimeError, match=r"stack expects each tensor to be equal size.*\[3, 50, 60\]"):
        next(iter(rl.DataLoader(ds, batch_size=2)))
    # Resize(max_size=...) (shorter side, longer side capped): uint8 CHW of the computed size.
    capped = rl.ImageFolder(tree, transform=tvt.Resize(30, max_size=33))
    x, _ = capped[9]
    ref = tvt.PILToTensor()(tvt.Resize(30, max_size=33)(Image.open(capped.samples[9][0]).convert("RGB")))
    assert x.shape == ref.shape and (x.int() - ref.int()).abs().max() <= 2


def test_ctrl_c_while_workers_fork_is_not_lost(tree: Path):
    """A SIGINT that lands while torch forks the worker processes is handled inside CPython's
    fork callbacks, which drop the KeyboardInterrupt ("Exception ignored"): it must still stop the
    loop. Each try raises SIGINT from a fork callback (before the fork, then after it in the
    parent), as a Ctrl-C during the fork system call is; a later epoch runs whole. In a
    subprocess: the callbacks cannot be unregistered, and a lost interrupt must not hang the suite."""
    script = textwrap.dedent(f"""
        import os, signal, sys, warnings
        import torchvision.transforms as tvt
        import ringloader as rl

        class AddOne:
            def __call__(self, x):
                return x + 1

        parent, armed = os.getpid(), [None]

        def ctrl_c(phase):
            if armed[0] == phase and os.getpid() == parent:
                armed[0] = None
                signal.raise_signal(signal.SIGINT)  # its handler runs here, in the callback

        os.register_at_fork(before=lambda: ctrl_c("before"),
                            after_in_parent=lambda: ctrl_c("after_in_parent"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = rl.ImageFolder({str(tree)!r}, transform=tvt.Compose(
                [tvt.Resize(40), tvt.CenterCrop(32), tvt.ToTensor(), AddOne()]))
        loader = rl.DataLoader(ds, batch_size=4, num_workers=2, timeout=30)
        assert not loader.native
        for phase in ("before", "after_in_parent"):
            armed[0] = phase
            try:
                n = sum(1 for _ in loader)
            except KeyboardInterrupt:
                print(phase, "interrupted")
            else:
                print(phase, "lost: the epoch ran on,", n, "batches")
        print("then", sorted(int(y) for _, ys in loader for y in ys))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["before interrupted", "after_in_parent interrupted",
                                       f"then {list(range(10))}"], out.stdout + out.stderr[-2000:]
    assert "Exception ignored" not in out.stderr, out.stderr[-2000:]
