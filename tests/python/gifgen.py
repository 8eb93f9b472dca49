"""A small GIF writer for byte streams Pillow does not write: frames smaller than or outside the
logical screen, short palettes with indices beyond them, odd LZW code sizes, damage."""

from __future__ import annotations

import struct

import numpy as np


def lzw(indices, bits: int, early_end: int | None = None, end_code_after: int | None = None
        ) -> bytes:
    """LZW codes for `indices`, literals only (clear codes keep the table small), packed LSB
    first. With `early_end`, the end code follows that many indices and the rest is dropped;
    with `end_code_after`, an end code follows that many indices and the rest comes after it."""
    clear, end = 1 << bits, (1 << bits) + 1
    codes, size, nxt, first = [clear], bits + 1, clear + 2, True
    vals = list(int(v) for v in np.asarray(indices).reshape(-1))
    if early_end is not None:
        vals = vals[:early_end]
    for i, v in enumerate(vals):
        if i == end_code_after:
            codes.append((end, size))
        if nxt >= 4000:
            codes.append((clear, size))
            size, nxt, first = bits + 1, clear + 2, True
        codes.append((v, size))
        if first:
            first = False
            continue
        if nxt < 4096:
            if nxt == (1 << size) - 1 and size < 12:
                size += 1
            nxt += 1
    codes.append((end, size))
    codes[0] = (clear, bits + 1)
    acc = nbits = 0
    out = bytearray()
    for c, s in codes:
        acc |= c << nbits
        nbits += s
        while nbits >= 8:
            out.append(acc & 0xFF)
            acc >>= 8
            nbits -= 8
    if nbits:
        out.append(acc & 0xFF)
    return bytes(out)


def sub_blocks(data: bytes, size: int = 255) -> bytes:
    out = bytearray()
    for i in range(0, len(data), size):
        chunk = data[i:i + size]
        out += bytes([len(chunk)]) + chunk
    return bytes(out) + b"\0"


def palette_bytes(colors) -> bytes:
    return b"".join(bytes(c) for c in colors)


def interlace_rows(idx: np.ndarray) -> np.ndarray:
    h = idx.shape[0]
    order = list(range(0, h, 8)) + list(range(4, h, 8)) + list(range(2, h, 4)) + list(range(1, h, 2))
    return idx[order]


def gif(screen: tuple, frames: list, global_palette: bytes | None = None, background: int = 0,
        version: bytes = b"GIF89a", trailer: bool = True) -> bytes:
    """`frames`: dicts with idx (h, w array), x, y, palette (local, bytes), transparency,
    interlace, bits (LZW minimum code size), early_end."""
    out = bytearray(version + struct.pack("<HH", *screen))
    if global_palette is not None:
        n = len(global_palette) // 3
        k = max(1, (n - 1).bit_length())
        out += bytes([0x80 | (k - 1), background, 0]) + global_palette
        out += b"\0" * (3 * (1 << k) - len(global_palette))
    else:
        out += bytes([0, background, 0])
    for f in frames:
        idx = np.asarray(f["idx"], dtype=np.uint8)
        h, w = idx.shape
        if f.get("transparency") is not None:
            out += b"!\xf9\x04" + bytes([1]) + b"\0\0" + bytes([f["transparency"]]) + b"\0"
        flags = 0x40 if f.get("interlace") else 0
        local = f.get("palette")
        if local is not None:
            n = len(local) // 3
            k = max(1, (n - 1).bit_length())
            flags |= 0x80 | (k - 1)
            local = local + b"\0" * (3 * (1 << k) - len(local))
        out += b"," + struct.pack("<HHHH", f.get("x", 0), f.get("y", 0), w, h) + bytes([flags])
        if local is not None:
            out += local
        rows = interlace_rows(idx) if f.get("interlace") else idx
        bits = f.get("bits", max(2, int(idx.max(initial=0)).bit_length()))
        out += bytes([bits]) + sub_blocks(lzw(rows, bits, f.get("early_end"),
                                    f.get("end_code_after")))
    if trailer:
        out += b";"
    return bytes(out)
