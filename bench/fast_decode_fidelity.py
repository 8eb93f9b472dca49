"""Fidelity and speed of each ``fast_decode`` level against torchvision, side by side.

    nice -n 15 .venv/bin/python bench/fast_decode_fidelity.py            # about 2 minutes
    nice -n 15 .venv/bin/python bench/fast_decode_fidelity.py --quick    # fewer photos, 1 round

Photos are synthesised (``ringloader.sample_data``: 1/f texture, shapes, sensor noise; JPEG
q90 4:2:0, as Pillow writes them) at several sizes into a temporary folder; nothing is
downloaded. For each level (``False``, ``"scale"``, ``"fastest"``) the script prints:

* fidelity: max |diff| (of 255) and PSNR min / mean of ringloader's uint8 output against
  torchvision (PIL decode + the same v1 transform) for the same crops: the eval chain
  ``Resize(256) + CenterCrop(224)``, and train-like crops (the sizes ``RandomResizedCrop(224)``
  draws, fixed per photo size so torchvision gets the same crop: ``CenterCrop((h, w)) +
  Resize((224, 224))``), per photo size;
* throughput (images/s) on ImageNet-sized photos (300-600 px) with 2 threads each: ringloader
  per level, torch's DataLoader (2 worker processes, torchvision ImageFolder) and, when the
  ``turboloader`` package imports, TurboLoader (2 threads, from a TAR of the same files, its
  own Resize(256, 256) + CenterCrop(224, 224); its output is compared with torchvision's
  ``Resize((256, 256)) + CenterCrop(224)`` the same way).
  Train: ``RandomResizedCrop(224) + RandomHorizontalFlip() + PILToTensor()``; eval:
  ``Resize(256) + CenterCrop(224) + PILToTensor()``; best of the rounds.

PSNR is per image over all values; min and mean are over the images that differ from
torchvision's, and the identical ones are counted beside them ("exact" when all are).
"""

from __future__ import annotations

import argparse
import datetime
import io
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torchvision
import torchvision.transforms as T
from PIL import Image

import ringloader as rl
from ringloader import sample_data

LEVELS = (False, "scale", "fastest")
FIDELITY_SIZES = ((500, 375), (375, 500), (640, 480), (1024, 768), (2048, 1536))
# (area fraction, aspect ratio) draws in RandomResizedCrop's range: scale (0.08, 1), ratio (3/4, 4/3).
TRAIN_DRAWS = ((1.0, 1.0), (0.6, 0.8), (0.35, 1.25), (0.15, 1.0))


def write_photos(root: Path, sizes, per_size: int, seed: int) -> None:
    """An ImageFolder tree (one class) of q90 4:2:0 photos of the given sizes."""
    rng = np.random.default_rng(seed)
    d = root / "c0"
    d.mkdir(parents=True, exist_ok=True)
    n = 0
    for (w, h) in sizes:
        for _ in range(per_size):
            pixels = sample_data.synthesize_image(w, h, rng)
            (d / f"{n:05d}_{w}x{h}.jpg").write_bytes(sample_data.encode_jpeg(pixels, quality=90))
            n += 1


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def ringloader_outputs(root: Path, transform, level) -> list:
    ds = rl.ImageFolder(str(root), transform=transform)
    loader = rl.DataLoader(ds, batch_size=1, num_workers=2, fast_decode=level)
    return [images[0].numpy().copy() for images, _ in loader]


def torchvision_outputs(root: Path, transform) -> list:
    ds = torchvision.datasets.ImageFolder(str(root), transform=transform)
    return [ds[i][0].numpy() for i in range(len(ds))]


def train_crop(w: int, h: int, area: float, ratio: float):
    """The crop RandomResizedCrop draws for this area fraction and aspect ratio (h, w)."""
    cw = int(round(math.sqrt(w * h * area * ratio)))
    ch = int(round(math.sqrt(w * h * area / ratio)))
    return min(ch, h), min(cw, w)


def fidelity(tmp: Path, per_size: int) -> dict:
    """{level: {"eval"|"train": [psnr, ...], "max": {...}}} over every photo size."""
    stats = {level: {"eval": [], "train": [], "max_eval": 0, "max_train": 0} for level in LEVELS}
    eval_t = T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])
    for (w, h) in FIDELITY_SIZES:
        root = tmp / f"fid_{w}x{h}"
        write_photos(root, [(w, h)], per_size, seed=w * 7 + h)
        chains = [("eval", eval_t)]
        for area, ratio in TRAIN_DRAWS:
            crop = train_crop(w, h, area, ratio)
            chains.append(("train", T.Compose([T.CenterCrop(crop), T.Resize((224, 224)), T.PILToTensor()])))
        for kind, t in chains:
            theirs = torchvision_outputs(root, t)
            for level in LEVELS:
                ours = ringloader_outputs(root, t, level)
                for a, b in zip(ours, theirs):
                    stats[level][kind].append(psnr(a, b))
                    d = int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max())
                    stats[level][f"max_{kind}"] = max(stats[level][f"max_{kind}"], d)
        shutil.rmtree(root)
    return stats


def count(make_iter) -> tuple:
    """(images, wall seconds, this process's CPU seconds) of one pass."""
    t0, c0 = time.perf_counter(), time.process_time()
    seen = 0
    for batch in make_iter():
        seen += len(batch[0])
    return seen, time.perf_counter() - t0, time.process_time() - c0


def best_rates(runs: dict, n: int, rounds: int) -> dict:
    """Images/s of each run, best of `rounds`, and ("cpu", key): the least CPU milliseconds per
    image the process spent (all its threads; torch's worker processes are not counted), which
    a busy machine disturbs far less than wall time. The runs alternate within each round, so
    a change of machine load touches them all alike."""
    best = {key: 0.0 for key in runs}
    for key in runs:
        best[("cpu",) + key] = math.inf
    for _ in range(rounds):
        for key, make_iter in runs.items():
            seen, dt, cpu = count(make_iter)
            assert seen == n, (key, seen, n)
            best[key] = max(best[key], n / dt)
            best[("cpu",) + key] = min(best[("cpu",) + key], 1000 * cpu / n)
    return best


def turboloader_or_reason():
    try:
        import turboloader  # noqa: F401
        return turboloader, None
    except Exception as e:  # not installed, or its extension does not load here
        return None, f"turboloader does not import ({type(e).__name__}: {e}); pip install turboloader"


def turbo_tar(root: Path, tar_path: Path) -> list:
    """A TAR of the folder's JPEGs in sorted order (TurboLoader reads TARs); the names in order."""
    names = sorted(p for p in root.rglob("*.jpg"))
    with tarfile.open(tar_path, "w") as tar:
        for p in names:
            tar.add(str(p), arcname=p.name)
    return names


def turbo_eval_outputs(tl, tar_path: Path, n: int, workers: int = 2, batch_size: int = 32):
    loader = tl.FastDataLoader(str(tar_path), batch_size=batch_size, num_workers=workers,
                               output_format="numpy", target_height=224, target_width=224,
                               transform=tl.Compose([tl.Resize(256, 256), tl.CenterCrop(224, 224)]))
    out = []
    for images, _ in loader:
        out.extend(np.asarray(images))
        if len(out) >= n:
            break
    return out[:n]


def throughput(tmp: Path, n: int, rounds: int, report: list) -> dict:
    root = tmp / "speed"
    sizes = [(500, 375), (375, 500), (500, 333), (333, 500), (600, 450), (400, 300)]
    write_photos(root, sizes, max(1, n // len(sizes)), seed=11)
    n = sum(1 for _ in root.rglob("*.jpg"))
    train = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()])
    evalt = T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])
    runs, keep = {}, []
    for name, t in (("train", train), ("eval", evalt)):
        ds = rl.ImageFolder(str(root), transform=t)
        for level in LEVELS:
            loader = rl.DataLoader(ds, batch_size=32, num_workers=2, shuffle=name == "train",
                                   fast_decode=level)
            keep.append(loader)
            runs[(name, str(level))] = (lambda lo=loader: lo)
        tv = torchvision.datasets.ImageFolder(str(root), transform=t)
        torch_loader = torch.utils.data.DataLoader(tv, batch_size=32, num_workers=2,
                                                   shuffle=name == "train", persistent_workers=True)
        keep.append(torch_loader)
        runs[(name, "torch")] = (lambda lo=torch_loader: lo)
    tl, reason = turboloader_or_reason()
    if tl is None:
        report.append(f"TurboLoader skipped: {reason}")
    else:
        tar_path = tmp / "speed.tar"
        turbo_tar(root, tar_path)

        def turbo_iter():
            return iter(tl.FastDataLoader(str(tar_path), batch_size=32, num_workers=2,
                                          output_format="numpy", target_height=224,
                                          target_width=224,
                                          transform=tl.Compose([tl.Resize(256, 256),
                                                                tl.CenterCrop(224, 224)])))
        runs[("eval", "turboloader")] = turbo_iter
        report.append(f"TurboLoader {getattr(tl, '__version__', '?')}: eval chain only (its "
                      "Resize(256, 256) + CenterCrop(224, 224); it has no RandomResizedCrop to "
                      "draw the same crops with)")
    try:
        speeds = best_rates(runs, n, rounds)
    except Exception as e:  # an API of TurboLoader this script does not know
        if ("eval", "turboloader") not in runs:
            raise
        report.append(f"TurboLoader skipped: {type(e).__name__}: {e}")
        del runs[("eval", "turboloader")]
        speeds = best_rates(runs, n, rounds)
    del keep
    shutil.rmtree(root)
    return speeds


def turbo_fidelity(tmp: Path, per_size: int, report: list):
    tl, reason = turboloader_or_reason()
    if tl is None:
        return None
    psnrs, worst = [], 0
    # TurboLoader's Resize(w, h) is a fixed size: torchvision's equivalent is Resize((256, 256)).
    eval_t = T.Compose([T.Resize((256, 256)), T.CenterCrop(224), T.PILToTensor()])
    try:
        for (w, h) in FIDELITY_SIZES:
            root = tmp / f"tfid_{w}x{h}"
            write_photos(root, [(w, h)], per_size, seed=w * 7 + h)
            theirs = torchvision_outputs(root, eval_t)
            names = turbo_tar(root, tmp / "tfid.tar")
            ours = turbo_eval_outputs(tl, tmp / "tfid.tar", len(names))
            for a in ours:
                a = np.asarray(a)
                a = a.transpose(2, 0, 1) if a.shape[-1] == 3 else a  # HWC -> CHW
                # Its worker threads may deliver out of file order: each output is compared
                # with the torchvision image it is closest to.
                b = max(theirs, key=lambda ref: psnr(a, ref))
                psnrs.append(psnr(a, b))
                worst = max(worst, int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max()))
            shutil.rmtree(root)
    except Exception as e:
        report.append(f"TurboLoader fidelity skipped: {type(e).__name__}: {e}")
        return None
    return psnrs, worst


def fmt_psnr(values) -> str:
    """PSNR min / mean over the images that differ, and how many were identical."""
    if not values:
        return "-"
    differ = [v for v in values if v < 99]
    if not differ:
        return "exact"
    same = len(values) - len(differ)
    return (f"{min(differ):.1f} / {sum(differ) / len(differ):.1f} dB"
            + (f" ({same} of {len(values)} exact)" if same else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer photos and one round")
    ap.add_argument("--images", type=int, default=480, help="photos for the throughput runs")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    per_size = 2 if args.quick else 6
    n = 120 if args.quick else args.images
    rounds = 1 if args.quick else args.rounds
    torch.set_num_threads(1)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, ringloader "
          f"{rl.__version__}, torch {torch.__version__}, torchvision {torchvision.__version__}")
    print(f"# uptime at start: {load}")
    report: list = []
    with tempfile.TemporaryDirectory(prefix="rl_fast_decode_") as d:
        tmp = Path(d)
        fid = fidelity(tmp, per_size)
        tfid = turbo_fidelity(tmp, per_size, report)
        speeds = throughput(tmp, n, rounds, report)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"# uptime at end: {load}")
    print(f"# fidelity: photos {', '.join(f'{w}x{h}' for w, h in FIDELITY_SIZES)}, {per_size} each; "
          f"throughput: {n} photos of 333-600 px, 2 threads, best of {rounds}")
    print("| fast_decode | eval max \\|diff\\| | eval PSNR min / mean | train max \\|diff\\| "
          "| train PSNR min / mean | train img/s | eval img/s | train vs torch | eval vs torch "
          "| CPU ms/img train, eval |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for level in LEVELS:
        s = fid[level]
        tr, ev = speeds[("train", str(level))], speeds[("eval", str(level))]
        print(f"| {level!r} | {s['max_eval']} | {fmt_psnr(s['eval'])} | {s['max_train']} | "
              f"{fmt_psnr(s['train'])} | {tr:.0f} | {ev:.0f} | "
              f"{tr / speeds[('train', 'torch')]:.2f}x | {ev / speeds[('eval', 'torch')]:.2f}x | "
              f"{speeds[('cpu', 'train', str(level))]:.2f}, {speeds[('cpu', 'eval', str(level))]:.2f} |")
    print(f"| torch + Pillow | 0 | exact | 0 | exact | {speeds[('train', 'torch')]:.0f} | "
          f"{speeds[('eval', 'torch')]:.0f} | 1.00x | 1.00x | (worker processes) |")
    if ("eval", "turboloader") in speeds:
        tev = speeds[("eval", "turboloader")]
        fid_text = f"{tfid[1]} | {fmt_psnr(tfid[0])}" if tfid else "- | -"
        print(f"| TurboLoader | {fid_text} | - | - | - | {tev:.0f} | - | "
              f"{tev / speeds[('eval', 'torch')]:.2f}x | -, {speeds[('cpu', 'eval', 'turboloader')]:.2f} |")
    for line in report:
        print(f"# {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
