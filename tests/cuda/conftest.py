"""Fixtures for the placement and device-staging tests: small generated JPEG trees."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

from imagegen import jpeg_bytes  # noqa: E402
from scan_memo_env import isolate_scan_memo  # noqa: E402

isolate_scan_memo()  # no test writes into the user's cache


def write_tree(root: Path, num_classes: int, per_class: int, size=(160, 120)) -> Path:
    k = 0
    for c in range(num_classes):
        d = root / f"class_{c:02d}"
        d.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            w, h = size[0] + (k * 7) % 40, size[1] + (k * 5) % 30
            (d / f"img_{i:03d}.jpg").write_bytes(jpeg_bytes(w, h, seed=k, quality=90))
            k += 1
    return root


@pytest.fixture(scope="session")
def small_tree(tmp_path_factory) -> Path:
    """4 classes x 8 images."""
    return write_tree(tmp_path_factory.mktemp("cuda_tree"), num_classes=4, per_class=8)


@pytest.fixture(scope="session")
def tiny_tree(tmp_path_factory) -> Path:
    """2 classes x 50 small images, for long runs."""
    return write_tree(tmp_path_factory.mktemp("cuda_tiny"), num_classes=2, per_class=50, size=(48, 40))
