"""WebDataset shard URLs and indexes: what a :class:`ringloader.WebDataset` knows of its shards
before it reads a sample.

* URLs: brace patterns (``train-{000000..000146}.tar``, ``{a,b}``) and globs expanded, each URL
  classified by the scheme table (``_schemes``): a local path, a ``pipe:COMMAND`` written by
  the caller, or a remote URL (``_remote_shards`` fetches those).
* Member keys: a shard is a tar file whose members are grouped into samples by key, as the
  ``webdataset`` package writes them: the key of a member is its path up to the first ``.`` of
  its last component, the rest is its extension, and consecutive members with one key form a
  sample (``n01440764_10026.jpg`` + ``n01440764_10026.cls``). The rule is the native one
  (``_C.split_member_name``); Python asks it rather than copying it.
* Indexes: where every image member's bytes start and how long they are, and each sample's
  label, from the native scan of a shard's tar headers (or of a ``pipe:`` command's stdout, read
  once), from the ``<shard>.idx.json`` sidecar ``ringloader.pack`` writes (when it matches the
  shard), or from the index cache (``index_cache``) a ``pipe:`` or remote shard's index is kept
  in.
"""

from __future__ import annotations

import concurrent.futures
import glob
import hashlib
import json
import os
import re
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _C
from . import _schemes
from ._atomic import write_json

#: Suffix of the index sidecar that ``ringloader.pack`` writes next to each shard.
INDEX_SUFFIX = ".idx.json"
INDEX_FORMAT = "ringloader-webdataset-index"
IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")
LABEL_KEYS = ("cls", "txt", "json")

_BRACE = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")


# ---- URLs -----------------------------------------------------------------------------------

def _expand_braces(pattern: str) -> List[str]:
    """``{000..146}`` (zero padding kept, as the wider end) and ``{a,b}``, left to right, every
    group of a pattern expanded (innermost first when nested). As in the shell (and the
    ``braceexpand`` package webdataset uses), a group with neither a comma nor a range (awk's
    ``'{print $1}'``, find's ``{}``) and a ``${VAR}`` are kept as written: a ``pipe:`` command
    reaches the shell with them."""
    match = next((m for m in _BRACE.finditer(pattern) if pattern[max(m.start() - 1, 0):m.start()] != "$"
                  and ("," in m.group(1) or _RANGE.match(m.group(1)))), None)
    if match is None:
        return [pattern]
    body = match.group(1)
    numeric = _RANGE.match(body)
    if numeric:
        first, last = numeric.group(1), numeric.group(2)
        lo, hi = int(first), int(last)
        padded = (len(first) > 1 and first.lstrip("-").startswith("0")) or \
            (len(last) > 1 and last.lstrip("-").startswith("0"))
        width = max(len(first), len(last)) if padded else 0
        step = 1 if hi >= lo else -1
        choices = [str(i).zfill(width) for i in range(lo, hi + step, step)]
    else:
        choices = body.split(",")
    head, tail = pattern[:match.start()], pattern[match.end():]
    out: List[str] = []
    for choice in choices:
        out.extend(_expand_braces(head + choice + tail))
    return out


def _expand(urls: Any) -> List[Tuple[str, bool]]:
    """``(url, is_pipe)`` of every shard: ``is_pipe`` only for a ``pipe:COMMAND`` the caller
    wrote (braces expanded in it), never for a name found on disk (see :func:`expand_urls`)."""
    if isinstance(urls, (str, os.PathLike)):
        urls = [urls]
    try:
        items = list(urls)
    except TypeError:
        raise TypeError(f"WebDataset urls must be a str or a list of str, got "
                        f"{type(urls).__name__}") from None
    out: List[Tuple[str, bool]] = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"WebDataset urls must be strings, got {type(item).__name__} {item!r}")
        # A path object names files whatever its text: it is never taken for a command.
        written = isinstance(item, str)
        for url in _expand_braces(os.fspath(item)):
            if written or not _schemes.is_command(url):
                scheme, url = _schemes.classify(url, "WebDataset url")
            else:
                scheme = _schemes.FILE  # a path object names a file whatever its text
            if scheme.streamed:
                out.append((url, True))
                continue
            if scheme.remote:
                out.append((url, False))  # fetched into the shard cache (see WebDataset)
                continue
            if any(c in url for c in "*?["):
                matched = sorted(glob.glob(url))
                if not matched:
                    raise FileNotFoundError(f"WebDataset: the pattern {url!r} matches no file")
                out.extend((_schemes.local(m), False) for m in matched)
            else:
                out.append((_schemes.local(url), False))
    if not out:
        raise ValueError("WebDataset: no shard urls given")
    return out


def expand_urls(urls: Any) -> List[str]:
    """Shard URLs from a string or a list of strings: brace patterns expanded
    (``train-{000000..000146}.tar``, ``{a,b}``), ``file://`` stripped, globs (``*``, ``?``,
    ``[``) matched for local paths (sorted), ``pipe:COMMAND`` kept as is (braces expanded).
    Raises ``ValueError`` for an empty result and ``FileNotFoundError`` for a glob that matches
    nothing.

    Only a ``pipe:COMMAND`` written in ``urls`` is a command. Whatever is found on disk (a glob's
    matches, a path after ``file://``, an ``os.PathLike``) is a file: a relative one whose name
    starts with ``pipe:`` comes back as ``./pipe:...``, so a file named
    ``pipe:touch x; cat a.tar; true .tar`` is read, never run. The result's strings that start
    with ``pipe:`` are therefore exactly the commands written by the caller."""
    return [url for url, _ in _expand(urls)]


# ---- shard indexes --------------------------------------------------------------------------

def split_name(name: str) -> Optional[Tuple[str, str]]:
    """(key, lower-case extension) of a tar member as the shards are grouped (the native rule:
    the key is the path up to the first ``.`` of the last component; ``__info__``-style
    top-level entries are no sample). None for a name that is no sample's member."""
    return _C.split_member_name(name)


def _scan(url: str, pipe: bool, image_exts: Sequence[str], label_key: str,
          label_field: str) -> Dict[str, Any]:
    """The native scan of a local shard (headers only) or, with ``pipe``, of the stdout of the
    ``pipe:`` URL's command (read once)."""
    return dict(_C.scan_webdataset_shard(url, image_exts=list(image_exts), label_key=label_key,
                                         json_field=label_field, pipe=pipe))


def _index_to_json(url: str, scan: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "format": INDEX_FORMAT, "version": 1, "shard": url, "bytes": int(scan["bytes"]),
        "error": scan.get("error", ""),
        "samples": [[k, m, int(o), int(n), int(lab), e] for k, m, o, n, lab, e in zip(
            scan["keys"], scan["members"], scan["offsets"], scan["lengths"], scan["labels"],
            scan["errors"])],
    }


def _index_from_json(data: Dict[str, Any], where: str) -> Dict[str, Any]:
    if data.get("format") != INDEX_FORMAT or data.get("version") != 1:
        raise ValueError(f"{where} is not a ringloader WebDataset index (version 1)")
    rows = data["samples"]
    return {
        "keys": [r[0] for r in rows], "members": [r[1] for r in rows],
        "offsets": np.asarray([r[2] for r in rows], dtype=np.int64),
        "lengths": np.asarray([r[3] for r in rows], dtype=np.int64),
        "labels": np.asarray([r[4] for r in rows], dtype=np.int64),
        "errors": [r[5] if len(r) > 5 else "" for r in rows],
        "bytes": int(data["bytes"]), "error": data.get("error", ""),
        "mtime_ns": data.get("mtime_ns"),
    }


def _load_index(path: str, size: Optional[int] = None,
                mtime_ns: Optional[int] = None) -> Optional[Dict[str, Any]]:
    """The index stored at ``path`` (a pack sidecar or a cached ``pipe:`` index), or None when it
    is missing, unreadable, not an index of this format, or (with ``size`` / ``mtime_ns``) made
    for a shard of another byte size or modification time (a sidecar without one included): the
    caller then indexes the shard itself."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict) or (size is not None and data.get("bytes") != size) or \
                (mtime_ns is not None and data.get("mtime_ns") != mtime_ns):
            return None
        return _index_from_json(data, path)
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


#: Members whose tar headers a sidecar's check reads (first, last and evenly between).
SPOT_CHECKS = 8


def _headers_match(shard: str, index: Dict[str, Any]) -> bool:
    """True when, for up to :data:`SPOT_CHECKS` of the index's members, the 512 bytes before the
    member's data in ``shard`` are a valid tar header (the native parser, checksum verified) of a
    regular file of the member's length and (for names that fit the header) name. A cheap check
    that a sidecar belongs to this shard, beyond its size and mtime (copies keep both)."""
    rows = [i for i, e in enumerate(index["errors"]) if not e and int(index["lengths"][i]) > 0]
    if not rows:
        return True
    step = max(1, (len(rows) - 1) / max(1, SPOT_CHECKS - 1))
    picks = sorted({rows[min(len(rows) - 1, round(k * step))] for k in range(SPOT_CHECKS)})
    try:
        fd = os.open(shard, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        for i in picks:
            offset, length = int(index["offsets"][i]), int(index["lengths"][i])
            if offset < 512:
                return False
            block = os.pread(fd, 512, offset - 512)
            if len(block) != 512:
                return False
            try:
                name, size, regular = _C.parse_tar_header(block)
            except ValueError:
                return False
            member = index["members"][i].encode("utf-8", "surrogateescape")
            if not regular or size != length or (len(member) <= 100 and name != member):
                return False
    finally:
        os.close(fd)
    return True


def default_index_cache() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ringloader", "webdataset")


def _cache_path(url: str, image_exts: Sequence[str], label_key: str, label_field: str,
                index_cache: str) -> str:
    options = {"image_exts": list(image_exts), "label_key": label_key, "label_field": label_field}
    digest = hashlib.sha256(json.dumps([url, options]).encode()).hexdigest()[:32]
    return os.path.join(index_cache, digest + ".json")


def _write_cache(cache_path: str, url: str, scan: Dict[str, Any],
                 remote_copy: Optional[Tuple[int, str]] = None) -> None:
    """``remote_copy``: a remote shard's (size, ETag) of the object the index was made from."""
    os.makedirs(os.path.dirname(cache_path), exist_ok=True)
    data = _index_to_json(url, scan)
    if remote_copy is not None:
        data["remote_copy"] = [int(remote_copy[0]), str(remote_copy[1])]
    write_json(cache_path, data)


def cache_index_as(url: str, local_shard: str, index_cache: str, *,
                   image_exts: Sequence[str] = IMAGE_EXTS, label_key: str = "cls",
                   label_field: str = "label") -> None:
    """Store the index of ``local_shard`` as the cached index of the ``pipe:`` URL ``url``
    (which must stream the same bytes), so a first use does not read the stream to index it."""
    scan = _index_shard(local_shard, False, image_exts, label_key, label_field, None)
    _write_cache(_cache_path(url, image_exts, label_key, label_field, index_cache), url, scan)


def _index_shard(url: str, pipe: bool, image_exts: Sequence[str], label_key: str,
                 label_field: str, index_cache: Optional[str]) -> Dict[str, Any]:
    """The index of one shard: a local shard's ``.idx.json`` sidecar when it matches the shard
    (its recorded byte size and mtime, and a spot check of member headers; made with the same
    label options: pack writes ``.cls``), else a native header scan; a ``pipe:`` shard's
    (``pipe`` True) cached index, else one streaming read, then cached. An index holds byte
    ranges and labels only: the shard it names is never read from it.

    The result also says where it came from: ``index_file`` (the sidecar or cache file it was
    read from or written to, else None) and, for a local shard, ``stat`` (its size and mtime_ns
    before it was indexed, which :meth:`WebDataset.check_shards` compares with)."""
    if pipe:
        cache_path = None
        if index_cache is not None:
            cache_path = _cache_path(url, image_exts, label_key, label_field, index_cache)
            cached = _load_index(cache_path)
            if cached is not None:
                return dict(cached, index_file=cache_path, stat=None)
        scan = _scan(url, True, image_exts, label_key, label_field)
        if scan.get("error") and not len(scan["keys"]):
            # Nothing came out of the command: a wrong URL or command, not a damaged shard.
            raise RuntimeError(f"WebDataset shard {url}: no sample could be read ({scan['error']})")
        written = cache_path is not None and not scan.get("error")
        if written:
            _write_cache(cache_path, url, scan)
        return dict(scan, index_file=cache_path if written else None, stat=None)
    if not os.path.isfile(url):
        raise FileNotFoundError(f"WebDataset shard {url!r} does not exist")
    stat = shard_stat(url)
    sidecar = url + INDEX_SUFFIX
    index = _load_index(sidecar, *stat) if label_key == "cls" else None
    if index is not None:
        exts = [e.lower() for e in image_exts]
        if all((parts := split_name(m)) is not None and parts[1].lower() in exts
               for m in index["members"]) and _headers_match(url, index):
            return dict(index, index_file=sidecar, stat=stat)
    # No sidecar, or one that is not this shard's as it is now (rewritten or replaced since,
    # another shard's, or from before sidecars recorded mtimes): the headers say.
    return dict(_scan(url, False, image_exts, label_key, label_field), index_file=None, stat=stat)



def shard_stat(url: str) -> Tuple[int, int]:
    """(size, mtime_ns) of local shard ``url``: what its index is recorded with, taken before
    it is indexed (OSError when it cannot be stat'ed)."""
    st = os.stat(url)
    return (st.st_size, st.st_mtime_ns)


def check_shard(url: str, was: Optional[Tuple[int, int]], kind: str, path: Optional[str] = None) -> None:
    """Raises ``StaleIndexError`` naming ``url`` when the local shard is not as it was indexed
    (``was``: its :func:`shard_stat` then; None: not a local shard): its size or mtime differ,
    so its recorded byte ranges would read other bytes. ``path``: the file read for ``url``
    when it is another (a ``pipe:`` shard's copy). ``kind`` names the dataset class to
    build again (``WebDataset``, ``VideoShards``). A shard that is gone is not stale: reading
    its samples fails (``on_error``), as for a missing file."""
    from ._source import StaleIndexError

    if was is None:
        return
    try:
        now = shard_stat(path or url)
    except OSError:
        return
    if now == tuple(was):
        return
    what = f"changed size ({was[0]} -> {now[0]} bytes)" if now[0] != was[0] else \
        "was modified (its mtime changed)"
    error = StaleIndexError(
        f"{kind} shard {url} {what} since the dataset was built: its index is out of "
        f"date. Build the {kind} again (it re-indexes the shard).")
    error.path = url
    raise error


def classes_file(first: str, pipe: bool) -> Optional[List[str]]:
    """The class names in ``classes.json`` next to the first shard ``first`` when it is a local
    one (``ringloader.pack`` writes it), else None."""
    if pipe:
        return None
    path = os.path.join(os.path.dirname(first), "classes.json")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if isinstance(data, list) and all(isinstance(c, str) for c in data):
        return data
    return None

class _IndexProgress:
    """Progress of indexing at construction on ``stream``: nothing for the first ``after``
    seconds (most datasets index in less), then a line rewritten in place on a terminal, else a
    line per second at most and one when done."""

    def __init__(self, total: int, streamed: int, after: Optional[float], stream: Any = None):
        self.total, self.streamed, self.after = total, streamed, after
        self.stream = stream if stream is not None else sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.monotonic()
        self.shown = False
        self.last_line = -1.0

    def update(self, done: int) -> None:
        if self.after is None:
            return
        now = time.monotonic()
        elapsed = now - self.start
        if elapsed < self.after:
            return
        final = done == self.total
        if not self.tty and not final and self.shown and now - self.last_line < 1.0:
            return
        line = (f"ringloader.WebDataset: indexed {done}/{self.total} shards "
                f"({self.streamed} streamed from pipe:), {elapsed:.1f} s")
        self.stream.write(("\r" + line + ("\n" if final else "")) if self.tty else line + "\n")
        self.stream.flush()
        self.shown, self.last_line = True, now


def index_shards(expanded: Sequence[Tuple[str, bool]], image_exts: Sequence[str], label_key: str,
                 label_field: str, index_cache: Optional[str], threads: int,
                 progress_after: Optional[float]) -> List[Tuple[str, bool, Dict[str, Any]]]:
    """``(url, pipe, index)`` of every shard, in order, indexed ``threads`` at a time (progress
    shown after ``progress_after`` seconds; None: never). At a failure the shards not yet
    started are dropped, those running finish, and the first failure in shard order is raised
    (the one indexing one by one would raise)."""
    index: Callable[[str, bool], Dict[str, Any]] = lambda url, pipe: _index_shard(  # noqa: E731
        url, pipe, image_exts, label_key, label_field, index_cache)
    if len(expanded) <= 1:
        return [(url, pipe, index(url, pipe)) for url, pipe in expanded]
    streamed = sum(
        1 for url, pipe in expanded if pipe and (index_cache is None or not os.path.isfile(
            _cache_path(url, image_exts, label_key, label_field, index_cache))))
    shown = _IndexProgress(len(expanded), streamed, progress_after)
    pool = concurrent.futures.ThreadPoolExecutor(
        max_workers=min(threads, len(expanded)), thread_name_prefix="wds-index")
    try:
        futures = [pool.submit(index, url, pipe) for url, pipe in expanded]
        pending = set(futures)
        while pending:
            done, pending = concurrent.futures.wait(
                pending, timeout=0.25, return_when=concurrent.futures.FIRST_COMPLETED)
            if any(f.exception() is not None for f in done):
                break
            shown.update(len(futures) - len(pending))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    for future in futures:
        if not future.cancelled() and future.exception() is not None:
            raise future.exception()
    return [(url, pipe, f.result()) for (url, pipe), f in zip(expanded, futures)]


def with_damage(index: Dict[str, Any], url: str) -> Dict[str, Any]:
    """``index`` with its shard's damage (``error``: the shard ends inside a member) as samples
    that fail when read, naming ``url``, so that ``on_error`` sees it."""
    if index.get("error") and len(index["keys"]) and index["errors"][-1]:
        # The shard ends inside its last sample (the scan drops the cut member): say so.
        index = dict(index, errors=list(index["errors"]))
        index["errors"][-1] += f"; the shard is damaged: {index['error']}"
    elif index.get("error"):
        # The shard ends after a whole sample: one failing sample stands for what was
        # lost, so that on_error sees it.
        index = dict(index)
        index["keys"] = list(index["keys"]) + ["(truncated)"]
        index["members"] = list(index["members"]) + ["(shard end)"]
        index["offsets"] = np.append(index["offsets"], 0)
        index["lengths"] = np.append(index["lengths"], 0)
        index["labels"] = np.append(index["labels"], 0)
        index["errors"] = list(index["errors"]) + [f"shard {url}: {index['error']}"]
    return index
