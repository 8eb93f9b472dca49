"""Cases around two changes the other tests leave out: a ``state_dict()`` right after ``iter()``
on torch's path (``_planning._PlannedEpoch``) and native clip batches refilled under
``on_error="skip"`` with ``drop_last=True`` (``_video_refill.Refilled``): an iterator dropped
before its first ``next()``, two iterators of one loader, ``load_state_dict`` between ``iter()``
and the first ``next()``, an error collating a refilled batch's targets, a checkpoint resumed
with another ``batch_size``, a ``next()`` after the plan of clip batches made ahead failed."""

from __future__ import annotations

import shutil
import warnings

import pytest
import torch
import torch.utils.data as tud

import ringloader as rl
from ringloader.sources import video as rv
from ringloader.transforms import clips

from videogen import make_clip


class _Numbers(tud.Dataset):
    def __len__(self) -> int:
        return 7

    def __getitem__(self, i: int):
        return torch.tensor(i)


def _orders(loader, epochs: int) -> list:
    return [[b.tolist() for b in loader] for _ in range(epochs)]


def test_a_state_dict_after_an_iterator_dropped_before_its_first_next_changes_nothing():
    """torch's loader with no workers draws an epoch's order at the first next(): an iterator
    dropped before it draws only its base seed. A state_dict() then has no epoch to plan (that
    iterator is gone): the run goes on as torch's, the same orders and global RNG state, and the
    checkpoint resumes the epoch the next iter() begins."""

    def run(checkpoint: bool):
        torch.manual_seed(0)
        loader = rl.DataLoader(_Numbers(), batch_size=2, shuffle=True)
        it = iter(loader)
        del it
        state = loader.state_dict() if checkpoint else None
        rng = torch.get_rng_state()
        return _orders(loader, 2), torch.get_rng_state(), state, rng

    want, want_rng, _, _ = run(False)
    torch.manual_seed(0)
    plain = tud.DataLoader(_Numbers(), batch_size=2, shuffle=True)
    del_it = iter(plain)
    del del_it
    assert _orders(plain, 2) == want  # torch's own run
    got, rng_end, state, rng = run(True)
    assert got == want and torch.equal(rng_end, want_rng)
    resumed = rl.DataLoader(_Numbers(), batch_size=2, shuffle=True)
    resumed.load_state_dict(state)
    torch.set_rng_state(rng)
    assert _orders(resumed, 2) == want


@pytest.mark.xfail(strict=True, reason="a state_dict() plans the epoch of the last iterator made "
                   "at once, so with two iterators not begun it draws the second's order before "
                   "the first's next() does (torch: the first next() draws first)")
def test_a_state_dict_with_two_iterators_not_begun_keeps_torchs_draw_order():
    def run(checkpoint: bool):
        torch.manual_seed(0)
        loader = rl.DataLoader(_Numbers(), batch_size=2, shuffle=True)
        first, second = iter(loader), iter(loader)
        if checkpoint:
            loader.state_dict()
        return [b.tolist() for b in first], [b.tolist() for b in second]

    assert run(True) == run(False)


def test_batches_of_the_first_of_two_iterators_with_workers_count_toward_its_own_epoch():
    """With workers each iter() plans its epoch at once: the batches of the first iterator count
    toward its own epoch's record, not that of the one made after it (before, the loader's
    latest record took them: the checkpoint named epoch 1 with 2 batches nobody received)."""
    loader = rl.DataLoader(_Numbers(), batch_size=2, num_workers=1)
    first, second = iter(loader), iter(loader)
    assert [next(first).tolist() for _ in range(2)] == [[0, 1], [2, 3]]
    state = loader.state_dict()
    # The epoch begun last (the second's) holds none of the first's batches.
    assert (state["epoch"], state["delivered"]) == (1, 0), state
    rest = [b.tolist() for b in first]
    assert rest == [[4, 5], [6]]
    assert loader.state_dict()["delivered"] == 0  # the second's still, untouched by the first's end
    assert [b.tolist() for b in second] == [[0, 1], [2, 3], [4, 5], [6]]
    assert loader.state_dict()["complete"]


# ---- native clip batches refilled under on_error="skip" with drop_last=True -------------------

video = pytest.mark.skipif(shutil.which("ffmpeg") is None or not rv.video_available()[0],
                           reason="needs the ffmpeg CLI and FFmpeg's libraries")
SAMPLER = clips.random_indices(num_frames_per_clip=4, num_indices_between_frames=2)


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> dict:
    """Twelve 20-frame clips and a cut one (a sample error when read)."""
    if shutil.which("ffmpeg") is None or not rv.video_available()[0]:
        pytest.skip("needs the ffmpeg CLI and FFmpeg's libraries")
    top = tmp_path_factory.mktemp("round7")
    good = [make_clip(top / f"{k}.mp4", 30 * k) for k in range(12)]
    bad = top / "cut.mp4"
    bad.write_bytes(good[0].read_bytes()[: good[0].stat().st_size // 3])
    return {"good": good, "bad": bad}


class _Clips(tud.Dataset):
    """(VideoFile, target): the cut clip at the indices in ``bad``; the target is the index, or
    the string "x" at the indices in ``odd`` (which default_collate cannot put beside ints)."""

    def __init__(self, videos: dict, bad, n: int, odd=()):
        self.videos, self.bad, self.n, self.odd = videos, set(bad), n, set(odd)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import torchvision.transforms.v2 as v2

        path = self.videos["bad"] if i in self.bad else self.videos["good"][i]
        return rv.VideoFile(path, clip=SAMPLER, transform=v2.CenterCrop(16)), ("x" if i in self.odd else i)


def _loader(ds, batch_size: int = 3, **kwargs) -> rl.DataLoader:
    pytest.importorskip("torchvision.transforms.v2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # natively batched
        return rl.DataLoader(ds, batch_size=batch_size, drop_last=True, on_error="skip",
                             generator=torch.Generator().manual_seed(3), **kwargs)


def _targets(batches) -> list:
    return [t.tolist() for _, t in batches]


@video
def test_load_state_dict_between_iter_and_the_first_next_resumes_inside_the_refilled_batch(videos: dict):
    """iter(), then load_state_dict, then next(): that iterator resumes the loaded epoch (its
    plan begins at the first next()), so the clip of the planned batch delivered before the
    checkpoint is not delivered again."""
    ds = _Clips(videos, bad={1, 4}, n=9)
    dl = _loader(ds)
    it = iter(dl)
    assert next(it)[1].tolist() == [0, 2, 3]
    state = dl.state_dict()
    assert (state["delivered"], state["rows"]) == (1, 1)
    resumed = _loader(ds)
    it = iter(resumed)
    resumed.load_state_dict(state)
    assert _targets(it) == [[5, 6, 7]]


@video
def test_an_iterator_made_beside_the_resumed_one_begins_its_epoch_from_the_first_clip(videos: dict):
    """load_state_dict, then two iterators; the second takes the checkpoint (its first next()
    comes first), the first begins the next epoch afresh: no clip of it is dropped for the rows
    the checkpoint had delivered."""
    ds = _Clips(videos, bad={1, 4}, n=9)
    dl = _loader(ds)
    it = iter(dl)
    next(it)
    state = dl.state_dict()
    resumed = _loader(ds)
    resumed.load_state_dict(state)
    first, second = iter(resumed), iter(resumed)
    assert _targets(second) == [[5, 6, 7]]
    assert _targets(first) == [[0, 2, 3], [5, 6, 7]]


@video
@pytest.mark.parametrize("workers", [0, 2], ids=["when-asked", "prefetched"])
def test_a_checkpoint_at_an_error_collating_a_refilled_batch_resumes_at_that_batch(videos: dict, workers: int):
    """Samples 1 and 6 fail: batches [0, 2, 3], [4, 5, 7], then [8, 9, 10], whose targets
    default_collate refuses (9's is a string). A checkpoint taken at that error resumes at that
    batch, as after any batch's error: the record is the one after [4, 5, 7], and a loader over
    the fixed data resumes with [8, 9, 10] (before, the record had moved past the failed batch's
    clips of planned batch 2 but not its count: resuming dropped clip 8)."""
    ds = _Clips(videos, bad={1, 6}, n=12, odd={9})
    dl = _loader(ds, num_workers=workers)
    it = iter(dl)
    assert [next(it)[1].tolist() for _ in range(2)] == [[0, 2, 3], [4, 5, 7]]
    before = dl.state_dict()
    with pytest.raises(TypeError):
        next(it)
    state = dl.state_dict()
    assert (state["delivered"], state["rows"]) == (before["delivered"], before["rows"]) == (2, 1)
    fixed = _loader(_Clips(videos, bad={1, 6}, n=12), num_workers=workers)
    fixed.load_state_dict(state)
    assert _targets(fixed) == [[8, 9, 10]]
    # Going on past the error: the failed batch's clips are passed, the short rest dropped.
    assert _targets(it) == []
    assert dl.state_dict()["complete"]


@video
def test_a_refilled_epoch_resumed_with_a_smaller_batch_size_loses_no_clip(videos: dict):
    ds = _Clips(videos, bad={1, 4}, n=9)
    dl = _loader(ds)
    it = iter(dl)
    next(it)
    state = dl.state_dict()
    smaller = _loader(ds, batch_size=2)
    smaller.load_state_dict(state)
    assert _targets(smaller) == [[5, 6], [7, 8]]
    # A checkpoint after the first of those, itself resumed: the clips after it, once.
    smaller = _loader(ds, batch_size=2)
    smaller.load_state_dict(state)
    it = iter(smaller)
    assert next(it)[1].tolist() == [5, 6]
    again = _loader(ds, batch_size=2)
    again.load_state_dict(smaller.state_dict())
    assert _targets(again) == [[7, 8]]


class _Opaque(tud.Sampler):
    """A sampler with no state_dict(): a checkpoint of its epoch cannot be resumed."""

    def __len__(self) -> int:
        return 9

    def __iter__(self):
        return iter(range(9))


@video
@pytest.mark.parametrize("drop_last", [False, True], ids=["plain", "refilled"])
def test_a_next_after_the_epoch_plan_failed_on_the_batch_thread_ends_the_epoch(videos: dict, drop_last: bool):
    """Clip batches made ahead on their thread: the plan's error (here: a checkpoint whose
    sampler cannot be replayed) ends the epoch, raised by the first next(); the next one is the
    end of the epoch, as for batches made when asked and torch's generators, where it waited for
    a batch that never comes (forever without timeout=; here timeout=5 would raise
    LoaderTimeoutError)."""
    from ringloader import LoaderTimeoutError

    ds = _Clips(videos, bad={1, 4}, n=9)

    def make():
        return rl.DataLoader(ds, batch_size=3, drop_last=drop_last, sampler=_Opaque(), on_error="skip",
                             num_workers=2, timeout=5)

    dl = make()
    it = iter(dl)
    next(it)
    state = dl.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    it = iter(resumed)
    with pytest.raises(ValueError, match="cannot resume"):
        next(it)
    try:
        next(it)
    except LoaderTimeoutError:
        pytest.fail("the next() after the epoch's end waited for a batch")
    except StopIteration:
        pass


@video
def test_a_dropped_clip_batch_of_the_first_of_two_iterators_counts_toward_its_own_epoch(videos: dict):
    """drop_last=False: a planned batch whose every clip failed is dropped and counted as passed
    in the epoch's record; with batches made ahead both iterators plan at iter(), and the first's
    dropped batch counted toward the second's epoch (the loader's latest record)."""
    ds = _Clips(videos, bad={0, 1, 2}, n=9)
    dl = rl.DataLoader(ds, batch_size=3, on_error="skip", num_workers=2)
    first, second = iter(dl), iter(dl)
    assert next(first)[1].tolist() == [3, 4, 5]  # [0, 1, 2] dropped
    state = dl.state_dict()
    assert (state["epoch"], state["delivered"]) == (1, 0), state  # the second's: none received
    assert _targets(second) == [[3, 4, 5], [6, 7, 8]]
