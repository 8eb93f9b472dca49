"""Row groups read when an epoch needs them (``Parquet(copy=False)``): the image column as row
groups (``_RowGroups``), the thread that hands them to the native loader within a byte budget
(``_Feed``), and the ``where`` of a row (its file, row group and row, and why its group could
not be read)."""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from ._arrow_columns import _ImageColumn, _image_column
from ..core._source import file_identity


class _RowGroupOf:
    """The ``where`` of a row of Parquet files end to end: the file, its row group and the row
    in the file."""

    __slots__ = ("files", "groups", "bases")

    def __init__(self, files: List[str], groups: List[np.ndarray]):
        self.files, self.groups = files, groups
        self.bases = np.cumsum([0] + [int(g[-1]) for g in groups])

    def __call__(self, row: int) -> str:
        f = int(np.searchsorted(self.bases, row, side="right")) - 1
        r = row - int(self.bases[f])
        g = int(np.searchsorted(self.groups[f], r, side="right")) - 1
        return f"{self.files[f]}: row group {g}, row {r}"


_DEFERRED = -2  # the native loader's columnar ``which`` of a row handed over with its row group


class _RowGroups:
    """The image column of Parquet files whose row groups are read when an epoch needs them
    (``Parquet(copy=False)``): per row, its row group (numbered across the files end to end) and
    its row in the group; nothing of the column is read to build it. It answers as
    :class:`_ImageColumn` does (``which`` is ``_DEFERRED`` for every row), so the dataset and
    the native loader's columns need nothing else; ``ds[i]`` reads row i's group (the last one
    read is kept)."""

    def __init__(self, paths: List[str], names: List[str], image_column: str,
                 sizes: List[List[int]], byte_sizes: List[List[int]], stamps: List[tuple]):
        self.paths, self.names, self.image_column = paths, names, image_column
        self.stamps = stamps  # each file as the dataset was built from it (file_identity)
        self.file_of = np.concatenate([np.full(len(g), f, np.int32)
                                       for f, g in enumerate(sizes)] or [np.zeros(0, np.int32)])
        self.group_in_file = np.concatenate([np.arange(len(g), dtype=np.int32) for g in sizes]
                                            or [np.zeros(0, np.int32)])
        self.sizes = np.asarray([n for g in sizes for n in g], dtype=np.int64)
        self.byte_sizes = np.asarray([b for g in byte_sizes for b in g], dtype=np.int64)
        self.first_row = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        n = int(self.first_row[-1])
        self.which = np.full(n, _DEFERRED, np.int8)
        self.starts = np.repeat(np.arange(len(self.sizes), dtype=np.int32), self.sizes)  # group
        self.lengths = (np.arange(n, dtype=np.int64) - self.first_row[self.starts]).astype(np.int32)
        self.buffers: List[np.ndarray] = []
        self._last: Optional[Tuple[int, _ImageColumn]] = None
        self._read: set = set()  # row groups ds[i] has read (a second read is warned about)
        self._warned = False

    def __len__(self) -> int:
        return len(self.which)

    def check(self, f: int) -> None:
        """Raises StaleIndexError when file ``f`` is not the one the dataset was built from: its
        labels, columns and row groups, read then, would be served with another file's images."""
        from ..core._source import StaleIndexError

        now = file_identity(self.paths[f])
        if now != self.stamps[f]:
            raise StaleIndexError(
                f"Parquet: {self.names[f]!r} changed since the dataset was built (size, "
                f"modification time or inode: {self.stamps[f]} -> {now}); build the dataset again")

    def read(self, group: int) -> _ImageColumn:
        """Row group ``group``'s image column (pyarrow reads and decompresses it), from the
        file the dataset was built from (else StaleIndexError)."""
        import pyarrow.parquet as pq

        f = int(self.file_of[group])
        self.check(f)
        # Mapped: the pages are read from the page cache without a copy into a read buffer
        # (57 ms against 71 ms of CPU for the sample set's 114 MB).
        table = pq.ParquetFile(self.paths[f], memory_map=True).read_row_group(
            int(self.group_in_file[group]), columns=[self.image_column])
        return _image_column(table.column(0), self.image_column)

    def ref(self, row: int, transform: Any, mode: str, where: Callable[[int], str]) -> Any:
        group = int(self.starts[row])
        if self._last is None or self._last[0] != group:
            if group in self._read and not self._warned:
                # ds[i] in a random order (torch's DataLoader, a sampler of one's own) reads a
                # row group for nearly every row: say so once rather than run slowly in silence.
                import warnings

                self._warned = True
                warnings.warn(
                    f"Parquet(copy=False): row group {group} read again for ds[{row}]: indexing "
                    "in a random order reads a row group per row. Iterate it with "
                    "ringloader.DataLoader (row groups once an epoch), or use copy=True for "
                    "random access", stacklevel=4)
            self._read.add(group)
            self._last = (group, self.read(group))
        base = int(self.first_row[group])
        return self._last[1].ref(row - base, transform, mode, lambda r: where(r + base))

    def paths_of(self, rows: Optional[np.ndarray]) -> None:
        return None  # rows are read from their row group, never from a path


class _Feed:
    """Hands the row groups an epoch needs to the native loader (``deferred_attach``), in the
    order of their first row in the epoch, as far ahead as ``budget`` bytes allow: one thread,
    started for each epoch (``begin``), which pyarrow's reads leave the GIL to. A group is read
    once an epoch, with the number of its rows the epoch decodes; the loader frees it after the
    last. A row group that cannot be read gives its rows no bytes (each a sample error, named
    with the reason by ``where``), never a hang."""

    def __init__(self, groups: _RowGroups, budget: int):
        self.groups, self.budget = groups, int(budget)
        self.errors: dict = {}  # group -> why it could not be read
        # One thread per native loader over the dataset (a train and an eval loader may run at
        # once): id(native) -> (thread, its stop event).
        self._threads: dict = {}

    def begin(self, native: Any, order: np.ndarray, per_row: bool = True) -> None:
        """A new epoch plan of the loader ``native``: ``order`` is the source's rows in the order
        it reads them (a resumed epoch: those it has still to read). ``per_row``: the loader may
        free a group's decoded rows before its last (False keeps every row of a group until
        then: on_error="replace" draws substitutes from it)."""
        import threading

        self.stop(native)
        # The epoch before must be gone before the groups are forgotten: a row it decoded from
        # a group of this plan would count against this plan's uses.
        native.stop()
        native.deferred_clear()
        stop = threading.Event()
        thread = threading.Thread(target=self._run, args=(native, np.asarray(order), per_row, stop),
                                  name="rl-row-groups", daemon=True)
        self._threads[id(native)] = (thread, stop)
        thread.start()

    def check_unchanged(self) -> None:
        """Before an epoch: StaleIndexError when a file changed since the dataset was built."""
        for f in range(len(self.groups.paths)):
            self.groups.check(f)

    def stop(self, native: Any) -> None:
        """Stops the thread feeding ``native`` (it holds the loader while it waits for room)."""
        thread, stop = self._threads.pop(id(native), (None, None))
        if thread is not None:
            stop.set()
            thread.join()

    def _run(self, native: Any, order: np.ndarray, per_row: bool, stop: Any) -> None:
        groups = self.groups.starts[order]
        uses = np.bincount(groups, minlength=len(self.groups.sizes))
        # Decodes per row (padding repeats rows): the loader frees a group's decoded rows early.
        row_uses = np.bincount(order, minlength=len(self.groups)).astype(np.int32)
        _, first = np.unique(groups, return_index=True)
        for group in groups[np.sort(first)].tolist():
            incoming = int(self.groups.byte_sizes[group])
            while not native.deferred_wait_room(group, incoming, self.budget, 0.1):
                if stop.is_set():
                    return
            if stop.is_set():
                return
            try:
                column = self.groups.read(group)
                which = np.where(column.which > 0, column.which, -1)
                base = int(self.groups.first_row[group])
                native.deferred_attach(group, column.buffers, which, column.starts, column.lengths,
                                       int(uses[group]),
                                       row_uses[base:base + int(self.groups.sizes[group])]
                                       if per_row else None)
            except Exception as exc:  # a damaged row group: its rows fail, the epoch goes on
                if stop.is_set():
                    return
                self.errors[group] = f"{type(exc).__name__}: {exc}"
                rows = int(self.groups.sizes[group])
                none = np.full(rows, -1, np.int64)
                try:
                    native.deferred_attach(group, [], none, np.zeros(rows, np.int64), none,
                                           int(uses[group]))
                except Exception:
                    return  # the loader is gone


def _column_bytes(row_group: Any, column: str) -> int:
    """The uncompressed size of ``column`` (all its leaves: a struct's bytes and path) in a
    row group's metadata: about the bytes its rows hand the loader."""
    total = 0
    for k in range(row_group.num_columns):
        chunk = row_group.column(k)
        leaf = chunk.path_in_schema
        if leaf == column or leaf.startswith(column + "."):
            total += int(chunk.total_uncompressed_size)
    return total


class _UnreadGroups:
    """The ``where`` of a row read on demand: its file, row group and row, and why its row group
    could not be read when that happened (``_Feed.errors``)."""

    __slots__ = ("where", "groups", "feed")

    def __init__(self, where: Callable[[int], str], groups: _RowGroups, feed: _Feed):
        self.where, self.groups, self.feed = where, groups, feed

    def __call__(self, row: int) -> str:
        why = self.feed.errors.get(int(self.groups.starts[row]))
        return self.where(row) + (f" (its row group could not be read: {why})" if why else "")
