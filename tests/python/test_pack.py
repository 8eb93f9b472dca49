"""ringloader.pack: ImageFolder / file list -> WebDataset shards, readable by the webdataset
package, GNU tar and ringloader.WebDataset."""

from __future__ import annotations

import io
import json
import re
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
    assert main([str(image_tree), str(tmp_path / "o")]) == 2  # already holds shards
    assert "already holds shards" in capsys.readouterr().err
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
