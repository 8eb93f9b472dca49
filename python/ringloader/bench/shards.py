"""ImageFolder against WebDataset shards of the same images (packed once), and one epoch from
``pipe:`` streams held to a bandwidth (``--dataset shards``)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .harness import (BenchError, Config, Result, _import_ringloader, _warm_page_cache, measure_once,
                      ringloader_factory)
from .pipelines import make_transform


def run_shards_benchmark(cfg: Config, args: argparse.Namespace,
                         log: Callable[[str], None]) -> dict[str, Any]:
    """ringloader ImageFolder vs ringloader WebDataset over the same images (packed once with
    ``ringloader.pack``), train transform, ``cfg.num_workers`` threads, warm page cache,
    alternating rounds (medians); then one epoch, in shard order (one stream open at a time),
    from ``pipe:`` streams each limited to ``--pipe-rate`` MB/s by ``--ratecat``, reporting the
    MB/s the loader reached."""
    import tempfile

    if args.shards_dir:
        return _shards_benchmark_in(Path(args.shards_dir), cfg, args, log)
    # A folder made here is removed afterwards (the shards are a copy of the whole data set).
    with tempfile.TemporaryDirectory(prefix="ringloader-shards-") as work:
        return _shards_benchmark_in(Path(work), cfg, args, log)


def _shards_benchmark_in(work: Path, cfg: Config, args: argparse.Namespace,
                         log: Callable[[str], None]) -> dict[str, Any]:
    rl = _import_ringloader()
    pack = importlib.import_module("ringloader.pack")
    wdsmod = importlib.import_module("ringloader.webdataset")
    T = importlib.import_module("ringloader.transforms")
    if not list(work.glob("shard-*.tar")):
        log(f"packing {cfg.root} into {work} ...")
        summary = pack.pack(str(cfg.root), str(work), pack.parse_size(args.shard_size))
        log(f"packed {summary['samples']} samples into {summary['shards']} shards")
    shards = sorted(str(p) for p in work.glob("shard-*.tar"))
    _warm_page_cache(cfg.root)
    _warm_page_cache(work)
    transform = make_transform(T, "train")
    folder = rl.ImageFolder(str(cfg.root), transform=transform)
    sharded = rl.WebDataset(shards, transform=transform, index_cache=None)
    if len(sharded) != len(folder):
        raise BenchError(f"{work} holds {len(sharded)} samples, {cfg.root} {len(folder)}: give "
                         "--shards-dir a folder packed from this --root")
    factories = {"ImageFolder": ringloader_factory(folder, cfg),
                 "WebDataset": ringloader_factory(sharded, cfg)}
    results = {name: Result("train", name) for name in factories}
    for r in range(cfg.rounds):
        for name in (list(factories) if r % 2 == 0 else list(reversed(list(factories)))):
            m = measure_once(factories[name], cfg)
            results[name].runs.append(m.images_per_s)
            results[name].seconds.append(m.seconds)
            log(f"  round {r + 1}/{cfg.rounds} {name}: {m.images_per_s:.0f} img/s")
    report: dict[str, Any] = {
        "shards": len(shards), "shard_bytes": sum(os.path.getsize(s) for s in shards),
        "local": {name: {"runs": res.runs, "median_images_per_s": res.median}
                  for name, res in results.items()},
    }
    if args.pipe_rate > 0:
        ratecat = Path(args.ratecat)
        if not ratecat.is_file():
            raise BenchError(f"--ratecat {ratecat} not found (run from the repository root or "
                             "pass its path)")
        cache = work / "pipe-index"
        urls = [f"pipe:{sys.executable} {ratecat.resolve()} --rate {args.pipe_rate:g} {s}"
                for s in shards]
        for url, shard in zip(urls, shards):
            wdsmod.cache_index_as(url, shard, str(cache))  # no indexing read through the limit
        piped = rl.WebDataset(urls, transform=transform, index_cache=str(cache))
        # In shard order: one stream open at a time, so the limit is the loader's bandwidth.
        loader = rl.DataLoader(piped, batch_size=cfg.batch_size, shuffle=False,
                               num_workers=cfg.num_workers, drop_last=True)
        log(f"one epoch from pipe: streams limited to {args.pipe_rate:g} MB/s each ...")
        t0 = time.perf_counter()
        images = sum(int(labels.shape[0]) for _, labels in loader)
        elapsed = time.perf_counter() - t0
        stats = loader.stats()
        report["pipe"] = {"limit_mb_per_s": args.pipe_rate, "seconds": elapsed,
                          "images_per_s": images / elapsed,
                          "mb_per_s": stats.get("bytes_read", 0) / elapsed / 1e6,
                          "bytes_read": stats.get("bytes_read"),
                          "stream_restarts": stats.get("stream_restarts")}
    return report


def format_shards_report(cfg: Config, machine: dict[str, Any], data: dict[str, Any],
                         report: dict[str, Any]) -> str:
    local = report["local"]
    lines = [
        f"ringloader shards benchmark: {data['images']} images, {report['shards']} shards "
        f"({report['shard_bytes'] / 1e6:.1f} MB), train transform, batch {cfg.batch_size}, "
        f"{cfg.num_workers} threads, warm page cache, median of {cfg.rounds} rounds",
        f"  ImageFolder : {local['ImageFolder']['median_images_per_s']:8.0f} img/s",
        f"  WebDataset  : {local['WebDataset']['median_images_per_s']:8.0f} img/s "
        f"({local['WebDataset']['median_images_per_s'] / local['ImageFolder']['median_images_per_s']:.2f}x)",
    ]
    pipe = report.get("pipe")
    if pipe:
        lines.append(f"  pipe: at {pipe['limit_mb_per_s']:g} MB/s per stream: "
                     f"{pipe['mb_per_s']:.1f} MB/s reached, {pipe['images_per_s']:.0f} img/s "
                     f"({pipe['seconds']:.1f} s for the epoch, {pipe['stream_restarts']} "
                     "stream restarts)")
    lines.append(f"  machine: {machine.get('cpu', '?')}")
    return "\n".join(lines)
