"""Functions run on the seeded global RNGs (a Joint's or a dataset's Python tail, in the thread
that iterates the loader) draw their own seed's values when two threads do so at once, as two
loaders iterated in two threads do: each thread's draws equal a single-threaded run's (exact),
and the caller's generator state is restored."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import torch

from ringloader.core._sample_keys import _run_seeded


def _draws(n):
    """torch, Python and numpy draws, the GIL released between them (as torch's kernels do)."""
    out = []
    for _ in range(n):
        out.append(float(torch.rand(())))
        time.sleep(0.001)
        out.append(random.random())
        out.append(float(np.random.rand()))
    return out


def test_two_threads_draw_their_own_seeds():
    want = {seed: _run_seeded(_draws, 20, seed) for seed in (1, 2)}
    assert want[1] != want[2]
    torch.manual_seed(77)
    before = torch.get_rng_state()
    got = {seed: [] for seed in want}
    barrier = threading.Barrier(2)

    def work(seed):
        barrier.wait()
        for _ in range(5):
            got[seed].append(_run_seeded(_draws, 20, seed))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in want]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for seed in want:
        assert got[seed] == [want[seed]] * 5, seed
    assert torch.equal(torch.get_rng_state(), before)  # the main thread's state as it was


def test_two_loaders_with_a_joint_tail_iterated_in_two_threads(tmp_path):
    """Two loaders, each built and iterated in a thread of its own (a training and an evaluation
    loader, say), their Joints' colour steps running in those threads after ToImage: every row
    equals that of the same loader run alone (max |diff| 0), three epochs, four trials."""
    import warnings

    from torchvision import tv_tensors
    from torchvision.transforms import v2

    import ringloader as rl
    from imagegen import jpeg_bytes

    photos = []
    for i in range(8):
        path = tmp_path / f"p{i}.jpg"
        path.write_bytes(jpeg_bytes(60 + 7 * i, 90 - 5 * i, quality=90, seed=i))
        photos.append((path, (60 + 7 * i, 90 - 5 * i)))
    t = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(48), v2.RandomHorizontalFlip(),
                    v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
                    v2.RandomGrayscale(p=0.2), v2.RandomSolarize(128, p=0.2)])

    class Scenes(torch.utils.data.Dataset):
        def __len__(self):
            return len(photos)

        def __getitem__(self, i):
            path, (w, h) = photos[i]
            boxes = tv_tensors.BoundingBoxes([[2, 3, w // 2, h // 2]], format="XYXY",
                                             canvas_size=(h, w))
            return rl.Joint(t, {"image": rl.ImageFile(path), "boxes": boxes})

    def rows(seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loader = rl.DataLoader(Scenes(), batch_size=4, collate_fn=list,
                                   generator=torch.Generator().manual_seed(seed))
        assert loader.native
        return [s["image"] for _ in range(3) for batch in loader for s in batch]

    want = {seed: rows(seed) for seed in (1, 2)}
    for _ in range(4):
        got = {}
        threads = [threading.Thread(target=lambda s=s: got.__setitem__(s, rows(s))) for s in want]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        for seed in want:
            assert len(got[seed]) == len(want[seed])
            bad = [k for k, (a, b) in enumerate(zip(got[seed], want[seed])) if not torch.equal(a, b)]
            assert not bad, (seed, bad, [float((got[seed][k].float() - want[seed][k].float()).abs().max()) for k in bad])
