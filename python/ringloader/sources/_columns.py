"""A columnar source's whole table handed over at once (:class:`Columns`,
``dataset._native_columns()``: HF datasets, Parquet). The native loader's ``memory`` and
``more_files`` arguments over all its sources, and a row without a path named in a native
error, are the Source protocol's (``_source.memory_column``, ``_source.name_rows``).
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

from .references import ImageReference


class Columns:
    """A Dataset of one image reference a sample, handed over whole instead of listed sample by
    sample (``dataset._native_columns()``, e.g. :class:`ringloader.HFDataset`): ``model`` is
    sample 0's reference (the transform and mode of every sample's), ``memory`` each sample's
    bytes as ``(buffers, which, starts, lengths)`` (the native loader's columnar ``memory``:
    ``buffers[which[i]][starts[i]:starts[i] + lengths[i]]``, ``which[i] == -1`` for a sample
    read from its path), ``paths`` the samples' paths as an arena ``(bytes, ends)`` as
    ``_SampleTable`` holds them, a sample in memory having none (None: no sample has a path),
    ``structures(positions)`` those samples with their reference
    replaced by ``_leaf(0)`` (built when their batch is) and ``name(i)`` what sample i is, for
    its errors. ``feed`` (None: every row's bytes are there) hands the native loader the row
    groups of rows whose ``which`` is -2 while an epoch runs (``_row_groups._Feed``:
    ``begin(native, order, per_row)``, ``stop(native)``, ``budget``); the source is then read
    group by group, in its own order (``streamed``)."""

    __slots__ = ("model", "memory", "paths", "structures", "name", "feed")

    def __init__(self, model: ImageReference, memory: tuple, paths: Optional[tuple],
                 structures: Callable[[Sequence[int]], List[Any]], name: Callable[[int], str],
                 feed: Any = None):
        self.model, self.memory, self.paths = model, memory, paths
        self.structures, self.name, self.feed = structures, name, feed
