"""Every format torchvision's ImageFolder picks up, decoded natively, against torchvision's own
ImageFolder (Pillow ``Image.open(f).convert("RGB")``) with the same transform.

Bounds (max |difference| per uint8 value, whole tensor):
  * PNG (every colour type and bit depth, palette + tRNS, interlaced), BMP, PPM/PGM/PBM, lossless
    WebP (with or without alpha, animated), TIFF (8-bit RGB/RGBA/gray/gray+alpha, bilevel,
    palette; uncompressed, LZW, deflate, PackBits, CCITT G4): 0.
  * lossy WebP (with and without alpha, animated): ``LOSSY_WEBP_MAX_DIFF`` = 0. Both sides run
    libwebp, possibly different releases (measured: Debian's 1.2.4 against the 1.6.0 bundled
    with Pillow 13, bit-identical); raise the bound if a release ever changes lossy output.
  * JPEG members of the mixed folder: 0 with ``fast_decode=False``.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from torchvision import transforms as tvt

import ringloader as rl

from imagegen import jpeg_bytes

LOSSY_WEBP_MAX_DIFF = 0

RESIZE = tvt.Compose([tvt.Resize(64), tvt.CenterCrop(56), tvt.PILToTensor()])
NO_RESIZE = tvt.Compose([tvt.CenterCrop(48), tvt.PILToTensor()])


def texture(w: int, h: int, seed: int, channels: int = 3) -> np.ndarray:
    """Smooth gradients plus noise: every value range a photo has, deterministic in `seed`."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)),
                     ((x + y) * 127 // max(w + h - 2, 1))], axis=-1)
    extra = [base[..., :1]] * (channels - 3) if channels > 3 else []
    img = np.concatenate([base] + extra, axis=-1)[..., :channels]
    return np.clip(img + rng.integers(-40, 41, img.shape), 0, 255).astype(np.uint8)


# ---- a PNG writer for what Pillow cannot save (16-bit colour, 1/2/4-bit, interlaced) ---------

ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]  # (x0, y0, dx, dy)


def _scanlines(samples: np.ndarray, depth: int) -> bytes:
    """Filter-0 scanlines of an (h, w, channels) array of samples at `depth` bits."""
    h = samples.shape[0]
    if depth == 16:
        rows = samples.astype(">u2").reshape(h, -1).view(np.uint8)
    elif depth == 8:
        rows = samples.reshape(h, -1).astype(np.uint8)
    else:
        flat = samples.reshape(h, -1).astype(np.uint8)
        bits = np.unpackbits(flat[..., None], axis=-1)[..., 8 - depth:].reshape(h, -1)
        rows = np.packbits(bits, axis=-1)
    return b"".join(b"\0" + r.tobytes() for r in rows)


def png_bytes(samples: np.ndarray, color_type: int, depth: int, interlace: bool = False,
              palette: bytes | None = None, trns: bytes | None = None) -> bytes:
    if samples.ndim == 2:
        samples = samples[..., None]
    h, w = samples.shape[:2]
    if interlace:
        raw = b"".join(_scanlines(samples[y0::dy, x0::dx], depth)
                       for x0, y0, dx, dy in ADAM7 if x0 < w and y0 < h)
    else:
        raw = _scanlines(samples, depth)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type,
                                                         0, 0, int(interlace)))
    if palette is not None:
        out += chunk(b"PLTE", palette)
    if trns is not None:
        out += chunk(b"tRNS", trns)
    return out + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def pil_bytes(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


# ---- the file set --------------------------------------------------------------------------

def png_files() -> dict:
    W, H = 75, 61
    rgb = texture(W, H, 1)
    rgba = texture(W, H, 2, channels=4)
    gray = rgb[..., 0]
    wide = (texture(W, H, 3).astype(np.uint32) * 257 + np.arange(W)[:, None]) % 65536
    wide = wide.astype(np.uint16)
    pal = bytes(texture(16, 16, 4).reshape(-1)[:200 * 3])  # 200 entries: some indices past it
    files = {
        "rgb": pil_bytes(Image.fromarray(rgb), "PNG"),
        "rgba": pil_bytes(Image.fromarray(rgba), "PNG"),
        "gray": pil_bytes(Image.fromarray(gray), "PNG"),
        "gray_alpha": pil_bytes(Image.fromarray(np.ascontiguousarray(rgba[..., :2])), "PNG"),
        "bilevel": pil_bytes(Image.fromarray(gray > 128), "PNG"),
        "palette_trns": pil_bytes(Image.fromarray(rgb).quantize(64), "PNG",
                                  transparency=bytes(range(0, 256, 4))),
        "gray16": pil_bytes(Image.fromarray(wide[..., 0] // 160), "PNG"),
        "rgb16": png_bytes(wide, 2, 16),
        "rgba16": png_bytes(np.concatenate([wide, wide[..., :1]], -1), 6, 16),
        "gray_alpha16": png_bytes(wide[..., :2], 4, 16),
        "gray16_full_range": png_bytes(wide[..., 0], 0, 16),
        "palette8_short": png_bytes(rgb[..., 0], 3, 8, palette=pal, trns=b"\x00\x80"),
        "rgb_interlaced": png_bytes(rgb, 2, 8, interlace=True),
        "rgba16_interlaced": png_bytes(np.concatenate([wide, wide[..., :1]], -1), 6, 16, True),
    }
    for depth in (1, 2, 4):
        idx = rgb[..., 1] >> (8 - depth)
        files[f"gray{depth}"] = png_bytes(idx, 0, depth)
        files[f"gray{depth}_interlaced"] = png_bytes(idx, 0, depth, interlace=True)
        files[f"palette{depth}_interlaced"] = png_bytes(
            idx, 3, depth, interlace=True, palette=pal[:3 * ((1 << depth) - 1)], trns=b"\x10")
    return files


def webp_files() -> dict:
    W, H = 77, 59
    rgb = Image.fromarray(texture(W, H, 5))
    rgba = Image.fromarray(texture(W, H, 6, channels=4))
    frames = [Image.fromarray(texture(W, H, 7 + i)) for i in range(3)]
    return {
        "lossy": pil_bytes(rgb, "WEBP", quality=80),
        "lossy_alpha": pil_bytes(rgba, "WEBP", quality=75),
        "lossless": pil_bytes(rgb, "WEBP", lossless=True),
        "lossless_alpha": pil_bytes(rgba, "WEBP", lossless=True),
        "animated": pil_bytes(frames[0], "WEBP", save_all=True, append_images=frames[1:],
                              lossless=True, duration=50),
        "animated_lossy": pil_bytes(frames[0], "WEBP", save_all=True, append_images=frames[1:],
                                    quality=70, duration=50),
    }


def bmp_16bit_top_down(rgb: np.ndarray) -> bytes:
    """A 16-bit x-5-5-5 BMP with negative height (top-down rows): Pillow cannot save either."""
    h, w = rgb.shape[:2]
    v = ((rgb[..., 0].astype(np.uint16) >> 3) << 10) | ((rgb[..., 1].astype(np.uint16) >> 3) << 5) \
        | (rgb[..., 2].astype(np.uint16) >> 3)
    stride = (w * 2 + 3) // 4 * 4
    rows = b"".join(v[y].astype("<u2").tobytes().ljust(stride, b"\0") for y in range(h))
    info = struct.pack("<IiiHHIIiiII", 40, w, -h, 1, 16, 0, len(rows), 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 14 + 40 + len(rows), 0, 0, 54) + info + rows


def bmp_rle(idx: np.ndarray, rle4: bool, palette: bytes) -> bytes:
    """An RLE8/RLE4 BMP (bottom-up) of palette indices `idx`, with encoded runs, absolute runs of
    odd and even lengths (padded to even offsets), a delta, end-of-line and end-of-bitmap codes."""
    h, w = idx.shape
    rng = np.random.default_rng(7)
    out = bytearray()
    for r, row in enumerate(idx[::-1]):
        x = 0
        if r == 2:
            out += bytes([0, 2, 3, 0])  # delta: 3 pixels of index 0
            x = 3
        while x < w:
            n = int(min(w - x, rng.integers(3, 40)))
            if rng.random() < 0.5:  # encoded run: one index (RLE4: two alternating nibbles)
                out += bytes([n, (row[x] << 4 | row[min(x + 1, w - 1)]) if rle4 else row[x]])
                row[x:x + n] = [row[x] if (i % 2 == 0 or not rle4) else row[min(x + 1, w - 1)]
                                for i in range(n)]
            else:  # absolute run
                vals = row[x:x + n]
                if rle4:
                    packed = bytes((vals[i] << 4) | (vals[i + 1] if i + 1 < n else 0)
                                   for i in range(0, n, 2))
                else:
                    packed = bytes(vals)
                out += bytes([0, n]) + packed
                if len(out) % 2:
                    out += b"\0"
            x += n
        out += bytes([0, 1 if r == h - 1 else 0])
    colors = len(palette) // 4
    offset = 14 + 40 + len(palette)
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 4 if rle4 else 8, 2 if rle4 else 1, len(out),
                       2835, 2835, colors, 0)
    return b"BM" + struct.pack("<IHHI", offset + len(out), 0, 0, offset) + info + palette + out


def bmp_files() -> dict:
    W, H = 73, 57
    rgb = texture(W, H, 11)
    return {
        "rgb24": pil_bytes(Image.fromarray(rgb), "BMP"),
        "rgba32": pil_bytes(Image.fromarray(texture(W, H, 12, channels=4)), "BMP"),
        "palette8": pil_bytes(Image.fromarray(rgb).quantize(100), "BMP"),
        "gray8": pil_bytes(Image.fromarray(rgb[..., 0]), "BMP"),
        "bilevel": pil_bytes(Image.fromarray(rgb[..., 0] > 100), "BMP"),
        "rgb15_top_down": bmp_16bit_top_down(rgb),
        # RLE8 indices up to 31 with 24 palette entries: the ones past it are black.
        "rle8": bmp_rle(rgb[..., 0] // 8, False, bytes(texture(4, 6, 17, 4).reshape(-1))),
        "rle4": bmp_rle(rgb[..., 1] // 16, True, bytes(texture(4, 4, 18, 4).reshape(-1))),
    }


def tiff_files() -> dict:
    W, H = 71, 55
    rgb = texture(W, H, 15)
    img = Image.fromarray(rgb)
    return {
        "rgb": pil_bytes(img, "TIFF"),
        "rgb_lzw": pil_bytes(img, "TIFF", compression="tiff_lzw"),
        "rgb_deflate": pil_bytes(img, "TIFF", compression="tiff_adobe_deflate"),
        "rgb_packbits": pil_bytes(img, "TIFF", compression="packbits"),
        "rgba_lzw": pil_bytes(Image.fromarray(texture(W, H, 16, channels=4)), "TIFF",
                              compression="tiff_lzw"),
        "gray": pil_bytes(Image.fromarray(rgb[..., 0]), "TIFF"),
        "gray_alpha": pil_bytes(Image.fromarray(np.ascontiguousarray(rgb[..., :2])), "TIFF"),
        "bilevel_group4": pil_bytes(Image.fromarray(rgb[..., 1] > 120), "TIFF",
                                    compression="group4"),
        "palette": pil_bytes(img.quantize(90), "TIFF", compression="tiff_deflate"),
    }


def pnm_files() -> dict:
    W, H = 66, 58
    rgb = texture(W, H, 13)
    wide = texture(W, H, 14)[..., 0].astype(np.uint16) * 3
    return {
        "ppm": (pil_bytes(Image.fromarray(rgb), "PPM"), ".ppm"),
        "pgm": (pil_bytes(Image.fromarray(rgb[..., 1]), "PPM"), ".pgm"),
        "pbm": (pil_bytes(Image.fromarray(rgb[..., 2] > 90), "PPM"), ".ppm"),
        "pgm16": (b"P5\n%d %d\n# a comment\n1000\n" % (W, H) + wide.astype(">u2").tobytes(),
                  ".pgm"),
        "ppm16": (b"P6 %d %d 65535\n" % (W, H)
                  + (rgb.astype(np.uint16) * 251).astype(">u2").tobytes(), ".ppm"),
        "ppm_maxval100": (b"P6 %d %d 100\n" % (W, H) + (rgb // 2).tobytes(), ".ppm"),
    }


def write_tree(root: Path, files: dict, ext: str) -> Path:
    """One class per file (its label says which file a sample is)."""
    for name, data in files.items():
        data, e = data if isinstance(data, tuple) else (data, ext)
        (root / name).mkdir(parents=True)
        (root / name / f"img{e}").write_bytes(data)
    return root


def compare(root: Path, transform, fast_decode: bool = False) -> dict:
    """{class name: max |ours - torchvision|} over the whole tree."""
    theirs = torchvision.datasets.ImageFolder(root, transform=transform)
    ours = rl.ImageFolder(root, transform=transform)
    assert ours.samples == theirs.samples
    loader = rl.DataLoader(ours, batch_size=8, num_workers=2, fast_decode=fast_decode)
    out, i = {}, 0
    for x, y in loader:
        for k in range(x.shape[0]):
            ref, label = theirs[i]
            assert int(y[k]) == label
            assert x[k].shape == ref.shape and x[k].dtype == torch.uint8
            out[theirs.classes[label]] = int((x[k].int() - ref.int()).abs().max())
            i += 1
    assert i == len(theirs)
    return out


# Pillow warns when convert("RGB") drops a palette image's tRNS; the pixels are still RGB.
@pytest.mark.filterwarnings("ignore:Palette images with Transparency")
@pytest.mark.parametrize("transform", [RESIZE, NO_RESIZE], ids=["resize_crop", "center_crop"])
@pytest.mark.parametrize("kind", ["png", "bmp", "pnm", "webp", "tiff"])
def test_matches_torchvision(tmp_path: Path, kind: str, transform):
    files = {"png": png_files, "bmp": bmp_files, "pnm": pnm_files, "webp": webp_files,
             "tiff": tiff_files}[kind]()
    diffs = compare(write_tree(tmp_path, files, "." + kind), transform)
    bound = {name: LOSSY_WEBP_MAX_DIFF if "lossy" in name else 0 for name in diffs}
    assert diffs == {name: min(diffs[name], bound[name]) for name in diffs}, diffs


def test_mixed_folder_and_lying_extension(tmp_path: Path):
    rgb = Image.fromarray(texture(90, 70, 21))
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "1.jpg").write_bytes(jpeg_bytes(96, 72, seed=3))
    (a / "2.png").write_bytes(pil_bytes(rgb, "PNG"))
    (a / "3.webp").write_bytes(pil_bytes(rgb, "WEBP", lossless=True))
    (a / "4.bmp").write_bytes(pil_bytes(rgb, "BMP"))
    (b / "png_named.jpg").write_bytes(pil_bytes(rgb.rotate(90, expand=True), "PNG"))
    (b / "jpeg_named.png").write_bytes(jpeg_bytes(80, 100, seed=4))
    (b / "webp_named.bmp").write_bytes(pil_bytes(rgb, "WEBP", lossless=True))
    for transform in (RESIZE, NO_RESIZE):
        theirs = torchvision.datasets.ImageFolder(tmp_path, transform=transform)
        x, y = next(iter(rl.DataLoader(rl.ImageFolder(tmp_path, transform=transform),
                                       batch_size=len(theirs), fast_decode=False)))
        for i in range(len(theirs)):
            ref, label = theirs[i]
            assert int(y[i]) == label
            assert torch.equal(x[i], ref), theirs.samples[i][0]


def corrupt_files() -> dict:
    rgb = Image.fromarray(texture(64, 48, 31))
    png = pil_bytes(rgb, "PNG")
    idat = png.index(b"IDAT")
    bad_crc = bytearray(png)
    bad_crc[idat + 10] ^= 0x55  # compressed data: its CRC no longer matches
    webp = pil_bytes(rgb, "WEBP", quality=80)
    bmp = pil_bytes(rgb, "BMP")
    gif = pil_bytes(rgb.convert("P"), "GIF")
    # file name: (contents, what the reason must mention). All but the CMYK TIFF
    # (valid, not decoded natively: Unimplemented) are damaged, and Pillow refuses them too.
    return {
        "truncated.png": (png[: len(png) // 2], "PNG"),
        "bad_crc.png": (bytes(bad_crc), "bad CRC in IDAT"),
        "truncated.webp": (webp[: len(webp) - 100], "truncated WebP"),
        "truncated.bmp": (bmp[:-200], "truncated BMP"),
        "truncated_gif_named.png": (gif[: len(gif) // 2], "truncated GIF"),
        "cmyk.tiff": (pil_bytes(rgb.convert("CMYK"), "TIFF"), "unsupported TIFF layout"),
        "text.ppm": (b"P7 not a netpbm file\n", "not an image"),
    }


def test_corrupt_files_raise_or_skip(tmp_path: Path):
    good = pil_bytes(Image.fromarray(texture(64, 48, 30)), "PNG")
    for name, (data, needle) in corrupt_files().items():
        root = tmp_path / name / "tree"
        (root / "c").mkdir(parents=True)
        (root / "c" / "0.png").write_bytes(good)
        (root / "c" / f"1_{name}").write_bytes(data)
        (root / "c" / "2.png").write_bytes(good)
        if "cmyk" not in name:
            with pytest.raises(OSError):
                torchvision.datasets.ImageFolder(root)[1]
        ds = rl.ImageFolder(root, transform=NO_RESIZE)
        with pytest.raises(rl.SampleError) as info:
            list(rl.DataLoader(ds, batch_size=3, on_error="raise"))
        assert info.value.index == 1 and info.value.path.endswith(name), name
        assert needle in info.value.reason, (name, info.value.reason)
        loader = rl.DataLoader(ds, batch_size=3, on_error="skip")
        batches = list(loader)
        assert [x.shape[0] for x, _ in batches] == [2], name
        assert loader.stats()["skipped"] == 1
        assert name in loader.stats()["recent_errors"][0]


def _png_chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def test_png_chunk_damage_accepted_and_refused_as_pillow_does(tmp_path: Path):
    """Ancillary chunks are ignored, but one with a bad CRC before the image data is refused (as
    Pillow refuses it); a missing IEND or junk after it is accepted (as by Pillow)."""
    base = png_bytes(texture(50, 44, 41), 2, 8)
    after_ihdr, iend = 8 + 25, base.rindex(b"IEND") - 4
    text = _png_chunk(b"tEXt", b"Comment\0hello")
    bad_text = text[:-1] + bytes([text[-1] ^ 1])
    cases = {  # name: (file, accepted)
        "text": (base[:after_ihdr] + text + base[after_ihdr:], True),
        "gama": (base[:after_ihdr] + _png_chunk(b"gAMA", struct.pack(">I", 45455))
                 + base[after_ihdr:], True),
        "no_iend": (base[:iend], True),
        "junk_after_iend": (base + b"junk" * 10, True),
        "bad_crc_text_before_idat": (base[:after_ihdr] + bad_text + base[after_ihdr:], False),
    }
    for name, (data, _) in cases.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.png").write_bytes(data)
    ours = rl.ImageFolder(tmp_path, transform=NO_RESIZE)
    theirs = torchvision.datasets.ImageFolder(tmp_path, transform=NO_RESIZE)
    for i, (path, label) in enumerate(theirs.samples):
        name = theirs.classes[label]
        if cases[name][1]:
            assert torch.equal(ours[i][0], theirs[i][0]), name
        else:
            with pytest.raises(OSError):
                theirs[i]
            with pytest.raises(rl.SampleError, match="bad CRC in tEXt"):
                ours[i]
