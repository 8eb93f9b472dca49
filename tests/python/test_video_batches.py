"""Native video batches (ringloader.video_batches over _C.ClipPool): clips decoded in native
threads into one batch tensor, v2's video transforms run natively with one draw per clip and
pixels equal to v2 on the decoded tv_tensors.Video for the same draws (torch's uint8 antialiased
bilinear: max |diff| 0), the same batch for any thread count, bad videos under on_error naming
the file and the frame, the frame-size limit, and the decode work in stats()."""

from __future__ import annotations

import gc
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader import _C
from ringloader.transforms import clips
from ringloader.sources import video as rv
from typing import NamedTuple

pytestmark = [
    pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg CLI to make videos"),
    pytest.mark.skipif(not rv.video_available()[0], reason="FFmpeg's libraries are not loadable"),
]
v2 = pytest.importorskip("torchvision.transforms.v2")
vb = pytest.importorskip("ringloader.video_batches")
from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402

class SampleKey(NamedTuple):  # what the DataLoader's generic path hands a keyed source
    index: int
    seed: int
    epoch: int
    position: int


SAMPLER = clips.random_indices(num_clips=1, num_frames_per_clip=4, num_indices_between_frames=3)
MEAN, STD = [0.43, 0.4, 0.38], [0.23, 0.22, 0.22]


def make(path: Path, size: str = "96x72", frames: int = 30, gop: int = 10) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    f"testsrc2=size={size}:rate=10,trim=end_frame={frames}", "-pix_fmt", "yuv420p",
                    "-c:v", "libx264", "-bf", "2", "-g", str(gop), str(path)], check=True)
    return path


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    top = tmp_path_factory.mktemp("clips")
    for c, label in enumerate(("a", "b")):
        for k in range(3):
            make(top / label / f"{k}.mp4", size=("96x72", "90x64")[k % 2])
    return top


def keys(n, seed=7, epoch=0):
    return [SampleKey(i, seed, epoch, p) for p, i in enumerate(n)]


def apply_plan(frames: torch.Tensor, plan) -> torch.Tensor:
    """v2's kernels on the decoded video, with the native draws."""
    video = tv_tensors.Video(frames)
    for kind, top, left, h, w in plan:
        if kind == "crop":
            video = F.crop(video, top, left, h, w)
        elif kind == "resize":
            video = F.resize(video, [h, w], antialias=True)
        else:
            video = F.horizontal_flip(video)
    return video


CHAINS = [
    v2.Compose([v2.RandomResizedCrop(40), v2.RandomHorizontalFlip()]),
    v2.Compose([v2.Resize(50), v2.CenterCrop(44)]),
    v2.Compose([v2.RandomHorizontalFlip(p=1.0), v2.Resize((31, 77)), v2.RandomCrop(30)]),
    v2.Compose([v2.Resize(130, max_size=150), v2.RandomCrop((20, 64))]),
]


@pytest.mark.parametrize("chain", range(len(CHAINS)))
def test_native_chain_equals_v2_on_the_decoded_video(root: Path, chain: int):
    folder = rl.VideoFolder(root, clip=SAMPLER, transform=CHAINS[chain])
    source = vb.VideoClipBatches(folder, threads=2)
    ks = keys(range(len(folder)))
    for key in ks:
        batch, target = source[[key]]
        ref = folder[key.index][0]
        meta = ref.metadata
        frames = rv.VideoFile(ref.path).decode(
            SAMPLER, generator=clips.generator_for(key.seed, key.epoch, key.index, key.position))
        seed = _C.sample_seed(key.seed, key.epoch, _C.row_key(key.index, key.position))
        plan = _C.video_chain_plan(source.steps, meta.width, meta.height, seed)
        expected = apply_plan(frames, plan)  # one draw for every frame of the clip
        assert batch.dtype == torch.uint8 and batch.shape == (1,) + tuple(expected.shape)
        assert (batch[0].int() - expected.int()).abs().max().item() == 0
        assert target.tolist() == [folder.targets[key.index]]


def test_resize_equals_torch_for_many_sizes(tmp_path: Path):
    """torch's uint8 antialiased bilinear, up and down, odd sizes, one axis or both."""
    path = make(tmp_path / "v" / "x" / "odd.mp4", size="97x61", frames=3, gop=3)
    frames = rv.VideoFile(path).decode([0, 2])
    for size in [(61, 40), (30, 97), (17, 23), (120, 200), (61, 97), (5, 300), (2, 3)]:
        folder = rl.VideoFolder(tmp_path / "v", clip=[0, 2], transform=v2.Resize(size))
        batch, _ = vb.VideoClipBatches(folder, threads=1)[keys([0])]
        expected = F.resize(tv_tensors.Video(frames), list(size), antialias=True)
        assert torch.equal(batch[0], expected.as_subclass(torch.Tensor)), size


def test_float_output_normalized_as_v2(root: Path):
    transform = v2.Compose([v2.CenterCrop(48), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    folder = rl.VideoFolder(root, clip=[[1, 5, 9]], transform=transform)
    batch, targets = vb.VideoClipBatches(folder, threads=2)[keys([0, 4])]
    assert batch.dtype == torch.float32 and batch.shape == (2, 1, 3, 3, 48, 48)
    for row, index in enumerate([0, 4]):
        ref = folder[index][0]
        expected = transform(tv_tensors.Video(rv.VideoFile(ref.path).decode([[1, 5, 9]])))
        assert torch.equal(batch[row], expected.as_subclass(torch.Tensor))


def test_same_batch_for_any_thread_count_and_new_draws_per_epoch(root: Path):
    transform = v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip()])
    folder = rl.VideoFolder(root, clip=SAMPLER, transform=transform)
    one = vb.VideoClipBatches(folder, threads=1)[keys(range(6))][0]
    three = vb.VideoClipBatches(folder, threads=3)[keys(range(6))][0]
    assert torch.equal(one, three)
    other = vb.VideoClipBatches(folder, threads=3)[keys(range(6), epoch=1)][0]
    assert not torch.equal(one, other)


def test_one_source_batched_from_two_threads_at_once(root: Path):
    """Two iterators of one loader each batch on their prefetch thread from the same source:
    their calls take turns on its pool, so each batch holds its own keys' clips."""
    transform = v2.Compose([v2.RandomResizedCrop(24), v2.RandomHorizontalFlip()])
    folder = rl.VideoFolder(root, clip=SAMPLER, transform=transform)
    expected = {s: vb.VideoClipBatches(folder, threads=1)[keys(range(6), seed=s)][0] for s in range(4)}
    source = vb.VideoClipBatches(folder, threads=2)
    equal, errors = [], []

    def batches(seed):
        try:
            for _ in range(5):
                equal.append(torch.equal(source[keys(range(6), seed=seed)][0], expected[seed]))
        except Exception as error:  # noqa: BLE001 - asserted below
            errors.append(error)

    threads = [threading.Thread(target=batches, args=(s,), daemon=True) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert not any(t.is_alive() for t in threads) and errors == []
    assert equal == [True] * 20


@pytest.mark.parametrize("batches", [2, 6])
def test_prefetch_thread_ends_when_its_iterator_is_left(root: Path, batches: int):
    """A loop left (break) with batches queued, after the last one was made (2) or before (6):
    once the iterator is dropped its prefetch thread goes instead of waiting forever for room
    in the queue, holding its batches and the source."""
    folder = rl.VideoFolder(root, clip=[[0, 1]], transform=v2.CenterCrop(32))
    loader = vb.NativeVideoLoader(vb.VideoClipBatches(folder, threads=1), [keys([i % 6]) for i in range(batches)],
                                  prefetch=1, timeout=10)
    it = iter(loader)
    next(it)
    thread, queued = it._thread, it._queue
    deadline = time.monotonic() + 10
    while queued.qsize() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # the next batch is queued: the thread waits for room
    del it
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_stats_count_frames_decoded_per_frame_kept(root: Path):
    folder = rl.VideoFolder(root, clip=SAMPLER, transform=v2.CenterCrop(32))
    source = vb.VideoClipBatches(folder, threads=2)
    source[keys(range(6))]
    stats = source.stats()
    assert stats["clips"] == 6 and stats["frames_kept"] == 6 * 4
    assert stats["frames_decoded"] >= stats["frames_kept"]
    assert stats["frames_decoded_per_kept"] == stats["frames_decoded"] / stats["frames_kept"]


def test_not_native_transforms_say_why():
    assert vb.native_chain(v2.ColorJitter(0.3))[1] == "ColorJitter has no native video equivalent"
    why = vb.native_chain(v2.Resize(20, interpolation=v2.InterpolationMode.NEAREST))[1]
    assert "bilinear" in why
    why = vb.native_chain(v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.CenterCrop(4)]))[1]
    assert "CenterCrop follows ToDtype" in why


@pytest.fixture
def damaged(tmp_path: Path, root: Path) -> Path:
    top = tmp_path / "damaged"
    shutil.copytree(root, top)
    bad = top / "a" / "1.mp4"
    data = bad.read_bytes()
    # Keep the header (moov at the end is gone: truncated) -> FFmpeg cannot read it.
    bad.write_bytes(data[: len(data) // 3])
    return top


def test_damaged_video_raises_naming_file_and_sample(damaged: Path):
    folder = rl.VideoFolder(damaged, clip=SAMPLER, transform=v2.CenterCrop(32))
    source = vb.VideoClipBatches(folder, threads=2)
    with pytest.raises((ValueError, RuntimeError)) as info:
        source[keys(range(6))]
    text = str(info.value) + " ".join(getattr(info.value, "__notes__", []))
    assert "1.mp4" in text and "sample 1" in text


def test_damaged_video_raised_again_names_only_that_sample(damaged: Path):
    """Each epoch that meets the bad file raises an error with the one note of its own sample,
    not the notes (and tracebacks) of every earlier raise piled on one cached error."""
    folder = rl.VideoFolder(damaged, clip=SAMPLER, transform=v2.CenterCrop(32))
    source = vb.VideoClipBatches(folder, threads=1)
    for epoch in range(2):
        with pytest.raises((ValueError, RuntimeError)) as info:
            source[keys([1], epoch=epoch)]
        assert len(info.value.__notes__) == 1 and "sample 1" in info.value.__notes__[0]


def test_damaged_video_skipped(damaged: Path):
    folder = rl.VideoFolder(damaged, clip=SAMPLER, transform=v2.CenterCrop(32))
    source = vb.VideoClipBatches(folder, threads=2, on_error="skip")
    batch, targets = source[keys(range(6))]
    assert batch.shape[0] == 5 and targets.tolist() == [0, 0, 1, 1, 1]
    assert source.stats()["skipped"] == 1


def test_a_video_smaller_than_the_crop_names_the_file_and_is_skipped(tmp_path: Path):
    make(tmp_path / "v" / "a" / "big.mp4", size="96x72", frames=3, gop=3)
    make(tmp_path / "v" / "a" / "small.mp4", size="32x24", frames=3, gop=3)
    folder = rl.VideoFolder(tmp_path / "v", clip=[[0, 1]], transform=v2.CenterCrop(40))
    with pytest.raises(ValueError, match="small.mp4") as info:
        vb.VideoClipBatches(folder, threads=1)[keys([0, 1])]
    assert "sample 1" in " ".join(info.value.__notes__)
    source = vb.VideoClipBatches(folder, threads=1, on_error="skip")
    batch, targets = source[keys([0, 1])]
    assert batch.shape[0] == 1 and targets.tolist() == [0] and source.stats()["skipped"] == 1


def test_a_video_too_short_for_its_clip_names_the_file_and_is_skipped(tmp_path: Path):
    """policy='error': a clip past the end of one video is that clip's error, as in a decode."""
    make(tmp_path / "v" / "a" / "long.mp4", frames=30)
    make(tmp_path / "v" / "a" / "short.mp4", frames=5)
    sampler = clips.random_indices(num_clips=1, num_frames_per_clip=8, num_indices_between_frames=2,
                                   policy="error")
    folder = rl.VideoFolder(tmp_path / "v", clip=sampler, transform=v2.CenterCrop(32))
    with pytest.raises(ValueError, match="short.mp4") as info:
        vb.VideoClipBatches(folder, threads=1)[keys([0, 1])]
    assert "sample 1" in " ".join(info.value.__notes__)
    source = vb.VideoClipBatches(folder, threads=1, on_error="skip")
    batch, targets = source[keys([0, 1])]
    assert batch.shape[0] == 1 and targets.tolist() == [0] and source.stats()["skipped"] == 1


def test_corrupt_frame_names_the_frame(tmp_path: Path):
    path = make(tmp_path / "c" / "x" / "v.mp4", frames=30, gop=30)
    data = bytearray(path.read_bytes())
    mdat = data.find(b"mdat")
    for at in range(mdat + 2000, min(len(data) - 2000, mdat + 40000), 97):
        data[at] ^= 0xFF  # garble the coded frames, keep the container
    path.write_bytes(bytes(data))
    folder = rl.VideoFolder(tmp_path / "c", clip=list(range(30)))
    try:
        vb.VideoClipBatches(folder, threads=1)[keys([0])]
    except (RuntimeError, ValueError) as error:
        assert "v.mp4" in str(error)
        assert "frame" in str(error)
    else:
        pytest.skip("FFmpeg concealed the damage in this build (no error to name)")


@pytest.mark.parametrize("limit", [{"max_frame_pixels": 1000}, {"max_clip_bytes": 1000}])
def test_frame_and_clip_memory_limits_are_clear_errors(root: Path, limit):
    """Decompression-bomb guards: a frame over max_frame_pixels, a clip over max_clip_bytes."""
    class Small(torch.utils.data.Dataset):
        def __init__(self):
            self.folder = rl.VideoFolder(root)

        def __len__(self):
            return len(self.folder)

        def __getitem__(self, i):
            path, target = self.folder.samples[i]
            return rl.VideoFile(path, clip=[0, 1], **limit), target

    with pytest.raises(ValueError, match="0.mp4") as info:
        vb.VideoClipBatches(Small(), threads=1)[keys([0])]
    assert "1000" in str(info.value)
    batch, targets = vb.VideoClipBatches(Small(), threads=1, on_error="skip")[keys([0, 1])]
    assert batch.shape[0] == 0 and targets.numel() == 0


def test_a_forked_child_drops_its_copy_of_a_pool(root: Path):
    """A process forked beside a running pool (torch's workers) has none of its threads: its copy
    must go without joining them or waiting on the parent's locks."""
    import os
    import time

    pool = _C.ClipPool(2, rv.MAX_FRAME_PIXELS, rv.MAX_CLIP_BYTES)
    pool.probe([str(p) for p in sorted(root.rglob("*.mp4"))], [])  # threads busy once, decoders open
    pid = os.fork()
    if pid == 0:  # the child: drop its copy (the destructor runs here), then exit at once
        code = 1
        try:
            del pool
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child hung dropping its copy of the pool")


def test_samples_with_another_transform_are_refused_by_name(root: Path):
    """One batch runs one chain: an equal chain in another object is fine, another chain is
    refused naming the sample (never the first sample's transform applied to it silently)."""
    folder = rl.VideoFolder(root)

    class PerSample(torch.utils.data.Dataset):
        def __init__(self, size_of):
            self.size_of = size_of

        def __len__(self):
            return len(folder)

        def __getitem__(self, i):
            path, target = folder.samples[i]
            return rl.VideoFile(path, clip=[0, 1], transform=v2.CenterCrop(self.size_of(i))), target

    batch, _ = vb.VideoClipBatches(PerSample(lambda i: 16), threads=1)[keys(range(4))]
    assert batch.shape == (4, 2, 3, 16, 16)
    with pytest.raises(ValueError, match="sample 3 ") as info:
        vb.VideoClipBatches(PerSample(lambda i: 16 + (i == 3)), threads=1)[keys(range(4))]
    assert folder.samples[3][0] in str(info.value) and "not sample 0's" in str(info.value)


def test_memory_videos_stay_exported_until_their_decode_returns(tmp_path: Path):
    """Clips from memory (bytes handed to ClipPool.decode) are read by native threads after the
    GIL is dropped: the binding holds each object's buffer until the decode returns, so a
    bytearray cannot be resized (and its bytes freed) under a running decode. The decode is held
    open on a FIFO as its second clip (its open blocks until a writer comes), so the resize is
    tried while the first clip's job still points into the bytearray."""
    import os

    import numpy as np

    data = bytearray(make(tmp_path / "clip.mp4").read_bytes())
    fifo = tmp_path / "held.mp4"
    os.mkfifo(fifo)
    pool = _C.ClipPool(1, rv.MAX_FRAME_PIXELS, rv.MAX_CLIP_BYTES)  # one thread: the clips in order
    out = np.zeros((2, 4, 3, 72, 96), dtype=np.uint8)
    results, errors = [], []

    def decode():
        try:
            results.extend(pool.decode(["memory.mp4", str(fifo)], [data, None], [[0, 3, 6, 9]] * 2, [1, 2],
                                       [], None, out, 72, 96))
        except Exception as error:  # noqa: BLE001 - asserted below
            errors.append(error)

    thread = threading.Thread(target=decode, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while True:  # the FIFO opens for writing once the decode opens it for reading
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:
            assert time.monotonic() < deadline and thread.is_alive(), "the decode never opened the FIFO"
            time.sleep(0.01)
    try:
        with pytest.raises(BufferError):
            data.extend(b"\0" * (1 << 20))
    finally:
        os.close(writer)
        thread.join(timeout=15)
    assert not thread.is_alive() and errors == []
    (first, _, kept), (second, _, _) = results
    assert first is None and kept == 4
    assert isinstance(second, ValueError) and str(fifo) in str(second) and "not a regular file" in str(second)
    expected, _, _ = _C.VideoDecoder.from_bytes(bytes(data), "clip.mp4", rv.MAX_FRAME_PIXELS,
                                                rv.MAX_CLIP_BYTES).get_frames_at([0, 3, 6, 9])
    assert np.array_equal(out[0], expected)
    data.extend(b"\0")  # released once the decode returned


def test_stats_add_up_when_two_threads_batch_from_one_source(tmp_path: Path):
    """Two iterators batch from one source on their own threads: every skipped clip of both is
    counted (the counters are updated under the source's lock, not by bare `+=` from each thread,
    which loses counts when a thread runs between another's read and write: rare under the GIL,
    where this check seldom sees it, likely on a free-threaded interpreter)."""
    import sys

    missing = str(tmp_path / "gone.mp4")  # every clip fails to open: skipped, no decode to wait for

    class Gone(torch.utils.data.Dataset):
        def __len__(self):
            return 200

        def __getitem__(self, i):
            return rl.VideoFile(missing, clip=[0]), 0

    source = vb.VideoClipBatches(Gone(), threads=1, on_error="skip")
    batches, errors = 20, []

    def run(seed):
        try:
            for _ in range(batches):
                assert source[keys(range(200), seed=seed)][0].shape[0] == 0
        except Exception as error:  # noqa: BLE001 - asserted below
            errors.append(error)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=20)
    finally:
        sys.setswitchinterval(interval)
    assert not any(t.is_alive() for t in threads) and errors == []
    assert source.stats()["skipped"] == 2 * batches * 200


@pytest.mark.parametrize("count", [3, 8, 11])
def test_uniform_temporal_subsample_equals_v2_on_the_decoded_clip(root: Path, count: int):
    """v2's UniformTemporalSubsample runs natively as frame selection: the kept frames are
    chosen before decoding (fewer kept, none converted in vain), equal to v2's on the decoded
    clip (max |diff| 0), fewer, as many or more samples than the clip's 8 frames, anywhere in
    the chain."""
    sampler = clips.random_indices(num_clips=2, num_frames_per_clip=8, num_indices_between_frames=2)
    transform = v2.Compose([v2.RandomResizedCrop(24), v2.UniformTemporalSubsample(count),
                            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    chain, why = vb.native_chain(transform)
    assert why == "" and [s["kind"] for s in chain[0]] == ["random_resized_crop", "temporal_subsample"]
    folder = rl.VideoFolder(root, clip=sampler, transform=transform)
    source = vb.VideoClipBatches(folder, threads=2)
    for key in keys(range(3)):
        batch, _ = source[[key]]
        ref = folder[key.index][0]
        frames = rv.VideoFile(ref.path).decode(
            sampler, generator=clips.generator_for(key.seed, key.epoch, key.index, key.position))
        seed = _C.sample_seed(key.seed, key.epoch, _C.row_key(key.index, key.position))
        plan = _C.video_chain_plan(source.steps, ref.metadata.width, ref.metadata.height, seed)
        expected = v2.Compose(transform.transforms[1:])(apply_plan(frames, plan))  # v2 after the crop
        assert batch.shape == (1, 2, count, 3, 24, 24)
        assert (batch[0] - expected.as_subclass(torch.Tensor)).abs().max().item() == 0
    assert source.stats()["frames_kept"] == 3 * 2 * count
