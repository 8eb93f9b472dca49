"""torchvision's folder scan: the class folders of a root (``find_classes``) and the files in
each, walked in sorted order (``_make_dataset``), for :class:`ringloader.DatasetFolder` and
:class:`ringloader.VideoFolder`."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Tuple


def find_classes(directory: str) -> Tuple[List[str], Dict[str, int]]:
    """torchvision's ``find_classes``: the sorted class folders of ``directory`` and their
    indices."""
    classes = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {directory}.")
    return classes, {name: i for i, name in enumerate(classes)}


def _make_dataset(root: str, class_to_idx: Dict[str, int], is_valid_file: Callable[[str], bool],
                  allow_empty: bool, extensions: Any = None) -> Tuple[List[str], List[int]]:
    """torchvision's ``make_dataset``: files in each class folder, walked in sorted order."""
    paths: List[str] = []
    labels: List[int] = []
    empty = []
    for name in sorted(class_to_idx, key=class_to_idx.__getitem__):
        before = len(paths)
        for dirpath, _, fnames in sorted(os.walk(os.path.join(root, name), followlinks=True)):
            for fname in sorted(fnames):
                path = os.path.join(dirpath, fname)
                if is_valid_file(path):
                    paths.append(path)
                    labels.append(class_to_idx[name])
        if len(paths) == before:
            empty.append(name)
    if empty and not allow_empty:
        msg = f"Found no valid file for the classes {', '.join(sorted(empty))}. "
        if extensions is not None:
            listed = extensions if isinstance(extensions, str) else ", ".join(extensions)
            msg += f"Supported extensions are: {listed}"
        raise FileNotFoundError(msg)
    return paths, labels
