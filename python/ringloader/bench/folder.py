"""The headline comparison: torchvision's ImageFolder under torch's DataLoader against
ringloader's ImageFolder and DataLoader, per transform pipeline (train, eval, the recipes), in
alternating rounds; its table with a verdict line per transform, its JSON record and chart."""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from .harness import (CROP, Config, Result, _import_ringloader, _import_torch, _seed_everything,
                      _warm_page_cache, measure_once, ringloader_factory)
from .pipelines import make_transform


def _loader_factories(cfg: Config, kind: str) -> dict[str, Callable[[], Any]]:
    """Zero-argument callables creating a fresh loader of each kind."""
    factories: dict[str, Callable[[], Any]] = {}
    if "torch" in cfg.loaders:
        torch, torchvision = _import_torch()
        tv_ds = torchvision.datasets.ImageFolder(str(cfg.root), make_transform(torchvision.transforms, kind))

        def make_torch() -> Any:
            return torch.utils.data.DataLoader(
                tv_ds, batch_size=cfg.batch_size, shuffle=True, num_workers=cfg.num_workers, drop_last=True
            )

        factories["torch"] = make_torch
    if "ringloader" in cfg.loaders:
        rl = _import_ringloader()
        if cfg.rl_transform == "torchvision":
            _, torchvision = _import_torch()
            rl_tf = make_transform(torchvision.transforms, kind)
        else:
            rl_tf = make_transform(importlib.import_module("ringloader.transforms"), kind)
        factories["ringloader"] = ringloader_factory(rl.ImageFolder(str(cfg.root), transform=rl_tf),
                                                     cfg)
    return factories


def run_benchmark(cfg: Config, log: Callable[[str], None]) -> list[Result]:
    """Alternate the loaders round by round for each transform; return all results."""
    results: list[Result] = []
    for kind in cfg.transforms:
        factories = _loader_factories(cfg, kind)
        res = {name: Result(kind, name) for name in cfg.loaders}
        for r in range(cfg.rounds):
            order = list(cfg.loaders) if r % 2 == 0 else list(reversed(cfg.loaders))
            for name in order:
                if res[name].error:
                    continue
                _seed_everything(cfg.seed + r)
                try:
                    m = measure_once(factories[name], cfg, 176 if kind == "tv-recipe" else CROP,
                                 uint8=kind == "train-uint8")
                except KeyboardInterrupt:
                    raise
                except Exception as e:  # report and carry on with the other loader
                    res[name].error = f"{type(e).__name__}: {e}"
                    log(f"  {kind:5s} {name:10s} round {r + 1}: FAILED\n{traceback.format_exc()}")
                    continue
                finally:
                    gc.collect()  # release the finished loader (and its workers) before the next one
                res[name].runs.append(m.images_per_s)
                res[name].seconds.append(m.seconds)
                if m.stats is not None:
                    res[name].stats = m.stats
                    res[name].verdict = m.verdict
                log(f"  {kind:5s} {name:10s} round {r + 1}/{cfg.rounds}: {m.images_per_s:8.1f} images/s  ({m.images} images in {m.seconds:.2f} s)")
        results.extend(res[name] for name in cfg.loaders)
    return results


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------


def verdict_line(kind: str, r: Result | None, width: int = 10) -> str:
    """One line for transform ``kind``: which of ringloader's stages limited it (:func:`judge`
    on ``r``, ringloader's result), or why there is no verdict."""
    name = f"{kind:<{width}} "
    if r is None:
        return f"{name}no verdict: ringloader was not measured (--loaders)"
    if r.error and not r.runs:
        return f"{name}no verdict: ringloader failed ({r.error})"
    if isinstance(r.stats, dict) and r.stats.get("native") is False:
        return (f"{name}no verdict: ringloader ran its generic (non-native, torch-based) path, which "
                "has no stage counters: the transform or dataset is not supported natively")
    if not r.verdict:
        return f"{name}no verdict: the loader reported no stage counters"
    return f"{name}{r.verdict['label']}: {r.verdict['evidence']}"


def format_report(cfg: Config, machine: dict[str, Any], data: dict[str, Any], results: list[Result],
                  verbose: bool = False) -> str:
    """The comparison table and a verdict line per transform; with ``verbose`` also each
    loader's ``stats()`` of its last round."""
    lines = []
    lines.append(f"machine : {machine['cpu']}, {machine['usable_cpus']} usable / {machine['logical_cpus']} logical CPUs")
    lines.append(
        f"software: Python {machine['python']}, torch {machine.get('torch')}, torchvision {machine.get('torchvision')}, "
        f"Pillow {machine.get('PIL')} (libjpeg-turbo {machine.get('pillow_libjpeg_turbo')}), "
        f"ringloader {machine.get('ringloader', 'n/a')}"
    )
    avg = data["bytes"] / max(data["images"], 1) / 1024
    lines.append(
        f"dataset : {data['root']} ({data['images']} images, {data['classes']} classes, "
        f"{data['bytes'] / 1e6:.1f} MB, {avg:.1f} KiB/image)"
    )
    lines.append(
        f"settings: batch {cfg.batch_size}, workers {cfg.num_workers}, warm-up {cfg.warmup_batches} batches, "
        f"{cfg.timed_batches} timed batches ({cfg.timed_batches * cfg.batch_size} images) x {cfg.rounds} rounds, "
        f"median reported"
    )
    lines.append("")
    tw = max([10] + [len(r.transform) for r in results])  # the recipes' names are longer
    header = f"{'transform':<{tw}} {'loader':<11} {'images/s':>10} {'min':>9} {'max':>9} {'vs torch':>9}"
    lines.append(header)
    lines.append("-" * len(header))
    by_key = {(r.transform, r.loader): r for r in results}
    for r in results:
        base = by_key.get((r.transform, "torch"))
        if r.error and not r.runs:
            lines.append(f"{r.transform:<{tw}} {r.loader:<11} {'FAILED':>10}  {r.error}")
            continue
        ratio = ""
        if base is not None and base.runs and r.runs:
            ratio = f"{r.median / base.median:8.2f}x"
        lines.append(
            f"{r.transform:<{tw}} {r.loader:<11} {r.median:10.1f} {min(r.runs):9.1f} {max(r.runs):9.1f} {ratio:>9}"
        )
    lines.append("")
    lines.append("verdict: which of ringloader's stages limits it (its stats() over the last round's timed "
                 "batches)")
    for kind in dict.fromkeys(r.transform for r in results):
        lines.append(verdict_line(kind, by_key.get((kind, "ringloader")), tw))
    for r in results:
        if verbose and r.stats is not None:
            lines.append("")
            lines.append(f"ringloader stats ({r.transform}, last round):" if r.loader == "ringloader" else f"{r.loader} stats ({r.transform}):")
            lines.append(json.dumps(r.stats, indent=2, sort_keys=True, default=repr))
    return "\n".join(lines)


def write_png(path: Path, results: list[Result], machine: dict[str, Any], cfg: Config) -> str:
    """Bar chart of median images/s; returns a message for the user."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"matplotlib is not installed: no chart written to {path} (pip install matplotlib)"
    kinds = list(dict.fromkeys(r.transform for r in results))
    loaders = list(dict.fromkeys(r.loader for r in results))
    by_key = {(r.transform, r.loader): r for r in results}
    fig, ax = plt.subplots(figsize=(2.2 + 2.2 * len(kinds), 4))
    width = 0.8 / max(len(loaders), 1)
    colours = {"torch": "#8c8c8c", "ringloader": "#1f77b4"}
    for j, name in enumerate(loaders):
        rows = [(i, by_key[(k, name)]) for i, k in enumerate(kinds) if (k, name) in by_key and by_key[(k, name)].runs]
        if not rows:
            continue
        xs = [i + (j - (len(loaders) - 1) / 2) * width for i, _ in rows]
        ys = [r.median for _, r in rows]
        yerr = [[r.median - min(r.runs) for _, r in rows], [max(r.runs) - r.median for _, r in rows]]
        ax.bar(xs, ys, width, yerr=yerr, capsize=3, label=name, color=colours.get(name))
        for x, (_, r) in zip(xs, rows):
            base = by_key.get((r.transform, "torch"))
            label = f"{r.median:.0f}"
            if name != "torch" and base is not None and base.runs:
                label += f"\n{r.median / base.median:.2f}x"
            ax.annotate(label, (x, max(r.runs)), xytext=(0, 3), textcoords="offset points",
                        ha="center", va="bottom", fontsize=8)
    ax.margins(y=0.15)
    ax.set_xticks(range(len(kinds)), kinds)
    ax.set_ylabel("images / s (median)")
    ax.set_title(
        f"batch {cfg.batch_size}, {cfg.num_workers} workers, {machine['usable_cpus']} CPUs", fontsize=9
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"chart written to {path}"


def default_json_path(now: float | None = None) -> Path:
    """Where the comparison keeps its full record without ``--json``:
    ``$RINGLOADER_CACHE/results/compare-<date>-<time>.json`` (the cache of the sample set,
    default ``~/.cache/ringloader``), one file per run."""
    env = os.environ.get("RINGLOADER_CACHE")
    cache = Path(env).expanduser() if env else Path.home() / ".cache" / "ringloader"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    path = cache / "results" / f"compare-{stamp}.json"
    n = 1
    while path.exists():  # two runs in one second keep both records
        n += 1
        path = cache / "results" / f"compare-{stamp}-{n}.json"
    return path


def run_comparison(cfg: Config, machine: dict[str, Any], data: dict[str, Any],
                   log: Callable[[str], None], verbose: bool = False, json_path: Path | None = None,
                   png: Path | None = None) -> int:
    """The comparison on a warm page cache: prints the report and the total time, keeps the full
    record (at ``json_path``, else :func:`default_json_path`), draws ``png`` if given. Returns
    the exit status: 1 if a loader failed, 2 if the record could not be written, else 0."""
    _warm_page_cache(cfg.root)
    log(f"measuring {', '.join(cfg.loaders)} on {cfg.root} ...")
    t0 = time.perf_counter()
    results = run_benchmark(cfg, log)
    total = time.perf_counter() - t0

    print(format_report(cfg, machine, data, results, verbose=verbose))
    print(f"\n(total benchmark time {total:.0f} s)")
    status = 1 if any(r.error for r in results) else 0
    # The full record is always kept: at --json PATH, else under the cache folder.
    payload = {
        "machine": machine,
        "dataset": data,
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
        "results": [
            {**asdict(r), "median_images_per_s": r.median if r.runs else None} for r in results
        ],
        "ratios": {
            r.transform: r.median / b.median
            for r in results
            if r.loader == "ringloader" and r.runs
            for b in results
            if b.loader == "torch" and b.transform == r.transform and b.runs
        },
        "verdicts": {r.transform: r.verdict for r in results if r.loader == "ringloader"},
        "total_seconds": total,
    }
    path = json_path if json_path else default_json_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2, default=repr))
    except OSError as e:
        print(f"error: cannot write the full record to {path} ({e}); pass --json PATH to "
              "write it elsewhere", file=sys.stderr)
        status = 2
    else:
        print(f"full record (JSON: settings, every round, verdicts, stats()): {path}")
    if png:
        print(write_png(png, results, machine, cfg))
    return status
