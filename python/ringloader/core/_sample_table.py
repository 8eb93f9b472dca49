"""A dataset's samples, compact: every path's bytes in one arena and an integer array of labels
(``_SampleTable``), and the read-only, list-like views a dataset shows of it (``samples``,
``targets``, ``imgs``, the paths)."""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence as _AbcSequence
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import numpy as np


class _SampleTable:
    """The samples of a dataset, compact: every path's bytes in one uint8 arena, ``ends[i]`` the end
    of path i in it, and an integer array of labels. About the path's length plus 12 bytes a
    sample (a list of ``(str, int)`` tuples costs ~4x that): an ImageNet-sized folder stays small,
    pickles as three buffers, and the native loader is built from it without a str per sample.
    ``samples``/``targets``/``imgs`` are list-like views of it (:class:`_SamplesView`)."""

    __slots__ = ("blob", "ends", "labels")

    def __init__(self, blob: np.ndarray, ends: np.ndarray, labels: np.ndarray):
        self.blob, self.ends, self.labels = blob, ends, labels

    @classmethod
    def from_lists(cls, paths: Sequence[Any], labels: Sequence[int]) -> "_SampleTable":
        encoded = [os.fsencode(p) for p in paths]
        ends = np.fromiter((len(p) for p in encoded), dtype=np.int64, count=len(encoded))
        np.cumsum(ends, out=ends)
        blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        return cls(blob, ends, _label_array(labels, len(encoded)))

    def __len__(self) -> int:
        return len(self.ends)

    def __reduce__(self) -> Any:
        return (_SampleTable, (self.blob, self.ends, self.labels))

    def path(self, i: int) -> str:
        start = int(self.ends[i - 1]) if i > 0 else 0
        return os.fsdecode(self.blob[start:int(self.ends[i])].tobytes())

    def paths(self, rows: Optional[range] = None) -> List[str]:
        """The paths as str (of ``rows`` only when given, a range of step 1)."""
        lo, hi = (0, len(self)) if rows is None else (rows.start, rows.stop)
        if hi <= lo:
            return []
        base = int(self.ends[lo - 1]) if lo > 0 else 0
        data = self.blob[base:int(self.ends[hi - 1])].tobytes()
        ends = (self.ends[lo:hi] - base).tolist()
        decode = os.fsdecode
        return [decode(data[s:e]) for s, e in zip([0] + ends[:-1], ends)]

    def arena(self) -> Tuple[np.ndarray, np.ndarray]:
        """(path bytes, path ends): the native loader's ``paths`` argument."""
        return self.blob, self.ends

    @staticmethod
    def concat(tables: Sequence["_SampleTable"]) -> "_SampleTable":
        if len(tables) == 1:
            return tables[0]
        shifts = np.cumsum([0] + [len(t.blob) for t in tables[:-1]])
        return _SampleTable(np.concatenate([t.blob for t in tables]),
                            np.concatenate([t.ends + s for t, s in zip(tables, shifts)]),
                            np.concatenate([t.labels.astype(np.int64) for t in tables]))


def _label_array(labels: Any, n: int) -> np.ndarray:
    """Labels as int32 (int64 when one does not fit), refusing non-integers by position."""
    try:
        array = np.asarray(labels)
    except ValueError:
        array = np.asarray(labels, dtype=object)
    if array.shape != (n,):
        raise ValueError(f"{n} paths but labels of shape {array.shape}")
    if array.dtype.kind not in "iu" and n:
        bad = next((i for i, t in enumerate(labels)
                    if isinstance(t, bool) or not isinstance(t, (int, np.integer))), None)
        if bad is not None:
            raise TypeError(f"labels must be ints; labels[{bad}] is {labels[bad]!r}")
        array = np.asarray([int(t) for t in labels], dtype=np.int64)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    small = array.min() >= np.iinfo(np.int32).min and array.max() <= np.iinfo(np.int32).max
    return array.astype(np.int32 if small else np.int64)


class _ListView(_AbcSequence):
    """A read-only, list-like view of a :class:`_SampleTable`: length, indexing (negative too),
    slicing (to a list), iteration, ``==`` with a list, ``+``, ``count``/``index``. It is not a
    list: items cannot be set in place; assign a new list to the dataset attribute instead."""

    __slots__ = ("_table", "_name")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, table: _SampleTable, name: str):
        self._table, self._name = table, name

    def __len__(self) -> int:
        return len(self._table)

    def _item(self, i: int) -> Any:
        raise NotImplementedError

    def _items(self, rows: range) -> List[Any]:
        raise NotImplementedError

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            rows = range(*key.indices(len(self)))
            if rows.step == 1:
                return self._items(rows)
            return [self._item(i) for i in rows]
        i = operator.index(key)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"{self._name} index out of range")
        return self._item(i)

    def __iter__(self) -> Iterator[Any]:
        chunk = 65536
        for lo in range(0, len(self), chunk):
            yield from self._items(range(lo, min(lo + chunk, len(self))))

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, _ListView):
            return type(other) is type(self) and len(self) == len(other) and list(self) == list(other)
        if isinstance(other, (list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __ne__(self, other: Any) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __add__(self, other: Any) -> List[Any]:
        return list(self) + list(other)

    def __radd__(self, other: Any) -> List[Any]:
        return list(other) + list(self)

    def __repr__(self) -> str:
        return repr(list(self))

    def __reduce__(self) -> Any:
        return (list, (list(self),))  # a view pickled alone comes back as the list it shows

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            f"dataset.{self._name} is a read-only view of the dataset's compact sample table; "
            f"assign a new list instead (dataset.{self._name} = [...]), which the DataLoader "
            "uses from its next iter()")

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = sort = reverse = clear = _refuse


class _SamplesView(_ListView):
    """``dataset.samples`` (and ``imgs``): ``(path, target)`` tuples, as torchvision's list."""

    __slots__ = ()

    def _item(self, i: int) -> Tuple[str, int]:
        return self._table.path(i), int(self._table.labels[i])

    def _items(self, rows: range) -> List[Tuple[str, int]]:
        return list(zip(self._table.paths(rows), self._table.labels[rows.start:rows.stop].tolist()))


class _TargetsView(_ListView):
    """``dataset.targets``: the int target of each sample, as torchvision's list (and an array:
    ``np.asarray(dataset.targets)`` and ``torch.tensor(dataset.targets)`` take it whole)."""

    __slots__ = ()

    def _item(self, i: int) -> int:
        return int(self._table.labels[i])

    def _items(self, rows: range) -> List[int]:
        return self._table.labels[rows.start:rows.stop].tolist()

    def __iter__(self) -> Iterator[int]:
        return iter(self._table.labels.tolist())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._table.labels.astype(np.int64 if dtype is None else dtype)


class _PathsView(_ListView):
    """The paths of a table, as str (what the DataLoader reads sample i from)."""

    __slots__ = ()

    def _item(self, i: int) -> str:
        return self._table.path(i)

    def _items(self, rows: range) -> List[str]:
        return self._table.paths(rows)
