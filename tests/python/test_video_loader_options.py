"""rl.DataLoader's own arguments over native clip batches (ringloader.video_batches): device= and
timeout= keep on_error="skip" going past a bad clip, the clip plan made on the prefetch thread
leaves torch's global RNG alone, and pin_memory=True pins the batches when CUDA is there."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader.transforms import clips

from videogen import NEEDS_VIDEO, SAMPLER, class_folder_with_a_cut_clip

pytestmark = NEEDS_VIDEO
v2 = pytest.importorskip("torchvision.transforms.v2")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Two classes of three 20-frame 32x24 H.264 clips; a/1.mp4 cut to its first third."""
    return class_folder_with_a_cut_clip(tmp_path_factory.mktemp("options"), 3)


def loader(dataset, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", rl.FallbackWarning)  # natively batched: no FallbackWarning
        return rl.DataLoader(dataset, generator=torch.Generator().manual_seed(5), **kwargs)


def delivered(dl) -> list:
    return [(clip, target.tolist()) for clip, target in dl]


@pytest.mark.parametrize("workers, extra", [(0, {"device": "cpu"}), (2, {"device": "cpu"}), (2, {"timeout": 30}),
                                           (2, {"device": "cpu", "timeout": 30})],
                         ids=["device-when-asked", "device-ahead", "timeout", "both"])
def test_skip_goes_past_a_bad_clip_with_device_or_timeout(folder: Path, workers: int, extra: dict):
    """timeout= needs num_workers > 0 (torch's rule)."""
    ds = rl.VideoFolder(folder, clip=SAMPLER, transform=v2.CenterCrop(16))
    plain = delivered(loader(ds, batch_size=2, num_workers=workers, on_error="skip"))
    assert [t for _, t in plain] == [[0], [0, 1], [1, 1]]  # a/1.mp4 dropped from the first batch
    got = delivered(loader(ds, batch_size=2, num_workers=workers, on_error="skip", **extra))
    assert [t for _, t in got] == [t for _, t in plain]
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(got, plain))


@pytest.mark.parametrize("sampler", [SAMPLER, clips.random_timestamps(num_frames_per_clip=4)],
                         ids=["indices", "timestamps"])
def test_clip_plans_on_the_prefetch_thread_leave_torchs_global_rng_alone(folder: Path, sampler):
    """The clip sampler's draws come from each sample's keyed generator and the loader's own
    generator: a seeded torch.rand in the main thread gives the same numbers whether or not
    a video loader iterated meanwhile (made ahead on the prefetch thread, or when asked; a bad
    clip replaced, its substitute planned with the row's draws)."""
    ds = rl.VideoFolder(folder, clip=sampler, transform=v2.Compose([v2.RandomResizedCrop(16),
                                                                    v2.RandomHorizontalFlip()]))
    torch.manual_seed(1234)
    expected = torch.rand(8)
    for workers in (0, 2):
        dl = loader(ds, batch_size=2, num_workers=workers, on_error="replace")
        torch.manual_seed(1234)
        assert len(delivered(dl)) == 3
        assert torch.equal(torch.rand(8), expected), f"num_workers={workers}"


def _told_unpinned():
    """Without a GPU, pin_memory=True warns as torch's loader does; with one, nothing."""
    import contextlib

    return contextlib.nullcontext() if torch.cuda.is_available() else \
        pytest.warns(UserWarning, match="pin_memory=True ignored: no CUDA GPU is visible")


def test_pin_memory_is_accepted_and_pins_when_cuda_is_there(folder: Path):
    ds = rl.VideoFolder(folder, clip=SAMPLER, transform=v2.CenterCrop(16))
    plain = delivered(loader(ds, batch_size=2, num_workers=2, on_error="skip"))
    with _told_unpinned():
        pinned = loader(ds, batch_size=2, num_workers=2, on_error="skip", pin_memory=True)
    got = [(clip, target) for clip, target in pinned]
    assert [t.tolist() for _, t in got] == [t for _, t in plain]
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(got, plain))
    cuda = torch.cuda.is_available()
    assert all(c.is_pinned() == cuda and t.is_pinned() == cuda for c, t in got)


def test_pin_memory_reaches_the_clip_batches(folder: Path, monkeypatch):
    """Without a GPU here the pinned allocation itself cannot run: what is tested is that
    pin_memory=True reaches the native clip batches and asks for pinned memory exactly when
    torch.cuda.is_available() says CUDA is there."""
    from ringloader.loader import video_batches

    ds = rl.VideoFolder(folder, clip=SAMPLER, transform=v2.CenterCrop(16))
    with _told_unpinned():
        assert not loader(ds, batch_size=2, pin_memory=True)._backend._video.pin_memory or torch.cuda.is_available()
    monkeypatch.setattr(video_batches, "_cuda_available", lambda: True)
    assert loader(ds, batch_size=2, pin_memory=True)._backend._video.pin_memory
    assert not loader(ds, batch_size=2)._backend._video.pin_memory


def test_pinned_batches_are_views_of_torchs_tensor_and_release_their_bytes(folder: Path, monkeypatch):
    """The pinned branch's batch is a view of the tensor torch allocated (so a non_blocking copy
    records its stream on torch's allocation), equal to the plain batch, and its bytes go back
    to max_memory when the last view goes, a slice included. Run here with the pin flag dropped
    (no GPU to pin)."""
    import gc
    import weakref

    from ringloader.loader import video_batches

    allocated = []
    real_empty = torch.empty

    def empty(*args, pin_memory=False, **kwargs):
        t = real_empty(*args, **kwargs)
        if pin_memory:
            allocated.append(weakref.ref(t.untyped_storage()))
        return t

    ds = rl.VideoFolder(folder, clip=SAMPLER, transform=v2.CenterCrop(16))
    plain = [clip for clip, _ in loader(ds, batch_size=2, on_error="skip")]
    monkeypatch.setattr(video_batches, "_cuda_available", lambda: True)
    monkeypatch.setattr(torch, "empty", empty)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *args, **kwargs: self)  # the targets
    pinned = loader(ds, batch_size=2, on_error="skip", pin_memory=True)
    slices = []
    for clip, _ in pinned:
        # torch's own storage, not another one over the same memory
        assert any(ref() is clip.untyped_storage() for ref in allocated)
        slices.append(clip[1:])  # a slice keeps the batch's bytes held
    assert len(slices) == len(plain) and all(torch.equal(a[1:], b) for a, b in zip(plain, slices))
    assert pinned.stats()["video"]["memory"]["held_bytes"] > 0
    del clip, slices
    gc.collect()
    assert pinned.stats()["video"]["memory"]["held_bytes"] == 0


def test_a_sampler_that_fails_raises_its_own_error_with_batches_made_ahead(folder: Path):
    """The epoch's plan begins at iter() on the caller's thread; its error is raised by the first
    next() as the error itself (before, a NameError from the handler's deleted name)."""

    class Failing(torch.utils.data.Sampler):
        def __init__(self):
            pass

        def __len__(self):
            return 6

        def __iter__(self):
            raise ValueError("the sampler's own error")
            yield 0  # pragma: no cover

    ds = rl.VideoFolder(folder, clip=SAMPLER, transform=v2.CenterCrop(16))
    dl = loader(ds, batch_size=2, num_workers=2, on_error="skip", sampler=Failing())
    assert dl._backend._video is not None  # natively batched
    with pytest.raises(ValueError, match="the sampler's own error"):
        next(iter(dl))
