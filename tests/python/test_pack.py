"""ringloader.pack: ImageFolder / file list -> WebDataset shards, readable by the webdataset
package, GNU tar and ringloader.WebDataset."""

from __future__ import annotations

import io
import json
import re
import stat
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

import ringloader as rl
from ringloader.pack import main, pack, parse_size

from imagegen import jpeg_bytes


def test_parse_size():
    assert parse_size("1GB") == 10**9
    assert parse_size("500MB") == 500 * 10**6
    assert parse_size("1.5KB") == 1500
    assert parse_size("64MiB") == 64 * 2**20
    assert parse_size("12345") == 12345
    for bad in ("", "1XB", "-3MB", "0"):
        with pytest.raises(ValueError, match="shard-size"):
            parse_size(bad)


def test_pack_round_trip_and_shard_size(image_tree, tmp_path):
    out = tmp_path / "out"
    total = sum(os.path.getsize(p) for p, _ in rl.ImageFolder(str(image_tree)).samples)
    summary = pack(str(image_tree), str(out), shard_size=total // 3,
                   progress_stream=io.StringIO())
    shards = sorted(out.glob("shard-*.tar"))
    assert summary["samples"] == 24 and summary["shards"] == len(shards) >= 3
    assert summary["bytes"] == sum(s.stat().st_size for s in shards)
    assert all(s.stat().st_size <= total // 3 for s in shards)
    assert json.loads((out / "classes.json").read_text()) == sorted(
        p.name for p in image_tree.iterdir())
    folder = rl.ImageFolder(str(image_tree))
    ds = rl.WebDataset(str(out / "shard-*.tar"), index_cache=None)
    assert ds.targets == folder.targets and ds.classes == folder.classes
    for i, (path, _) in enumerate(folder.samples):
        with open(ds.samples[i][0], "rb") as f:
            f.seek(int(ds.offsets[i]))
            assert f.read(int(ds.lengths[i])) == Path(path).read_bytes()
    # GNU tar lists the members; the webdataset package reads the same samples.
    listing = subprocess.run(["tar", "tf", str(shards[0])], check=True, capture_output=True,
                             text=True).stdout.split()
    assert listing[:2] == ["000000.jpg", "000000.cls"]
    tariterators = pytest.importorskip("webdataset.tariterators")
    read = []
    for shard in shards:  # the webdataset package's own tar reader and grouping
        with open(shard, "rb") as f:
            members = (dict(m, __url__=str(shard)) for m in tariterators.tar_file_iterator(f))
            read += list(tariterators.group_by_keys(members))
    assert [int(r["cls"]) for r in read] == folder.targets
    assert read[5]["jpg"] == Path(folder.samples[5][0]).read_bytes()
    # Sidecar index: byte size and one row per sample.
    side = json.loads(Path(str(shards[0]) + ".idx.json").read_text())
    assert side["bytes"] == shards[0].stat().st_size
    assert [r[0] for r in side["samples"]] == [n[:-4] for n in listing[::2]]


def test_pack_file_list_and_max_side(tmp_path):
    from PIL import Image

    src = tmp_path / "imgs"
    src.mkdir()
    (src / "big.jpg").write_bytes(jpeg_bytes(300, 200, seed=1))
    (src / "small.jpg").write_bytes(jpeg_bytes(90, 120, seed=2))
    Image.new("RGB", (40, 30), (10, 200, 30)).save(src / "other.bmp")
    lst = tmp_path / "list.txt"
    lst.write_text("imgs/big.jpg 2\n# comment\n\nimgs/small.jpg 0\nimgs/other.bmp 1\n")
    summary = pack(str(lst), str(tmp_path / "out"), max_side=100, quality=80,
                   progress_stream=io.StringIO())
    assert summary["samples"] == 3 and summary["reencoded"] == 2
    ds = rl.WebDataset(str(tmp_path / "out" / "shard-000000.tar"), index_cache=None)
    assert ds.targets == [2, 0, 1]
    assert ds.members == ["000000.jpg", "000001.jpg", "000002.png"]
    with tarfile.open(tmp_path / "out" / "shard-000000.tar") as tar:
        big = Image.open(io.BytesIO(tar.extractfile("000000.jpg").read()))
        assert big.size == (150, 100)  # shorter side 100, aspect kept
        small = tar.extractfile("000001.jpg").read()
        assert small == (src / "small.jpg").read_bytes()  # not over max-side: bytes kept
        other = Image.open(io.BytesIO(tar.extractfile("000002.png").read()))
        assert np.array_equal(np.asarray(other), np.asarray(Image.open(src / "other.bmp")))


def test_pack_cli_summary_and_errors(image_tree, tmp_path, capsys):
    assert main([str(image_tree), str(tmp_path / "o"), "--shard-size", "100KB"]) == 0
    captured = capsys.readouterr()
    assert "packed 24 samples into" in captured.out and "shards" in captured.out
    assert "pack: 24/24 samples" in captured.err  # plain progress lines off a TTY
    assert main([str(image_tree), str(tmp_path / "o")]) == 2  # holds a finished pack
    assert "holds a finished pack" in capsys.readouterr().err
    assert main([str(tmp_path / "missing"), str(tmp_path / "o2")]) == 2
    assert "neither an ImageFolder root nor a file list" in capsys.readouterr().err
    bad = tmp_path / "bad.txt"
    bad.write_text("a.jpg x\n")
    assert main([str(bad), str(tmp_path / "o3")]) == 2
    assert "bad.txt:1" in capsys.readouterr().err


def test_pack_module_entry_point(image_tree, tmp_path):
    env = dict(os.environ)
    run = subprocess.run([sys.executable, "-m", "ringloader.pack", str(image_tree),
                          str(tmp_path / "m"), "--shard-size", "1GB"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "packed 24 samples into 1 shards" in run.stdout


def test_pack_progress_bar_on_a_terminal(image_tree, tmp_path):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    pack(str(image_tree), str(tmp_path / "t"), progress_stream=stream)
    text = stream.getvalue()
    assert text.count("\r") == 24 and "[##############################] 24/24 samples" in text
    assert text.endswith("\n")


@pytest.mark.timeout(240)
def test_shards_benchmark_reports_both_rates_and_cleans_up(image_tree, tmp_path):
    """``python -m ringloader.bench --dataset shards``: the report's shape (not its timings), and
    the shards it packed into a temporary folder are removed afterwards."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    ratecat = Path(__file__).resolve().parents[2] / "bench" / "ratelimit_cat.py"
    env = dict(os.environ, TMPDIR=str(scratch))
    done = subprocess.run(
        [sys.executable, "-m", "ringloader.bench", "--dataset", "shards", "--root", str(image_tree),
         "--batch-size", "4", "--rounds", "1", "--warmup-batches", "1", "--num-workers", "2",
         "--pipe-rate", "20", "--ratecat", str(ratecat), "--quiet"],
        capture_output=True, text=True, env=env, timeout=200)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(r"ringloader shards benchmark: 24 images, 1 shards", out), out
    assert re.search(r"ImageFolder : +\d+ img/s", out), out
    assert re.search(r"WebDataset  : +\d+ img/s \([0-9.]+x\)", out), out
    assert re.search(r"pipe: at 20 MB/s per stream: [0-9.]+ MB/s reached, \d+ img/s .*0 stream restarts",
                     out), out
    assert not list(scratch.glob("ringloader-shards-*"))  # (torch may leave its own caches)


# ---- what is packed, and how outputs are written ----------------------------------------------

def _small_tree(root: Path) -> Path:
    for c, name in enumerate(("cat", "dog")):
        (root / name).mkdir(parents=True)
        for i in range(2):
            (root / name / f"{i}.jpg").write_bytes(jpeg_bytes(40, 30, seed=10 * c + i))
    return root


def _members(out: Path) -> list:
    names = []
    for s in sorted(out.glob("shard-*.tar")):
        with tarfile.open(s) as tar:
            names += tar.getnames()
    return names


def _packed_bytes(out: Path) -> list:
    found = []
    for s in sorted(out.glob("shard-*.tar")):
        with tarfile.open(s) as tar:
            found += [tar.extractfile(m).read() for m in tar.getmembers()
                      if not m.name.endswith(".cls")]
    return found


def test_pack_skips_symlinks_out_of_the_tree_unless_asked(tmp_path, capsys):
    src = _small_tree(tmp_path / "src")
    secret = tmp_path / "secret.txt"
    secret.write_bytes(jpeg_bytes(40, 30, seed=99))  # an image, even: it is not in SRC
    secret.chmod(0o600)
    (src / "cat" / "leak.jpg").symlink_to(secret)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.jpg").write_bytes(jpeg_bytes(40, 30, seed=98))
    (src / "zebra").symlink_to(outside, target_is_directory=True)  # a symlinked class folder
    (src / "dog" / "same.jpg").symlink_to(src / "dog" / "0.jpg")  # a link inside SRC: packed

    assert main([str(src), str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert f"skipped {src}/cat/leak.jpg: a symlink out of the source tree (to {secret})" in out
    assert f"skipped {src}/zebra/x.jpg: a symlink out of the source tree (to {outside}/x.jpg)" in out
    assert "packed 5 samples into 1 shards" in out and "2 skipped" in out
    assert secret.read_bytes() not in _packed_bytes(tmp_path / "o")
    index = json.loads((tmp_path / "o" / "index.json").read_text())
    assert [p for p, _ in index["skipped"]] == [f"{src}/cat/leak.jpg", f"{src}/zebra/x.jpg"]
    assert json.loads((tmp_path / "o" / "classes.json").read_text()) == ["cat", "dog", "zebra"]

    assert main([str(src), str(tmp_path / "f"), "--follow-symlinks"]) == 0
    assert "packed 7 samples" in capsys.readouterr().out
    packed = _packed_bytes(tmp_path / "f")
    assert secret.read_bytes() in packed and (outside / "x.jpg").read_bytes() in packed
    ds = rl.WebDataset(str(tmp_path / "f" / "shard-*.tar"), index_cache=None)
    assert ds.targets == [0, 0, 0, 1, 1, 1, 2]


def test_pack_file_list_symlinks_and_special_files(tmp_path):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.jpg").write_bytes(jpeg_bytes(40, 30, seed=1))
    other = tmp_path / "other"
    other.mkdir()
    (other / "b.jpg").write_bytes(jpeg_bytes(40, 30, seed=2))
    (other / "link.jpg").symlink_to(tmp_path / "imgs" / "a.jpg")
    (tmp_path / "imgs" / "out.jpg").symlink_to(other / "b.jpg")
    os.mkfifo(tmp_path / "imgs" / "fifo.jpg")  # would block a plain open() forever
    lst = tmp_path / "imgs" / "list.txt"
    lst.write_text(f"a.jpg 0\nout.jpg 1\nfifo.jpg 1\n{other}/b.jpg 1\n../other/link.jpg 0\n")
    summary = pack(str(lst), str(tmp_path / "o"), progress_stream=io.StringIO())
    # Entries named outside the list's folder are packed when they are no symlink themselves.
    assert summary["samples"] == 2
    why = {os.path.basename(p): w for p, w in summary["skipped"]}
    assert why["out.jpg"].startswith("a symlink out of the source tree")
    assert why["fifo.jpg"] == "not a regular file"
    assert why["link.jpg"].startswith(f"a symlink (to {tmp_path}/imgs/a.jpg)")


def test_pack_skips_bytes_that_are_not_images(tmp_path, capsys):
    src = _small_tree(tmp_path / "src")
    (src / "cat" / "notes.jpg").write_text("not a picture\n")
    (src / "dog" / "empty.jpg").write_bytes(b"")
    from PIL import Image

    Image.new("RGB", (8, 8), (1, 2, 3)).save(src / "dog" / "gif.png", "GIF")  # a GIF named .png
    assert main([str(src), str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert f"skipped {src}/cat/notes.jpg: not an image (cannot identify image file" in out
    assert f"skipped {src}/dog/empty.jpg: not an image" in out
    assert "packed 5 samples" in out and "(1 re-encoded, 2 skipped)" in out
    assert "000004.png" in _members(tmp_path / "o")  # the GIF, stored as a real PNG
    with tarfile.open(tmp_path / "o" / "shard-000000.tar") as tar:
        assert Image.open(io.BytesIO(tar.extractfile("000004.png").read())).format == "PNG"
    nothing = tmp_path / "bad"
    (nothing / "c").mkdir(parents=True)
    (nothing / "c" / "x.jpg").write_text("text")
    assert main([str(nothing), str(tmp_path / "o2")]) == 2
    assert "no image of" in capsys.readouterr().err


def test_pack_never_writes_through_planted_symlinks(tmp_path, monkeypatch):
    src = _small_tree(tmp_path / "src")
    out = tmp_path / "out"
    out.mkdir()
    victims = {}
    for name in ("index.json", "classes.json", "shard-000000.tar.idx.json"):
        victim = tmp_path / f"victim-{name}"
        victim.write_text("keep me")
        victims[name] = victim
        (out / name).symlink_to(victim)
    opened = []
    real_open = os.open

    def spy(path, flags, *args, **kwargs):
        opened.append((os.fspath(path), flags))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    old_umask = os.umask(0o022)
    try:
        # Files named like a pack's are a previous pack to replace: only unlinked, never followed.
        pack(str(src), str(out), progress_stream=io.StringIO(), overwrite=True)
    finally:
        os.umask(old_umask)
        monkeypatch.undo()
    for name, victim in victims.items():
        assert victim.read_text() == "keep me", name
        assert not (out / name).is_symlink() and (out / name).is_file()
    for name in ("index.json", "classes.json", "shard-000000.tar", "shard-000000.tar.idx.json"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o644, name
    written = [(p, f) for p, f in opened if str(out) in p and "pack-progress" not in p]
    assert len(written) == 4 and all(os.path.basename(p).endswith(".tmp") for p, _ in written)
    need = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    assert all(f & need == need for _, f in written)
    assert not list(out.glob(".*.tmp"))
    # A planted shard name is refused (a previous pack), its target untouched.
    again = tmp_path / "again"
    again.mkdir()
    victim = tmp_path / "victim.tar"
    victim.write_text("keep me")
    (again / "shard-000000.tar").symlink_to(victim)
    with pytest.raises(ValueError, match="holds an unfinished pack"):
        pack(str(src), str(again), progress_stream=io.StringIO())
    assert victim.read_text() == "keep me"


def test_pack_skips_unreadable_and_truncated_files_or_stops_with_strict(tmp_path, capsys):
    from PIL import Image

    src = _small_tree(tmp_path / "src")
    (src / "cat" / "loop.jpg").symlink_to(src / "cat" / "loop.jpg")  # ELOOP on open
    whole = jpeg_bytes(64, 48, seed=7)
    (src / "cat" / "cut.jpg").write_bytes(whole[:len(whole) // 2])  # header fine, body cut
    (src / "cat" / "tail.jpg").write_bytes(whole + b"trailing junk")  # after EOI: kept
    png = io.BytesIO()
    Image.new("RGB", (16, 16), (9, 9, 9)).save(png, "PNG")
    png = png.getvalue()
    (src / "dog" / "noend.png").write_bytes(png[:-12])  # IEND chunk missing
    bad_crc = bytearray(png)
    bad_crc[-20] ^= 0xFF  # a byte of the last IDAT chunk's data
    (src / "dog" / "crc.png").write_bytes(bytes(bad_crc))
    (src / "dog" / "ok.png").write_bytes(png)
    webp = io.BytesIO()
    Image.new("RGB", (16, 16), (9, 9, 9)).save(webp, "WEBP")
    (src / "dog" / "short.webp").write_bytes(webp.getvalue()[:-10])
    secret = src / "dog" / "locked.jpg"
    secret.write_bytes(whole)
    secret.chmod(0)
    unreadable = os.geteuid() != 0  # root reads it anyway

    assert main([str(src), str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert f"skipped {src}/cat/loop.jpg: unreadable (Too many levels of symbolic links)" in out
    assert f"skipped {src}/cat/cut.jpg: truncated JPEG: no end-of-image marker" in out
    assert f"skipped {src}/dog/noend.png: truncated PNG: no IEND chunk" in out
    assert f"skipped {src}/dog/crc.png: corrupt PNG: bad CRC in the IDAT chunk" in out
    assert f"skipped {src}/dog/short.webp: truncated WebP:" in out
    assert (f"skipped {src}/dog/locked.jpg: unreadable (Permission denied)" in out) == unreadable
    skipped = 5 + unreadable
    assert f"packed {12 - skipped} samples" in out and f"{skipped} skipped" in out
    packed = _packed_bytes(tmp_path / "o")
    assert whole + b"trailing junk" in packed and png in packed
    index = json.loads((tmp_path / "o" / "index.json").read_text())
    assert len(index["skipped"]) == skipped

    # --strict: the first bad file stops the pack, named; nothing is left that looks finished.
    assert main([str(src), str(tmp_path / "s"), "--strict"]) == 2
    err = capsys.readouterr().err
    assert f"pack: {src}/cat/cut.jpg: truncated JPEG: no end-of-image marker (--strict" in err
    assert not (tmp_path / "s" / "index.json").exists()
    assert not list((tmp_path / "s").glob(".*.tmp"))


def test_jpeg_truncation_check_matches_the_native_decoder(tmp_path):
    """The pack's cheap verdict on a cut JPEG is the one ringloader's decoder gives."""
    whole = jpeg_bytes(64, 48, seed=3)
    lst = tmp_path / "l.txt"
    cuts = [len(whole) - 2, len(whole) // 2, 200]
    for n in cuts:
        (tmp_path / f"c{n}.jpg").write_bytes(whole[:n])
    lst.write_text("".join(f"c{n}.jpg 0\n" for n in cuts))
    ds = rl.FileList(str(lst))
    for i, n in enumerate(cuts):
        with pytest.raises(Exception, match="truncated JPEG"):
            ds[i]
    (tmp_path / "w.jpg").write_bytes(whole)
    lst.write_text(lst.read_text() + "w.jpg 0\n")
    summary = pack(str(lst), str(tmp_path / "o"), progress_stream=io.StringIO())
    assert summary["samples"] == 1
    assert all(why.startswith("truncated JPEG") for _, why in summary["skipped"])


def _shard_state(out: Path) -> dict:
    """Shards byte for byte; sidecars as JSON without the shard's mtime (a shard written by
    another run has another one)."""
    state = {}
    for p in sorted(out.glob("shard-*")):
        if p.name.endswith(".idx.json"):
            state[p.name] = {k: v for k, v in json.loads(p.read_text()).items() if k != "mtime_ns"}
        else:
            state[p.name] = p.read_bytes()
    return state


def test_pack_rerun_refuses_then_resumes_or_overwrites(image_tree, tmp_path, capsys, monkeypatch):
    from ringloader import pack as pack_module

    total = sum(os.path.getsize(p) for p, _ in rl.ImageFolder(str(image_tree)).samples)
    size = total // 4
    ref = tmp_path / "ref"
    pack(str(image_tree), str(ref), shard_size=size, progress_stream=io.StringIO())
    want = _shard_state(ref)
    assert len([n for n in want if n.endswith(".tar")]) >= 4

    # Interrupt after the third source file of the second shard.
    out = tmp_path / "out"
    real = pack_module._read_source
    calls = []

    def dies(path, *args):
        calls.append(path)
        if len(calls) == 14:
            raise KeyboardInterrupt
        return real(path, *args)

    monkeypatch.setattr(pack_module, "_read_source", dies)
    with pytest.raises(KeyboardInterrupt):
        pack(str(image_tree), str(out), shard_size=size, progress_stream=io.StringIO())
    monkeypatch.undo()
    done = sorted(p.name for p in out.glob("shard-*.tar"))
    assert done and not (out / "index.json").exists() and not list(out.glob(".*.tmp"))
    progress = json.loads((out / ".pack-progress.json").read_text())
    assert [s["name"] for s in progress["shard_index"]] == done
    # Every shard in place is whole (a reader may use it) and equal to the finished pack's.
    assert all(want[n] == (out / n).read_bytes() for n in done)

    assert main([str(image_tree), str(out), "--shard-size", str(size)]) == 2
    assert f"holds an unfinished pack ({len(done)} shards, no index.json" in \
        capsys.readouterr().err
    assert main([str(image_tree), str(out), "--shard-size", str(size + 1), "--resume"]) == 2
    assert "made with other shard_size" in capsys.readouterr().err
    # A damaged kept shard is redone: resume keeps the intact ones before it only.
    (out / done[-1]).write_bytes((out / done[-1]).read_bytes()[:-512])
    read = []
    monkeypatch.setattr(pack_module, "_read_source", lambda p, *a: (read.append(p), real(p, *a))[1])
    assert main([str(image_tree), str(out), "--shard-size", str(size), "--resume"]) == 0
    monkeypatch.undo()
    kept = len(done) - 1
    assert f"{kept} shards kept from before" in capsys.readouterr().out
    assert _shard_state(out) == want
    assert len(read) == 24 - progress["shard_index"][kept - 1]["end"]  # kept shards not re-read
    index = json.loads((out / "index.json").read_text())
    assert index["samples"] == 24 and index["kept"] == kept
    assert not (out / ".pack-progress.json").exists()
    ds = rl.WebDataset(str(out / "shard-*.tar"), index_cache=None)
    assert ds.targets == rl.ImageFolder(str(image_tree)).targets

    # A finished pack: refused, resumed as a no-op, or overwritten (stale extra shards go).
    assert main([str(image_tree), str(out), "--shard-size", str(size)]) == 2
    assert "holds a finished pack" in capsys.readouterr().err
    assert main([str(image_tree), str(out), "--shard-size", str(size), "--resume"]) == 0
    assert f"packed 24 samples into {index['shards']} shards" in capsys.readouterr().out
    assert _shard_state(out) == want
    assert main([str(image_tree), str(out), "--shard-size", "1GB", "--overwrite"]) == 0
    assert sorted(p.name for p in out.glob("shard-*")) == ["shard-000000.tar",
                                                            "shard-000000.tar.idx.json"]
    with pytest.raises(SystemExit):
        main([str(image_tree), str(out), "--resume", "--overwrite"])
