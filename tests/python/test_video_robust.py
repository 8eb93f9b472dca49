"""Natively batched clips under rl.DataLoader when files change and memory is bounded: a video
replaced between epochs is sampled and decoded as it is now (not with the frame table kept from
an earlier epoch), ``max_memory`` bounds the bytes of the clip batches alive at once (the
prefetch depth cut to fit, a budget below one batch refused naming max_memory and the size
needed), and ``on_error="replace"`` puts a substitute clip, drawn deterministically, in a bad
video's row."""

from __future__ import annotations

import os
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader.transforms import clips
from ringloader.sources import video as rv

pytestmark = [
    pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg CLI to make videos"),
    pytest.mark.skipif(not rv.video_available()[0], reason="FFmpeg's libraries are not loadable"),
]


def make(path: Path, frames: int, hue: int = 0, size: str = "32x24") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    f"testsrc2=size={size}:rate=10,trim=end_frame={frames},hue=h={hue}",
                    "-pix_fmt", "yuv420p", "-c:v", "libx264", "-g", "5", str(path)], check=True)
    return path


def loader(dataset, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # natively batched: no FallbackWarning
        return rl.DataLoader(dataset, **kwargs)


@pytest.mark.parametrize("how", ["renamed over", "rewritten in place"])
def test_a_video_replaced_between_epochs_is_sampled_as_it_is_now(tmp_path: Path, how: str):
    """Epoch 0 reads a 20-frame video; before epoch 1 it is replaced by a 40-frame one (a new
    file renamed over it, or the same file rewritten): epoch 1's frame indices follow the new
    length and its pixels are the new file's."""
    sampler = clips.regular_indices(num_clips=2, num_frames_per_clip=4)  # clips at both ends
    video = make(tmp_path / "v" / "a" / "x.mp4", frames=20)
    dl = loader(rl.VideoFolder(tmp_path / "v", clip=sampler), batch_size=1, num_workers=1)
    (first, _), = list(dl)
    assert torch.equal(first[0], rv.VideoFile(video).decode(sampler))
    longer = make(tmp_path / "longer.mp4", frames=40, hue=90)
    if how == "renamed over":
        os.replace(longer, video)
    else:
        video.write_bytes(longer.read_bytes())
    (second, _), = list(dl)
    fresh = rv.VideoFile(video)
    assert fresh.metadata.num_frames == 40
    assert sampler.frame_indices(fresh.metadata.clip_meta()) == [[0, 1, 2, 3], [36, 37, 38, 39]]
    assert torch.equal(second[0], fresh.decode(sampler))
    assert not torch.equal(second, first)


class Repeated(torch.utils.data.Dataset):
    """``count`` samples cycling over ``paths``: (VideoFile, i % 2)."""

    def __init__(self, paths, count, **reference):
        self.paths, self.count, self.reference = paths, count, reference

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        return rl.VideoFile(self.paths[i % len(self.paths)], **self.reference), i % 2


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> list:
    top = tmp_path_factory.mktemp("videos")
    return [str(make(top / f"{k}.mp4", frames=20, hue=40 * k, size="64x48")) for k in range(3)]


CLIP = clips.random_indices(num_frames_per_clip=8)
SLOT = 2 * (8 * 3 * 48 * 48) + 2 * 16  # batch_size 2: the clips, and the targets' share


def peak_while_iterating(dl) -> int:
    """Bytes allocated at once (numpy and Python, as tracemalloc sees them) during an epoch
    whose training step is slower than the decode, so the producer runs as far ahead as it may.
    A first epoch beforehand: imports and caches are not counted."""
    import time
    import tracemalloc

    for _ in dl:
        pass
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i, _ in enumerate(dl):
            time.sleep(0.3 if i == 0 else 0.02)  # the producer fills what it may
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_max_memory_bounds_the_clip_batches_alive(videos):
    import torchvision.transforms.v2 as v2

    ds = Repeated(videos, 24, clip=CLIP, transform=v2.CenterCrop(48))
    budget = 3 * SLOT + SLOT // 2
    with pytest.warns(UserWarning, match="prefetch_factor=8 does not fit the memory budget"):
        dl = rl.DataLoader(ds, batch_size=2, num_workers=2, prefetch_factor=8, max_memory=budget)
    assert "3 clip batch slots" in dl.describe() and "prefetch 8 -> 2 batches" in dl.describe()
    peak = peak_while_iterating(dl)
    memory = dl.stats()["video"]["memory"]
    assert memory["max_slots"] == 3 and memory["depth"] == 2
    assert 2 * (SLOT - 32) <= memory["peak_bytes"] <= 3 * SLOT and peak <= budget
    # The same loop without the bound holds the 8 batches queued and more: the measure sees it.
    unbounded = loader(ds, batch_size=2, num_workers=2, prefetch_factor=8, max_memory=100 * SLOT)
    assert "prefetch 8 (" in unbounded.describe() and "->" not in unbounded.describe()
    assert peak_while_iterating(unbounded) > 6 * SLOT


def test_max_memory_below_two_clip_batches_is_refused_naming_it(videos):
    import torchvision.transforms.v2 as v2

    ds = Repeated(videos, 6, clip=CLIP, transform=v2.CenterCrop(48))
    with pytest.raises(ValueError, match=r"max_memory=100000 bytes holds 0 batch slots") as info:
        loader(ds, batch_size=2, num_workers=1, max_memory=100_000)
    assert f"Raise max_memory to at least {2 * SLOT} bytes" in str(info.value)


def test_batches_kept_past_max_memory_raise_slots_exhausted(videos):
    import torchvision.transforms.v2 as v2

    ds = Repeated(videos, 12, clip=CLIP, transform=v2.CenterCrop(48))
    for workers in (0, 2):  # made when asked, or ahead on a thread
        it = iter(loader(ds, batch_size=2, num_workers=workers, max_memory=3 * SLOT))
        kept = [next(it) for _ in range(3)]
        with pytest.raises(rl.SlotsExhaustedError, match="max_memory"):
            next(it)
        del kept[0]  # one freed: nothing was lost, the epoch goes on to its 6 batches
        assert next(it)[0].shape == (2, 1, 8, 3, 48, 48)
        kept.clear()
        assert len(list(it)) == 2


@pytest.fixture(scope="module")
def truncated(tmp_path_factory) -> Path:
    """Two classes of three clips, a/1.mp4 cut to its first third (its index is gone)."""
    top = tmp_path_factory.mktemp("truncated")
    for c, label in enumerate("ab"):
        for k in range(3):
            make(top / label / f"{k}.mp4", frames=20, hue=60 * (3 * c + k))
    bad = top / "a" / "1.mp4"
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 3])
    return top


def test_on_error_replace_gives_a_bad_clip_row_a_substitute(truncated: Path):
    """The truncated video's row gets the clip of the first substitute the native loader would
    try for an image in that row (_C.replace_candidates of the row's seed), decoded with the
    row's own clip draws; the batch keeps its size, the same every time, counted as replaced."""
    import torchvision.transforms.v2 as v2

    from ringloader import _C

    sampler = clips.random_indices(num_frames_per_clip=4, num_indices_between_frames=2)
    folder = rl.VideoFolder(truncated, clip=sampler, transform=v2.CenterCrop(16))

    def run():
        dl = loader(folder, batch_size=3, num_workers=2, on_error="replace",
                    generator=torch.Generator().manual_seed(4))
        batches = iter(dl)
        first = next(batches)
        seed = dl.state_dict()["base_seed"]  # the epoch's seed, during the epoch
        return [first] + list(batches), seed, dl.stats()["video"]

    batches, seed, stats = run()
    assert [tuple(c.shape) for c, _ in batches] == [(3, 1, 4, 3, 16, 16)] * 2
    assert stats["replaced"] == 1 and stats["skipped"] == 0
    row_seed = _C.sample_seed(seed, 0, _C.row_key(1, 1))  # sample 1 at position 1, epoch 0
    substitute = next(i for i in _C.replace_candidates(row_seed, len(folder)) if i != 1)
    video, label = folder[substitute]
    expected = v2.CenterCrop(16)(video.decode(generator=clips.generator_for(seed, 0, 1, 1)))
    clip, labels = batches[0]
    assert torch.equal(clip[1], expected) and labels[1].item() == label
    again, seed_again, _ = run()
    assert seed_again == seed and all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
                                      for a, b in zip(batches, again))
    # Without a substitute that decodes, the clip's own error stands, naming the file.
    lonely = rl.VideoFolder(truncated, clip=sampler, transform=v2.CenterCrop(16),
                            is_valid_file=lambda p: p.endswith("1.mp4") and "/a/" in p,
                            allow_empty=True)
    with pytest.raises((ValueError, RuntimeError), match="1.mp4"):
        next(iter(loader(lonely, batch_size=1, on_error="replace")))


class Slow(Repeated):
    """Repeated, whose next ``__getitem__`` takes ``delay`` seconds (a clip slow to make)."""

    delay = 0.0

    def __getitem__(self, i):
        import time

        delay, self.delay = self.delay, 0.0
        time.sleep(delay)
        return super().__getitem__(i)


def _producers_gone() -> None:
    import threading

    for thread in threading.enumerate():
        if thread.name == "ringloader-video-batches":
            thread.join(5)


def test_a_loop_left_while_the_decoder_waited_for_room_does_not_exhaust_the_next_epoch(videos):
    """A loop left (break) while the decoder waited for a kept batch's bytes, its last batch
    still bound: the next epoch's first next(), slower than the consumer's poll, is a batch,
    not SlotsExhaustedError (the wait of the stopped decoder is over)."""
    import time

    import torchvision.transforms.v2 as v2

    ds = Slow(videos, 12, clip=CLIP, transform=v2.CenterCrop(48))
    dl = loader(ds, batch_size=2, num_workers=1, max_memory=3 * SLOT)
    it = iter(dl)
    kept = next(it)
    deadline = time.monotonic() + 10
    while dl.stats()["video"]["memory"]["held_bytes"] < 3 * (SLOT - 32) and time.monotonic() < deadline:
        time.sleep(0.02)  # the queue filled: the decoder waits for the kept batch's bytes
    time.sleep(0.3)
    del it  # the loop left, `kept` still bound (as a for loop's variable is)
    _producers_gone()
    ds.delay = 1.5  # the next epoch's first batch takes longer than the consumer's poll
    clip, _ = next(iter(dl))
    assert clip.shape == (2, 1, 8, 3, 48, 48) and kept[0].shape == clip.shape


@pytest.mark.parametrize("workers", [0, 1])
def test_next_after_a_bad_clip_raised_goes_on_as_torch(tmp_path: Path, videos, workers: int):
    """on_error="raise": the bad clip's batch raises, naming the file, and the next next()
    gives the following batch, as torch's DataLoader does after a sample's error (made when
    asked or ahead on a thread alike), never a wait without end."""
    paths = [videos[0], str(tmp_path / "missing.mp4"), videos[1]]
    ds = Repeated(paths, 6, clip=CLIP)
    dl = loader(ds, batch_size=1, num_workers=workers, **({"timeout": 10} if workers else {}))
    it, got = iter(dl), []
    for _ in range(6):
        try:
            got.append(next(it)[1].item())
        except FileNotFoundError as error:
            assert "missing.mp4" in str(error)
            got.append(None)
    assert got == [0, None, 0, 1, None, 1]
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_checkpoint_after_going_on_past_a_bad_batch_resumes_after_the_last_batch_received(
        tmp_path: Path, videos, workers: int):
    """A caller that goes on past a bad clip's error (as torch allows) and checkpoints: the
    resumed epoch starts after the last batch it received, never repeating one; the failed
    batch's position counts as passed."""
    paths = [videos[0], str(tmp_path / "missing.mp4"), videos[1], videos[2]]
    ds = Repeated(paths, 4, clip=CLIP)
    extra = {"timeout": 10} if workers else {}
    dl = loader(ds, batch_size=1, num_workers=workers, **extra)
    it = iter(dl)
    assert next(it)[1].tolist() == [0]
    with pytest.raises(FileNotFoundError):
        next(it)
    assert dl.state_dict()["delivered"] == 1  # a checkpoint at the error resumes at its batch
    assert next(it)[1].tolist() == [0]  # sample 2
    state = dl.state_dict()
    assert state["delivered"] == 3 and not state["complete"]
    resumed = loader(ds, batch_size=1, num_workers=workers, **extra)
    resumed.load_state_dict(state)
    assert [y.tolist() for _, y in resumed] == [[1]]  # sample 3 only


class Failing(torch.utils.data.Dataset):
    """Six numbers, sample ``bad`` raising (torch's generic path)."""

    bad = 1

    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i == self.bad:
            raise KeyError(f"sample {i} is bad")
        return i


def test_an_error_through_a_wrapped_generic_iterator_does_not_mark_the_epoch_complete():
    """torch's generic path with a timeout (its batches pass a wrapper that renames torch's
    timeout error): after a sample's error the epoch is not recorded complete, and a checkpoint
    resumes after the batches received (at the failed one, tried again, when the epoch ended at
    the error)."""
    dl = rl.DataLoader(Failing(), batch_size=1, num_workers=1, timeout=10)
    it = iter(dl)
    assert next(it).tolist() == [0]
    with pytest.raises(KeyError):
        next(it)
    try:
        got = [next(it).tolist()]  # torch goes on past a sample's error
    except StopIteration:
        got = []
    state = dl.state_dict()
    start = 3 if got else 1
    assert not state["complete"] and state["delivered"] == start
    mended = Failing()
    mended.bad = -1
    resumed = rl.DataLoader(mended, batch_size=1)
    resumed.load_state_dict(state)
    assert [b.tolist() for b in resumed] == [[i] for i in range(start, 6)]


class Sleepy(Failing):
    """Failing, whose sample ``slow`` takes 3 s (torch's worker misses a 2 s timeout)."""

    bad, slow = -1, 1

    def __getitem__(self, i):
        import time

        if i == self.slow:
            time.sleep(3)
        return super().__getitem__(i)


def test_a_timeout_through_a_wrapped_generic_iterator_does_not_mark_the_epoch_complete():
    """torch's timeout, renamed LoaderTimeoutError by the wrapper generator: the iteration ends
    there (the generator is over), but the epoch is not recorded complete: a checkpoint resumes
    at the batch that timed out."""
    dl = rl.DataLoader(Sleepy(), batch_size=1, num_workers=1, timeout=2)
    it = iter(dl)
    assert next(it).tolist() == [0]
    with pytest.raises(rl.LoaderTimeoutError):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    state = dl.state_dict()
    assert not state["complete"] and state["delivered"] == 1
    del it
