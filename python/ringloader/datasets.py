"""Datasets whose samples ringloader reads and decodes natively."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _C
from . import transforms as T

__all__ = ["ImageFolder", "IMG_EXTENSIONS"]

# torchvision.datasets.folder.IMG_EXTENSIONS
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def _scan_python(root: str, is_valid_file: Callable[[str], bool], allow_empty: bool):
    """torchvision's find_classes + make_dataset, for a custom ``is_valid_file``."""
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {root}.")
    paths: List[str] = []
    labels: List[int] = []
    empty = []
    for label, name in enumerate(classes):
        before = len(paths)
        for dirpath, _, fnames in sorted(os.walk(os.path.join(root, name), followlinks=True)):
            for fname in sorted(fnames):
                path = os.path.join(dirpath, fname)
                if is_valid_file(path):
                    paths.append(path)
                    labels.append(label)
        if len(paths) == before:
            empty.append(name)
    if empty and not allow_empty:
        raise FileNotFoundError(f"Found no valid file for the classes {', '.join(empty)}. ")
    return classes, paths, labels


class ImageFolder:
    """A drop-in for ``torchvision.datasets.ImageFolder`` whose images are decoded natively.

    JPEG, PNG, WebP, BMP, TIFF (8-bit RGB/gray/palette layouts) and binary PPM/PGM/PBM are
    decoded in C++, chosen by the file's signature (not its extension), to the RGB pixels
    Pillow's ``convert("RGB")`` gives; other files (GIF, CMYK or 16-bit TIFF, plain-text PNM...)
    fail as a sample error that ``on_error`` handles.

    Same class discovery, ``classes``, ``class_to_idx``, ``samples``, ``targets`` and sample order
    as torchvision. ``transform`` is a :mod:`ringloader.transforms` chain or a torchvision
    ``Compose`` of the supported transforms. ``dataset[i]`` decodes one sample on the calling
    thread and returns ``(tensor, target)``; batches come from :class:`ringloader.DataLoader`.
    """

    def __init__(
        self,
        root: str,
        transform: Any = None,
        target_transform: Optional[Callable[[int], int]] = None,
        loader: Optional[Callable[[str], Any]] = None,
        is_valid_file: Optional[Callable[[str], bool]] = None,
        allow_empty: bool = False,
    ):
        if loader is not None:
            raise TypeError(
                "ImageFolder(loader=...) is not supported: ringloader decodes images natively. "
                "Use torchvision's ImageFolder with ringloader.DataLoader's generic path instead."
            )
        root = os.fspath(root)
        if not os.path.isdir(root):
            raise FileNotFoundError(f"ImageFolder root {root!r} is not a directory")
        self.root = root
        if is_valid_file is not None or allow_empty:
            valid = is_valid_file or (lambda p: p.lower().endswith(IMG_EXTENSIONS))
            classes, paths, labels = _scan_python(root, valid, allow_empty)
        else:
            classes, paths, labels = _C.scan_image_folder(root)
        self.classes: List[str] = list(classes)
        self.class_to_idx: Dict[str, int] = {c: i for i, c in enumerate(self.classes)}
        self.samples: List[Tuple[str, int]] = list(zip(paths, labels))
        self.imgs = self.samples
        self.targets: List[int] = list(labels)
        self.transform = transform
        self.target_transform = target_transform
        self.steps = T.to_steps(transform)
        self._single: Optional[_C.Loader] = None

    def __len__(self) -> int:
        return len(self.samples)

    def native_targets(self) -> List[int]:
        """Targets after ``target_transform`` (which must map an int to an int)."""
        if self.target_transform is None:
            return self.targets
        out = [self.target_transform(t) for t in self.targets]
        if not all(isinstance(t, int) for t in out):
            raise TypeError("target_transform must return ints for the native pipeline")
        return out

    def native_options(self) -> Dict[str, Any]:
        """The transform part of the native loader's options."""
        return {
            "transform": self.steps,
            "dtype": "float32" if T.has_to_tensor(self.steps) else "uint8",
        }

    def __getitem__(self, index: int):
        import torch

        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for a dataset of {len(self)} samples")
        if not self.steps:
            from PIL import Image  # no transform: torchvision gives the PIL image

            with open(self.samples[index][0], "rb") as f:
                img = Image.open(f).convert("RGB")
            target = self.native_targets()[index]
            return img, target
        if self._single is None:
            paths = [p for p, _ in self.samples]
            options = {"batch_size": 1, "num_workers": 1, "prefetch_batches": 1, "io": "pread"}
            options.update(self.native_options())
            self._single = _C.Loader(paths, self.native_targets(), options)
        seed = int(torch.empty((), dtype=torch.int64).random_().item())
        tensor = torch.from_dlpack(self._single.decode_sample(index, seed & (2**64 - 1), 0))
        return tensor, self.native_targets()[index]

    def __repr__(self) -> str:
        return (
            f"ringloader.ImageFolder(root={self.root!r}, samples={len(self)}, "
            f"classes={len(self.classes)}, transform={self.transform!r})"
        )
