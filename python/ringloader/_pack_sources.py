"""What :mod:`ringloader.pack` reads and checks: the samples of an ImageFolder root or a file
list, each source file opened without following a symlink out of the source tree (and only a
regular file), and its bytes identified as an image, checked whole (the cheap checks
ringloader's decoders make) and re-encoded when they cannot be kept as they are. A file that is
not packed raises ``_Skip`` with the reason."""

from __future__ import annotations

import io
import os
import stat
import zlib
from typing import List, NamedTuple, Optional, Tuple

from .core._shard_index import IMAGE_EXTS
from .sources.datasets import FileList, ImageFolder, NativeDataset


_KEPT_EXTS = tuple("." + ext for ext in IMAGE_EXTS)  # what a WebDataset reads as images
_KEPT_FORMATS = ("JPEG", "PNG", "WEBP")  # kept as they are under those extensions


class _Tree(NamedTuple):
    """The source tree: as given (made absolute) and resolved."""

    lexical: str
    real: str


class _Skip(Exception):
    """A source file that is not packed: why."""


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _source_tree(src: str) -> _Tree:
    top = os.path.abspath(src if os.path.isdir(src) else os.path.dirname(os.path.abspath(src)))
    return _Tree(os.path.normpath(top), os.path.realpath(top))


def _opened_path(fd: int, fallback: str) -> str:
    """Where the open file ``fd`` really is (Linux: /proc/self/fd), else ``fallback`` resolved."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(fallback)


def _strerror(exc: OSError) -> str:
    """``"Too many levels of symbolic links"``: the reason without the path (the summary names it)."""
    return exc.strerror or type(exc).__name__


def _read_source(path: str, tree: _Tree, follow_symlinks: bool) -> Tuple[bytes, int]:
    """(bytes, mtime) of a source file. Raises _Skip when it is reached through a symlink that
    leads out of ``tree`` (unless ``follow_symlinks``), or is not a regular file. The check is
    made on the file actually opened, so a link swapped in after a check is caught too."""
    lexical = os.path.normpath(os.path.abspath(path))
    named_inside = _within(lexical, tree.lexical) or _within(lexical, tree.real)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks and not named_inside:
        flags |= getattr(os, "O_NOFOLLOW", 0)  # a list's entry outside the tree: no link at all
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow_symlinks and not named_inside and os.path.islink(path):
            raise _Skip(f"a symlink (to {os.path.realpath(path)}); --follow-symlinks packs it") \
                from None
        raise _Skip(f"unreadable ({_strerror(exc)})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Skip("not a regular file")
        if not follow_symlinks and named_inside:
            real = _opened_path(fd, path)
            if not _within(real, tree.real):
                raise _Skip(f"a symlink out of the source tree (to {real}); --follow-symlinks "
                            "packs it")
        chunks = []
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except OSError as exc:
                raise _Skip(f"unreadable ({_strerror(exc)})") from None
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks), int(info.st_mtime)
    finally:
        os.close(fd)


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


def _image_bytes(path: str, data: bytes, max_side: Optional[int],
                quality: int) -> Tuple[bytes, str, bool]:
    """(bytes, extension without dot, re-encoded) of one image. Raises _Skip when ``data`` is
    not an image: Pillow must identify it from its header (an image kept as it is is not decoded,
    which would cost ~100 times as much; one whose body is damaged fails at load time, as any
    damaged sample), and decode it when it is re-encoded."""
    from PIL import Image

    ext = os.path.splitext(path)[1].lower()
    damage = _damage(data, _signature(data))
    if damage:
        raise _Skip(damage)
    try:
        img = Image.open(io.BytesIO(data))
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise _Skip(f"not an image ({exc})") from None
    try:
        with img:
            if max_side is None and ext in _KEPT_EXTS and img.format in _KEPT_FORMATS:
                return data, ext[1:], False
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
            if ext in _KEPT_EXTS and img.format in _KEPT_FORMATS:
                return data, ext[1:], False
            buf = io.BytesIO()
            img.convert("RGB").save(buf, "PNG")
            return buf.getvalue(), "png", True
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise _Skip(f"damaged {img.format or 'image'} ({exc})") from None


def _jpeg_scan_start(data: bytes) -> Optional[int]:
    """Where the entropy-coded data of a JPEG's first scan starts (after its SOS segment), or
    None when the file ends before it."""
    pos, n = 2, len(data)
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            return pos  # not a marker: leave the judgement to the decoder, search from here
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # no length field
            pos += 2
            continue
        end = pos + 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
        if marker == 0xDA:
            return end if end <= n else None
        pos = end
    return None


def _signature(data: bytes) -> Optional[str]:
    """"JPEG", "PNG" or "WEBP" when ``data`` starts as one (Pillow's own test), else None."""
    if data[:3] == b"\xff\xd8\xff":
        return "JPEG"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "PNG"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return None


def _damage(data: bytes, fmt: Optional[str]) -> str:
    """Why the bytes of a JPEG, PNG or WebP cannot be whole ("" when they can): the checks
    ringloader's decoders make before decoding, at a small part of a decode's cost. A JPEG must
    hold an end-of-image marker after the start of its first scan (entropy-coded data cannot
    contain one, so junk appended after it is fine and an EXIF thumbnail's does not count); a PNG's
    chunks must run whole, with matching CRCs, up to IEND; a WebP must be as long as its RIFF
    header says."""
    n = len(data)
    if fmt == "JPEG":
        start = _jpeg_scan_start(data)
        if start is None:
            return "truncated JPEG: the file ends before its image data"
        if data.rfind(b"\xff\xd9", start) < 0:
            return "truncated JPEG: no end-of-image marker"
    elif fmt == "PNG":
        pos = 8
        while True:
            if pos + 12 > n:
                return "truncated PNG: no IEND chunk"
            length = int.from_bytes(data[pos:pos + 4], "big")
            name = data[pos + 4:pos + 8].decode("latin-1")
            if length > n - pos - 12:
                return f"truncated PNG: the {name} chunk is cut short"
            body = memoryview(data)[pos + 4:pos + 8 + length]
            if zlib.crc32(body) != int.from_bytes(data[pos + 8 + length:pos + 12 + length], "big"):
                return f"corrupt PNG: bad CRC in the {name} chunk"
            if name == "IEND":
                return ""
            pos += 12 + length
    elif fmt == "WEBP":
        riff = int.from_bytes(data[4:8], "little") + 8
        if riff > n:
            return f"truncated WebP: {n} of the {riff} bytes its header gives"
    return ""
