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
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from . import _C

__all__ = ["Source", "StaleIndexError", "explain_error", "file_identity"]

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
