"""A dropped ``rl.DataLoader`` goes at once, as torch's does: no reference cycle keeps it, its
dataset or its persistent worker processes alive until a garbage collection. Run in a fresh
interpreter with the collector off, where the loader is the first one built (its construction
is where optional modules used to be imported, whose frames torch keeps)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import gc, multiprocessing, weakref
    import torch
    import ringloader as rl

    class Numbers(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return torch.tensor([i])

    gc.disable()
    for kwargs in ({"num_workers": 2, "persistent_workers": True}, {"num_workers": 2}, {}):
        dataset = Numbers()
        loader = rl.DataLoader(dataset, batch_size=2, **kwargs)
        assert [b.tolist() for b in loader] == [[[0], [1]], [[2], [3]], [[4], [5]], [[6], [7]]]
        gone, data_gone = weakref.ref(loader), weakref.ref(dataset)
        del loader, dataset
        assert gone() is None and data_gone() is None, kwargs
        assert multiprocessing.active_children() == [], kwargs
    print("ok")
""")


def test_a_dropped_loader_and_its_workers_go_without_a_garbage_collection():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
