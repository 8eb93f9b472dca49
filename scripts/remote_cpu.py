"""CPU spent by one epoch of the same WebDataset shards read four ways: local files, `pipe:curl`
streams, `http://` from a warm cache, and `http://` into an empty cache (the download
overlapping the decoding; or, as `half`, into a cache_limit of half the shards' bytes), over
the benchmark's throttled loopback link (ringloader.bench's server, run in a child process so
that its CPU is not the loader's).

    .venv/bin/python scripts/remote_cpu.py --reps 3 [--link-rate 100] [--link-latency-ms 20]

Per epoch: wall seconds; CPU seconds of this process (getrusage RUSAGE_SELF, user + system)
and of its reaped children (RUSAGE_CHILDREN: the curl processes of `pipe:`); voluntary and
involuntary context switches; minor and major page faults; and the CPU seconds of each kind
of thread (by name, from /proc/self/task, sampled every 50 ms: rl-decode, rl-read, ..., and
the unnamed ones under "python", where libcurl's download threads run), how many there were,
and how long they waited runnable for a CPU (/proc/self/task/TID/schedstat). The runs are
interleaved (one of each kind per repetition) so that the machine's load hits them alike."""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import ringloader as rl
from ringloader import bench, pack
from ringloader import transforms as T
from ringloader.sources import webdataset as wdsmod

TICK = os.sysconf("SC_CLK_TCK")


class ThreadCpu:
    """CPU seconds per thread name while running: the last reading of each live thread is
    kept, so a thread that ends between two samples loses at most one interval."""

    def __init__(self, interval: float = 0.05):
        self.interval, self.last, self.stop_flag = interval, {}, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _read(self):
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    text = f.read()
            except OSError:
                continue
            name = text[text.index("(") + 1:text.rindex(")")]
            fields = text[text.rindex(")") + 2:].split()
            try:
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    wait_s = int(f.read().split()[1]) / 1e9  # runnable, waiting for a CPU
            except (OSError, IndexError, ValueError):
                wait_s = 0.0
            self.last[tid] = (name, (int(fields[11]) + int(fields[12])) / TICK, wait_s)

    def _run(self):
        while not self.stop_flag.is_set():
            self._read()
            time.sleep(self.interval)

    def __enter__(self):
        self._read()
        self.base = dict(self.last)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_flag.set()
        self.thread.join()
        self._read()
        self.by_name, self.waited, self.count = {}, {}, {}
        for tid, (name, cpu, wait_s) in self.last.items():
            was = self.base.get(tid, (name, 0.0, 0.0))
            used = cpu - was[1]
            if used > 0:
                self.by_name[name] = self.by_name.get(name, 0.0) + used
                self.count[name] = self.count.get(name, 0) + 1
                self.waited[name] = self.waited.get(name, 0.0) + wait_s - was[2]


def measure(make_ds, workers: int, batch: int) -> dict:
    ds = make_ds()
    loader = rl.DataLoader(ds, batch_size=batch, shuffle=False, num_workers=workers,
                           drop_last=True, persistent_workers=False)
    s0, c0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with ThreadCpu() as threads:
        images = sum(int(y.shape[0]) for _, y in loader)
    wall = time.perf_counter() - t0
    s1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    close = getattr(ds, "close_downloads", None)
    if close is not None:
        close()
    return {
        "images": images, "wall_s": wall,
        "self_cpu_s": (s1.ru_utime - s0.ru_utime) + (s1.ru_stime - s0.ru_stime),
        "self_sys_s": s1.ru_stime - s0.ru_stime,
        "children_cpu_s": (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime),
        "vol_cs": s1.ru_nvcsw - s0.ru_nvcsw, "invol_cs": s1.ru_nivcsw - s0.ru_nivcsw,
        "minflt": s1.ru_minflt - s0.ru_minflt, "majflt": s1.ru_majflt - s0.ru_majflt,
        "threads": {k: round(v, 2) for k, v in sorted(threads.by_name.items())},
        "thread_counts": dict(sorted(threads.count.items())),
        "runqueue_wait_s": {k: round(v, 2) for k, v in sorted(threads.waited.items())},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--shard-size", default="16MB")
    p.add_argument("--link-rate", type=float, default=100.0, help="MB/s")
    p.add_argument("--link-latency-ms", type=float, default=20.0)
    p.add_argument("--kinds", default="local,pipe,cached,empty",
                   help="comma-separated: local, pipe, cached, empty, empty:N (max_connections=N), "
                   "half (an empty cache with a cache_limit of half the shards)")
    p.add_argument("--json", help="write every run here")
    args = p.parse_args()

    root = Path(bench._sample_data().make_sample_dataset())
    transform = bench.make_transform(T, "train")
    with tempfile.TemporaryDirectory(prefix="ringloader-cpu-") as tmp:
        tmp = Path(tmp)
        work = tmp / "shards"
        pack.pack(str(root), str(work), pack.parse_size(args.shard_size))
        names = sorted(p.name for p in work.glob("shard-*.tar"))
        bench._warm_page_cache(work)
        server = subprocess.Popen(
            [sys.executable, "-c",
             "import sys, time; from ringloader.bench import _ThrottledFiles as F; "
             f"f = F(sys.argv[1], {args.link_latency_ms / 1e3}, {args.link_rate * 1e6}); "
             "print(f.url, flush=True); time.sleep(1e9)", str(work)],
            stdout=subprocess.PIPE, text=True)
        try:
            url = server.stdout.readline().strip()
            urls = [f"{url}/{n}" for n in names]
            pipe_index = str(tmp / "pipe-index")
            piped = [f"pipe:curl -s -f {u}" for u in urls]
            for u, n in zip(piped, names):
                wdsmod.cache_index_as(u, str(work / n), pipe_index)
            http_index = str(tmp / "http-index")
            warm = str(tmp / "warm")
            rl.WebDataset(urls, cache_dir=warm, index_cache=http_index).check_shards()
            empties = iter(range(10**6))
            makers = {
                "local": lambda: rl.WebDataset([str(work / n) for n in names], transform=transform,
                                               index_cache=None),
                "pipe": lambda: rl.WebDataset(piped, transform=transform, index_cache=pipe_index),
                "cached": lambda: rl.WebDataset(urls, transform=transform, cache_dir=warm,
                                                index_cache=http_index),
                "empty": lambda: rl.WebDataset(urls, transform=transform,
                                               cache_dir=str(tmp / f"empty{next(empties)}"),
                                               index_cache=http_index),
            }
            total = sum((work / n).stat().st_size for n in names)
            makers["half"] = lambda: rl.WebDataset(urls, transform=transform,
                                                   cache_dir=str(tmp / f"empty{next(empties)}"),
                                                   cache_limit=total // 2, index_cache=http_index)
            kinds = args.kinds.split(",")
            for kind in kinds:
                if kind.startswith("empty:"):  # empty:N: max_connections=N
                    makers[kind] = lambda n=int(kind[6:]): rl.WebDataset(
                        urls, transform=transform, cache_dir=str(tmp / f"empty{next(empties)}"),
                        index_cache=http_index, remote_options={"max_connections": n})
            runs = {k: [] for k in kinds}
            measure(makers["local"], args.num_workers, args.batch_size)  # warm-up, not counted
            for rep in range(args.reps):
                for kind in kinds:
                    r = measure(makers[kind], args.num_workers, args.batch_size)
                    runs[kind].append(r)
                    print(f"rep {rep} {kind:7s} wall {r['wall_s']:.2f} s  cpu {r['self_cpu_s']:.2f}"
                          f" (+{r['children_cpu_s']:.2f} children) s  sys {r['self_sys_s']:.2f}"
                          f"  cs {r['vol_cs']}/{r['invol_cs']}  flt {r['minflt']}/{r['majflt']}"
                          f"  cpu {r['threads']} n {r['thread_counts']}"
                          f" runq {r['runqueue_wait_s']}", flush=True)
        finally:
            server.kill()
            server.wait()
    print("\nmedians:")
    base = statistics.median(r["self_cpu_s"] + r["children_cpu_s"] for r in runs[kinds[0]])
    for kind in kinds:
        med = lambda key: statistics.median(r[key] for r in runs[kind])  # noqa: E731
        cpu = statistics.median(r["self_cpu_s"] + r["children_cpu_s"] for r in runs[kind])
        runq = statistics.median(r["runqueue_wait_s"].get("rl-decode", 0) for r in runs[kind])
        print(f"  {kind:7s} wall {med('wall_s'):.2f} s  cpu {cpu:.2f} s ({cpu / base:.2f}x "
              f"{kinds[0]})  sys {med('self_sys_s'):.2f}"
              f"  cs {med('vol_cs'):.0f}/{med('invol_cs'):.0f}  minflt {med('minflt'):.0f}"
              f"  decode runq wait {runq:.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
