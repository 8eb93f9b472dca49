"""Resident memory of an ImageNet-sized ImageFolder + DataLoader, as a user's process sees it.

    nice -n 15 .venv/bin/python bench/imagenet_scale_memory.py            # 1,281,167 files
    nice -n 15 .venv/bin/python bench/imagenet_scale_memory.py --files 50000 --classes 100
    nice -n 15 .venv/bin/python bench/imagenet_scale_memory.py --first-batch   # and its timing

Creates an ImageNet-shaped tree (``train/nXXXXXXXX/nXXXXXXXX_N.JPEG``, 1,000 classes, empty
files: the scan lists directories and never opens a file) in a temporary folder, after checking
free disk space and inodes, then measures in a fresh process each:

* ringloader: ``rl.ImageFolder(root, transform=...)`` + ``rl.DataLoader(ds, batch_size=256,
  num_workers=2)``;
* torch: ``torchvision.datasets.ImageFolder`` + ``torch.utils.data.DataLoader`` (the same), for
  comparison.

Each process imports its libraries first, then resets its peak (``/proc/self/clear_refs``) and
reads VmRSS; after building the two objects it reads VmRSS again and the peak since the reset
(VmHWM). Printed: the growth and the peak's growth, in MB and in bytes per sample. No batch is
read (the files are empty). The tree is removed afterwards (``--keep`` keeps it).

``--first-batch``: the files are hard links to one small JPEG per class instead (the same
directory entries and inodes as empty files), and each process then also reads its first batch,
after the memory is measured: printed is the time from the start of building the dataset to the
first batch in hand (scan, loader, worker start, 256 decodes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IMAGENET_TRAIN_FILES = 1_281_167

MEASURE = r"""
import gc, json, sys, time
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
kind, root = sys.argv[1], sys.argv[2]
import torch, torchvision, torchvision.transforms as T
import ringloader as rl
t = T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])
gc.collect()
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    peak_reset = True
except OSError:
    peak_reset = False
rss0 = status("VmRSS")
t0 = time.perf_counter()
if kind == "ringloader":
    ds = rl.ImageFolder(root, transform=t)
    loader = rl.DataLoader(ds, batch_size=256, num_workers=2)
else:
    ds = torchvision.datasets.ImageFolder(root, transform=t)
    loader = torch.utils.data.DataLoader(ds, batch_size=256, num_workers=2)
build = time.perf_counter() - t0
gc.collect()
out = {"samples": len(ds), "rss0": rss0, "rss": status("VmRSS"), "hwm": status("VmHWM"),
       "peak_reset": peak_reset, "build_s": build}
if len(sys.argv) > 3:
    images, labels = next(iter(loader))
    out["first_batch_s"] = time.perf_counter() - t0
    assert images.shape[0] == 256
print(json.dumps(out))
"""


def make_tree(root: Path, files: int, classes: int, jpeg: bool = False) -> None:
    per, extra = divmod(files, classes)
    for c in range(classes):
        wnid = f"n{1440764 + c * 997:08d}"
        d = root / wnid
        d.mkdir(parents=True)
        source = None
        if jpeg:  # one image per class, linked (a file takes at most 65,000 links)
            from PIL import Image
            source = root.parent / f"{wnid}.JPEG"
            Image.new("RGB", (320, 240), (c % 256, 80, 160)).save(source, quality=90)
        for i in range(per + (1 if c < extra else 0)):
            name = d / f"{wnid}_{10026 + i * 7}.JPEG"
            if source is not None:
                os.link(source, name)
            else:
                os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o644))


def measure(kind: str, root: Path, first_batch: bool = False) -> dict:
    out = subprocess.run([sys.executable, "-c", MEASURE, kind, str(root)] + (["batch"] if first_batch else []),
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=IMAGENET_TRAIN_FILES)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--dir", default=None, help="where to make the tree (default: the temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the tree")
    ap.add_argument("--skip-torch", action="store_true", help="measure ringloader only")
    ap.add_argument("--first-batch", action="store_true",
                    help="link a small JPEG per class instead of empty files, and time the first batch")
    args = ap.parse_args(argv)
    parent = Path(args.dir or tempfile.gettempdir())
    st = os.statvfs(parent)
    free, inodes = st.f_bavail * st.f_frsize, st.f_favail
    # An empty file costs an inode and a directory entry (~64 bytes); keep a wide margin.
    if inodes < 2 * args.files or free < 2 * args.files * 128 + (1 << 30):
        print(f"not enough room in {parent}: {free >> 20} MB and {inodes} inodes free; needs "
              f"{args.files} files (use --dir or fewer --files)", file=sys.stderr)
        return 2
    print(f"# {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC; "
          f"{subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    tmp = Path(tempfile.mkdtemp(prefix="rl_imagenet_scale_", dir=parent))
    try:
        root = tmp / "train"
        t0 = time.perf_counter()
        make_tree(root, args.files, args.classes, args.first_batch)
        what = "links to a 320x240 JPEG a class" if args.first_batch else "empty files"
        print(f"# tree: {args.files} {what} in {args.classes} classes under {root} "
              f"({time.perf_counter() - t0:.0f} s to create)")
        kinds = ["ringloader"] + ([] if args.skip_torch else ["torch"])
        batch_head = " first batch s |" if args.first_batch else ""
        print(f"| loader | samples | build s | RSS growth | B/sample | peak growth | peak B/sample |{batch_head}")
        print("|---|---|---|---|---|---|---|" + ("---|" if args.first_batch else ""))
        for kind in kinds:
            m = measure(kind, root, args.first_batch)
            n = m["samples"]
            grow, peak = m["rss"] - m["rss0"], m["hwm"] - m["rss0"]
            peak_text = (f"{peak / 1e6:.1f} MB | {peak / n:.0f}" if m["peak_reset"]
                         else "- | - (no /proc/self/clear_refs)")
            batch_text = f" {m['first_batch_s']:.1f} |" if args.first_batch else ""
            print(f"| {kind} | {n} | {m['build_s']:.1f} | {grow / 1e6:.1f} MB | {grow / n:.0f} | "
                  f"{peak_text} |{batch_text}")
    finally:
        if args.keep:
            print(f"# kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
