"""An ImageNet-sized folder of hard links (``--dataset scale``): each loader's ImageFolder
construction time and memory, pickled size, and time to the first batch, in fresh processes."""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .harness import CROP, BenchError, _import_ringloader, _import_torch, _sample_data
from .pipelines import make_transform


SCALE_IMAGES = 1_281_167
SCALE_CLASSES = 1000


def make_link_tree(num_images: int = SCALE_IMAGES, num_classes: int = SCALE_CLASSES,
                   root: Path | None = None, log: Callable[[str], None] = lambda s: None,
                   sources_root: Path | None = None) -> Path:
    """An ImageNet-shaped folder (``n00000000/n00000000_0.JPEG`` ...) of ``num_images`` hard
    links over ``num_classes`` classes to the JPEGs of ``sources_root`` (default: the sample
    set): built once, then reused (a ``.complete`` marker names its size). Costs directory
    entries, not image bytes (the sources must be on the same file system)."""
    if num_images < num_classes or num_classes < 1:
        raise BenchError(f"need num_images >= num_classes >= 1; got {num_images}, {num_classes}")
    sample = _sample_data()
    if root is None:
        root = Path(sample.default_root()).parent / f"scale-n{num_images}-c{num_classes}"
    marker = root / ".complete"
    want = f"{num_images} {num_classes}\n"
    if marker.is_file() and marker.read_text() == want:
        return root
    source_root = Path(sources_root) if sources_root is not None else Path(sample.make_sample_dataset())
    sources = sorted(str(p) for p in source_root.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    if not sources:
        raise BenchError("the sample set has no JPEG to link to")
    log(f"building the link tree {root} ({num_images} links, once) ...")
    root.mkdir(parents=True, exist_ok=True)
    base, extra = divmod(num_images, num_classes)
    k = 0
    for c in range(num_classes):
        folder = root / f"n{c:08d}"
        folder.mkdir(exist_ok=True)
        for j in range(base + (c < extra)):
            link = folder / f"n{c:08d}_{j}.JPEG"
            if not link.exists():
                os.link(sources[k % len(sources)], link)
            k += 1
    marker.write_text(want)
    return root


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def scale_child(loader: str, root: str, batch_size: int, num_workers: int) -> dict[str, Any]:
    """One fresh process's figures for ``loader`` on ``root``: ImageFolder construction time
    and resident-memory growth, the pickled dataset's size, and the time from a shuffled
    DataLoader's ``iter()`` to its first batch (eval transform)."""
    import pickle

    torch, torchvision = _import_torch()
    rl = _import_ringloader()
    from torchvision import transforms as tvT

    gc.collect()
    rss0 = _rss_bytes()
    t0 = time.perf_counter()
    if loader == "torch":
        ds = torchvision.datasets.ImageFolder(root, transform=make_transform(tvT, "eval"))
    else:
        ds = rl.ImageFolder(root, transform=make_transform(importlib.import_module("ringloader.transforms"),
                                                           "eval"))
    build = time.perf_counter() - t0
    gc.collect()
    grown = _rss_bytes() - rss0
    t0 = time.perf_counter()
    pickled = len(pickle.dumps(ds, protocol=pickle.HIGHEST_PROTOCOL))
    pickle_s = time.perf_counter() - t0
    make = torch.utils.data.DataLoader if loader == "torch" else rl.DataLoader
    dl = make(ds, batch_size=batch_size, shuffle=True, num_workers=num_workers, drop_last=True)
    t0 = time.perf_counter()
    images, _ = next(iter(dl))
    first = time.perf_counter() - t0
    assert tuple(images.shape[-2:]) == (CROP, CROP)
    return {"loader": loader, "samples": len(ds), "build_s": build, "rss_bytes": grown,
            "bytes_per_sample": grown / len(ds), "pickle_bytes": pickled, "pickle_s": pickle_s,
            "first_batch_s": first}


def run_scale_benchmark(args: argparse.Namespace, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Each loader's :func:`scale_child`, in alternating fresh processes, ``args.rounds`` each."""
    import subprocess

    root = make_link_tree(args.scale_images, args.scale_classes, log=log, sources_root=args.root)
    loaders = [s.strip() for s in args.loaders.split(",") if s.strip()]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in loaders}
    for r in range(args.rounds):
        for name in (loaders if r % 2 == 0 else loaders[::-1]):
            code = ("import json, sys; from ringloader.bench import scale; "
                    "print(json.dumps(scale.scale_child(*sys.argv[1:3], int(sys.argv[3]), int(sys.argv[4]))))")
            out = subprocess.run([sys.executable, "-c", code, name, str(root), str(args.batch_size),
                                  str(args.num_workers)], capture_output=True, text=True)
            if out.returncode != 0:
                raise BenchError(f"{name} scale run failed:\n{out.stderr[-2000:]}")
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            log(f"  round {r + 1} {name}: {runs[name][-1]}")
    results = []
    for name, rs in runs.items():
        med = {k: statistics.median(x[k] for x in rs) for k in rs[0] if k != "loader"}
        results.append({"loader": name, **med, "rounds": len(rs)})
    return results


def format_scale_report(args: argparse.Namespace, results: list[dict[str, Any]]) -> str:
    lines = [f"ImageFolder at scale: {int(results[0]['samples'])} images in {args.scale_classes} classes "
             f"(hard links), fresh process per run, median of {args.rounds}; DataLoader(batch_size="
             f"{args.batch_size}, shuffle=True, num_workers={args.num_workers}), eval transform",
             f"{'':<12}{'build s':>9}{'RSS +MB':>9}{'B/sample':>10}{'pickle MB':>11}{'pickle s':>10}"
             f"{'1st batch s':>13}"]
    for r in results:
        lines.append(f"{r['loader']:<12}{r['build_s']:>9.2f}{r['rss_bytes'] / 1e6:>9.0f}"
                     f"{r['bytes_per_sample']:>10.0f}{r['pickle_bytes'] / 1e6:>11.1f}{r['pickle_s']:>10.2f}"
                     f"{r['first_batch_s']:>13.2f}")
    return "\n".join(lines)
