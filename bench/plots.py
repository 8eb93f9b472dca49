#!/usr/bin/env python3
"""The pictures of the manual's Performance page (docs/performance.md), measured afresh.

    .venv/bin/python bench/plots.py            # 2-7 minutes on 2 cores, more the busier they are
    .venv/bin/python bench/plots.py --quick    # fewer rounds and thread counts: a smoke run
    .venv/bin/python bench/plots.py --root /data/imagenet/train --out /tmp/plots

It writes three PNGs into --out (default docs/img/), each stamped with the machine, the date and
the command that made it:

- loaders.png: images/s of torch's DataLoader + torchvision and of ringloader, side by side, for
  the train and eval transforms (ringloader.bench's comparison: same data, batch size and
  worker count, alternating rounds, medians);
- threads.png: images/s against the worker count (ringloader: decode threads; torch: worker
  processes), train transform;
- stages.png: where ringloader's time goes per stage for the train and eval transforms: how
  busy its decode threads and reader threads were and how long the consumer waited for
  batches, as shares of the timed window, with the verdict (``ringloader.bench.verdict``: the
  same rule and numbers as the comparison's verdict line);
- epoch_timeline.png: how long the training loop waits in next() for each batch over three
  epochs with a simulated step slower than the loader, with the next epoch read ahead (ringloader's default)
  and without it (persistent_workers=False: the pipeline drains at every epoch's end).

Figures measured while other work loads the CPUs show that work, not the loaders: each picture
is refused when the 1-minute load average before it stays above --max-load per usable CPU
(default 0.3) for 2 minutes, unless --force is given; the stamp carries the load average either way.

The measurements reuse ringloader.bench's functions, so a figure here and a row of
`python -m ringloader.bench` are measured the same way.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from ringloader import bench

REPO = Path(__file__).resolve().parents[1]
COLOURS = {"torch": "#8c8c8c", "ringloader": "#1f77b4"}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


class BusyMachine(RuntimeError):
    """The machine is too loaded for figures that mean anything."""


def check_load(usable_cpus: int, max_load: float, force: bool, wait_s: float = 0.0) -> float:
    """The 1-minute load average; :class:`BusyMachine` when it exceeds ``max_load`` per usable CPU
    and ``force`` is not set, after waiting up to ``wait_s`` seconds for it to fall (the previous
    picture's own measuring keeps it up for a while)."""
    load = os.getloadavg()[0]
    deadline = time.monotonic() + wait_s
    while load > max_load * usable_cpus and not force and time.monotonic() < deadline:
        time.sleep(5)
        load = os.getloadavg()[0]
    if load > max_load * usable_cpus and not force:
        raise BusyMachine(
            f"the machine is busy: load average {load:.2f} over {usable_cpus} usable CPUs (more than "
            f"--max-load {max_load:g} per CPU), so the figures would show that other work, not the "
            "loaders; wait until it is quiet, or pass --force (the stamp shows the load)")
    return load


def _stamp(fig: Any, machine: dict[str, Any], command: str) -> None:
    """Machine, load, date and command on the figure itself, so a copied PNG keeps its provenance."""
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    fig.text(0.01, 0.01,
             f"{machine['cpu']}, {machine['usable_cpus']} usable CPUs, load {machine.get('load', 0.0):.2f} "
             f"before; torch {machine.get('torch')}, ringloader {machine.get('ringloader')}; {day}\n{command}",
             fontsize=6.5, color="#555555", va="bottom", ha="left")


def _config(root: Path, *, transforms: list[str], loaders: list[str], num_workers: int, rounds: int,
            timed_batches: int, batch_size: int) -> bench.Config:
    return bench.Config(root=root, transforms=transforms, loaders=loaders, num_workers=num_workers,
                        batch_size=batch_size, warmup_batches=2, timed_batches=timed_batches, rounds=rounds,
                        seed=0, rl_transform="native")


def plot_loaders(root: Path, out: Path, args: argparse.Namespace, machine: dict[str, Any], command: str) -> str:
    cfg = _config(root, transforms=["train", "eval"], loaders=list(bench.LOADERS), num_workers=args.num_workers,
                  rounds=args.rounds, timed_batches=args.timed_batches, batch_size=args.batch_size)
    results = bench.run_benchmark(cfg, _log)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    kinds = cfg.transforms
    width = 0.38
    for j, name in enumerate(cfg.loaders):
        rows = {r.transform: r for r in results if r.loader == name and r.runs}
        xs = [i + (j - 0.5) * width for i in range(len(kinds))]
        ys = [rows[k].median if k in rows else 0.0 for k in kinds]
        ax.bar(xs, ys, width, label=name, color=COLOURS[name])
        for x, k, y in zip(xs, kinds, ys):
            base = next((r for r in results if r.loader == "torch" and r.transform == k and r.runs), None)
            text = f"{y:.0f}" + (f"\n{y / base.median:.2f}x" if name != "torch" and base else "")
            ax.annotate(text, (x, y), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                        fontsize=8)
    ax.set_xticks(range(len(kinds)), [f"{k}" for k in kinds])
    ax.set_ylabel("images/s (median of rounds)")
    ax.set_title(f"Throughput per loader: batch {cfg.batch_size}, {cfg.num_workers} workers, "
                 f"{cfg.rounds} alternating rounds", fontsize=9)
    ax.margins(y=0.3)
    ax.legend(loc="upper left")
    fig.subplots_adjust(bottom=0.2)
    _stamp(fig, machine, command)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return "; ".join(f"{r.transform} {r.loader} {r.median:.0f}" for r in results)


def plot_threads(root: Path, out: Path, args: argparse.Namespace, machine: dict[str, Any], command: str) -> str:
    counts = [int(n) for n in args.threads.split(",")]
    runs: dict[tuple[str, int], list[float]] = {(name, n): [] for name in bench.LOADERS for n in counts}
    # Rounds sweep every count in turn (reversed every other round), so load that drifts on a
    # shared machine spreads over all counts instead of landing on whichever ran then.
    for r in range(args.rounds):
        for n in (counts if r % 2 == 0 else list(reversed(counts))):
            cfg = _config(root, transforms=["train"], loaders=list(bench.LOADERS), num_workers=n, rounds=1,
                          timed_batches=args.timed_batches, batch_size=args.batch_size)
            for res in bench.run_benchmark(cfg, _log):
                runs[(res.loader, n)].extend(res.runs)
    medians = {name: [statistics.median(runs[(name, n)]) if runs[(name, n)] else float("nan") for n in counts]
               for name in bench.LOADERS}
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, ys in medians.items():
        spread = [[y - min(runs[(name, n)], default=y) for n, y in zip(counts, ys)],
                  [max(runs[(name, n)], default=y) - y for n, y in zip(counts, ys)]]
        ax.errorbar(counts, ys, yerr=spread, marker="o", capsize=3, label=f"{name} (median, min-max)",
                    color=COLOURS[name])
        for x, y in zip(counts, ys):
            ax.annotate(f"{y:.0f}", (x, y), xytext=(0, 4), textcoords="offset points", ha="center", fontsize=7)
    ax.set_xticks(counts)
    ax.set_xlabel("num_workers (ringloader: decode threads; torch: worker processes)")
    ax.set_ylabel("images/s, train transform")
    ax.set_ylim(bottom=0)
    ax.margins(y=0.15)
    ax.set_title(f"Images/s against workers: batch {args.batch_size}, {machine['usable_cpus']} usable CPUs",
                 fontsize=9)
    ax.legend()
    fig.subplots_adjust(bottom=0.22)
    _stamp(fig, machine, command)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return "; ".join(f"{name} {dict(zip(counts, (round(y) for y in ys)))}" for name, ys in medians.items())


def plot_stages(root: Path, out: Path, args: argparse.Namespace, machine: dict[str, Any], command: str) -> str:
    cfg = _config(root, transforms=["train", "eval"], loaders=["ringloader"], num_workers=args.num_workers,
                  rounds=args.rounds, timed_batches=args.timed_batches, batch_size=args.batch_size)
    results = [r for r in bench.run_benchmark(cfg, _log) if r.verdict]
    if not results:
        raise RuntimeError("no ringloader run produced stats to draw stages from")
    stages = (("decode_busy", "decode threads busy"), ("read_busy", "reader threads busy"),
              ("consumer_wait_fraction", "consumer waiting for a batch"))
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.8, 4.8))
    height = 0.25
    colours = ("#1f77b4", "#ff7f0e", "#8c8c8c")
    for j, ((key, label), colour) in enumerate(zip(stages, colours)):
        ys = [i + (j - 1) * height for i in range(len(results))]
        xs = [100.0 * r.verdict[key] for r in results]
        ax.barh(ys, xs, height, label=label, color=colour)
        for x, y in zip(xs, ys):
            ax.annotate(f"{x:.0f}%", (x, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
    ax.set_yticks(range(len(results)),
                  [f"{r.transform}\n{r.median:.0f} img/s\n{r.verdict['label']}" for r in results], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("share of the timed window (busy seconds / (window x threads))")
    ax.set_title(f"Where ringloader's time goes: {cfg.num_workers} decode threads, "
                 f"{results[0].verdict['reader_threads']} reader thread(s), batch {cfg.batch_size}", fontsize=9)
    ax.margins(x=0.15)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.45, -0.13), ncol=3, frameon=False)
    fig.subplots_adjust(left=0.2, bottom=0.28)
    _stamp(fig, machine, command)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return "; ".join(f"{r.transform}: {r.verdict['label']} ({r.verdict['evidence']})" for r in results)


def epoch_waits(root: Path, *, overlap: bool, epochs: int, step_ms: float, batch_size: int,
                num_workers: int) -> list[list[float]]:
    """Milliseconds spent in next() for each batch of `epochs` epochs, with a sleeping step.

    The step sleeps (as a GPU step leaves the CPUs to the loader) for `step_ms` per batch; the
    loop waits only when the loader has nothing ready."""
    import torch

    rl = bench._import_ringloader()
    ds = rl.ImageFolder(str(root), transform=bench.make_transform(rl.transforms, "train"))
    loader = rl.DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=num_workers, drop_last=True,
                           persistent_workers=overlap, generator=torch.Generator().manual_seed(0))
    waits: list[list[float]] = []
    try:
        for _ in range(epochs):
            it = iter(loader)
            epoch: list[float] = []
            while True:
                t0 = time.perf_counter()
                try:
                    images, _labels = next(it)
                except StopIteration:
                    break
                epoch.append((time.perf_counter() - t0) * 1e3)
                del images
                time.sleep(step_ms / 1e3)
            waits.append(epoch)
    finally:
        del loader
        gc.collect()
    return waits


def plot_timeline(root: Path, out: Path, args: argparse.Namespace, machine: dict[str, Any], command: str) -> str:
    runs = {}
    for overlap in (True, False):
        runs[overlap] = epoch_waits(root, overlap=overlap, epochs=args.epochs, step_ms=args.step_ms,
                                    batch_size=args.batch_size, num_workers=args.num_workers)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.4, 4.2))
    styles = {True: ("next epoch read ahead (default)", COLOURS["ringloader"], "o"),
              False: ("persistent_workers=False: drained at each epoch's end", "#d62728", "s")}
    summary = []
    for overlap, waits in runs.items():
        label, colour, marker = styles[overlap]
        ys = [w for epoch in waits for w in epoch]
        ax.plot(range(len(ys)), ys, marker=marker, markersize=3, linewidth=1, label=label, color=colour)
        firsts = [epoch[0] for epoch in waits[1:] if epoch]
        summary.append(f"{'overlap' if overlap else 'drained'}: first batch of later epochs "
                       f"{statistics.median(firsts):.1f} ms" if firsts else "")
    start = 0
    for epoch in runs[True][:-1]:
        start += len(epoch)
        ax.axvline(start - 0.5, color="#999999", linestyle=":", linewidth=1)
    ax.set_xlabel(f"batch (epochs of {len(runs[True][0])} batches; dotted: epoch boundary)")
    ax.set_ylabel("wait in next() (ms)")
    ax.set_ylim(bottom=0)
    ax.margins(y=0.25)
    ax.set_title(f"Epoch timeline: a {args.step_ms:.0f} ms step per batch of {args.batch_size}, "
                 f"{args.num_workers} decode threads", fontsize=9)
    ax.legend(fontsize=8, loc="upper right")
    fig.subplots_adjust(bottom=0.22)
    _stamp(fig, machine, command)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return "; ".join(summary)


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="one round, thread counts 1,2, two epochs on the timeline: a smoke run, not figures")
    p.add_argument("--root", type=Path, default=None, help="ImageFolder root (default: the built-in sample set)")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "img", help="where the PNGs go (default docs/img)")
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timed-batches", type=int, default=12)
    p.add_argument("--threads", default="1,2,3,4", help="worker counts of threads.png (default 1,2,3,4)")
    p.add_argument("--epochs", type=int, default=3, help="epochs on the timeline (default 3)")
    p.add_argument("--step-ms", type=float, default=400.0,
                   help="the timeline's simulated step (default 400 ms: slower than the loader even on a "
                        "busy machine, so that only what the epoch boundary costs shows)")
    p.add_argument("--max-load", type=float, default=0.3,
                   help="refuse a picture when the 1-minute load average exceeds this per usable CPU "
                        "(default 0.3)")
    p.add_argument("--force", action="store_true", help="draw even on a busy machine (the stamp shows the load)")
    p.add_argument("--only", choices=("loaders", "threads", "stages", "timeline"), action="append",
                   help="make only this picture (repeatable)")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.timed_batches, args.threads, args.epochs = 1, 6, "1,2", 2
    if args.num_workers < 1 or args.batch_size < 1 or args.rounds < 1 or args.timed_batches < 1 or args.epochs < 2:
        p.error("need --num-workers, --batch-size, --rounds, --timed-batches >= 1 and --epochs >= 2")
    try:
        counts = [int(n) for n in args.threads.split(",")]
    except ValueError:
        p.error(f"--threads must be comma-separated integers, got {args.threads!r}")
    if not counts or min(counts) < 1:
        p.error(f"--threads must name worker counts >= 1, got {args.threads!r}")
    root = Path(args.root).expanduser() if args.root else bench._sample_data().make_sample_dataset()
    if not root.is_dir():
        p.error(f"--root {root} is not a directory")
    args.out.mkdir(parents=True, exist_ok=True)
    bench._warm_page_cache(root)
    machine = bench.machine_info(_config(root, transforms=["train"], loaders=list(bench.LOADERS), num_workers=1,
                                         rounds=1, timed_batches=1, batch_size=1))
    command = "python bench/plots.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    jobs = {"loaders": plot_loaders, "threads": plot_threads, "stages": plot_stages, "timeline": plot_timeline}
    names = {"loaders": "loaders.png", "threads": "threads.png", "stages": "stages.png",
             "timeline": "epoch_timeline.png"}
    for key in args.only or list(jobs):
        try:
            machine["load"] = check_load(int(machine["usable_cpus"]), args.max_load, args.force, wait_s=120)
        except BusyMachine as e:
            print(f"plots: {names[key]} not drawn: {e}", file=sys.stderr)
            return 3
        t0 = time.perf_counter()
        summary = jobs[key](root, args.out / names[key], args, machine, command)
        print(f"{args.out / names[key]}: {summary} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
