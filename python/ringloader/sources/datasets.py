"""Datasets whose samples ringloader reads and decodes natively.

Here are the datasets; their compact sample table and its list views are in ``_sample_table``,
the folder scan in ``_folder_scan``, ``SampleKey`` and the seeds drawn from it in
``_sample_keys`` (all importable from here as before)."""

from __future__ import annotations

import operator
import os
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .. import _C
from .. import transforms as T
from ._fallback import FallbackWarning, chain_reasons
from ._folder_scan import _make_dataset, find_classes
from ..core._sample_keys import _MASK64, SampleKey, _run_seeded, tail_seed
from ..core._sample_table import _SampleTable, _SamplesView, _TargetsView
from ..core._source import Source

try:
    from torch.utils.data import Dataset as _TorchDataset
except ImportError:  # torch is only needed to iterate; the datasets themselves work without it
    _TorchDataset = object  # type: ignore[assignment,misc]

__all__ = ["DatasetFolder", "FileList", "ImageFolder", "IMG_EXTENSIONS", "NativeDataset",
           "SampleKey"]

# torchvision.datasets.folder.IMG_EXTENSIONS: the native folder scan's list.
IMG_EXTENSIONS: Tuple[str, ...] = _C.IMG_EXTENSIONS
"""The file name endings :class:`ImageFolder` keeps (lower-cased), torchvision's ``IMG_EXTENSIONS``
without the formats ringloader does not decode natively; the decoder itself is chosen by the
file's signature, not by this ending."""


class NativeDataset(Source, _TorchDataset):
    """A list of ``(path, target)`` samples whose images ringloader reads and decodes natively:
    the common base of :class:`ImageFolder`, :class:`DatasetFolder` and :class:`FileList`, and
    what :class:`ringloader.DataLoader` batches natively (a ``torch.utils.data.Dataset``).

    JPEG, PNG, WebP, BMP, TIFF (8-bit RGB/gray/palette layouts), GIF (the first frame) and
    binary PPM/PGM/PBM are decoded in C++, chosen by the file's signature (not its extension),
    to the RGB pixels Pillow's ``convert("RGB")`` gives; other files (HEIF/AVIF, JPEG 2000, CMYK
    or 16-bit TIFF, plain-text PNM...) fail as a sample error that ``on_error`` handles.

    ``dataset[i]`` decodes one sample on the calling thread and returns ``(image, target)``;
    batches come from :class:`ringloader.DataLoader`.

    ``transform`` is a :mod:`ringloader.transforms` chain, a torchvision ``Compose`` (or a preset
    object that only applies one, as torchvision's classification references use) or any
    callable. The longest prefix with a native equivalent runs natively
    (:func:`ringloader.transforms.split`). When everything runs natively and the output size is
    fixed, the DataLoader batches natively. Otherwise the dataset runs **per sample**: native
    decode and prefix, then the remaining steps in Python (one :class:`ringloader.FallbackWarning`,
    a ``UserWarning``, per dataset names them), and the DataLoader batches through torch's machinery in worker processes. Output sizes
    that depend on the image (no transform, ``ToTensor()`` alone, ``Resize`` without a crop) are
    per sample too. ``strict=True`` raises ``TypeError`` naming the first step that would run in
    Python instead.

    ``exif_transpose=True`` turns each image upright by its EXIF orientation (JPEG, PNG, WebP,
    TIFF) before the transform, exactly as Pillow's ``ImageOps.exif_transpose`` (so the
    transform sees the rotated size); the default keeps the stored orientation, as torchvision.
    An image that needs turning is decoded whole (no region-of-interest decoding).

    ``transform`` and ``target_transform`` may be reassigned; a DataLoader over the dataset uses
    the new ones from its next ``iter()``. The dataset pickles and deep-copies at any time.

    Raises:
        TypeError: ``strict=True`` and a transform step that would run in Python (when it is
            set, at construction or by assignment); ``samples`` assigned something other than
            ``(path, target)`` pairs, or an item assigned into the read-only ``samples`` view.
        ValueError: ``samples`` assigned an empty list, or ``targets`` a list of another
            length.
        IndexError: ``dataset[i]`` out of range.
        ringloader.SampleError: ``dataset[i]`` of a file that cannot be read or decoded.

    Examples:
        >>> import torch
        >>> from torchvision.transforms import v2
        >>> import ringloader as rl
        >>> from ringloader.sample_data import make_sample_dataset
        >>> root = make_sample_dataset("photos", num_images=8, num_classes=2)
        >>> ds = rl.ImageFolder(root, transform=v2.Compose([v2.Resize(72), v2.CenterCrop(64),
        ...                                                 v2.PILToTensor()]))
        >>> isinstance(ds, rl.NativeDataset), isinstance(ds, torch.utils.data.Dataset)
        (True, True)
        >>> image, label = ds[3]  # decoded and transformed natively on the calling thread
        >>> tuple(image.shape), image.dtype, label
        ((3, 64, 64), torch.uint8, 0)
        >>> ds.samples = ds.samples[:4]  # as with torchvision's folders: keep the first class only
        >>> len(ds)
        4
    """

    def __init__(
        self,
        root: Optional[str],
        paths: Union[List[str], _SampleTable],
        labels: Optional[List[int]],
        classes: List[str],
        transform: Any = None,
        target_transform: Optional[Callable[[int], Any]] = None,
        strict: bool = False,
        exif_transpose: bool = False,
    ):
        self.root = root
        self.exif_transpose = bool(exif_transpose)
        self.classes: List[str] = list(classes)
        self.class_to_idx: Dict[str, int] = {c: i for i, c in enumerate(self.classes)}
        self._table = (paths if isinstance(paths, _SampleTable)
                       else _SampleTable.from_lists(paths, labels))
        # A list assigned to `targets` (None: the table's labels).
        self._targets: Optional[List[Any]] = None
        self.strict = bool(strict)
        # Bumped whenever transform, target_transform, samples or targets is assigned: a
        # DataLoader compares it to rebuild its native pipeline at the next iter().
        self.version = 0
        self._single: Optional[_C.Loader] = None
        self.transform = transform
        self.target_transform = target_transform

    def _name(self) -> str:
        return f"ringloader.{type(self).__name__}({self.root!r})"

    def describe(self) -> str:
        """What the source is (see ``ringloader.core._source``): its kind, where, its size."""
        where = "samples given as a list" if self.root is None else repr(self.root)
        return (f"ringloader.{type(self).__name__}: {len(self)} samples, {len(self.classes)} "
                f"classes, {where}")

    # ---- samples and targets ------------------------------------------------------------------

    @property
    def samples(self) -> Sequence[Tuple[str, int]]:
        """``(path, target)`` of each sample, as torchvision's list: a read-only view of the
        compact sample table (index, slice, iterate, compare with a list). Assign a new list
        to change the samples; ``targets`` then follows its targets."""
        return _SamplesView(self._table, "samples")

    @samples.setter
    def samples(self, samples: Sequence[Tuple[str, int]]) -> None:
        pairs = list(samples)
        for i, pair in enumerate(pairs):
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise TypeError(f"samples[{i}] must be a (path, target) pair, got {pair!r}")
        if not pairs:
            raise ValueError(f"{self._name()}: samples cannot be empty")
        self._table = _SampleTable.from_lists([os.fspath(p) for p, _ in pairs],
                                              [t for _, t in pairs])
        self._targets = None
        self._single = None
        self.version += 1

    @property
    def targets(self) -> Sequence[int]:
        """The target of each sample, as torchvision's list: a read-only view of the sample
        table, or the list last assigned (which the DataLoader and ``dataset[i]`` then use,
        mutations included, from the DataLoader's next ``iter()``)."""
        if self._targets is not None:
            return self._targets
        return _TargetsView(self._table, "targets")

    @targets.setter
    def targets(self, targets: Sequence[int]) -> None:
        self._targets = targets if isinstance(targets, list) else list(targets)
        self._single = None
        self.version += 1

    # ---- transforms ---------------------------------------------------------------------------

    #: Whether assigning a transform with Python steps warns here and obeys ``strict``:
    #: sources without a ``strict`` argument (a user's Dataset, a torchvision folder) leave that
    #: to the DataLoader's one FallbackWarning, which names the step.
    _warns_on_python_steps = True

    @property
    def transform(self) -> Any:
        return self._transform

    @transform.setter
    def transform(self, transform: Any) -> None:
        split = T.split(transform)
        if split.tail is not None and self._warns_on_python_steps:
            if self.strict:
                raise TypeError(
                    f"strict=True: transform step {split.tail_names[0]} cannot run natively "
                    f"({split.reason}; it would run per sample in Python); change it or pass "
                    "strict=False")
            warnings.warn(
                f"{self._name()}: the transform steps "
                f"{', '.join(split.tail_names)} run per sample in Python, in DataLoader worker "
                f"processes (the main process with num_workers=0; slower, the native steps before "
                f"them still run natively). The first "
                f"cannot run natively: {split.reason}. Pass strict=True to refuse instead.",
                FallbackWarning, stacklevel=3)
        self._transform = transform
        self._split = split
        self._single = None
        self.version += 1

    @property
    def target_transform(self) -> Optional[Callable[[int], Any]]:
        return self._target_transform

    @target_transform.setter
    def target_transform(self, target_transform: Optional[Callable[[int], Any]]) -> None:
        self._target_transform = target_transform
        self._single = None
        self.version += 1

    @property
    def steps(self) -> List[Dict[str, Any]]:
        """The native steps of the transform (its whole chain when ``per_sample`` is False)."""
        return self._split.steps

    @property
    def python_steps(self) -> List[str]:
        """Names of the transform steps that run in Python (empty when all run natively)."""
        return list(self._split.tail_names)

    @property
    def per_sample(self) -> bool:
        """True when samples are made one at a time (Python steps, or an output size that
        depends on the image) rather than batched by the native pipeline."""
        return self._split.tail is not None or not _C.fixed_size(self._split.steps)

    def fallback_reasons(self) -> List[str]:
        """Why the native pipeline cannot batch these samples (``ringloader.core._source``): each
        transform step or leaf that makes them run per sample; [] when they are batched."""
        return chain_reasons(self.transform, "the transform") if self.per_sample else []

    def __len__(self) -> int:
        return len(self._table)

    def native_targets(self) -> Union[np.ndarray, List[int]]:
        """Targets after ``target_transform`` (which must map an int to an int), one per sample."""
        targets: Any = self._table.labels if self._targets is None else self._targets
        if len(targets) != len(self):
            raise ValueError(f"{self._name()}: targets has {len(targets)} entries for "
                             f"{len(self)} samples (assign samples first, then targets)")
        if self.target_transform is None:
            return targets
        if isinstance(targets, np.ndarray):
            targets = targets.tolist()
        out = [self.target_transform(t) for t in targets]
        if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in out):
            raise TypeError("target_transform must return ints for the native pipeline")
        return [int(t) for t in out]

    def native_options(self) -> Dict[str, Any]:
        """The transform part of the native loader's options."""
        return {
            "transform": self.steps,
            "dtype": "float32" if T.has_to_tensor(self.steps) else "uint8",
            "exif_transpose": self.exif_transpose,
        }

    # ---- single samples -----------------------------------------------------------------------

    def _returns_pil(self) -> bool:
        """True when the native part hands a PIL image on: to the Python tail, or to the caller
        when there is no transform at all (as torchvision's ImageFolder)."""
        if self._split.tail is not None:
            return self._split.tail_input == "pil"
        return self._transform is None

    def _single_loader(self) -> "_C.Loader":
        if self._single is None:
            options = {"batch_size": 1, "num_workers": 1, "prefetch_batches": 1, "io": "pread",
                       "fast_decode": False}
            options.update(self.native_options())
            if self._returns_pil():
                options["layout"] = "NHWC"  # what PIL.Image.fromarray takes
            if not _C.fixed_size(self.steps):
                options["variable_size"] = True
            # Labels are not used by decode_sample; targets go through target_transform here.
            self._single = _C.Loader(self._table.arena(), np.zeros(len(self), dtype=np.int64),
                                     options, **self.byte_ranges())
        return self._single

    def __getitem__(self, key: Any):
        """``dataset[i]`` as torchvision's (augmentations drawn from torch's RNG), or
        ``dataset[SampleKey(...)]`` with augmentations drawn from the key's seed (the
        DataLoader's generic path: independent of worker count, repeatable on resume)."""
        import torch

        if isinstance(key, SampleKey):
            index = key.index
        else:
            index = operator.index(key)
            if index < 0:
                index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for a dataset of {len(self)} samples")
        single = self._single_loader()
        if isinstance(key, SampleKey):
            seed = key.seed & _MASK64
            out = single.decode_sample(index, seed, key.epoch, key=key.row_key())
        else:
            seed = int(torch.empty((), dtype=torch.int64).random_().item()) & _MASK64
            out = single.decode_sample(index, seed, 0)
        image: Any = torch.from_dlpack(out)
        if self._returns_pil():
            from PIL import Image

            image = Image.fromarray(image.numpy(), "RGB")
        tail = self._split.tail
        if tail is not None:
            if isinstance(key, SampleKey):
                image = _run_seeded(tail, image, tail_seed(key))
            else:
                image = tail(image)
        target = self.targets[index]
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target

    # ---- pickling -----------------------------------------------------------------------------

    def __getstate__(self) -> Dict[str, Any]:
        # The native handle holds threads and file state: a copy (pickle, deepcopy, a spawned
        # worker) makes its own on first use.
        state = dict(self.__dict__)
        state["_single"] = None
        return state

    def __repr__(self) -> str:
        return (
            f"ringloader.{type(self).__name__}(root={self.root!r}, samples={len(self)}, "
            f"classes={len(self.classes)}, transform={self.transform!r})"
        )


def _refuse_loader(cls: str, loader: Any) -> None:
    if loader is not None:
        raise TypeError(
            f"{cls}(loader=...) is not supported: ringloader decodes images natively. Use "
            f"torchvision's {cls} with ringloader.DataLoader's generic path instead."
        )


class DatasetFolder(NativeDataset):
    """A drop-in for ``torchvision.datasets.DatasetFolder`` whose images are decoded natively:
    one folder per class under ``root``, the files in them kept when their name ends with one of
    ``extensions`` (case-insensitive) or when ``is_valid_file(path)`` is true (exactly one of the
    two), walked in torchvision's order. ``classes``, ``class_to_idx``, ``samples``,
    ``targets`` and :meth:`find_classes` (which a subclass may override, as with torchvision) are
    torchvision's. ``loader`` is refused: files are decoded natively (see
    :class:`NativeDataset` for the formats, transforms and the per-sample path).

    Args:
        root: the folder holding one sub-folder per class.
        loader: refused (``TypeError``): decoding is native.
        extensions: file name endings to keep, e.g. ``(".png",)``.
        transform: the transform (see :class:`NativeDataset`).
        target_transform: a callable applied to each class index; it must return ints.
        is_valid_file: ``fn(path) -> bool`` choosing the files instead of ``extensions``.
        allow_empty: keep going when a class folder holds no file (torchvision's flag).
        strict: raise ``TypeError`` instead of running any transform step in Python.
        exif_transpose: turn each image upright by its EXIF orientation first.

    Raises:
        TypeError: ``loader`` given.
        ValueError: both or neither of ``extensions`` and ``is_valid_file`` given.
        FileNotFoundError: ``root`` is not a directory, holds no class folder, or (without
            ``allow_empty``) a class folder holds no valid file; the message names the folder.

    Examples:
        >>> import ringloader as rl
        >>> from ringloader.sample_data import make_sample_dataset
        >>> root = make_sample_dataset("photos", num_images=8, num_classes=2)
        >>> ds = rl.DatasetFolder(root, is_valid_file=lambda path: not path.endswith("6.jpg"))
        >>> [(path.split("/")[-1], label) for path, label in ds.samples]  # doctest: +NORMALIZE_WHITESPACE
        [('img_00000.jpg', 0), ('img_00002.jpg', 0), ('img_00004.jpg', 0),
         ('img_00001.jpg', 1), ('img_00003.jpg', 1), ('img_00005.jpg', 1), ('img_00007.jpg', 1)]
    """

    def __init__(
        self,
        root: str,
        loader: Optional[Callable[[str], Any]] = None,
        extensions: Optional[Tuple[str, ...]] = None,
        transform: Any = None,
        target_transform: Optional[Callable[[int], Any]] = None,
        is_valid_file: Optional[Callable[[str], bool]] = None,
        allow_empty: bool = False,
        strict: bool = False,
        exif_transpose: bool = False,
    ):
        _refuse_loader(type(self).__name__, loader)
        if (extensions is None) == (is_valid_file is None):
            raise ValueError("Both extensions and is_valid_file cannot be None or not None at the "
                             "same time")
        root = os.fspath(root)
        if not os.path.isdir(root):
            raise FileNotFoundError(f"{type(self).__name__} root {root!r} is not a directory")
        native_scan = (is_valid_file is None and not allow_empty
                       and tuple(extensions) == IMG_EXTENSIONS
                       and type(self).find_classes is DatasetFolder.find_classes)
        labels: Optional[List[int]] = None
        if native_scan:
            classes, blob, ends, label_array = _C.scan_image_folder(root)
            paths: Any = _SampleTable(blob, ends, label_array)
        else:
            classes, class_to_idx = self.find_classes(root)
            if is_valid_file is None:
                suffixes = extensions if isinstance(extensions, str) else tuple(extensions)
                is_valid_file = lambda path: path.lower().endswith(suffixes)  # noqa: E731
            paths, labels = _make_dataset(root, class_to_idx, is_valid_file, allow_empty,
                                          extensions)
        self.extensions = extensions
        super().__init__(root, paths, labels, classes, transform, target_transform, strict,
                         exif_transpose)

    def find_classes(self, directory: str) -> Tuple[List[str], Dict[str, int]]:
        """The class folders of ``directory``, sorted, and their indices (torchvision's)."""
        return find_classes(directory)


class ImageFolder(DatasetFolder):
    """A drop-in for ``torchvision.datasets.ImageFolder`` whose images are decoded natively:
    a :class:`DatasetFolder` of torchvision's image extensions (``IMG_EXTENSIONS``), or of the
    files ``is_valid_file`` accepts. Same class discovery, ``classes``, ``class_to_idx``,
    ``samples``, ``imgs``, ``targets`` and sample order as torchvision. See
    :class:`NativeDataset` for the formats, transforms and the per-sample path.

    Args:
        root: the folder holding one sub-folder per class.
        transform: the transform (see :class:`NativeDataset`).
        target_transform: a callable applied to each class index; it must return ints.
        loader: refused (``TypeError``): decoding is native.
        is_valid_file: ``fn(path) -> bool`` choosing the files instead of ``IMG_EXTENSIONS``.
        allow_empty: keep going when a class folder holds no image (torchvision's flag).
        strict: raise ``TypeError`` instead of running any transform step in Python.
        exif_transpose: turn each image upright by its EXIF orientation first.

    Raises:
        TypeError: ``loader`` given, or ``strict=True`` with a step that would run in Python.
        FileNotFoundError: ``root`` is not a directory, holds no class folder, or (without
            ``allow_empty``) a class folder holds no image; the message names the folder.

    Examples:
        >>> import ringloader as rl
        >>> from ringloader.sample_data import make_sample_dataset
        >>> root = make_sample_dataset("photos", num_images=8, num_classes=2)
        >>> ds = rl.ImageFolder(root)
        >>> ds.classes, len(ds), ds.targets
        (['class_00', 'class_01'], 8, [0, 0, 0, 0, 1, 1, 1, 1])
        >>> image, label = ds[0]  # a PIL image without a transform, as torchvision's gives
        >>> image.mode, image.size, label
        ('RGB', (400, 533), 0)
    """

    def __init__(
        self,
        root: str,
        transform: Any = None,
        target_transform: Optional[Callable[[int], Any]] = None,
        loader: Optional[Callable[[str], Any]] = None,
        is_valid_file: Optional[Callable[[str], bool]] = None,
        allow_empty: bool = False,
        strict: bool = False,
        exif_transpose: bool = False,
    ):
        super().__init__(root, loader, IMG_EXTENSIONS if is_valid_file is None else None,
                         transform, target_transform, is_valid_file, allow_empty, strict,
                         exif_transpose)

    @property
    def imgs(self) -> Sequence[Tuple[str, int]]:
        """torchvision's alias of ``samples``."""
        return _SamplesView(self._table, "imgs")

    @imgs.setter
    def imgs(self, samples: Sequence[Tuple[str, int]]) -> None:
        self.samples = samples


class FileList(NativeDataset):
    """Samples from a file list, decoded natively.

    ``FileList("train.txt", transform=...)`` reads one sample per line, ``<path> <label>``
    (separated by spaces or a tab; the label, a non-negative int, is the last field, so paths
    may contain spaces); relative paths are resolved against the list's folder, blank lines and
    lines starting with ``#`` are skipped, and errors name the list and the line.
    ``FileList(paths, labels, transform=...)`` takes the samples directly.

    ``classes`` names the labels (``classes[label]``); by default ``"0"`` ... ``str(max label)``.
    ``samples``, ``targets``, ``classes``, ``class_to_idx`` and :meth:`find_classes` follow
    torchvision's names. See :class:`NativeDataset` for the formats, transforms and the
    per-sample path.

    Args:
        source: the path of a list file, or a sequence of image paths.
        labels: one non-negative int per path (only with a sequence of paths).
        transform: the transform (see :class:`NativeDataset`).
        target_transform: a callable applied to each label; it must return ints.
        classes: the name of each label (default ``"0"`` ... ``str(max label)``).
        strict: raise ``TypeError`` instead of running any transform step in Python.
        exif_transpose: turn each image upright by its EXIF orientation first.

    Raises:
        FileNotFoundError: the list file cannot be opened (the message names it).
        ValueError: a line of the list without a non-negative integer label (the message names
            the list and the line), paths and labels of different lengths, no samples, a
            negative label, or a label with no name in ``classes``.
        TypeError: labels given with a list file, or missing with a sequence of paths.

    Examples:
        >>> import ringloader as rl
        >>> from ringloader.sample_data import make_sample_dataset
        >>> root = make_sample_dataset("photos", num_images=8, num_classes=2)
        >>> with open("train.txt", "w") as f:
        ...     print("photos/class_00/img_00000.jpg 0", file=f)
        ...     print("# a comment line", file=f)
        ...     print("photos/class_01/img_00001.jpg 1", file=f)
        >>> ds = rl.FileList("train.txt", classes=["cat", "dog"])
        >>> len(ds), ds.classes, ds.targets
        (2, ['cat', 'dog'], [0, 1])
    """

    def __init__(
        self,
        source: Any,
        labels: Optional[Sequence[int]] = None,
        transform: Any = None,
        target_transform: Optional[Callable[[int], Any]] = None,
        classes: Optional[Sequence[str]] = None,
        strict: bool = False,
        exif_transpose: bool = False,
    ):
        if isinstance(source, (str, os.PathLike)):
            if labels is not None:
                raise TypeError("FileList(list_path) reads the labels from the list: pass no "
                                "labels, or pass paths and labels")
            root: Optional[str] = os.fspath(source)
            paths, labels = _C.read_file_list(root)
        else:
            root = None
            paths = [os.fspath(p) for p in source]
            if labels is None:
                raise TypeError("FileList(paths, labels): labels are missing")
            labels = [operator.index(label) for label in labels]
            if len(labels) != len(paths):
                raise ValueError(f"FileList: {len(paths)} paths but {len(labels)} labels")
            if not paths:
                raise ValueError("FileList: no samples")
            negative = [label for label in labels if label < 0]
            if negative:
                raise ValueError(f"FileList: labels must be non-negative, got {negative[0]}")
        if classes is None:
            classes = [str(i) for i in range(max(labels) + 1)]
        elif max(labels) >= len(classes):
            raise ValueError(f"FileList: label {max(labels)} has no name in the {len(classes)} "
                             "classes given")
        super().__init__(root, list(paths), list(labels), list(classes), transform,
                         target_transform, strict, exif_transpose)

    def find_classes(self, directory: Optional[str] = None) -> Tuple[List[str], Dict[str, int]]:
        """``(classes, class_to_idx)`` of the list (there are no class folders to find)."""
        return list(self.classes), dict(self.class_to_idx)
