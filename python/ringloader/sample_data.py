"""Built-in synthetic sample dataset with ImageNet-like JPEG files.

The sample set is an ``ImageFolder`` tree (``root/class_XX/img_XXXXX.jpg``)
whose files resemble ImageNet training images closely enough to benchmark and
test a JPEG data-loading pipeline without downloading anything:

* shorter side 300-500 px, aspect ratios between 3:4 (portrait) and 16:9;
* textured, photograph-like content: 1/f^alpha ("pink") noise with
  correlated colour channels, smooth illumination gradients, occluding
  shapes with their own textures and shading, regions of fine detail and a
  little sensor noise -- so that JPEG sizes and decode costs are realistic;
* JPEG quality 85-95, mostly 4:2:0 chroma subsampling (some 4:4:4 / 4:2:2),
  about 5% progressive, 3% grayscale and 1% CMYK files, all written by Pillow.

Generation is deterministic: the same ``seed`` and parameters always produce
the same pixels, and the same bytes with the same Pillow/libjpeg build.  The
tree is generated once into a temporary directory next to ``root`` and then
renamed into place; a marker file holding a hash of the generator version and
parameters is written last, so an interrupted generation is never mistaken
for a complete one.

This module deliberately imports nothing from the compiled extension so it can
be used (and tested) before the native part of the package is built; the
pixels and their JPEG encoding are made in ``_synthetic_images``, which it
loads from beside its own file when it is loaded alone.

Command line::

    python -m ringloader.sample_data [--root DIR] [--num-images N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import sys
import time
import uuid
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

if __package__:
    from ._synthetic_images import encode_jpeg, synthesize_image
else:  # this file loaded alone, outside the package (before it is built): its sibling too
    import importlib.util as _util

    _spec = _util.spec_from_file_location("_ringloader_synthetic_images",
                                          Path(__file__).with_name("_synthetic_images.py"))
    _images = _util.module_from_spec(_spec)
    _spec.loader.exec_module(_images)
    encode_jpeg, synthesize_image = _images.encode_jpeg, _images.synthesize_image

__all__ = [
    "GENERATOR_VERSION",
    "MARKER_NAME",
    "ImageSpec",
    "default_root",
    "encode_jpeg",
    "image_specs",
    "is_complete",
    "make_sample_dataset",
    "render_spec",
    "synthesize_image",
]

#: Bump when the pixel synthesiser or the file layout changes; it is part of
#: the marker hash, so a cached tree from an older generator is rebuilt.
GENERATOR_VERSION = 1

#: Marker file written (last) into the root of a complete sample tree.
MARKER_NAME = ".ringloader-sample.json"

_DEFAULT_DIRNAME = f"sample-v{GENERATOR_VERSION}"
_TMP_PREFIX = ".tmp-"
_OLD_PREFIX = ".old-"
_STALE_TMP_SECONDS = 6 * 3600

# Flavour mix (fractions of the whole set).  Every flavour gets at least one
# image when the set has ``_MIN_IMAGES_FOR_ALL_FLAVOURS`` images or more.
_FRAC_GRAYSCALE = 0.03
_FRAC_CMYK = 0.01
_FRAC_PROGRESSIVE = 0.05
_FRAC_444 = 0.08
_FRAC_422 = 0.04
_MIN_IMAGES_FOR_ALL_FLAVOURS = 12

# (width / height, weight): landscape 4:3 dominates as in ImageNet.
_ASPECTS: tuple[tuple[float, float], ...] = (
    (4 / 3, 0.42),
    (3 / 2, 0.18),
    (3 / 4, 0.16),
    (1.0, 0.07),
    (16 / 9, 0.06),
    (-1.0, 0.11),  # any ratio in [3:4, 16:9]
)
# (shorter side, weight); -1 means uniform in [300, 500].
_SHORT_SIDES: tuple[tuple[int, float], ...] = (
    (375, 0.34),
    (333, 0.16),
    (500, 0.12),
    (400, 0.08),
    (-1, 0.30),
)


# --------------------------------------------------------------------------
# Sample-set description
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageSpec:
    """Everything needed to produce one sample image (a pure function of it)."""

    index: int
    label: int
    relpath: str
    width: int
    height: int
    quality: int
    subsampling: str
    progressive: bool
    mode: str
    seed: tuple[int, int]


def _digits(n: int, minimum: int) -> int:
    return max(minimum, len(str(max(n - 1, 0))))


def _flavour_counts(n: int) -> dict[str, int]:
    def count(frac: float) -> int:
        c = int(round(frac * n))
        return max(c, 1) if n >= _MIN_IMAGES_FOR_ALL_FLAVOURS else c

    return {
        "gray": count(_FRAC_GRAYSCALE),
        "cmyk": count(_FRAC_CMYK),
        "progressive": count(_FRAC_PROGRESSIVE),
        "444": count(_FRAC_444),
        "422": count(_FRAC_422),
    }


def image_specs(num_images: int = 1000, num_classes: int = 10, seed: int = 0) -> list[ImageSpec]:
    """Describe every file of a sample set (sizes, JPEG flavour, per-image seed).

    Image ``i`` belongs to class ``i % num_classes``.  Flavours are assigned to
    disjoint, randomly chosen images with exact counts (so small sets still
    contain every flavour).
    """
    if num_images < 0:
        raise ValueError("num_images must be >= 0")
    if num_classes < 1:
        raise ValueError("num_classes must be >= 1")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5A3C1E]))
    counts = _flavour_counts(num_images)
    flavour = np.array(["plain"] * num_images, dtype=object)
    order = rng.permutation(num_images)
    pos = 0
    for name, c in counts.items():
        c = min(c, num_images - pos)
        flavour[order[pos : pos + c]] = name
        pos += c

    aspect_vals = np.array([a for a, _ in _ASPECTS])
    aspect_w = np.array([wt for _, wt in _ASPECTS])
    side_vals = np.array([s for s, _ in _SHORT_SIDES])
    side_w = np.array([wt for _, wt in _SHORT_SIDES])
    cdig, idig = _digits(num_classes, 2), _digits(num_images, 5)

    specs = []
    for i in range(num_images):
        aspect = float(rng.choice(aspect_vals, p=aspect_w / aspect_w.sum()))
        if aspect < 0:
            aspect = float(np.exp(rng.uniform(np.log(3 / 4), np.log(16 / 9))))
        short = int(rng.choice(side_vals, p=side_w / side_w.sum()))
        if short < 0:
            short = int(rng.integers(300, 501))
        if aspect >= 1:
            width, height = int(round(short * aspect)), short
        else:
            width, height = short, int(round(short / aspect))
        quality = int(rng.integers(85, 96))
        fl = flavour[i]
        label = i % num_classes
        specs.append(
            ImageSpec(
                index=i,
                label=label,
                relpath=f"class_{label:0{cdig}d}/img_{i:0{idig}d}.jpg",
                width=width,
                height=height,
                quality=quality,
                subsampling={"444": "4:4:4", "422": "4:2:2"}.get(fl, "4:2:0"),
                progressive=fl == "progressive",
                mode={"gray": "L", "cmyk": "CMYK"}.get(fl, "RGB"),
                seed=(int(seed), i),
            )
        )
    return specs


def render_spec(spec: ImageSpec, num_classes: int) -> bytes:
    """Produce the JPEG bytes of one sample image."""
    rng = np.random.default_rng(np.random.SeedSequence(list(spec.seed)))
    hue = (spec.label * 0.618034) % 1.0 if num_classes > 1 else None
    pixels = synthesize_image(spec.width, spec.height, rng, hue_centre=hue)
    return encode_jpeg(
        pixels,
        quality=spec.quality,
        subsampling=spec.subsampling,
        progressive=spec.progressive,
        mode=spec.mode,
    )


# --------------------------------------------------------------------------
# Cache management
# --------------------------------------------------------------------------


def default_root(num_images: int = 1000, num_classes: int = 10, seed: int = 0) -> Path:
    """Default location of the sample set.

    The cache directory is ``$RINGLOADER_CACHE`` if set, else
    ``~/.cache/ringloader``.  The default-parameter set lives in
    ``<cache>/sample-v1``; other parameters get their own sibling directory
    (``sample-v1-n<images>-c<classes>-s<seed>``) so they never evict it.
    """
    env = os.environ.get("RINGLOADER_CACHE")
    cache = Path(env).expanduser() if env else Path.home() / ".cache" / "ringloader"
    if (num_images, num_classes, seed) == (1000, 10, 0):
        return cache / _DEFAULT_DIRNAME
    return cache / f"{_DEFAULT_DIRNAME}-n{num_images}-c{num_classes}-s{seed}"


def _params(num_images: int, num_classes: int, seed: int) -> dict[str, int]:
    return {
        "generator_version": GENERATOR_VERSION,
        "num_images": int(num_images),
        "num_classes": int(num_classes),
        "seed": int(seed),
    }


def _params_hash(params: dict[str, int]) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()


def _read_marker(root: Path) -> dict | None:
    try:
        with open(root / MARKER_NAME, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _count_jpegs(root: Path) -> int:
    n = 0
    try:
        with os.scandir(root) as classes:
            for cls in classes:
                if cls.is_dir(follow_symlinks=False) and not cls.name.startswith("."):
                    with os.scandir(cls.path) as files:
                        n += sum(1 for e in files if e.name.endswith(".jpg") and e.is_file())
    except OSError:
        return -1
    return n


def is_complete(root: str | os.PathLike[str], num_images: int = 1000, num_classes: int = 10, seed: int = 0) -> bool:
    """True if ``root`` holds a complete sample set generated with these parameters."""
    root = Path(root)
    marker = _read_marker(root)
    params = _params(num_images, num_classes, seed)
    if marker is None or marker.get("params_hash") != _params_hash(params):
        return False
    return _count_jpegs(root) == num_images


_LAYOUT_DIR = re.compile(r"class_\d+")
_LAYOUT_FILE = re.compile(r"img_\d+\.jpg")


def _looks_like_sample_tree(root: Path) -> bool:
    """True if every entry of ``root`` is part of a (possibly stale) sample tree."""
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.name == MARKER_NAME and entry.is_file():
                continue
            if not (entry.is_dir(follow_symlinks=False) and _LAYOUT_DIR.fullmatch(entry.name)):
                return False
            with os.scandir(entry.path) as files:
                if not all(f.is_file(follow_symlinks=False) and _LAYOUT_FILE.fullmatch(f.name) for f in files):
                    return False
    return True


def _cleanup_stale(parent: Path, name: str) -> None:
    now = time.time()
    for prefix in (_TMP_PREFIX, _OLD_PREFIX):
        for p in parent.glob(f"{prefix}{name}-*"):
            try:
                if prefix == _OLD_PREFIX or now - p.stat().st_mtime > _STALE_TMP_SECONDS:
                    shutil.rmtree(p, ignore_errors=True)
            except OSError:
                pass


def _render_to(args: tuple[ImageSpec, int, str]) -> int:
    spec, num_classes, out_dir = args
    data = render_spec(spec, num_classes)
    with open(os.path.join(out_dir, spec.relpath), "wb") as f:
        f.write(data)
    return len(data)


def _default_workers(num_images: int) -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8, num_images // 16 or 1))


def _generate_into(tmp: Path, specs: Sequence[ImageSpec], num_classes: int, workers: int) -> int:
    for d in sorted({s.relpath.split("/")[0] for s in specs} | {f"class_{c:0{_digits(num_classes, 2)}d}" for c in range(num_classes)}):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    jobs: Iterator[tuple[ImageSpec, int, str]] = ((s, num_classes, str(tmp)) for s in specs)
    if workers <= 1:
        return sum(map(_render_to, jobs))
    # fork: children need nothing but numpy/Pillow and inherit this module
    # even when it was loaded from a file path rather than the package.
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    with warnings.catch_warnings():
        # Python >= 3.12 warns about fork() in a multi-threaded process; the
        # children only run pure numpy/Pillow code, which is safe here.
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*fork.*")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            return sum(pool.map(_render_to, jobs, chunksize=8))


def make_sample_dataset(
    root: str | os.PathLike[str] | None = None,
    num_images: int = 1000,
    num_classes: int = 10,
    seed: int = 0,
    *,
    workers: int | None = None,
) -> Path:
    """Create (once) and return the synthetic ImageNet-like sample dataset.

    Args:
        root: Dataset directory.  Defaults to :func:`default_root`.
        num_images: Number of JPEG files; image ``i`` goes to class ``i % num_classes``.
        num_classes: Number of class directories (``class_00`` ...).
        seed: Seed of the deterministic generator.
        workers: Generator processes (default: up to the number of usable CPUs).

    Returns:
        The dataset root.  If it already holds a complete set with the same
        parameters it is returned untouched.  A stale sample tree (older
        generator, other parameters, or incomplete) is replaced; any other
        non-empty directory raises :class:`FileExistsError` rather than being
        deleted.
    """
    if num_images < 0:
        raise ValueError("num_images must be >= 0")
    if num_classes < 1:
        raise ValueError("num_classes must be >= 1")
    root = Path(root).expanduser() if root is not None else default_root(num_images, num_classes, seed)
    root = root.absolute()
    if is_complete(root, num_images, num_classes, seed):
        return root

    if root.exists():
        if not root.is_dir():
            raise FileExistsError(f"{root} exists and is not a directory")
        if _read_marker(root) is None and not _looks_like_sample_tree(root):
            raise FileExistsError(
                f"{root} is a non-empty directory that is not a ringloader sample dataset; refusing to overwrite it"
            )

    parent = root.parent
    parent.mkdir(parents=True, exist_ok=True)
    _cleanup_stale(parent, root.name)
    tmp = parent / f"{_TMP_PREFIX}{root.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        specs = image_specs(num_images, num_classes, seed)
        t0 = time.perf_counter()
        total = _generate_into(tmp, specs, num_classes, workers if workers is not None else _default_workers(num_images))
        params = _params(num_images, num_classes, seed)
        marker = {
            "params": params,
            "params_hash": _params_hash(params),
            "num_files": len(specs),
            "total_bytes": total,
            "generation_seconds": round(time.perf_counter() - t0, 3),
            "pillow_version": _pillow_version(),
            "numpy_version": np.__version__,
        }
        # Marker last: a tree without it is never considered complete.
        with open(tmp / MARKER_NAME, "w", encoding="utf-8") as f:
            json.dump(marker, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        _install(tmp, root, num_images, num_classes, seed)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return root


def _install(tmp: Path, root: Path, num_images: int, num_classes: int, seed: int) -> None:
    """Atomically move the finished tree ``tmp`` to ``root``."""
    try:
        os.rename(tmp, root)
        return
    except OSError:
        if not root.exists():
            raise
    # ``root`` exists: someone else may have finished concurrently.
    if is_complete(root, num_images, num_classes, seed):
        return
    old = root.parent / f"{_OLD_PREFIX}{root.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.rename(root, old)
    try:
        os.rename(tmp, root)
    finally:
        shutil.rmtree(old, ignore_errors=True)


def _pillow_version() -> str:
    import PIL

    return PIL.__version__


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ringloader.sample_data",
        description="Build (once) the synthetic ImageNet-like sample dataset and print its path.",
    )
    parser.add_argument("--root", type=Path, default=None, help="dataset directory (default: cache directory)")
    parser.add_argument("--num-images", type=int, default=1000)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None, help="generator processes")
    parser.add_argument("--info", action="store_true", help="also print generation statistics to stderr")
    args = parser.parse_args(argv)
    try:
        root = make_sample_dataset(args.root, args.num_images, args.num_classes, args.seed, workers=args.workers)
    except (FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.info:
        marker = _read_marker(root) or {}
        n = marker.get("num_files", 0)
        total = marker.get("total_bytes", 0)
        print(
            f"{n} images, {total / 1e6:.1f} MB, {total / max(n, 1) / 1024:.1f} KiB/image, "
            f"generated in {marker.get('generation_seconds', float('nan')):.1f} s",
            file=sys.stderr,
        )
    print(root)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
