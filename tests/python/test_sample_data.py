"""Tests of the built-in synthetic sample dataset (ringloader.sample_data)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin

import imagegen

sd = imagegen.load_sample_data()

N_IMAGES = 30
N_CLASSES = 10


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*.jpg"))
    }


def mtimes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sample") / "ds"
    out = sd.make_sample_dataset(root, num_images=N_IMAGES, num_classes=N_CLASSES, seed=0, workers=1)
    assert out == root.absolute()
    return out


@pytest.fixture(scope="module")
def quality_tables() -> dict[tuple[int, ...], int]:
    """Luminance quantisation table -> Pillow quality, to read back the quality used."""
    table = {}
    im = Image.new("RGB", (16, 16), (120, 80, 40))
    for q in range(1, 101):
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=q)
        with Image.open(io.BytesIO(buf.getvalue())) as j:
            table.setdefault(tuple(j.quantization[0]), q)
    return table


def test_layout_and_marker(sample: Path) -> None:
    classes = sorted(p.name for p in sample.iterdir() if p.is_dir())
    assert classes == [f"class_{c:02d}" for c in range(N_CLASSES)]
    files = sorted(sample.rglob("*.jpg"))
    assert len(files) == N_IMAGES
    for p in files:
        idx = int(p.stem.split("_")[1])
        assert p.name == f"img_{idx:05d}.jpg"
        assert p.parent.name == f"class_{idx % N_CLASSES:02d}"
    marker = json.loads((sample / sd.MARKER_NAME).read_text())
    assert marker["num_files"] == N_IMAGES
    assert marker["params"] == {
        "generator_version": sd.GENERATOR_VERSION,
        "num_images": N_IMAGES,
        "num_classes": N_CLASSES,
        "seed": 0,
    }
    assert sd.is_complete(sample, N_IMAGES, N_CLASSES, 0)
    assert not sd.is_complete(sample, N_IMAGES, N_CLASSES, 1)
    assert not list(sample.parent.glob(".tmp-*")), "temporary directory left behind"


def test_deterministic_and_process_count_independent(sample: Path, tmp_path: Path) -> None:
    again = sd.make_sample_dataset(tmp_path / "again", num_images=N_IMAGES, num_classes=N_CLASSES, seed=0, workers=2)
    assert tree_hashes(again) == tree_hashes(sample)
    other = sd.make_sample_dataset(tmp_path / "other", num_images=N_IMAGES, num_classes=N_CLASSES, seed=1, workers=1)
    h_other, h_sample = tree_hashes(other), tree_hashes(sample)
    assert h_other.keys() == h_sample.keys()
    assert all(h_other[k] != h_sample[k] for k in h_sample)


def test_specs_deterministic() -> None:
    assert sd.image_specs(200, 10, 5) == sd.image_specs(200, 10, 5)
    assert sd.image_specs(200, 10, 5) != sd.image_specs(200, 10, 6)


def test_sizes_and_aspects(sample: Path) -> None:
    for p in sample.rglob("*.jpg"):
        with Image.open(p) as im:
            w, h = im.size
        assert 300 <= min(w, h) <= 500, (p, im.size)
        assert 3 / 4 - 0.01 <= w / h <= 16 / 9 + 0.01, (p, im.size)


def test_spec_distribution_resembles_imagenet() -> None:
    specs = sd.image_specs(1000, 10, 0)
    shorts = np.array([min(s.width, s.height) for s in specs])
    aspects = np.array([s.width / s.height for s in specs])
    assert shorts.min() >= 300 and shorts.max() <= 500
    assert aspects.min() >= 0.74 and aspects.max() <= 1.79
    assert (aspects > 1).mean() > 0.6, "mostly landscape"
    assert (aspects < 1).mean() > 0.1, "some portrait"
    flav = Counter((s.mode, s.progressive, s.subsampling) for s in specs)
    assert flav[("L", False, "4:2:0")] == 30
    assert flav[("CMYK", False, "4:2:0")] == 10
    assert sum(v for (m, prog, _), v in flav.items() if prog) == 50
    assert sum(v for (m, _, sub), v in flav.items() if m == "RGB" and sub == "4:2:0") >= 800
    assert {s.quality for s in specs} == set(range(85, 96))


def test_flavour_mix_present(sample: Path, quality_tables: dict[tuple[int, ...], int]) -> None:
    modes: Counter[str] = Counter()
    sampling: Counter[int] = Counter()
    progressive = 0
    qualities = set()
    for p in sample.rglob("*.jpg"):
        with Image.open(p) as im:
            assert im.format == "JPEG"
            modes[im.mode] += 1
            progressive += bool(im.info.get("progressive"))
            if im.mode == "RGB":
                sampling[JpegImagePlugin.get_sampling(im)] += 1
            qualities.add(quality_tables.get(tuple(im.quantization[0])))
    assert modes["L"] >= 1 and modes["CMYK"] >= 1
    assert modes["RGB"] >= N_IMAGES - 4
    assert progressive >= 1
    assert sampling[2] > sampling[0] + sampling[1], "mostly 4:2:0"
    assert sampling[0] >= 1, "some 4:4:4"
    assert qualities <= set(range(85, 96)), qualities


def test_content_is_textured(sample: Path) -> None:
    sizes = []
    for p in sorted(sample.rglob("*.jpg"))[:10]:
        sizes.append(p.stat().st_size)
        with Image.open(p) as im:
            a = np.asarray(im.convert("L"), dtype=np.float32)
        assert a.std() > 12, "not flat"
        hf = np.abs(np.diff(a, axis=1)).mean()
        assert hf > 2.0, "has high-frequency detail"
        # Natural-image statistics: energy falls with frequency.
        spec = np.abs(np.fft.rfft2(a - a.mean())) ** 2
        fy = np.fft.fftfreq(a.shape[0])[:, None]
        fx = np.fft.rfftfreq(a.shape[1])[None, :]
        f = np.sqrt(fy**2 + fx**2)
        low = spec[(f > 0.01) & (f < 0.03)].mean()
        high = spec[(f > 0.2) & (f < 0.3)].mean()
        assert low > 30 * high
    all_sizes = [p.stat().st_size for p in sample.rglob("*.jpg")]
    assert 50_000 < np.mean(all_sizes) < 200_000, np.mean(all_sizes)


def test_cache_reused(sample: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = mtimes(sample)

    def boom(*args: object, **kwargs: object) -> int:
        raise AssertionError("regenerated a complete cached dataset")

    monkeypatch.setattr(sd, "_generate_into", boom)
    t0 = time.perf_counter()
    assert sd.make_sample_dataset(sample, num_images=N_IMAGES, num_classes=N_CLASSES, seed=0) == sample
    assert time.perf_counter() - t0 < 2.0
    assert mtimes(sample) == before


def test_default_root_uses_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RINGLOADER_CACHE", str(tmp_path))
    assert sd.default_root() == tmp_path / "sample-v1"
    assert sd.default_root(30, 10, 0).parent == tmp_path
    assert sd.default_root(30, 10, 0) != sd.default_root()
    monkeypatch.delenv("RINGLOADER_CACHE")
    assert sd.default_root() == Path.home() / ".cache" / "ringloader" / "sample-v1"


def test_default_root_generation(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RINGLOADER_CACHE", str(tmp_path / "cache"))
    root = sd.make_sample_dataset(num_images=12, num_classes=3, workers=1)
    assert root.parent == tmp_path / "cache"
    assert len(list(root.rglob("*.jpg"))) == 12


def test_interrupted_generation_not_complete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "ds"
    calls = {"n": 0}
    real = sd.render_spec

    def flaky(spec: object, num_classes: int) -> bytes:
        calls["n"] += 1
        if calls["n"] > 5:
            raise KeyboardInterrupt
        return real(spec, num_classes)

    monkeypatch.setattr(sd, "render_spec", flaky)
    with pytest.raises(KeyboardInterrupt):
        sd.make_sample_dataset(root, num_images=20, num_classes=4, workers=1)
    assert not root.exists()
    assert not sd.is_complete(root, 20, 4, 0)
    assert not list(tmp_path.glob(".tmp-*")), "temporary directory not cleaned up"
    monkeypatch.setattr(sd, "render_spec", real)
    sd.make_sample_dataset(root, num_images=20, num_classes=4, workers=1)
    assert sd.is_complete(root, 20, 4, 0)
    assert len(list(root.rglob("*.jpg"))) == 20


def test_killed_generation_not_complete(tmp_path: Path) -> None:
    """A generator killed with SIGKILL leaves nothing that passes as complete."""
    root = tmp_path / "ds"
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import imagegen;"
        "sd = imagegen.load_sample_data();"
        "sd.make_sample_dataset(sys.argv[2], num_images=40, num_classes=4, workers=1)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(Path(__file__).parent), str(root)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            tmps = list(tmp_path.glob(".tmp-ds-*"))
            if tmps and any(tmps[0].rglob("*.jpg")):
                break
            assert proc.poll() is None, "generator finished before it could be interrupted"
            time.sleep(0.02)
        else:
            pytest.fail("generation did not start")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not root.exists()
    assert not sd.is_complete(root, 40, 4, 0)
    sd.make_sample_dataset(root, num_images=40, num_classes=4, workers=1)
    assert sd.is_complete(root, 40, 4, 0)
    assert len(list(root.rglob("*.jpg"))) == 40


def test_incomplete_tree_is_regenerated(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    sd.make_sample_dataset(root, num_images=12, num_classes=3, workers=1)
    reference = tree_hashes(root)
    # Marker lost (e.g. a tree copied without it): regenerated, not trusted.
    (root / sd.MARKER_NAME).unlink()
    (root / "class_00" / "img_00000.jpg").write_bytes(b"partial")
    assert not sd.is_complete(root, 12, 3, 0)
    sd.make_sample_dataset(root, num_images=12, num_classes=3, workers=1)
    assert tree_hashes(root) == reference
    # Marker present but files missing.
    (root / "class_01" / "img_00001.jpg").unlink()
    assert not sd.is_complete(root, 12, 3, 0)
    sd.make_sample_dataset(root, num_images=12, num_classes=3, workers=1)
    assert tree_hashes(root) == reference
    # Corrupt marker.
    (root / sd.MARKER_NAME).write_text("{not json")
    assert not sd.is_complete(root, 12, 3, 0)
    sd.make_sample_dataset(root, num_images=12, num_classes=3, workers=1)
    assert sd.is_complete(root, 12, 3, 0)


def test_other_parameters_replace_tree(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    sd.make_sample_dataset(root, num_images=12, num_classes=3, workers=1)
    sd.make_sample_dataset(root, num_images=14, num_classes=2, workers=1)
    assert sd.is_complete(root, 14, 2, 0)
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["class_00", "class_01"]
    assert len(list(root.rglob("*.jpg"))) == 14
    assert not list(tmp_path.glob(".old-*")) and not list(tmp_path.glob(".tmp-*"))


def test_refuses_to_overwrite_foreign_directory(tmp_path: Path) -> None:
    root = tmp_path / "mine"
    root.mkdir()
    (root / "thesis.tex").write_text("precious")
    with pytest.raises(FileExistsError):
        sd.make_sample_dataset(root, num_images=12, num_classes=3, workers=1)
    assert (root / "thesis.tex").read_text() == "precious"


def test_empty_existing_directory_is_used(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    sd.make_sample_dataset(root, num_images=12, num_classes=3, workers=1)
    assert sd.is_complete(root, 12, 3, 0)


def test_cli(tmp_path: Path) -> None:
    root = tmp_path / "cli"
    if sd.__name__ == "ringloader.sample_data":  # the package is importable
        cmd = [sys.executable, "-m", "ringloader.sample_data"]
    else:
        cmd = [sys.executable, str(Path(sd.__file__))]
    out = subprocess.run(
        cmd + ["--root", str(root), "--num-images", "12", "--num-classes", "3", "--workers", "1"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert Path(out.stdout.strip()) == root.absolute()
    assert sd.is_complete(root, 12, 3, 0)


def test_invalid_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        sd.make_sample_dataset(tmp_path / "a", num_images=-1)
    with pytest.raises(ValueError):
        sd.make_sample_dataset(tmp_path / "b", num_images=10, num_classes=0)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
