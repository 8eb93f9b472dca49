"""The remote shards of a :class:`ringloader.WebDataset` (``http://``, ``https://``,
``s3://``): one :class:`RemoteShards` object the dataset owns, over the native downloader of
``_remote``.

At construction it learns each remote shard's index without reading the shard where it can (an
index an earlier run kept under ``index_cache``, or the pack sidecar next to the shard on the
server), else downloads the shard into the node-local cache for the dataset to index. At each
epoch's start it brings in what the epoch reads: the shards missing from the cache, downloaded
on native threads while the epoch reads, or, when the epoch wants few of a shard's members,
those members fetched by HTTP range requests into a sparse copy the readers read instead. It
keeps the size and ETag of the object each shard was indexed from, so that a changed object is
a :class:`ringloader.StaleIndexError`, and the link estimates the range reads decide by.

One rule for every dataset that reads remote shards through it (``rl.WebDataset``,
``rl.VideoShards``): a cache entry is read only once this object has seen it hold the object
that was indexed (``verified``); a shard whose object was found to be another one is stale for
good (``stale``), though the cache then keeps the new object as a verified copy: every later
check raises :class:`ringloader.StaleIndexError` until the dataset is built again.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from .. import _C
from ..core import _remote
from ..core._shard_index import INDEX_SUFFIX, _cache_path, _load_index, _write_cache
from ..core._source import StaleIndexError

#: What the native downloader says of a shard whose copy is not the object that was indexed.
STALE_COPY = "changed since the dataset was built"


class RemoteShards:
    """The remote shards of one WebDataset and the transfers that bring them in.

    ``urls`` and ``paths`` are the dataset's own lists (``WebDataset.urls``, ``shard_paths``),
    shared: fetching a shard points its entry of ``paths`` at the cached copy. ``index_options``
    (``image_exts``, ``label_key``, ``label_field``, ``index_cache``) key the indexes kept
    under ``index_cache``. ``kind`` names the dataset class in errors (``rl.VideoShards``
    fetches its remote shards through the same object)."""

    def __init__(self, urls: List[str], paths: List[str], fetcher: _remote.RemoteFetcher,
                 index_options: Tuple[Sequence[str], str, str, Optional[str]],
                 kind: str = "WebDataset"):
        self.urls, self.paths, self.fetcher = urls, paths, fetcher
        self.index_options, self.kind = index_options, kind
        #: Per shard: (size, ETag) of the remote object it was indexed from (ETag None: from a
        #: pack sidecar, learnt at its download); None for a shard read otherwise.
        self.copies: List[Optional[Tuple[int, Optional[str]]]] = [None] * len(urls)
        #: The shards whose cache entry this object saw hold the object of ``copies`` (fetched,
        #: or a download that landed): the others go through the cache before they are read.
        self.verified: Set[int] = set()
        #: Per shard found changed on the server: its StaleIndexError's message, raised again
        #: at every check (the cache holds the new object as a verified copy).
        self.stale: Dict[int, str] = {}
        #: Per remote shard that could not be fetched at the last epoch's start: the error.
        self.fetch_errors: Dict[int, str] = {}
        #: The downloads the last epoch's start left running (see check), or None.
        self.background: Optional[Any] = None
        #: The shards they download, in their order (emptied once their results are taken in).
        self.background_shards: List[int] = []
        #: Cache entries whose reads go to a sparse copy of the members fetched by range this
        #: epoch (begin_reads): {entry: copy}.
        self.redirects: Dict[str, str] = {}
        #: The range reads the last epoch's start left running (a _C.BackgroundRanges), or None.
        self.ranges: Optional[Any] = None
        #: One remote URL per server, for link_estimates (made when first asked).
        self.link_urls: Optional[List[str]] = None
        #: The epoch's start left the remote shards to begin_reads (which knows the plan).
        self.reads_due = False

    def __getstate__(self) -> Dict[str, Any]:
        # The transfers are this process's (native threads), and so are the sparse copies: a
        # copy (pickle, deepcopy, a spawned worker) starts its own if it needs.
        state = dict(self.__dict__)
        state["background"], state["background_shards"] = None, []
        state["redirects"], state["ranges"] = {}, None
        return state

    # ---- construction ---------------------------------------------------------------------

    def start(self, remote: Sequence[int]) -> Tuple[Dict[int, Dict[str, Any]], Dict[int, str]]:
        """The ``remote`` shards at construction: ``(known, unfetched)``. ``known`` holds the
        indexes (with ``remote_copy``) known without downloading the shard: kept by an earlier
        run under ``index_cache``, or, with ``label_key`` ``"cls"``, the pack sidecars on the
        server; those shards are downloaded at the first epoch's start. The others are
        downloaded now; ``unfetched`` holds {shard: error} for those that could not be, and
        whose index an earlier run kept (raises ``ConnectionError`` for the others)."""
        known: Dict[int, Dict[str, Any]] = {}
        for s in remote:
            index = self._known_index(self.urls[s])
            if index is not None:
                known[s] = index
        if self.index_options[1] == "cls":
            known.update(self._sidecars([s for s in remote if s not in known]))
        for s, index in known.items():
            self.copies[s] = index["remote_copy"]
            self.paths[s] = _C.shard_cache_entry_path(self.fetcher.cache_dir, self.urls[s])
        unfetched = self.fetch([s for s in remote if s not in known], construction=True)
        self._raise_unknown(unfetched)
        return known, unfetched

    def index_path(self, url: str) -> str:
        """Where the index of the remote shard ``url`` is kept under ``index_cache``."""
        image_exts, label_key, label_field, index_cache = self.index_options
        assert index_cache is not None
        return _cache_path(url, image_exts, label_key, label_field, index_cache)

    def keep_index(self, s: int, index: Dict[str, Any]) -> None:
        """Keeps the index of shard ``s`` (made from its download) under ``index_cache``, with
        the size and ETag of the object it was made from."""
        if self.index_options[3] is None:
            return
        # Kept so that a later run builds the dataset without downloading the shard, and one
        # that cannot fetch it still knows its samples (the dataset's length and order stay
        # those of this run).
        _write_cache(self.index_path(self.urls[s]), self.urls[s], index,
                     remote_copy=self.copies[s])

    def refetch_if_cut(self, s: int) -> Optional[str]:
        """The path of a whole copy of shard ``s`` when the cached copy it was indexed from
        was cut (fetched again), to index again; None when the copy was whole (the shard
        itself is damaged)."""
        again = self.fetcher.refetch_if_cut(self.urls[s])
        if again is None:
            return None
        self.copies[s] = (int(again["size"]), str(again["etag"]))
        self.verified.add(s)
        return str(again["path"])

    def _known_index(self, url: str) -> Optional[Dict[str, Any]]:
        """The index an earlier run kept for the remote shard ``url``, with ``remote_copy``, the
        (size, ETag) of the object it was made from; None when there is none, it was made
        before sizes were kept, or the shard was damaged (then it is downloaded and indexed
        now)."""
        if self.index_options[3] is None:
            return None
        path = self.index_path(url)
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

    def _sidecars(self, shards: Sequence[int]) -> Dict[int, Dict[str, Any]]:
        """The indexes of the remote ``shards`` from the pack sidecars next to them on the server
        (``URL.idx.json``, small), for those that have one: the shard itself is then downloaded
        at the first epoch's start. A sidecar names the shard's size but not its ETag (None:
        taken from that download)."""
        if not shards:
            return {}
        results = self.fetcher.fetch([self.urls[s] + INDEX_SUFFIX for s in shards])
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
        return None if self.index_options[3] is None else _load_index(self.index_path(url))

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
            f"{self.kind}: {len(unknown)} of {len(self.urls)} shards could not be downloaded, so "
            f"their samples cannot be known ({named}{more}). Check that the server is up and "
            f"the URLs are right, then build the {self.kind} again (remote_options max_attempts "
            "and backoff_max_s make the downloads retry longer)." + (
                " An index kept under index_cache by a run that could read the shards lets a "
                "dataset be built while they are out of reach." if self.kind == "WebDataset" else ""))

    def unfetched_index(self, s: int, error: str) -> Dict[str, Any]:
        """The index of remote shard ``s``, which could not be fetched, kept by an earlier run
        (``index_cache``; :meth:`_raise_unknown` raised without one): every sample failing with
        ``error``."""
        why = f"shard {self.urls[s]}: {error}"
        known = self._kept_index(self.urls[s])
        assert known is not None
        return dict(known, errors=[why] * len(known["keys"]), error="", index_file=None)

    def fetch(self, shards: Sequence[int], construction: bool) -> Dict[int, str]:
        """Brings the remote ``shards`` into the cache (downloading those not there) and points
        ``paths`` at the copies. Returns {shard: error} for those that could not be fetched
        after the retries; a 404, 403 or bad URL raises. After construction, a copy that is not
        the one indexed (another size or ETag: the object changed) raises StaleIndexError."""
        results = self.fetcher.fetch([self.urls[s] for s in shards])
        failed: Dict[int, str] = {}
        for s, r in zip(shards, results):
            if "error" in r:
                _remote.raise_if_fatal(r, f"{self.kind} shard")
                failed[s] = r["error"]
                continue
            copy = (int(r["size"]), str(r["etag"]))
            was = self.copies[s]
            if was is not None and was[1] is None and was[0] == copy[0]:
                was = self.copies[s] = copy  # indexed from a sidecar: its ETag is this one
            if construction:
                self.copies[s] = copy
            elif was is not None and copy != was:
                raise self.found_stale(s, (
                    f"{self.kind} shard {self.urls[s]} changed since the dataset was built "
                    f"({was[0]} bytes, ETag {was[1] or 'none'} -> {copy[0]} bytes, ETag "
                    f"{copy[1] or 'none'})"))
            self.verified.add(s)
            self.paths[s] = r["path"]
        return failed

    # ---- epochs ---------------------------------------------------------------------------

    def read_ahead_off(self) -> Optional[str]:
        """See ``WebDataset.read_ahead_off``."""
        limit = self.fetcher.cache_limit
        total = sum(c[0] for c in self.copies if c is not None)
        if limit and total > limit:
            return (f"the remote shards ({total} bytes) exceed the WebDataset's cache_limit "
                    f"({limit} bytes): each epoch downloads again what the last one evicted")
        return None

    def take_in_downloads(self) -> None:
        """What the epoch-start downloads found, once all of them have landed (or failed): the
        shards they brought in as indexed (``verified``; the ETags of shards indexed from pack
        sidecars learnt), and those whose object changed (``stale``)."""
        background, shards = self.background, self.background_shards
        if background is None or not shards or background.finished() < len(shards):
            return
        self.background_shards = []
        for s, r in zip(shards, background.wait()):
            was = self.copies[s]
            if "error" in r or was is None:
                if STALE_COPY in r.get("error", ""):
                    self.found_stale(s, r["error"])
                continue
            if was[1] is None and was[0] == int(r["size"]):
                self.copies[s] = (was[0], str(r["etag"]))
            # Landed as the object indexed (the download compared its size and ETag).
            self.verified.add(s)

    def begin_reads(self, wanted: Optional[np.ndarray], offsets: np.ndarray,
                    lengths: np.ndarray, shard_starts: np.ndarray) -> bool:
        """See ``WebDataset.begin_reads``; ``offsets``, ``lengths`` and ``shard_starts`` are the
        dataset's (its samples' byte ranges, the first sample of each shard)."""
        if not self.reads_due:
            return False
        self.reads_due = False
        self.close_ranges()
        self.lift_redirects()
        fetcher = self.fetcher
        remote = [s for s, c in enumerate(self.copies) if c is not None]
        ranged: Dict[int, np.ndarray] = {}
        order = remote
        if wanted is not None:
            wanted = np.asarray(wanted, dtype=np.int64)
            wanted = wanted[(wanted >= 0) & (wanted < len(offsets))]
            shard_of = np.searchsorted(shard_starts, wanted, side="right") - 1
            # The shards in the order the plan first reads them, then those it reads none of.
            first = np.unique(shard_of, return_index=True)
            read = [int(s) for s in first[0][np.argsort(first[1], kind="stable")]]
            order = [s for s in read if self.copies[s] is not None]
            first_read = set(order)
            order += [s for s in remote if s not in first_read]
            wanted = np.unique(wanted)
            shard_of = np.searchsorted(shard_starts, wanted, side="right") - 1  # sorted
            for s in remote if fetcher.range_reads else []:
                size = self.copies[s][0]  # type: ignore[index]
                if os.path.exists(self.paths[s]):
                    continue
                mine = wanted[np.searchsorted(shard_of, s):np.searchsorted(shard_of, s, "right")]
                if fetcher.by_range(self.urls[s], size, offsets[mine], lengths[mine]):
                    ranged[s] = mine
        copies = []
        for s in order:
            if s not in ranged:
                continue
            self.fetch_errors.pop(s, None)
            samples = ranged[s][lengths[ranged[s]] > 0]
            if len(samples):
                size, etag = self.copies[s]  # type: ignore[misc]
                copy = f"{self.paths[s]}.ranges-{os.getpid()}"
                copies.append((self.urls[s], copy, size, etag, offsets[samples],
                               lengths[samples], self.paths[s]))
                # Reads of the entry go to the copy, once its ranges landed (they wait for them).
                _C.redirect_shard(self.paths[s], copy)
                self.redirects[self.paths[s]] = copy
        if copies:
            self.ranges = fetcher.start_ranges(copies)
        self.check([s for s in order if s not in ranged], background=True)
        return bool(self.redirects)

    def check(self, wanted: Sequence[int], background: bool) -> None:
        """The remote part of ``WebDataset.check_shards`` for the shards ``wanted``: read whole
        again, and those missing from the cache fetched (with ``background``, on native threads
        while the epoch reads)."""
        self.take_in_downloads()
        self.raise_if_stale(wanted)
        if self.redirects:
            # Read whole from now on: a copy holds only the members an epoch fetched by range.
            self.lift_redirects([self.paths[s] for s in wanted])
        missing = []
        for s in wanted:
            if self.copies[s] is None:
                continue
            # Not in the cache, or not checked by this process yet (size, checksum), or not seen
            # by this object to hold the object indexed (a copy another dataset fetched may be
            # a newer object of the same size): through the cache, which fetches or checks it
            # and says its size and ETag. Marks it used for the eviction order.
            if not _C.shard_cache_entry_ready(self.paths[s], self.copies[s][0]) or \
                    s not in self.verified:
                missing.append(s)
        if background and self.read_ahead_off() is not None:
            # The shards exceed the cache: the epoch's downloads take every shard in (those in
            # the cache at once), so that one evicted while the epoch runs is fetched again, and
            # the folder is trimmed back to the limit as the readers move on.
            missing = [s for s in wanted if self.copies[s] is not None]
        if not missing:
            return
        # Into the cache: not downloaded yet (the dataset was built from kept indexes), or
        # evicted since. One that cannot be fetched now fails its samples when they are read
        # (on_error), and their errors say why (explain_error).
        for s in missing:
            self.fetch_errors.pop(s, None)
        if background:
            # The new downloads take over the shards first, then the old ones close: a
            # reader of the epoch read ahead never finds a shard it waits for unregistered.
            before = self.background
            self.background = self.fetcher.start(
                [self.urls[s] for s in missing],
                [self.copies[s] for s in missing])  # type: ignore[misc]
            self.background_shards = list(missing)
            if before is not None:
                before.close()
        else:
            self.fetch_errors.update(self.fetch(missing, construction=False))

    def link_estimates(self) -> List[Dict[str, Any]]:
        """See ``WebDataset.link_estimates``."""
        if self.link_urls is None:
            # One URL per server (or bucket): loader.stats() asks at every call.
            by_server: Dict[str, str] = {}
            for s, copy in enumerate(self.copies):
                if copy is not None:
                    by_server.setdefault(self.urls[s].split("/")[2], self.urls[s])
            self.link_urls = list(by_server.values())
        seen: Dict[str, Dict[str, Any]] = {}
        for url in self.link_urls:
            link = self.fetcher.link_estimate(url)
            seen.setdefault(link["host"], link)
        return list(seen.values())

    def stale_copy_error(self, exc: BaseException, s: int) -> BaseException:
        """``exc``, which says the copy of shard ``s`` downloaded (or read by range) while the
        epoch ran is not the object that was indexed, as a StaleIndexError saying what to do
        (and raised again at every later check: :meth:`found_stale`)."""
        if s in self.stale:
            return self._stale_error(s)
        return self.found_stale(s, str(exc))

    def found_stale(self, s: int, what: str) -> StaleIndexError:
        """Shard ``s`` was found changed on the server (``what`` says how): stale for good, since
        the cache may now hold the new object as a verified copy. The StaleIndexError naming
        the URL and saying what to do, which :meth:`raise_if_stale` raises from now on."""
        url = self.urls[s]
        # A new dataset would read a kept index again: it must go first.
        kept = self.index_options[3] is not None and os.path.exists(self.index_path(url))
        todo = f"Delete its kept index {self.index_path(url)} and build the " \
            f"{self.kind} again" if kept else \
            f"Build the {self.kind} again (it re-indexes the shard)"
        self.stale[s] = f"{what}: its index is out of date. {todo}."
        self.verified.discard(s)
        return self._stale_error(s)

    def raise_if_stale(self, shards: Sequence[int]) -> None:
        """Raises the StaleIndexError of the first of ``shards`` found changed on the server
        (:meth:`found_stale`), so that its recorded byte ranges are never read from the new
        object the cache holds."""
        if self.stale:
            for s in shards:
                if s in self.stale:
                    raise self._stale_error(s)

    def _stale_error(self, s: int) -> StaleIndexError:
        error = StaleIndexError(self.stale[s])
        error.path = self.urls[s]
        return error

    # ---- closing --------------------------------------------------------------------------

    def close_ranges(self) -> None:
        """Stops the range reads an epoch's start left running and waits for their transfers."""
        ranges, self.ranges = self.ranges, None
        if ranges is not None:
            ranges.close()

    def lift_redirects(self, entries: Optional[Sequence[str]] = None) -> None:
        """Reads of these entries (default all) go to the cache again; their copies removed."""
        for entry in list(self.redirects) if entries is None else entries:
            copy = self.redirects.pop(entry, None)
            if copy is None:
                continue
            _C.redirect_shard(entry, "")
            try:
                os.unlink(copy)
            except OSError:
                pass

    def close(self) -> None:
        """See ``WebDataset.close_downloads``."""
        background, self.background = self.background, None
        self.background_shards = []
        if background is not None:
            background.close()
        self.close_ranges()
        if self.redirects:
            self.lift_redirects()
