"""One rank of the multi-node remote-shard test (tests/python/test_remote_dist.py), started by
torchrun: reads http:// WebDataset shards through its node's own cache folder, gathers what every
rank delivered, and rank 0 writes it as JSON.

    dist_remote_worker.py URLS CACHE_DIR OUT_JSON first STATE_OUT
        epoch 0 whole (the state after one batch saved to STATE_OUT), then epoch 1
    dist_remote_worker.py URLS CACHE_DIR OUT_JSON resume STATE_IN
        the rest of epoch 0 from the state saved at another world size
"""

import json
import os
import sys

import torch
import torch.distributed as dist

import ringloader as rl
from ringloader import transforms as T

BATCH = 2
SEED = 7


def gathered(value):
    """`value` of every rank, in rank order (a collective: every rank must call it)."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def main() -> None:
    urls, cache_dir, out_json, phase, state_path = sys.argv[1:6]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ds = rl.WebDataset(urls, transform=T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()]),
                       cache_dir=cache_dir, index_cache=None)
    loader = rl.DataLoader(ds, batch_size=BATCH, shuffle=True, seed=SEED, num_workers=1)
    mine = {"rank": rank, "node": os.environ.get("GROUP_RANK"), "cache_dir": cache_dir,
            "shard_paths": list(ds.shard_paths)}
    if phase == "first":
        epochs = {}
        for epoch in range(2):
            loader.set_epoch(epoch)
            labels = []
            it = iter(loader)
            for step, (_, y) in enumerate(it):
                labels.append(y.tolist())
                if epoch == 0 and step == 0:
                    state = loader.state_dict()
                    mine["first_batch"] = y.tolist()
                    if rank == 0:
                        torch.save(state, state_path)
            epochs[epoch] = labels
        mine["epochs"] = epochs
    else:
        loader.load_state_dict(torch.load(state_path, weights_only=False))
        mine["resumed"] = [y.tolist() for _, y in loader]
    everyone = gathered(mine)
    if rank == 0:
        with open(out_json, "w") as f:
            json.dump({"world": world, "ranks": everyone}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
