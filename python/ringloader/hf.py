"""Hugging Face ``datasets`` and Parquet files of encoded images, as Datasets of image references.

The image column is read from the Arrow table as it is: each row's encoded bytes are a numpy
view of the binary column's data buffer (sliced by its offsets), so no row is copied into a
Python ``bytes`` and no PIL image is made. A row that holds only a path becomes an
:class:`ImageFile`. The samples are ``(image, label, *columns)`` tuples of references, which
:class:`ringloader.DataLoader` decodes and transforms natively (the user-Dataset path) and
:func:`ringloader.materialize` decodes with Pillow anywhere else.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import hashlib
import json
import os
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch.utils.data as tud

from ._atomic import write_atomic
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


def _image_refs(column: Any, transform: Any, mode: str, where: Callable[[int], str],
                name: str) -> List[Any]:
    """One reference per row of an image column (a ChunkedArray or Array): a struct
    ``{bytes, path}`` (the ``datasets`` Image feature) or plain binary. A row with neither bytes
    nor a path (or a null) becomes empty bytes: decoding it is a sample error that names it."""
    import pyarrow as pa

    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    refs: List[Any] = []
    row = 0
    for chunk in chunks:
        paths: Optional[np.ndarray] = None
        if pa.types.is_struct(chunk.type):
            names = [chunk.type.field(k).name for k in range(chunk.type.num_fields)]
            if "bytes" not in names:
                raise TypeError(f"image column {name!r}: a struct needs a 'bytes' field "
                                f"(the datasets Image layout), got {chunk.type}")
            fields = dict(zip(names, chunk.flatten()))  # children with the parent's offset and nulls
            binary = fields["bytes"]
            if "path" in fields:
                paths = fields["path"].to_numpy(zero_copy_only=False)
        else:
            binary = chunk
        try:
            data, offsets, valid = _binary_rows(binary)
        except TypeError as exc:
            raise TypeError(f"image column {name!r}: {exc} (an Image feature or bytes)") from None
        starts, ends = offsets[:-1].tolist(), offsets[1:].tolist()
        bad = _Null(where)
        gc_was_on = gc.isenabled()
        gc.disable()  # millions of new objects, none of them cyclic: no collection passes
        try:
            for r in range(len(chunk)):
                if valid[r] and ends[r] > starts[r]:
                    refs.append(_ArrowImage(data[starts[r]:ends[r]], transform, mode, where,
                                            row + r))
                elif paths is not None and paths[r] is not None:
                    refs.append(ImageFile(paths[r], transform, mode))
                else:
                    refs.append(_ArrowImage(_EMPTY, transform, mode, bad, row + r))
        finally:
            if gc_was_on:
                gc.enable()
        row += len(chunk)
    return refs


class _Null:
    """The ``where`` of a row without an image."""

    __slots__ = ("where",)

    def __init__(self, where: Callable[[int], str]):
        self.where = where

    def __call__(self, row: int) -> str:
        return f"{self.where(row)}: null image (no bytes, no path)"


def _plain(column: Any) -> list:
    """A passed-through column as Python values (numbers, str, lists), as ``datasets`` gives."""
    return column.to_pylist()


class _ArrowImages(tud.Dataset):
    """The shared table part: references, labels and passed-through columns, indexed by row."""

    def __init__(self, refs: Sequence[Any], labels: Optional[np.ndarray],
                 extra: Sequence[list], target_transform: Any, name: str):
        self._refs = refs
        self._labels = labels
        self._extra = list(extra)
        self.target_transform = target_transform
        self._name = name

    def __len__(self) -> int:
        return len(self._refs)

    def __getitem__(self, i: int) -> Any:
        n = len(self._refs)
        if not -n <= i < n:
            raise IndexError(f"{self._name}: index {i} out of range for {n} rows")
        i = i % n
        sample: List[Any] = [self._refs[i]]
        if self._labels is not None:
            label = self._labels[i].item()
            sample.append(label if self.target_transform is None else self.target_transform(label))
        sample += [column[i] for column in self._extra]
        return tuple(sample)

    @property
    def targets(self) -> List[int]:
        return [] if self._labels is None else self._labels.tolist()


def _label_array(table: Any, label_column: Optional[str], name: str) -> Optional[np.ndarray]:
    if label_column is None:
        return None
    if label_column not in table.column_names:
        raise KeyError(f"{name}: no label column {label_column!r} (columns: {table.column_names}; "
                       "pass label_column=None for none)")
    column = table.column(label_column)
    if column.null_count:
        raise ValueError(f"{name}: label column {label_column!r} has {column.null_count} nulls")
    return column.to_numpy()


def _check_columns(schema: Any, image_column: str, columns: Optional[Sequence[str]],
                   name: str) -> List[str]:
    names = schema.names
    if image_column not in names:
        raise KeyError(f"{name}: no image column {image_column!r} (columns: {names})")
    columns = list(columns or [])
    missing = [c for c in columns if c not in names]
    if missing:
        raise KeyError(f"{name}: no column {missing[0]!r} named in columns= (columns: {names})")
    return columns


class HFDataset(_ArrowImages):
    """A Hugging Face ``datasets.Dataset`` of images as ``(image, label, *columns)`` samples of
    references, read natively by :class:`ringloader.DataLoader`.

    ``image_column`` is an ``Image`` feature (embedded bytes, or paths) or a binary column; its
    bytes are taken from the dataset's Arrow table without copying. ``label_column=None`` leaves
    the label out; ``columns`` lists further columns passed through as Python values (collated
    as torch's ``default_collate`` does)."""

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
        columns = _check_columns(table.schema, image_column, columns, name)
        indices = getattr(hf_dataset, "_indices", None)  # after select/shuffle/train_test_split
        rows = None if indices is None else indices.column(0).to_numpy()
        refs = _image_refs(table.column(image_column), transform, mode,
                           lambda r: f"{name}: row {r} of column {image_column!r}", image_column)
        labels = _label_array(table, label_column, name)
        extra = [_plain(table.column(c)) for c in columns]
        if rows is not None:
            refs = [refs[r] for r in rows]
            labels = None if labels is None else labels[rows]
            extra = [[column[r] for r in rows] for column in extra]
        super().__init__(refs, labels, extra, target_transform, name)
        self.hf_dataset = hf_dataset
        self.transform = transform

    def __repr__(self) -> str:
        return f"ringloader.{self._name}(rows={len(self)})"


def _parquet_files(files_or_glob: Any) -> List[str]:
    if isinstance(files_or_glob, (str, os.PathLike)):
        pattern = os.fspath(files_or_glob)
        files = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    else:
        files = [os.fspath(f) for f in files_or_glob]
    if not files:
        raise FileNotFoundError(f"Parquet({files_or_glob!r}): no file matches")
    for f in files:
        if not os.path.isfile(f):
            raise FileNotFoundError(f"Parquet: no such file {f!r}")
    return files


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


class Parquet(_ArrowImages):
    """Parquet files of encoded images (a struct ``{bytes, path}`` column, as ``datasets``
    writes an ``Image`` feature, or a plain binary column) as ``(image, label, *columns)``
    samples of references.

    The columns used are read with pyarrow once, one row group at a time, into a memory-mapped
    Arrow file under ``cache_dir`` (default ``~/.cache/ringloader/parquet``; reused while the
    Parquet file is unchanged): an epoch in any order reads no row group again, and the bytes
    are held by the page cache, not by the process."""

    def __init__(self, files_or_glob: Any, transform: Any = None, image_column: str = "image",
                 label_column: Optional[str] = "label", target_transform: Any = None,
                 columns: Optional[Sequence[str]] = None, mode: str = "RGB",
                 cache_dir: Optional[str] = None):
        import pyarrow.parquet as pq

        self.files = _parquet_files(files_or_glob)
        cache_dir = default_parquet_cache() if cache_dir is None else os.fspath(cache_dir)
        refs: List[Any] = []
        labels: List[np.ndarray] = []
        extra: List[list] = []
        for path in self.files:
            try:
                reader = pq.ParquetFile(path)
            except Exception as exc:
                raise ValueError(f"Parquet: {path!r} is not a readable Parquet file: {exc}") from exc
            wanted = _check_columns(reader.schema_arrow, image_column, columns,
                                    f"Parquet({path!r})")
            read = list(dict.fromkeys([image_column] + ([label_column] if label_column else [])
                                      + wanted))
            table = _arrow_copy(path, read, cache_dir)
            starts = np.cumsum([0] + [reader.metadata.row_group(g).num_rows
                                      for g in range(reader.num_row_groups)])

            def where(r: int, path: str = path, starts: np.ndarray = starts) -> str:
                g = int(np.searchsorted(starts, r, side="right")) - 1
                return f"{path}: row group {g}, row {r}"

            refs += _image_refs(table.column(image_column), transform, mode, where, image_column)
            label = _label_array(table, label_column, f"Parquet({path!r})")
            if label is not None:
                labels.append(label)
            if not extra:
                extra = [[] for _ in wanted]
            for column, c in zip(extra, wanted):
                column += _plain(table.column(c))
        super().__init__(refs, np.concatenate(labels) if labels else None, extra,
                         target_transform, f"Parquet({len(self.files)} files)")
        self.transform = transform

    def __repr__(self) -> str:
        return f"ringloader.{self._name}(rows={len(self)})"
