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
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

__all__ = ["Source", "explain_error"]


class Source:
    """The defaults of the protocol above, for sources whose samples are whole local files."""

    #: Samples per shard, or None when samples are independent files.
    shard_sizes: Optional[List[int]] = None

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
