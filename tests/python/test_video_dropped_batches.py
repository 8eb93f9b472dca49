"""Native clip batches under on_error="skip" when every clip of a batch fails: the batch is
dropped, as the image loader drops a batch whose every sample failed (docs/bad-data.md), never
delivered as an empty (0, 0, 3, 0, 0) tensor; len(loader) stays the planned count (an upper
bound) and a checkpoint taken after the dropped batch resumes after it."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

import ringloader as rl

from videogen import NEEDS_VIDEO, SAMPLER, class_folder_with_a_cut_clip

pytestmark = NEEDS_VIDEO
v2 = pytest.importorskip("torchvision.transforms.v2")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Two classes of two 20-frame 32x24 H.264 clips; a/1.mp4 cut to its first third."""
    return class_folder_with_a_cut_clip(tmp_path_factory.mktemp("dropped"), 2)


def loader(dataset, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # natively batched: no FallbackWarning
        return rl.DataLoader(dataset, batch_size=1, on_error="skip",
                             generator=torch.Generator().manual_seed(5), **kwargs)


@pytest.mark.parametrize("workers", [0, 2], ids=["when-asked", "prefetched"])
def test_a_batch_whose_every_clip_failed_is_dropped(folder: Path, workers: int):
    ds = rl.VideoFolder(folder, clip=SAMPLER, transform=v2.CenterCrop(16))
    dl = loader(ds, num_workers=workers)
    assert len(dl) == 4  # the planned batches: an upper bound, as for images
    got = [(clip, target.tolist()) for clip, target in dl]
    assert [t for _, t in got] == [[0], [1], [1]]  # a/1.mp4's batch is not delivered at all
    assert all(clip.shape == (1, 1, 4, 3, 16, 16) for clip, _ in got)
    assert dl.stats()["video"]["skipped"] == 1


@pytest.mark.parametrize("workers", [0, 2], ids=["when-asked", "prefetched"])
def test_a_checkpoint_after_a_dropped_batch_resumes_after_it(folder: Path, workers: int):
    ds = rl.VideoFolder(folder, clip=SAMPLER, transform=v2.CenterCrop(16))
    whole = [(c, t.tolist()) for c, t in loader(ds, num_workers=workers)]
    dl = loader(ds, num_workers=workers)
    it = iter(dl)
    _, second = next(it), next(it)  # a/0, then b/0 (a/1's batch dropped between them)
    assert second[1].tolist() == [1]
    state = dl.state_dict()
    assert state["delivered"] == 3  # a/0's batch, a/1's (dropped) and b/0's
    rest = [(c, t.tolist()) for c, t in it]
    resumed = loader(ds, num_workers=workers)
    resumed.load_state_dict(state)
    again = [(c, t.tolist()) for c, t in resumed]
    assert [t for _, t in again] == [t for _, t in rest] == [[1]]  # b/1 once: nothing repeated
    assert torch.equal(again[0][0], whole[2][0]) and torch.equal(rest[0][0], whole[2][0])


def test_an_epoch_that_skips_more_than_max_skipped_fraction_raises(folder: Path):
    """As the image loader: more than max_skipped_fraction of the epoch's clips skipped raises
    RuntimeError naming the count and the clips lost (at the next batch, and again after)."""
    ds = rl.VideoFolder(folder, clip=SAMPLER, transform=v2.CenterCrop(16))
    it = iter(loader(ds, num_workers=0, max_skipped_fraction=0.2))
    assert next(it)[1].tolist() == [0]
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"skipped 1 of the 4 clips.*max_skipped_fraction=0\.2.*"
                                               r"a/1\.mp4.*max_skipped_fraction=1"):
            next(it)
    with pytest.raises(RuntimeError, match="skipped 1 of the 4 clips"):
        list(loader(ds, num_workers=2, max_skipped_fraction=0.2))
    # One clip of four is not more than a quarter: the epoch goes on.
    assert [t.tolist() for _, t in loader(ds, num_workers=2, max_skipped_fraction=0.25)] == [[0], [1], [1]]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_checkpoint_taken_right_after_iter_resumes_that_epoch(folder: Path, workers: int, monkeypatch):
    """Batches made ahead on a thread: iter() begins the epoch's plan before it returns, as
    torch's worker processes do, so a state_dict() taken before the first next() records that
    epoch (its order and seed) rather than, depending on how fast the thread started, a
    finished epoch whose resumption draws another order. The plan is slowed down here to make
    the thread late every time."""
    import time

    from ringloader.core import _order

    plan = _order.plan_epoch

    def late(*args, **kwargs):
        time.sleep(0.3)
        return plan(*args, **kwargs)

    monkeypatch.setattr(_order, "plan_epoch", late)
    ds = rl.VideoFolder(folder, clip=SAMPLER, transform=v2.CenterCrop(16))
    whole = [(c, t.tolist()) for c, t in loader(ds, num_workers=workers, shuffle=True)]
    dl = loader(ds, num_workers=workers, shuffle=True)
    it = iter(dl)
    state = dl.state_dict()
    assert not state["complete"] and state["delivered"] == 0
    rest = [(c, t.tolist()) for c, t in it]
    resumed = loader(ds, num_workers=workers, shuffle=True)
    resumed.load_state_dict(state)
    again = [(c, t.tolist()) for c, t in resumed]
    assert [t for _, t in again] == [t for _, t in rest] == [t for _, t in whole]
    assert all(torch.equal(a, w) for (a, _), (w, _) in zip(again, whole))


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_a_checkpoint_after_any_batch_of_a_shuffled_epoch_resumes_exactly(folder: Path, workers: int):
    """Batches of two, shuffled, a bad clip among them: a checkpoint after each batch received
    resumes with exactly the batches not yet delivered (none repeated, none lost), their clips
    equal to the uninterrupted epoch's."""
    ds = rl.VideoFolder(folder, clip=SAMPLER, transform=v2.CenterCrop(16))
    kw = dict(num_workers=workers, shuffle=True, batch_size=2)

    def make(**more):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return rl.DataLoader(ds, on_error="skip", generator=torch.Generator().manual_seed(11), **kw, **more)

    whole = [(c, t.tolist()) for c, t in make()]
    for k in range(1, len(whole) + 1):
        dl = make()
        it = iter(dl)
        for _ in range(k):
            next(it)
        state = dl.state_dict()
        resumed = make()
        resumed.load_state_dict(state)
        again = [(c, t.tolist()) for c, t in resumed]
        assert [t for _, t in again] == [t for _, t in whole[k:]], k
        assert all(torch.equal(a, w) for (a, _), (w, _) in zip(again, whole[k:]))


@pytest.mark.parametrize("workers", [0, 2], ids=["when-asked", "prefetched"])
def test_a_checkpoint_after_max_skipped_fraction_raised_again_loses_no_batch(folder: Path, workers: int):
    """max_skipped_fraction's error comes before a batch is taken, and again at each later
    next(): however often it is raised, a checkpoint then resumes at the first batch not
    delivered (as the image loader's does), not one batch further for each raise."""
    ds = rl.VideoFolder(folder, clip=SAMPLER, transform=v2.CenterCrop(16))
    dl = loader(ds, num_workers=workers, max_skipped_fraction=0.2)
    it = iter(dl)
    assert next(it)[1].tolist() == [0]
    for _ in range(3):
        with pytest.raises(RuntimeError, match="max_skipped_fraction"):
            next(it)
    state = dl.state_dict()
    # a/0's batch, and a/1's (dropped) when the error came after it was taken: b/0, b/1 not delivered
    assert state["delivered"] in (1, 2)
    resumed = loader(ds, num_workers=workers)
    resumed.load_state_dict(state)
    assert [t.tolist() for _, t in resumed] == [[1], [1]]
