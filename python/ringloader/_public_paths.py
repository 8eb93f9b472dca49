"""The import paths of the public modules that live in the layer folders.

The package is folded by layer (``core``, ``transforms``, ``sources``, ``loader``); the public
modules inside them keep the short paths users import them by (``ringloader.webdataset``,
``from ringloader import video``), registered here as names of the very same module objects, so
``ringloader.webdataset.WebDataset is ringloader.sources.webdataset.WebDataset``. The public
classes and functions of those modules carry the short path as their ``__module__`` (as numpy's
do), so messages, reprs and pickles name ``ringloader.hf.Parquet``, the path users know.
"""

from __future__ import annotations

import importlib
import sys

#: public path (under ``ringloader``) -> the module's place in its folder.
PUBLIC_PATHS = {
    "clips": "transforms.clips",
    "datasets": "sources.datasets",
    "references": "sources.references",
    "hf": "sources.hf",
    "webdataset": "sources.webdataset",
    "video": "sources.video",
    "video_folder": "sources.video_folder",
    "frame_leaves": "sources.frame_leaves",
    "dataloader": "loader.dataloader",
    "video_batches": "loader.video_batches",
}


def register(package: str) -> None:
    """Make ``package.<public path>`` import the module in its folder, and an attribute of the
    package, as it was before the folders."""
    top = sys.modules[package]
    for short, place in PUBLIC_PATHS.items():
        module = importlib.import_module(f"{package}.{place}")
        sys.modules[f"{package}.{short}"] = module
        setattr(top, short, module)
        for name, value in vars(module).items():
            if not name.startswith("_") and callable(value) \
                    and getattr(value, "__module__", None) == module.__name__:
                value.__module__ = f"{package}.{short}"
