"""The memory budget in a real memory cgroup: a loader whose default prefetch does not fit is cut
to what fits and runs, instead of being OOM-killed.

A child cgroup is made under this process's own (cgroup v1 ``memory.limit_in_bytes``, or v2
``memory.max``), a Python subprocess joins it before it starts, imports torch (a few hundred MB,
which varies by build), then sets its own limit to what it uses plus a headroom of 5 batch slots:
a loader that allocates its default 4-deep pipeline plus the batch the loop holds (5 slots, 6 with
the one being released) goes over it, one that keeps within the default budget (a quarter of
that headroom, raised to the 2-slot minimum since it fits in half) stays well under. A second
test puts a 13000 x 13000 PNG (about 500 MB decoded) in a 620 MB cgroup: its decode buffers count
against the budget, so the sample fails with an error naming it and the bytes it needed, instead
of the process being OOM-killed. Skipped, with the reason, where no writable memory cgroup is
available (not root, no memory controller)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ringloader  # noqa: F401  (the subprocess imports the same build)

SLOT = 64 * 3 * 224 * 224 * 4 + 2 * 8 * 64  # batch 64, float32 [3,224,224], labels and indices
HEADROOM = 5 * SLOT

# Runs in the cgroup: argv = tree, limit file, usage file, headroom bytes.
CHILD = r"""
import json, sys
tree, limit_file, usage_file, headroom = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
import torch
import ringloader as rl
from ringloader import transforms as T

# What the process holds now, less the page cache the kernel would reclaim first (as the loader
# counts it): the limit leaves exactly `headroom` for the loader, whatever import cached.
usage = int(open(usage_file).read().split()[0])
stat = dict(line.split() for line in open(usage_file.rsplit("/", 1)[0] + "/memory.stat"))
usage -= min(usage, int(stat.get("total_inactive_file", stat.get("inactive_file", 0))))
with open(limit_file, "w") as f:
    f.write(str(usage + headroom))
tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize([0.5] * 3, [0.25] * 3)])
ds = rl.ImageFolder(tree, transform=tf)
out = {}
for workers in (2, "auto"):
    loader = rl.DataLoader(ds, batch_size=64, num_workers=workers)
    batches = 0
    for epoch in range(2):
        for x, y in loader:
            assert x.shape == (64, 3, 224, 224) and x.dtype == torch.float32, (x.shape, x.dtype)
            batches += 1
    s = loader.stats()
    out[str(workers)] = {"batches": batches, "describe": loader.describe(), "max_slots": s["max_slots"],
                         "slots_allocated": s["slots_allocated"], "slot_bytes": s["slot_bytes"],
                         "max_memory": s["max_memory"], "prefetch_batches": s["prefetch_batches"]}
    del x, y, loader
print("RESULT " + json.dumps(out))
"""


def _own_cgroup_lines() -> list:
    try:
        return [line.split(":", 2) for line in Path("/proc/self/cgroup").read_text().splitlines() if line]
    except OSError:
        return []


def _cgroup2_mount() -> str | None:
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            if right.split()[:1] == ["cgroup2"]:
                return left.split()[4]
    except OSError:
        pass
    return None


def writable_memory_cgroup(tmp_name: str) -> tuple:
    """(child dir, limit file name, usage file name) of a fresh child of this process's memory
    cgroup, or pytest.skip with the reason."""
    lines = _own_cgroup_lines()
    if not lines:
        pytest.skip("no /proc/self/cgroup: cgroups are not available here")
    reasons = []
    for _, controllers, path in lines:  # cgroup v1: a hierarchy with the memory controller
        if "memory" in controllers.split(","):
            parent = Path("/sys/fs/cgroup") / controllers / path.lstrip("/")
            child = parent / tmp_name
            try:
                child.mkdir()
            except OSError as e:
                reasons.append(f"cannot make a child of the v1 memory cgroup {parent}: {e}")
                break
            return child, "memory.limit_in_bytes", "memory.usage_in_bytes"
    v2 = _cgroup2_mount()
    for hierarchy, controllers, path in lines:  # cgroup v2: "0::/path"
        if hierarchy == "0" and controllers == "" and v2 is not None:
            parent = Path(v2) / path.lstrip("/")
            child = parent / tmp_name
            try:
                child.mkdir()
            except OSError as e:
                reasons.append(f"cannot make a child of the v2 cgroup {parent}: {e}")
                break
            if not (child / "memory.max").exists():
                try:  # the memory controller for children (refused when the parent holds processes)
                    (parent / "cgroup.subtree_control").write_text("+memory")
                except OSError as e:
                    reasons.append(f"the v2 cgroup {parent} does not give its children the memory controller: {e}")
            if (child / "memory.max").exists():
                return child, "memory.max", "memory.current"
            child.rmdir()
    pytest.skip("no writable memory cgroup: " + ("; ".join(reasons) or "no memory controller for this process"))


def write_tree(root: Path) -> Path:
    """320 JPEGs (5 batches of 64 an epoch): enough batches for the default 4-deep pipeline to fill."""
    from imagegen import jpeg_bytes

    images = [jpeg_bytes(320, 240, seed=s) for s in range(4)]
    for i in range(320):
        folder = root / f"class_{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"img_{i:03d}.jpg").write_bytes(images[i % 4])
    return root


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return write_tree(tmp_path_factory.mktemp("cgroup_tree"))


def run_in_cgroup(tree: Path, tmp_path: Path, python: str = sys.executable) -> tuple:
    child, limit, usage = writable_memory_cgroup(f"ringloader-test-{os.getpid()}")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    try:
        shell = 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"'
        done = subprocess.run(["sh", "-c", shell, "sh", str(child), python, str(script), str(tree),
                               str(child / limit), str(child / usage), str(HEADROOM)],
                              capture_output=True, text=True, timeout=300)
    finally:
        child.rmdir()  # its one process has exited
    return done, child


def test_default_budget_cuts_the_pipeline_to_fit_a_small_memory_cgroup(tree, tmp_path):
    done, child = run_in_cgroup(tree, tmp_path)
    assert not child.exists()
    # -9 (SIGKILL): the cgroup's OOM killer, what the old slot floor of 2 x prefetch + 2 got here.
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    for workers, r in result.items():
        text = r["describe"]
        assert r["batches"] == 10, (workers, r)
        assert r["slot_bytes"] == SLOT
        # A quarter of the headroom holds 1 slot: the budget rose to the 2-slot minimum, which
        # fits in half of it, and the pipeline runs 1 batch deep.
        assert (r["max_slots"], r["max_memory"], r["prefetch_batches"]) == (2, 2 * SLOT, 1), (workers, text)
        assert r["slots_allocated"] <= 2, (workers, text)
        cut = next(line for line in text.splitlines() if line.startswith("  cut:"))
        assert "the default budget holds fewer than 2 slots: raised to 2 x 36.8 MiB = 73.5 MiB" in cut, text
        assert " -> 1 batch (the budget holds 2 slots of 36.8 MiB; one is the training loop's)" in cut, text
        assert "epoch read-ahead off" in cut, text
        assert "a quarter of" in text and "available (cgroup v" in text, text
        assert "drained between epochs (the memory budget is too tight" in text, text
        assert "  budget:  covers the batch slots, batches you keep included, and decodes that need over 16 MiB" in text, text


# Runs in a 620 MB cgroup: argv = tree, limit file, usage file. A 13000 x 13000 PNG (under the
# pixel limit) needs over 500 MB to decode: counted against the memory budget, it fails its
# sample with a clear error under on_error, where it used to get the process OOM-killed.
BIG_CHILD = r"""
import json, sys
tree, limit_file, usage_file = sys.argv[1], sys.argv[2], sys.argv[3]
import torch
import ringloader as rl
from ringloader import transforms as T

usage = int(open(usage_file).read().split()[0])
limit = max(620 * 10**6, usage + 100 * 10**6)  # 620 MB, or 100 MB over what the imports took
with open(limit_file, "w") as f:
    f.write(str(limit))
tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()])
ds = rl.ImageFolder(tree, transform=tf)
out = {"limit": limit, "usage": usage}
loader = rl.DataLoader(ds, batch_size=4, num_workers=2, on_error="skip")
out["skip_sizes"] = [int(x.shape[0]) for x, y in loader]
s = loader.stats()
out["errors"], out["last_error"], out["max_memory"] = s["errors"], s["last_error"], s["max_memory"]
del loader
try:
    for x, y in rl.DataLoader(ds, batch_size=4, num_workers=2):
        pass
    out["raised"] = None
except Exception as e:
    out["raised"] = f"{type(e).__name__}: {e}"
print("RESULT " + json.dumps(out))
"""


def write_big_png(path: Path, width: int, height: int) -> None:
    """An RGB PNG, quickly: one gradient row, then rows filtered "Up" (all zeros: compressible)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    first = bytes([0]) + bytes((x * 7 + c) & 0xFF for x in range(width) for c in range(3))
    up = bytes([2]) + bytes(3 * width)
    comp = zlib.compressobj(1)
    data = comp.compress(first) + b"".join(comp.compress(up) for _ in range(height - 1)) + comp.flush()
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)))
        for at in range(0, len(data), 1 << 20):
            f.write(chunk(b"IDAT", data[at:at + (1 << 20)]))
        f.write(chunk(b"IEND", b""))


def test_an_image_larger_than_the_budget_fails_its_sample_instead_of_the_process(tmp_path):
    from imagegen import jpeg_bytes

    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    for i in range(7):
        (tree / "a" / f"img_{i}.jpg").write_bytes(jpeg_bytes(320, 240, seed=i))
    big = tree / "a" / "img_3_big.png"
    write_big_png(big, 13000, 13000)  # 169 M pixels: under the 179 M pixel limit
    child, limit, usage = writable_memory_cgroup(f"ringloader-big-{os.getpid()}")
    script = tmp_path / "big_child.py"
    script.write_text(BIG_CHILD)
    try:
        shell = 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"'
        done = subprocess.run(["sh", "-c", shell, "sh", str(child), sys.executable, str(script), str(tree),
                               str(child / limit), str(child / usage)], capture_output=True, text=True, timeout=300)
    finally:
        child.rmdir()
    # -9 (SIGKILL) is the cgroup's OOM killer: what decoding the image outside the budget got.
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    r = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert r["skip_sizes"] == [4, 3], r  # 8 samples, the big one skipped
    assert r["errors"] == 1, r
    for text in (r["last_error"], r["raised"]):
        assert str(big) in text, r
        assert "PNG image 13000 x 13000 needs " in text and " bytes (" in text, r
        assert "more than the memory budget leaves for decoding: max_memory " in text, r
        assert "Raise max_memory=" in text, r


def test_no_writable_cgroup_is_a_skip_not_a_failure(monkeypatch, tmp_path):
    # Where nothing names a memory controller the helper skips with the reason.
    monkeypatch.setattr(sys.modules[__name__], "_own_cgroup_lines", lambda: [["1", "cpu", "/"]])
    monkeypatch.setattr(sys.modules[__name__], "_cgroup2_mount", lambda: None)
    with pytest.raises(pytest.skip.Exception, match="no writable memory cgroup: no memory controller"):
        writable_memory_cgroup("unused")


if __name__ == "__main__":
    # Against another build (e.g. one without the budget rule): python test_cgroup_memory.py PYTHON
    # prints the child's exit status in the cgroup; -9 (SIGKILL) is the OOM killer.
    import tempfile

    sys.path.insert(0, os.path.dirname(__file__))
    with tempfile.TemporaryDirectory() as tmp:
        done, _ = run_in_cgroup(write_tree(Path(tmp) / "tree"), Path(tmp),
                                python=sys.argv[1] if len(sys.argv) > 1 else sys.executable)
        print("exit", done.returncode, done.stdout[-2000:], done.stderr[-2000:])
