"""The ``ringloader`` command (console script, and ``python -m ringloader``) and its aliases.

``ringloader <command> [arguments]`` runs one of the tools below; ``ringloader --help`` lists
them and ``ringloader <command> --help`` gives each one's options:

- ``compare``: the side-by-side comparison with torch's DataLoader (:mod:`ringloader.bench`,
  the main job that ``scripts/bench.sh`` runs);
- ``bench``: the native loader benchmark (bench/ringloader_bench.cc), shipped as an executable
  inside the package; its arguments are passed through. pip only generates launchers for
  Python functions, so the launcher replaces itself with the binary (same arguments, exit
  status and signals);
- ``tune``: ``bench --tune``, short trials of threads and prefetch on your data;
- ``pack``: pack an image folder or file list into WebDataset shards (:mod:`ringloader.pack`);
- ``doctor``: inspect the node as a training job would run on it, each finding with its fix
  (:mod:`ringloader.doctor`).

The console scripts from before stay as aliases: ``ringloader-compare`` (= ``ringloader
compare``, also ``python -m ringloader.bench``), ``ringloader-bench`` (= ``ringloader bench``)
and ``ringloader-pack`` (= ``ringloader pack``, also ``python -m ringloader.pack``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

PROG = "ringloader"


def _native_exe() -> Path:
    return Path(__file__).resolve().parent / "bin" / "ringloader-bench"


def _exec_native(name: str, args: Sequence[str]) -> int:
    """Replace this process with the native benchmark binary (``name`` is the command as the
    user typed it, for messages). Returns only when the binary is missing."""
    exe = _native_exe()
    if not os.access(exe, os.X_OK):
        print(f"{name}: {exe} is missing: this ringloader was built without the native benchmark "
              "(RINGLOADER_BUILD_BENCH=OFF); rebuild with it on, or use `ringloader compare`",
              file=sys.stderr)
        return 2
    # The binary's flags are all --long (absl); -h is everyone else's help.
    args = ["--help" if a == "-h" else a for a in args]
    if "--help" in args or "--helpfull" in args:
        what = "--tune" if args[:1] == ["--tune"] else "(also installed as ringloader-bench)"
        print(f"{name}: runs the native benchmark {exe} {what}; its flags:\n", flush=True)
        # absl prints the help and exits with 1; help asked for is a success, as for the others.
        status = subprocess.call([str(exe), *args])
        return 0 if status == 1 else status
    sys.stdout.flush()
    os.execv(exe, ["ringloader-bench", *args])
    return 0  # not reached


def _compare(name: str, args: Sequence[str]) -> int:
    from .bench import main

    return main(list(args), prog=name)


def _bench(name: str, args: Sequence[str]) -> int:
    return _exec_native(name, args)


def _tune(name: str, args: Sequence[str]) -> int:
    return _exec_native(name, ["--tune", *args])


def _pack(name: str, args: Sequence[str]) -> int:
    from .pack import main

    return main(list(args), prog=name)


def _doctor(name: str, args: Sequence[str]) -> int:
    from .doctor import main

    return main(list(args), prog=name, bench_exe=str(_native_exe()))


#: command -> (one line for ``ringloader --help``, runner taking (prog, arguments)).
COMMANDS: dict[str, tuple[str, Callable[[str, Sequence[str]], int]]] = {
    "compare": ("torch's DataLoader against ringloader, side by side: table, verdicts, JSON record",
                _compare),
    "bench": ("the native loader benchmark (no Python): images/s, stage busy time, the limiting "
              "stage", _bench),
    "tune": ("short trials of threads and prefetch on your data; the DataLoader(...) line to paste",
             _tune),
    "pack": ("pack an ImageFolder or a '<path> <label>' list into WebDataset tar shards", _pack),
    "doctor": ("this node as a training job sees it (CPUs, NUMA, GPUs, storage, threads), with fixes",
               _doctor),
}

ALIASES = (("ringloader-compare", "ringloader compare (also python -m ringloader.bench)"),
           ("ringloader-bench", "ringloader bench"),
           ("ringloader-pack", "ringloader pack (also python -m ringloader.pack)"))


def usage() -> str:
    width = max(len(c) for c in COMMANDS)
    lines = [f"usage: {PROG} <command> [arguments]", "",
             f"ringloader's command-line tools ({PROG} <command> --help for a command's options):", ""]
    lines += [f"  {c:<{width}}  {text}" for c, (text, _) in COMMANDS.items()]
    lines += ["", "aliases (the console scripts from before, same programs):"]
    lines += [f"  {a:<18} = {target}" for a, target in ALIASES]
    lines += ["", "options:", "  -h, --help  this list", "  --version   ringloader's version"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``ringloader <command> [arguments]``: run ``command`` with ``arguments``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(usage(), file=sys.stderr)
        print(f"\n{PROG}: error: name a command ({', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    first, rest = args[0], args[1:]
    if first in ("-h", "--help"):
        print(usage())
        return 0
    if first == "help":  # ringloader help [command]
        if not rest:
            print(usage())
            return 0
        first, rest = rest[0], ["--help"]
    if first == "--version":
        from . import __version__

        print(f"{PROG} {__version__}")
        return 0
    if first not in COMMANDS:
        print(f"{PROG}: error: unknown command {first!r}: choose from {', '.join(COMMANDS)} "
              f"({PROG} --help lists them)", file=sys.stderr)
        return 2
    return COMMANDS[first][1](f"{PROG} {first}", rest)


# The aliases (console scripts kept from before).


def bench() -> int:
    """``ringloader-bench``: the same as ``ringloader bench``."""
    return _exec_native("ringloader-bench", sys.argv[1:])


def compare() -> int:
    """``ringloader-compare``: the same as ``ringloader compare``."""
    return _compare("ringloader-compare", sys.argv[1:])


def pack() -> int:
    """``ringloader-pack``: the same as ``ringloader pack``."""
    return _pack("ringloader-pack", sys.argv[1:])
