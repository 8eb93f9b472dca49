"""Bad inputs: each is reported at its own batch, after every earlier batch, naming the file, its
index and the reason; the batches after it still arrive."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader import transforms as T

from imagegen import CORRUPT_CASES, corrupt_cases, jpeg_bytes

EVAL = T.Compose([T.Resize(64), T.CenterCrop(64), T.ToTensor()])


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> dict:
    return corrupt_cases(tmp_path_factory.mktemp("corrupt"))


def tree_with(tmp_path: Path, bad: Path | None) -> Path:
    """class a: img_0..img_4 (valid), img_2 replaced by `bad`."""
    root = tmp_path / "tree"
    (root / "a").mkdir(parents=True)
    for i in range(5):
        (root / "a" / f"img_{i}.jpg").write_bytes(jpeg_bytes(120, 96, seed=i))
    if bad is not None:
        os.remove(root / "a" / "img_2.jpg")
        shutil.copy(bad, root / "a" / "img_2.jpg")
    return root


def outcomes(loader):
    """['ok', SampleError, 'ok'] for batches of 2 over 5 samples."""
    out = []
    it = iter(loader)
    while True:
        try:
            x, y = next(it)
        except StopIteration:
            return out
        except rl.SampleError as e:
            out.append(e)
        else:
            assert torch.isfinite(x).all()
            out.append("ok")


@pytest.mark.parametrize("name", sorted(n for n, (cat, _) in CORRUPT_CASES.items() if cat != "not_a_file"))
def test_each_bad_file_fails_only_its_batch(tmp_path: Path, cases: dict, name: str):
    category, description = CORRUPT_CASES[name]
    root = tree_with(tmp_path, cases[name])
    ds = rl.ImageFolder(root, transform=EVAL)
    got = outcomes(rl.DataLoader(ds, batch_size=2, num_workers=2))
    assert got[0] == "ok" and got[2] == "ok", (name, got)
    middle = got[1]
    if category == "valid":
        assert middle == "ok", (name, description, middle)
    elif name == "bitflip_scan":
        # libjpeg decodes most scan corruption into wrong pixels (as Pillow does): either is fine.
        assert middle == "ok" or isinstance(middle, rl.SampleError)
    else:
        assert isinstance(middle, rl.SampleError), (name, description, middle)
        assert middle.index == 2
        assert middle.path == str(root / "a" / "img_2.jpg")
        assert "img_2.jpg" in str(middle) and "sample 2" in str(middle)
        assert middle.reason
    assert ds.targets == [0] * 5


def test_reasons_are_specific(tmp_path: Path, cases: dict):
    expected = {
        "empty": "empty",
        "text_named_jpg": "text",
        "huge_sof": "exceeds the limit",
        "truncated_half": "truncated",
        "truncated_no_eoi": "truncated",
    }
    for name, needle in expected.items():
        root = tree_with(tmp_path / name, cases[name])
        err = outcomes(rl.DataLoader(rl.ImageFolder(root, transform=EVAL), batch_size=2))[1]
        assert isinstance(err, rl.SampleError), name
        assert needle.lower() in err.reason.lower(), (name, err.reason)


def test_pixel_limit_is_configurable(tmp_path: Path):
    root = tree_with(tmp_path, None)
    got = outcomes(rl.DataLoader(rl.ImageFolder(root, transform=EVAL), batch_size=2,
                                 max_image_pixels=100 * 100))
    assert all(isinstance(g, rl.SampleError) for g in got)
    assert "limit" in got[0].reason


def test_file_deleted_or_replaced_after_indexing(tmp_path: Path):
    root = tree_with(tmp_path, None)
    ds = rl.ImageFolder(root, transform=EVAL)
    os.remove(root / "a" / "img_2.jpg")
    os.remove(root / "a" / "img_4.jpg")
    (root / "a" / "img_4.jpg").mkdir()  # a directory where a file was expected
    got = outcomes(rl.DataLoader(ds, batch_size=2))
    assert got[0] == "ok"
    assert isinstance(got[1], rl.SampleError) and "No such file" in got[1].reason
    assert isinstance(got[2], rl.SampleError) and "directory" in got[2].reason


def test_file_truncated_after_indexing(tmp_path: Path):
    root = tree_with(tmp_path, None)
    ds = rl.ImageFolder(root, transform=EVAL)
    path = root / "a" / "img_3.jpg"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    got = outcomes(rl.DataLoader(ds, batch_size=2))
    assert got[0] == "ok" and got[2] == "ok"
    assert isinstance(got[1], rl.SampleError) and got[1].index == 3


def test_single_sample_access_raises_the_same_error(tmp_path: Path, cases: dict):
    root = tree_with(tmp_path, cases["text_named_jpg"])
    ds = rl.ImageFolder(root, transform=EVAL)
    assert ds[1][0].shape == (3, 64, 64)
    with pytest.raises(rl.SampleError, match="text") as info:
        ds[2]
    assert info.value.index == 2


@pytest.mark.parametrize("policy", ["raise", "skip", "replace"])
def test_oversized_image_mid_epoch_is_a_sample_error_not_the_end(tmp_path: Path, policy: str):
    """The pixel limit's cause is OUT_OF_RANGE, which must never read as the end of the epoch."""
    root = tree_with(tmp_path, None)
    (root / "a" / "img_2.jpg").write_bytes(jpeg_bytes(400, 300, seed=9))
    loader = rl.DataLoader(rl.ImageFolder(root, transform=EVAL), batch_size=2, num_workers=2,
                           on_error=policy, max_image_pixels=200 * 200)
    got = outcomes(loader)
    if policy == "raise":
        assert got[0] == "ok" and got[2] == "ok" and len(got) == 3, got
        assert got[1].index == 2 and got[1].code == "OUT_OF_RANGE"
        assert "exceeds the limit" in got[1].reason and not got[1].reason.startswith("sample")
    else:
        assert got == ["ok", "ok", "ok"], got
    assert loader.stats()["errors"] == 1
