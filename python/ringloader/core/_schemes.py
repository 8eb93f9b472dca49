"""The URL schemes ringloader reads sample data from, in one table.

Every place that classifies a path or a shard URL asks :func:`classify` (or :func:`local`), so a
new scheme (``https://``, ``s3://``) is one row of ``SCHEMES`` plus its reader, never another
``startswith`` somewhere in the package.

* ``file``: a local path, written bare or as ``file://PATH`` (the prefix is stripped).
* ``http``, ``https``, ``s3``: an object fetched natively (libcurl; S3 signed with SigV4) into
  the node-local shard cache, then read as a local file (``remote``; see ``_remote``).
* ``pipe``: ``pipe:COMMAND``, the stdout of a shell command, read once front to back
  (``streamed``). Only text the caller wrote is a command: a name found on disk (a glob's
  match, a path object, a path after ``file://``) is always a file, and :func:`local` makes
  sure no later step can take it for one.

Anything else that looks like ``scheme://`` is refused, naming the URL and what is read.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Tuple

__all__ = ["FILE", "HTTP", "HTTPS", "PIPE", "S3", "SCHEMES", "Scheme", "classify", "is_command", "local"]


class Scheme(NamedTuple):
    name: str
    #: The text a URL of this scheme starts with ("" for a bare local path).
    prefix: str
    #: Read front to back once (no random access, no size known ahead).
    streamed: bool
    #: Whether the prefix is part of what the reader is given (a pipe: command keeps it: the
    #: native reader runs what follows it) or stripped (file://PATH is read as PATH).
    keeps_prefix: bool
    #: Fetched natively into the shard cache before it is read (``_remote``).
    remote: bool = False


FILE = Scheme("file", "file://", streamed=False, keeps_prefix=False)
PIPE = Scheme("pipe", "pipe:", streamed=True, keeps_prefix=True)
HTTP = Scheme("http", "http://", streamed=False, keeps_prefix=True, remote=True)
HTTPS = Scheme("https", "https://", streamed=False, keeps_prefix=True, remote=True)
S3 = Scheme("s3", "s3://", streamed=False, keeps_prefix=True, remote=True)

#: Prefixed schemes, tried in order; a URL matching none is a bare local path (``FILE``).
SCHEMES: Tuple[Scheme, ...] = (PIPE, FILE, HTTP, HTTPS, S3)

_OTHER_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def classify(url: str, what: str = "url") -> Tuple[Scheme, str]:
    """``(scheme, target)`` of ``url`` as the caller wrote it: the target is what the reader
    opens (the path for ``file``, the whole ``pipe:COMMAND`` for ``pipe``). ``ValueError``
    (naming ``what`` and the URL) for an empty command or a scheme that is not read."""
    for scheme in SCHEMES:
        if url.startswith(scheme.prefix):
            rest = url[len(scheme.prefix):]
            if scheme is PIPE and not rest.strip():
                raise ValueError(f"{what} {url!r}: pipe: needs a command")
            return scheme, url if scheme.keeps_prefix else rest
    if _OTHER_SCHEME.match(url):
        raise ValueError(f"{what} {url!r}: only local paths, file://, http://, https://, s3:// "
                         "and pipe:COMMAND are read")
    return FILE, url


def is_command(url: str) -> bool:
    """True when ``url`` would be run as a command (it starts with a command scheme's prefix)."""
    return url.startswith(PIPE.prefix)


def local(path: str) -> str:
    """``path`` (a name found on disk) in a form no later step takes for a command: a relative
    path whose text starts with a command prefix (a file named ``pipe:...``) gets ``./``."""
    return "./" + path if is_command(path) else path


def remote(url: str) -> Scheme | None:
    """The remote scheme (http, https, s3) of ``url``, or None for anything read in place."""
    for scheme in SCHEMES:
        if scheme.remote and url.startswith(scheme.prefix):
            return scheme
    return None
