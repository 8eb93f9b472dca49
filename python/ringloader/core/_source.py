"""The Source protocol: what :class:`ringloader.DataLoader` asks of the samples it loads.

A source is a list of samples whose bytes the native pipeline reads: the folder scans
(``ImageFolder``/``DatasetFolder``), ``FileList``, ``WebDataset`` (local, ``pipe:`` and remote
http(s)/s3 shards, the remote ones read from the node-local cache as local shards) and
``UserSource``, the references a user's Dataset returns (``ImageFile``/``ImageBytes``), which
is also how ``HFDataset`` and ``Parquet`` rows reach the loader. The loader never asks which
source it has: everything that differs between them is one of these members, and a new source
is one class (a :class:`ringloader.NativeDataset` subclass, which adds the transform) that
overrides the ones that differ from the defaults below.

* ``len(source)``: the number of samples.
* ``sample_table``: the compact table of every sample's path (or URL) and label, end to end
  (``datasets._SampleTable``); the native loader is built from its path arena.
* ``byte_ranges()``: where each sample's bytes are when samples are parts of larger files:
  ``offsets``/``lengths``/``errors`` (and ``pipes``/``tar_members``) as the native loader's
  keyword arguments; ``{}`` (the default) when every sample is a whole file.
* ``shard_sizes``: samples per shard, in order, when samples are grouped in shards (a
  ``WebDataset``'s tar files); ``None`` (the default) when they are independent files.
* ``streamed``: True when some samples can only be read front to back, once per epoch (a
  ``pipe:`` shard, see ``_schemes``): then only the source's own order can serve it, no
  ``Subset``/``ConcatDataset`` or other sampler, and no per-sample transform. Default False.
* ``default_sampler(num_replicas, rank, shuffle, seed, drop_last, generator)``: the order the
  loader uses when the caller gives no sampler, or ``None`` (the default) for torch's own
  (``RandomSampler``/``SequentialSampler``, ``DistributedSampler`` when sharded). A sampler that
  subclasses ``_order.ShardOrder`` follows the loader's epoch count and is resumable.
* ``check_unchanged()``: raises (``StaleIndexError``) when the files changed since the source
  was built in a way that makes its index wrong; called before each epoch. Default: nothing.
* ``checks_after_error`` / ``check_after_error()``: a source whose native reads do not compare
  its files mid-epoch (local shards) says True, and the loader calls ``check_after_error()``
  once a sample failed, so a file rewritten after ``iter()`` raises ``StaleIndexError`` rather
  than its rows being skipped or replaced. Default: False, nothing.
* ``explain_error(exc, index)``: the error the loader raises for ``exc`` about the source's
  sample ``index`` (``None``: not tied to one sample, e.g. a stream that ended early): ``exc``
  itself (the default) or a clearer one, for instance naming the shard member.
* ``describe()``: one line for people: what the source is, where, how many samples.

What only some sources need, declared here with the default the others get (the backends read
these members directly, never by ``getattr``: tests/python/test_source_contract.py checks that):

* ``stream_kind``: for a streamed source that is not a ``pipe:`` WebDataset, what streams it
  (named in the errors about orders it cannot serve); ``None`` by default.
* ``dataset``: the user's Dataset this source reads natively (``UserSource``), so that the
  loader accepts it in place of the source; ``None`` by default.
* ``read_ahead_off``: why the next epoch must not be read ahead (the epoch's reads evict or
  consume what it would need), or ``None`` (the default).
* ``reads_by_plan``: True when the source wants each epoch's plan before the epoch reads
  (``begin_feed``, ``begin_reads``); False by default, so a folder is not handed a plan.
* ``begin_feed(native, samples, per_row)``: the samples (the source's own indices, in the order
  the epoch reads them; ``None`` for an epoch read ahead) for a source that feeds its bytes to
  the native loader itself (row groups read on demand). Default: nothing.
* ``begin_reads(samples)``: the same for a source whose bytes are fetched for the epoch (remote
  shards); returns True when the epoch's copies serve that epoch only (range reads), so the
  next one is not read ahead. Default: nothing, False.
* ``feed_budget``: the bytes a feeding source may hold ahead of the readers, for
  ``describe()``; ``None`` (the default) for the others.
* ``stop_feed(native)``: stops the feeding thread before the native loader stops. Default:
  nothing.
* ``link_estimates()``: per remote host, the link estimate the source's reads use (for
  ``stats()``); ``[]`` by default.
* ``describe_sample(index)``: how errors name sample ``index`` (a shard's URL and member
  rather than a cache path), or ``None`` (the default: the native message stands).
* ``serves_torch_dataset``: True for a source standing in for a torchvision Dataset it was
  given (its warning is the loader's to give); False by default.
* ``refused``: why the native path cannot serve the source (a user's Dataset whose samples it
  cannot read natively), said as it is in the fallback warning; ``None`` by default.
* ``fallback_reasons()``: every reason the native pipeline cannot batch the source, the one to
  act on first (``refused``, then each transform step that keeps it per sample); ``[]`` by
  default (``NativeDataset`` gives its transform's, ``UserSource`` each view's).
* ``view_transforms``: the transform of each view a sample gives; by default one, the source's
  ``transform``.

The columns a source contributes to the native loader, end to end over all its sources (the
functions below combine them, so the loader asks the sources rather than knowing which have
them):

* ``memory``: each sample's bytes held in memory (``ImageBytes``) or ``None`` (a file), or
  whole columns ``(buffers, which, starts, lengths)`` (a columnar source, ``_columns.Columns``);
  ``None`` (the default) when every sample is a file.
* ``more_files``: each sample's files after its first (an image's mask), or ``None`` (the
  default) when every sample has one file.
* ``structured``: True when the samples are the user's own structures (a Dataset of image
  references): then every row's native label is its flat index (``flat_targets``) and
  ``batcher(sources, channels_last, nhwc)`` gives what rebuilds the user's batch from a native
  one. False and ``None`` by default: batches are (images, labels).
* ``joint_views`` / ``joint_masks``: the view positions of a ``Joint``'s images and of its
  masks in each sample (a structured source's), whose batch rows carry geometry records and
  masks; ``[]`` by default.
* ``name_row(index)``: what a sample without a path is (a columnar row: the Parquet file, row
  group and row), for the native errors that name it ``sample N ()``; ``None`` by default.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _C

__all__ = ["Source", "StaleIndexError", "explain_error", "file_identity", "flat_targets",
           "in_memory", "memory_column", "more_files_column", "name_rows"]

#: A source's index no longer matches its files (``path`` names the one that changed since it
#: was indexed): what ``check_unchanged()`` raises, and a stream or a download mid-epoch. A
#: ``RuntimeError``; never a :class:`ringloader.SampleError`, so ``on_error`` does not skip or
#: replace it.
StaleIndexError = _C.StaleIndexError


class Source:
    """The defaults of the protocol above, for sources whose samples are whole local files."""

    #: Samples per shard, or None when samples are independent files.
    shard_sizes: Optional[List[int]] = None
    #: What streams a streamed source other than a pipe: WebDataset, or None.
    stream_kind: Optional[str] = None
    #: The user's Dataset this source reads natively, or None.
    dataset: Any = None
    #: The source wants each epoch's plan (begin_feed, begin_reads).
    reads_by_plan: bool = False
    #: A source standing in for a torchvision Dataset it was given.
    serves_torch_dataset: bool = False
    #: Why the native path cannot serve this source, or None.
    refused: Optional[str] = None
    #: Reasons after ``refused`` that forced the same fallback (each step of a Joint's transform).
    also_refused: Tuple[str, ...] = ()
    #: Each sample's in-memory bytes (or None: a file), whole columns, or None: all files.
    memory: Any = None
    #: Each sample's files after its first, or None: one file a sample.
    more_files: Optional[list] = None
    #: The samples are the user's structures, rebuilt by ``batcher()`` from flat-index labels.
    structured: bool = False
    #: The view positions of a Joint's images and of its masks in each sample.
    joint_views: Sequence[int] = ()
    joint_masks: Sequence[int] = ()

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def sample_table(self) -> Any:
        return self._table

    @property
    def streamed(self) -> bool:
        return False

    def byte_ranges(self) -> Dict[str, Any]:
        """Where each sample's bytes are, as the native loader's keyword arguments: empty for
        whole files; ``offsets``/``lengths``/``errors`` when samples are parts of larger files
        (a :class:`ringloader.WebDataset`'s shard members)."""
        return {}

    def default_sampler(self, num_replicas: Optional[int], rank: Optional[int], shuffle: bool,
                        seed: int, drop_last: bool, generator: Any = None) -> Any:
        return None

    def check_unchanged(self) -> None:
        return None

    @property
    def checks_after_error(self) -> bool:
        return False

    def check_after_error(self) -> None:
        return None

    @property
    def read_ahead_off(self) -> Optional[str]:
        return None

    def begin_feed(self, native: Any, samples: Optional[Any], per_row: bool = True) -> None:
        return None

    def begin_reads(self, samples: Optional[Any]) -> bool:
        return False

    @property
    def feed_budget(self) -> Optional[int]:
        return None

    def stop_feed(self, native: Any) -> None:
        return None

    def link_estimates(self) -> List[Dict[str, Any]]:
        return []

    def describe_sample(self, index: int) -> Optional[str]:
        return None

    def explain_error(self, exc: BaseException, index: Optional[int]) -> BaseException:
        return exc

    def describe(self) -> str:
        raise NotImplementedError

    def fallback_reasons(self) -> List[str]:
        return []

    @property
    def view_transforms(self) -> List[Any]:
        views = self.__dict__.get("_view_transforms")
        return [getattr(self, "transform", None)] if views is None else views

    @view_transforms.setter
    def view_transforms(self, views: List[Any]) -> None:
        self.__dict__["_view_transforms"] = views

    def batcher(self, sources: Sequence["Source"], channels_last: bool, nhwc: bool) -> Any:
        """What builds the user's batch from a native batch of ``sources`` (this one among
        them, ``structured``), or None: batches are (images, labels)."""
        return None

    def name_row(self, index: int) -> Optional[str]:
        return None


def explain_error(exc: BaseException, sources: List[Source]) -> BaseException:
    """``exc`` from a loader over ``sources`` (their samples end to end), as the source of the
    sample it names (its ``index`` attribute) explains it; every source is asked when it names
    none."""
    index = getattr(exc, "index", None)
    if index is None:
        for source in sources:
            exc = source.explain_error(exc, None)
        return exc
    flat = int(index)
    for source in sources:
        if flat < len(source):
            return source.explain_error(exc, flat)
        flat -= len(source)
    return exc


def file_identity(path: str) -> tuple:
    """(device, inode, size, mtime, ctime) of ``path``: what says a file is still the one read
    (OSError when it cannot be stat'ed). Sources stamp their files with it (``check_unchanged``),
    the loader the files of an epoch read ahead."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def flat_targets(sources: Sequence[Source]) -> Optional[np.ndarray]:
    """The native labels when a ``structured`` source is among ``sources``: each sample's flat
    index, by which its row finds its structure again; None when none is."""
    if not any(s.structured for s in sources):
        return None
    return np.arange(sum(len(s) for s in sources), dtype=np.int64)


def _column(sources: Sequence[Source], column: List[Optional[list]]) -> Optional[list]:
    """Each sample's entry of a per-sample column over all sources (None for a source without
    it); None when no source has one."""
    if all(c is None for c in column):
        return None
    out: list = []
    for source, c in zip(sources, column):
        out += c if c is not None else [None] * len(source)
    return out


def name_rows(text: str, sources: Sequence[Source]) -> str:
    """``text`` (a native error message) with a sample that has no path, ``sample N ()``,
    named as its source names it (``name_row``)."""
    match = re.search(r"sample (\d+) \(\)", text)
    if match is None:
        return text
    flat = int(match.group(1))
    for source in sources:
        if flat < len(source):
            name = source.name_row(flat)
            if name is None:
                return text
            return text.replace(match.group(0), f"sample {match.group(1)} ({name})", 1)
        flat -= len(source)
    return text


def in_memory(memory: Any) -> Optional[np.ndarray]:
    """Of a ``memory_column``: a bool per sample, True where its bytes are in memory (it reads
    no file); None when no sample is."""
    if memory is None:
        return None
    if isinstance(memory, tuple):
        return np.asarray(memory[1]) != -1  # a buffer, or deferred (-2): no file
    return np.fromiter((m is not None for m in memory), dtype=bool, count=len(memory))


def memory_column(sources: Sequence[Source]) -> Any:
    """The native loader's ``memory`` argument: each sample's in-memory bytes or None (a file),
    over all sources (``memory``); None when no sample is in memory. With a columnar source
    among them, columns for all: ``(buffers, which, starts, lengths)``."""
    columns = [s.memory for s in sources]
    if not any(isinstance(c, tuple) for c in columns):
        return _column(sources, columns)
    # A columnar source among them: every source's rows as columns, end to end (a listed
    # source's bytes each their own buffer).
    buffers: List[Any] = []
    which, starts, lengths = [], [], []
    for source, c in zip(sources, columns):
        if isinstance(c, tuple):
            w = np.asarray(c[1], dtype=np.int64)
            which.append(np.where(w >= 0, w + len(buffers), w))  # -1 a path, -2 deferred
            starts.append(np.asarray(c[2], dtype=np.int64))
            lengths.append(np.asarray(c[3], dtype=np.int64))
            buffers += list(c[0])
            continue
        rows = c if c is not None else [None] * len(source)
        w = np.full(len(rows), -1, dtype=np.int64)
        size = np.zeros(len(rows), dtype=np.int64)
        for i, m in enumerate(rows):
            if m is not None:
                w[i] = len(buffers)
                size[i] = memoryview(m).nbytes
                buffers.append(m)
        which.append(w)
        starts.append(np.zeros(len(rows), dtype=np.int64))
        lengths.append(size)
    return (buffers, np.concatenate(which), np.concatenate(starts), np.concatenate(lengths))


def more_files_column(sources: Sequence[Source]) -> Optional[list]:
    """The native loader's ``more_files`` argument: each sample's files after its first (a path,
    or a (description, bytes) pair), over all sources (``more_files``); None when every sample
    has one file."""
    return _column(sources, [s.more_files for s in sources])
