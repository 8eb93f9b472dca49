"""Native clip batches under on_error="skip": with drop_last=True every batch is full, refilled
from the clips after it in epoch order, as the image loader refills its batches
(docs/bad-data.md), and resumes exactly, also inside a refilled batch; max_skipped_fraction
counts the clips of the epoch that planned them, never those of a batch still being made for an
epoch the loop left."""

from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader.sources import video as rv

from videogen import NEEDS_VIDEO, SAMPLER, make_clip

pytestmark = NEEDS_VIDEO
v2 = pytest.importorskip("torchvision.transforms.v2")


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> dict:
    """Nine 20-frame 32x24 H.264 clips and a cut one (a truncated download: a sample error)."""
    top = tmp_path_factory.mktemp("refill")
    good = [make_clip(top / f"{k}.mp4", 40 * k) for k in range(9)]
    bad = top / "cut.mp4"
    bad.write_bytes(good[0].read_bytes()[: good[0].stat().st_size // 3])
    return {"good": good, "bad": bad}


class Clips(torch.utils.data.Dataset):
    """(VideoFile, index) of the good clips, the cut clip at the indices in ``bad``."""

    def __init__(self, videos: dict, bad, n: int = 9):
        self.videos, self.bad, self.n = videos, set(bad), n
        self.transform = v2.CenterCrop(16)

    def __len__(self) -> int:
        return self.n

    def path(self, index: int) -> Path:
        return self.videos["bad"] if index in self.bad else self.videos["good"][index]

    def __getitem__(self, index: int):
        return rv.VideoFile(self.path(index), clip=SAMPLER, transform=self.transform), index


def loader(ds, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # natively batched: no FallbackWarning
        return rl.DataLoader(ds, on_error="skip", generator=torch.Generator().manual_seed(3), **kwargs)


def rows(batches):
    """Each clip delivered with its target, in order."""
    return [(c, t) for clip, target in batches for c, t in zip(clip, target.tolist())]


@pytest.mark.parametrize("workers", [0, 2], ids=["when-asked", "prefetched"])
def test_drop_last_keeps_every_batch_full_in_epoch_order(videos: dict, workers: int):
    """Samples 1 and 4 fail: batches [0, 1, 2], [3, 4, 5], [6, 7, 8] become [0, 2, 3], [5, 6, 7]
    and the short remainder [8] is dropped; each clip is the one it is at its planned position
    (drawn from the same key), as the batches without refill give it."""
    ds = Clips(videos, bad={1, 4})
    short = rows(loader(ds, batch_size=3, num_workers=workers))  # drop_last=False: short batches
    assert [t for _, t in short] == [0, 2, 3, 5, 6, 7, 8]
    dl = loader(ds, batch_size=3, drop_last=True, num_workers=workers)
    assert len(dl) == 3  # the planned batches: an upper bound
    got = [(c, t.tolist()) for c, t in dl]
    assert [t for _, t in got] == [[0, 2, 3], [5, 6, 7]]
    assert all(c.shape == (3, 1, 4, 3, 16, 16) for c, _ in got)
    refilled = [(c, t) for clip, targets in got for c, t in zip(clip, targets)]
    assert [t for _, t in refilled] == [t for _, t in short][:6]
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(refilled, short))
    assert dl.stats()["video"]["skipped"] == 2
    assert dl.state_dict()["complete"]


@pytest.mark.parametrize("workers", [0, 2], ids=["when-asked", "prefetched"])
def test_drop_last_false_keeps_the_short_batches_as_the_image_loader(videos: dict, workers: int):
    """Without drop_last the image loader does not refill: a batch is short by its skipped
    samples and one whose every sample failed is dropped; clip batches do the same."""
    ds = Clips(videos, bad={1, 3, 4, 5})
    got = [t.tolist() for _, t in loader(ds, batch_size=3, num_workers=workers)]
    assert got == [[0, 2], [6, 7, 8]]


@pytest.mark.parametrize("workers", [0, 2], ids=["when-asked", "prefetched"])
def test_a_checkpoint_inside_a_refilled_batch_resumes_exactly(videos: dict, workers: int):
    """After [0, 2, 3] the epoch is inside planned batch [3, 4, 5], one of its clips delivered:
    the checkpoint records it (rows), and resuming delivers [5, 6, 7] (the same clips), nothing
    repeated; a state_dict() taken right after the resumed iter() is that checkpoint again."""
    ds = Clips(videos, bad={1, 4})
    whole = [(c, t.tolist()) for c, t in loader(ds, batch_size=3, drop_last=True, num_workers=workers)]
    dl = loader(ds, batch_size=3, drop_last=True, num_workers=workers)
    it = iter(dl)
    assert next(it)[1].tolist() == [0, 2, 3]
    state = dl.state_dict()
    assert (state["delivered"], state["rows"], state["complete"]) == (1, 1, False)
    rest = [(c, t.tolist()) for c, t in it]
    resumed = loader(ds, batch_size=3, drop_last=True, num_workers=workers)
    resumed.load_state_dict(state)
    again_it = iter(resumed)
    assert {k: resumed.state_dict()[k] for k in ("delivered", "rows")} == {"delivered": 1, "rows": 1}
    again = [(c, t.tolist()) for c, t in again_it]
    assert [t for _, t in again] == [t for _, t in rest] == [[5, 6, 7]]
    assert torch.equal(again[0][0], whole[1][0]) and torch.equal(rest[0][0], whole[1][0])
    assert resumed.state_dict()["complete"]


def test_a_checkpoint_with_staging_one_batch_ahead_resumes_at_the_batch_not_received(videos: dict, monkeypatch):
    """device= stages each batch one ahead of the loop (no GPU here: the same one-ahead order
    without the copy): the refilled batch made ahead is not recorded until it is handed over,
    so a checkpoint after each batch received resumes with exactly the batches not received."""
    from ringloader.loader import _generic

    def one_ahead(batches, device):  # _staging._device_prefetch's order, on the CPU
        pending = None
        for batch in batches:
            if pending is not None:
                yield pending
            pending = batch
        if pending is not None:
            yield pending

    monkeypatch.setattr(_generic, "_device_prefetch", one_ahead)
    ds = Clips(videos, bad={1, 4})
    whole = [(c, t.tolist()) for c, t in loader(ds, batch_size=3, drop_last=True)]
    assert [t for _, t in whole] == [[0, 2, 3], [5, 6, 7]]
    for k, at in ((1, (1, 1)), (2, (2, 2))):
        dl = loader(ds, batch_size=3, drop_last=True)
        dl._backend._device = "staged"  # what device= sets; the staging itself is one_ahead
        it = iter(dl)
        for _ in range(k):
            next(it)
        state = dl.state_dict()
        assert (state["delivered"], state["rows"]) == at
        resumed = loader(ds, batch_size=3, drop_last=True)
        resumed.load_state_dict(state)
        again = [(c, t.tolist()) for c, t in resumed]
        assert [t for _, t in again] == [t for _, t in whole[k:]]
        assert all(torch.equal(a, w) for (a, _), (w, _) in zip(again, whole[k:]))


def test_max_skipped_fraction_counts_the_clips_read_with_refills(videos: dict):
    """Refilling reads the epoch's planned clips (9) and no other: 2 skipped of 9 is more than
    0.2 of them, raised at the batch after the one that completed [0, 2, 3], again at the next
    call; a checkpoint taken at the errors resumes after [0, 2, 3], inside planned batch 1."""
    ds = Clips(videos, bad={1, 4})
    dl = loader(ds, batch_size=3, drop_last=True, num_workers=0, max_skipped_fraction=0.2)
    it = iter(dl)
    assert next(it)[1].tolist() == [0, 2, 3]
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"skipped 2 of the 9 clips.*cut\.mp4"):
            next(it)
        state = dl.state_dict()
        assert (state["delivered"], state["rows"]) == (1, 1)
    assert [t.tolist() for _, t in loader(ds, batch_size=3, drop_last=True, num_workers=0,
                                          max_skipped_fraction=0.25)] == [[0, 2, 3], [5, 6, 7]]


def test_a_refill_across_clips_of_another_size_names_the_fix(videos: dict, tmp_path: Path):
    """A refilled batch is one tensor: clips of another size than those carried over (no resize
    in the transform) raise a ValueError naming the file and saying what to do, at each later
    next() of the epoch;
    drop_last=False still gives the short batches."""
    import subprocess

    big = tmp_path / "big.mp4"
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc2=size=48x32:rate=10,trim=end_frame=20", "-pix_fmt", "yuv420p", "-c:v",
                    "libx264", "-g", "5", str(big)], check=True)
    ds = Clips(videos, bad={1}, n=4)
    ds.videos = {"good": videos["good"][:2] + [big, big], "bad": videos["bad"]}
    ds.transform = None
    assert [t.tolist() for _, t in loader(ds, batch_size=2)] == [[0], [2, 3]]
    it = iter(loader(ds, batch_size=2, drop_last=True))
    for _ in range(2):
        with pytest.raises(ValueError, match=r"big\.mp4: .*drop_last=True.*\[1, 4, 3, 32, 48\].*\[1, 4, 3, 24, 32\]"
                                             r".*Resize.*drop_last=False"):
            next(it)


class Gated(Clips):
    """Samples 2 and 3 fail while ``bad_now``; reading sample 3 on the batch thread waits for
    ``gate`` once ``armed`` (after the cut clips were chosen for both)."""

    def __init__(self, videos: dict):
        super().__init__(videos, bad={2, 3}, n=8)
        self.bad_now, self.armed = True, False
        self.gate, self.inside = threading.Event(), threading.Event()

    def path(self, index: int) -> Path:
        return super().path(index) if self.bad_now else self.videos["good"][index]

    def __getitem__(self, index: int):
        item = super().__getitem__(index)
        if self.armed and index == 3 and threading.current_thread() is not threading.main_thread():
            self.armed = False
            self.inside.set()
            self.gate.wait(10)
        return item


def test_a_batch_of_an_abandoned_epoch_counts_its_skips_toward_that_epoch(videos: dict):
    """The loop leaves an epoch while its next batch (two failing clips) is still being made,
    and iterates again: those two clips, skipped after the new epoch began, are the old epoch's.
    The new epoch, whose clips all decode, is not over max_skipped_fraction (2 of 8 would be)."""
    ds = Gated(videos)
    dl = loader(ds, batch_size=2, num_workers=1, prefetch_factor=1, max_skipped_fraction=0.2)
    ds.armed = True
    it = iter(dl)
    assert next(it)[1].tolist() == [0, 1]
    assert ds.inside.wait(10)  # the batch thread is making [2, 3] of this epoch
    ds.bad_now = False
    del it  # the loop leaves the epoch
    again = iter(dl)
    ds.gate.set()
    deadline = time.monotonic() + 10
    while dl.stats()["video"]["skipped"] < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert dl.stats()["video"]["skipped"] == 2  # the old epoch's batch was finished, its clips skipped
    assert [t.tolist() for _, t in again] == [[0, 1], [2, 3], [4, 5], [6, 7]]
