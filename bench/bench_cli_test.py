#!/usr/bin/env python3
"""CTest for the ringloader-bench CLI: flags, the --json schema, errors and exit codes.

Usage: bench_cli_test.py PATH/TO/ringloader-bench

Runs against a small synthetic set that the CLI generates itself into a temporary
$RINGLOADER_CACHE, so it neither needs nor touches the real cache.
"""
import json
import os
import re
import time
import subprocess
import sys
import tempfile
import unittest

BENCH = None


def run(*args, env=None):
    return subprocess.run([BENCH, *args], capture_output=True, text=True, env=env, timeout=240)


class BenchCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="ringloader_bench_test_")
        cls.env = dict(os.environ, RINGLOADER_CACHE=cls.tmp.name)
        cls.root = os.path.join(cls.tmp.name, "bench-synthetic-v1-n48")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def bench(self, *args):
        return run("--synthetic_images=48", "--batch_size=8", "--decode_threads=2",
                   "--floor_images=10", *args, env=self.env)

    def test_01_generates_once_then_reuses_and_reports(self):
        first = self.bench("--warmup=1")
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertIn("generating 48 synthetic JPEGs", first.stderr)
        self.assertTrue(os.path.exists(os.path.join(self.root, ".ringloader-bench-synthetic")))
        for needle in ("images/s", "MB/s", "stage busy", "batch latency p50", "decode floor",
                       "verdict"):
            self.assertIn(needle, first.stdout)
        second = self.bench("--warmup=1")
        self.assertEqual(second.returncode, 0, second.stderr)
        self.assertNotIn("generating", second.stderr)

    def test_02_json_schema(self):
        path = os.path.join(self.tmp.name, "report.json")
        r = self.bench("--json", path, "--epochs=2", "--warmup=1", "--io=pread", "--seed=7")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(path) as f:
            report = json.load(f)
        self.assertEqual(report["schema"], "ringloader-bench/1")
        self.assertEqual(set(report), {"schema", "dataset", "config", "io", "throughput", "stages",
                                       "batch_latency_ms", "epochs", "verdict", "decode_floor"})
        self.assertEqual(report["dataset"]["images"], 48)
        self.assertEqual(report["dataset"]["classes"], 10)
        self.assertEqual(report["dataset"]["source"], "synthetic")
        c = report["config"]
        self.assertEqual((c["preset"], c["batch_size"], c["decode_threads"], c["io"], c["epochs"],
                          c["seed"]), ("train", 8, 2, "pread", 2, "7"))
        self.assertEqual(report["io"]["backend"], "pread")
        t = report["throughput"]
        # 2 epochs x 6 batches, minus 1 warm-up batch.
        self.assertEqual(t["batches"], 11)
        self.assertEqual(t["images"], 88)
        self.assertGreater(t["images_per_s"], 0)
        self.assertGreater(t["mb_per_s"], 0)
        self.assertAlmostEqual(t["images_per_s"], t["images"] / t["seconds"], delta=1e-3 * t["images_per_s"])
        s = report["stages"]
        for key in ("read_busy_s", "decode_busy_s", "consumer_wait_s", "read_utilization",
                    "decode_utilization", "consumer_wait_fraction"):
            self.assertGreaterEqual(s[key], 0, key)
        lat = report["batch_latency_ms"]
        self.assertEqual(lat["batches"], 11)
        self.assertLessEqual(lat["p50"], lat["p99"])
        self.assertLessEqual(lat["p99"], lat["max"])
        v = report["verdict"]
        self.assertIn(v["bottleneck"], ("io", "decode", "consumer"))
        self.assertIn(v["label"], ("I/O-bound", "decode-bound", "consumer-bound"))
        self.assertIn("%", v["evidence"])
        fl = report["decode_floor"]
        self.assertEqual(fl["images"], 10)
        self.assertGreater(fl["images_per_s"], 0)
        self.assertAlmostEqual(fl["multiple_per_thread"],
                               fl["loader_images_per_s_per_thread"] / fl["images_per_s"], places=3)

    def test_03_slow_consumer_is_named(self):
        path = os.path.join(self.tmp.name, "consumer.json")
        r = self.bench("--json", path, "--consumer_ms=40", "--warmup=1", "--floor_images=0")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(path) as f:
            report = json.load(f)
        self.assertEqual(report["verdict"]["bottleneck"], "consumer")
        self.assertIsNone(report["decode_floor"])
        self.assertGreaterEqual(report["batch_latency_ms"]["interval_p50"], 40)

    def test_04_every_preset_runs(self):
        for preset in ("eval", "decode", "read"):
            path = os.path.join(self.tmp.name, preset + ".json")
            r = self.bench("--preset", preset, "--json", path, "--warmup=0", "--duration=0.3")
            self.assertEqual(r.returncode, 0, preset + ": " + r.stderr)
            with open(path) as f:
                report = json.load(f)
            self.assertEqual(report["config"]["preset"], preset)
            self.assertGreater(report["throughput"]["images"], 0, preset)
            self.assertGreaterEqual(report["throughput"]["seconds"], 0.3, preset)
            if preset == "eval":
                self.assertIsNotNone(report["batch_latency_ms"])
            else:
                self.assertIsNone(report["batch_latency_ms"])
            if preset == "read":
                self.assertEqual(report["verdict"]["bottleneck"], "io")
                self.assertIsNone(report["decode_floor"])

    def test_05_data_flag(self):
        r = self.bench("--warmup=0", "--data", self.root, "--preset=read", "--progress=false")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(self.root, r.stdout)
        self.assertEqual(r.stderr, "")  # no progress lines

    def test_05b_list_flag(self):
        import glob
        import tempfile

        files = sorted(glob.glob(os.path.join(self.root, "*", "*.jpg")))[:40]
        with tempfile.TemporaryDirectory() as d:
            listing = os.path.join(d, "train.txt")
            with open(listing, "w") as f:
                f.write("# path label\n")
                for i, path in enumerate(files):
                    f.write(f"{path} {i % 4}\n")
            r = self.bench("--warmup=0", "--list", listing, "--progress=false", "--floor_images=0",
                           "--batch_size=8")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("40 images", r.stdout)
            bad = self.bench("--list", listing, "--data", self.root)
            self.assertNotEqual(bad.returncode, 0)
            self.assertIn("mutually exclusive", bad.stderr)

    def test_05c_device_flag(self):
        path = os.path.join(self.tmp.name, "simulated.json")
        r = self.bench("--warmup=1", "--device=simulated", "--json", path, "--progress=false")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("simulated:0", r.stdout)
        self.assertIn("not a GPU", r.stdout)
        with open(path) as f:
            report = json.load(f)
        self.assertEqual(report["config"]["device"], "simulated")
        # Batches are copied whole (images, labels and indices of 8 rows); some may have been
        # copied ahead, during the warm-up, so only whole slots and not their count are certain.
        slot_bytes = 8 * 3 * 224 * 224 * 4 + 2 * 8 * 8
        copied = report["stages"]["device_bytes"]
        self.assertGreater(copied, 0)
        self.assertEqual(copied % slot_bytes, 0)
        cpu = os.path.join(self.tmp.name, "cpu.json")
        self.assertEqual(self.bench("--warmup=1", "--json", cpu, "--progress=false").returncode, 0)
        with open(cpu) as f:
            self.assertEqual(json.load(f)["stages"]["device_bytes"], 0)

    def test_05d_bad_data_stops_and_is_named(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "all_bad", "a"))
            for i in range(20):
                with open(os.path.join(d, "all_bad", "a", f"img_{i}.jpg"), "w") as f:
                    f.write("not an image\n")
            for preset in ("eval", "decode"):
                # With --duration this measured 0 images/s until killed: it must stop at once.
                r = self.bench("--data", os.path.join(d, "all_bad"), "--preset", preset,
                               "--duration=600", "--warmup=0", "--progress=false")
                self.assertNotEqual(r.returncode, 0, preset)
                self.assertIn("all failed and none succeeded", r.stderr, preset)
                self.assertIn("INVALID_ARGUMENT", r.stderr, preset)
                self.assertRegex(r.stderr, r"all_bad/a/img_\d+\.jpg", preset)
                self.assertIn("not an image: text data", r.stderr, preset)

            # Mostly bad: the run is measured, and the verdict says errors dominate.
            import glob
            os.makedirs(os.path.join(d, "mostly_bad", "a"))
            good = sorted(glob.glob(os.path.join(self.root, "*", "*.jpg")))[:4]
            for i, path in enumerate(good):
                with open(path, "rb") as src, open(os.path.join(d, "mostly_bad", "a", f"ok_{i}.jpg"), "wb") as dst:
                    dst.write(src.read())
            for i in range(20):
                with open(os.path.join(d, "mostly_bad", "a", f"bad_{i}.jpg"), "w") as f:
                    f.write("not an image\n")
            path = os.path.join(d, "report.json")
            r = self.bench("--data", os.path.join(d, "mostly_bad"), "--batch_size=1", "--epochs=2",
                           "--warmup=0", "--progress=false", "--json", path)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("error-bound", r.stdout)
            with open(path) as f:
                verdict = json.load(f)["verdict"]
            self.assertEqual(verdict["bottleneck"], "errors")
            self.assertIn("40 of 48 batches failed", verdict["evidence"])

    def test_05e_epoch_timeline(self):
        # Output shape only: the waits are timings of a shared machine.
        path = os.path.join(self.tmp.name, "timeline.json")
        r = self.bench("--epochs=3", "--warmup=1", "--timeline", "--json", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("next epoch queued ahead (2 of 2 adopted)", r.stdout)
        for e in range(3):
            self.assertRegex(r.stdout, rf"epoch {e} +6 batches, first batch [0-9.]+ ms, median [0-9.]+ ms, "
                                       r"p95 [0-9.]+ ms, max [0-9.]+ ms")
        self.assertEqual(r.stdout.count("waits ms"), 3)
        with open(path) as f:
            report = json.load(f)
        self.assertEqual((report["config"]["overlap_epochs"], report["config"]["timeline"]), (True, True))
        epochs = report["epochs"]
        self.assertEqual([e["epoch"] for e in epochs], [0, 1, 2])
        for e in epochs:
            self.assertEqual(set(e), {"epoch", "batches", "first_wait_ms", "median_wait_ms", "p95_wait_ms",
                                      "max_wait_ms", "waits_ms"})
            self.assertEqual(e["batches"], 6)  # warm-up included
            self.assertEqual(len(e["waits_ms"]), 6)
            self.assertEqual(e["first_wait_ms"], e["waits_ms"][0])
            self.assertEqual(e["max_wait_ms"], max(e["waits_ms"]))
            self.assertLessEqual(e["median_wait_ms"], e["p95_wait_ms"])

        drained = self.bench("--epochs=2", "--warmup=1", "--overlap_epochs=false", "--json", path)
        self.assertEqual(drained.returncode, 0, drained.stderr)
        self.assertIn("drained between epochs (--overlap_epochs=false)", drained.stdout)
        self.assertNotIn("waits ms", drained.stdout)
        with open(path) as f:
            report = json.load(f)
        self.assertFalse(report["config"]["overlap_epochs"])
        self.assertEqual([set(e) for e in report["epochs"]],
                         [{"epoch", "batches", "first_wait_ms", "median_wait_ms", "p95_wait_ms",
                           "max_wait_ms"}] * 2)
        decode = self.bench("--preset=decode", "--warmup=1", "--json", path)
        self.assertEqual(decode.returncode, 0, decode.stderr)
        with open(path) as f:
            self.assertIsNone(json.load(f)["epochs"])

    def test_05g_tune_prints_trials_choice_and_the_line_to_paste(self):
        r = self.bench("--tune", "--tune_seconds=2", "--warmup=1")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertTrue(lines[0].startswith("ringloader-bench --tune: train on "), lines[0])
        auto = [l for l in lines if l.strip().startswith("auto ")]
        self.assertEqual(len(auto), 1, r.stdout)
        self.assertRegex(auto[0], r"decode \d+, readers \d+: \d+ usable CPUs? \(affinity \d+")
        trials = [l for l in lines if l.strip().startswith("trial ")]
        self.assertTrue(4 <= len(trials) <= 9, r.stdout)  # threads, one more reader, depths
        settings = set()
        for line in trials:
            m = re.search(r"decode +(\d+) +readers (\d+) +prefetch +(\d+) +(\d+) images/s +read +(\d+)% +"
                          r"decode +(\d+)% +consumer wait +\d+% +pipeline idle \d+ x", line)
            self.assertIsNotNone(m, line)
            settings.add(m.groups()[:3])
            # A share of the threads running (both epochs' with the read-ahead): never far over 100%.
            self.assertLessEqual(int(m.group(5)), 105, line)
            self.assertLessEqual(int(m.group(6)), 105, line)
        self.assertIn("  busy          % of the threads running", r.stdout)
        self.assertEqual(len(settings), len(trials), "no trial is repeated")
        self.assertTrue({p for _, _, p in settings} >= {"2", "8", "16"}, settings)
        choice = [l for l in lines if l.strip().startswith("choice ")]
        self.assertEqual(len(choice), 1, r.stdout)
        m = re.search(r"decode (\d+), readers (\d+), prefetch (\d+): \d+ images/s; \S", choice[0])
        self.assertIsNotNone(m, choice[0])
        self.assertIn(m.groups(), settings, "the choice is one of the trials")
        paste = [l for l in lines if l.strip().startswith("paste ")]
        self.assertEqual(len(paste), 1, r.stdout)
        self.assertRegex(paste[0], r"ringloader\.DataLoader\(dataset, batch_size=8, num_workers=(\d+|\"auto\"), "
                                   r"prefetch_factor=\d+(, reader_threads=\d+)?\)$")

    def test_05g2_tune_marks_short_trials_and_says_the_choice_is_unreliable(self):
        # No trial can measure 100000 batches: each is rerun longer once, out of a second
        # --tune_seconds in all, then marked; with every trial short the choice says so.
        start = time.monotonic()
        r = self.bench("--tune", "--tune_seconds=1", "--warmup=1", "--tune_min_batches=100000")
        self.assertEqual(r.returncode, 0, r.stderr)
        trials = [l for l in r.stdout.splitlines() if l.strip().startswith("trial ")]
        self.assertTrue(trials and all(re.search(r"SHORT: \d+ batches in [\d.]+ s$", l) for l in trials),
                        r.stdout)
        self.assertRegex(r.stdout, r"caution +%d of %d trials measured fewer than 100000 batches even run "
                         r"longer .*every trial is short, so the choice is UNRELIABLE; raise --tune_seconds"
                         % (len(trials), len(trials)))
        self.assertRegex(r.stdout, r"choice .*\(UNRELIABLE: short trials\)")
        # Trials are at least 0.5 s each; the reruns add at most --tune_seconds.
        self.assertLess(time.monotonic() - start, 0.5 * len(trials) + 1 + 30)
        r = self.bench("--tune", "--tune_min_batches=0")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--tune_min_batches must be >= 1", r.stderr)

    def test_05h_tune_needs_a_loader_preset(self):
        r = self.bench("--tune", "--preset=decode")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--tune runs the loader", r.stderr)
        r = self.bench("--tune", "--tune_seconds=0")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--tune_seconds must be > 0", r.stderr)

    def test_06_help_explains_every_flag(self):
        r = run("--help")
        self.assertIn(r.returncode, (0, 1))  # Abseil exits 1 after printing --help
        text = r.stdout + r.stderr
        for flag in ("--data", "--list", "--preset", "--batch_size", "--decode_threads", "--reader_threads",
                     "--queue_depth", "--io ", "--io_depth", "--epochs", "--duration", "--warmup",
                     "--shuffle", "--json", "--consumer_ms", "--floor_images", "--device",
                     "--overlap_epochs", "--timeline", "--tune", "--tune_seconds", "--tune_min_batches"):
            self.assertIn(flag, text)
        self.assertIn("uring", text)
        self.assertNotIn("--flagfile", text)  # Abseil's own flags stay out of --help

    def test_07_bad_flags_fail_clearly(self):
        cases = [
            (["--io=fast"], "expected one of uring, pread, auto"),
            (["--preset=bogus"], "expected one of train, eval, trivial, decode, read"),
            (["--batch_size=0"], "--batch_size must be >= 1"),
            (["--batch_size=many"], "batch_size"),
            (["--no_such_flag"], "no_such_flag"),
            (["--epochs=0"], "--epochs must be >= 1"),
            (["stray"], "unexpected argument 'stray'"),
            (["--data=/nonexistent/ringloader"], "/nonexistent/ringloader"),
            (["--warmup=1000"], "warm-up"),
            (["--device=gpu"], "--device must be cpu, cuda, cuda:N or simulated"),
        ]
        for args, message in cases:
            r = self.bench(*args)
            self.assertNotEqual(r.returncode, 0, args)
            self.assertIn(message, r.stderr, args)
            self.assertEqual(r.stdout, "", args)


if __name__ == "__main__":
    BENCH = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
