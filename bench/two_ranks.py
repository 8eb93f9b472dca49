"""Two ranks on one machine: each rank's share of the node (num_workers="auto" with the
launcher's variables: its share of the CPUs, on CPUs of its own) against today's per-process
sizing (each rank sized as if it owned the machine: the same loader with the rank variables
hidden from it), under torchrun, on the same data.

    python bench/two_ranks.py [--data DIR] [--rounds 3] [--batches 24] [--step-ms 10] [--omp-num-threads N]

Reports per mode the images/s of the node (both ranks' images over the slower rank's time),
the decode threads per rank, and the runnable threads per CPU: each rank samples its own
threads' states (/proc/self/task/*/stat, 'R') every 5 ms over the timed batches; the two
ranks' means are summed and divided by the machine's CPUs. The modes alternate round by round.
The training step is ``--step-ms`` of matrix products on torch's intra-op threads: torchrun sets
OMP_NUM_THREADS=1 for several ranks unless it is set; ``--omp-num-threads ''`` sets it empty,
which leaves torch's default (a thread per core) and the training loop's threads unknown to the
loader, as in a job that never set it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

RANK_VARIABLES = ("LOCAL_WORLD_SIZE", "LOCAL_RANK", "SLURM_NTASKS_PER_NODE", "SLURM_LOCALID",
                  "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALNRANKS", "MPI_LOCALRANKID")


def runnable_sampler(samples: list, stop: threading.Event) -> None:
    me = threading.get_native_id()
    while not stop.is_set():
        running = 0
        for tid in os.listdir("/proc/self/task"):
            if int(tid) == me:
                continue
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    running += f.read().rsplit(")", 1)[1].split()[0] == "R"
            except OSError:
                pass
        samples.append(running)
        time.sleep(0.005)


def worker(mode: str, data: str, batches: int, step_ms: float, out: str) -> None:
    import torch
    import torch.distributed as dist

    import ringloader as rl
    from ringloader import transforms as T

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if mode == "per-process":  # today's sizing: the loader does not know the machine is shared
        for name in RANK_VARIABLES:
            os.environ.pop(name, None)
    ds = rl.ImageFolder(data, transform=T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                                   T.ToTensor()]))
    loader = rl.DataLoader(ds, batch_size=32, num_workers="auto", shuffle=True, seed=1, drop_last=True)
    a = torch.randn(256, 256)
    # Calibrate the step: how many products make step_ms on this rank's threads.
    t = time.perf_counter()
    for _ in range(20):
        a @ a
    per = (time.perf_counter() - t) / 20
    products = max(1, round(step_ms / 1000 / per))
    it, taken, epoch = iter(loader), 0, 0

    def next_batch():
        nonlocal it, epoch
        try:
            return next(it)
        except StopIteration:
            epoch += 1
            loader.set_epoch(epoch)
            it = iter(loader)
            return next(it)

    for _ in range(3):  # warm-up
        next_batch()
    samples: list = []
    stop = threading.Event()
    dist.barrier()
    sampler = threading.Thread(target=runnable_sampler, args=(samples, stop), daemon=True)
    sampler.start()
    start = time.perf_counter()
    for _ in range(batches):
        images, _ = next_batch()
        taken += images.shape[0]
        for _ in range(products):
            a @ a
    seconds = time.perf_counter() - start
    stop.set()
    sampler.join()
    record = {"rank": rank, "mode": mode, "images": taken, "seconds": seconds,
              "decode_threads": loader.stats()["decode_threads"], "torch_threads": torch.get_num_threads(),
              "runnable_mean": statistics.mean(samples) if samples else 0.0,
              "node": [line for line in loader.describe().splitlines() if line.startswith(("  node:", "  cpus:"))]}
    with open(os.path.join(out, f"{mode}-rank{rank}.json"), "w") as f:
        json.dump(record, f)
    dist.destroy_process_group()


def run_mode(mode: str, args, port: int) -> dict:
    with tempfile.TemporaryDirectory() as out:
        env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES and k != "OMP_NUM_THREADS"}
        if args.omp_num_threads is not None:
            env["OMP_NUM_THREADS"] = args.omp_num_threads
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
                               "--master-addr=127.0.0.1", f"--master-port={port}", __file__, "--worker", mode,
                               "--data", args.data, "--batches", str(args.batches), "--step-ms", str(args.step_ms),
                               "--out", out], env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise SystemExit(f"{mode} failed:\n{(done.stdout + done.stderr)[-3000:]}")
        ranks = [json.load(open(os.path.join(out, f"{mode}-rank{r}.json"))) for r in (0, 1)]
    cpus = os.cpu_count() or 1
    return {"images_per_s": sum(r["images"] for r in ranks) / max(r["seconds"] for r in ranks),
            "runnable_per_cpu": sum(r["runnable_mean"] for r in ranks) / cpus,
            "decode_threads": [r["decode_threads"] for r in ranks], "torch_threads": ranks[0]["torch_threads"],
            "describe": ranks[1]["node"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=os.path.expanduser("~/.cache/ringloader/sample-v1"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batches", type=int, default=24)
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--omp-num-threads", help="OMP_NUM_THREADS for the ranks ('': torch's default); "
                   "default: torchrun's (1)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.data, args.batches, args.step_ms, args.out)
        return 0
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
    from remote_servers import free_port

    results: dict = {"auto": [], "per-process": []}
    for r in range(args.rounds):
        for mode in (("auto", "per-process") if r % 2 == 0 else ("per-process", "auto")):
            results[mode].append(run_mode(mode, args, free_port()))
            print(f"round {r} {mode}: {results[mode][-1]['images_per_s']:.1f} images/s, "
                  f"{results[mode][-1]['runnable_per_cpu']:.2f} runnable threads per CPU", flush=True)
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"\n{os.cpu_count()} CPUs, load average at the end {' '.join(load)}; medians of {args.rounds} rounds:")
    for mode, rows in results.items():
        print(f"  {mode:<12} {statistics.median(x['images_per_s'] for x in rows):7.1f} images/s per node, "
              f"{statistics.median(x['runnable_per_cpu'] for x in rows):.2f} runnable threads per CPU, "
              f"decode threads per rank {rows[0]['decode_threads']}, torch threads per rank {rows[0]['torch_threads']}")
    print("\nrank 1's describe() under auto:\n" + "\n".join(results["auto"][0]["describe"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
