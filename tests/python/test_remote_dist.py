"""Remote shards across nodes: two torchrun "nodes" on this machine (a c10d rendezvous on the
loopback interface, gloo), two ranks each, each node with its own shard cache, shards served by
nginx (remote_servers.py). Every sample once per epoch across the ranks, one download per shard
per node, and a mid-epoch checkpoint resumed at another world size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ringloader as rl

import remote_servers as srv

wds = pytest.importorskip("webdataset")

WORKER = Path(__file__).with_name("dist_remote_worker.py")
SHARDS = 4
PER_SHARD = 6  # 24 samples: 6 per rank at world 4, 12 at world 2 (no padding either way)


@pytest.fixture(scope="module")
def served(tmp_path_factory, unique_tree):
    """nginx serving 4 shards of 6 samples whose label is the sample's number: (server, urls)."""
    if srv.NGINX is None:
        pytest.skip("nginx is not installed (Debian nginx-light; scripts/setup.sh installs it)")
    root = tmp_path_factory.mktemp("dist-shards")
    samples = rl.ImageFolder(str(unique_tree)).samples
    with wds.ShardWriter(str(root / "part-%06d.tar"), maxcount=PER_SHARD, verbose=0) as sink:
        for i, (path, label) in enumerate(samples):
            sink.write({"__key__": f"s{i:05d}", "jpg": Path(path).read_bytes(), "cls": label})
    assert len(list(root.glob("part-*.tar"))) == SHARDS
    server = srv.Nginx(root, tmp_path_factory.mktemp("dist-nginx"))
    yield server, f"{server.url}/part-{{000000..{SHARDS - 1:06d}}}.tar"
    server.stop()


def _torchrun(tmp_path: Path, nnodes: int, args_per_node, timeout: float = 120):
    """Starts one torchrun per node (a c10d rendezvous on 127.0.0.1), waits for all of them."""
    port = srv.free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(tmp_path),
               XDG_CACHE_HOME=str(tmp_path / "xdg"))
    procs = []
    for node_args in args_per_node:
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}",
               "--nproc-per-node=2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
               f"--rdzv-id=remote-{port}", str(WORKER), *map(str, node_args)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    try:
        outputs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-4000:]


def _flat(batches):
    return [i for b in batches for i in b]


def test_exact_epochs_across_two_nodes_and_resume_at_another_world_size(tmp_path, served):
    server, urls = served
    caches = [tmp_path / "node-a", tmp_path / "node-b"]
    first, state = tmp_path / "first.json", tmp_path / "state.pt"
    _torchrun(tmp_path, 2, [(urls, cache, first, "first", state) for cache in caches])
    got = json.loads(first.read_text())
    assert got["world"] == 4
    ranks = got["ranks"]
    # Two ranks per node, each node reading its own cache folder.
    by_cache = {}
    for r in ranks:
        by_cache.setdefault(r["cache_dir"], []).append(r["rank"])
        assert all(p.startswith(r["cache_dir"]) for p in r["shard_paths"])
    assert sorted(len(v) for v in by_cache.values()) == [2, 2]
    everything = list(range(SHARDS * PER_SHARD))
    for epoch in ("0", "1"):
        assert len({len(r["epochs"][epoch]) for r in ranks}) == 1, "same number of batches"
        union = [i for r in ranks for i in _flat(r["epochs"][epoch])]
        assert sorted(union) == everything, f"epoch {epoch}: every sample exactly once"
    assert ranks[0]["epochs"]["0"] != ranks[0]["epochs"]["1"], "set_epoch reshuffles"
    # One download per shard per node: two nodes, two GETs of each shard (and none in epoch 1).
    for s in range(SHARDS):
        assert server.gets(f"part-{s:06d}.tar") == 2

    # The checkpoint after one batch at world 4, resumed on one node at world 2 (its warm cache).
    second = tmp_path / "second.json"
    _torchrun(tmp_path, 1, [(urls, caches[0], second, "resume", state)])
    resumed = json.loads(second.read_text())
    assert resumed["world"] == 2
    seen = [i for r in ranks for i in r["first_batch"]]
    rest = [i for r in resumed["ranks"] for i in _flat(r["resumed"])]
    assert len(seen) == 4 * 2
    assert sorted(seen + rest) == everything, "the epoch exactly once across the two runs"
    for s in range(SHARDS):
        assert server.gets(f"part-{s:06d}.tar") == 2, "the resumed run read the node's cache"
