"""The comparisons' common harness: the packages they import, the settings of a run
(:class:`Config`), one timed measurement of a fresh loader (:func:`measure_once`) and its
verdict (:func:`judge`), rounds alternating between loaders (:func:`alternating_rounds`), and
the machine and data set a report names."""

from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable


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
    """``ringloader.sample_data`` (loaded from the package's directory, above this one, if the
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


def _seed_everything(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)


# --------------------------------------------------------------------------
# What a report names
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
    from ..sources.datasets import IMG_EXTENSIONS  # the native folder scan's list, as ImageFolder keeps

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


# --------------------------------------------------------------------------
# Rounds of several loaders
# --------------------------------------------------------------------------


def ringloader_factory(ds: Any, cfg: Config, **extra: Any) -> Callable[[], Any]:
    """A zero-argument callable making a fresh ringloader DataLoader over ``ds`` as the rounds
    time it: shuffled, whole batches, ``cfg``'s batch size and workers, ``extra`` arguments
    (``collate_fn``). persistent_workers=False, torch's default, as the torch loaders beside it: a
    round times batches of one fresh loader's first epoch, and reading the next epoch ahead would
    spend part of the window on batches the round never takes (the overlap is measured by the
    native benchmark's (ringloader bench) epoch timeline instead)."""
    rl = _import_ringloader()
    return lambda: rl.DataLoader(ds, batch_size=cfg.batch_size, shuffle=True,
                                 num_workers=cfg.num_workers, drop_last=True,
                                 persistent_workers=False, **extra)


def native_build_seconds(ds: Any, cfg: Config, what: str, **extra: Any) -> float:
    """Seconds to build a ringloader DataLoader over ``ds`` (a Dataset of references: its
    ``__getitem__`` for every index); a :class:`BenchError` naming ``what`` if the loader does
    not run natively (the comparison would time torch's path twice)."""
    rl = _import_ringloader()
    t0 = time.perf_counter()
    probe = rl.DataLoader(ds, batch_size=cfg.batch_size, num_workers=cfg.num_workers, **extra)
    build_s = time.perf_counter() - t0
    if not probe.native:
        raise BenchError(f"{what} did not run natively: {probe.describe()}")
    return build_s


def alternating_rounds(factories: dict[str, Callable[[], Any]], cfg: Config, kind: str,
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
