"""Side-by-side throughput comparison: torchvision + torch DataLoader vs ringloader.

Run as ``ringloader compare`` (the console script; ``ringloader-compare`` and
``python -m ringloader.bench`` are the same program), e.g.::

    python -m ringloader.bench                      # sample set, train + eval
    python -m ringloader.bench --root /data/imagenet/train --max-images 4096
    python -m ringloader.bench --transform train --json out.json --png out.png
    python -m ringloader.bench --verbose            # also print ringloader's stats() per transform
    python -m ringloader.bench --dataset shards     # ImageFolder vs WebDataset shards, pipe:
    python -m ringloader.bench --dataset scale      # 1.28M-image folder: memory, first batch
    python -m ringloader.bench --dataset remote     # http:// shards over a throttled link, cache
    python -m ringloader.bench --dataset custom     # a user's own Dataset: ImageFile vs PIL
    python -m ringloader.bench --dataset multicrop  # the same, DINO's 2x224 + 6x96 crops
    python -m ringloader.bench --dataset dino       # DINO's whole augmentation, 2x224 + 10x96
    python -m ringloader.bench --dataset segmentation  # the same, an image and its mask a sample
    python -m ringloader.bench --dataset detection  # the same with boxes: rl.Joint vs PIL + v2
    python -m ringloader.bench --dataset detection-hflip  # torchvision's detection hflip preset
    python -m ringloader.bench --dataset segmentation-joint  # image + mask, random rl.Joint
    python -m ringloader.bench --dataset segmentation-reference  # torchvision's train preset
    python -m ringloader.bench --dataset hf         # rl.HFDataset vs with_transform + torch
    python -m ringloader.bench --dataset parquet    # rl.Parquet (copy, copy=False) vs rl.ImageFolder
    python -m ringloader.bench --tune --root /data/imagenet/train --step-ms 40   # ringloader bench --tune

For every transform pipeline (``train``: RandomResizedCrop(224) +
RandomHorizontalFlip + ToTensor + Normalize; ``eval``: Resize(256) +
CenterCrop(224) + ToTensor + Normalize) it measures

(a) ``torch.utils.data.DataLoader(torchvision.datasets.ImageFolder(root, tv_transform),
    batch_size, shuffle=True, num_workers=N, drop_last=True)`` and
(b) ``ringloader.DataLoader(ringloader.ImageFolder(root, rl_transform), <same arguments>)``

with the same number of workers.  Each measurement builds a fresh loader,
discards ``--warmup-batches`` batches (worker start-up, first decodes) and
times whole batches after that.  The consumer only checks each batch's shape
and accumulates ``labels.sum()``, so the figure is the loader's own
throughput.  Measurements of the two loaders alternate (A B B A A B ...) for
``--rounds`` rounds and the median of each is reported, so drifting load on a
shared machine affects both alike.  All files are read once before the first
measurement so that both loaders see a warm OS page cache: this compares
decode + transform + batching throughput, not disk speed.

The report is the table of medians and, per transform, one verdict line: which of
ringloader's stages (reading, decoding, or the consumer) limited it over the last round's
timed batches (:func:`judge`, from ``DataLoader.stats()``). The full record (settings, every
round, verdicts and each loader's ``stats()``) goes to ``--json PATH`` or, by default, to
:func:`default_json_path`; ``--verbose`` prints the stats too.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import math
import os
import platform
import shutil
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CROP = 224
LOADERS = ("torch", "ringloader")


class BenchError(RuntimeError):
    """A problem the user must fix (bad arguments, missing package, tiny dataset)."""


# --------------------------------------------------------------------------
# Imports
# --------------------------------------------------------------------------


def _sample_data() -> ModuleType:
    """``ringloader.sample_data`` (loaded from this file's directory if the
    package itself cannot be imported, e.g. before the extension is built)."""
    try:
        return importlib.import_module("ringloader.sample_data")
    except Exception:  # package not built/installed, or its extension fails to load
        name = "_ringloader_sample_data"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parent.parent / "sample_data.py")
        if spec is None or spec.loader is None:
            raise
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module


def _import_ringloader() -> ModuleType:
    try:
        import ringloader

        for attr in ("ImageFolder", "DataLoader"):
            if not hasattr(ringloader, attr):
                raise ImportError(f"ringloader has no attribute {attr!r}")
        importlib.import_module("ringloader.transforms")
        return ringloader
    except (ImportError, OSError) as e:
        raise BenchError(
            f"cannot import ringloader ({e}).\n"
            "Build and install the package first (from the repository root: `pip install .`),\n"
            "or run only the torch baseline with `--loaders torch`."
        ) from e


def _import_torch() -> tuple[ModuleType, ModuleType]:
    try:
        import torch
        import torchvision
    except ImportError as e:
        raise BenchError(f"the comparison needs torch and torchvision ({e}); pip install torch torchvision") from e
    return torch, torchvision


# --------------------------------------------------------------------------
# Pipelines
# --------------------------------------------------------------------------


RECIPES = ("tv-recipe", "timm-recipe")


def make_recipe(kind: str) -> Any:
    """The training recipes real scripts use, as torchvision/timm build them (ringloader gets
    the same object): ``tv-recipe`` is torchvision's reference ImageNet recipe
    (RandomResizedCrop(176) + flip + TrivialAugmentWide + PILToTensor + ConvertImageDtype +
    Normalize + RandomErasing(0.1)); ``timm-recipe`` is timm's ``create_transform(224,
    is_training=True, auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25, re_mode="pixel")``."""
    torch, torchvision = _import_torch()
    T = torchvision.transforms
    if kind == "tv-recipe":
        return T.Compose([  # torchvision's references/classification recipe (train-crop-size 176)
            T.RandomResizedCrop(176), T.RandomHorizontalFlip(), T.TrivialAugmentWide(),
            T.PILToTensor(), T.ConvertImageDtype(torch.float), T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
            T.RandomErasing(0.1)])
    try:
        from timm.data import create_transform
    except ImportError as e:
        raise BenchError("--transform timm-recipe needs timm (pip install timm)") from e
    _posterize_zero_bits_as_black()
    return create_transform(CROP, is_training=True, auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25,
                            re_mode="pixel")


def _posterize_zero_bits_as_black() -> None:
    """timm's PosterizeIncreasing asks for 0 bits at magnitude 10 (reached through mstd noise),
    which Pillow >= 11 refuses ("bits must be between or equal to 1 and 8") and older Pillow
    turned into a black image. Restore the old meaning so the torch side of the comparison does
    not crash a few batches in (ringloader's native posterize keeps 0 bits as black)."""
    from PIL import Image, ImageOps

    original = ImageOps.posterize
    if getattr(original, "_zero_bits_black", False):
        return

    def posterize(image, bits):
        if bits <= 0:
            return Image.new(image.mode, image.size)
        return original(image, bits)

    posterize._zero_bits_black = True
    ImageOps.posterize = posterize


def make_transform(T: Any, kind: str) -> Any:
    """The ``train`` or ``eval`` pipeline built from a torchvision-compatible
    transforms module (``torchvision.transforms`` or ``ringloader.transforms``), or
    ``train-uint8`` or one of :data:`RECIPES` (torchvision's/timm's own objects, whatever ``T``
    is)."""
    if kind in RECIPES:
        return make_recipe(kind)
    if kind == "train":
        steps = [T.RandomResizedCrop(CROP), T.RandomHorizontalFlip()]
    elif kind == "train-uint8":
        # uint8 batches, normalised later on the GPU: the decode and crop without the float
        # conversion. torchvision's own objects, whatever T is (ringloader.transforms has no
        # PILToTensor; ringloader takes torchvision's as it is).
        _, torchvision = _import_torch()
        tv = torchvision.transforms
        return tv.Compose([tv.RandomResizedCrop(CROP), tv.RandomHorizontalFlip(), tv.PILToTensor()])
    elif kind == "eval":
        steps = [T.Resize(256), T.CenterCrop(CROP)]
    else:
        raise ValueError(f"unknown transform {kind!r}")
    return T.Compose(steps + [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


@dataclass
class Config:
    root: Path
    transforms: list[str]
    loaders: list[str]
    num_workers: int
    batch_size: int
    warmup_batches: int
    timed_batches: int
    rounds: int
    seed: int
    rl_transform: str


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
        rl_ds = rl.ImageFolder(str(cfg.root), transform=rl_tf)

        def make_rl() -> Any:
            # persistent_workers=False, torch's default, as the torch loader above: a round times
            # batches of one fresh loader's first epoch, and reading the next epoch ahead would
            # spend part of the window on batches the round never takes (the overlap is measured
            # by the native benchmark's (ringloader bench) epoch timeline instead).
            return rl.DataLoader(
                rl_ds, batch_size=cfg.batch_size, shuffle=True, num_workers=cfg.num_workers, drop_last=True,
                persistent_workers=False,
            )

        factories["ringloader"] = make_rl
    return factories


# --------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------


@dataclass
class Measurement:
    images_per_s: float
    seconds: float
    images: int
    stats: Any = None
    verdict: dict[str, Any] | None = None  # judge() over the timed batches (ringloader's native path)


def _close(obj: Any) -> None:
    for name in ("close", "shutdown", "_shutdown_workers"):
        fn = getattr(obj, name, None)
        if callable(fn):
            try:
                fn()
            except Exception:
                pass
            return


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if hasattr(obj, "item") and callable(obj.item):
        try:
            return obj.item()
        except Exception:
            pass
    if hasattr(obj, "_asdict"):
        return _jsonable(obj._asdict())
    if hasattr(obj, "__dict__"):
        return _jsonable({k: v for k, v in vars(obj).items() if not k.startswith("_")})
    return repr(obj)


def measure_once(make_loader: Callable[[], Any], cfg: Config, crop: int = CROP,
                 uint8: bool = False) -> Measurement:
    """Iterate a fresh loader: warm-up batches untimed, then ``cfg.timed_batches`` timed.

    If the timed batches run past the end of an epoch a new epoch is started
    (its start-up cost is then part of the measurement, as in training). A loader with a
    native ``stats()`` is asked for it before and after the timed batches: the difference
    gives the verdict (:func:`judge`) on the timed window alone.
    """
    import torch

    loader = make_loader()
    it = iter(loader)
    expected = (cfg.batch_size, 3, crop, crop)
    label_acc = torch.zeros((), dtype=torch.int64)

    def next_batch() -> tuple[Any, Any]:
        nonlocal it
        try:
            batch = next(it)
        except StopIteration:
            _close(it)
            it = iter(loader)
            batch = next(it)
        images, labels = batch
        if tuple(images.shape) != expected or labels.shape[0] != cfg.batch_size:
            raise RuntimeError(f"unexpected batch: images {tuple(images.shape)}, labels {tuple(labels.shape)}")
        return images, labels

    try:
        images, labels = next_batch()
        if images.dtype != (torch.uint8 if uint8 else torch.float32) or labels.dtype != torch.int64:
            raise RuntimeError(f"unexpected dtypes: images {images.dtype}, labels {labels.dtype}")
        for _ in range(cfg.warmup_batches - 1):
            next_batch()
        del images, labels
        stats_fn = getattr(loader, "stats", None)
        before = _jsonable(stats_fn()) if callable(stats_fn) else None
        t0 = time.perf_counter()
        for _ in range(cfg.timed_batches):
            _, labels = next_batch()
            label_acc += labels.sum()
        elapsed = time.perf_counter() - t0
        stats = _jsonable(stats_fn()) if callable(stats_fn) else None
    finally:
        _close(it)
        _close(loader)
    n = cfg.timed_batches * cfg.batch_size
    if int(label_acc) < 0:  # keeps the accumulation observable
        raise RuntimeError("negative labels")
    verdict = (judge(before, stats, elapsed, cfg.timed_batches)
               if isinstance(stats, dict) and isinstance(before, dict) and stats.get("native") else None)
    return Measurement(images_per_s=n / elapsed, seconds=elapsed, images=n, stats=stats, verdict=verdict)


_STAGE_COUNTERS = ("read_seconds", "decode_seconds", "wait_seconds", "errors", "batches_completed")


def judge(before: dict[str, Any], after: dict[str, Any], seconds: float,
          batches: int | None = None) -> dict[str, Any]:
    """Which stage of ringloader's native pipeline limited it over a window of ``seconds``
    between two ``DataLoader.stats()`` snapshots, in which the consumer took ``batches``
    batches (default: the batches the pipeline completed in the window).

    The native benchmark's rule (``ringloader bench``; bench/README.md, "Verdict"), applied by
    the native core (``_C.judge_loader``, csrc/pipeline/verdict.h): failed batches at least as
    many as delivered ones make it *error-bound*; a consumer (the training loop, here the
    timing loop) that waited for batches less than 10% of the window makes it *consumer-bound*
    (the loader kept ahead); otherwise the busier of the decode threads and the reader threads
    (busy seconds / (window x threads)) decides between *decode-bound* and *I/O-bound*. Busy
    shares are per configured thread and epoch, so they can pass 100% while the next epoch is
    read ahead beside the current one (or over a short window: a sample's work counts when it
    completes); they are wall-clock, so on a loaded machine they include time a thread was
    runnable but not running.

    Returns:
        ``bottleneck`` (``io``, ``decode``, ``consumer`` or ``errors``), ``label``
        (``I/O-bound``...), ``evidence`` (the numbers behind it, one sentence) and those
        numbers: ``seconds``, ``consumer_wait_fraction``, ``decode_busy``, ``read_busy``
        (shares), ``decode_threads``, ``reader_threads``, ``errors``, ``batches``.
    """
    from .. import _C  # only ringloader's native path has stats to judge

    d = {k: float(after.get(k) or 0) - float(before.get(k) or 0) for k in _STAGE_COUNTERS}
    decode_threads = int(after.get("decode_threads") or 0)
    reader_threads = int(after.get("reader_threads") or 0)
    errors = int(d["errors"])
    batches = int(d["batches_completed"]) if batches is None else batches
    v = _C.judge_loader(
        seconds=seconds, read_busy=d["read_seconds"], decode_busy=d["decode_seconds"],
        reader_threads=reader_threads, decode_threads=decode_threads, consumer_wait=d["wait_seconds"],
        next_epoch_beside=int(after.get("epochs_queued") or 0) > 0, errors=errors, batches=batches,
        last_error=str(after.get("last_error") or "no message"), hardware_threads=os.cpu_count() or 0,
        knobs="prefetch_factor, io_depth, num_workers or reader_threads")
    return {"bottleneck": v["bottleneck"], "label": v["label"], "evidence": v["evidence"], "seconds": seconds,
            "consumer_wait_fraction": v["consumer_wait_fraction"], "decode_busy": v["decode_busy"],
            "read_busy": v["read_busy"], "decode_threads": decode_threads, "reader_threads": reader_threads,
            "errors": errors, "batches": batches}


@dataclass
class Result:
    transform: str
    loader: str
    runs: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    stats: Any = None
    verdict: dict[str, Any] | None = None  # the last round's (ringloader's native path only)
    error: str | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.runs) if self.runs else float("nan")


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


def _seed_everything(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(cfg: Config) -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(),
    }
    for mod in ("torch", "torchvision", "PIL", "numpy"):
        try:
            info[mod] = importlib.import_module(mod).__version__
        except Exception:
            info[mod] = None
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
    except Exception:
        pass
    try:
        from PIL import features

        info["pillow_libjpeg_turbo"] = features.version("libjpeg_turbo")
    except Exception:
        info["pillow_libjpeg_turbo"] = None
    if "ringloader" in cfg.loaders:
        try:
            import ringloader

            info["ringloader"] = getattr(ringloader, "__version__", "unknown")
        except ImportError:
            info["ringloader"] = None
    return info


def dataset_info(root: Path) -> dict[str, Any]:
    from ..datasets import IMG_EXTENSIONS  # the native folder scan's list, as ImageFolder keeps

    n, total, classes = 0, 0, 0
    for cls in sorted(os.scandir(root), key=lambda e: e.name):
        if not cls.is_dir():
            continue
        classes += 1
        for dirpath, _, files in os.walk(cls.path):
            for fname in files:
                if fname.lower().endswith(IMG_EXTENSIONS):
                    n += 1
                    total += os.path.getsize(os.path.join(dirpath, fname))
    return {"root": str(root), "images": n, "classes": classes, "bytes": total}


def _warm_page_cache(root: Path, limit_bytes: int = 8 << 30) -> None:
    read = 0
    for dirpath, _, files in os.walk(root):
        for fname in files:
            if read > limit_bytes:
                return
            try:
                with open(os.path.join(dirpath, fname), "rb") as f:
                    while chunk := f.read(1 << 20):
                        read += len(chunk)
            except OSError:
                pass


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


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


# --------------------------------------------------------------------------
# Shards: ImageFolder vs WebDataset shards of the same images, and pipe: at a bandwidth
# --------------------------------------------------------------------------


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

    def loader_of(ds: Any) -> Callable[[], Any]:
        return lambda: rl.DataLoader(ds, batch_size=cfg.batch_size, shuffle=True,
                                     num_workers=cfg.num_workers, drop_last=True,
                                     persistent_workers=False)  # as make_rl: one epoch per round

    factories = {"ImageFolder": loader_of(folder), "WebDataset": loader_of(sharded)}
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


# --------------------------------------------------------------------------
# Remote: the same shards over a throttled loopback link, cached, and through pipe:curl
# --------------------------------------------------------------------------


class _ThrottledFiles:
    """The files of ``root`` over loopback HTTP (GET, single Range, an ETag): every response
    starts after ``latency_s``, and all responses together move at most ``rate`` bytes/s. A
    stand-in for the link to object storage."""

    CHUNK = 256 << 10

    def __init__(self, root: Path, latency_s: float, rate: float):
        import http.server
        import threading

        self.root, self.latency_s, self.rate = Path(root).resolve(), latency_s, rate
        self._lock = threading.Lock()
        self._next = time.monotonic()
        self.bytes_sent = 0
        self.requests: list = []  # (file name, first byte) of each GET, in the order they came
        files = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                files._serve(self)

        class Server(http.server.ThreadingHTTPServer):
            # The default backlog (5) drops some of a burst of connections, which the client
            # then retries after a second: not the link's cost.
            request_queue_size = 128

            def handle_error(self, request: Any, client_address: Any) -> None:
                # A client that stops reading (a pipe:curl stream closed at the epoch's last
                # whole batch) is not a server fault worth a traceback.
                if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _take(self, n: int) -> None:
        """Waits until ``n`` more bytes fit the link's rate (shared by every response)."""
        with self._lock:
            now = time.monotonic()
            self._next = max(self._next, now) + n / self.rate
            wait = self._next - now - n / self.rate
        if wait > 0:
            time.sleep(wait)

    def _serve(self, h: Any) -> None:
        import re

        path = self.root / h.path.lstrip("/").split("?")[0]
        time.sleep(self.latency_s)
        if not path.is_file() or self.root not in path.resolve().parents:
            h.send_response(404)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        st = path.stat()
        size, start, end = st.st_size, 0, st.st_size
        etag = f'"{st.st_mtime_ns:x}-{size:x}"'
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", h.headers.get("Range", ""))
        if m and h.headers.get("If-Range", etag) == etag and int(m.group(1)) < size:
            start = int(m.group(1))
            end = min(size, int(m.group(2)) + 1) if m.group(2) else size
            h.send_response(206)
            h.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        else:
            h.send_response(200)
        with self._lock:
            self.requests.append((path.name, start))
        h.send_header("Content-Length", str(end - start))
        h.send_header("ETag", etag)
        h.send_header("Accept-Ranges", "bytes")
        h.end_headers()
        with open(path, "rb") as f:
            f.seek(start)
            at = start
            while at < end:
                data = f.read(min(self.CHUNK, end - at))
                self._take(len(data))
                h.wfile.write(data)
                at += len(data)
                with self._lock:
                    self.bytes_sent += len(data)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _LinkProcess:
    """A _ThrottledFiles in a child process, so that serving the link costs the benchmark's
    process no CPU (its epochs' CPU seconds are the loader's own)."""

    def __init__(self, root: Path, latency_s: float, rate: float):
        import subprocess

        self.proc = subprocess.Popen(
            [sys.executable, "-c",
             "import sys, time\nfrom ringloader.bench import _ThrottledFiles\n"
             "f = _ThrottledFiles(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))\n"
             "print(f.url, flush=True)\nsys.stdin.read()\n",
             str(root), repr(latency_s), repr(rate)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.url = self.proc.stdout.readline().strip()
        if not self.url:
            self.proc.wait()
            raise BenchError("the benchmark's link server did not start")

    def stop(self) -> None:
        self.proc.stdin.close()  # it exits at the end of its input
        try:
            self.proc.wait(timeout=5)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def _cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of its children that have ended (the
    ``curl`` of ``pipe:`` URLs, DataLoader worker processes)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run_remote_benchmark(cfg: Config, args: argparse.Namespace,
                         log: Callable[[str], None]) -> dict[str, Any]:
    """WebDataset shards (packed from ``--root`` once) served over a loopback link of
    ``--link-latency-ms`` per request and ``--link-rate`` MB/s: epoch 1 of ``http://`` shards (the
    download into an empty cache included) against the link's rate, with the download first and
    then as the DataLoader does it (overlapping the decoding), epoch 2 (from the cache)
    against the local shards, two epochs through a ``cache_limit`` of half the shards' bytes
    (each epoch downloads them again), and the peers over the same link, two epochs each
    (neither keeps a copy, so both epochs pay the link): ``pipe:curl`` streams of the same URLs,
    and the ``webdataset`` package's own reader under torch's DataLoader (``--num-workers``
    worker processes, torchvision's transforms). Train transform, shard order (no shuffle:
    every run reads the same bytes). Each run's CPU seconds are kept too (``cpu_seconds``: this
    process and its ended children; the link is served by a child process of its own)."""
    import shutil
    import tempfile

    rl = _import_ringloader()
    pack = importlib.import_module("ringloader.pack")
    T = importlib.import_module("ringloader.transforms")
    transform = make_transform(T, "train")
    with tempfile.TemporaryDirectory(prefix="ringloader-remote-") as tmp:
        work = Path(args.shards_dir) if args.shards_dir else Path(tmp) / "shards"
        if not list(work.glob("shard-*.tar")):
            log(f"packing {cfg.root} into {work} ...")
            pack.pack(str(cfg.root), str(work), pack.parse_size(args.shard_size))
        names = sorted(p.name for p in work.glob("shard-*.tar"))
        total = sum((work / n).stat().st_size for n in names)
        _warm_page_cache(work)
        link = _LinkProcess(work, args.link_latency_ms / 1e3, args.link_rate * 1e6)
        cache = Path(tmp) / "cache"
        cpu: dict[str, Any] = {}  # CPU seconds per run, as the report's keys
        urls = [f"{link.url}/{n}" for n in names]

        def epoch(ds: Any) -> tuple:
            # One epoch per loader: persistent_workers=False, else the loader would spend the
            # timed epoch's CPU reading ahead a next epoch that nobody takes (a source whose
            # shards exceed its cache, and pipe: streams, read none ahead: they would look faster).
            loader = rl.DataLoader(ds, batch_size=cfg.batch_size, shuffle=False,
                                   num_workers=cfg.num_workers, drop_last=True,
                                   persistent_workers=False)
            t0, c0 = time.perf_counter(), _cpu_seconds()
            images = sum(int(labels.shape[0]) for _, labels in loader)
            cpu["last"] = _cpu_seconds() - c0
            return images, time.perf_counter() - t0

        try:
            log(f"epoch 1: {len(names)} shards ({total / 1e6:.1f} MB) over a {args.link_rate:g} MB/s, "
                f"{args.link_latency_ms:g} ms link into an empty cache ...")
            t0, c0 = time.perf_counter(), _cpu_seconds()
            remote = rl.WebDataset(urls, transform=transform, cache_dir=str(cache), index_cache=None)
            # Built from the packed shards' sidecars: the shards themselves come at the epoch's
            # start, here, so that the download is timed apart from the decoding.
            remote.check_shards()
            fetch_s, fetch_cpu = time.perf_counter() - t0, _cpu_seconds() - c0
            images, first_s = epoch(remote)
            cpu["epoch1_seconds"] = fetch_cpu + cpu["last"]
            log("epoch 1 again into another empty cache, the download overlapping the decoding ...")
            t0, c0 = time.perf_counter(), _cpu_seconds()
            overlapped = rl.WebDataset(urls, transform=transform, cache_dir=str(cache) + "-overlap",
                                       index_cache=None)
            build_s, build_cpu = time.perf_counter() - t0, _cpu_seconds() - c0
            _, overlapped_s = epoch(overlapped)
            cpu["epoch1_overlapped_seconds"] = build_cpu + cpu["last"]
            overlapped.close_downloads()
            log("epoch 2: from the cache ...")
            _, second_s = epoch(remote)
            cpu["epoch2_seconds"] = cpu["last"]
            local = rl.WebDataset([str(work / n) for n in names], transform=transform,
                                  index_cache=None)
            log("local shards ...")
            _, local_s = epoch(local)
            cpu["local_seconds"] = cpu["last"]
            report: dict[str, Any] = {
                "shards": len(names), "shard_bytes": total, "images": images,
                "link_mb_per_s": args.link_rate, "link_latency_ms": args.link_latency_ms,
                "fetch_seconds": fetch_s, "fetch_mb_per_s": total / fetch_s / 1e6,
                "epoch1_seconds": fetch_s + first_s, "epoch2_seconds": second_s,
                "epoch1_overlapped_seconds": build_s + overlapped_s,
                "local_seconds": local_s, "link_floor_seconds": total / (args.link_rate * 1e6),
            }
            log("http:// through a cache of half the shards' bytes, two epochs ...")
            index = Path(tmp) / "small-index"
            rl.WebDataset(urls, cache_dir=str(cache), index_cache=str(index))  # kept indexes
            small = rl.WebDataset(urls, transform=transform, cache_dir=str(cache) + "-small",
                                  cache_limit=total // 2, index_cache=str(index))
            report["small_cache_seconds"], cpu["small_cache_seconds"] = [], []
            for _ in range(2):
                report["small_cache_seconds"].append(epoch(small)[1])
                cpu["small_cache_seconds"].append(cpu["last"])
            small.close_downloads()
            log("a Subset of every 10th sample into an empty cache, range_reads_below='auto' "
                "and 0 (whole shards) ...")
            for key, below in (("subset_auto", "auto"), ("subset_whole", 0)):
                sparse = rl.WebDataset(urls, transform=transform, cache_dir=f"{cache}-{key}",
                                       index_cache=str(index),
                                       remote_options={"range_reads_below": below})
                report[key] = _subset_epoch(rl, sparse, cfg, 10)
                sparse.close_downloads()
            if shutil.which("curl"):
                log("pipe:curl, two epochs ...")
                index = Path(tmp) / "pipe-index"
                wdsmod = importlib.import_module("ringloader.webdataset")
                piped_urls = [f"pipe:curl -s -f {u}" for u in urls]
                for url, n in zip(piped_urls, names):
                    wdsmod.cache_index_as(url, str(work / n), str(index))
                piped = rl.WebDataset(piped_urls, transform=transform, index_cache=str(index))
                report["pipe_curl_seconds"], cpu["pipe_curl_seconds"] = [], []
                for _ in range(2):
                    report["pipe_curl_seconds"].append(epoch(piped)[1])
                    cpu["pipe_curl_seconds"].append(cpu["last"])
            if importlib.util.find_spec("webdataset") is not None:
                log("the webdataset package over the same URLs, two epochs ...")
                report["webdataset_seconds"], cpu["webdataset_seconds"] = [], []
                for _ in range(2):
                    c0 = _cpu_seconds()
                    report["webdataset_seconds"].append(_webdataset_package_epoch(urls, cfg))
                    cpu["webdataset_seconds"].append(_cpu_seconds() - c0)
            cpu.pop("last", None)
            report["cpu_seconds"] = cpu
        finally:
            link.stop()
    return report


def _subset_epoch(rl: Any, ds: Any, cfg: Config, every: int) -> dict[str, Any]:
    """One epoch of every ``every``-th sample of ``ds`` (a ``Subset``: a few members of each
    shard), its remote shards not in the cache: the seconds to its first batch and to its end,
    and how many shards it read by range (the others it downloaded whole)."""
    torch_data = importlib.import_module("torch.utils.data")
    loader = rl.DataLoader(torch_data.Subset(ds, range(0, len(ds), every)),
                           batch_size=cfg.batch_size, num_workers=cfg.num_workers,
                           persistent_workers=False)
    before = loader.stats()["range_requests"]
    t0 = time.perf_counter()
    it = iter(loader)
    images = int(next(it)[1].shape[0])
    first_s = time.perf_counter() - t0
    images += sum(int(labels.shape[0]) for _, labels in it)
    seconds = time.perf_counter() - t0
    return {"images": images, "first_batch_seconds": first_s, "seconds": seconds,
            "ranged_shards": len(ds._redirects),
            "range_requests": loader.stats()["range_requests"] - before}


def _webdataset_package_epoch(urls: Sequence[str], cfg: Config) -> float:
    """Seconds of one epoch of the ``webdataset`` package's own reader over ``urls`` (it streams
    each shard through its http GET, every epoch), the same train pipeline in torchvision's
    transforms, under torch's DataLoader with ``--num-workers`` processes: the peer a user of
    object-storage shards would otherwise reach for."""
    torch, torchvision = _import_torch()
    wds = importlib.import_module("webdataset")
    transform = make_transform(torchvision.transforms, "train")
    # Shards split over the workers (the package's default with a DataLoader), batched in them.
    ds = (wds.WebDataset(list(urls), shardshuffle=False, empty_check=False)
          .decode("pil").to_tuple("jpg;jpeg;png", "cls").map_tuple(transform, int)
          .batched(cfg.batch_size, partial=False))
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=cfg.num_workers)
    t0 = time.perf_counter()
    for _images, labels in loader:
        int(labels.shape[0])
    return time.perf_counter() - t0


def format_remote_report(cfg: Config, machine: dict[str, Any], data: dict[str, Any],
                         report: dict[str, Any]) -> str:
    """Every epoch as seconds, img/s, and its ratio to the link's floor (the seconds the shards'
    bytes need at the link's rate: 1.0 moves them as fast as the link allows) and to the local
    shards' epoch (1.0 reads like a local disk), then its CPU seconds and their ratio to the
    local epoch's."""
    n = report["images"]
    link, local = report["link_floor_seconds"], report["local_seconds"]
    cpu = report.get("cpu_seconds", {})

    def line(name: str, seconds: float, note: str = "", key: str = "", e: int = -1) -> str:
        used = cpu.get(key)
        if isinstance(used, list):
            used = used[e] if e < len(used) else None
        if used is not None and cpu.get("local_seconds"):
            note += f"; {used:.2f} CPU-s ({used / cpu['local_seconds']:.2f}x local)"
        return (f"  {name:31s}: {seconds:6.2f} s, {n / seconds:4.0f} img/s, {link / seconds:.2f}x "
                f"the link, {local / seconds:.2f}x local{note}")

    lines = [
        f"ringloader remote benchmark: {report['images']} images, {report['shards']} shards "
        f"({report['shard_bytes'] / 1e6:.1f} MB) over a loopback link of {report['link_mb_per_s']:g} "
        f"MB/s and {report['link_latency_ms']:g} ms per request (the link alone needs "
        f"{link:.2f} s), train transform, batch {cfg.batch_size}, {cfg.num_workers} threads "
        f"(workers for the webdataset package)",
        line("local shards", local, key="local_seconds"),
        line("http://, epoch 1, fetch first", report["epoch1_seconds"],
             f" (download {report['fetch_seconds']:.2f} s = {report['fetch_mb_per_s']:.1f} MB/s)",
             key="epoch1_seconds"),
        line("http://, epoch 1, overlapping", report["epoch1_overlapped_seconds"],
             key="epoch1_overlapped_seconds"),
        line("http://, epoch 2 (cache)", report["epoch2_seconds"], key="epoch2_seconds"),
    ]
    for key, name in (("small_cache_seconds", "http://, cache of half"),
                      ("pipe_curl_seconds", "pipe:curl"), ("webdataset_seconds", "webdataset pkg")):
        for e, seconds in enumerate(report.get(key, [])):
            lines.append(line(f"{name}, epoch {e + 1}", seconds, key=key, e=e))
    for key, name in (("subset_auto", "auto"), ("subset_whole", "0 (whole)")):
        sub = report.get(key)
        if sub is not None:
            lines.append(f"  {'http://, Subset 1/10, ' + name:31s}: {sub['seconds']:6.2f} s, first batch "
                         f"{sub['first_batch_seconds']:.2f} s, {sub['images']} images, "
                         f"{sub['ranged_shards']} of {report['shards']} shards by range "
                         f"({sub['range_requests']} requests)")
    lines.append(f"  machine: {machine.get('cpu', '?')}")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# A user's own Dataset: ImageFile references natively vs PIL under torch's DataLoader
# --------------------------------------------------------------------------


def _dino_views(T: Any) -> list:
    """DINO's crops (geometry and normalisation): 2 global at 224, 6 local at 96."""
    norm = [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    big = T.Compose([T.RandomResizedCrop(224, scale=(0.4, 1.0)), T.RandomHorizontalFlip()] + norm)
    small = T.Compose([T.RandomResizedCrop(96, scale=(0.05, 0.4)), T.RandomHorizontalFlip()] + norm)
    return [big] * 2 + [small] * 6


def _dino_recipe_views(T: Any, local_crops: int = 10) -> list:
    """DINO's whole augmentation (DataAugmentationDINO, main_dino.py; iBOT's is the same) in
    torchvision's classes: flip, RandomApply([ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
    RandomGrayscale(0.2), GaussianBlur(23, (0.1, 2.0)) with p 1.0 / 0.1 / 0.5, RandomSolarize(128,
    p=0.2) on the second global crop; 2 global crops at 224, ``local_crops`` at 96, bicubic."""
    bicubic = T.InterpolationMode.BICUBIC
    flip_and_jitter = [T.RandomHorizontalFlip(p=0.5),
                       T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
                       T.RandomGrayscale(p=0.2)]
    norm = [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]

    def blur(p: float) -> Any:
        return T.RandomApply([T.GaussianBlur(23, sigma=(0.1, 2.0))], p=p)

    big = [T.RandomResizedCrop(224, scale=(0.4, 1.0), interpolation=bicubic)] + flip_and_jitter
    small = [T.RandomResizedCrop(96, scale=(0.05, 0.4), interpolation=bicubic)] + flip_and_jitter
    return ([T.Compose(big + [blur(1.0)] + norm),
             T.Compose(big + [blur(0.1), T.RandomSolarize(128, p=0.2)] + norm)]
            + [T.Compose(small + [blur(0.5)] + norm)] * local_crops)


class RowsDataset:
    """What a user writes over a CSV of (path, label) rows: ``__getitem__`` opens the image with
    PIL and applies each transform (``lazy=False``), or returns ringloader ImageFile references
    to the same file with the same transforms (``lazy=True``). One transform gives
    ``(image, label)``; several give ``(list of views, label)``."""

    def __init__(self, rows: list, transforms: list, lazy: bool):
        self.rows, self.transforms, self.lazy = rows, transforms, lazy

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Any:
        path, label = self.rows[i]
        if self.lazy:
            rl = _import_ringloader()
            views = [rl.ImageFile(path, t) for t in self.transforms]
        else:
            from PIL import Image

            with open(path, "rb") as f:
                image = Image.open(f).convert("RGB")
            views = [t(image) for t in self.transforms]
        return (views[0] if len(views) == 1 else views), label


class SegmentationRows:
    """A segmentation Dataset: each image and its label image (a palette PNG), opened with PIL
    (``lazy=False``) or as references (``lazy=True``, the mask with ``mode="mask"``); fixed
    geometry (random crops of two references would not line up), the mask resized nearest."""

    def __init__(self, rows: list, masks: list, lazy: bool):
        T = _import_torch()[1].transforms
        nearest = T.InterpolationMode.NEAREST
        self.rows, self.masks, self.lazy = rows, masks, lazy
        self.image_t = make_transform(T, "eval")
        self.mask_t = T.Compose([T.Resize(256, interpolation=nearest), T.CenterCrop(CROP),
                                 T.PILToTensor()])

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Any:
        path, mask = self.rows[i][0], self.masks[i]
        if self.lazy:
            rl = _import_ringloader()
            return rl.ImageFile(path, self.image_t), rl.ImageFile(mask, self.mask_t, mode="mask")
        from PIL import Image

        with open(path, "rb") as f:
            image = Image.open(f).convert("RGB")
        with open(mask, "rb") as f:
            labels = Image.open(f)
            labels.load()
        return self.image_t(image), self.mask_t(labels)


def _write_masks(rows: list, work: Path) -> list:
    """A palette PNG label image the size of each image: a few class blocks on background."""
    import numpy as np
    from PIL import Image

    palette = [0, 0, 0] + [(37 * k) % 256 for k in range(3, 3 * 21)]
    masks = []
    for i, (path, _) in enumerate(rows):
        with Image.open(path) as im:
            w, h = im.size
        labels = np.zeros((h, w), np.uint8)
        for k in range(4):
            y, x = (i * 7 + k * 31) % max(h // 2, 1), (i * 13 + k * 17) % max(w // 2, 1)
            labels[y:y + h // 3, x:x + w // 3] = 1 + (i + k) % 20
        mask = Image.fromarray(labels, "P")
        mask.putpalette(palette)
        masks.append(work / f"{i}.png")
        mask.save(masks[-1])
    return masks


def _alternating_rounds(factories: dict[str, Callable[[], Any]], cfg: Config, kind: str,
                        log: Callable[[str], None]) -> tuple[dict[str, Result], Any]:
    """Each loader in turn (the order alternating by round), ``cfg.timed_batches`` timed after
    the warm-up; a batch is a tuple or a dict with a "label" entry. Returns the results and the
    ringloader loader's (decodes, views rendered)."""
    results = {name: Result(kind, name) for name in factories}
    decodes = None
    for r in range(cfg.rounds):
        for name in (list(factories) if r % 2 == 0 else list(reversed(list(factories)))):
            _seed_everything(cfg.seed + r)
            loader = factories[name]()
            it = iter(loader)
            for _ in range(cfg.warmup_batches):
                next(it)
            t0 = time.perf_counter()
            samples = 0
            for _ in range(cfg.timed_batches):
                try:
                    batch = next(it)
                except StopIteration:
                    it = iter(loader)
                    batch = next(it)
                labels = batch["label"] if isinstance(batch, dict) else batch[1]
                samples += len(labels)  # a tensor, or detection's tuple of targets
            elapsed = time.perf_counter() - t0
            if name.startswith("ringloader"):
                s = loader.stats()
                decodes = (s["decodes"], s["views_rendered"])
            del it, loader
            gc.collect()
            results[name].runs.append(samples / elapsed)
            results[name].seconds.append(elapsed)
            log(f"  round {r + 1}/{cfg.rounds} {name}: {samples / elapsed:.0f} samples/s")
    return results, decodes


def run_arrow_benchmark(cfg: Config, kind: str, log: Callable[[str], None]) -> dict[str, Any]:
    """``hf``: the images saved as a Hugging Face dataset (``save_to_disk``, an Image feature),
    ``rl.HFDataset`` vs ``with_transform`` under torch's DataLoader. ``parquet``: the same images
    in Parquet files of row groups, ``rl.Parquet`` vs ``rl.ImageFolder``. Train transform,
    shuffled, ``cfg.num_workers`` workers each, alternating rounds (medians)."""
    import tempfile

    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch.utils.data as tud

    torch, torchvision = _import_torch()
    rl = _import_ringloader()
    folder = rl.ImageFolder(str(cfg.root))
    rows = list(folder.samples)
    train = make_transform(torchvision.transforms, "train")
    work = Path(tempfile.mkdtemp(prefix=f"ringloader-bench-{kind}-"))
    try:
        log(f"writing the {len(rows)} images as {kind} under {work} ...")
        images = [{"bytes": Path(p).read_bytes(), "path": None} for p, _ in rows]
        labels = [int(c) for _, c in rows]
        if kind == "hf":
            datasets.Dataset.from_dict({"image": images, "label": labels}).cast_column(
                "image", datasets.Image()).save_to_disk(str(work / "saved"))
            hf = datasets.load_from_disk(str(work / "saved"))

            def decode(batch: dict) -> dict:
                return {"image": [train(im.convert("RGB")) for im in batch["image"]],
                        "label": batch["label"]}

            native = rl.HFDataset(hf, transform=train)
            baseline = ("torch", lambda: tud.DataLoader(
                hf.with_transform(decode), batch_size=cfg.batch_size, shuffle=True,
                num_workers=cfg.num_workers, drop_last=True))
            # The same files natively: rl.HFDataset's rate is to be read against it (the ratio
            # to torch is bounded by the native decode rate, not by the Arrow path).
            image_folder = rl.ImageFolder(str(cfg.root), transform=train)
            reference = ("ringloader ImageFolder", lambda: rl.DataLoader(
                image_folder, batch_size=cfg.batch_size, shuffle=True,
                num_workers=cfg.num_workers, drop_last=True, persistent_workers=False))
        else:
            table = pa.table({"image": images, "label": labels})
            for k in range(4):
                lo, hi = k * len(rows) // 4, (k + 1) * len(rows) // 4
                pq.write_table(table.slice(lo, hi - lo),
                               work / f"part-{k}.parquet", row_group_size=256)
            t0 = time.perf_counter()
            native = rl.Parquet(str(work / "*.parquet"), transform=train,
                                cache_dir=work / "arrow")
            convert_s = time.perf_counter() - t0  # the first pass: every row group into the copy
            t0 = time.perf_counter()
            on_demand = rl.Parquet(str(work / "*.parquet"), transform=train, copy=False)
            on_demand_s = time.perf_counter() - t0  # the label column only
            parquet_mb = sum(f.stat().st_size for f in work.glob("*.parquet")) / 1e6
            image_folder = rl.ImageFolder(str(cfg.root), transform=train)
            baseline = ("ringloader ImageFolder", lambda: rl.DataLoader(
                image_folder, batch_size=cfg.batch_size, shuffle=True,
                num_workers=cfg.num_workers, drop_last=True, persistent_workers=False))
        del images
        t0 = time.perf_counter()
        probe = rl.DataLoader(native, batch_size=cfg.batch_size, num_workers=cfg.num_workers)
        build_s = time.perf_counter() - t0
        if not probe.native:
            raise BenchError(f"rl.{type(native).__name__} did not run natively: {probe.describe()}")
        del probe
        factories = {baseline[0]: baseline[1]}
        if kind == "hf":
            factories[reference[0]] = reference[1]
        if kind == "parquet":
            # Row groups read on demand (the row groups permuted and a shuffle buffer), before
            # the copy (globally shuffled, torch's order), which the report ends with.
            factories["ringloader Parquet copy=False"] = lambda: rl.DataLoader(
                on_demand, batch_size=cfg.batch_size, shuffle=True, num_workers=cfg.num_workers,
                drop_last=True, persistent_workers=False)
        factories.update({f"ringloader {type(native).__name__}": lambda: rl.DataLoader(
                         native, batch_size=cfg.batch_size, shuffle=True,
                         num_workers=cfg.num_workers, drop_last=True, persistent_workers=False)})
        _warm_page_cache(cfg.root)
        results, _ = _alternating_rounds(factories, cfg, kind, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"kind": kind, "build_seconds": build_s,
            **({"convert_seconds": convert_s, "parquet_mb": parquet_mb,
                "on_demand_build_seconds": on_demand_s} if kind == "parquet" else {}),
            "results": {name: {"runs": res.runs, "median_samples_per_s": res.median}
                        for name, res in results.items()}}


def format_arrow_report(cfg: Config, data: dict[str, Any], report: dict[str, Any]) -> str:
    rates = [(k, v["median_samples_per_s"]) for k, v in report["results"].items()]
    (base, b), (mine, m) = rates[0], rates[-1]
    what = ("a Hugging Face dataset (save_to_disk)" if report["kind"] == "hf"
            else "Parquet files (shuffled across row groups)")
    base_what = "torch DataLoader + with_transform" if report["kind"] == "hf" else base
    lines = [
        f"ringloader {report['kind']} benchmark: {data['images']} images as {what}, train "
        f"transform, batch {cfg.batch_size}, {cfg.num_workers} workers each, median of "
        f"{cfg.rounds} rounds",
        f"  {base_what:34s}: {b:8.0f} samples/s"]
    # hf: the same files as a ringloader ImageFolder, the native rate the HFDataset can reach.
    lines += [f"  {name:34s}: {r:8.0f} samples/s ({r / b:.2f}x)" for name, r in rates[1:-1]]
    lines += [f"  {mine:34s}: {m:8.0f} samples/s ({m / b:.2f}x)",
              "  building the loader (the table's columns, no object a row): "
              f"{report['build_seconds']:.2f} s"]
    if "convert_seconds" in report:
        lines.append(f"  first rl.Parquet (its Arrow copy of {report['parquet_mb']:.1f} MB of "
                     f"Parquet): {report['convert_seconds']:.2f} s; rl.Parquet(copy=False) (the "
                     f"label column only): {report['on_demand_build_seconds']:.2f} s")
    return "\n".join(lines)


def _eager_vs_lazy(cfg: Config, eager: Any, lazy: Any, kind: str, what: str,
                   log: Callable[[str], None], collate_fn: Any = None,
                   reference: Any = None) -> dict[str, Any]:
    """Times the same Dataset class decoding with PIL under torch's DataLoader (``eager``)
    against returning references under ringloader's (``lazy``), in alternating rounds, after
    checking that ``lazy`` runs natively (``what`` names it in the error). ``reference``, a
    (name, factory) pair, joins the rounds between them. Returns the report's common fields."""
    import torch.utils.data as tud

    rl = _import_ringloader()
    extra = {} if collate_fn is None else {"collate_fn": collate_fn}
    t0 = time.perf_counter()
    probe = rl.DataLoader(lazy, batch_size=cfg.batch_size, num_workers=cfg.num_workers, **extra)
    build_s = time.perf_counter() - t0
    if not probe.native:
        raise BenchError(f"{what} did not run natively: {probe.describe()}")
    del probe
    factories = {
        "torch": lambda: tud.DataLoader(eager, batch_size=cfg.batch_size, shuffle=True,
                                        num_workers=cfg.num_workers, drop_last=True, **extra),
        **dict([reference] if reference else []),
        "ringloader": lambda: rl.DataLoader(lazy, batch_size=cfg.batch_size, shuffle=True,
                                            num_workers=cfg.num_workers, drop_last=True,
                                            persistent_workers=False, **extra),
    }
    _warm_page_cache(cfg.root)
    results, decodes = _alternating_rounds(factories, cfg, kind, log)
    return {"kind": kind, "build_seconds": build_s, "ringloader_decodes_views": decodes,
            "results": {name: {"runs": res.runs, "median_samples_per_s": res.median}
                        for name, res in results.items()}}


def run_custom_benchmark(cfg: Config, kind: str, log: Callable[[str], None]) -> dict[str, Any]:
    """The same user Dataset class, decoding with PIL under torch's DataLoader and returning
    ImageFile references under ringloader's, ``cfg.num_workers`` workers each, torchvision's
    transforms in both, alternating rounds (medians)."""
    import tempfile

    torch, torchvision = _import_torch()
    rl = _import_ringloader()
    rows = list(rl.ImageFolder(str(cfg.root)).samples)
    T = torchvision.transforms
    if kind == "segmentation":
        work = Path(tempfile.mkdtemp(prefix="ringloader-bench-masks-"))
        log(f"writing a label image for each of the {len(rows)} images under {work} ...")
        masks = _write_masks(rows, work)
        transforms = [None, None]
        eager, lazy = SegmentationRows(rows, masks, False), SegmentationRows(rows, masks, True)
    else:
        transforms = ([make_transform(T, "train")] if kind == "custom"
                      else _dino_recipe_views(T) if kind == "dino" else _dino_views(T))
        eager = RowsDataset(rows, transforms, lazy=False)
        lazy = RowsDataset(rows, transforms, lazy=True)
    reference = None
    if kind == "custom":
        # The same files as a ringloader ImageFolder: the native rate the references can reach
        # (the ratio to torch is the decode's, not the Dataset path's).
        image_folder = rl.ImageFolder(str(cfg.root), transform=transforms[0])
        reference = ("ringloader ImageFolder", lambda: rl.DataLoader(
            image_folder, batch_size=cfg.batch_size, shuffle=True, num_workers=cfg.num_workers,
            drop_last=True, persistent_workers=False))
    try:
        report = _eager_vs_lazy(cfg, eager, lazy, kind, "the ImageFile Dataset", log,
                                reference=reference)
    finally:
        if kind == "segmentation":
            shutil.rmtree(work, ignore_errors=True)
    return {**report, "views": len(transforms)}


def format_custom_report(cfg: Config, machine: dict[str, Any], data: dict[str, Any], kind: str,
                         report: dict[str, Any]) -> str:
    res = report["results"]
    torch_s, rl_s = res["torch"]["median_samples_per_s"], res["ringloader"]["median_samples_per_s"]
    what = {"custom": "train transform",
            "multicrop": "DINO multi-crop (2 x 224 + 6 x 96 views a sample)",
            "dino": "DINO's whole augmentation (2 x 224 + 10 x 96 views a sample: RandomApply "
                    "colour jitter, grayscale, blur, solarize)",
            "segmentation": "each with its palette-PNG mask (mode='mask'), eval geometry, mask "
                            "nearest"}[kind]
    return "\n".join([
        f"ringloader {kind} benchmark: a user Dataset over {data['images']} images, {what}, "
        f"batch {cfg.batch_size}, {cfg.num_workers} workers each, median of {cfg.rounds} rounds",
        f"  torch DataLoader + PIL    : {torch_s:8.0f} samples/s",
        *[f"  {name:26s}: {r['median_samples_per_s']:8.0f} samples/s "
          f"({r['median_samples_per_s'] / torch_s:.2f}x)"
          for name, r in res.items() if name not in ("torch", "ringloader")],
        f"  ringloader + ImageFile    : {rl_s:8.0f} samples/s ({rl_s / torch_s:.2f}x)",
        f"  __getitem__ for every index when the DataLoader is built: "
        f"{report['build_seconds']:.2f} s",
        f"  machine: {machine.get('cpu', '?')}",
    ])


class BoxesDataset:
    """A detection Dataset over (path, label) rows: three boxes an image (fixed per row, in
    the image's pixels), a v2 transform applied jointly to the image and its target. With
    ``lazy`` the sample is an ``rl.Joint`` over an ImageFile; else the image is opened with PIL
    and the transform applied in Python, as torchvision's detection references do."""

    def __init__(self, rows: list, sizes: list, transform: Any, lazy: bool):
        self.rows, self.sizes, self.transform, self.lazy = rows, sizes, transform, lazy

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Any:
        import torch
        from torchvision import tv_tensors

        path, label = self.rows[i]
        w, h = self.sizes[i]
        boxes = tv_tensors.BoundingBoxes(
            [[0.1 * w, 0.1 * h, 0.5 * w, 0.6 * h], [0.4 * w, 0.3 * h, 0.9 * w, 0.9 * h],
             [0.2 * w, 0.5 * h, 0.35 * w, 0.7 * h]], format="XYXY", canvas_size=(h, w))
        target = {"boxes": boxes, "labels": torch.tensor([label, label + 1, label + 2])}
        if self.lazy:
            return _import_ringloader().Joint(self.transform, (_import_ringloader().ImageFile(path),
                                                               target))
        from PIL import Image

        with open(path, "rb") as f:
            image = Image.open(f).convert("RGB")
        return self.transform(image, target)


class JointSegmentationRows:
    """A segmentation Dataset with random geometry shared by each image and its label image: a
    v2 transform applied to ``{"image", "mask", "label"}``. With ``lazy`` the sample is an
    ``rl.Joint`` over two ImageFiles (the mask with ``mode="mask"``); else the image is opened
    with PIL, the mask as a ``tv_tensors.Mask`` of its stored values, and v2 runs in Python."""

    def __init__(self, rows: list, masks: list, transform: Any, lazy: bool):
        self.rows, self.masks, self.transform, self.lazy = rows, masks, transform, lazy

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Any:
        path, label = self.rows[i]
        if self.lazy:
            rl = _import_ringloader()
            return rl.Joint(self.transform, {"image": rl.ImageFile(path),
                                             "mask": rl.ImageFile(self.masks[i], mode="mask"),
                                             "label": label})
        import numpy as np
        import torch
        from PIL import Image
        from torchvision import tv_tensors

        with open(path, "rb") as f:
            image = Image.open(f).convert("RGB")
        with open(self.masks[i], "rb") as f:
            mask = tv_tensors.Mask(torch.from_numpy(np.array(Image.open(f))))
        return self.transform({"image": image, "mask": mask, "label": label})


def run_joint_segmentation_benchmark(cfg: Config, log: Callable[[str], None]) -> dict[str, Any]:
    """``segmentation-joint``: each image and its palette-PNG mask under one random v2 transform
    (RandomResizedCrop + flip + ToDtype + Normalize), torch's DataLoader (PIL + v2 in Python)
    against ringloader's (rl.Joint: both rendered natively, the mask with the image's draws),
    default collate, ``cfg.num_workers`` workers each, alternating rounds (medians)."""
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    torch, _ = _import_torch()
    transform = v2.Compose([
        v2.RandomResizedCrop(CROP, antialias=True), v2.RandomHorizontalFlip(), v2.ToImage(),
        v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True),
        v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    return _run_masks_under_joint(cfg, log, transform, "segmentation-joint")


def _run_masks_under_joint(cfg: Config, log: Callable[[str], None], transform: Any,
                           name: str) -> dict[str, Any]:
    """Each image of ``cfg.root`` and a palette-PNG mask written for it (in a temporary folder,
    removed after) under the Joint ``transform``: torch's DataLoader against ringloader's."""
    import tempfile

    rl = _import_ringloader()
    rows = list(rl.ImageFolder(str(cfg.root)).samples)
    work = Path(tempfile.mkdtemp(prefix="ringloader-bench-masks-"))
    try:
        log(f"writing a label image for each of the {len(rows)} images under {work} ...")
        masks = _write_masks(rows, work)
        eager = JointSegmentationRows(rows, masks, transform, lazy=False)
        lazy = JointSegmentationRows(rows, masks, transform, lazy=True)
        return _eager_vs_lazy(cfg, eager, lazy, name, "the Joint Dataset", log)
    finally:
        shutil.rmtree(work, ignore_errors=True)


#: torchvision's segmentation reference (VOC/COCO): base_size and crop_size of its train preset.
SEG_BASE, SEG_CROP = 520, 480


def segmentation_reference_preset(base_size: int = SEG_BASE, crop_size: int = SEG_CROP) -> Any:
    """torchvision's segmentation train preset (``references/segmentation/presets.py``,
    use_v2=True, the PIL backend) with its padding as ``v2.RandomCrop(pad_if_needed=True)``
    with fill 0 for the image and 255 for the mask (the reference's own PadIfSmaller is user
    code, which runs on torch's path)."""
    import torch
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    return v2.Compose([
        v2.RandomResize(min_size=int(0.5 * base_size), max_size=int(2.0 * base_size)),
        v2.RandomHorizontalFlip(0.5),
        v2.RandomCrop(crop_size, pad_if_needed=True, fill={tv_tensors.Mask: 255, "others": 0}),
        v2.PILToTensor(),
        v2.ToDtype({torch.Tensor: torch.float32, tv_tensors.Mask: torch.int64, "others": None},
                   scale=True),
        v2.Normalize(mean=IMAGENET_MEAN, std=IMAGENET_STD), v2.ToPureTensor()])


def run_segmentation_reference_benchmark(cfg: Config,
                                         log: Callable[[str], None]) -> dict[str, Any]:
    """``segmentation-reference``: torchvision's segmentation train preset
    (:func:`segmentation_reference_preset`) on each image and its palette-PNG mask, torch's
    DataLoader (PIL + v2 in Python) against ringloader's (rl.Joint), default collate,
    ``cfg.num_workers`` workers each, alternating rounds (medians)."""
    return _run_masks_under_joint(cfg, log, segmentation_reference_preset(),
                                  "segmentation-reference")


def format_segmentation_reference_report(cfg: Config, machine: dict[str, Any],
                                         data: dict[str, Any], report: dict[str, Any]) -> str:
    return _joint_report(
        f"ringloader segmentation-reference benchmark: torchvision's segmentation train preset "
        f"(RandomResize({SEG_BASE // 2}, {SEG_BASE * 2}), flip, RandomCrop({SEG_CROP}) padding "
        f"the mask with 255, PILToTensor, ToDtype, Normalize) over {data['images']} images and "
        f"their palette-PNG masks, batch {cfg.batch_size}, {cfg.num_workers} workers each, "
        f"median of {cfg.rounds} rounds", machine, report)


def format_joint_segmentation_report(cfg: Config, machine: dict[str, Any], data: dict[str, Any],
                                     report: dict[str, Any]) -> str:
    return _joint_report(
        f"ringloader segmentation-joint benchmark: a segmentation Dataset over {data['images']} "
        f"images, each with its palette-PNG mask, v2 RandomResizedCrop({CROP}) + flip on both, "
        f"ToDtype + Normalize on the image, batch {cfg.batch_size}, {cfg.num_workers} workers "
        f"each, median of {cfg.rounds} rounds", machine, report)


def _joint_report(title: str, machine: dict[str, Any], report: dict[str, Any]) -> str:
    """A Joint benchmark's report under ``title``: both rates, the ratio, the build time."""
    res = report["results"]
    torch_s, rl_s = res["torch"]["median_samples_per_s"], res["ringloader"]["median_samples_per_s"]
    return "\n".join([
        title,
        f"  torch DataLoader + PIL + v2 : {torch_s:8.0f} samples/s",
        f"  ringloader + rl.Joint       : {rl_s:8.0f} samples/s ({rl_s / torch_s:.2f}x)",
        f"  __getitem__ for every index when the DataLoader is built: "
        f"{report['build_seconds']:.2f} s",
        f"  machine: {machine.get('cpu', '?')}",
    ])


def detection_hflip_preset() -> Any:
    """torchvision's detection train preset ``hflip`` (``references/detection/presets.py``,
    use_v2=True, the PIL backend): each image keeps its own size."""
    import torch
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    return v2.Compose([
        v2.RandomHorizontalFlip(0.5), v2.ToImage(), v2.ToDtype(torch.float, scale=True),
        v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
        v2.SanitizeBoundingBoxes(), v2.ToPureTensor()])


def run_detection_benchmark(cfg: Config, log: Callable[[str], None],
                            kind: str = "detection") -> dict[str, Any]:
    """The same detection Dataset class under torch's DataLoader (PIL + v2 in Python) and
    ringloader's (rl.Joint: the image native, boxes moved by the recorded geometry), the
    detection collate_fn, ``cfg.num_workers`` workers each, alternating rounds (medians).
    ``detection-hflip``: torchvision's hflip preset (:func:`detection_hflip_preset`), each
    image at its own size (natively a tensor a sample, charged to max_memory)."""
    from PIL import Image
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    torch, _ = _import_torch()
    rl = _import_ringloader()
    rows = list(rl.ImageFolder(str(cfg.root)).samples)
    sizes = []
    for path, _ in rows:
        with Image.open(path) as im:
            sizes.append(im.size)
    transform = detection_hflip_preset() if kind == "detection-hflip" else v2.Compose([
        v2.RandomResizedCrop(CROP, antialias=True), v2.RandomHorizontalFlip(), v2.ToImage(),
        v2.SanitizeBoundingBoxes(),
        v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True),
        v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    eager = BoxesDataset(rows, sizes, transform, lazy=False)
    lazy = BoxesDataset(rows, sizes, transform, lazy=True)

    def collate(batch: list) -> tuple:
        return tuple(zip(*batch))

    return _eager_vs_lazy(cfg, eager, lazy, kind, "the Joint Dataset", log, collate_fn=collate)


def format_detection_report(cfg: Config, machine: dict[str, Any], data: dict[str, Any],
                            report: dict[str, Any]) -> str:
    steps = ("torchvision's hflip train preset (flip, ToImage, ToDtype, ConvertBoundingBoxFormat, "
             "SanitizeBoundingBoxes, ToPureTensor; each image its own size)"
             if report["kind"] == "detection-hflip" else
             f"v2 RandomResizedCrop({CROP}) + flip + SanitizeBoundingBoxes + ToDtype + Normalize")
    return _joint_report(
        f"ringloader {report['kind']} benchmark: a detection Dataset over {data['images']} "
        f"images, 3 boxes each, {steps}, batch {cfg.batch_size}, {cfg.num_workers} workers "
        f"each, median of {cfg.rounds} rounds", machine, report)


# --------------------------------------------------------------------------
# ImageNet-scale folder: construction cost and time to the first batch
# --------------------------------------------------------------------------

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
            code = ("import json, sys; from ringloader import bench; "
                    "print(json.dumps(bench.scale_child(*sys.argv[1:3], int(sys.argv[3]), int(sys.argv[4]))))")
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
    p.add_argument("--transform", choices=("train", "eval", "both", "train-uint8", *RECIPES, "recipes"),
                   default="both",
                   help="train/eval (default: both); train-uint8: the train crop and flip ending in "
                        "PILToTensor (uint8 batches, for normalising on the GPU); or the training "
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
                                          "detection", "detection-hflip"),
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
                         "(each image its own size); "
                         "dino: a user Dataset of DINO's whole augmentation, 2 x 224 + 10 x 96 "
                         "views, ImageFile references vs PIL under torch")
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
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps({"scale": results}, indent=2))
                print(f"results written to {args.json}")
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
    if args.dataset in ("custom", "multicrop", "dino", "hf", "parquet", "segmentation",
                        "segmentation-joint", "segmentation-reference", "detection",
                        "detection-hflip"):
        if args.dataset in ("detection", "detection-hflip"):
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
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"machine": machine, "dataset": data, **report},
                                            indent=2, default=repr))
            print(f"results written to {args.json}")
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
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"machine": machine, "dataset": data, **report},
                                            indent=2, default=repr))
            print(f"results written to {args.json}")
        return 0
    _warm_page_cache(cfg.root)
    log(f"measuring {', '.join(cfg.loaders)} on {cfg.root} ...")
    t0 = time.perf_counter()
    results = run_benchmark(cfg, log)
    total = time.perf_counter() - t0

    print(format_report(cfg, machine, data, results, verbose=args.verbose))
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
    path = args.json if args.json else default_json_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2, default=repr))
    except OSError as e:
        print(f"error: cannot write the full record to {path} ({e}); pass --json PATH to "
              "write it elsewhere", file=sys.stderr)
        status = 2
    else:
        print(f"full record (JSON: settings, every round, verdicts, stats()): {path}")
    if args.png:
        print(write_png(args.png, results, machine, cfg))
    return status


if __name__ == "__main__":
    sys.exit(main())
