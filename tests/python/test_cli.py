"""The ``ringloader`` command: its subcommands and their --help, the aliases kept from before,
and the main job's report (``ringloader compare``): the table, one verdict line per transform,
the path of the full JSON record; the loaders' stats only with --verbose."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ringloader as rl
from ringloader import _cli
from ringloader.bench import default_json_path, judge

NATIVE = Path(rl.__file__).parent / "bin" / "ringloader-bench"
needs_native = pytest.mark.skipif(not NATIVE.exists(), reason="built without the native benchmark")
# A tiny comparison: one round, one warm-up batch, batches of 4 of the 24-image tree.
TINY = ["--batch-size", "4", "--rounds", "1", "--warmup-batches", "1", "--num-workers", "2", "--quiet"]
VERDICT = r"(?:decode-bound|I/O-bound|consumer-bound|error-bound): .+"


def script(name: str) -> str:
    """The console script ``name`` of the environment running the tests."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    assert found, f"console script {name} is not installed (pip install the package)"
    return found


def run(args: list, tmp_path: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, RINGLOADER_CACHE=str(tmp_path / "cache"))
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)


def test_ringloader_help_lists_each_subcommand_on_one_line(tmp_path):
    done = run([script("ringloader"), "--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    for command in ("compare", "bench", "tune", "pack"):
        assert len(re.findall(rf"^  {command} +\S.*$", done.stdout, re.M)) == 1, done.stdout
    for alias, target in (("ringloader-compare", "ringloader compare"),
                          ("ringloader-bench", "ringloader bench"),
                          ("ringloader-pack", "ringloader pack")):
        assert re.search(rf"^  {alias} += {target}\b", done.stdout, re.M), done.stdout
    # python -m ringloader is the same command.
    same = run([sys.executable, "-m", "ringloader", "--help"], tmp_path)
    assert same.returncode == 0 and same.stdout == done.stdout
    version = run([sys.executable, "-m", "ringloader", "--version"], tmp_path)
    assert version.stdout.strip() == f"ringloader {rl.__version__}"


def test_a_missing_or_unknown_command_is_named(tmp_path):
    none = run([script("ringloader")], tmp_path)
    assert none.returncode == 2 and "name a command (compare, bench, tune, pack, doctor)" in none.stderr
    bad = run([script("ringloader"), "benchmark"], tmp_path)
    assert bad.returncode == 2
    assert "unknown command 'benchmark': choose from compare, bench, tune, pack, doctor" in bad.stderr


def test_each_subcommand_has_help(tmp_path):
    compare = run([script("ringloader"), "compare", "--help"], tmp_path)
    assert compare.returncode == 0 and compare.stdout.startswith("usage: ringloader compare ")
    assert "--verbose" in compare.stdout and "--json PATH" in compare.stdout
    pack = run([script("ringloader"), "pack", "--help"], tmp_path)
    assert pack.returncode == 0 and "src" in pack.stdout and "--shard-size" in pack.stdout
    assert run([script("ringloader"), "help", "pack"], tmp_path).stdout == pack.stdout


@needs_native
def test_bench_and_tune_pass_their_arguments_to_the_native_binary(tmp_path):
    for args in (["bench", "--help"], ["bench", "-h"], ["tune", "--help"]):
        done = run([script("ringloader"), *args], tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"ringloader {args[0]}: runs the native benchmark {NATIVE}")
        assert "--preset" in done.stdout and "--tune_seconds" in done.stdout
    version = run([script("ringloader"), "bench", "--version"], tmp_path)
    assert version.stdout.strip() == f"ringloader-bench {rl.__version__}"
    bad = run([script("ringloader"), "bench", "--no_such_flag"], tmp_path)
    assert bad.returncode != 0 and "no_such_flag" in bad.stderr


@needs_native
@pytest.mark.timeout(60)
def test_tune_runs_the_native_trials(image_tree, tmp_path):
    done = run([script("ringloader"), "tune", f"--data={image_tree}", "--batch_size=4",
                "--tune_seconds=1", "--progress=false"], tmp_path, timeout=50)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ringloader-bench --tune: train on "), done.stdout
    assert re.search(r"^  paste +ringloader\.DataLoader\(dataset, batch_size=4, ", done.stdout, re.M)


def test_the_old_console_scripts_still_work(tmp_path):
    compare = run([script("ringloader-compare"), "--help"], tmp_path)
    assert compare.returncode == 0 and compare.stdout.startswith("usage: ringloader-compare ")
    module = run([sys.executable, "-m", "ringloader.bench", "--help"], tmp_path)
    assert module.returncode == 0 and "--verbose" in module.stdout
    pack = run([script("ringloader-pack"), "--help"], tmp_path)
    assert pack.returncode == 0 and pack.stdout.startswith("usage: ringloader-pack ")
    assert "--shard-size" in pack.stdout
    sub = run([script("ringloader"), "pack", "--help"], tmp_path)
    assert sub.returncode == 0 and sub.stdout.startswith("usage: ringloader pack ")
    if NATIVE.exists():
        bench = run([script("ringloader-bench"), "--version"], tmp_path)
        assert bench.returncode == 0 and bench.stdout.strip() == f"ringloader-bench {rl.__version__}"


def test_every_command_is_documented_in_the_cli_page():
    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    for command in _cli.COMMANDS:
        assert f"## ringloader {command}" in page
    for alias, _ in _cli.ALIASES:
        assert alias in page


@pytest.mark.timeout(120)
def test_compare_prints_the_table_a_verdict_per_transform_and_the_record_path(image_tree, tmp_path):
    done = run([script("ringloader"), "compare", "--root", str(image_tree), *TINY], tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for kind in ("train", "eval"):
        assert re.search(rf"^{kind} +torch +[0-9.]+ .* 1\.00x$", out, re.M), out
        assert re.search(rf"^{kind} +ringloader +[0-9.]+ .* [0-9.]+x$", out, re.M), out
    # One verdict line per transform, after the table; no stats without --verbose.
    verdicts = re.findall(rf"^(train|eval) +{VERDICT}$", out, re.M)
    assert verdicts == ["train", "eval"], out
    assert "stats (" not in out and '"decode_seconds"' not in out
    # The record's path is the last line, under the cache folder by default.
    last = out.strip().splitlines()[-1]
    match = re.fullmatch(r"full record \(JSON: .*\): (.+)", last)
    assert match, out
    path = Path(match.group(1))
    assert path.parent == tmp_path / "cache" / "results" and path.name.startswith("compare-")
    record = json.loads(path.read_text())
    results = {(r["transform"], r["loader"]): r for r in record["results"]}
    for kind in ("train", "eval"):
        ours = results[(kind, "ringloader")]
        assert ours["stats"]["native"] is True and ours["stats"]["decode_seconds"] > 0
        verdict = record["verdicts"][kind]
        assert verdict == ours["verdict"]
        assert verdict["bottleneck"] in ("io", "decode", "consumer")
        assert verdict["batches"] == record["config"]["timed_batches"]
        # The printed line is the record's verdict.
        assert re.search(rf"^{kind} +{re.escape(verdict['label'] + ': ' + verdict['evidence'])}$", out, re.M)
        assert results[(kind, "torch")]["median_images_per_s"] > 0


@pytest.mark.timeout(120)
def test_compare_verbose_prints_the_stats_and_json_names_the_file(image_tree, tmp_path):
    record = tmp_path / "out" / "record.json"
    done = run([script("ringloader"), "compare", "--root", str(image_tree), "--transform", "eval",
                "--verbose", "--json", str(record), *TINY], tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.findall(rf"^(eval) +{VERDICT}$", out, re.M) == ["eval"], out
    block = out.split("ringloader stats (eval, last round):\n", 1)[1].split("\n}\n", 1)[0] + "\n}"
    stats = json.loads(block)
    assert stats["native"] is True and stats["samples"] > 0
    assert out.strip().splitlines()[-1].endswith(f": {record}")
    assert json.loads(record.read_text())["results"][1]["stats"]["samples"] == stats["samples"]
    assert not (tmp_path / "cache" / "results").exists()  # --json replaces the default


def snapshot(read=0.0, decode=0.0, wait=0.0, errors=0, batches=0, **extra) -> dict:
    return {"read_seconds": read, "decode_seconds": decode, "wait_seconds": wait, "errors": errors,
            "batches_completed": batches, "decode_threads": 2, "reader_threads": 1,
            "epochs_queued": 0, "last_error": "", **extra}


def test_judge_follows_the_native_benchmarks_rules():
    """The verdict's rules (bench/README.md, "Verdict") on the counters' change over the window."""
    before = snapshot(read=5.0, decode=50.0, wait=9.0, errors=1, batches=100)
    # The consumer waited 5% of 2 s: the loader kept ahead.
    v = judge(before, snapshot(read=5.2, decode=53.0, wait=9.1, errors=1, batches=110), 2.0)
    assert v["bottleneck"] == "consumer" and v["label"] == "consumer-bound"
    assert v["evidence"].startswith("the consumer waited for batches only 5.0% of the run")
    assert "decode threads busy 75% (2 threads), reader threads busy 10% (1 thread)" in v["evidence"]
    # It waited half the window and the decode threads were the busier: decode-bound.
    v = judge(before, snapshot(read=5.4, decode=53.8, wait=10.0, errors=1, batches=110), 2.0)
    assert (v["bottleneck"], v["consumer_wait_fraction"], v["decode_busy"]) == ("decode", 0.5, pytest.approx(0.95))
    assert "no stage is saturated" not in v["evidence"]
    # The reader thread the busier: I/O-bound.
    v = judge(before, snapshot(read=6.8, decode=51.0, wait=10.0, errors=1, batches=110), 2.0)
    assert v["bottleneck"] == "io" and v["label"] == "I/O-bound" and v["batches"] == 10
    # Neither stage above half busy: starved, and said so.
    v = judge(before, snapshot(read=5.2, decode=51.0, wait=10.5, errors=1, batches=110), 2.0)
    assert v["bottleneck"] == "decode" and "no stage is saturated" in v["evidence"]
    # As many failed batches as delivered ones: error-bound, naming the last error.
    v = judge(before, snapshot(read=6, decode=52, wait=10, errors=6, batches=105,
                               last_error="a/1.jpg: not an image"), 2.0)
    assert v["bottleneck"] == "errors" and "5 of 10 batches failed (last: a/1.jpg: not an image)" in v["evidence"]


def test_default_records_do_not_overwrite_each_other(tmp_path, monkeypatch):
    monkeypatch.setenv("RINGLOADER_CACHE", str(tmp_path))
    first = default_json_path(now=0)
    assert first.parent == tmp_path / "results" and first.suffix == ".json"
    first.parent.mkdir(parents=True)
    first.write_text("{}")
    second = default_json_path(now=0)
    assert second != first and second.name == first.stem + "-2.json"
