"""WebDataset tar shards, read natively: ``ringloader.WebDataset``.

A shard is a tar file whose members are grouped into samples by key, as the ``webdataset``
package writes them: the key of a member is its path up to the first ``.`` of its last
component, the rest is its extension, and consecutive members with one key form a sample
(``n01440764_10026.jpg`` + ``n01440764_10026.cls``). A sample's image is its member with one of
``image_exts``; its label comes from the ``.cls`` or ``.txt`` member (an integer in ASCII) or a
field of its ``.json`` member.

Each shard is indexed once: where every image member's bytes start and how long they are.
Samples are then byte ranges of shards, read and decoded by the native pipeline like files of an
ImageFolder, so random access, transforms, ``on_error`` and the DataLoader work unchanged.
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

from . import _C, _order, _remote, _schemes, _source
from ._atomic import write_json
from .datasets import NativeDataset

__all__ = ["WebDataset", "WebDatasetSampler", "expand_urls", "DEFAULT_SHUFFLE_BUFFER",
           "INDEX_SUFFIX", "StaleIndexError"]

#: A shard's index no longer matches the shard (``path`` names it): it changed since it was
#: indexed. A ``RuntimeError``; never a :class:`ringloader.SampleError`, so ``on_error`` does not
#: skip or replace it.
StaleIndexError = _C.StaleIndexError

#: Default size of the per-rank shuffle buffer (samples).
DEFAULT_SHUFFLE_BUFFER = 2000
#: Suffix of the index sidecar that ``ringloader.pack`` writes next to each shard.
INDEX_SUFFIX = ".idx.json"
#: What the native downloader says of a shard whose copy is not the object that was indexed.
STALE_COPY = "changed since the dataset was built"
INDEX_FORMAT = "ringloader-webdataset-index"
PIPE_PREFIX = _schemes.PIPE.prefix
IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")
LABEL_KEYS = ("cls", "txt", "json")
#: Shards indexed at once at construction (a ``pipe:`` shard without a cached index is one
#: streaming read of its command: these overlap; the native scan runs without the GIL).
INDEX_THREADS = 8
#: Seconds of indexing after which progress is shown (``progress=None``).
PROGRESS_AFTER_S = 1.0
#: ``RINGLOADER_PROGRESS=0`` silences the default progress output, ``=1`` shows it at once.
PROGRESS_ENV = "RINGLOADER_PROGRESS"

_BRACE = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")


# ---- URLs -----------------------------------------------------------------------------------

def _expand_braces(pattern: str) -> List[str]:
    """``{000..146}`` (zero padding kept, as the wider end) and ``{a,b}``, left to right, every
    group of a pattern expanded (innermost first when nested)."""
    match = _BRACE.search(pattern)
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
    st = os.stat(url)
    stat = (st.st_size, st.st_mtime_ns)
    sidecar = url + INDEX_SUFFIX
    index = _load_index(sidecar, st.st_size, st.st_mtime_ns) if label_key == "cls" else None
    if index is not None:
        exts = [e.lower() for e in image_exts]
        if all((parts := split_name(m)) is not None and parts[1].lower() in exts
               for m in index["members"]) and _headers_match(url, index):
            return dict(index, index_file=sidecar, stat=stat)
    # No sidecar, or one that is not this shard's as it is now (rewritten or replaced since,
    # another shard's, or from before sidecars recorded mtimes): the headers say.
    return dict(_scan(url, False, image_exts, label_key, label_field), index_file=None, stat=stat)


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


def _progress_delay(progress: Optional[bool]) -> Optional[float]:
    """Seconds after which indexing progress shows, or None for never (see WebDataset)."""
    if progress is None:
        env = os.environ.get(PROGRESS_ENV, "").strip()
        if env == "0":
            return None
        return 0.0 if env == "1" else PROGRESS_AFTER_S
    return 0.0 if progress else None


# ---- the dataset ----------------------------------------------------------------------------

class WebDataset(NativeDataset):
    """Samples of WebDataset tar shards, decoded natively.

    ``urls``: a string or a list of strings, each a local path (``file://`` stripped), a glob
    (``shards/*.tar``), a brace pattern (``train-{000000..000146}.tar``, zero padding kept;
    ``{a,b}``) or ``pipe:COMMAND`` (the shard is the command's stdout, e.g.
    ``pipe:curl -s http://host/train-{000..009}.tar``), or a remote URL: ``http://``,
    ``https://`` or ``s3://bucket/key`` (braces expanded). Shards are read in the order given.

    Remote shards are downloaded whole, natively, into a node-local cache folder ``cache_dir``
    (default ``~/.cache/ringloader/shards``) shared by the processes of the node (one download
    per shard, a file lock), and read from there like local shards; least recently used shards
    are removed to keep the folder within ``cache_limit`` (bytes or a size like ``"50GB"``;
    None: no limit), which may be smaller than the dataset (each epoch then streams through
    the cache, downloading again what it evicted). https uses ``ca_file`` (or
    ``RINGLOADER_CA_BUNDLE``, ``SSL_CERT_FILE``) when given; s3 takes credentials, region and ``AWS_ENDPOINT_URL`` from the environment and
    ``~/.aws``. ``remote_options`` tunes the downloader (``max_connections``, ``max_attempts``,
    ``backoff_initial_s``, ``backoff_max_s``, ``connect_timeout_s``, ``stall_timeout_s``) and
    ``range_reads_below`` (default ``"auto"``): an epoch that wants a few members of an
    uncached shard fetches them by HTTP range requests instead of the shard, while it reads,
    when that costs less on the link as measured (latency and throughput; a number F: when it
    wants under F of the shard's bytes).
    A 403 or 404 raises at construction, and so does a shard that still fails after the retries
    (``ConnectionError``, naming it) unless an earlier run kept its index under ``index_cache``:
    its samples are then known, and fail when read (``on_error``), as do those of a shard that
    cannot be fetched while an epoch runs (with ``on_error="skip"``, an epoch that loses more
    than the DataLoader's ``max_skipped_fraction`` raises). See docs/remote.md.

    Samples group a shard's members by key (the ``webdataset`` package's rule). The image is the
    member whose extension is the first of ``image_exts`` present; the label comes from the
    ``label_key`` member: ``"cls"`` or ``"txt"`` (an integer in ASCII) or ``"json"`` (the
    ``label_field`` field of an object). A sample without an image member, without a label or
    with a bad one, and a shard that ends inside a member (the samples before it are kept) give
    samples that fail when read, handled by the DataLoader's ``on_error``, with the shard and
    member named.

    Indexing: a local shard is indexed at construction from its tar headers (fast), or from the
    ``<shard>.idx.json`` sidecar ``ringloader.pack`` writes when its recorded byte size and mtime
    match and a spot check of member headers agrees. A ``pipe:`` shard is read once, by
    streaming, at its first use, and its index is cached under ``index_cache`` (default
    ``~/.cache/ringloader/webdataset/``, keyed by a hash of the URL and the label options;
    ``None`` disables the cache).

    Stale indexes: a ``pipe:`` stream checks each member's tar header (checksum, regular file,
    length) as it passes; a mismatch ends the epoch with :class:`StaleIndexError` (no
    ``on_error`` policy hides it) and removes the cached index, so that building the dataset
    again re-indexes the shard. Members appended to a ``pipe:`` shard are seen the same way: its
    index keeps the stream's length, and once an epoch has read the shard's last indexed member
    the stream must end there. A local shard whose size or mtime changed since construction
    raises :class:`StaleIndexError` at the next epoch (see :meth:`check_shards`).

    Shards are indexed up to ``INDEX_THREADS`` (8) at a time, so ``pipe:`` commands stream side by
    side; the result is the same as one at a time. When indexing takes over a second, progress
    goes to stderr (``progress=None``, the default; the environment variable
    ``RINGLOADER_PROGRESS=0`` silences it, ``=1`` shows it from the start); ``progress=False``
    never shows it, ``progress=True`` always does.

    Order: ``ringloader.DataLoader(ds, shuffle=True, ...)`` permutes the shards per epoch, gives
    each rank a contiguous equal part of the epoch's samples and shuffles it through a seeded
    buffer of ``shuffle_buffer`` samples (see :class:`WebDatasetSampler`).

    ``dataset[i]`` works for local shards (random access into the tar); ``pipe:`` shards are
    streamed and only the DataLoader's native path reads them. See :class:`NativeDataset` for
    ``transform``, ``target_transform``, ``strict`` and ``exif_transpose``.

    Raises:
        TypeError: ``urls`` not a string or a list of strings; ``dataset[i]`` (or a transform
            that runs per sample) over ``pipe:`` shards.
        ValueError: a URL scheme other than a local path, ``file://``, ``http://``,
            ``https://``, ``s3://`` or ``pipe:`` (``ftp://``, ``gs://``, ...); a ``pipe:``
            without a command; no URL; shards that hold no sample; a bad ``label_key``,
            ``label_field``, ``image_exts``, ``shuffle_buffer`` or ``progress``.
        FileNotFoundError: a local shard, or every match of a glob, is missing.
        ConnectionError: a remote shard that could not be downloaded at construction (after the
            retries) and whose index no earlier run kept (the message names it and why).
        RuntimeError: a ``pipe:`` command that yields no sample while it is indexed (the
            message names it).
        StaleIndexError: a shard changed since it was indexed (at ``iter()``, ``dataset[i]``
            or mid-epoch for a stream).

    Examples:
        >>> import ringloader as rl
        >>> from ringloader.pack import pack
        >>> from ringloader.sample_data import make_sample_dataset
        >>> root = make_sample_dataset("photos", num_images=8, num_classes=2)
        >>> pack(str(root), "shards", shard_size=400_000)["shards"]  # or: ringloader pack photos shards
        3
        >>> ds = rl.WebDataset("shards/shard-{000000..000002}.tar")
        >>> len(ds), ds[0][1]
        (8, 0)
        >>> loader = rl.DataLoader(ds, batch_size=4, shuffle=True)  # shards and members shuffled
    """

    def __init__(
        self,
        urls: Any,
        transform: Any = None,
        target_transform: Optional[Callable[[int], Any]] = None,
        *,
        label_key: str = "cls",
        label_field: str = "label",
        image_exts: Sequence[str] = IMAGE_EXTS,
        shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
        index_cache: Optional[str] = "default",
        classes: Optional[Sequence[str]] = None,
        strict: bool = False,
        exif_transpose: bool = False,
        progress: Optional[bool] = None,
        cache_dir: Optional[str] = None,
        cache_limit: Any = None,
        ca_file: Optional[str] = None,
        remote_options: Optional[Dict[str, Any]] = None,
    ):
        if label_key not in LABEL_KEYS:
            raise ValueError(f"WebDataset label_key must be one of {', '.join(LABEL_KEYS)}, got "
                             f"{label_key!r}")
        if not isinstance(label_field, str) or not label_field:
            raise ValueError(f"WebDataset label_field must be a non-empty string, got "
                             f"{label_field!r}")
        if isinstance(image_exts, str):
            image_exts = [image_exts]
        image_exts = [str(e).lower().lstrip(".") for e in image_exts]
        if not image_exts:
            raise ValueError("WebDataset image_exts is empty")
        if isinstance(shuffle_buffer, bool) or not isinstance(shuffle_buffer, (int, np.integer)) \
                or shuffle_buffer < 0:
            raise ValueError(f"WebDataset shuffle_buffer must be an int >= 0, got "
                             f"{shuffle_buffer!r}")
        if index_cache == "default":
            index_cache = default_index_cache()
        expanded = _expand(urls)
        self.urls = [url for url, _ in expanded]
        #: Per shard: the file its samples are read from (a remote shard's cached copy).
        self.shard_paths = list(self.urls)
        # remote_copies (the property).
        self._remote_copies: List[Optional[Tuple[int, Optional[str]]]] = [None] * len(self.urls)
        self._fetcher: Optional[_remote.RemoteFetcher] = None
        #: Per remote shard that could not be fetched at the last epoch's start: the error.
        self._fetch_errors: Dict[int, str] = {}
        #: The downloads the last epoch's start left running (see check_shards), or None.
        self._background: Optional[Any] = None
        #: The shards they download, in their order (emptied once their results are taken in).
        self._background_shards: List[int] = []
        #: Cache entries whose reads go to a sparse copy of the members fetched by range this
        #: epoch (begin_reads): {entry: copy}.
        self._redirects: Dict[str, str] = {}
        #: The range reads the last epoch's start left running (a _C.BackgroundRanges), or None.
        self._ranges: Optional[Any] = None
        #: One remote URL per server, for link_estimates (made when first asked).
        self._link_urls: Optional[List[str]] = None
        #: check_unchanged left the remote shards to begin_reads (which knows the epoch's plan).
        self._reads_due = False
        unfetched: Dict[int, str] = {}
        remote = [s for s, (url, pipe) in enumerate(expanded)
                  if not pipe and _remote.remote_scheme(url) is not None]
        self.label_key, self.label_field = label_key, label_field
        self.image_exts = tuple(image_exts)
        self.index_cache = None if index_cache is None else os.fspath(index_cache)
        #: Remote shards whose index (and the size and ETag of the object it was made from) an
        #: earlier run kept under index_cache: not downloaded now, but at the first epoch's start.
        known: Dict[int, Dict[str, Any]] = {}
        if remote:
            self._fetcher = _remote.RemoteFetcher(cache_dir, cache_limit, ca_file, remote_options)
            for s in remote:
                index = self._known_remote_index(self.urls[s])
                if index is not None:
                    known[s] = index
            if label_key == "cls":
                known.update(self._remote_sidecars([s for s in remote if s not in known]))
            for s, index in known.items():
                self._remote_copies[s] = index["remote_copy"]
                self.shard_paths[s] = _C.shard_cache_entry_path(self._fetcher.cache_dir,
                                                                self.urls[s])
            unfetched = self._fetch_remote([s for s in remote if s not in known],
                                           construction=True)
            self._raise_unknown(unfetched)
            fetched = set(remote) - set(unfetched) - set(known)
            expanded = [(self.shard_paths[s], pipe) if s in fetched else (url, pipe)
                        for s, (url, pipe) in enumerate(expanded)]
        elif cache_dir is not None or cache_limit is not None:
            _remote.cache_limit_bytes(cache_limit)  # a bad value is an error whatever the urls
        #: Per shard: True when it is the stdout of a ``pipe:`` command written in ``urls``.
        self.url_pipes = [pipe for _, pipe in expanded]
        self.shuffle_buffer = int(shuffle_buffer)
        keys: List[str] = []
        members: List[str] = []
        offsets, lengths, labels = [], [], []
        errors: List[str] = []
        sizes: List[int] = []
        #: Per shard: the sidecar or cache file its index was read from or stored in (or None).
        self.index_files: List[Optional[str]] = []
        #: Per local shard: (size, mtime_ns) when it was indexed; None for a pipe: shard.
        self.shard_stats: List[Optional[Tuple[int, int]]] = []
        #: Per pipe: shard indexed whole: the stream's length then (0 for the others), which a
        #: stream must end at (members appended since make its index stale; see byte_ranges).
        self.stream_bytes: List[int] = []
        if progress is not None and not isinstance(progress, bool):
            raise ValueError(f"WebDataset progress must be None, True or False, got {progress!r}")
        indexed = iter(self._index_all(
            [e for s, e in enumerate(expanded) if s not in unfetched and s not in known],
            _progress_delay(progress)))
        for s in range(len(expanded)):
            if s in unfetched:
                url, pipe = self.urls[s], False
                index = self._unfetched_index(url, unfetched[s])
            elif s in known:
                url, pipe, index = self.urls[s], False, known[s]
            else:
                url, pipe, index = next(indexed)
                again = self._fetcher.refetch_if_cut(self.urls[s]) if index.get("error") and \
                    self._remote_copies[s] is not None else None  # type: ignore[union-attr]
                if again is not None:  # a cut copy in the cache: indexed again, whole
                    self._remote_copies[s] = (int(again["size"]), str(again["etag"]))
                    url, pipe, index = self._index_all([(again["path"], pipe)], None)[0]
            if self._remote_copies[s] is not None:
                url = self.urls[s]
                if self.index_cache is not None and s not in known:
                    # Kept so that a later run builds the dataset without downloading the shard,
                    # and one that cannot fetch it still knows its samples (the dataset's length
                    # and order stay those of this run).
                    _write_cache(self._remote_index_path(url), url, index,
                                 remote_copy=self._remote_copies[s])
                index = dict(index, stat=None, index_file=None)
            self.index_files.append(index.get("index_file"))
            self.shard_stats.append(index.get("stat"))
            self.stream_bytes.append(int(index.get("bytes", 0)) if pipe and not index.get("error")
                                     else 0)
            count = len(index["keys"])
            if index.get("error") and count and index["errors"][-1]:
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
                count += 1
            keys += list(index["keys"])
            members += list(index["members"])
            offsets.append(np.asarray(index["offsets"], dtype=np.int64))
            lengths.append(np.asarray(index["lengths"], dtype=np.int64))
            labels.append(np.asarray(index["labels"], dtype=np.int64))
            errors += [str(e) for e in index["errors"]]
            sizes.append(count)
        if sum(sizes) == 0:
            raise ValueError(f"WebDataset: the shards hold no samples ({self.urls[0]!r}"
                             f"{' ...' if len(self.urls) > 1 else ''})")
        self.keys, self.members = keys, members
        self.offsets = np.concatenate(offsets)
        self.lengths = np.concatenate(lengths)
        self.sample_errors = errors
        self.shard_sizes = np.asarray(sizes, dtype=np.int64)
        self.shard_starts = np.concatenate([[0], np.cumsum(self.shard_sizes)]).astype(np.int64)
        shard_of = np.repeat(np.arange(len(self.urls)), self.shard_sizes)
        paths = [self.shard_paths[s] for s in shard_of]
        label_list = np.concatenate(labels).tolist()
        if classes is None:
            classes = self._classes_file() or [str(i) for i in range(max(label_list) + 1)]
        super().__init__(None, paths, label_list, list(classes), transform, target_transform,
                         strict, exif_transpose)

    def _index_all(self, expanded: Sequence[Tuple[str, bool]],
                   progress_after: Optional[float]) -> List[Tuple[str, bool, Dict[str, Any]]]:
        """``(url, pipe, index)`` of every shard, in order, indexed ``INDEX_THREADS`` at a time.
        At a failure the shards not yet started are dropped, those running finish, and the
        first failure in shard order is raised (the one indexing one by one would raise)."""
        index = lambda url, pipe: _index_shard(  # noqa: E731
            url, pipe, self.image_exts, self.label_key, self.label_field, self.index_cache)
        if len(expanded) <= 1:
            return [(url, pipe, index(url, pipe)) for url, pipe in expanded]
        streamed = sum(
            1 for url, pipe in expanded if pipe and (self.index_cache is None or not os.path.isfile(
                _cache_path(url, self.image_exts, self.label_key, self.label_field,
                            self.index_cache))))
        shown = _IndexProgress(len(expanded), streamed, progress_after)
        pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=min(INDEX_THREADS, len(expanded)), thread_name_prefix="wds-index")
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

    def _remote_index_path(self, url: str) -> str:
        assert self.index_cache is not None
        return _cache_path(url, self.image_exts, self.label_key, self.label_field,
                           self.index_cache)

    def _known_remote_index(self, url: str) -> Optional[Dict[str, Any]]:
        """The index an earlier run kept for the remote shard ``url``, with ``remote_copy``, the
        (size, ETag) of the object it was made from; None when there is none, it was made
        before sizes were kept, or the shard was damaged (then it is downloaded and indexed
        now)."""
        if self.index_cache is None:
            return None
        path = self._remote_index_path(url)
        index = _load_index(path)
        if index is None or index.get("error"):
            return None
        try:
            with open(path, encoding="utf-8") as f:
                size, etag = json.load(f)["remote_copy"]
            copy = (int(size), str(etag))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return dict(index, remote_copy=copy)

    def _remote_sidecars(self, shards: Sequence[int]) -> Dict[int, Dict[str, Any]]:
        """The indexes of the remote ``shards`` from the pack sidecars next to them on the server
        (``URL.idx.json``, small), for those that have one: the shard itself is then downloaded
        at the first epoch's start. A sidecar names the shard's size but not its ETag (None:
        taken from that download)."""
        if not shards:
            return {}
        assert self._fetcher is not None
        results = self._fetcher.fetch([self.urls[s] + INDEX_SUFFIX for s in shards])
        out: Dict[int, Dict[str, Any]] = {}
        for s, r in zip(shards, results):
            # No sidecar (404, or 403 from S3 without list rights) or none readable: the shard
            # is downloaded and indexed now, as without sidecars.
            index = None if "error" in r else _load_index(r["path"])
            if index is not None and not index.get("error"):
                out[s] = dict(index, remote_copy=(int(index["bytes"]), None))
        return out

    def _kept_index(self, url: str) -> Optional[Dict[str, Any]]:
        """The index an earlier run kept under ``index_cache`` for the remote shard ``url``
        (whatever it says of the shard's damage), or None."""
        return None if self.index_cache is None else _load_index(self._remote_index_path(url))

    def _raise_unknown(self, unfetched: Dict[int, str]) -> None:
        """Construction cannot learn the samples of a remote shard that could not be fetched
        (after the retries) and whose index no earlier run kept: the dataset's length and order
        would be wrong. Raises ``ConnectionError`` naming those shards and why."""
        unknown = [s for s in sorted(unfetched) if self._kept_index(self.urls[s]) is None]
        if not unknown:
            return
        named = "; ".join(f"{self.urls[s]}: {unfetched[s]}" for s in unknown[:3])
        more = f"; and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        raise ConnectionError(
            f"WebDataset: {len(unknown)} of {len(self.urls)} shards could not be downloaded, so "
            f"their samples cannot be known ({named}{more}). Check that the server is up and "
            "the URLs are right, then build the WebDataset again (remote_options max_attempts "
            "and backoff_max_s make the downloads retry longer). An index kept under "
            "index_cache by a run that could read the shards lets a dataset be built while "
            "they are out of reach.")

    def _unfetched_index(self, url: str, error: str) -> Dict[str, Any]:
        """The index of a remote shard that could not be fetched, kept by an earlier run
        (``index_cache``; :meth:`_raise_unknown` raised without one): every sample failing with
        ``error``."""
        why = f"shard {url}: {error}"
        known = self._kept_index(url)
        assert known is not None
        return dict(known, errors=[why] * len(known["keys"]), error="", index_file=None)

    def _fetch_remote(self, shards: Sequence[int], construction: bool) -> Dict[int, str]:
        """Brings the remote ``shards`` into the cache (downloading those not there) and points
        ``shard_paths`` at the copies. Returns {shard: error} for those that could not be fetched
        after the retries; a 404, 403 or bad URL raises. After construction, a copy that is not
        the one indexed (another size or ETag: the object changed) raises StaleIndexError."""
        assert self._fetcher is not None
        results = self._fetcher.fetch([self.urls[s] for s in shards])
        failed: Dict[int, str] = {}
        for s, r in zip(shards, results):
            if "error" in r:
                _remote.raise_if_fatal(r)
                failed[s] = r["error"]
                continue
            copy = (int(r["size"]), str(r["etag"]))
            was = self._remote_copies[s]
            if was is not None and was[1] is None and was[0] == copy[0]:
                was = self._remote_copies[s] = copy  # indexed from a sidecar: its ETag is this one
            if construction:
                self._remote_copies[s] = copy
            elif was is not None and copy != was:
                error = StaleIndexError(
                    f"WebDataset shard {self.urls[s]} changed since the dataset was built "
                    f"({was[0]} bytes, ETag {was[1] or 'none'} -> {copy[0]} bytes, ETag "
                    f"{copy[1] or 'none'}): its index is out of date. Build the WebDataset again "
                    f"(it re-indexes the shard).")
                error.path = self.urls[s]
                raise error
            self.shard_paths[s] = r["path"]
        return failed

    def _classes_file(self) -> Optional[List[str]]:
        """``classes.json`` next to the first local shard (``ringloader.pack`` writes it)."""
        first = self.urls[0]
        if self.url_pipes[0]:
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

    def _name(self) -> str:
        return f"ringloader.WebDataset({self.urls[0]!r}{', ...' if len(self.urls) > 1 else ''})"

    @property
    def streamed(self) -> bool:
        """True when some shard is a ``pipe:`` stream (no random access)."""
        return any(self.url_pipes)

    def describe(self) -> str:
        """What the source is (see ``ringloader._source``): its shards, samples and classes."""
        kind = "pipe: streams" if all(self.url_pipes) else \
            "local shards and pipe: streams" if self.streamed else "local shards"
        return (f"ringloader.WebDataset: {len(self)} samples, {len(self.classes)} classes, "
                f"{len(self.urls)} {kind} (first {self.urls[0]!r})")

    def default_sampler(self, num_replicas: Optional[int], rank: Optional[int], shuffle: bool,
                        seed: int, drop_last: bool, generator: Any = None) -> "WebDatasetSampler":
        """The WebDataset order (shards permuted, a part per rank, a shuffle buffer), seeded by
        ``seed`` or, when a generator is given, its ``initial_seed()``; not sharded without
        ``num_replicas``."""
        return WebDatasetSampler.default_for(self, num_replicas, rank, shuffle, seed, drop_last,
                                             generator)

    @property
    def read_ahead_off(self) -> Optional[str]:
        """Why the next epoch must not be read ahead, or None: the remote shards exceed
        ``cache_limit``, so the current epoch evicts the next one's first shards as it goes."""
        limit = 0 if self._fetcher is None else self._fetcher.cache_limit
        total = sum(c[0] for c in self._remote_copies if c is not None)
        if limit and total > limit:
            return (f"the remote shards ({total} bytes) exceed the WebDataset's cache_limit "
                    f"({limit} bytes): each epoch downloads again what the last one evicted")
        return None

    @property
    def remote_copies(self) -> List[Optional[Tuple[int, Optional[str]]]]:
        """Per remote shard: (size, ETag) of the copy it was indexed from (ETag None: from a pack
        sidecar, not known before the download, learnt once it is); None for the others."""
        self._take_in_downloads()
        return self._remote_copies

    def _take_in_downloads(self) -> None:
        """The ETags of shards indexed from pack sidecars, learnt from the epoch-start downloads
        once all of them have landed (or failed)."""
        background, shards = self._background, self._background_shards
        if background is None or not shards or background.finished() < len(shards):
            return
        self._background_shards = []
        for s, r in zip(shards, background.wait()):
            was = self._remote_copies[s]
            if "error" not in r and was is not None and was[1] is None and \
                    was[0] == int(r["size"]):
                self._remote_copies[s] = (was[0], str(r["etag"]))

    def check_unchanged(self) -> None:
        if self._fetcher is None:
            self.check_shards(background=True)
            return
        # The remote shards wait for begin_reads: whether each is downloaded or read by range,
        # and in which order, depends on what the epoch's plan wants of it.
        self._reads_due = True
        self.check_shards([s for s, c in enumerate(self._remote_copies) if c is None])

    reads_by_plan = True  # begin_reads: the members the epoch wants of remote shards
    def begin_reads(self, wanted: Optional[np.ndarray]) -> bool:
        """An epoch's start, once its plan is drawn: ``wanted`` holds the dataset's sample
        indices the epoch reads in this process, in the plan's order (None: unknown, read every
        shard whole, in the dataset's order). A remote shard not in the cache whose wanted
        members cost less by range than the whole shard (``range_reads_below``) is not
        downloaded: its wanted members are fetched by HTTP range requests into a sparse copy
        the readers read instead (none at all when it wants none of them). Both kinds run on native threads while the epoch reads,
        the shards in the order the plan first reads them; a reader coming to a shard still in
        flight waits for it. Returns True when a shard is read from such a copy (the DataLoader
        then reads no epoch ahead: the copy holds only this epoch's members)."""
        if not self._reads_due:
            return False
        self._reads_due = False
        self._close_ranges()
        self._lift_redirects()
        fetcher = self._fetcher
        assert fetcher is not None
        remote = [s for s, c in enumerate(self._remote_copies) if c is not None]
        ranged: Dict[int, np.ndarray] = {}
        order = remote
        if wanted is not None:
            wanted = np.asarray(wanted, dtype=np.int64)
            wanted = wanted[(wanted >= 0) & (wanted < len(self.offsets))]
            shard_of = np.searchsorted(self.shard_starts, wanted, side="right") - 1
            # The shards in the order the plan first reads them, then those it reads none of.
            first = np.unique(shard_of, return_index=True)
            read = [int(s) for s in first[0][np.argsort(first[1], kind="stable")]]
            order = [s for s in read if self._remote_copies[s] is not None]
            first_read = set(order)
            order += [s for s in remote if s not in first_read]
            wanted = np.unique(wanted)
            shard_of = np.searchsorted(self.shard_starts, wanted, side="right") - 1  # sorted
            for s in remote if fetcher.range_reads else []:
                size = self._remote_copies[s][0]  # type: ignore[index]
                if os.path.exists(self.shard_paths[s]):
                    continue
                mine = wanted[np.searchsorted(shard_of, s):np.searchsorted(shard_of, s, "right")]
                if fetcher.by_range(self.urls[s], size, self.offsets[mine], self.lengths[mine]):
                    ranged[s] = mine
        copies = []
        for s in order:
            if s not in ranged:
                continue
            self._fetch_errors.pop(s, None)
            samples = ranged[s][self.lengths[ranged[s]] > 0]
            if len(samples):
                size, etag = self._remote_copies[s]  # type: ignore[misc]
                copy = f"{self.shard_paths[s]}.ranges-{os.getpid()}"
                copies.append((self.urls[s], copy, size, etag, self.offsets[samples],
                               self.lengths[samples], self.shard_paths[s]))
                # Reads of the entry go to the copy, once its ranges landed (they wait for them).
                _C.redirect_shard(self.shard_paths[s], copy)
                self._redirects[self.shard_paths[s]] = copy
        if copies:
            self._ranges = fetcher.start_ranges(copies)
        self.check_shards([s for s in order if s not in ranged], background=True)
        return bool(self._redirects)

    def _close_ranges(self) -> None:
        """Stops the range reads an epoch's start left running and waits for their transfers."""
        ranges, self._ranges = getattr(self, "_ranges", None), None
        if ranges is not None:
            ranges.close()

    def link_estimates(self) -> List[Dict[str, Any]]:
        """Per host of the remote shards: this process's estimate of the link (``host``,
        ``latency_s`` to a response's first byte, ``bytes_per_s`` one transfer moves,
        ``latency_samples`` and ``rate_samples`` measured: 0 means the prior of 50 ms and
        100 MB/s). ``range_reads_below="auto"`` decides from these."""
        if self._fetcher is None:
            return []
        if self._link_urls is None:
            # One URL per server (or bucket): loader.stats() asks at every call.
            by_server: Dict[str, str] = {}
            for s, copy in enumerate(self._remote_copies):
                if copy is not None:
                    by_server.setdefault(self.urls[s].split("/")[2], self.urls[s])
            self._link_urls = list(by_server.values())
        seen: Dict[str, Dict[str, Any]] = {}
        for url in self._link_urls:
            link = self._fetcher.link_estimate(url)
            seen.setdefault(link["host"], link)
        return list(seen.values())

    def _lift_redirects(self, entries: Optional[Sequence[str]] = None) -> None:
        """Reads of these entries (default all) go to the cache again; their copies removed."""
        for entry in list(self._redirects) if entries is None else entries:
            copy = self._redirects.pop(entry, None)
            if copy is None:
                continue
            _C.redirect_shard(entry, "")
            try:
                os.unlink(copy)
            except OSError:
                pass

    def close_downloads(self) -> None:
        """Stops the downloads an epoch's start left running (their shards' samples then fail
        as not downloaded) and waits for their transfers to close."""
        background, self._background = self._background, None
        self._background_shards = []
        if background is not None:
            background.close()
        self._close_ranges()
        if getattr(self, "_redirects", None):
            self._lift_redirects()

    def __getstate__(self) -> Dict[str, Any]:
        # The downloads are this process's (native threads): a copy starts its own if it needs.
        state = super().__getstate__()
        state["_background"], state["_background_shards"] = None, []
        state["_redirects"] = {}  # this process's sparse copies (a copy fetches its own)
        state["_ranges"] = None
        return state

    def __del__(self) -> None:
        try:
            self.close_downloads()
        except Exception:  # noqa: BLE001 - at interpreter exit the module may be half gone
            pass

    def explain_error(self, exc: BaseException, index: Optional[int]) -> BaseException:
        """A sample error names the shard member; a ``pipe:`` stream whose index went stale
        says what to do (:meth:`stale_index_error`)."""
        if index is None:
            return self.stale_index_error(exc) if isinstance(exc, StaleIndexError) else exc
        fetch_error = self._fetch_errors.get(self.shard_of(index))
        if STALE_COPY in str(exc):
            # A shard downloaded (or read by range) while the epoch ran is not the object that
            # was indexed.
            url = self.urls[self.shard_of(index)]
            # A new WebDataset would read a kept index again: it must go first.
            kept = self.index_cache is not None and os.path.exists(self._remote_index_path(url))
            todo = f"Delete its kept index {self._remote_index_path(url)} and build the " \
                "WebDataset again" if kept else \
                "Build the WebDataset again (it re-indexes the shard)"
            error = StaleIndexError(f"{exc}: its index is out of date. {todo}.")
            error.path = url
            return error
        if self.members[index] in str(exc) and fetch_error is None:
            return exc
        why = f"; the shard could not be downloaded: {fetch_error}" if fetch_error else ""
        new = type(exc)(f"{exc} [{self.describe_sample(index)}{why}]")
        for name in ("index", "path", "reason", "code"):
            if hasattr(exc, name):
                setattr(new, name, getattr(exc, name))
        return new

    def shard_of(self, index: int) -> int:
        return int(np.searchsorted(self.shard_starts, index, side="right")) - 1

    def describe_sample(self, index: int) -> str:
        """``shard S, member M`` of sample ``index``."""
        return f"shard {self.urls[self.shard_of(index)]}, member {self.members[index]}"

    def __getitem__(self, key: Any):
        index = getattr(key, "index", key)
        try:
            index = int(index)
        except (TypeError, ValueError):
            return super().__getitem__(key)
        if -len(self) <= index < len(self):
            self.check_shards([self.shard_of(index % len(self))])
        return super().__getitem__(key)

    def _single_loader(self) -> "_C.Loader":
        if self.streamed:
            raise TypeError(
                f"{self._name()}: samples of pipe: shards cannot be read one at a time (dataset[i], "
                "or a transform that runs per sample in Python): a stream has no random access. "
                "Iterate it with ringloader.DataLoader and a transform that runs natively to a "
                "fixed size, or use local shards.")
        return super()._single_loader()

    def byte_ranges(self) -> Dict[str, Any]:
        pipes = np.repeat(np.asarray(self.url_pipes, dtype=bool), self.shard_sizes)
        # A pipe: stream's last member read (the last without an error) carries the stream's
        # length when indexed: the stream is then read to its end, which must be there, so that
        # members appended since are a stale index like any other change.
        ends = np.zeros(len(self.offsets), dtype=np.int64)
        for s, end in enumerate(getattr(self, "stream_bytes", [])):
            if not end:
                continue
            lo, hi = int(self.shard_starts[s]), int(self.shard_starts[s + 1])
            read = [i for i in range(lo, hi) if not self.sample_errors[i] and self.lengths[i] > 0]
            if read:
                ends[read[-1]] = end
        # Every range is a member's data: a stream checks the tar header before it as it passes.
        return {"offsets": self.offsets, "lengths": self.lengths, "errors": self.sample_errors,
                "pipes": pipes, "tar_members": np.ones(len(self.offsets), dtype=bool),
                "stream_ends": ends}

    def check_shards(self, shards: Optional[Sequence[int]] = None,
                     background: bool = False) -> None:
        """Raises :class:`StaleIndexError` when a local shard (of ``shards``, default all) is
        not as it was indexed: its size or modification time differ. Its index would read wrong
        bytes and labels; the DataLoader calls this at each epoch's start, ``dataset[i]`` for its
        shard. A shard that is gone is not stale: reading its samples fails (``on_error``), as
        for a missing file. (A ``pipe:`` shard is checked as it streams, member by member.)

        A remote shard missing from the cache is downloaded now; with ``background`` (an epoch's
        start) the downloads run on a native thread in shard order while the epoch reads, each
        read of a shard waiting for it to land, and a copy that is not the one indexed fails
        its samples with a :class:`StaleIndexError`."""
        wanted = range(len(self.urls)) if shards is None else shards
        if self._redirects:
            # Read whole from now on: a copy holds only the members an epoch fetched by range.
            self._lift_redirects([self.shard_paths[s] for s in wanted])
        missing = []
        for s in wanted:
            if self._remote_copies[s] is None:
                continue
            # Not in the cache, or not checked by this process yet (size, checksum): through the
            # cache, which fetches or checks it. Marks it used for the eviction order.
            if not _C.shard_cache_entry_ready(self.shard_paths[s], self._remote_copies[s][0]):
                missing.append(s)
        if background and self.read_ahead_off is not None:
            # The shards exceed the cache: the epoch's downloads take every shard in (those in
            # the cache at once), so that one evicted while the epoch runs is fetched again, and
            # the folder is trimmed back to the limit as the readers move on.
            missing = [s for s in wanted if self._remote_copies[s] is not None]
        if missing:
            # Into the cache: not downloaded yet (the dataset was built from kept indexes), or
            # evicted since. One that cannot be fetched now fails its samples when they are read
            # (on_error), and their errors say why (explain_error).
            for s in missing:
                self._fetch_errors.pop(s, None)
            if background:
                assert self._fetcher is not None
                self._take_in_downloads()
                # The new downloads take over the shards first, then the old ones close: a
                # reader of the epoch read ahead never finds a shard it waits for unregistered.
                before = self._background
                self._background = self._fetcher.start(
                    [self.urls[s] for s in missing],
                    [self._remote_copies[s] for s in missing])  # type: ignore[misc]
                self._background_shards = list(missing)
                if before is not None:
                    before.close()
            else:
                self._fetch_errors.update(self._fetch_remote(missing, construction=False))
        for s in wanted:
            was = self.shard_stats[s]
            if was is None:
                continue
            url = self.urls[s]
            try:
                st = os.stat(url)
            except OSError:
                continue
            now = (st.st_size, st.st_mtime_ns)
            if now == was:
                continue
            what = f"changed size ({was[0]} -> {now[0]} bytes)" if now[0] != was[0] else \
                "was modified (its mtime changed)"
            error = StaleIndexError(
                f"WebDataset shard {url} {what} since the dataset was built: its index is out of "
                f"date. Build the WebDataset again (it re-indexes the shard).")
            error.path = url
            raise error

    def stale_index_error(self, exc: BaseException) -> BaseException:
        """A StaleIndexError from a ``pipe:`` stream of this dataset, told what to do: the cached
        index of that shard is removed, so building the WebDataset again indexes it afresh."""
        path = getattr(exc, "path", None)
        for s, url in enumerate(self.urls):
            if not self.url_pipes[s] or url != path:
                continue
            cache = self.index_files[s]
            if cache is None:
                advice = "Build the WebDataset again (it re-indexes the shard)."
            else:
                try:
                    os.unlink(cache)
                    advice = (f"Its cached index {cache} was removed: build the WebDataset again "
                              "to re-index the shard.")
                except FileNotFoundError:
                    advice = (f"Its cached index {cache} is already gone: build the WebDataset "
                              "again to re-index the shard.")
                except OSError as why:
                    advice = (f"Delete its cached index {cache} (it could not be removed: "
                              f"{why.strerror}) and build the WebDataset again.")
            new = StaleIndexError(f"{exc} {advice}")
            new.path = path
            return new
        return exc

    def __repr__(self) -> str:
        return (f"ringloader.WebDataset(shards={len(self.urls)}, samples={len(self)}, "
                f"classes={len(self.classes)}, transform={self.transform!r})")


class WebDatasetSampler(_order.ShardOrder):
    """The epoch order of a :class:`WebDataset`, replayable from a few integers.

    Rule, per epoch (``seed``, ``epoch``):

    1. shard order: the shards as given, or, with ``shuffle``, permuted by a generator seeded
       with (``seed``, ``epoch``);
    2. the global sequence: every shard's samples, in shard order;
    3. rank ``r`` of ``W`` takes the contiguous part ``[r * L, (r + 1) * L)`` of it, where
       ``L = ceil(N / W)`` (``drop_last=False``: the sequence is padded by wrapping round to its
       own head, as ``DistributedSampler`` pads) or ``floor(N / W)`` (``drop_last=True``: the
       last ``N mod W`` samples are left out of this epoch); every rank gets ``L`` samples, so
       the same number of batches;
    4. with ``shuffle``, the rank's part goes through a shuffle buffer of ``shuffle_buffer``
       samples seeded with (``seed``, ``epoch``, ``rank``): when the buffer is full, a random
       one of its samples is emitted and replaced by the next; at the end the rest leaves in a
       random order. A sample is emitted at most ``shuffle_buffer`` places before its position,
       so a rank reads its shards nearly front to back.

    The order is computed in the main process from these integers: it is the same for any
    ``num_workers``, and a checkpoint stores only them.

    With a ``generator`` (a ``torch.Generator``), ``seed`` is ignored: the seed of every epoch is
    the generator's ``initial_seed()`` read when the epoch is planned, so a generator set back
    to a checkpoint's state (``DataLoader.load_state_dict``) orders the epochs after the resumed
    one as the checkpointed run would, whatever seed the generator was built with.
    """

    def __init__(self, dataset: WebDataset, num_replicas: int = 1, rank: int = 0,
                 shuffle: bool = False, seed: int = 0, drop_last: bool = False,
                 shuffle_buffer: Optional[int] = None, generator: Any = None):
        self.shard_sizes = [int(s) for s in dataset.shard_sizes]
        self.num_replicas, self.rank = int(num_replicas), int(rank)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self._seed = int(seed)
        #: The generator whose initial_seed() seeds the order (None: ``seed``). The loader's
        #: checkpoints save and set back its state, which carries that seed.
        self.generator = generator
        self.shuffle_buffer = int(dataset.shuffle_buffer if shuffle_buffer is None
                                  else shuffle_buffer)
        self.epoch = 0

    @property
    def seed(self) -> int:
        """The seed of the order: the generator's ``initial_seed()`` when there is one (read
        now: a generator set back by ``load_state_dict`` brings its seed), else ``seed``."""
        if self.generator is not None:
            return int(self.generator.initial_seed())
        return self._seed

    @seed.setter
    def seed(self, value: int) -> None:
        self._seed = int(value)

    @classmethod
    def default_for(cls, dataset: Any, num_replicas: Optional[int], rank: Optional[int],
                    shuffle: bool, seed: int, drop_last: bool,
                    generator: Any = None) -> "WebDatasetSampler":
        """The loader's default order over ``dataset``'s shards (``shard_sizes``,
        ``shuffle_buffer``): seeded by ``seed`` or, when a generator is given, its
        ``initial_seed()`` at each epoch; not sharded without ``num_replicas``."""
        return cls(dataset, num_replicas or 1, rank or 0, shuffle=bool(shuffle), seed=seed,
                   drop_last=drop_last, generator=generator)

    def state(self) -> Dict[str, Any]:
        return {"kind": "webdataset", "seed": self.seed, "epoch": self.epoch,
                "shuffle": self.shuffle, "sampler_drop_last": self.drop_last,
                "num_replicas": self.num_replicas, "rank": self.rank,
                "shuffle_buffer": self.shuffle_buffer, "num_shards": len(self.shard_sizes)}

    def __len__(self) -> int:
        n, w = sum(self.shard_sizes), self.num_replicas
        return n // w if self.drop_last else -(-n // w)
