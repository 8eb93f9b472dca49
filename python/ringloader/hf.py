"""Hugging Face ``datasets`` and Parquet files of encoded images, as Datasets of image references.

The image column is read from the Arrow table as it is, as columns: each row is a buffer
index, offset and length into the binary column's data buffers (paths, for rows stored as
paths, one byte arena), so no row is copied into a Python ``bytes``, no PIL image is made and
no Python object is made per row. :class:`ringloader.DataLoader` is handed the columns whole
(``_native_columns``) and decodes and transforms natively (the user-Dataset path); ``ds[i]``
makes row i's ``(image, label, *columns)`` tuple of references when asked, which
:func:`ringloader.materialize` decodes with Pillow anywhere else.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import operator
import os
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch.utils.data as tud

from ._atomic import write_atomic
from ._planning import file_identity
from .references import ImageBytes, ImageFile

__all__ = ["HFDataset", "Parquet"]


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


class _ArrowImages(tud.Dataset):
    """The shared table part, as columns: the image column, labels and passed-through columns,
    indexed by table row. ``rows`` maps a position to its table row (None: the identity), as a
    ``datasets`` indices mapping does. A sample's references are made when it is asked for;
    :class:`ringloader.DataLoader` takes the columns whole (``_native_columns``)."""

    def __init__(self, images: _ImageColumn, where: Callable[[int], str],
                 labels: Optional[_Values], extra: Sequence[_Values],
                 rows: Optional[np.ndarray], transform: Any, target_transform: Any, mode: str,
                 name: str):
        ImageBytes(_EMPTY, transform, mode)  # mode and (for masks) transform checked here
        self._images = images
        self._where = where
        self._rows = rows
        # Read as a passed-through column is, by table row: numbers from numpy, anything else
        # (str class names, lists) as the Python values ``datasets`` gives, which torch's
        # collate batches as it does for any Dataset (str: a sequence of str).
        self._labels = labels
        self._extra = list(extra)
        self.transform = transform
        self.target_transform = target_transform
        self.mode = mode
        self._name = name

    def __len__(self) -> int:
        return len(self._images) if self._rows is None else len(self._rows)

    def _row(self, i: int) -> int:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"{self._name}: index {i} out of range for {n} rows")
        i = i % n
        return i if self._rows is None else int(self._rows[i])

    def _values(self, i: int, row: int) -> List[Any]:
        """Sample i's label (target_transform applied) and passed-through columns."""
        values: List[Any] = []
        if self._labels is not None:
            label = self._labels[row]
            values.append(label if self.target_transform is None else self.target_transform(label))
        return values + [column[row] for column in self._extra]

    def __getitem__(self, i: int) -> Any:
        i = operator.index(i)
        row = self._row(i)
        image = self._images.ref(row, self.transform, self.mode, self._where)
        return (image, *self._values(i % len(self), row))

    def _native_columns(self) -> Any:
        """The whole table for the native loader (``_columns.Columns``): each sample's bytes
        as (buffer, start, length) arrays, the arena of the paths of rows stored as paths, and
        the rest of a sample built when its batch is."""
        from ._columns import Columns

        images, rows = self._images, self._rows
        which, starts, lengths = images.which, images.starts, images.lengths
        if rows is not None:
            which, starts, lengths = which[rows], starts[rows], lengths[rows]
        paths = images.paths_of(rows)
        feed = getattr(self, "_feed", None)
        model = self[0][0] if len(self) and feed is None else \
            ImageBytes(_EMPTY, self.transform, self.mode)
        return Columns(model, (images.buffers, which, starts, lengths), paths, self._structures,
                       self._describe_row, feed)

    def _structures(self, positions: Sequence[int]) -> List[Tuple[Any, ...]]:
        """The samples at ``positions``, their image as ``_leaf(0)``: the batch's structures,
        column by column (a batch's rows in a few numpy and Arrow calls)."""
        from ._structures import _leaf

        at = np.asarray(positions, dtype=np.int64)
        parts: List[Sequence[Any]] = [[_leaf(0)] * len(at)]
        if self._labels is not None:
            labels = self._labels.take(at if self._rows is None else self._rows[at])
            if self.target_transform is not None:
                labels = [self.target_transform(label) for label in labels]
            parts.append(labels)
        rows = at if self._rows is None else self._rows[at]
        parts += [column.take(rows) for column in self._extra]
        return list(zip(*parts))

    def _describe_row(self, i: int) -> str:
        if isinstance(self._images, _RowGroups):
            return self._where(self._row(i))  # without reading its row group
        return self[i][0].describe()

    @property
    def targets(self) -> List[Any]:
        """Each sample's label as ``ds[i]`` gives it (before ``target_transform``)."""
        if self._labels is None:
            return []
        return self._labels.take(np.arange(len(self)) if self._rows is None else self._rows)


class _RowOf:
    """The ``where`` of a dataset's row: its row and column."""

    __slots__ = ("name", "column")

    def __init__(self, name: str, column: str):
        self.name, self.column = name, column

    def __call__(self, row: int) -> str:
        return f"{self.name}: row {row} of column {self.column!r}"


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


class HFDataset(_ArrowImages):
    """A Hugging Face ``datasets.Dataset`` of images as ``(image, label, *columns)`` samples of
    references, read natively by :class:`ringloader.DataLoader`.

    ``image_column`` is an ``Image`` feature (embedded bytes, or paths) or a binary column; its
    bytes are taken from the dataset's Arrow table without copying. The label is any column's
    values (numbers, or e.g. class names, which batch as torch's ``default_collate`` batches
    str); ``label_column=None`` leaves it out; ``columns`` lists further columns passed through
    as Python values (collated as torch's ``default_collate`` does).

    Examples:
        >>> import datasets
        >>> import ringloader as rl
        >>> from ringloader.sample_data import make_sample_dataset
        >>> root = make_sample_dataset("photos", num_images=8, num_classes=2)
        >>> files = sorted(str(p) for p in root.rglob("*.jpg"))
        >>> hf = datasets.Dataset.from_dict({"image": files, "label": [0, 0, 0, 0, 1, 1, 1, 1]})
        >>> hf = hf.cast_column("image", datasets.Image())
        >>> ds = rl.HFDataset(hf)
        >>> image, label = ds[5]
        >>> type(image).__name__, label
        ('ImageFile', 1)
        >>> image.materialize().mode  # decoded with Pillow outside the DataLoader
        'RGB'
    """

    def __init__(self, hf_dataset: Any, transform: Any = None, image_column: str = "image",
                 label_column: Optional[str] = "label", target_transform: Any = None,
                 columns: Optional[Sequence[str]] = None, mode: str = "RGB"):
        import pyarrow as pa

        info = getattr(hf_dataset, "info", None)
        name = f"HFDataset({getattr(info, 'dataset_name', None) or 'dataset'})"
        table = getattr(getattr(hf_dataset, "data", None), "table", None)
        if not isinstance(table, pa.Table):
            raise TypeError(f"HFDataset(hf_dataset=...) needs a datasets.Dataset, got "
                            f"{type(hf_dataset).__name__} (an IterableDataset or DatasetDict: "
                            "pick a split, e.g. ds['train'])")
        columns = _check_columns(table.schema, image_column, columns, name, label_column)
        indices = getattr(hf_dataset, "_indices", None)  # after select/shuffle/train_test_split
        rows = None if indices is None else indices.column(0).to_numpy().astype(np.int64)
        images = _image_column(table.column(image_column), image_column)
        label = _label_column(table, label_column, name)
        labels = None if label is None else _Values(label)
        extra = [_Values(table.column(c)) for c in columns]
        super().__init__(images, _RowOf(name, image_column), labels, extra, rows, transform,
                         target_transform, mode, name)
        self.hf_dataset = hf_dataset
        self._args = (image_column, label_column, tuple(columns))

    def __reduce__(self) -> Any:
        # The datasets.Dataset pickles as it does for torch's workers (a memory-mapped one as its
        # files); the columns are taken from it again, never pickled row by row.
        image_column, label_column, columns = self._args
        return (HFDataset, (self.hf_dataset, self.transform, image_column, label_column,
                            self.target_transform, list(columns), self.mode))

    def __repr__(self) -> str:
        return f"ringloader.{self._name}(rows={len(self)})"


def _parquet_files(files_or_glob: Any) -> List[str]:
    """The Parquet files as given: local paths (a glob matched, sorted) or http(s)/s3 URLs
    (brace patterns such as ``part-{0000..0063}.parquet`` expanded; no glob: an object store
    is not listed)."""
    from ._remote import remote_scheme
    from ._shard_index import _expand_braces

    if isinstance(files_or_glob, (str, os.PathLike)):
        pattern = os.fspath(files_or_glob)
        if remote_scheme(pattern) is not None:
            files = _expand_braces(pattern)
        else:
            files = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    else:
        files = [os.fspath(f) for f in files_or_glob]
    if not files:
        raise FileNotFoundError(f"Parquet({files_or_glob!r}): no file matches")
    for f in files:
        if remote_scheme(f) is not None:
            if any(c in f for c in "*?["):
                raise ValueError(f"Parquet: {f!r}: a URL cannot be a glob (an object store is "
                                 "not listed); name the files, or use a brace pattern "
                                 "such as part-{0000..0063}.parquet")
        elif not os.path.isfile(f):
            raise FileNotFoundError(f"Parquet: no such file {f!r}")
    return files


def _download(files: List[str], download_dir: Optional[str], ca_file: Optional[str],
              remote_options: Optional[dict]) -> List[str]:
    """The local path of each of ``files``: remote ones fetched natively into the shard cache
    (``download_dir``, default that of remote WebDataset shards; one download per file per
    node, kept there and read from there by later runs), local ones as they are."""
    from ._remote import RemoteFetcher, raise_if_fatal, remote_scheme

    remote = [f for f in files if remote_scheme(f) is not None]
    if not remote:
        return files
    fetcher = RemoteFetcher(download_dir, None, ca_file, remote_options)
    local = {}
    for url, result in zip(remote, fetcher.fetch(remote)):
        if "error" in result:
            raise_if_fatal(result, f"Parquet: cannot fetch {url}")
            raise OSError(f"Parquet: cannot fetch {url}: {result['error']}")  # after the retries
        local[url] = result["path"]
    return [local.get(f, f) for f in files]


def default_parquet_cache() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ringloader", "parquet")


def _footer_digest(f: Any, size: int) -> str:
    """A hash of a Parquet file's footer (its FileMetaData: the row groups, their offsets, sizes
    and statistics, and the schema), which a rewrite with other rows changes even where the
    size and modification time are kept."""
    f.seek(max(0, size - 8))
    tail = f.read(8)
    length = int.from_bytes(tail[:4], "little") if len(tail) == 8 else 0
    f.seek(max(0, size - 8 - length))
    return hashlib.sha256(f.read(length + 8)).hexdigest()


def _copy_names(path: str, read: List[str], cache_dir: str) -> Tuple[str, str]:
    """(the Arrow copy of the ``read`` columns of ``path`` as the file is now, the name prefix
    shared by every copy of those columns of that path). The key holds the size, modification
    and change times, inode and footer hash: a file rewritten in place or replaced (even with
    its size and mtime restored) gets a new copy."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        footer = _footer_digest(f, st.st_size)
    prefix = hashlib.sha256(json.dumps([os.path.abspath(path), read]).encode()).hexdigest()[:24]
    key = json.dumps([st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, footer])
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return os.path.join(cache_dir, f"{prefix}-{digest}.arrow"), prefix


def _arrow_copy(path: str, read: List[str], cache_dir: str) -> Any:
    """The ``read`` columns of a Parquet file as a memory-mapped Arrow table. Parquet pages are
    compressed and length-prefixed, so rows cannot be referenced where they lie on disk: each
    row group is read once (one at a time: memory stays within a row group) into an Arrow IPC
    file under ``cache_dir``, kept for the next run while the Parquet file is unchanged, and
    mapped, so the rows' bytes live in the page cache, not in process memory."""
    import pyarrow as pa

    target, prefix = _copy_names(path, read, cache_dir)
    if not os.path.exists(target):
        os.makedirs(cache_dir, exist_ok=True)
        # Ranks on one machine start together: one converts, the others wait for its copy
        # instead of each reading every row group into a temporary file of their own.
        with _exclusive(os.path.join(cache_dir, prefix + ".lock")):
            if not os.path.exists(target):
                _convert(path, read, target)
                if _copy_names(path, read, cache_dir)[0] != target:
                    os.unlink(target)  # rows of no single version of the file
                    raise RuntimeError(f"Parquet: {path!r} changed while it was being read into "
                                       f"its Arrow copy under {cache_dir!r}; build the dataset "
                                       "again once the file is written")
                # Copies of an earlier version of the file would only take disk space (a
                # process that still maps one keeps its pages until it closes it).
                for old in glob.glob(os.path.join(glob.escape(cache_dir), prefix + "-*.arrow")):
                    if old != target:
                        try:
                            os.unlink(old)
                        except OSError:
                            pass
    return pa.ipc.open_file(pa.memory_map(target, "r")).read_all()


def _convert(path: str, read: List[str], target: str) -> None:
    """Writes the ``read`` columns of ``path`` into ``target``, one row group at a time. The
    file is opened here, after its key was taken: a version that replaced it since is seen
    by the check that follows, not copied under the earlier key."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    reader = pq.ParquetFile(path)
    schema = reader.schema_arrow
    schema = pa.schema([schema.field(c) for c in read])

    def write(f: Any) -> None:
        with pa.ipc.new_file(f, schema) as writer:
            for g in range(reader.num_row_groups):
                writer.write_table(reader.read_row_group(g, columns=read))

    write_atomic(target, write)


@contextlib.contextmanager
def _exclusive(lock_path: str) -> Iterator[None]:
    """Holds an exclusive ``flock`` on ``lock_path`` (created if missing) for the block; other
    processes, and other opens in this one, wait. Where the filesystem refuses locks (some
    network mounts) the block runs unlocked: the copy is still written atomically."""
    import fcntl

    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(lock_path, flags, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # releases the lock


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
        from ._source import StaleIndexError

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


_DEFAULT_SHUFFLE_BUFFER = 2000  # rows, as a WebDataset's (copy=False)
_READ_AHEAD_BYTES = 256 << 20  # row groups held for copy=False, at least two of the largest


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


class Parquet(_ArrowImages):
    """Parquet files of encoded images (a struct ``{bytes, path}`` column, as ``datasets``
    writes an ``Image`` feature, or a plain binary column) as ``(image, label, *columns)``
    samples of references.

    The columns used are read with pyarrow once, one row group at a time, into a memory-mapped
    Arrow file under ``cache_dir`` (default ``~/.cache/ringloader/parquet``; reused while the
    Parquet file is unchanged): an epoch in any order reads no row group again, and the bytes
    are held by the page cache, not by the process. ``copy=False`` makes no copy: each row
    group's images are read when the epoch reaches them, once an epoch, within
    ``read_ahead_bytes`` (default 256 MB, or two of the largest row groups), in the order of the
    row groups permuted and a ``shuffle_buffer`` of rows (the WebDataset order; no other
    sampler, Subset or per-sample Python transform). ``http(s)://`` and ``s3://`` URLs (brace
    patterns expanded) are downloaded natively into ``download_dir`` first (default: the remote
    shards' cache folder; ``ca_file``, ``remote_options`` as for :class:`WebDataset`).

    Examples:
        >>> import datasets
        >>> import ringloader as rl
        >>> from ringloader.sample_data import make_sample_dataset
        >>> root = make_sample_dataset("photos", num_images=8, num_classes=2)
        >>> files = sorted(str(p) for p in root.rglob("*.jpg"))
        >>> hf = datasets.Dataset.from_dict({"image": files, "label": [0, 0, 0, 0, 1, 1, 1, 1]})
        >>> _ = hf.cast_column("image", datasets.Image()).to_parquet("train.parquet")
        >>> ds = rl.Parquet("train.parquet", cache_dir="parquet-cache")
        >>> len(ds), ds[7][1]
        (8, 1)
    """

    def __init__(self, files_or_glob: Any, transform: Any = None, image_column: str = "image",
                 label_column: Optional[str] = "label", target_transform: Any = None,
                 columns: Optional[Sequence[str]] = None, mode: str = "RGB",
                 cache_dir: Optional[str] = None, download_dir: Optional[str] = None,
                 ca_file: Optional[str] = None, remote_options: Optional[dict] = None,
                 copy: bool = True, shuffle_buffer: int = _DEFAULT_SHUFFLE_BUFFER,
                 read_ahead_bytes: Optional[int] = None):
        import pyarrow.parquet as pq

        if not isinstance(copy, bool):
            raise TypeError(f"Parquet(copy=...) must be True or False, got {copy!r}")
        if isinstance(shuffle_buffer, bool) or not isinstance(shuffle_buffer, (int, np.integer)) \
                or shuffle_buffer < 0:
            raise ValueError(f"Parquet(shuffle_buffer=...) must be an int >= 0, got {shuffle_buffer!r}")
        if read_ahead_bytes is not None and (isinstance(read_ahead_bytes, bool) or not isinstance(
                read_ahead_bytes, (int, np.integer)) or read_ahead_bytes < 1):
            raise ValueError("Parquet(read_ahead_bytes=...) must be a positive int (bytes) or None, "
                             f"got {read_ahead_bytes!r}")
        self.files = _parquet_files(files_or_glob)
        self.copy = copy
        self.shuffle_buffer = int(shuffle_buffer)
        cache_dir = default_parquet_cache() if cache_dir is None else os.fspath(cache_dir)
        download_dir = None if download_dir is None else os.fspath(download_dir)
        paths = _download(self.files, download_dir, ca_file, remote_options)
        images: List[_ImageColumn] = []
        labels: List[Any] = []  # each file's label column
        extra: List[List[Any]] = []
        groups: List[np.ndarray] = []
        sizes: List[List[int]] = []  # copy=False: rows and image bytes of each row group,
        byte_sizes: List[List[int]] = []
        stamps: List[tuple] = []  # and each file as it was read
        for name, path in zip(self.files, paths):
            try:
                reader = pq.ParquetFile(path)
            except Exception as exc:
                raise ValueError(f"Parquet: {name!r} is not a readable Parquet file: {exc}") from exc
            wanted = _check_columns(reader.schema_arrow, image_column, columns,
                                    f"Parquet({name!r})", label_column)
            meta = reader.metadata
            rows = [meta.row_group(g).num_rows for g in range(reader.num_row_groups)]
            groups.append(np.cumsum([0] + rows))
            others = list(dict.fromkeys(([label_column] if label_column else []) + wanted))
            if copy:
                table = _arrow_copy(path, list(dict.fromkeys([image_column] + others)), cache_dir)
                images.append(_image_column(table.column(image_column), image_column))
            else:
                # Only the small columns are read now; the images when an epoch needs them.
                stamps.append(file_identity(path))
                table = reader.read(columns=others) if others else None
                sizes.append(rows)
                byte_sizes.append([_column_bytes(meta.row_group(g), image_column)
                                   for g in range(reader.num_row_groups)])
            label = _label_column(table, label_column, f"Parquet({name!r})") if label_column \
                else None
            if label is not None:
                labels.append(label)
            extra.append([table.column(c) for c in wanted])
        where = _RowGroupOf(self.files, groups)
        self._feed: Optional[_Feed] = None
        if copy:
            image_rows: Any = _ImageColumn.concat(images)
        else:
            image_rows = _RowGroups(paths, self.files, image_column, sizes, byte_sizes, stamps)
            biggest = int(image_rows.byte_sizes.max()) if len(image_rows.byte_sizes) else 0
            budget = read_ahead_bytes if read_ahead_bytes is not None \
                else max(_READ_AHEAD_BYTES, 2 * biggest)
            self._feed = _Feed(image_rows, budget)
            where = _UnreadGroups(where, image_rows, self._feed)
        super().__init__(image_rows, where,
                         _Values(_chained(labels, self.files, f"label column {label_column!r}"))
                         if labels else None,
                         [_Values(_chained([e[k] for e in extra], self.files, f"column {c!r}"))
                          for k, c in enumerate(wanted)],
                         None, transform, target_transform, mode,
                         f"Parquet({len(self.files)} files)")
        self._args = (image_column, label_column, list(columns or []), cache_dir, download_dir,
                      ca_file, remote_options, copy, self.shuffle_buffer, read_ahead_bytes)

    def _default_sampler(self, num_replicas: Optional[int], rank: Optional[int], shuffle: bool,
                         seed: int, drop_last: bool, generator: Any = None) -> Any:
        """The order of rows read on demand (``copy=False``): the row groups permuted, a
        contiguous part per rank, a shuffle buffer of ``shuffle_buffer`` rows (the WebDataset
        order over row groups). None with the copy: torch's own order."""
        if self._feed is None:
            return None
        from .webdataset import WebDatasetSampler

        return WebDatasetSampler.default_for(self, num_replicas, rank, shuffle, seed, drop_last,
                                             generator)

    @property
    def shard_sizes(self) -> Optional[List[int]]:
        """Rows per row group, across the files end to end, when they are read on demand
        (``copy=False``: the epoch order takes them group by group); None with the copy."""
        return None if self._feed is None else self._feed.groups.sizes.tolist()

    def __reduce__(self) -> Any:
        # Rebuilt from the files: the Arrow copies are mapped again, no row is pickled (a remote
        # file is found in the download cache).
        return (Parquet, (self.files, self.transform, self._args[0], self._args[1],
                          self.target_transform, self._args[2], self.mode, *self._args[3:]))

    def __repr__(self) -> str:
        return f"ringloader.{self._name}(rows={len(self)})"
