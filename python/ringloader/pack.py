"""Pack an ImageFolder or a file list into WebDataset tar shards.

    python -m ringloader.pack SRC DST [--shard-size 1GB] [--max-side N --quality Q]
    ringloader-pack SRC DST ...

``SRC`` is an ImageFolder root (one folder per class, torchvision's order) or a file list
(``<path> <label>`` lines, as :class:`ringloader.FileList` reads). ``DST`` receives
``shard-000000.tar``, ``shard-000001.tar``, ... of about ``--shard-size`` bytes each. Sample
``i`` is two members, ``<key>.<ext>`` (the image) and ``<key>.cls`` (its label in ASCII), with
``key`` the zero-padded sample number. Next to each shard, ``<shard>.idx.json`` records its
byte size, modification time and where each sample's image lies in it (so
:class:`ringloader.WebDataset` needs no scan while the shard is unchanged); ``classes.json`` names the labels and ``index.json`` lists the shards.

Images keep their bytes and extension, except: with ``--max-side N`` an image whose shorter side
exceeds ``N`` is resized with Pillow (aspect kept, shorter side ``N``) and re-encoded as JPEG of
``--quality Q``; an image in a format WebDataset's default extensions do not cover (BMP, TIFF,
PPM...) is re-encoded as PNG (lossless).

What is packed is checked, since a shard is often shared more widely than its source: a file
whose bytes Pillow does not identify as an image (whatever its extension) is skipped, and one
kept under ``.jpg``/``.png``/``.webp`` must be that format or it is re-encoded as PNG; so is a file reached through a
symlink that leads out of the source tree (the ImageFolder root, or the list's folder; for a
list's entry named outside it, the entry itself being a symlink), unless ``--follow-symlinks``;
and anything not a regular file (a FIFO, a device), a file that cannot be read (a symlink loop,
no permission), and a truncated or damaged JPEG/PNG/WebP kept as it is (cheap checks, the ones
ringloader's decoders make: a JPEG's end-of-image marker after its first scan, a PNG's chunks
whole with their CRCs up to IEND, a WebP as long as its RIFF header says). Each skip is named in
the summary (the first 20, then a count; index.json lists all). ``--strict`` stops at the first
such file instead, naming it.

``index.json`` is written last and marks a finished pack; while packing, ``.pack-progress.json``
records the shards finished so far (each renamed into place, with its sidecar, only once whole).
A ``DST`` holding a previous pack, finished or not, is refused unless ``--overwrite`` (delete it,
start over) or ``--resume``: keep the recorded shards still intact on disk (size and sidecar as
recorded), from the first on, and pack the rest; a pack of other sources (paths, labels) or
options is refused. Resuming trusts that the source files kept their bytes. Output
files are created under temporary names with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and renamed into
place, so a symlink planted in ``DST`` (``index.json`` -> elsewhere) is replaced, never written
through; they get the usual permissions (0666 less the umask).

The source files are read and checked in ``_pack_sources``; here are the shards, the resume
state and the command.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import stat
import sys
import tarfile
import time
from typing import Any, List, Optional, Sequence, Tuple

from .core import _sizes
from .core._atomic import create_exclusive, write_json
from ._pack_sources import _image_bytes, _read_source, _Skip, _source_tree, _sources
from .core._shard_index import INDEX_FORMAT, INDEX_SUFFIX

__all__ = ["pack", "parse_size", "main"]

SHARD_PATTERN = "shard-{:06d}.tar"
#: Skipped files named in the summary line by line; the rest are counted.
_SKIPS_LISTED = 20


def parse_size(text: str) -> int:
    """Bytes of ``--shard-size``: ``"1GB"``, ``"500MB"``, ``"64MiB"``, ``"1000000"`` (the rule of
    ``max_memory=``: GB/MB powers of 1000; GiB/MiB, and bare G/M, powers of 1024)."""
    return _sizes.parse_size(text, "--shard-size")


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
        fd, self.tmp = create_exclusive(path)
        self.file = os.fdopen(fd, "wb")
        self.tar = tarfile.open(fileobj=self.file, mode="w", format=tarfile.USTAR_FORMAT)
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
        self.tar.close()  # leaves the file object open
        size = self.file.tell()
        self.file.close()
        os.replace(self.tmp, self.path)
        # The shard's mtime as well as its size: WebDataset trusts the sidecar only while both
        # match (a shard rewritten in place, or replaced by another of the same size, is
        # scanned instead).
        mtime_ns = os.stat(self.path).st_mtime_ns
        index = {"format": INDEX_FORMAT, "version": 1,
                 "shard": os.path.basename(self.path), "bytes": size, "mtime_ns": mtime_ns,
                 "error": "", "samples": self.rows}
        write_json(self.path + INDEX_SUFFIX, index)
        return {"name": os.path.basename(self.path), "samples": len(self.rows), "bytes": size}

    def abandon(self) -> None:
        """Drops the unfinished shard (pack failed)."""
        self.file.close()
        try:
            os.unlink(self.tmp)
        except OSError:
            pass


PROGRESS_NAME = ".pack-progress.json"
_PACK_FORMAT = "ringloader-webdataset-pack"
_OUTPUT = re.compile(r"shard-\d{6}\.tar(\.idx\.json)?|index\.json|classes\.json|"
                     + re.escape(PROGRESS_NAME))
_TEMPORARY = re.compile(r"\.(shard-\d{6}\.tar(\.idx\.json)?|index\.json|classes\.json|"
                        r"\.pack-progress\.json)\.[0-9a-f]{16}\.tmp")


class PackError(ValueError):
    """A pack refused or stopped (--strict), with what to do about it."""


def _previous_outputs(dst: str) -> List[str]:
    """Names in ``dst`` that a pack writes (finished or not), temporaries included."""
    return sorted(f for f in os.listdir(dst) if _OUTPUT.fullmatch(f) or _TEMPORARY.fullmatch(f))


def _remove(dst: str, names: Sequence[str]) -> None:
    """Unlinks ``names`` in ``dst`` (a symlink itself, never its target); index.json first, so
    that the folder stops claiming a finished pack before anything else goes."""
    for name in sorted(names, key=lambda f: f != "index.json"):
        try:
            os.unlink(os.path.join(dst, name))
        except FileNotFoundError:
            pass


def _load_state(path: str) -> Optional[dict]:
    """A pack's record (index.json or the progress file), or None if missing or unreadable.
    Read through lstat'd regular files only: a planted symlink is no record."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != _PACK_FORMAT or \
            not isinstance(data.get("shard_index"), list):
        return None
    return data


def _shard_intact(dst: str, entry: Any) -> bool:
    """The shard of a record ``entry`` is on disk as recorded: a regular file of the recorded
    size, with a sidecar naming it, of that size and sample count."""
    try:
        name, size, samples = entry["name"], int(entry["bytes"]), int(entry["samples"])
        path = os.path.join(dst, name)
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size != size:
            return False
        if not stat.S_ISREG(os.lstat(path + INDEX_SUFFIX).st_mode):
            return False
        with open(path + INDEX_SUFFIX, encoding="utf-8") as f:
            side = json.load(f)
        return side.get("format") == INDEX_FORMAT and side.get("shard") == name and \
            side.get("bytes") == size and len(side.get("samples", ())) == samples
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _sources_digest(paths: Sequence[str], labels: Sequence[int], classes: Sequence[str]) -> str:
    return hashlib.sha256(json.dumps([list(paths), list(labels), list(classes)]).encode()) \
        .hexdigest()


def _resume_point(dst: str, options: dict, digest: str, total: int
                  ) -> Tuple[List[dict], List[List[str]]]:
    """(shards kept, skips so far) of the previous pack in ``dst`` for --resume: the longest run
    of its recorded shards, from the first, that are intact on disk. Refuses a pack of other
    sources or options (its shards would not be the ones this pack makes)."""
    state = _load_state(os.path.join(dst, "index.json")) or \
        _load_state(os.path.join(dst, PROGRESS_NAME))
    if state is None:
        return [], []  # nothing recorded (interrupted before its first shard): start over
    differ = [k for k, v in options.items() if state.get("options", {}).get(k) != v]
    if state.get("sources_digest") != digest:
        differ.insert(0, "the source files or labels")
    if differ:
        raise PackError(f"pack: DST {dst!r} holds a pack made with other {', '.join(differ)} "
                        f"(recorded: {json.dumps(state.get('options'))}); --overwrite starts over")
    kept: List[dict] = []
    for entry in state["shard_index"]:
        if not isinstance(entry, dict) or entry.get("name") != SHARD_PATTERN.format(len(kept)) \
                or not _shard_intact(dst, entry) or not 0 <= int(entry.get("end", -1)) <= total:
            break
        kept.append(entry)
    skipped = state.get("skipped", [])
    if "skipped_at" in state:  # index.json: [path, why] and, apart, their source indices
        skipped = [[p, w, i] for (p, w), i in zip(skipped, state["skipped_at"])]
    done = kept[-1]["end"] if kept else 0
    # Skips recorded with each shard are those of the sources before its end.
    skipped = [s for s in skipped if isinstance(s, list) and len(s) == 3 and s[2] < done]
    return kept, skipped


def pack(src: str, dst: str, shard_size: int = 10**9, max_side: Optional[int] = None,
         quality: int = 90, progress_stream=None, follow_symlinks: bool = False,
         strict: bool = False, overwrite: bool = False, resume: bool = False) -> dict:
    """Write ``src`` (ImageFolder root or file list) into shards under ``dst``; returns the
    summary (samples, shards, bytes, seconds, re-encoded, ``kept``: shards a --resume kept, and
    ``skipped``: ``[path, why]`` of every source file left out, see the module's docstring).
    ``strict`` stops at the first source file that cannot be packed; ``overwrite`` replaces a
    previous pack in ``dst``, ``resume`` keeps its intact shards and packs the rest."""
    start = time.monotonic()
    if max_side is not None and max_side < 1:
        raise ValueError(f"--max-side must be >= 1, got {max_side}")
    if not 1 <= quality <= 100:
        raise ValueError(f"--quality must be in 1..100, got {quality}")
    if overwrite and resume:
        raise ValueError("--overwrite and --resume exclude each other")
    paths, labels, classes = _sources(src)
    tree = _source_tree(src)
    options = {"shard_size": shard_size, "max_side": max_side, "quality": quality,
               "follow_symlinks": follow_symlinks}
    digest = _sources_digest(paths, labels, classes)
    os.makedirs(dst, exist_ok=True)
    previous = _previous_outputs(dst)
    kept: List[dict] = []
    skipped: List[List[Any]] = []  # [path, why, source index]
    if previous and resume:
        kept, skipped = _resume_point(dst, options, digest, len(paths))
        keep = {name for e in kept for name in (e["name"], e["name"] + INDEX_SUFFIX)}
        _remove(dst, [f for f in previous if f not in keep])
    elif previous and overwrite:
        _remove(dst, previous)
    elif previous:
        finished = "index.json" in previous
        shards = sum(1 for f in previous if re.fullmatch(r"shard-\d{6}\.tar", f))
        raise PackError(
            f"pack: DST {dst!r} holds " + (
                f"a finished pack ({shards} shards and index.json): --overwrite replaces it, "
                "--resume checks its shards and packs only what is missing" if finished else
                f"an unfinished pack ({shards} shards, no index.json: it was interrupted or "
                "failed): --resume keeps its intact shards and packs the rest, --overwrite "
                "starts over"))
    width = max(6, len(str(len(paths) - 1)))
    progress = _Progress(len(paths), progress_stream)
    shards: List[dict] = list(kept)
    writer: Optional[_ShardWriter] = None
    total_bytes = sum(int(e["bytes"]) for e in kept)
    reencoded = sum(int(e.get("reencoded", 0)) for e in kept)
    packed = sum(int(e["samples"]) for e in kept)
    first = kept[-1]["end"] if kept else 0
    record = {"format": _PACK_FORMAT, "version": 1, "source": src, "options": options,
              "sources_digest": digest, "classes": len(classes)}
    shard_reencoded = 0

    def close(end: int) -> None:
        nonlocal writer, total_bytes, shard_reencoded
        assert writer is not None
        shards.append(dict(writer.close(), end=end, reencoded=shard_reencoded))
        total_bytes += shards[-1]["bytes"]
        writer, shard_reencoded = None, 0
        # Written after the shard and its sidecar are in place: what it lists is whole.
        write_json(os.path.join(dst, PROGRESS_NAME),
                    dict(record, shard_index=shards, skipped=skipped), indent=1)

    try:
        for i in range(first, len(paths)):
            path, label = paths[i], labels[i]
            try:
                raw, mtime = _read_source(path, tree, follow_symlinks)
                data, ext, changed = _image_bytes(path, raw, max_side, quality)
            except _Skip as why:
                if strict:
                    raise PackError(f"pack: {path}: {why} (--strict stops at the first file it "
                                    "cannot pack; without it, such files are skipped)") from None
                skipped.append([path, str(why), i])
                progress.update(i + 1, len(shards) + (writer is not None),
                                total_bytes + (writer.size if writer else 0))
                continue
            if writer is not None and writer.rows and \
                    _closed_size(writer.size, len(data)) > shard_size:
                close(i)
            if writer is None:
                writer = _ShardWriter(os.path.join(dst, SHARD_PATTERN.format(len(shards))))
            reencoded += changed
            shard_reencoded += changed
            key = f"{packed:0{width}d}"
            packed += 1
            offset = writer.add(f"{key}.{ext}", data, mtime)
            writer.add(f"{key}.cls", str(label).encode(), mtime)
            writer.rows.append([key, f"{key}.{ext}", offset, len(data), int(label)])
            progress.update(i + 1, len(shards) + 1, total_bytes + writer.size)
        if writer is not None:
            close(len(paths))
    finally:
        if writer is not None:
            writer.abandon()
    if not packed:
        raise ValueError(f"pack: no image of {src!r} could be packed ({len(skipped)} skipped, "
                         f"first: {skipped[0][0]}: {skipped[0][1]})")
    write_json(os.path.join(dst, "classes.json"), classes)
    summary = {"samples": packed, "shards": len(shards), "bytes": total_bytes,
               "seconds": round(time.monotonic() - start, 3), "reencoded": reencoded,
               "kept": len(kept), "skipped": [s[:2] for s in skipped]}
    # index.json last: it marks the pack finished. It keeps what a later --resume checks.
    write_json(os.path.join(dst, "index.json"),
                dict(record, shard_index=shards, **summary, skipped_at=[s[2] for s in skipped]),
                indent=1)
    try:
        os.unlink(os.path.join(dst, PROGRESS_NAME))
    except FileNotFoundError:
        pass
    return summary


def skipped_lines(skipped: Sequence[Sequence[str]]) -> List[str]:
    """The summary's lines about skipped source files: each named, up to a limit."""
    lines = [f"skipped {path}: {why}" for path, why in skipped[:_SKIPS_LISTED]]
    if len(skipped) > _SKIPS_LISTED:
        lines.append(f"... and {len(skipped) - _SKIPS_LISTED} more skipped (all are listed under "
                     "'skipped' in index.json)")
    return lines


def main(argv: Optional[Sequence[str]] = None, prog: str = "ringloader pack") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Pack an ImageFolder or a '<path> <label>' file list into WebDataset shards.")
    parser.add_argument("src", help="ImageFolder root or file list")
    parser.add_argument("dst", help="output folder for shard-NNNNNN.tar")
    parser.add_argument("--shard-size", default="1GB", help="bytes per shard (1GB, 500MB, ...)")
    parser.add_argument("--max-side", type=int, default=None,
                        help="re-encode images whose shorter side exceeds N to shorter side N")
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality of re-encoded images")
    parser.add_argument("--follow-symlinks", action="store_true",
                        help="also pack files reached through symlinks that lead out of SRC")
    parser.add_argument("--strict", action="store_true",
                        help="stop at the first source file that cannot be packed (unreadable, "
                             "not an image, truncated) instead of skipping it")
    again = parser.add_mutually_exclusive_group()
    again.add_argument("--overwrite", action="store_true",
                       help="DST holds a previous pack: delete it and start over")
    again.add_argument("--resume", action="store_true",
                       help="DST holds a previous pack of the same SRC and options: keep its "
                            "intact shards, pack the rest")
    args = parser.parse_args(argv)
    try:
        summary = pack(args.src, args.dst, parse_size(args.shard_size), args.max_side,
                       args.quality, follow_symlinks=args.follow_symlinks, strict=args.strict,
                       overwrite=args.overwrite, resume=args.resume)
    except (ValueError, OSError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    for line in skipped_lines(summary["skipped"]):
        print(line)
    print(f"packed {summary['samples']} samples into {summary['shards']} shards, "
          f"{summary['bytes']} bytes ({summary['bytes'] / 1e6:.1f} MB) in "
          f"{summary['seconds']:.1f} s ({summary['reencoded']} re-encoded, "
          f"{len(summary['skipped'])} skipped"
          f"{', ' + str(summary['kept']) + ' shards kept from before' if args.resume else ''})"
          f" -> {args.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
