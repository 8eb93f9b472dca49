"""Images per second of torchvision's classification reference recipe with ``--auto-augment
augmix`` (RandomResizedCrop(176) + flip + AugMix + PILToTensor + ConvertImageDtype + Normalize),
torch's DataLoader over torchvision's ImageFolder against ringloader's, 2 workers each.

    python bench/augmix_compare.py [--root IMAGEFOLDER] [--images 256] [--workers 2]

Without --root it writes 256 JPEG photos (400x300, smooth colour fields) to a temporary folder.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import torch
import torchvision.transforms as T
from PIL import Image
from torchvision.datasets import ImageFolder

import ringloader as rl


def write_tree(root: str, count: int) -> None:
    rng = np.random.default_rng(0)
    for k in range(count):
        d = os.path.join(root, f"c{k % 4}")
        os.makedirs(d, exist_ok=True)
        y, x = np.mgrid[0:300, 0:400]
        base = np.stack([128 + 100 * np.sin(x / rng.uniform(5, 40) + c) * np.cos(y / rng.uniform(5, 40) - c)
                         for c in range(3)], -1)
        pixels = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(os.path.join(d, f"{k}.jpg"), quality=90)


def rate(loader, images: int) -> float:
    it = iter(loader)
    next(it)  # warm-up batch (workers started)
    start, seen = time.perf_counter(), 0
    for batch, _ in it:
        seen += batch.shape[0]
    return seen / (time.perf_counter() - start) if seen else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root")
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or tmp
        if not args.root:
            write_tree(root, args.images)
        recipe = T.Compose([T.RandomResizedCrop(176), T.RandomHorizontalFlip(), T.AugMix(), T.PILToTensor(),
                            T.ConvertImageDtype(torch.float), T.Normalize((0.485, 0.456, 0.406),
                                                                          (0.229, 0.224, 0.225))])
        torch_loader = torch.utils.data.DataLoader(ImageFolder(root, transform=recipe), batch_size=args.batch_size,
                                                   num_workers=args.workers, shuffle=True)
        native = rl.DataLoader(rl.ImageFolder(root, transform=recipe), batch_size=args.batch_size,
                               num_workers=args.workers, shuffle=True)
        assert native.native, native.describe()
        rates = {"torch": [], "ringloader": []}
        for _ in range(2):  # alternating rounds
            rates["torch"].append(rate(torch_loader, args.images))
            rates["ringloader"].append(rate(native, args.images))
        t, r = max(rates["torch"]), max(rates["ringloader"])
        print(f"torch {t:.0f} img/s, ringloader {r:.0f} img/s, ratio {r / t:.2f}x "
              f"({args.workers} workers each, best of 2 rounds)")


if __name__ == "__main__":
    main()
