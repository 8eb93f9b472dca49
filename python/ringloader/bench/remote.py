"""The same shards over a throttled loopback link (``--dataset remote``): ``http://`` epochs
into and out of the shard cache, a cache of half the shards' bytes, a sparse Subset, and the
peers over the same link (``pipe:curl``, the ``webdataset`` package under torch's DataLoader)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from .harness import BenchError, Config, _import_ringloader, _import_torch, _warm_page_cache
from .pipelines import make_transform


class _ThrottledFiles:
    """The files of ``root`` over loopback HTTP (GET, single Range, an ETag): every response
    starts after ``latency_s``, and all responses together move at most ``rate`` bytes/s. A
    stand-in for the link to object storage."""

    CHUNK = 256 << 10

    def __init__(self, root: Path, latency_s: float, rate: float):
        import http.server
        import threading

        self.root, self.latency_s, self.rate = Path(root).resolve(), latency_s, rate
        self._lock = threading.Lock()
        self._next = time.monotonic()
        self.bytes_sent = 0
        self.requests: list = []  # (file name, first byte) of each GET, in the order they came
        files = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                files._serve(self)

        class Server(http.server.ThreadingHTTPServer):
            # The default backlog (5) drops some of a burst of connections, which the client
            # then retries after a second: not the link's cost.
            request_queue_size = 128

            def handle_error(self, request: Any, client_address: Any) -> None:
                # A client that stops reading (a pipe:curl stream closed at the epoch's last
                # whole batch) is not a server fault worth a traceback.
                if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _take(self, n: int) -> None:
        """Waits until ``n`` more bytes fit the link's rate (shared by every response)."""
        with self._lock:
            now = time.monotonic()
            self._next = max(self._next, now) + n / self.rate
            wait = self._next - now - n / self.rate
        if wait > 0:
            time.sleep(wait)

    def _serve(self, h: Any) -> None:
        import re

        path = self.root / h.path.lstrip("/").split("?")[0]
        time.sleep(self.latency_s)
        if not path.is_file() or self.root not in path.resolve().parents:
            h.send_response(404)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        st = path.stat()
        size, start, end = st.st_size, 0, st.st_size
        etag = f'"{st.st_mtime_ns:x}-{size:x}"'
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", h.headers.get("Range", ""))
        if m and h.headers.get("If-Range", etag) == etag and int(m.group(1)) < size:
            start = int(m.group(1))
            end = min(size, int(m.group(2)) + 1) if m.group(2) else size
            h.send_response(206)
            h.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        else:
            h.send_response(200)
        with self._lock:
            self.requests.append((path.name, start))
        h.send_header("Content-Length", str(end - start))
        h.send_header("ETag", etag)
        h.send_header("Accept-Ranges", "bytes")
        h.end_headers()
        with open(path, "rb") as f:
            f.seek(start)
            at = start
            while at < end:
                data = f.read(min(self.CHUNK, end - at))
                self._take(len(data))
                h.wfile.write(data)
                at += len(data)
                with self._lock:
                    self.bytes_sent += len(data)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _LinkProcess:
    """A _ThrottledFiles in a child process, so that serving the link costs the benchmark's
    process no CPU (its epochs' CPU seconds are the loader's own)."""

    def __init__(self, root: Path, latency_s: float, rate: float):
        import subprocess

        self.proc = subprocess.Popen(
            [sys.executable, "-c",
             "import sys, time\nfrom ringloader.bench.remote import _ThrottledFiles\n"
             "f = _ThrottledFiles(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))\n"
             "print(f.url, flush=True)\nsys.stdin.read()\n",
             str(root), repr(latency_s), repr(rate)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.url = self.proc.stdout.readline().strip()
        if not self.url:
            self.proc.wait()
            raise BenchError("the benchmark's link server did not start")

    def stop(self) -> None:
        self.proc.stdin.close()  # it exits at the end of its input
        try:
            self.proc.wait(timeout=5)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def _cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of its children that have ended (the
    ``curl`` of ``pipe:`` URLs, DataLoader worker processes)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run_remote_benchmark(cfg: Config, args: argparse.Namespace,
                         log: Callable[[str], None]) -> dict[str, Any]:
    """WebDataset shards (packed from ``--root`` once) served over a loopback link of
    ``--link-latency-ms`` per request and ``--link-rate`` MB/s: epoch 1 of ``http://`` shards (the
    download into an empty cache included) against the link's rate, with the download first and
    then as the DataLoader does it (overlapping the decoding), epoch 2 (from the cache)
    against the local shards, two epochs through a ``cache_limit`` of half the shards' bytes
    (each epoch downloads them again), and the peers over the same link, two epochs each
    (neither keeps a copy, so both epochs pay the link): ``pipe:curl`` streams of the same URLs,
    and the ``webdataset`` package's own reader under torch's DataLoader (``--num-workers``
    worker processes, torchvision's transforms). Train transform, shard order (no shuffle:
    every run reads the same bytes). Each run's CPU seconds are kept too (``cpu_seconds``: this
    process and its ended children; the link is served by a child process of its own)."""
    import shutil
    import tempfile

    rl = _import_ringloader()
    pack = importlib.import_module("ringloader.pack")
    T = importlib.import_module("ringloader.transforms")
    transform = make_transform(T, "train")
    with tempfile.TemporaryDirectory(prefix="ringloader-remote-") as tmp:
        work = Path(args.shards_dir) if args.shards_dir else Path(tmp) / "shards"
        if not list(work.glob("shard-*.tar")):
            log(f"packing {cfg.root} into {work} ...")
            pack.pack(str(cfg.root), str(work), pack.parse_size(args.shard_size))
        names = sorted(p.name for p in work.glob("shard-*.tar"))
        total = sum((work / n).stat().st_size for n in names)
        _warm_page_cache(work)
        link = _LinkProcess(work, args.link_latency_ms / 1e3, args.link_rate * 1e6)
        cache = Path(tmp) / "cache"
        cpu: dict[str, Any] = {}  # CPU seconds per run, as the report's keys
        urls = [f"{link.url}/{n}" for n in names]

        def epoch(ds: Any) -> tuple:
            # One epoch per loader: persistent_workers=False, else the loader would spend the
            # timed epoch's CPU reading ahead a next epoch that nobody takes (a source whose
            # shards exceed its cache, and pipe: streams, read none ahead: they would look faster).
            loader = rl.DataLoader(ds, batch_size=cfg.batch_size, shuffle=False,
                                   num_workers=cfg.num_workers, drop_last=True,
                                   persistent_workers=False)
            t0, c0 = time.perf_counter(), _cpu_seconds()
            images = sum(int(labels.shape[0]) for _, labels in loader)
            cpu["last"] = _cpu_seconds() - c0
            return images, time.perf_counter() - t0

        try:
            log(f"epoch 1: {len(names)} shards ({total / 1e6:.1f} MB) over a {args.link_rate:g} MB/s, "
                f"{args.link_latency_ms:g} ms link into an empty cache ...")
            t0, c0 = time.perf_counter(), _cpu_seconds()
            remote = rl.WebDataset(urls, transform=transform, cache_dir=str(cache), index_cache=None)
            # Built from the packed shards' sidecars: the shards themselves come at the epoch's
            # start, here, so that the download is timed apart from the decoding.
            remote.check_shards()
            fetch_s, fetch_cpu = time.perf_counter() - t0, _cpu_seconds() - c0
            images, first_s = epoch(remote)
            cpu["epoch1_seconds"] = fetch_cpu + cpu["last"]
            log("epoch 1 again into another empty cache, the download overlapping the decoding ...")
            t0, c0 = time.perf_counter(), _cpu_seconds()
            overlapped = rl.WebDataset(urls, transform=transform, cache_dir=str(cache) + "-overlap",
                                       index_cache=None)
            build_s, build_cpu = time.perf_counter() - t0, _cpu_seconds() - c0
            _, overlapped_s = epoch(overlapped)
            cpu["epoch1_overlapped_seconds"] = build_cpu + cpu["last"]
            overlapped.close_downloads()
            log("epoch 2: from the cache ...")
            _, second_s = epoch(remote)
            cpu["epoch2_seconds"] = cpu["last"]
            local = rl.WebDataset([str(work / n) for n in names], transform=transform,
                                  index_cache=None)
            log("local shards ...")
            _, local_s = epoch(local)
            cpu["local_seconds"] = cpu["last"]
            report: dict[str, Any] = {
                "shards": len(names), "shard_bytes": total, "images": images,
                "link_mb_per_s": args.link_rate, "link_latency_ms": args.link_latency_ms,
                "fetch_seconds": fetch_s, "fetch_mb_per_s": total / fetch_s / 1e6,
                "epoch1_seconds": fetch_s + first_s, "epoch2_seconds": second_s,
                "epoch1_overlapped_seconds": build_s + overlapped_s,
                "local_seconds": local_s, "link_floor_seconds": total / (args.link_rate * 1e6),
            }
            log("http:// through a cache of half the shards' bytes, two epochs ...")
            index = Path(tmp) / "small-index"
            rl.WebDataset(urls, cache_dir=str(cache), index_cache=str(index))  # kept indexes
            small = rl.WebDataset(urls, transform=transform, cache_dir=str(cache) + "-small",
                                  cache_limit=total // 2, index_cache=str(index))
            report["small_cache_seconds"], cpu["small_cache_seconds"] = [], []
            for _ in range(2):
                report["small_cache_seconds"].append(epoch(small)[1])
                cpu["small_cache_seconds"].append(cpu["last"])
            small.close_downloads()
            log("a Subset of every 10th sample into an empty cache, range_reads_below='auto' "
                "and 0 (whole shards) ...")
            for key, below in (("subset_auto", "auto"), ("subset_whole", 0)):
                sparse = rl.WebDataset(urls, transform=transform, cache_dir=f"{cache}-{key}",
                                       index_cache=str(index),
                                       remote_options={"range_reads_below": below})
                report[key] = _subset_epoch(rl, sparse, cfg, 10)
                sparse.close_downloads()
            if shutil.which("curl"):
                log("pipe:curl, two epochs ...")
                index = Path(tmp) / "pipe-index"
                wdsmod = importlib.import_module("ringloader.webdataset")
                piped_urls = [f"pipe:curl -s -f {u}" for u in urls]
                for url, n in zip(piped_urls, names):
                    wdsmod.cache_index_as(url, str(work / n), str(index))
                piped = rl.WebDataset(piped_urls, transform=transform, index_cache=str(index))
                report["pipe_curl_seconds"], cpu["pipe_curl_seconds"] = [], []
                for _ in range(2):
                    report["pipe_curl_seconds"].append(epoch(piped)[1])
                    cpu["pipe_curl_seconds"].append(cpu["last"])
            if importlib.util.find_spec("webdataset") is not None:
                log("the webdataset package over the same URLs, two epochs ...")
                report["webdataset_seconds"], cpu["webdataset_seconds"] = [], []
                for _ in range(2):
                    c0 = _cpu_seconds()
                    report["webdataset_seconds"].append(_webdataset_package_epoch(urls, cfg))
                    cpu["webdataset_seconds"].append(_cpu_seconds() - c0)
            cpu.pop("last", None)
            report["cpu_seconds"] = cpu
        finally:
            link.stop()
    return report


def _subset_epoch(rl: Any, ds: Any, cfg: Config, every: int) -> dict[str, Any]:
    """One epoch of every ``every``-th sample of ``ds`` (a ``Subset``: a few members of each
    shard), its remote shards not in the cache: the seconds to its first batch and to its end,
    and how many shards it read by range (the others it downloaded whole)."""
    torch_data = importlib.import_module("torch.utils.data")
    loader = rl.DataLoader(torch_data.Subset(ds, range(0, len(ds), every)),
                           batch_size=cfg.batch_size, num_workers=cfg.num_workers,
                           persistent_workers=False)
    before = loader.stats()["range_requests"]
    t0 = time.perf_counter()
    it = iter(loader)
    images = int(next(it)[1].shape[0])
    first_s = time.perf_counter() - t0
    images += sum(int(labels.shape[0]) for _, labels in it)
    seconds = time.perf_counter() - t0
    return {"images": images, "first_batch_seconds": first_s, "seconds": seconds,
            "ranged_shards": len(ds._redirects),
            "range_requests": loader.stats()["range_requests"] - before}


def _webdataset_package_epoch(urls: Sequence[str], cfg: Config) -> float:
    """Seconds of one epoch of the ``webdataset`` package's own reader over ``urls`` (it streams
    each shard through its http GET, every epoch), the same train pipeline in torchvision's
    transforms, under torch's DataLoader with ``--num-workers`` processes: the peer a user of
    object-storage shards would otherwise reach for."""
    torch, torchvision = _import_torch()
    wds = importlib.import_module("webdataset")
    transform = make_transform(torchvision.transforms, "train")
    # Shards split over the workers (the package's default with a DataLoader), batched in them.
    ds = (wds.WebDataset(list(urls), shardshuffle=False, empty_check=False)
          .decode("pil").to_tuple("jpg;jpeg;png", "cls").map_tuple(transform, int)
          .batched(cfg.batch_size, partial=False))
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=cfg.num_workers)
    t0 = time.perf_counter()
    for _images, labels in loader:
        int(labels.shape[0])
    return time.perf_counter() - t0


def format_remote_report(cfg: Config, machine: dict[str, Any], data: dict[str, Any],
                         report: dict[str, Any]) -> str:
    """Every epoch as seconds, img/s, and its ratio to the link's floor (the seconds the shards'
    bytes need at the link's rate: 1.0 moves them as fast as the link allows) and to the local
    shards' epoch (1.0 reads like a local disk), then its CPU seconds and their ratio to the
    local epoch's."""
    n = report["images"]
    link, local = report["link_floor_seconds"], report["local_seconds"]
    cpu = report.get("cpu_seconds", {})

    def line(name: str, seconds: float, note: str = "", key: str = "", e: int = -1) -> str:
        used = cpu.get(key)
        if isinstance(used, list):
            used = used[e] if e < len(used) else None
        if used is not None and cpu.get("local_seconds"):
            note += f"; {used:.2f} CPU-s ({used / cpu['local_seconds']:.2f}x local)"
        return (f"  {name:31s}: {seconds:6.2f} s, {n / seconds:4.0f} img/s, {link / seconds:.2f}x "
                f"the link, {local / seconds:.2f}x local{note}")

    lines = [
        f"ringloader remote benchmark: {report['images']} images, {report['shards']} shards "
        f"({report['shard_bytes'] / 1e6:.1f} MB) over a loopback link of {report['link_mb_per_s']:g} "
        f"MB/s and {report['link_latency_ms']:g} ms per request (the link alone needs "
        f"{link:.2f} s), train transform, batch {cfg.batch_size}, {cfg.num_workers} threads "
        f"(workers for the webdataset package)",
        line("local shards", local, key="local_seconds"),
        line("http://, epoch 1, fetch first", report["epoch1_seconds"],
             f" (download {report['fetch_seconds']:.2f} s = {report['fetch_mb_per_s']:.1f} MB/s)",
             key="epoch1_seconds"),
        line("http://, epoch 1, overlapping", report["epoch1_overlapped_seconds"],
             key="epoch1_overlapped_seconds"),
        line("http://, epoch 2 (cache)", report["epoch2_seconds"], key="epoch2_seconds"),
    ]
    for key, name in (("small_cache_seconds", "http://, cache of half"),
                      ("pipe_curl_seconds", "pipe:curl"), ("webdataset_seconds", "webdataset pkg")):
        for e, seconds in enumerate(report.get(key, [])):
            lines.append(line(f"{name}, epoch {e + 1}", seconds, key=key, e=e))
    for key, name in (("subset_auto", "auto"), ("subset_whole", "0 (whole)")):
        sub = report.get(key)
        if sub is not None:
            lines.append(f"  {'http://, Subset 1/10, ' + name:31s}: {sub['seconds']:6.2f} s, first batch "
                         f"{sub['first_batch_seconds']:.2f} s, {sub['images']} images, "
                         f"{sub['ranged_shards']} of {report['shards']} shards by range "
                         f"({sub['range_requests']} requests)")
    lines.append(f"  machine: {machine.get('cpu', '?')}")
    return "\n".join(lines)
