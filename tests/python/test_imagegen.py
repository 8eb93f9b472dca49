"""Tests of the test-data helpers in imagegen.py: they must produce what they claim."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin

import imagegen
from imagegen import CORRUPT_CASES, corrupt_cases, jpeg_bytes, make_image_tree, patch_sof_size, sof_size

SAMPLING = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}


def open_bytes(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data))


# --------------------------------------------------------------------------
# jpeg_bytes
# --------------------------------------------------------------------------


def test_jpeg_bytes_deterministic() -> None:
    a = jpeg_bytes(120, 90, seed=3)
    imagegen._jpeg_cached.cache_clear()
    imagegen._pixels_cached.cache_clear()
    assert jpeg_bytes(120, 90, seed=3) == a
    assert jpeg_bytes(120, 90, seed=4) != a
    assert jpeg_bytes(120, 90, seed=3, quality=80) != a


@pytest.mark.parametrize("subsampling", ["4:4:4", "4:2:2", "4:2:0"])
@pytest.mark.parametrize("progressive", [False, True])
def test_jpeg_bytes_flavours(subsampling: str, progressive: bool) -> None:
    data = jpeg_bytes(101, 67, quality=88, subsampling=subsampling, progressive=progressive, seed=1)
    with open_bytes(data) as im:
        assert im.format == "JPEG"
        assert im.size == (101, 67)
        assert im.mode == "RGB"
        assert JpegImagePlugin.get_sampling(im) == SAMPLING[subsampling]
        assert bool(im.info.get("progressive")) == progressive
        im.load()
    sof = 0xC2 if progressive else 0xC0
    assert any(m == sof for m, _, _ in imagegen._segments(data))


@pytest.mark.parametrize("mode", ["L", "CMYK"])
def test_jpeg_bytes_modes(mode: str) -> None:
    data = jpeg_bytes(64, 48, mode=mode, seed=2)
    with open_bytes(data) as im:
        assert im.mode == mode
        assert im.size == (64, 48)
        im.load()
    n_components = {"L": 1, "CMYK": 4}[mode]
    off = imagegen._find_sof(data)
    assert data[off + 9] == n_components


def test_jpeg_bytes_content_is_textured_and_faithful() -> None:
    ref = imagegen.pixels(256, 192, seed=9)
    assert ref.shape == (192, 256, 3) and ref.dtype == np.uint8
    assert not ref.flags.writeable
    with open_bytes(jpeg_bytes(256, 192, quality=95, subsampling="4:4:4", seed=9)) as im:
        dec = np.asarray(im.convert("RGB"), dtype=np.int16)
    assert np.abs(dec - ref).mean() < 4.0  # the JPEG encodes these pixels
    gray = ref.astype(np.float32).mean(axis=2)
    assert gray.std() > 10
    assert np.abs(np.diff(gray, axis=0)).mean() > 2.0
    # channels are correlated, as in photographs
    r, g, b = (ref[..., c].astype(np.float64).ravel() for c in range(3))
    assert np.corrcoef(r, g)[0, 1] > 0.2 or np.corrcoef(g, b)[0, 1] > 0.2


def test_jpeg_bytes_extra_save_options() -> None:
    data = jpeg_bytes(32, 32, comment=b"hello", seed=1)
    with open_bytes(data) as im:
        assert im.info.get("comment") == b"hello"


# --------------------------------------------------------------------------
# SOF helpers
# --------------------------------------------------------------------------


def test_sof_roundtrip() -> None:
    data = jpeg_bytes(77, 55, seed=1)
    assert sof_size(data) == (77, 55)
    patched = patch_sof_size(data, 1234, 4321)
    assert len(patched) == len(data)
    assert sof_size(patched) == (1234, 4321)
    with open_bytes(patched) as im:
        assert im.size == (1234, 4321)
    assert sof_size(jpeg_bytes(77, 55, progressive=True, seed=1)) == (77, 55)
    with pytest.raises(ValueError):
        patch_sof_size(data, 70000, 10)
    with pytest.raises(ValueError):
        sof_size(b"\x89PNG\r\n")


# --------------------------------------------------------------------------
# corrupt_cases
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return corrupt_cases(tmp_path_factory.mktemp("corrupt"))


def pillow_decodes(path: Path) -> bool:
    try:
        with Image.open(path) as im:
            im.load()
        return True
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return False


def test_all_cases_written(cases: dict[str, Path]) -> None:
    assert set(cases) == set(CORRUPT_CASES)
    for name, path in cases.items():
        assert path.exists(), name
        assert path.suffix == ".jpg"
        assert CORRUPT_CASES[name][0] in {"valid", "invalid", "damaged", "oversized", "not_a_file"}


def test_cases_deterministic(cases: dict[str, Path], tmp_path: Path) -> None:
    again = corrupt_cases(tmp_path)
    for name, path in cases.items():
        if path.is_file():
            assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(again[name].read_bytes()).digest()


def test_categories_match_pillow(cases: dict[str, Path]) -> None:
    for name, path in cases.items():
        category = CORRUPT_CASES[name][0]
        if category == "oversized":
            continue  # see test_huge_sof_header; never decode it (Pillow would allocate ~10 GB)
        if category == "valid":
            assert pillow_decodes(path), name
        elif category == "invalid":
            assert not pillow_decodes(path), name
        elif category == "not_a_file":
            assert path.is_dir()
        else:
            assert category == "damaged"
            assert path.read_bytes()[:2] == b"\xff\xd8"


def test_truncations_are_prefixes(cases: dict[str, Path]) -> None:
    full = jpeg_bytes(96, 64, seed=7)
    lengths = []
    for name in ("truncated_soi_only", "truncated_in_headers", "truncated_after_sos", "truncated_half",
                 "truncated_90pct", "truncated_no_eoi"):
        data = cases[name].read_bytes()
        assert full.startswith(data) and len(data) < len(full), name
        lengths.append(len(data))
    assert lengths == sorted(lengths) and len(set(lengths)) == len(lengths)
    sos = imagegen.scan_offset(full)
    assert len(cases["truncated_in_headers"].read_bytes()) < sos
    assert len(cases["truncated_after_sos"].read_bytes()) == sos + 16
    assert not cases["truncated_no_eoi"].read_bytes().endswith(b"\xff\xd9")
    prog = jpeg_bytes(96, 64, seed=8, progressive=True)
    assert prog.startswith(cases["truncated_progressive_half"].read_bytes())


def test_bitflips(cases: dict[str, Path]) -> None:
    full = jpeg_bytes(96, 64, seed=7)
    sos = imagegen.scan_offset(full)
    for name, region in (("bitflip_scan", (sos, len(full) - 2)), ("bitflip_headers", (20, sos - 2))):
        data = cases[name].read_bytes()
        assert len(data) == len(full)
        diff = [i for i in range(len(full)) if data[i] != full[i]]
        assert diff, name
        assert all(region[0] <= i < region[1] for i in diff), name


def test_empty_and_text(cases: dict[str, Path]) -> None:
    assert cases["empty"].stat().st_size == 0
    assert cases["text_named_jpg"].read_bytes().startswith(b"This is not an image")


def test_huge_sof_header(cases: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    data = cases["huge_sof"].read_bytes()
    assert sof_size(data) == (60000, 60000)
    assert len(data) < 10_000
    with pytest.raises(Image.DecompressionBombError):
        Image.open(cases["huge_sof"])  # Pillow's default guard rejects it from the header alone
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    with Image.open(cases["huge_sof"]) as im:  # header parse only, no decoding
        assert im.size == (60000, 60000)
        assert im.format == "JPEG"
    assert sof_size(cases["zero_size_sof"].read_bytes()) == (0, 0)


def test_valid_edge_cases(cases: dict[str, Path]) -> None:
    with Image.open(cases["tiny_1x1"]) as im:
        assert im.size == (1, 1)
        im.load()
    data = cases["exif_heavy"].read_bytes()
    app1 = [length for m, _, length in imagegen._segments(data) if m == 0xE1]
    assert max(app1) > 50_000, app1
    with Image.open(cases["exif_heavy"]) as im:
        exif = im.getexif()
        assert exif[0x0112] == 1
        assert len(exif[0x010E]) == 60000
        assert im.size == (160, 120)
        im.load()
    garbage = cases["trailing_garbage"].read_bytes()
    full = jpeg_bytes(96, 64, seed=7)
    assert garbage.startswith(full) and len(garbage) == len(full) + 4096
    assert cases["directory_named_jpg"].name == "x.jpg"
    assert cases["directory_named_jpg"].is_dir()


# --------------------------------------------------------------------------
# make_image_tree
# --------------------------------------------------------------------------


def test_make_image_tree_counts(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "t", {"dog": 3, "cat": 2, "empty": 0})
    assert tree.classes == ["cat", "dog", "empty"]
    assert tree.class_to_idx == {"cat": 0, "dog": 1, "empty": 2}
    assert [Path(p).relative_to(tree.root).as_posix() for p, _ in tree.samples] == [
        "cat/img_0000.jpg", "cat/img_0001.jpg", "dog/img_0000.jpg", "dog/img_0001.jpg", "dog/img_0002.jpg",
    ]
    assert tree.targets == [0, 0, 1, 1, 1]
    assert Path(tree) == tmp_path / "t"
    sizes = set()
    for p, _ in tree.samples:
        with Image.open(p) as im:
            im.load()
            sizes.add(im.size)
    assert len(sizes) > 1, "default images vary in size"
    # distinct content per image
    assert len({hashlib.sha256(Path(p).read_bytes()).digest() for p, _ in tree.samples}) == 5


def test_make_image_tree_string_spec(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path, "a:2, b:1", size=(40, 30))
    assert tree.classes == ["a", "b"] and len(tree.samples) == 3


def test_make_image_tree_items(tmp_path: Path) -> None:
    tree = make_image_tree(
        tmp_path,
        {
            "x": [
                (80, 60),
                {"width": 50, "height": 70, "mode": "L", "progressive": True, "name": "gray.jpg"},
                {"mode": "CMYK", "subsampling": "4:4:4", "quality": 75},
                {"format": "PNG", "width": 20, "height": 10},
                {"name": "nested/deep/img.JPEG"},
                {"name": "notes.txt", "data": b"not an image"},
                b"raw-bytes",
            ]
        },
    )
    root = tmp_path / "x"
    with Image.open(root / "img_0000.jpg") as im:
        assert im.size == (80, 60)
    with Image.open(root / "gray.jpg") as im:
        assert im.mode == "L" and im.size == (50, 70) and im.info.get("progressive")
    with Image.open(root / "img_0002.jpg") as im:
        assert im.mode == "CMYK"
    with Image.open(root / "img_0003.png") as im:
        assert im.format == "PNG" and im.size == (20, 10)
    assert (root / "nested" / "deep" / "img.JPEG").is_file()
    assert (root / "notes.txt").read_bytes() == b"not an image"
    assert (root / "img_0006.jpg").read_bytes() == b"raw-bytes"
    names = [Path(p).relative_to(root).as_posix() for p, _ in tree.samples]
    assert "notes.txt" not in names
    assert "nested/deep/img.JPEG" in names
    assert len(tree.files) == 7


def test_make_image_tree_matches_torchvision(tmp_path: Path) -> None:
    datasets = pytest.importorskip("torchvision.datasets")
    tree = make_image_tree(
        tmp_path,
        {"b": 2, "a": [(30, 20), {"name": "sub/z.jpg"}, {"name": "readme.md", "data": b"#"}], "c": [{"format": "PNG"}]},
    )
    ds = datasets.ImageFolder(str(tree))
    assert ds.classes == tree.classes
    assert ds.class_to_idx == tree.class_to_idx
    assert ds.samples == tree.samples
    img, label = ds[0]
    assert label == 0 and img.size == (30, 20)


def test_make_image_tree_deterministic(tmp_path: Path) -> None:
    a = make_image_tree(tmp_path / "a", {"k": 3}, seed=1)
    b = make_image_tree(tmp_path / "b", {"k": 3}, seed=1)
    c = make_image_tree(tmp_path / "c", {"k": 3}, seed=2)
    read = lambda t: [Path(p).read_bytes() for p, _ in t.samples]  # noqa: E731
    assert read(a) == read(b)
    assert read(a) != read(c)
