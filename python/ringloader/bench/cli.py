"""The command line (``ringloader compare``, ``python -m ringloader.bench``): its arguments,
the checks of a run's settings, ``--tune`` handed to the native CLI, and :func:`main`, which
runs the ``--dataset`` kind asked for and prints its report."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

from .custom import format_custom_report, run_custom_benchmark
from .folder import run_comparison
from .harness import (LOADERS, BenchError, Config, _import_ringloader, _import_torch, _sample_data,
                      dataset_info, machine_info)
from .hf_parquet import format_arrow_report, run_arrow_benchmark
from .joint import (format_detection_report, format_joint_segmentation_report,
                    format_segmentation_reference_report, run_detection_benchmark,
                    run_joint_segmentation_benchmark, run_segmentation_reference_benchmark)
from .pipelines import RECIPES
from .remote import format_remote_report, run_remote_benchmark
from .scale import SCALE_CLASSES, SCALE_IMAGES, format_scale_report, run_scale_benchmark
from .shards import format_shards_report, run_shards_benchmark
from .video import format_video_report, run_video_benchmark


def _parse_args(argv: Sequence[str] | None, prog: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Compare torchvision ImageFolder + torch DataLoader with ringloader, side by side.",
    )
    p.add_argument("--root", type=Path, default=None,
                   help="ImageFolder root (default: the built-in sample dataset, generated if missing)")
    p.add_argument("--num-workers", type=int, default=2, help="loader workers for both loaders (default 2)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=float, default=1.0,
                   help="timed data per measurement, in epochs (default 1, minus the warm-up batches)")
    p.add_argument("--max-images", type=int, default=4096,
                   help="upper bound on timed images per measurement (default 4096)")
    p.add_argument("--warmup-batches", type=int, default=2, help="untimed batches per measurement (default 2)")
    p.add_argument("--rounds", type=int, default=3, help="alternating measurements per loader (default 3)")
    p.add_argument("--transform", choices=("train", "eval", "both", "train-uint8", "train-v2", *RECIPES, "recipes"),
                   default="both",
                   help="train/eval (default: both); train-uint8: the train crop and flip ending in "
                        "PILToTensor (uint8 batches, for normalising on the GPU); train-v2: v2's ToImage, "
                        "then the train crop (torch's resize kernel), flip, ToDtype and Normalize; or the training "
                        "recipes: tv-recipe (torchvision's "
                        "reference: TrivialAugmentWide + RandomErasing), timm-recipe (timm's "
                        "rand-m9-mstd0.5-inc1 + RandomErasing), recipes (both)")
    p.add_argument("--loaders", default="torch,ringloader",
                   help="comma-separated subset of torch,ringloader (default both)")
    p.add_argument("--ringloader-transform", choices=("native", "torchvision"), default="native",
                   help="give ringloader its own transforms (default) or the torchvision Compose")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, metavar="PATH",
                   help="where to write the full record as JSON (machine, settings, every round, "
                        "verdicts, ringloader's stats()); the comparison writes it by default to "
                        "$RINGLOADER_CACHE/results/compare-<date>-<time>.json (cache default "
                        "~/.cache/ringloader) and prints the path; the other --dataset kinds only "
                        "when given")
    p.add_argument("--verbose", action="store_true",
                   help="also print each loader's stats() of its last round after the verdicts "
                        "(they are in the JSON record either way)")
    p.add_argument("--png", type=Path, default=None, help="write a bar chart (needs matplotlib)")
    p.add_argument("--quiet", action="store_true", help="no per-round progress lines")
    p.add_argument("--scale-images", type=int, default=SCALE_IMAGES,
                   help=f"--dataset scale: hard links in the tree (default {SCALE_IMAGES}, ImageNet's train set)")
    p.add_argument("--scale-classes", type=int, default=SCALE_CLASSES,
                   help=f"--dataset scale: class folders (default {SCALE_CLASSES})")
    p.add_argument("--link-rate", type=float, default=100.0,
                   help="--dataset remote: MB/s of the loopback link (default 100)")
    p.add_argument("--link-latency-ms", type=float, default=20.0,
                   help="--dataset remote: latency before each response in ms (default 20)")
    p.add_argument("--dataset", choices=("folder", "shards", "scale", "remote", "custom",
                                          "multicrop", "dino", "hf", "parquet", "segmentation",
                                          "segmentation-joint", "segmentation-reference",
                                          "detection", "detection-hflip", "detection-lsj",
                                          "detection-ssd", "detection-ssd-tensor", "video"),
                   default="folder",
                   help="folder (default): torch vs ringloader on the ImageFolder; shards: the same "
                        "images as ringloader ImageFolder vs WebDataset shards (packed once), plus a "
                        "bandwidth-limited pipe: run (train transform); scale: ImageFolder construction "
                        "time, memory, pickle size and time to the first batch on an ImageNet-sized "
                        "tree of hard links (built once under the cache folder) to the JPEGs of --root "
                         "(default: the sample set), torch vs ringloader; remote: the shards over a "
                         "throttled loopback http link (epoch 1 downloads into the cache, epoch 2 reads "
                         "it) vs local shards, pipe:curl and the webdataset package; hf: the images saved as a "
                         "Hugging Face dataset, rl.HFDataset vs with_transform + torch; parquet: the "
                         "images in Parquet row groups, rl.Parquet shuffled (copy, and copy=False) vs rl.ImageFolder; "
                         "segmentation: a user Dataset of an image and its mask a sample; "
                         "segmentation-joint: the same under one random rl.Joint (crop, flip), "
                         "vs PIL + v2 under torch; segmentation-reference: torchvision's "
                         "segmentation train preset through rl.Joint vs PIL + v2 under torch; "
                         "detection: boxes with each image, rl.Joint vs PIL + v2 under torch; "
                         "detection-hflip: the same under torchvision's detection hflip preset "
                         "(each image its own size); detection-lsj: under its lsj preset; "
                         "detection-ssd: under its ssd preset; detection-ssd-tensor: the same in "
                         "its tensor backend (PILToTensor first); "
                         "dino: a user Dataset of DINO's whole augmentation, 2 x 224 + 10 x 96 "
                         "views, ImageFile references vs PIL under torch; video: Kinetics-style "
                         "clips (16 frames, stride 4, RandomResizedCrop 224, flip, normalize) of "
                         "360p H.264 videos ffmpeg makes in a temporary folder, rl.VideoFolder vs "
                         "torchcodec's decoder and sampler under torch (batches of 8)")
    p.add_argument("--shards-dir", type=Path, default=None,
                   help="--dataset shards: where the packed shards are kept (default: a temporary "
                        "folder; an existing folder of shard-*.tar is reused)")
    p.add_argument("--shard-size", default="64MB", help="--dataset shards: bytes per shard")
    p.add_argument("--pipe-rate", type=float, default=50.0,
                   help="--dataset shards: MB/s limit of each pipe: stream (default 50; 0 skips)")
    p.add_argument("--ratecat", type=Path, default=Path("bench") / "ratelimit_cat.py",
                   help="the rate-limited copy script (default bench/ratelimit_cat.py)")
    p.add_argument("--tune", action="store_true",
                   help="instead of the comparison: short trials of ringloader alone over threads, readers "
                        "and prefetch around num_workers='auto' on --root, then the settings it would "
                        "choose and the DataLoader(...) line to paste (runs ringloader bench --tune)")
    p.add_argument("--tune-seconds", type=float, default=24.0, help="--tune: total measuring time (default 24)")
    p.add_argument("--step-ms", type=float, default=0.0,
                   help="--tune: simulated training step per batch in ms (default 0: none)")
    return p.parse_args(argv)


def tune_command(args: argparse.Namespace) -> list[str]:
    """The native CLI's --tune command line for these arguments."""
    exe = Path(__file__).resolve().parent.parent / "bin" / "ringloader-bench"
    if not os.access(exe, os.X_OK):
        raise BenchError(f"--tune needs the native CLI, and {exe} is missing: this ringloader was built "
                         "without it (RINGLOADER_BUILD_BENCH=OFF)")
    if args.transform not in ("train", "eval"):
        raise BenchError("--tune measures the train or eval transform: pass --transform train or eval")
    return [str(exe), "--tune", f"--data={args.root}", f"--batch_size={args.batch_size}",
            f"--preset={args.transform}", f"--tune_seconds={args.tune_seconds}",
            f"--consumer_ms={args.step_ms}", f"--seed={args.seed}", "--progress=false"]


def _config(args: argparse.Namespace, num_images: int) -> Config:
    loaders = [s.strip() for s in args.loaders.split(",") if s.strip()]
    bad = [s for s in loaders if s not in LOADERS]
    if bad or not loaders:
        raise BenchError(f"--loaders must be a subset of {','.join(LOADERS)}; got {args.loaders!r}")
    if args.num_workers < 0 or args.batch_size < 1 or args.warmup_batches < 1 or args.rounds < 1:
        raise BenchError("need --num-workers >= 0, --batch-size >= 1, --warmup-batches >= 1, --rounds >= 1")
    per_epoch = num_images // args.batch_size
    if per_epoch < args.warmup_batches + 1:
        raise BenchError(
            f"dataset too small: {num_images} images give {per_epoch} batches of {args.batch_size} per epoch; "
            f"need more than --warmup-batches={args.warmup_batches}"
        )
    timed = int(math.floor(args.epochs * per_epoch)) - args.warmup_batches
    timed = min(timed, max(1, args.max_images // args.batch_size))
    if timed < 1:
        raise BenchError("--epochs/--max-images leave no batch to time after the warm-up")
    return Config(
        root=args.root,
        transforms=(["train", "eval"] if args.transform == "both"
                    else list(RECIPES) if args.transform == "recipes" else [args.transform]),
        loaders=loaders,
        num_workers=args.num_workers,
        batch_size=args.batch_size,
        warmup_batches=args.warmup_batches,
        timed_batches=timed,
        rounds=args.rounds,
        seed=args.seed,
        rl_transform=args.ringloader_transform,
    )


def _write_record(path: Path, payload: dict) -> None:
    """``--json PATH`` of the kinds other than the folder comparison: the report as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=repr))
    print(f"results written to {path}")


#: The ``--dataset`` kinds of one user Dataset (or Arrow data) against torch's DataLoader.
DATASET_KINDS = ("custom", "multicrop", "dino", "hf", "parquet", "segmentation",
                 "segmentation-joint", "segmentation-reference", "detection", "detection-hflip",
                 "detection-lsj", "detection-ssd", "detection-ssd-tensor")


def _run_dataset_kind(args: argparse.Namespace, cfg: Config, machine: dict, data: dict,
                      log: Callable[[str], None]) -> dict:
    """Runs one of :data:`DATASET_KINDS`, prints its report and returns it."""
    if args.dataset.startswith("detection"):
        report = run_detection_benchmark(cfg, log, args.dataset)
        print(format_detection_report(cfg, machine, data, report))
    elif args.dataset == "segmentation-joint":
        report = run_joint_segmentation_benchmark(cfg, log)
        print(format_joint_segmentation_report(cfg, machine, data, report))
    elif args.dataset == "segmentation-reference":
        report = run_segmentation_reference_benchmark(cfg, log)
        print(format_segmentation_reference_report(cfg, machine, data, report))
    elif args.dataset in ("hf", "parquet"):
        report = run_arrow_benchmark(cfg, args.dataset, log)
        print(format_arrow_report(cfg, data, report))
    else:
        report = run_custom_benchmark(cfg, args.dataset, log)
        print(format_custom_report(cfg, machine, data, args.dataset, report))
    return report


def main(argv: Sequence[str] | None = None, prog: str = "python -m ringloader.bench") -> int:
    args = _parse_args(argv, prog)
    log = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    try:
        loaders = [s.strip() for s in args.loaders.split(",") if s.strip()]
        if "ringloader" in loaders:
            _import_ringloader()  # fail early with a clear message
        if "torch" in loaders:
            _import_torch()
        if args.dataset == "scale":
            results = run_scale_benchmark(args, log)
            print(format_scale_report(args, results))
            if args.json:
                _write_record(args.json, {"scale": results})
            return 0
        if args.dataset == "video":
            report = run_video_benchmark(args, log)
            print(format_video_report(report))
            if args.json:
                _write_record(args.json, {"machine": machine_info(_config(args, 1 << 30)),
                                          "video": report})
            return 0
        if args.root is None:
            log("preparing the sample dataset (generated once, then cached) ...")
            args.root = _sample_data().make_sample_dataset()
        args.root = Path(args.root).expanduser()
        if not args.root.is_dir():
            raise BenchError(f"--root {args.root} is not a directory")
        if args.tune:
            if args.transform == "both":
                args.transform = "train"
            command = tune_command(args)
            sys.stdout.flush()
            os.execv(command[0], command)
        data = dataset_info(args.root)
        cfg = _config(args, data["images"])
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    machine = machine_info(cfg)
    if args.dataset in DATASET_KINDS:
        report = _run_dataset_kind(args, cfg, machine, data, log)
        if args.json:
            _write_record(args.json, {"machine": machine, "dataset": data, **report})
        return 0
    if args.dataset in ("shards", "remote"):
        run, fmt = ((run_shards_benchmark, format_shards_report) if args.dataset == "shards"
                    else (run_remote_benchmark, format_remote_report))
        try:
            report = run(cfg, args, log)
        except BenchError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(fmt(cfg, machine, data, report))
        if args.json:
            _write_record(args.json, {"machine": machine, "dataset": data, **report})
        return 0
    return run_comparison(cfg, machine, data, log, verbose=args.verbose, json_path=args.json,
                          png=args.png)
