"""Per-sample columns between the sources and the native loader: a columnar source's whole
table handed over at once (:class:`Columns`, ``dataset._native_columns()``: HF datasets,
Parquet), the native loader's ``memory`` and ``more_files`` arguments over all its sources
(:func:`memory_column`, :func:`more_files_column`, :func:`in_memory`), and a columnar row that
has no path named in a native error as its source names it (:func:`name_rows`).
"""

from __future__ import annotations

import re
from typing import Any, Callable, List, Optional, Sequence

import numpy as np

from .datasets import NativeDataset
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


def _column(folders: Sequence[NativeDataset], name: str) -> Optional[list]:
    """Each sample's entry of the per-sample column ``name`` over all folders (None for a
    folder without it); None when no folder has one."""
    columns = [getattr(f, name, None) for f in folders]
    if all(c is None for c in columns):
        return None
    out: list = []
    for f, c in zip(folders, columns):
        out += c if c is not None else [None] * len(f)
    return out


def name_rows(text: str, folders: Sequence[NativeDataset]) -> str:
    """``text`` (a native error message) with a columnar source's sample that has no path,
    ``sample N ()``, named as its errors name it (``UserSource.explain_error``)."""
    match = re.search(r"sample (\d+) \(\)", text)
    if match is None:
        return text
    flat = int(match.group(1))
    for f in folders:
        if flat < len(f):
            name = getattr(f, "_row_name", None)
            if name is None:
                return text
            return text.replace(match.group(0), f"sample {match.group(1)} ({name(flat)})", 1)
        flat -= len(f)
    return text


def in_memory(memory: Any) -> Optional[np.ndarray]:
    """Of a ``memory_column``: a bool per sample, True where its bytes are in memory (it reads
    no file); None when no sample is."""
    if memory is None:
        return None
    if isinstance(memory, tuple):
        return np.asarray(memory[1]) != -1  # a buffer, or deferred (-2): no file
    return np.fromiter((m is not None for m in memory), dtype=bool, count=len(memory))


def memory_column(folders: Sequence[NativeDataset]) -> Any:
    """The native loader's ``memory`` argument: each sample's in-memory bytes (ImageBytes) or
    None (a file), over all folders; None when no sample is in memory. With a columnar source
    among them, columns for all: ``(buffers, which, starts, lengths)`` (``Columns.memory``)."""
    columns = [getattr(f, "memory", None) for f in folders]
    if not any(isinstance(c, tuple) for c in columns):
        return _column(folders, "memory")
    # A columnar source among them: every folder's rows as columns, end to end (a listed
    # source's bytes each their own buffer).
    buffers: List[Any] = []
    which, starts, lengths = [], [], []
    for f, c in zip(folders, columns):
        if isinstance(c, tuple):
            w = np.asarray(c[1], dtype=np.int64)
            which.append(np.where(w >= 0, w + len(buffers), w))  # -1 a path, -2 deferred
            starts.append(np.asarray(c[2], dtype=np.int64))
            lengths.append(np.asarray(c[3], dtype=np.int64))
            buffers += list(c[0])
            continue
        rows = c if c is not None else [None] * len(f)
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


def more_files_column(folders: Sequence[NativeDataset]) -> Optional[list]:
    """The native loader's ``more_files`` argument: each sample's files after its first (a path,
    or a (description, bytes) pair), over all folders; None when every sample has one file."""
    return _column(folders, "more_files")
