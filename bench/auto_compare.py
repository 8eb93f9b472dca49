#!/usr/bin/env python3
"""num_workers="auto" against the best hand-tuned setting and torch's defaults.

    python bench/auto_compare.py                 # built-in set + a larger-image set, all CPUs and CPU 0
    python bench/auto_compare.py --tiny          # a seconds-long check that the harness works
    python bench/auto_compare.py --seconds 20 --json auto.json

For each data set (the built-in sample set, ImageNet-like 300-500 px JPEGs; and a set of
photo-like JPEGs of 2000-3000 px generated once into the cache) and each CPU set (every CPU
this process may use, and CPU 0 alone, as `taskset -c 0` would give), a child process pinned to
those CPUs (before torch is imported) measures, on the train transform (RandomResizedCrop(224),
flip, ToTensor, Normalize), batch 64, shuffled:

* torch defaults: ``torch.utils.data.DataLoader(torchvision ImageFolder, batch_size, shuffle=True)``
  (num_workers=0, torch's default);
* ringloader auto: ``num_workers="auto", prefetch_factor="auto"``, and what it chose;
* ringloader hand-tuned: a grid of num_workers (1 .. 2 x the CPUs, at most 8) x prefetch_factor (2, 4),
  reporting the best.

Each measurement builds a fresh loader, discards 2 batches, then times whole batches for
``--seconds`` (cycling epochs). The consumer only sums the labels, so the figure is the loader's
own throughput. Figures on a machine others are using are meaningless: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional


def cache_dir() -> Path:
    env = os.environ.get("RINGLOADER_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ringloader"


def large_image_set(num_images: int, tiny: bool) -> Path:
    """Photo-like JPEGs of 2000-3000 px on the longer side (1200 px with --tiny), 4 classes,
    generated once (a marker file is written last)."""
    import numpy as np

    from ringloader.sample_data import encode_jpeg, synthesize_image

    root = cache_dir() / f"auto-compare-large-n{num_images}{'-tiny' if tiny else ''}"
    marker = root / ".complete"
    if marker.exists():
        return root
    rng = np.random.default_rng(7)
    for i in range(num_images):
        long_side = 1200 if tiny else int(rng.integers(2000, 3001))
        short_side = int(long_side * rng.uniform(0.66, 0.8))
        w, h = (long_side, short_side) if i % 3 else (short_side, long_side)
        pixels = synthesize_image(w, h, np.random.default_rng(1000 + i))
        folder = root / f"class_{i % 4:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"img_{i:05d}.jpg").write_bytes(encode_jpeg(pixels, quality=90))
    marker.write_text("ok\n")
    return root


def measure(make: Callable[[], Any], seconds: float, warmup: int = 2) -> dict:
    loader = make()
    seen = images = total = 0
    start = 0.0
    done = False
    while not done:  # epochs, as many as the time needs
        for _, labels in loader:
            total += int(labels.sum())
            seen += 1
            if seen == warmup:
                start = time.perf_counter()
            elif seen > warmup:
                images += len(labels)
                if time.perf_counter() - start >= seconds:
                    done = True
                    break
    elapsed = time.perf_counter() - start
    out = {"images_per_s": images / elapsed, "images": images, "seconds": elapsed}
    if hasattr(loader, "describe"):
        out["describe"] = loader.describe()
        out["num_workers"] = loader.num_workers
    del loader
    return out


def child(args: argparse.Namespace) -> None:
    """Measures every setting on one data set, pinned to args.cpus (set before torch loads)."""
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    import torch
    import torchvision

    import ringloader as rl
    from ringloader.bench import make_transform

    cpus = len(os.sched_getaffinity(0))
    tv_ds = torchvision.datasets.ImageFolder(args.root, make_transform(torchvision.transforms, "train"))
    rl_ds = rl.ImageFolder(args.root, transform=make_transform(rl.transforms, "train"))
    b = args.batch_size
    results: dict[str, Any] = {"cpus": cpus, "torch_threads": torch.get_num_threads()}
    results["torch_default"] = measure(
        lambda: torch.utils.data.DataLoader(tv_ds, batch_size=b, shuffle=True), args.seconds)
    results["auto"] = measure(
        lambda: rl.DataLoader(rl_ds, batch_size=b, shuffle=True, num_workers="auto",
                              prefetch_factor="auto"), args.seconds)
    grid = []
    workers = list(range(1, 2 * cpus + 1))[: (2 if args.tiny else 8)]  # 1 .. 2 x CPUs, at most 8
    for w in workers:
        for pf in ((2,) if args.tiny else (2, 4)):
            r = measure(lambda: rl.DataLoader(rl_ds, batch_size=b, shuffle=True, num_workers=w,
                                              prefetch_factor=pf), args.seconds)
            r.pop("describe", None)
            grid.append({"num_workers": w, "prefetch_factor": pf, **r})
    results["grid"] = grid
    results["hand_tuned"] = max(grid, key=lambda r: r["images_per_s"])
    print(json.dumps(results))


def run_child(root: Path, cpus: Optional[str], args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", "--root", str(root), "--seconds", str(args.seconds),
           "--batch-size", str(args.batch_size)]
    if cpus:
        cmd += ["--cpus", cpus]
    if args.tiny:
        cmd.append("--tiny")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"measuring {root} on CPUs {cpus or 'all'} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0, help="timed seconds per measurement")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--large-images", type=int, default=256, help="size of the larger-image set")
    p.add_argument("--tiny", action="store_true", help="a quick check: small sets, 1 s, a 2-point grid")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--root", default=None, help=argparse.SUPPRESS)
    p.add_argument("--cpus", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    if args.tiny:
        args.seconds = min(args.seconds, 1.0)
        args.batch_size = min(args.batch_size, 16)
    from ringloader.sample_data import make_sample_dataset

    sets = {
        "built-in (300-500 px)": make_sample_dataset(num_images=64 if args.tiny else 1000),
        "large (2000-3000 px)" if not args.tiny else "large (1200 px, tiny)":
            large_image_set(16 if args.tiny else args.large_images, args.tiny),
    }
    first_cpu = str(min(os.sched_getaffinity(0)))
    rows = []
    report = []
    for name, root in sets.items():
        for cpus in (None, first_cpu):
            r = run_child(root, cpus, args)
            label = f"all ({r['cpus']})" if cpus is None else f"taskset -c {cpus} (1)"
            best = r["hand_tuned"]
            chosen = next(line.split("chosen:", 1)[1].strip() for line in r["auto"]["describe"].splitlines()
                          if "chosen:" in line)
            rows.append(f"| {name} | {label} | {r['torch_default']['images_per_s']:.0f} | "
                        f"{r['auto']['images_per_s']:.0f} (num_workers={r['auto']['num_workers']}) | "
                        f"{best['images_per_s']:.0f} (num_workers={best['num_workers']}, "
                        f"prefetch_factor={best['prefetch_factor']}) |")
            report.append({"set": name, "cpus": label, "auto_chose": chosen, **r})
            print(f"{name}, CPUs {label}: auto chose {chosen}", file=sys.stderr)
    print("| data set | CPUs | torch defaults (num_workers=0), images/s | ringloader auto, images/s | "
          "ringloader hand-tuned best, images/s |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
