"""``python -m ringloader.bench`` on an image folder: the transform kinds it measures."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch
import torchvision

import ringloader as rl
from ringloader.bench import make_transform


def test_train_uint8_is_torchvisions_chain_and_yields_uint8_batches(image_tree):
    """``--transform train-uint8``: torchvision's own crop, flip and PILToTensor, whatever module
    is asked for (ringloader takes torchvision's objects as they are); ringloader runs it
    natively into uint8 CHW batches, as torch's DataLoader does."""
    for module in (torchvision.transforms, rl.transforms):
        chain = make_transform(module, "train-uint8")
        assert [type(t).__name__ for t in chain.transforms] == [
            "RandomResizedCrop", "RandomHorizontalFlip", "PILToTensor"]
        assert all(type(t).__module__.startswith("torchvision.") for t in chain.transforms)
    ds = rl.ImageFolder(str(image_tree), transform=make_transform(torchvision.transforms, "train-uint8"))
    images, labels = next(iter(rl.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2)))
    assert images.dtype == torch.uint8 and tuple(images.shape) == (4, 3, 224, 224)
    assert labels.dtype == torch.int64
    with pytest.raises(ValueError, match="unknown transform 'train-u8'"):
        make_transform(torchvision.transforms, "train-u8")


def test_train_v2_is_torchvisions_to_image_first_chain_and_runs_natively(image_tree):
    """``--transform train-v2``: v2's documented recipe (``ToImage`` first, so the crop's
    resize is torch's kernel on the uint8 tensor), torchvision's own objects whatever module is
    asked for; ringloader runs all of it natively (no warning: no Python tail)."""
    import warnings

    for module in (torchvision.transforms, rl.transforms):
        chain = make_transform(module, "train-v2")
        assert [type(t).__name__ for t in chain.transforms] == [
            "ToImage", "RandomResizedCrop", "RandomHorizontalFlip", "ToDtype", "Normalize"]
        assert all(type(t).__module__.startswith("torchvision.transforms.v2") for t in chain.transforms)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = rl.ImageFolder(str(image_tree), transform=make_transform(torchvision.transforms, "train-v2"))
        loader = rl.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2)
        images, _ = next(iter(loader))
    assert loader.native and rl.transforms.split(ds.transform).tail is None
    assert images.dtype == torch.float32 and tuple(images.shape) == (4, 3, 224, 224)


@pytest.mark.timeout(240)
def test_train_uint8_benchmark_reports_a_native_ratio(image_tree, tmp_path):
    """The report's shape (not its timings): both loaders measured on uint8 batches, the ratio
    printed, and ringloader's side on the native path."""
    report = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "ringloader.bench", "--root", str(image_tree), "--transform",
         "train-uint8", "--batch-size", "4", "--rounds", "1", "--warmup-batches", "1",
         "--num-workers", "2", "--json", str(report)],
        capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^train-uint8 torch +[0-9.]+ .* 1\.00x$", done.stdout, re.M), done.stdout
    assert re.search(r"^train-uint8 ringloader +[0-9.]+ .* [0-9.]+x$", done.stdout, re.M), done.stdout
    results = {r["loader"]: r for r in json.loads(report.read_text())["results"]}
    assert not results["torch"]["error"] and not results["ringloader"]["error"]
    assert results["ringloader"]["stats"]["native"] is True
