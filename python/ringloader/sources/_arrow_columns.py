"""Arrow columns as arrays, for :mod:`ringloader.hf`'s datasets: an image column as buffer
index, offset and length per row (``_ImageColumn``, read by ``_image_column`` from the
``datasets`` Image struct or a binary column), a passed-through column read a row at a time
(``_Values``), the references a row makes when asked (``_ArrowImage``) and the checks of the
image, label and passed-through columns a dataset is built from."""

from __future__ import annotations

import os
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from .references import ImageBytes, ImageFile


class _ArrowImage(ImageBytes):
    """An encoded image in an Arrow buffer, named by where it is (file, row group, row), so a
    sample error says which row is bad. The name is made only when asked for: a table has
    millions of rows."""

    __slots__ = ("_where", "_row")

    def __init__(self, data: Any, transform: Any, mode: str, where: Callable[[int], str],
                 row: int):
        super().__init__(data, transform, mode)
        self._where = where
        self._row = row

    @property
    def where(self) -> str:
        return self._where(self._row)

    def describe(self) -> str:
        return f"{self.where} ({self._view.nbytes} bytes)"

    def __reduce__(self) -> Any:
        return (_ArrowImage, (self._view.tobytes(), self.transform, self.mode, _Named(self.where),
                              0))


class _Named:
    """A fixed name in place of a row's ``where`` (a pickled reference: no table behind it)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __call__(self, row: int) -> str:
        return self.name


_EMPTY = np.zeros(0, np.uint8)


def _binary_rows(array: Any) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(data, offsets, valid) of a binary/large_binary Arrow array: ``data`` a uint8 view of its
    data buffer, row r in ``data[offsets[r]:offsets[r + 1]]``."""
    import pyarrow as pa

    if pa.types.is_binary_view(array.type) or pa.types.is_string_view(array.type):
        array = array.cast(pa.large_binary())
    if not (pa.types.is_binary(array.type) or pa.types.is_large_binary(array.type)):
        raise TypeError(f"a binary column, got {array.type}")
    width = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    _, offsets_buf, data_buf = array.buffers()[:3]
    n = len(array)
    offsets = np.frombuffer(offsets_buf, dtype=width)[array.offset:array.offset + n + 1] \
        if offsets_buf is not None else np.zeros(n + 1, width)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else _EMPTY
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    return data, offsets, valid


class _ImageColumn:
    """The image column of a table as arrays, not objects: the Arrow data buffer of each chunk
    (``buffers[1:]``, uint8 views; ``buffers[0]`` is empty) and, per table row, which buffer holds
    its bytes, where they start and how many there are. ``which`` is ``_PATH`` for a row that
    holds only a path and 0 for a row with neither bytes nor a path. The paths are one arena,
    as the native sample table's (``paths``: UTF-8 bytes end to end and each row's end in them,
    rows with bytes taking none), or None when no row has one. About 20 bytes a row: a
    reference is made only when a row is asked for (:meth:`ref`)."""

    __slots__ = ("buffers", "which", "starts", "lengths", "paths")

    def __init__(self, buffers: List[np.ndarray], which: np.ndarray, starts: np.ndarray,
                 lengths: np.ndarray, paths: Optional[Tuple[np.ndarray, np.ndarray]]):
        self.buffers, self.which, self.starts, self.lengths = buffers, which, starts, lengths
        self.paths = paths

    def __len__(self) -> int:
        return len(self.which)

    def ref(self, row: int, transform: Any, mode: str, where: Callable[[int], str]) -> Any:
        """Row ``row``'s reference: a view of its bytes in the Arrow buffer (no copy), an
        :class:`ImageFile` for a path, or empty bytes (a sample error that names the row)."""
        w = int(self.which[row])
        if w > 0:
            start = int(self.starts[row])
            data = self.buffers[w][start:start + int(self.lengths[row])]
            return _ArrowImage(data, transform, mode, where, row)
        if w == _PATH:
            blob, ends = self.paths  # type: ignore[misc]
            start = int(ends[row - 1]) if row else 0
            return ImageFile(os.fsdecode(blob[start:int(ends[row])].tobytes()), transform, mode)
        return _ArrowImage(_EMPTY, transform, mode, _Null(where), row)

    def paths_of(self, rows: Optional[np.ndarray]) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        """The path arena of ``rows`` (table rows, in that order; None: every row), gathered
        with numpy: no str is made."""
        if self.paths is None or rows is None:
            return self.paths
        blob, ends = self.paths
        sizes = np.diff(ends, prepend=0)
        picked = sizes[rows]
        new_ends = np.cumsum(picked)
        total = int(new_ends[-1]) if len(new_ends) else 0
        # Byte k of the gathered arena comes from byte k + (start of its row - its new start).
        shift = np.repeat((ends - sizes)[rows] - (new_ends - picked), picked)
        return blob[shift + np.arange(total)], new_ends

    @staticmethod
    def concat(columns: Sequence["_ImageColumn"]) -> "_ImageColumn":
        if len(columns) == 1:
            return columns[0]
        buffers: List[np.ndarray] = [_EMPTY]
        which = []
        for c in columns:
            shift = np.where(c.which > 0, len(buffers) - 1, 0).astype(np.int32)
            which.append(c.which + shift)
            buffers += c.buffers[1:]
        paths = None
        if any(c.paths is not None for c in columns):
            blobs = [c.paths[0] if c.paths is not None else _EMPTY for c in columns]
            sizes = [np.diff(c.paths[1], prepend=0) if c.paths is not None
                     else np.zeros(len(c), np.int64) for c in columns]
            paths = (np.concatenate(blobs), np.cumsum(np.concatenate(sizes)))
        return _ImageColumn(buffers, np.concatenate(which),
                            np.concatenate([c.starts for c in columns]),
                            np.concatenate([c.lengths for c in columns]), paths)


_PATH = -1  # _ImageColumn.which of a row read from its path (the native loader's "not in memory")


def _image_column(column: Any, name: str) -> _ImageColumn:
    """The :class:`_ImageColumn` of an image column (a ChunkedArray or Array): a struct
    ``{bytes, path}`` (the ``datasets`` Image feature) or plain binary. Vectorised over each
    chunk: no Python object is made per row."""
    import pyarrow as pa

    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    buffers: List[np.ndarray] = [_EMPTY]
    which: List[np.ndarray] = []
    starts: List[np.ndarray] = []
    lengths: List[np.ndarray] = []
    path_bytes: List[np.ndarray] = []  # the paths of rows stored as paths, chunk by chunk
    path_sizes: List[np.ndarray] = []
    row = 0
    for chunk in chunks:
        path_array = None
        if pa.types.is_struct(chunk.type):
            names = [chunk.type.field(k).name for k in range(chunk.type.num_fields)]
            if "bytes" not in names:
                raise TypeError(f"image column {name!r}: a struct needs a 'bytes' field "
                                f"(the datasets Image layout), got {chunk.type}")
            fields = dict(zip(names, chunk.flatten()))  # children with the parent's offset and nulls
            binary = fields["bytes"]
            path_array = fields.get("path")
        else:
            binary = chunk
        try:
            data, offsets, valid = _binary_rows(binary)
        except TypeError as exc:
            raise TypeError(f"image column {name!r}: {exc} (an Image feature or bytes)") from None
        offsets = offsets.astype(np.int64, copy=False)
        length = np.diff(offsets)
        held = valid & (length > 0)
        w = np.where(held, len(buffers), 0).astype(np.int32)
        sizes = np.zeros(len(chunk), np.int64)
        if path_array is not None and path_array.null_count < len(path_array):
            by_path = ~held & path_array.is_valid().to_numpy(zero_copy_only=False)
            if by_path.any():
                named = path_array.filter(pa.array(by_path))
                if pa.types.is_string(named.type) or pa.types.is_large_string(named.type):
                    named = named.view(pa.large_binary() if pa.types.is_large_string(named.type)
                                       else pa.binary())
                try:
                    names, name_offsets, _ = _binary_rows(named)
                except TypeError:
                    raise TypeError(f"image column {name!r}: a 'path' field of strings, got "
                                    f"{path_array.type}") from None
                path_bytes.append(names[int(name_offsets[0]):int(name_offsets[-1])])
                sizes[by_path] = np.diff(name_offsets.astype(np.int64))
                w[by_path] = _PATH
        path_sizes.append(sizes)
        buffers.append(data)
        which.append(w)
        starts.append(np.where(held, offsets[:-1], 0))
        lengths.append(np.where(held, length, 0))
        row += len(chunk)
    if not which:
        return _ImageColumn(buffers, np.zeros(0, np.int32), np.zeros(0, np.int64),
                            np.zeros(0, np.int64), None)
    paths = (np.concatenate(path_bytes), np.cumsum(np.concatenate(path_sizes))) \
        if path_bytes else None
    return _ImageColumn(buffers, np.concatenate(which), np.concatenate(starts),
                        np.concatenate(lengths), paths)


class _Null:
    """The ``where`` of a row without an image."""

    __slots__ = ("where",)

    def __init__(self, where: Callable[[int], str]):
        self.where = where

    def __call__(self, row: int) -> str:
        return f"{self.where(row)}: null image (no bytes, no path)"


class _Values:
    """A passed-through column, read a row at a time as the Python value ``datasets`` gives
    (numbers, str, lists): numbers from a numpy copy (8 bytes a row), anything else from the
    Arrow chunks where they are."""

    def __init__(self, column: Any):
        import pyarrow as pa

        kind = column.type
        self._array: Optional[np.ndarray] = None
        if column.null_count == 0 and (pa.types.is_integer(kind) or pa.types.is_floating(kind)
                                       or pa.types.is_boolean(kind)):
            self._array = column.to_numpy()
            return
        self._column = column
        self._chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        self._starts = np.cumsum([0] + [len(c) for c in self._chunks])

    def take(self, rows: np.ndarray) -> list:
        """The values of ``rows`` (table rows), in that order."""
        if self._array is not None:
            return self._array[rows].tolist()
        return self._column.take(rows).to_pylist()

    def __getitem__(self, row: int) -> Any:
        if self._array is not None:
            return self._array[row].item()
        c = int(np.searchsorted(self._starts, row, side="right")) - 1
        return self._chunks[c][row - int(self._starts[c])].as_py()


class _RowOf:
    """The ``where`` of a dataset's row: its row and column."""

    __slots__ = ("name", "column")

    def __init__(self, name: str, column: str):
        self.name, self.column = name, column

    def __call__(self, row: int) -> str:
        return f"{self.name}: row {row} of column {self.column!r}"


def _chained(columns: List[Any], files: Sequence[str] = (), what: str = "a column") -> Any:
    """One column of several files' tables, their chunks end to end (no copy). ``what`` the
    column and ``files`` the files the columns are from, for the error when they cannot be one."""
    import pyarrow as pa

    if len(columns) == 1:
        return columns[0]
    try:
        return pa.chunked_array([c for column in columns for c in column.chunks])
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # types differ between files: Python values
        pass
    try:
        return pa.chunked_array([pa.array([v for c in columns for v in c.to_pylist()])])
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        first = columns[0].type
        k = next(k for k, c in enumerate(columns) if c.type != first)
        raise TypeError(
            f"Parquet: {what} is {columns[k].type} in {files[k]!r} but {first} in {files[0]!r}; "
            "the files of one dataset need one type in each column (e.g. class indices in "
            "every file, or class names in every file)") from None


def _label_column(table: Any, label_column: Optional[str], name: str) -> Any:
    """The label column of ``table`` (of the file or dataset ``name``), checked: present, and no
    nulls (torch's collate cannot batch None). Any type: numbers batch as a tensor, str as a
    sequence of str, as torch's ``default_collate`` does for any Dataset."""
    if label_column is None:
        return None
    if label_column not in table.column_names:
        raise KeyError(_no_label(label_column, table.column_names, name))
    column = table.column(label_column)
    if column.null_count:
        nulls = np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))
        raise ValueError(
            f"{name}: label column {label_column!r} is null (None) in {column.null_count} "
            f"row(s), the first row {int(nulls[0])}; torch's collate cannot batch None: fill "
            "those labels (e.g. with -1) or drop those rows, or pass label_column=None for no "
            "label")
    return column


def _no_label(label_column: str, names: Sequence[str], name: str) -> str:
    return (f"{name}: no label column {label_column!r} (columns: {list(names)}); pass "
            "label_column= one of them, or label_column=None for no label")


def _image_type_problem(kind: Any) -> Optional[str]:
    """Why an Arrow type cannot be an image column, or None when it can: binary (encoded
    image bytes) or the ``datasets`` Image struct ``{bytes, path}``."""
    import pyarrow as pa

    def binary(t: Any) -> bool:
        return (pa.types.is_binary(t) or pa.types.is_large_binary(t)
                or pa.types.is_binary_view(t) or pa.types.is_string_view(t))

    if binary(kind):
        return None
    if pa.types.is_struct(kind):
        fields = {kind.field(k).name: kind.field(k).type for k in range(kind.num_fields)}
        if "bytes" not in fields:
            return (f"a struct without a 'bytes' field ({kind}); the datasets Image layout is "
                    "{bytes: binary, path: string}")
        if not binary(fields["bytes"]):
            return f"a struct whose 'bytes' field is {fields['bytes']}, not binary"
        path = fields.get("path")
        if path is not None and not (pa.types.is_string(path) or pa.types.is_large_string(path)
                                     or pa.types.is_null(path)):
            return f"a struct whose 'path' field is {path}, not a string"
        return None
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return (f"{kind} values (text, such as file paths), not image bytes (a column of paths "
                "becomes one with datasets' cast_column(name, datasets.Image()); or return "
                "rl.ImageFile(path) from a Dataset of your own)")
    return f"{kind} values, not image bytes"


def _check_columns(schema: Any, image_column: str, columns: Optional[Sequence[str]],
                   name: str, label_column: Optional[str] = None) -> List[str]:
    """``columns`` once checked against ``schema``: the image column there and of an image
    type, the label column (when given) and every passed-through column there."""
    names = schema.names
    if image_column not in names:
        raise KeyError(f"{name}: no image column {image_column!r} (columns: {names}); pass "
                       "image_column= the column of encoded images")
    problem = _image_type_problem(schema.field(image_column).type)
    if problem is not None:
        raise TypeError(f"{name}: image column {image_column!r} holds {problem}; pass "
                        "image_column= a column of encoded images (PNG, JPEG, ... as binary, or "
                        "the datasets Image feature)")
    if label_column is not None and label_column not in names:
        raise KeyError(_no_label(label_column, names, name))
    columns = list(columns or [])
    missing = [c for c in columns if c not in names]
    if missing:
        raise KeyError(f"{name}: no column {missing[0]!r} named in columns= (columns: {names})")
    return columns
