"""Hugging Face ``datasets`` and Parquet files of encoded images, as Datasets of image references.

The image column is read from the Arrow table as it is, as columns: each row is a buffer
index, offset and length into the binary column's data buffers (paths, for rows stored as
paths, one byte arena), so no row is copied into a Python ``bytes``, no PIL image is made and
no Python object is made per row. :class:`ringloader.DataLoader` is handed the columns whole
(``_native_columns``) and decodes and transforms natively (the user-Dataset path); ``ds[i]``
makes row i's ``(image, label, *columns)`` tuple of references when asked, which
:func:`ringloader.materialize` decodes with Pillow anywhere else.

Here are the datasets; the columns are read in ``_arrow_columns``, Parquet's files found,
downloaded and copied in ``_parquet_files``, and row groups read on demand in ``_row_groups``.
"""

from __future__ import annotations

import operator
import os
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch.utils.data as tud

from ._arrow_columns import (  # noqa: F401 - _ArrowImage, _Named: pickles name them here
    _EMPTY, _ArrowImage, _check_columns, _chained, _image_column, _ImageColumn, _label_column,
    _Named, _RowOf, _Values)
from ._parquet_files import _arrow_copy, _download, _parquet_files, default_parquet_cache
from ..core._source import file_identity
from ._row_groups import _column_bytes, _Feed, _RowGroupOf, _RowGroups, _UnreadGroups
from .references import ImageBytes

__all__ = ["HFDataset", "Parquet"]


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


_DEFAULT_SHUFFLE_BUFFER = 2000  # rows, as a WebDataset's (copy=False)
_READ_AHEAD_BYTES = 256 << 20  # row groups held for copy=False, at least two of the largest


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
