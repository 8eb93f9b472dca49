"""Pack an ImageFolder or a file list into WebDataset tar shards.

    python -m ringloader.pack SRC DST [--shard-size 1GB] [--max-side N --quality Q]
    ringloader-pack SRC DST ...

``SRC`` is an ImageFolder root (one folder per class, torchvision's order) or a file list
(``<path> <label>`` lines, as :class:`ringloader.FileList` reads). ``DST`` receives
``shard-000000.tar``, ``shard-000001.tar``, ... of about ``--shard-size`` bytes each. Sample
``i`` is two members, ``<key>.<ext>`` (the image) and ``<key>.cls`` (its label in ASCII), with
``key`` the zero-padded sample number. Next to each shard, ``<shard>.idx.json`` records its
byte size and where each sample's image lies in it (so :class:`ringloader.WebDataset` needs no
scan); ``classes.json`` names the labels and ``index.json`` lists the shards.

Images keep their bytes and extension, except: with ``--max-side N`` an image whose shorter side
exceeds ``N`` is resized with Pillow (aspect kept, shorter side ``N``) and re-encoded as JPEG of
``--quality Q``; an image in a format WebDataset's default extensions do not cover (BMP, TIFF,
PPM...) is re-encoded as PNG (lossless).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import tarfile
import time
from typing import List, Optional, Sequence, Tuple

from . import _sizes
from .datasets import FileList, ImageFolder, NativeDataset
from .webdataset import IMAGE_EXTS, INDEX_FORMAT, INDEX_SUFFIX

__all__ = ["pack", "parse_size", "main"]

SHARD_PATTERN = "shard-{:06d}.tar"
_KEPT_EXTS = tuple("." + ext for ext in IMAGE_EXTS)  # what a WebDataset reads as images


def parse_size(text: str) -> int:
    """Bytes of ``--shard-size``: ``"1GB"``, ``"500MB"``, ``"64MiB"``, ``"1000000"`` (the rule of
    ``max_memory=``: GB/MB powers of 1000; GiB/MiB, and bare G/M, powers of 1024)."""
    return _sizes.parse_size(text, "--shard-size")


def _sources(src: str) -> Tuple[List[str], List[int], List[str]]:
    """(paths, labels, classes) of an ImageFolder root or a file list, read as
    :class:`ringloader.ImageFolder` and :class:`ringloader.FileList` read them."""
    if os.path.isdir(src):
        ds: NativeDataset = ImageFolder(src)
    elif os.path.isfile(src):
        ds = FileList(src)
    else:
        raise FileNotFoundError(f"pack: SRC {src!r} is neither an ImageFolder root nor a file list")
    return [p for p, _ in ds.samples], list(ds.targets), list(ds.classes)


def _image_bytes(path: str, max_side: Optional[int], quality: int) -> Tuple[bytes, str, bool]:
    """(bytes, extension without dot, re-encoded) of one image."""
    ext = os.path.splitext(path)[1].lower()
    with open(path, "rb") as f:
        data = f.read()
    if max_side is None and ext in _KEPT_EXTS:
        return data, ext[1:], False
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            short = min(img.size)
            exif = img.info.get("exif")
            if max_side is not None and short > max_side:
                w, h = img.size
                size = (max_side, int(max_side * h / w)) if w <= h else \
                    (int(max_side * w / h), max_side)
                out = img.convert("RGB").resize(size, Image.Resampling.BICUBIC)
                buf = io.BytesIO()
                out.save(buf, "JPEG", quality=quality, **({"exif": exif} if exif else {}))
                return buf.getvalue(), "jpg", True
            if ext in _KEPT_EXTS:
                return data, ext[1:], False
            buf = io.BytesIO()
            img.convert("RGB").save(buf, "PNG")
            return buf.getvalue(), "png", True
    except OSError as exc:
        raise ValueError(f"pack: cannot read image {path}: {exc}") from None


class _Progress:
    def __init__(self, total: int, stream=None):
        self.total, self.stream = total, stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.last_step = -1
        self.start = time.monotonic()

    def update(self, done: int, shards: int, nbytes: int) -> None:
        if self.tty:
            width = 30
            filled = width * done // max(self.total, 1)
            rate = done / max(time.monotonic() - self.start, 1e-9)
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} "
                              f"samples, {shards} shards, {nbytes / 1e6:.1f} MB, {rate:.0f}/s")
            if done == self.total:
                self.stream.write("\n")
            self.stream.flush()
            return
        step = 10 * done // max(self.total, 1)
        if step != self.last_step or done == self.total:
            self.last_step = step
            self.stream.write(f"pack: {done}/{self.total} samples, {shards} shards, "
                              f"{nbytes / 1e6:.1f} MB\n")
            self.stream.flush()


def _closed_size(offset: int, image_bytes: int) -> int:
    """Bytes of a shard at ``offset`` once an image of ``image_bytes`` and its label are added
    and it is closed (tar's two end blocks, padded to 10240-byte records)."""
    blocks = lambda n: -(-n // 512) * 512  # noqa: E731
    end = offset + 512 + blocks(image_bytes) + 512 + 512 + 1024
    return -(-end // tarfile.RECORDSIZE) * tarfile.RECORDSIZE


class _ShardWriter:
    def __init__(self, path: str):
        self.path = path
        self.tar = tarfile.open(path, "w", format=tarfile.USTAR_FORMAT)
        self.rows: List[list] = []

    def add(self, name: str, data: bytes, mtime: int) -> int:
        """Adds a member; returns the offset of its data in the shard."""
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), mtime, 0o644
        header = info.tobuf(self.tar.format, self.tar.encoding, self.tar.errors)
        offset = self.tar.offset + len(header)
        self.tar.addfile(info, io.BytesIO(data))
        return offset

    @property
    def size(self) -> int:
        return self.tar.offset

    def close(self) -> dict:
        self.tar.close()
        size = os.path.getsize(self.path)
        index = {"format": INDEX_FORMAT, "version": 1,
                 "shard": os.path.basename(self.path), "bytes": size, "error": "",
                 "samples": self.rows}
        with open(self.path + INDEX_SUFFIX, "w", encoding="utf-8") as f:
            json.dump(index, f)
        return {"name": os.path.basename(self.path), "samples": len(self.rows), "bytes": size}


def pack(src: str, dst: str, shard_size: int = 10**9, max_side: Optional[int] = None,
         quality: int = 90, progress_stream=None) -> dict:
    """Write ``src`` (ImageFolder root or file list) into shards under ``dst``; returns the
    summary (samples, shards, bytes, seconds, re-encoded)."""
    start = time.monotonic()
    if max_side is not None and max_side < 1:
        raise ValueError(f"--max-side must be >= 1, got {max_side}")
    if not 1 <= quality <= 100:
        raise ValueError(f"--quality must be in 1..100, got {quality}")
    paths, labels, classes = _sources(src)
    os.makedirs(dst, exist_ok=True)
    existing = [f for f in os.listdir(dst) if re.fullmatch(r"shard-\d{6}\.tar", f)]
    if existing:
        raise FileExistsError(f"pack: DST {dst!r} already holds shards ({sorted(existing)[0]}, "
                              "...): give an empty or new folder")
    width = max(6, len(str(len(paths) - 1)))
    progress = _Progress(len(paths), progress_stream)
    shards: List[dict] = []
    writer: Optional[_ShardWriter] = None
    total_bytes = 0
    reencoded = 0
    for i, (path, label) in enumerate(zip(paths, labels)):
        try:
            data, ext, changed = _image_bytes(path, max_side, quality)
        except FileNotFoundError:
            raise FileNotFoundError(f"pack: {path} does not exist") from None
        reencoded += changed
        if writer is not None and writer.rows and \
                _closed_size(writer.size, len(data)) > shard_size:
            shards.append(writer.close())
            total_bytes += shards[-1]["bytes"]
            writer = None
        if writer is None:
            writer = _ShardWriter(os.path.join(dst, SHARD_PATTERN.format(len(shards))))
        key = f"{i:0{width}d}"
        mtime = int(os.path.getmtime(path))
        offset = writer.add(f"{key}.{ext}", data, mtime)
        writer.add(f"{key}.cls", str(label).encode(), mtime)
        writer.rows.append([key, f"{key}.{ext}", offset, len(data), int(label)])
        progress.update(i + 1, len(shards) + 1, total_bytes + writer.size)
    if writer is not None:
        shards.append(writer.close())
        total_bytes += shards[-1]["bytes"]
    with open(os.path.join(dst, "classes.json"), "w", encoding="utf-8") as f:
        json.dump(classes, f)
    summary = {"samples": len(paths), "shards": len(shards), "bytes": total_bytes,
               "seconds": round(time.monotonic() - start, 3), "reencoded": reencoded}
    with open(os.path.join(dst, "index.json"), "w", encoding="utf-8") as f:
        json.dump({"format": "ringloader-webdataset-pack", "version": 1, "source": src,
                   "classes": len(classes), "shards": shards, **summary}, f, indent=1)
    return summary


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ringloader-pack",
        description="Pack an ImageFolder or a '<path> <label>' file list into WebDataset shards.")
    parser.add_argument("src", help="ImageFolder root or file list")
    parser.add_argument("dst", help="output folder for shard-NNNNNN.tar")
    parser.add_argument("--shard-size", default="1GB", help="bytes per shard (1GB, 500MB, ...)")
    parser.add_argument("--max-side", type=int, default=None,
                        help="re-encode images whose shorter side exceeds N to shorter side N")
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality of re-encoded images")
    args = parser.parse_args(argv)
    try:
        summary = pack(args.src, args.dst, parse_size(args.shard_size), args.max_side,
                       args.quality)
    except (ValueError, OSError) as exc:
        print(f"ringloader-pack: error: {exc}", file=sys.stderr)
        return 2
    print(f"packed {summary['samples']} samples into {summary['shards']} shards, "
          f"{summary['bytes']} bytes ({summary['bytes'] / 1e6:.1f} MB) in "
          f"{summary['seconds']:.1f} s ({summary['reencoded']} re-encoded) -> {args.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
