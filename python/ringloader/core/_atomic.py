"""Files written whole or not at all: a new temporary file next to the target, created with
O_EXCL and O_NOFOLLOW (never an existing file, never through a symlink), renamed over it. Used
for what ringloader writes into folders others may share: pack's shards, sidecars and indexes,
and the WebDataset index cache."""

from __future__ import annotations

import json
import os
import secrets
from typing import Any, Callable, Tuple


def create_exclusive(path: str) -> Tuple[int, str]:
    """A new file next to ``path`` under a fresh temporary name: (fd, name). O_EXCL and
    O_NOFOLLOW: never an existing file, never through a symlink; mode 0666 less the umask."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | \
        getattr(os, "O_CLOEXEC", 0)
    head, tail = os.path.split(path)
    for _ in range(100):
        tmp = os.path.join(head, f".{tail}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"cannot create a temporary file next to {path}")


def write_atomic(path: str, write: Callable[[Any], None]) -> None:
    """Writes ``path`` through ``write(file)`` into a new temporary file, then renames it over
    ``path``: a symlink planted at ``path`` is replaced, its target left alone."""
    fd, tmp = create_exclusive(path)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path: str, value: Any, **kwargs: Any) -> None:
    write_atomic(path, lambda f: f.write(json.dumps(value, **kwargs).encode("utf-8")))
