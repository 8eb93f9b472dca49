"""Test-data helpers for the Python test suite (not a test module).

* :func:`jpeg_bytes` -- a textured JPEG of a given size and flavour (baseline
  or progressive, 4:4:4/4:2:2/4:2:0, RGB/grayscale/CMYK), deterministic in
  ``seed``; the pixels come from the sample-set synthesiser
  (``ringloader.sample_data.synthesize_image``).
* :func:`make_image_tree` -- an ``ImageFolder`` tree from a compact spec.
* :func:`corrupt_cases` -- a directory of bad or unusual inputs, described by
  :data:`CORRUPT_CASES`.
* :func:`sof_size` / :func:`patch_sof_size` -- read/patch the frame size in a
  JPEG's SOF header.

``ringloader.sample_data`` has no dependency on the compiled extension; if the
``ringloader`` package cannot be imported (e.g. not built yet) the module is
loaded straight from ``python/ringloader/sample_data.py`` of this checkout.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import io
import os
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping, Sequence, Union

import numpy as np

__all__ = [
    "CORRUPT_CASES",
    "DAMAGED_JPEG_CASES",
    "IMG_EXTENSIONS",
    "ImageTree",
    "corrupt_cases",
    "damaged_jpeg_cases",
    "jpeg_bytes",
    "load_sample_data",
    "make_image_tree",
    "patch_sof_size",
    "pixels",
    "sof_size",
]

_REPO_ROOT = Path(__file__).resolve().parents[2]
_SAMPLE_DATA_FILE = _REPO_ROOT / "python" / "ringloader" / "sample_data.py"
_FALLBACK_MODULE_NAME = "_ringloader_sample_data"

#: Extensions torchvision's ImageFolder accepts (case-insensitive).
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def load_sample_data() -> ModuleType:
    """Return the ``ringloader.sample_data`` module (installed or from this checkout)."""
    try:
        return importlib.import_module("ringloader.sample_data")
    except Exception:  # package not built/installed (ImportError) or broken extension (OSError)
        pass
    if _FALLBACK_MODULE_NAME in sys.modules:
        return sys.modules[_FALLBACK_MODULE_NAME]
    spec = importlib.util.spec_from_file_location(_FALLBACK_MODULE_NAME, _SAMPLE_DATA_FILE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {_SAMPLE_DATA_FILE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_FALLBACK_MODULE_NAME] = module  # dataclasses/pickling need it registered
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_FALLBACK_MODULE_NAME]
        raise
    return module


# --------------------------------------------------------------------------
# Single images
# --------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _pixels_cached(width: int, height: int, seed: int) -> np.ndarray:
    sd = load_sample_data()
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x7E57]))
    arr = sd.synthesize_image(width, height, rng)
    arr.flags.writeable = False
    return arr


def pixels(width: int, height: int, seed: int = 0) -> np.ndarray:
    """The (read-only) RGB ``uint8`` pixels that :func:`jpeg_bytes` encodes."""
    return _pixels_cached(int(width), int(height), int(seed))


@functools.lru_cache(maxsize=512)
def _jpeg_cached(
    width: int, height: int, quality: int, subsampling: str, progressive: bool, mode: str, seed: int
) -> bytes:
    sd = load_sample_data()
    return sd.encode_jpeg(
        pixels(width, height, seed), quality=quality, subsampling=subsampling, progressive=progressive, mode=mode
    )


def jpeg_bytes(
    width: int,
    height: int,
    quality: int = 90,
    subsampling: str = "4:2:0",
    progressive: bool = False,
    mode: str = "RGB",
    seed: int = 0,
    **save_kwargs: Any,
) -> bytes:
    """A textured JPEG of ``width`` x ``height`` pixels, deterministic in all arguments.

    Args:
        width: Width in pixels.
        height: Height in pixels.
        quality: JPEG quality 1-100.
        subsampling: ``"4:4:4"``, ``"4:2:2"`` or ``"4:2:0"`` (ignored for ``"L"``).
        progressive: Progressive (SOF2) instead of baseline (SOF0).
        mode: ``"RGB"``, ``"L"`` (grayscale) or ``"CMYK"`` (Adobe-style, as Pillow writes it).
        seed: Content seed.
        **save_kwargs: Extra ``PIL.Image.save`` options (``exif``, ``icc_profile``, ...).
    """
    if save_kwargs:
        sd = load_sample_data()
        return sd.encode_jpeg(
            pixels(width, height, seed),
            quality=quality,
            subsampling=subsampling,
            progressive=progressive,
            mode=mode,
            **save_kwargs,
        )
    return _jpeg_cached(int(width), int(height), int(quality), str(subsampling), bool(progressive), str(mode), int(seed))


# (width, height, kwargs) — sizes around 300-500 px and every flavour the decoder must handle.
FLAVOURS = [
    (500, 375, dict(quality=90, subsampling="4:2:0")),
    (333, 500, dict(quality=85, subsampling="4:2:0")),
    (420, 320, dict(quality=95, subsampling="4:4:4")),
    (480, 360, dict(quality=90, subsampling="4:2:2")),
    (400, 300, dict(quality=88, subsampling="4:2:0", progressive=True)),
    (360, 480, dict(quality=90, mode="L")),
    (400, 400, dict(quality=92, mode="CMYK")),
    (512, 341, dict(quality=87, subsampling="4:2:0")),
]


def _encode_other(width: int, height: int, fmt: str, seed: int, mode: str = "RGB") -> bytes:
    from PIL import Image

    im = Image.fromarray(np.array(pixels(width, height, seed)), "RGB")
    if mode != "RGB":
        im = im.convert(mode)
    buf = io.BytesIO()
    im.save(buf, format=fmt)
    return buf.getvalue()


# --------------------------------------------------------------------------
# JPEG header helpers
# --------------------------------------------------------------------------

_SOF_MARKERS = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _segments(data: bytes) -> list[tuple[int, int, int]]:
    """``(marker, offset_of_FF, segment_length)`` for each header segment up to SOS."""
    if data[:2] != b"\xff\xd8":
        raise ValueError("not a JPEG (no SOI)")
    out = []
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            raise ValueError(f"expected a marker at offset {i}")
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        out.append((marker, i, length))
        if marker == 0xDA:  # SOS: entropy-coded data follows
            break
        i += 2 + length
    return out


def _find_sof(data: bytes) -> int:
    for marker, off, _ in _segments(data):
        if marker in _SOF_MARKERS:
            return off
    raise ValueError("no SOF segment found")


def sof_size(data: bytes) -> tuple[int, int]:
    """``(width, height)`` as declared by the JPEG's SOF header (no decoding)."""
    off = _find_sof(data)
    height = int.from_bytes(data[off + 5 : off + 7], "big")
    width = int.from_bytes(data[off + 7 : off + 9], "big")
    return width, height


def patch_sof_size(data: bytes, width: int, height: int) -> bytes:
    """Copy of ``data`` whose SOF header claims ``width`` x ``height`` (< 65536)."""
    if not (0 <= width < 65536 and 0 <= height < 65536):
        raise ValueError("SOF dimensions are 16-bit")
    off = _find_sof(data)
    out = bytearray(data)
    out[off + 5 : off + 7] = height.to_bytes(2, "big")
    out[off + 7 : off + 9] = width.to_bytes(2, "big")
    return bytes(out)


def scan_offset(data: bytes) -> int:
    """Offset of the first byte of entropy-coded data (just after the SOS header)."""
    for marker, off, length in _segments(data):
        if marker == 0xDA:
            return off + 2 + length
    raise ValueError("no SOS segment found")


# --------------------------------------------------------------------------
# ImageFolder trees
# --------------------------------------------------------------------------

ImageItem = Union[tuple, Mapping[str, Any], bytes]
TreeSpec = Union[Mapping[str, Union[int, Sequence[ImageItem]]], str]


@dataclass
class ImageTree:
    """Result of :func:`make_image_tree`; usable wherever a path is expected.

    ``classes``, ``class_to_idx`` and ``samples`` follow torchvision's
    ``ImageFolder`` conventions (sorted class names; files found by a sorted
    recursive walk, filtered by :data:`IMG_EXTENSIONS`), so tests can compare
    a loader's view of the tree with the expected one.
    """

    root: Path
    classes: list[str] = field(default_factory=list)
    class_to_idx: dict[str, int] = field(default_factory=dict)
    samples: list[tuple[str, int]] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)  # every file written, in creation order

    def __fspath__(self) -> str:
        return str(self.root)

    def __str__(self) -> str:
        return str(self.root)

    @property
    def targets(self) -> list[int]:
        return [t for _, t in self.samples]


def _parse_spec(spec: TreeSpec) -> Mapping[str, int | Sequence[ImageItem]]:
    if isinstance(spec, str):
        out: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, _, count = part.partition(":")
            out[name.strip()] = int(count) if count else 1
        return out
    return spec


def _item_seed(base: int, cls: str, j: int) -> int:
    return zlib.crc32(f"{base}/{cls}/{j}".encode()) & 0x7FFFFFFF


def make_image_tree(
    root: str | os.PathLike[str],
    spec: TreeSpec,
    *,
    size: tuple[int, int] = (64, 48),
    seed: int = 0,
) -> ImageTree:
    """Build an ``ImageFolder`` tree under ``root`` from a compact description.

    ``spec`` maps class directory names to either a count of default images or
    a list of items; a string ``"cat:3,dog:2"`` is shorthand for
    ``{"cat": 3, "dog": 2}``.  Each item is one of

    * ``(width, height)`` -- a default-flavour JPEG of that size;
    * ``bytes`` -- a file with exactly these contents;
    * a mapping with optional keys ``name`` (path relative to the class
      directory, may contain ``/`` for nested folders; default
      ``img_XXXX.jpg``), ``width``/``height``, any :func:`jpeg_bytes` option
      (``quality``, ``subsampling``, ``progressive``, ``mode``, ``seed``),
      ``format`` (Pillow format other than JPEG, e.g. ``"PNG"``; the default
      extension follows it) or ``data`` (raw contents, overrides everything).

    Default images vary in size around ``size`` (so resize paths differ) and
    every image has its own content seed derived from ``seed``, the class
    name and the item index.  A count of 0 creates an empty class directory.

    Example::

        make_image_tree(tmp_path, {"cat": 3, "dog": [(80, 60), {"mode": "L"},
                                                  {"name": "notes.txt", "data": b"hi"}]})
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tree = ImageTree(root=root)
    base_w, base_h = size
    for cls, items in _parse_spec(spec).items():
        cdir = root / cls
        cdir.mkdir(parents=True, exist_ok=True)
        if isinstance(items, int):
            items = [(base_w + 8 * (j % 3), base_h + 8 * (j % 2)) for j in range(items)]
        for j, item in enumerate(items):
            name: str | None = None
            if isinstance(item, (bytes, bytearray)):
                data = bytes(item)
            elif isinstance(item, tuple):
                w, h = item
                data = jpeg_bytes(w, h, seed=_item_seed(seed, cls, j))
            elif isinstance(item, Mapping):
                opts = dict(item)
                name = opts.pop("name", None)
                if "data" in opts:
                    data = bytes(opts.pop("data"))
                else:
                    w = int(opts.pop("width", base_w))
                    h = int(opts.pop("height", base_h))
                    s = int(opts.pop("seed", _item_seed(seed, cls, j)))
                    fmt = str(opts.pop("format", "JPEG")).upper()
                    if fmt in ("JPEG", "JPG"):
                        data = jpeg_bytes(w, h, seed=s, **opts)
                    else:
                        data = _encode_other(w, h, fmt, s, mode=str(opts.pop("mode", "RGB")))
                        if name is None:
                            name = f"img_{j:04d}.{fmt.lower()}"
            else:
                raise TypeError(f"unsupported item {item!r} for class {cls!r}")
            path = cdir / (name or f"img_{j:04d}.jpg")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            tree.files.append(path)

    tree.classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    tree.class_to_idx = {c: i for i, c in enumerate(tree.classes)}
    for cls in tree.classes:
        for dirpath, _, fnames in sorted(os.walk(root / cls, followlinks=True)):
            for fname in sorted(fnames):
                if fname.lower().endswith(IMG_EXTENSIONS):
                    tree.samples.append((os.path.join(dirpath, fname), tree.class_to_idx[cls]))
    return tree


# --------------------------------------------------------------------------
# Bad and unusual inputs
# --------------------------------------------------------------------------

#: name -> (category, description).  Categories:
#:   ``valid``      a well-formed image every decoder must read (a JPEG, or a PNG or GIF named
#:                  .jpg: formats are chosen by signature, as Pillow does);
#:   ``invalid``    no image can be produced; a loader must fail cleanly (or skip);
#:   ``damaged``    a JPEG with damaged/missing entropy-coded data: libjpeg may
#:                  recover with a warning (grey/garbled blocks) or fail, so a
#:                  loader may return an image or raise, but must not crash;
#:   ``oversized``  a JPEG whose header claims a huge frame (with far too little
#:                  data): a loader must reject it from the header (size limit)
#:                  rather than allocate ~10 GB; note that Pillow with
#:                  ``MAX_IMAGE_PIXELS = None`` does allocate and "decode" it;
#:   ``not_a_file`` a directory named like an image; dataset scans skip it.
CORRUPT_CASES: dict[str, tuple[str, str]] = {
    "empty": ("invalid", "zero-byte file"),
    "truncated_soi_only": ("invalid", "only the 2-byte SOI marker"),
    "truncated_in_headers": ("invalid", "cut in the middle of the header segments, before SOS"),
    "truncated_after_sos": ("damaged", "SOS header plus 16 bytes of scan data"),
    "truncated_half": ("damaged", "first half of the file"),
    "truncated_90pct": ("damaged", "first 90% of the file"),
    "truncated_no_eoi": ("damaged", "complete except the final EOI marker"),
    "truncated_progressive_half": ("damaged", "first half of a progressive JPEG"),
    "bitflip_scan": ("damaged", "16 random bit flips in the entropy-coded data"),
    "bitflip_headers": ("damaged", "8 random bit flips in the DQT/DHT/SOF header bytes"),
    "png_named_jpg": ("valid", "a valid PNG file named .jpg (decoded by its signature, as Pillow)"),
    "gif_named_jpg": ("valid", "a valid GIF file named .jpg (decoded by its signature, as Pillow)"),
    "text_named_jpg": ("invalid", "plain text named .jpg"),
    "huge_sof": ("oversized", "valid small JPEG whose SOF0 header claims 60000x60000"),
    "zero_size_sof": ("invalid", "valid small JPEG whose SOF0 header claims 0x0"),
    "tiny_1x1": ("valid", "a 1x1 baseline JPEG"),
    "exif_heavy": ("valid", "~60 KB EXIF APP1 segment plus XMP APP1, ICC APP2 and a COM segment"),
    "trailing_garbage": ("valid", "valid JPEG followed by 4 KB of junk after EOI"),
    "directory_named_jpg": ("not_a_file", "a directory called x.jpg"),
}

_CASE_FILENAMES = {"directory_named_jpg": "x.jpg"}


def _flip_bits(data: bytes, start: int, end: int, count: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    out = bytearray(data)
    for pos in rng.choice(np.arange(start, end), size=min(count, end - start), replace=False):
        out[int(pos)] ^= 1 << int(rng.integers(0, 8))
    return bytes(out)


def _heavy_metadata_jpeg() -> bytes:
    from PIL import Image

    exif = Image.Exif()
    exif[0x010F] = "ringloader-test"  # Make
    exif[0x0110] = "synthetic"  # Model
    exif[0x0112] = 1  # Orientation: normal
    exif[0x010E] = "".join(chr(0x41 + (i * 7) % 26) for i in range(60000))  # ImageDescription
    kwargs: dict[str, Any] = {"exif": exif, "comment": b"ringloader test comment " * 40}
    kwargs["xmp"] = (b'<x:xmpmeta xmlns:x="adobe:ns:meta/">' + b" " * 16000 + b"</x:xmpmeta>")
    try:
        from PIL import ImageCms

        icc = bytearray(ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes())
        # The header's creation time (bytes 24-35) is "now": fix it so the file is deterministic.
        icc[24:36] = bytes([0x07, 0xE4, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0])  # 2020-01-01 00:00:00
        kwargs["icc_profile"] = bytes(icc)
    except Exception:  # littlecms not available: EXIF/XMP/COM are still there
        pass
    return jpeg_bytes(160, 120, seed=11, **kwargs)


def corrupt_cases(directory: str | os.PathLike[str]) -> dict[str, Path]:
    """Write every case of :data:`CORRUPT_CASES` into ``directory``.

    Returns ``{case name: path}``; files are named ``<case>.jpg`` except the
    directory case, which is ``x.jpg``.  Contents are deterministic.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    good = jpeg_bytes(96, 64, seed=7)
    prog = jpeg_bytes(96, 64, seed=8, progressive=True)
    sos = scan_offset(good)
    first_header = _segments(good)[0][1]
    n = len(good)

    contents: dict[str, bytes] = {
        "empty": b"",
        "truncated_soi_only": good[:2],
        "truncated_in_headers": good[: (first_header + sos) // 2],
        "truncated_after_sos": good[: sos + 16],
        "truncated_half": good[: n // 2],
        "truncated_90pct": good[: n * 9 // 10],
        "truncated_no_eoi": good[:-2],
        "truncated_progressive_half": prog[: len(prog) // 2],
        "bitflip_scan": _flip_bits(good, sos, n - 2, 16, seed=1),
        "bitflip_headers": _flip_bits(good, 20, sos - 2, 8, seed=2),
        "png_named_jpg": _encode_other(48, 32, "PNG", seed=3),
        "gif_named_jpg": _encode_other(48, 32, "GIF", seed=4, mode="P"),
        "text_named_jpg": b"This is not an image.\nJust some text that happens to be named .jpg\n" * 4,
        "huge_sof": patch_sof_size(good, 60000, 60000),
        "zero_size_sof": patch_sof_size(good, 0, 0),
        "tiny_1x1": jpeg_bytes(1, 1, seed=5),
        "exif_heavy": _heavy_metadata_jpeg(),
        "trailing_garbage": good + bytes(np.random.default_rng(6).integers(0, 256, 4096, dtype=np.uint8)),
    }
    out: dict[str, Path] = {}
    for name in CORRUPT_CASES:
        path = directory / _CASE_FILENAMES.get(name, f"{name}.jpg")
        if name == "directory_named_jpg":
            path.mkdir(exist_ok=True)
        else:
            path.write_bytes(contents[name])
        out[name] = path
    return out


#: Damaged JPEGs by what libjpeg makes of them: name -> (category, description). Categories:
#:   ``warns``  libjpeg decodes past the damage with a warning ("Corrupt JPEG data: ..."), into
#:              wrong pixels; Pillow 13 and torchvision's decode_jpeg accept these;
#:   ``fatal``  libjpeg (or Pillow's own marker parser) stops with an error: Pillow refuses;
#:   ``intact`` the damage does not touch the pixels; everyone accepts.
DAMAGED_JPEG_CASES: dict[str, tuple[str, str]] = {
    "eoi_mid_scan": ("warns", "baseline cut in the middle of the scan, EOI appended"),
    "eoi_mid_scan_progressive": ("warns", "progressive cut in the middle of a scan, EOI appended"),
    "scan_run_of_fe": ("warns", "30 scan bytes set to FE (bad Huffman codes)"),
    "scan_bytes_removed": ("warns", "60 bytes cut out of the scan"),
    "scan_bitflips": ("warns", "16 random bit flips in the scan"),
    "progressive_bitflips": ("warns", "16 random bit flips in the scans of a progressive JPEG"),
    "restart_marker_in_scan": ("warns", "an RST0 marker in a scan without restart intervals"),
    "junk_between_headers": ("warns", "3 junk bytes between two header segments"),
    "bottom_rows_damaged": ("warns", "256x256 baseline, 30 scan bytes near the end set to FE"),
    "junk_after_soi": ("fatal", "3 junk bytes right after the start-of-image marker"),
    "bad_segment_before_eoi": ("fatal", "a DHT segment with a bogus length after the scan"),
    "sof_before_eoi": ("fatal", "a second SOF marker after the scan"),
    "bottom_sof_before_eoi": ("fatal", "256x256 baseline, a second SOF marker after the scan"),
    "progressive_bad_scan_params": ("fatal", "a progressive scan header with Ss=80"),
    "progressive_bad_component": ("fatal", "a progressive scan header naming component 9"),
    "padding_before_eoi": ("intact", "3 bytes between the last entropy-coded byte and EOI"),
    "empty_segment_before_eoi": ("intact", "an empty DHT segment (length 2) after the scan"),
    "progressive_last_scans_missing": ("intact", "progressive without its last scan (coarser)"),
}


def _sos_positions(data: bytes) -> list[int]:
    """Offsets of every SOS marker (entropy-coded data stuffs FF as FF 00, so FF DA is a marker)."""
    out, i = [], data.find(b"\xff\xda")
    while i >= 0:
        out.append(i)
        i = data.find(b"\xff\xda", i + 2)
    return out


def damaged_jpeg_cases() -> dict[str, bytes]:
    """The bytes of every case of :data:`DAMAGED_JPEG_CASES` (deterministic)."""
    good = jpeg_bytes(96, 64, seed=7)
    prog = jpeg_bytes(96, 64, seed=8, progressive=True)
    big = jpeg_bytes(256, 256, seed=9)
    sos, n = scan_offset(good), len(good)
    psos = scan_offset(prog)
    scans = _sos_positions(prog)

    def fe_run(data: bytes, start: int) -> bytes:
        out = bytearray(data)
        out[start:start + 30] = b"\xfe" * 30
        return bytes(out)

    def patched(data: bytes, pos: int, value: int) -> bytes:
        out = bytearray(data)
        out[pos] = value
        return bytes(out)

    ss_pos = scans[2] + 2 + int.from_bytes(prog[scans[2] + 2:scans[2] + 4], "big") - 3
    contents = {
        "eoi_mid_scan": good[: sos + (n - sos) // 2] + b"\xff\xd9",
        "eoi_mid_scan_progressive": prog[: psos + (len(prog) - psos) // 2] + b"\xff\xd9",
        "scan_run_of_fe": fe_run(good, sos + 10),
        "scan_bytes_removed": good[: sos + 100] + good[sos + 160:],
        "scan_bitflips": _flip_bits(good, sos, n - 2, 16, seed=1),
        "progressive_bitflips": _flip_bits(prog, psos, len(prog) - 2, 16, seed=2),
        "restart_marker_in_scan": good[: sos + 100] + b"\xff\xd0" + good[sos + 100:],
        "junk_between_headers": good[:20] + b"\x00\x01\x02" + good[20:],
        "bottom_rows_damaged": fe_run(big, len(big) - 200),
        "junk_after_soi": good[:2] + b"\x00\x00\x00" + good[2:],
        "bad_segment_before_eoi": good[:-2] + b"\xff\xc4\x00\x05\x00\x01\x02" + good[-2:],
        "sof_before_eoi": good[:-2] + b"\xff\xc0\x00\x03\x08" + good[-2:],
        "bottom_sof_before_eoi": big[:-2] + b"\xff\xc0\x00\x03\x08" + big[-2:],
        "progressive_bad_scan_params": patched(prog, ss_pos, 0x50),
        "progressive_bad_component": patched(prog, scans[3] + 5, 0x09),
        "padding_before_eoi": good[:-2] + b"\x12\x34\x56" + good[-2:],
        "empty_segment_before_eoi": good[:-2] + b"\xff\xc4\x00\x02" + good[-2:],
        "progressive_last_scans_missing": prog[: scans[-1]] + b"\xff\xd9",
    }
    assert contents.keys() == DAMAGED_JPEG_CASES.keys()
    return contents


def write_flavour_tree(root: Path, seed: int) -> Path:
    """8 JPEGs of every flavour (4:2:0/4:4:4/4:2:2, progressive, gray, CMYK), 2 classes."""
    for k, (w, h, kw) in enumerate(FLAVOURS):
        d = root / f"class_{k // 4}"
        d.mkdir(exist_ok=True)
        (d / f"img_{k}.jpg").write_bytes(jpeg_bytes(w, h, seed=seed + k, **kw))
    return root


def write_tree(root: Path, num_classes: int, per_class: int, seed: int = 0) -> Path:
    """An ImageFolder tree of `num_classes` x `per_class` JPEGs cycling through FLAVOURS."""
    k = 0
    for c in range(num_classes):
        d = root / f"class_{c:02d}"
        d.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            w, h, kw = FLAVOURS[k % len(FLAVOURS)]
            (d / f"img_{i:03d}.jpg").write_bytes(jpeg_bytes(w, h, seed=seed * 1000 + k, **kw))
            k += 1
    return root
