"""Files that fail before their read is issued (missing, empty, a FIFO, a directory named .jpg,
unreadable) never stop an epoch, however many come in a row: every batch arrives or fails once,
under every policy, backend, thread count and order. A watchdog (``timeout=``) turns a hang into
a failure; a stuck pipeline says which stage holds what."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ringloader as rl
from ringloader import transforms as T

from imagegen import jpeg_bytes

TINY = T.Compose([T.Resize((8, 8)), T.ToTensor()])
GOOD = 40
KINDS = ("missing", "empty", "fifo", "directory")
WATCHDOG = 30  # seconds: far above an epoch of these tiny files, far below the test timeout


def make_tree(root: Path) -> Path:
    """One class of GOOD small JPEGs named g000..g039 (so bursts can sort before, among, after)."""
    (root / "a").mkdir(parents=True)
    for i in range(GOOD):
        (root / "a" / f"g{i:03d}.jpg").write_bytes(jpeg_bytes(24 + i % 5, 18 + i % 3, seed=i))
    return root


def plant(folder: Path, names: list[str]) -> list[Path]:
    """Bad files cycling through KINDS, as the scan sees them (a FIFO, or an empty file)."""
    paths = []
    for k, name in enumerate(names):
        path = folder / name
        if KINDS[k % len(KINDS)] == "fifo":
            os.mkfifo(path)
        else:
            path.write_bytes(b"")
        paths.append(path)
    return paths


def after_scan(paths: list[Path]) -> None:
    """What happens to them between the scan and the epoch: removed, or a directory in their
    place (a scan lists no directory as a sample)."""
    for k, path in enumerate(paths):
        kind = KINDS[k % len(KINDS)]
        if kind in ("missing", "directory"):
            path.unlink()
        if kind == "directory":
            path.mkdir()


def burst_names(where: str, n: int) -> list[str]:
    prefix = {"start": "a_", "middle": "g020_", "end": "z_"}[where]
    return [f"{prefix}{i:03d}.jpg" for i in range(n)]


def run_epoch(loader) -> tuple[int, int, list[rl.SampleError]]:
    """(rows delivered, batches delivered, sample errors raised), iterating past each error."""
    rows = batches = 0
    errors = []
    it = iter(loader)
    while True:
        try:
            x, y = next(it)
        except StopIteration:
            return rows, batches, errors
        except rl.SampleError as e:
            errors.append(e)
        else:
            rows += len(y)
            batches += 1


def check_burst(tmp_path: Path, policy: str, io: str, where: str, n: int, shuffle: bool, workers: int):
    root = make_tree(tmp_path / f"{where}{n}{shuffle}{workers}")
    bad = plant(root / "a", burst_names(where, n))
    ds = rl.ImageFolder(root, transform=TINY)
    after_scan(bad)
    # A burst may be most of the epoch (64 of 104): skipping it all is the point here.
    loader = rl.DataLoader(ds, batch_size=5, shuffle=shuffle, num_workers=workers, io=io, on_error=policy,
                           timeout=WATCHDOG, persistent_workers=False, max_skipped_fraction=1)
    case = f"{policy} {io} {where} burst={n} shuffle={shuffle} workers={workers}"
    try:
        rows, batches, errors = run_epoch(loader)
    except rl.LoaderTimeoutError as e:  # the watchdog: report, never hang the suite
        pytest.fail(f"{case}: {e}")
    total = GOOD + n
    stats = loader.stats()
    bad_names = {str(p) for p in bad}
    if policy == "skip":
        assert (rows, errors, stats["skipped"]) == (GOOD, [], n), case
    elif policy == "replace":
        assert (rows, errors, stats["replaced"]) == (total, [], n), case
    else:
        assert errors, case
        assert batches + len(errors) == len(loader), case
        for e in errors:
            assert e.path in bad_names and e.path in str(e), (case, str(e))
        assert rows >= total - 5 * len(errors), case
    if policy != "replace":
        assert stats["errors"] == n, case
    assert not stats["stalled"], case


@pytest.mark.parametrize("io", ["auto", "pread"])
@pytest.mark.parametrize("policy", ["raise", "skip", "replace"])
def test_bursts_of_failing_files_never_stop_an_epoch(tmp_path: Path, policy: str, io: str):
    for where in ("start", "middle", "end"):
        for n in (1, 9, 64):
            for shuffle in (False, True):
                for workers in (1, 2):
                    check_burst(tmp_path, policy, io, where, n, shuffle, workers)


def test_each_bad_file_is_named(tmp_path: Path):
    root = make_tree(tmp_path / "t")
    bad = plant(root / "a", burst_names("middle", 12))
    ds = rl.ImageFolder(root, transform=TINY)
    after_scan(bad)
    loader = rl.DataLoader(ds, batch_size=4, num_workers=2, on_error="skip", timeout=WATCHDOG)
    assert run_epoch(loader)[0] == GOOD
    stats = loader.stats()
    messages = "\n".join(stats["recent_errors"])
    assert stats["errors"] == 12
    for path in bad[-8:]:  # the last 16 errors are kept; these are among them
        assert str(path) in messages, (path, messages)


def test_class_folder_removed_mid_epoch(tmp_path: Path):
    root = tmp_path / "t"
    for c in range(4):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(30):
            (root / f"c{c}" / f"{i:03d}.jpg").write_bytes(jpeg_bytes(20, 16, seed=c * 100 + i))
    ds = rl.ImageFolder(root, transform=TINY)
    loader = rl.DataLoader(ds, batch_size=8, shuffle=True, num_workers=2, on_error="skip", timeout=WATCHDOG,
                           prefetch_factor=1)
    rows = 0
    for k, (x, y) in enumerate(loader):
        rows += len(y)
        if k == 0:
            shutil.rmtree(root / "c2")
    stats = loader.stats()
    assert rows + stats["skipped"] == 120
    assert stats["skipped"] > 0
    # The next epoch reads the same samples: the removed folder's 30 fail, the rest arrive.
    rows = sum(len(y) for _, y in loader)
    assert rows == 90


def test_random_missing_files_many_epochs(tmp_path: Path):
    """10% of the files removed at random before each epoch, read ahead or not: each ends."""
    import random

    root = make_tree(tmp_path / "t")
    ds = rl.ImageFolder(root, transform=TINY)
    rng = random.Random(5)
    loader = rl.DataLoader(ds, batch_size=6, shuffle=True, num_workers=2, on_error="skip", timeout=WATCHDOG,
                           max_skipped_fraction=1)  # up to 32 of the 40 are gone by the end
    removed: set[int] = set()
    for epoch in range(8):
        for i in rng.sample(range(GOOD), 4):
            path = Path(ds.samples[i][0])
            if path.exists():
                path.unlink()
            removed.add(i)
        rows = sum(len(y) for _, y in loader)
        # A read-ahead epoch may have read a file before it was removed (docs/determinism.md):
        # at least the files present at the start of the epoch arrive, at most all.
        assert GOOD - len(removed) <= rows <= GOOD, (epoch, rows, len(removed))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode (chmod 000 is no test)")
def test_unreadable_files(tmp_path: Path):
    root = make_tree(tmp_path / "t")
    for i in range(12):
        path = root / "a" / f"g020_{i:03d}.jpg"
        path.write_bytes(jpeg_bytes(20, 16, seed=i))
        path.chmod(0)
    loader = rl.DataLoader(rl.ImageFolder(root, transform=TINY), batch_size=5, num_workers=2,
                           on_error="skip", timeout=WATCHDOG)
    assert run_epoch(loader)[0] == GOOD
    assert loader.stats()["skipped"] == 12


def test_low_file_limit(tmp_path: Path):
    """Under a low RLIMIT_NOFILE opens fail with EMFILE: those samples fail, the epoch ends.

    The limit is set after iter() has started the readers, so the tree is far larger than what
    they can read ahead (prefetch batches plus io_depth) before it takes effect. It leaves no
    descriptor free for the dataset's files: with a few free, whether an open fails depended on
    how many reads the reader had in flight at once, and a reader that started them one at a
    time (as on a machine where each read ends before the next starts) never failed one."""
    count = 600
    (tmp_path / "t" / "a").mkdir(parents=True)
    data = jpeg_bytes(24, 18, seed=0)
    for i in range(count):
        (tmp_path / "t" / "a" / f"g{i:03d}.jpg").write_bytes(data)
    root = tmp_path / "t"
    script = textwrap.dedent(f"""
        import os, resource, sys
        import ringloader as rl
        from ringloader import transforms as T
        ds = rl.ImageFolder({str(root)!r}, transform=T.Compose([T.Resize((8, 8)), T.ToTensor()]))
        loader = rl.DataLoader(ds, batch_size=5, num_workers=2, io_depth=64, on_error="skip", timeout=60,
                               max_skipped_fraction=1)
        it = iter(loader)
        fds = "/proc/self/fd"
        used = 0
        for fd in os.listdir(fds):
            try:
                used += not os.readlink(os.path.join(fds, fd)).startswith({str(root)!r})
            except OSError:  # the listing's own descriptor, closed by now
                pass
        resource.setrlimit(resource.RLIMIT_NOFILE, (used, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        rows = sum(len(y) for _, y in it)
        s = loader.stats()
        print(rows, s["skipped"], s["errors"])
        assert rows + s["skipped"] == {count} and s["skipped"] > 0, (rows, s["skipped"])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def stalled_shard(tmp_path: Path) -> tuple[Path, Path]:
    """A pipe: shard whose command streams the shard once (the index) and then hangs."""
    import tarfile

    shard = tmp_path / "s.tar"
    with tarfile.open(shard, "w") as tar:
        for i in range(6):
            src = tmp_path / f"{i:03d}.jpg"
            src.write_bytes(jpeg_bytes(20, 16, seed=i))
            tar.add(src, arcname=f"{i:03d}.jpg")
            (tmp_path / f"{i:03d}.cls").write_text("0")
            tar.add(tmp_path / f"{i:03d}.cls", arcname=f"{i:03d}.cls")
    flag = tmp_path / "hang"
    script = tmp_path / "stream.sh"
    script.write_text(f'if [ -e "{flag}" ]; then exec sleep 60; fi\nexec cat "{shard}"\n')
    return script, flag


def test_stall_is_reported_with_the_stage_that_holds_it(tmp_path: Path):
    script, flag = stalled_shard(tmp_path)
    ds = rl.WebDataset(f"pipe:sh {script}", transform=TINY, index_cache=str(tmp_path / "cache"))
    flag.write_text("")
    loader = rl.DataLoader(ds, batch_size=3, num_workers=1, timeout=1.5, stall_seconds=0.5)
    with pytest.raises(rl.LoaderTimeoutError) as caught:
        next(iter(loader))
    message = str(caught.value)
    assert "waiting for batch 0" in message
    assert "1 streaming a pipe: command" in message, message
    described = loader.describe()
    assert "stalled:" in described and "streaming a pipe: command" in described, described
    assert loader.stats()["stalled"]


def test_stall_seconds_is_checked(tmp_path: Path):
    root = make_tree(tmp_path / "t")
    ds = rl.ImageFolder(root, transform=TINY)
    for bad in (0, -1, "1", True):
        with pytest.raises(ValueError, match="stall_seconds"):
            rl.DataLoader(ds, batch_size=4, stall_seconds=bad)
