"""The I/O backend: io_uring when the kernel allows it, pread otherwise, reported once."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader import transforms as T

from imagegen import jpeg_bytes

REFUSED = os.environ.get("RINGLOADER_URING_REFUSED") is not None


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("io")
    (root / "a").mkdir()
    for i in range(10):
        (root / "a" / f"{i}.jpg").write_bytes(jpeg_bytes(100, 80, seed=i))
    return root


def test_backend_reported_and_results_identical(tree: Path, caplog):
    ds = rl.ImageFolder(tree, transform=T.Compose([T.Resize(32), T.CenterCrop(32)]))
    with caplog.at_level(logging.WARNING, logger="ringloader"):
        auto = rl.DataLoader(ds, batch_size=4, io="auto")
    stats = auto.stats()
    if REFUSED:
        assert stats["io_backend"] == "pread"
        assert "io_uring unavailable" in stats["io_note"]
        with pytest.raises(RuntimeError, match="io_uring"):
            rl.DataLoader(ds, batch_size=4, io="uring")  # asked for explicitly: no silent fallback
    else:
        assert stats["io_backend"] in ("io_uring", "pread")
    pread = rl.DataLoader(ds, batch_size=4, io="pread")
    assert pread.stats()["io_backend"] == "pread"
    for (a, _), (b, _) in zip(auto, pread):
        assert torch.equal(a, b)
