"""The memo of JPEG scans read clean to their end, shared by the processes of a machine.

conftest.py points ``RINGLOADER_SCAN_MEMO`` at a file of the suite's own; these tests read its
fill through ``stats()`` and start other processes on it (or on a bad file, or with the memo off).
Files are made new to the memo by random bytes after their end-of-image marker (accepted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from PIL import Image

import ringloader as rl
from ringloader import transforms as T

from imagegen import DAMAGED_JPEG_CASES, damaged_jpeg_cases, write_tree

# A small centre crop reads a few rows in the middle: the memo decides whether the rest is read.
CROP = T.Compose([T.CenterCrop(8), T.ToTensor()])

# Decodes the tree in argv[1] in a fresh process and prints its loader's stats() and describe().
CHILD = """
import json, sys
import ringloader as rl
from ringloader import transforms as T
loader = rl.DataLoader(rl.ImageFolder(sys.argv[1], transform=T.Compose([T.CenterCrop(8), T.ToTensor()])),
                       batch_size=4, on_error="skip")
before = loader.stats()["scan_memo_entries"]
delivered = sum(len(y) for _, y in loader)
s = loader.stats()
print(json.dumps({"before": before, "delivered": delivered, "describe": loader.describe(),
                  **{k: s[k] for k in ("scan_memo", "scan_memo_note", "scan_memo_entries", "scan_memo_slots")}}))
"""


def run_child(tree: Path, memo: str | None = None) -> dict:
    env = dict(os.environ)
    if memo is not None:
        env["RINGLOADER_SCAN_MEMO"] = memo
    out = subprocess.run([sys.executable, "-c", CHILD, str(tree)], env=env, check=True,
                         capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def new_tree(root: Path, count: int) -> Path:
    write_tree(root, num_classes=2, per_class=count // 2, seed=11)
    for f in root.rglob("*.jpg"):
        f.write_bytes(f.read_bytes() + os.urandom(8))  # bytes no process has read yet
    return root


def test_a_file_read_clean_by_another_process_is_seen_here(tmp_path):
    tree = new_tree(tmp_path / "tree", 6)
    # This process's first strict decode chooses the memo (before it, stats() says "unused").
    warm = new_tree(tmp_path / "warm", 2)
    assert sum(len(y) for _, y in rl.DataLoader(rl.ImageFolder(warm, transform=CROP))) == 2
    loader = rl.DataLoader(rl.ImageFolder(tree, transform=CROP), batch_size=4)
    s = loader.stats()
    assert s["scan_memo"] == "file " + os.environ["RINGLOADER_SCAN_MEMO"]
    assert s["scan_memo_note"] == "" and s["scan_memo_slots"] == 1 << 22
    before = s["scan_memo_entries"]
    child = run_child(tree)
    assert child["scan_memo"] == s["scan_memo"] and child["delivered"] == 6
    assert child["before"] == 0  # "unused" until the child decoded
    assert child["scan_memo_entries"] == before + 6
    # This process decoded nothing: the six entries came through the shared mapping.
    assert loader.stats()["scan_memo_entries"] == before + 6
    assert sum(len(y) for _, y in loader) == 6
    assert loader.stats()["scan_memo_entries"] == before + 6  # known bytes: nothing new
    line = next(x for x in loader.describe().splitlines() if x.startswith("  scans:"))
    assert "shared by this machine's processes, file " + os.environ["RINGLOADER_SCAN_MEMO"] in line
    assert f"{before + 6:,} of {1 << 22:,} slots filled" in line


def test_damaged_files_are_never_remembered(tmp_path):
    root = tmp_path / "damaged"
    (root / "a").mkdir(parents=True)
    intact = 0
    for i, (name, data) in enumerate(sorted(damaged_jpeg_cases().items())):
        if DAMAGED_JPEG_CASES[name][0] == "intact":
            data += os.urandom(8)  # new to the memo
            intact += 1
        (root / "a" / f"{i:02d}_{name}.jpg").write_bytes(data)
    # Most of these files are damaged: every one of them skipped is what is checked.
    loader = rl.DataLoader(rl.ImageFolder(root, transform=CROP), batch_size=4, on_error="skip",
                           max_skipped_fraction=1)
    before = loader.stats()["scan_memo_entries"]
    for epoch in range(2):
        assert sum(len(y) for _, y in loader) == intact
        # Every damaged file is refused again: its scan is read past the crop every epoch.
        assert loader.stats()["skipped"] == (epoch + 1) * (len(DAMAGED_JPEG_CASES) - intact)
    assert loader.stats()["scan_memo_entries"] == before + intact


def test_a_bad_memo_file_falls_back_to_this_process(tmp_path):
    tree = new_tree(tmp_path / "tree", 4)
    bad = tmp_path / "memo.bin"
    bad.write_bytes(b"not a memo" * 100)
    child = run_child(tree, str(bad))
    assert child["delivered"] == 4
    assert child["scan_memo"] == "process"
    assert str(bad) in child["scan_memo_note"] and "not a ringloader scan memo" in child["scan_memo_note"]
    assert child["scan_memo_entries"] == 4
    assert "memo of this process only (scan memo " + str(bad) in child["describe"]
    assert bad.read_bytes() == b"not a memo" * 100  # left as it was

    off = run_child(tree, "off")
    assert off["delivered"] == 4 and off["scan_memo"] == "off"
    assert off["scan_memo_entries"] == 0 and off["scan_memo_slots"] == 0
    assert "RINGLOADER_SCAN_MEMO=off" in off["describe"]


def test_asking_about_the_memo_creates_no_file(tmp_path):
    """A process that never decodes a JPEG strictly leaves no memo file: stats() and describe()
    say "unused" until the first such decode chooses (and creates) it."""
    tree = tmp_path / "png" / "a"
    tree.mkdir(parents=True)
    from PIL import Image

    for i in range(3):
        Image.new("RGB", (12, 10), (i, 2 * i, 3 * i)).save(tree / f"{i}.png")
    memo = tmp_path / "memo" / "clean-scans.bin"
    child = run_child(tmp_path / "png", str(memo))
    assert child["delivered"] == 3 and child["scan_memo"] == "unused"
    assert "no strict JPEG decode in this process yet" in child["describe"]
    assert not memo.exists() and not memo.parent.exists()
    jpeg = run_child(new_tree(tmp_path / "jpeg", 2), str(memo))
    assert jpeg["scan_memo"] == f"file {memo}" and memo.exists()


CHILD_INDEX = """
import json, sys
import ringloader as rl
from ringloader import transforms as T
loader = rl.DataLoader(rl.ImageFolder(sys.argv[1], transform=T.Compose([T.RandomResizedCrop(16), T.ToTensor()])),
                       batch_size=4, persistent_workers=True, num_workers=2)
first = [x.clone() for x, _ in loader]
s = loader.stats()
again = [x for x, _ in loader]
print(json.dumps({"scans": s["scan_index_scans"], "bytes": s["scan_index_bytes"],
                  "after": loader.stats()["scan_index_scans"], "describe": loader.describe()}))
"""


def test_files_read_clean_keep_resume_points_in_the_process(tmp_path):
    # Baseline files get resume points when first read (docs/bad-data.md); a later epoch starts
    # above its crop from them, and RINGLOADER_SCAN_INDEX_MB=0 keeps none.
    tree = tmp_path / "tree"
    write_tree(tree, num_classes=2, per_class=4, seed=5)  # one progressive: no points
    for f in tree.rglob("*.jpg"):
        f.write_bytes(f.read_bytes() + os.urandom(8))
    runs = {}
    for mb in ("64", "0"):
        env = dict(os.environ, RINGLOADER_SCAN_INDEX_MB=mb)
        out = subprocess.run([sys.executable, "-c", CHILD_INDEX, str(tree)], env=env, check=True,
                             capture_output=True, text=True, timeout=120)
        runs[mb] = json.loads(out.stdout.strip().splitlines()[-1])
    assert runs["64"]["scans"] == 7 and runs["64"]["after"] == 7
    # Four points on each row of MCUs (at its start and every quarter of it, rounded up), none
    # at the first MCU; 64 bytes a scan and 20 a point.
    most = 0
    for f in tree.rglob("*.jpg"):
        with Image.open(f) as im:
            if im.info.get("progressive"):
                continue
            mcu_w = 8 * max(im.layer[i][1] for i in range(len(im.layer)))
            mcu_h = 8 * max(im.layer[i][2] for i in range(len(im.layer)))
            cols = -(-im.width // mcu_w)
            rows = -(-im.height // mcu_h)
            step = -(-cols // 4)
            most += 64 + 20 * (rows * len(range(0, cols, step)) - 1)
    assert 0.9 * most <= runs["64"]["bytes"] <= most
    assert "resume points of 7 of them in this process" in runs["64"]["describe"]
    assert runs["0"]["scans"] == 0 and runs["0"]["bytes"] == 0
    assert "resume points" not in runs["0"]["describe"]
