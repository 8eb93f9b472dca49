"""Console scripts installed with the wheel.

``ringloader-bench`` is the native benchmark CLI (bench/ringloader_bench.cc), shipped as an
executable inside the package: pip only generates launchers for Python functions, so this one
replaces itself with the binary (same arguments, exit status and signals).
``ringloader-compare`` is the side-by-side comparison with torch's DataLoader (ringloader.bench).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def bench() -> None:
    exe = Path(__file__).resolve().parent / "bin" / "ringloader-bench"
    if not os.access(exe, os.X_OK):
        sys.exit(f"ringloader-bench: {exe} is missing: this ringloader was built without the CLI "
                 "(RINGLOADER_BUILD_BENCH=OFF)")
    os.execv(exe, ["ringloader-bench", *sys.argv[1:]])


def compare() -> int:
    from .bench import main

    return main(prog="ringloader-compare")
