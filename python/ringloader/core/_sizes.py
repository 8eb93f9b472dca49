"""Byte sizes written as text, one rule for every argument that takes them (``max_memory=``,
``ringloader.pack --shard-size``): ``"2GB"`` is 2*10**9, ``"2GiB"`` and ``"2G"`` are 2*2**30,
``"1.5GiB"``, ``"512MB"`` and ``"12345"`` (bytes) work too; case and spaces do not matter."""

from __future__ import annotations

import re

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12}


def parse_size(text: str, name: str) -> int:
    """Bytes of ``text``; ``ValueError`` naming the argument ``name`` for anything else, zero
    included."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"{name} should be bytes or a size like '2GB', '512MiB' or '4G', got {text!r}")
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ValueError(f"{name} should be > 0 bytes, got {text!r}")
    return value
