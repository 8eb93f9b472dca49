"""Runs inside the clean Debian root, against the installed wheel only.

    python smoke.py <expected version>

1. The extension and the native CLI resolve every shared library from the root's glibc,
   libstdc++, libgcc and zlib or from the wheel's own ringloader.libs/ (ldd: nothing "not
   found", nothing else), and importing ringloader does not look for the CUDA driver.
2. ringloader.__version__ is the wheel's version.
3. A real epoch: a small ImageFolder of JPEG, PNG, WebP and TIFF files (generated here with
   numpy + Pillow) through rl.DataLoader with a training transform, every sample delivered
   once, float32 NCHW batches.
4. The console scripts: ringloader-bench --help/--version and a short run on the same images;
   ringloader-compare --help.

Where torch is not installed (the emulated aarch64 root: torch's aarch64 wheels bring CUDA),
the extension is loaded on its own (ringloader._C: it needs no torch), the epoch runs through
_C.Loader with numpy reading the DLPack batches, and the native CLI (ringloader/bin/
ringloader-bench) is run directly; the Python console scripts, which import torch, are skipped.

    python smoke.py --make-images DIR
        writes the fixed image set of the pixel comparison (done once, on the host, so every
        root decodes the very same files);
    python smoke.py <version> --pixels OUT --pixel-images DIR
        also writes the uint8 pixels of a seeded epoch over DIR (random resized crops and flips,
        no float step) to OUT: equal files from two architectures mean equal pixels.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

# What the wheel may take from the system (plus the dynamic loader and the vDSO): glibc (its
# resolver, libresolv, included: the vendored libcurl resolves host names with it), libstdc++,
# libgcc, and zlib, which every manylinux policy lists as always present; the libspng, libtiff
# and libcurl that auditwheel vendors link zlib.
SYSTEM_LIBS = {"libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0",
               "libresolv.so.2", "libstdc++.so.6", "libgcc_s.so.1", "libz.so.1",
               # the dynamic loader, which the manylinux_2_28 wheels (Zig's linker) name as needed
               "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}


def check_ldd(binary: Path, libs_dir: Path) -> None:
    out = subprocess.run(["ldd", str(binary)], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        line = line.strip()
        m = re.match(r"(\S+) => (\S+)", line)
        if m is None:  # linux-vdso.so.1 (0x...), /lib64/ld-linux-x86-64.so.2 (0x...)
            assert "vdso" in line or "ld-linux" in line, f"{binary.name}: unexpected ldd line {line!r}"
            continue
        name, path = m.groups()
        assert path != "not", f"{binary.name}: {name} not found\n{out}"
        assert name in SYSTEM_LIBS or Path(path).resolve().parent == libs_dir, \
            f"{binary.name}: needs {name} ({path}) from outside the wheel\n{out}"
    print(f"ldd {binary.name}: only glibc/libstdc++/libgcc/zlib and ringloader.libs/")


def check_no_driver_at_import() -> None:
    """CUDA is optional at run time: importing ringloader must not even look for the driver."""
    env = {**os.environ, "LD_DEBUG": "libs"}

    def searches(code: str) -> int:
        out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                             capture_output=True, text=True).stderr
        return sum("find library=libcuda" in line for line in out.splitlines())

    # A CUDA build of torch (PyPI's, e.g. torch 2.8.0+cu128) looks for the driver itself when
    # imported: what counts is that ringloader adds no search of its own.
    by_torch = searches("import torch")
    assert searches("import ringloader") == by_torch, "import ringloader looked for the CUDA driver"
    print("import ringloader: does not look for libcuda" +
          (f" (beyond torch's own {by_torch} searches)" if by_torch else ""))


def have_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def load_extension(package: Path):
    """ringloader._C without `import ringloader` (whose Python layer needs torch)."""
    import importlib.util

    (path,) = package.glob("_C*.so")
    spec = importlib.util.spec_from_file_location("ringloader._C", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def native_epoch(C, files: list[str], labels: list[int], seed: int, size: int = 64) -> list:
    """One seeded epoch through _C.Loader: [(uint8 images NCHW, labels, indices)] in batch order."""
    import numpy as np

    steps = [{"kind": "random_resized_crop", "size_h": size, "size_w": size, "scale": (0.08, 1.0),
              "ratio": (3 / 4, 4 / 3)}, {"kind": "random_horizontal_flip", "p": 0.5}]
    loader = C.Loader(files, np.asarray(labels, dtype=np.int64),
                      {"batch_size": 8, "num_workers": 2, "prefetch_batches": 2, "transform": steps,
                       "dtype": "uint8"})
    n = len(files)
    order = np.random.default_rng(seed).permutation(n).astype(np.int64)
    offsets = np.asarray(list(range(0, n, 8)) + [n], dtype=np.int64)
    loader.start_epoch(0, seed, order, offsets)
    out = []
    while (batch := loader.next()) is not None:
        images, batch_labels, indices, _ = batch
        out.append((np.from_dlpack(images).copy(), np.from_dlpack(batch_labels).copy(),
                    np.from_dlpack(indices).copy()))
    loader.stop()
    return out


def image_files(root: Path) -> tuple[list[str], list[int]]:
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    files = sorted(str(f) for c in classes for f in (root / c).iterdir())
    return files, [classes.index(Path(f).parent.name) for f in files]


def write_pixels(C, root: Path, out: Path) -> None:
    files, labels = image_files(root)
    batches = native_epoch(C, files, labels, seed=1234)
    seen = sorted(int(i) for _, _, idx in batches for i in idx)
    assert seen == list(range(len(files))), "every sample once"
    with open(out, "wb") as f:
        for images, batch_labels, indices in batches:
            assert images.dtype.name == "uint8" and images.shape[1:] == (3, 64, 64), (images.dtype, images.shape)
            f.write(indices.astype("<i8").tobytes() + batch_labels.astype("<i8").tobytes() + images.tobytes())
    print(f"pixels: {len(files)} samples of a seeded epoch written to {out} ({out.stat().st_size} bytes)")


def make_images(root: Path, classes: int = 3, per_class: int = 24) -> int:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(classes):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(per_class):
            h, w = rng.integers(160, 320, size=2)
            pixels = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
            # Mostly JPEG, and every other format the native decoders (and their libraries) cover.
            ext = ("jpg", "jpg", "png", "webp", "tiff")[i % 5]
            Image.fromarray(pixels).save(root / f"class{c}" / f"{i:03d}.{ext}")
    return classes * per_class


def epoch(root: Path, count: int) -> None:
    import torch

    import ringloader as rl
    from ringloader import transforms as T

    ds = rl.ImageFolder(str(root), transform=T.Compose([
        T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor(),
        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]))
    assert len(ds) == count and ds.classes == ["class0", "class1", "class2"]
    loader = rl.DataLoader(ds, batch_size=16, shuffle=True, num_workers=2)
    assert loader.native, "rl.ImageFolder must take the native path"
    seen = 0
    labels = []
    for images, target in loader:
        assert images.dtype == torch.float32 and tuple(images.shape[1:]) == (3, 64, 64), images.shape
        assert torch.isfinite(images).all()
        seen += images.shape[0]
        labels.append(target)
    assert seen == count, (seen, count)
    assert sorted(torch.cat(labels).tolist()) == sorted(ds.targets)
    stats = loader.stats()
    print(f"epoch: {seen} images in {seen // 16 + (seen % 16 > 0)} batches, errors={stats['errors']}, "
          f"io={stats.get('io_backend', '?')}, torch {torch.__version__}, "
          f"cuda available: {torch.cuda.is_available()}")
    assert stats["errors"] == 0


def run(*cmd: str, status: int = 0) -> str:
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == status, f"{' '.join(cmd)} exited {result.returncode}\n{result.stdout}{result.stderr}"
    return result.stdout + result.stderr


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--make-images"]:
        make_images(Path(args[1]))
        return
    version = args[0]
    options = dict(zip(args[1::2], args[2::2]))
    torch_here = have_torch()
    package = Path(sysconfig.get_path("platlib")) / "ringloader"
    libs_dir = (package.parent / "ringloader.libs").resolve()
    (extension,) = package.glob("_C*.so")
    check_ldd(extension, libs_dir)
    check_ldd(package / "bin" / "ringloader-bench", libs_dir)
    if torch_here:
        import ringloader

        check_no_driver_at_import()
        assert ringloader.__version__ == version, (ringloader.__version__, version)
        print(f"ringloader.__version__ == {version}")
        from ringloader import _C
    else:
        print("no torch here: the extension is loaded on its own and the Python console scripts are skipped")
        _C = load_extension(package)
        installed = (package / "_version.py").read_text()
        assert f'"{version}"' in installed, (installed, version)
    if "--pixels" in options:
        write_pixels(_C, Path(options["--pixel-images"]), Path(options["--pixels"]))

    bindir = Path(sysconfig.get_path("scripts"))
    work = Path(tempfile.mkdtemp())
    try:
        data = work / "images"
        count = make_images(data)
        if not torch_here:
            files, labels = image_files(data)
            batches = native_epoch(_C, files, labels, seed=0)
            assert sum(len(idx) for _, _, idx in batches) == count
            print(f"native epoch (_C.Loader, numpy): {count} images in {len(batches)} batches")
            native = package / "bin" / "ringloader-bench"
            assert run(str(native), "--version").strip().splitlines()[0] == f"ringloader-bench {version}"
            report = run(str(native), f"--data={data}", "--preset=train", "--epochs=1", "--warmup=0",
                         "--progress=false", "--decode_threads=2")
            print("native ringloader-bench run:", next(l for l in report.splitlines() if "images/s" in l).strip())
            print("clean-root smoke test (without torch): OK")
            return
        epoch(data, count)

        bench = str(bindir / "ringloader-bench")
        # The launcher names the binary, then its own help (Abseil's, whose status 1 it turns
        # into 0: help was asked for).
        assert "\nringloader-bench: Benchmarks" in run(bench, "--help")
        assert run(bench, "--version").strip().splitlines()[0] == f"ringloader-bench {version}"
        report = run(bench, f"--data={data}", "--preset=train", "--epochs=1", "--warmup=0",
                     "--progress=false", "--decode_threads=2")
        print("ringloader-bench run:", next(l for l in report.splitlines() if "images/s" in l).strip())
        usage = run(str(bindir / "ringloader-compare"), "--help")
        assert usage.startswith("usage: ringloader-compare"), usage
        print("ringloader-bench --help/--version, ringloader-compare --help: named correctly")
        # ringloader doctor finds the wheel's native benchmark for its trial.
        doctor = subprocess.run([str(bindir / "ringloader"), "doctor", "--json", f"--data={data}", "--trial-seconds=1"],
                                capture_output=True, text=True)
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        record = json.loads(doctor.stdout)
        trial = next(f for f in record["findings"] if f["check"] == "trial")
        assert "images/s over 1 s" in trial["finding"], trial
        print("ringloader doctor --json --data:", trial["finding"][:80])
    finally:
        shutil.rmtree(work)
    print("clean-root smoke test: OK")


if __name__ == "__main__":
    main()
