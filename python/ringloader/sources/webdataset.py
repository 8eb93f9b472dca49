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

This module holds the dataset and its order (:class:`WebDatasetSampler`); the URLs and the
indexes are ``_shard_index``'s, the remote shards' downloads and range reads
``_remote_shards``'s (a :class:`_remote_shards.RemoteShards` the dataset owns).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _C
from ..core import _order, _remote
from ._remote_shards import STALE_COPY, RemoteShards
from ..core._shard_index import (  # noqa: F401 - the names this module has always exported
          IMAGE_EXTS, INDEX_FORMAT, INDEX_SUFFIX, LABEL_KEYS, _cache_path, _expand, _expand_braces,
          cache_index_as, check_shard, classes_file, default_index_cache, expand_urls, index_shards,
          split_name, with_damage)
from ..core._source import StaleIndexError
from .datasets import NativeDataset

__all__ = ["WebDataset", "WebDatasetSampler", "expand_urls", "DEFAULT_SHUFFLE_BUFFER",
           "INDEX_SUFFIX"]

#: Default size of the per-rank shuffle buffer (samples).
DEFAULT_SHUFFLE_BUFFER = 2000
#: Shards indexed at once at construction (a ``pipe:`` shard without a cached index is one
#: streaming read of its command: these overlap; the native scan runs without the GIL).
INDEX_THREADS = 8
#: Seconds of indexing after which progress is shown (``progress=None``).
PROGRESS_AFTER_S = 1.0
#: ``RINGLOADER_PROGRESS=0`` silences the default progress output, ``=1`` shows it at once.
PROGRESS_ENV = "RINGLOADER_PROGRESS"


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
        #: The remote shards (http(s)://, s3://) and their transfers, or None without any (a
        #: pickled copy leaves the transfers out: RemoteShards.__getstate__).
        self._remote: Optional[RemoteShards] = None
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
            self._remote = RemoteShards(
                self.urls, self.shard_paths,
                _remote.RemoteFetcher(cache_dir, cache_limit, ca_file, remote_options),
                (self.image_exts, label_key, label_field, self.index_cache))
            known, unfetched = self._remote.start(remote)
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
                index = self._remote.unfetched_index(s, unfetched[s])  # type: ignore[union-attr]
            elif s in known:
                url, pipe, index = self.urls[s], False, known[s]
            else:
                url, pipe, index = next(indexed)
                again = self._remote.refetch_if_cut(s) if index.get("error") and \
                    self._is_remote(s) else None  # type: ignore[union-attr]
                if again is not None:  # a cut copy in the cache: indexed again, whole
                    url, pipe, index = self._index_all([(again, pipe)], None)[0]
            if self._is_remote(s):
                url = self.urls[s]
                if s not in known:
                    self._remote.keep_index(s, index)  # type: ignore[union-attr]
                index = dict(index, stat=None, index_file=None)
            self.index_files.append(index.get("index_file"))
            self.shard_stats.append(index.get("stat"))
            self.stream_bytes.append(int(index.get("bytes", 0)) if pipe and not index.get("error")
                                     else 0)
            index = with_damage(index, url)
            keys += list(index["keys"])
            members += list(index["members"])
            offsets.append(np.asarray(index["offsets"], dtype=np.int64))
            lengths.append(np.asarray(index["lengths"], dtype=np.int64))
            labels.append(np.asarray(index["labels"], dtype=np.int64))
            errors += [str(e) for e in index["errors"]]
            sizes.append(len(index["keys"]))
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
            classes = classes_file(self.urls[0], self.url_pipes[0]) or \
                [str(i) for i in range(max(label_list) + 1)]
        super().__init__(None, paths, label_list, list(classes), transform, target_transform,
                         strict, exif_transpose)

    def _index_all(self, expanded: Sequence[Tuple[str, bool]],
                   progress_after: Optional[float]) -> List[Tuple[str, bool, Dict[str, Any]]]:
        """``(url, pipe, index)`` of every shard, in order, indexed ``INDEX_THREADS`` at a time
        (see ``_shard_index.index_shards``)."""
        return index_shards(expanded, self.image_exts, self.label_key, self.label_field,
                            self.index_cache, INDEX_THREADS, progress_after)

    def _is_remote(self, s: int) -> bool:
        """Shard ``s`` is a remote one read from the cache (not one that could not be fetched
        at construction: its samples fail when read)."""
        return self._remote is not None and self._remote.copies[s] is not None

    # The remote machinery's state, as tools and tests look at it (None without remote shards).
    @property
    def _fetcher(self) -> Optional[_remote.RemoteFetcher]:
        return None if self._remote is None else self._remote.fetcher

    @property
    def _background(self) -> Optional[Any]:
        return None if self._remote is None else self._remote.background

    @property
    def _ranges(self) -> Optional[Any]:
        return None if self._remote is None else self._remote.ranges

    @property
    def _redirects(self) -> Dict[str, str]:
        return {} if self._remote is None else self._remote.redirects

    def _name(self) -> str:
        return f"ringloader.WebDataset({self.urls[0]!r}{', ...' if len(self.urls) > 1 else ''})"

    @property
    def streamed(self) -> bool:
        """True when some shard is a ``pipe:`` stream (no random access)."""
        return any(self.url_pipes)

    def describe(self) -> str:
        """What the source is (see ``ringloader.core._source``): its shards, samples and classes."""
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
        return None if self._remote is None else self._remote.read_ahead_off()

    @property
    def remote_copies(self) -> List[Optional[Tuple[int, Optional[str]]]]:
        """Per remote shard: (size, ETag) of the copy it was indexed from (ETag None: from a pack
        sidecar, not known before the download, learnt once it is); None for the others."""
        if self._remote is None:
            return [None] * len(self.urls)
        self._remote.take_in_downloads()
        return self._remote.copies

    @property
    def checks_after_error(self) -> bool:
        """Local shards: their native reads do not compare them mid-epoch (remote ones are
        compared as they are fetched and read)."""
        return self._remote is None

    def check_after_error(self) -> None:
        self.check_shards()

    def check_unchanged(self) -> None:
        if self._remote is None:
            self.check_shards(background=True)
            return
        # A remote shard found changed on the server stays stale until the dataset is built
        # again (RemoteShards.found_stale), even one the last epoch skipped: the epoch does not
        # start.
        self._remote.take_in_downloads()
        self._remote.raise_if_stale(range(len(self.urls)))
        # The remote shards wait for begin_reads: whether each is downloaded or read by range,
        # and in which order, depends on what the epoch's plan wants of it.
        self._remote.reads_due = True
        self.check_shards([s for s, c in enumerate(self._remote.copies) if c is None])

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
        if self._remote is None:
            return False
        return self._remote.begin_reads(wanted, self.offsets, self.lengths, self.shard_starts)

    def link_estimates(self) -> List[Dict[str, Any]]:
        """Per host of the remote shards: this process's estimate of the link (``host``,
        ``latency_s`` to a response's first byte, ``bytes_per_s`` one transfer moves,
        ``latency_samples`` and ``rate_samples`` measured: 0 means the prior of 50 ms and
        100 MB/s). ``range_reads_below="auto"`` decides from these."""
        return [] if self._remote is None else self._remote.link_estimates()

    def close_downloads(self) -> None:
        """Stops the downloads an epoch's start left running (their shards' samples then fail
        as not downloaded) and waits for their transfers to close."""
        remote = getattr(self, "_remote", None)  # None too when __init__ failed before it
        if remote is not None:
            remote.close()

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
        fetch_error = None if self._remote is None else \
            self._remote.fetch_errors.get(self.shard_of(index))
        if STALE_COPY in str(exc) and self._remote is not None:
            # A shard downloaded (or read by range) while the epoch ran is not the object that
            # was indexed.
            return self._remote.stale_copy_error(exc, self.shard_of(index))
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
        if self._remote is not None:
            self._remote.check(wanted, background)
        for s in wanted:
            check_shard(self.urls[s], self.shard_stats[s], "WebDataset")

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
