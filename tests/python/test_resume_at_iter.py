"""A checkpoint taken right after ``iter(loader)``, before the first ``next()``, resumes that
epoch from its first batch (none lost, none repeated), whichever path runs the dataset and however
many workers; one taken before any ``iter()`` resumes epoch 0 from its start. With no workers
torch draws an epoch's order at the first ``next()``: ``state_dict()`` draws it then and records
it (test_resume_at_iter_planned.py: the RNGs, a sampler's own state, DistributedSampler)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import ringloader as rl
from ringloader import transforms as T

from imagegen import jpeg_bytes


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """8 classes x 1 tiny JPEG: a label is its sample's index."""
    root = tmp_path_factory.mktemp("at_iter")
    for i in range(8):
        (root / f"c{i}").mkdir()
        (root / f"c{i}" / "x.jpg").write_bytes(jpeg_bytes(20 + i, 18, seed=i))
    return root


class _PILFiles(tud.Dataset):
    """A user's Dataset returning PIL images: torch's path."""

    def __init__(self, root: Path):
        self.files = sorted(root.glob("*/x.jpg"))

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        from PIL import Image

        with Image.open(self.files[i]) as im:
            return torch.from_numpy(np.asarray(im.convert("L").resize((4, 4)))).clone(), i


def _datasets(tree: Path) -> dict:
    train = T.Compose([T.RandomResizedCrop(8), T.ToTensor()])
    return {
        "native": lambda: rl.ImageFolder(str(tree), transform=train),
        # A Python transform: torch's path, keyed samples (their augmentation seeds).
        "python_transform": lambda: rl.ImageFolder(
            str(tree), transform=T.Compose([train, lambda x: x * 1.0])),
        "user_dataset": lambda: _PILFiles(tree),
    }


def _make(tree: Path, kind: str, workers: int) -> rl.DataLoader:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's path says why, once
        return rl.DataLoader(_datasets(tree)[kind](), batch_size=3, shuffle=True, num_workers=workers,
                             generator=torch.Generator().manual_seed(7))


def _epoch(batches) -> list:
    return [(x.clone(), y.tolist()) for x, y in batches]


def _same(a: list, b: list) -> None:
    assert [y for _, y in a] == [y for _, y in b]
    assert all(torch.equal(x, w) for (x, _), (w, _) in zip(a, b))


@pytest.mark.parametrize("workers", [0, 1, 2])
@pytest.mark.parametrize("kind", ["native", "python_transform", "user_dataset"])
def test_a_checkpoint_right_after_iter_resumes_that_epoch(tree: Path, kind: str, workers: int):
    whole = _make(tree, kind, workers)
    first, second = _epoch(whole), _epoch(whole)
    for epoch, expected, after in ((0, first, second), (1, second, None)):
        dl = _make(tree, kind, workers)
        for _ in range(epoch):
            _epoch(dl)
        it = iter(dl)
        state = dl.state_dict()
        _same(_epoch(it), expected)  # the original goes on as if no checkpoint was taken
        resumed = _make(tree, kind, workers)
        resumed.load_state_dict(state)
        _same(_epoch(resumed), expected)
        if after is not None:  # and the epoch after it too
            _same(_epoch(resumed), after)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["native", "user_dataset"])
def test_a_checkpoint_before_any_iter_resumes_epoch_0(tree: Path, kind: str, workers: int):
    expected = _epoch(_make(tree, kind, workers))
    dl = _make(tree, kind, workers)
    state = dl.state_dict()
    resumed = _make(tree, kind, workers)
    resumed.load_state_dict(state)
    _same(_epoch(resumed), expected)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["native", "user_dataset"])
def test_a_loaded_checkpoint_taken_again_before_next_is_the_same(tree: Path, kind: str, workers: int):
    """load_state_dict (mid-epoch), then state_dict() before iter() and right after it: both
    resume where the loaded checkpoint does."""
    expected = _epoch(_make(tree, kind, workers))
    dl = _make(tree, kind, workers)
    it = iter(dl)
    next(it)
    mid = dl.state_dict()
    again = _make(tree, kind, workers)
    again.load_state_dict(mid)
    states = [again.state_dict()]
    it2 = iter(again)
    states.append(again.state_dict())
    _same(_epoch(it2), expected[1:])
    for state in states:
        last = _make(tree, kind, workers)
        last.load_state_dict(state)
        _same(_epoch(last), expected[1:])


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg CLI to make videos")
@pytest.mark.parametrize("workers", [0, 1])
def test_native_clip_batches_right_after_iter(tmp_path: Path, workers: int):
    from ringloader.sources import video as rv
    from ringloader.transforms import clips

    if not rv.video_available()[0]:
        pytest.skip("FFmpeg's libraries are not loadable")
    for n, c in enumerate("ab"):
        (tmp_path / c).mkdir()
        for k in range(2):
            subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                            f"testsrc2=size=32x24:rate=10,trim=end_frame=12,hue=h={60 * (2 * n + k)}", "-pix_fmt",
                            "yuv420p", "-c:v", "libx264", str(tmp_path / c / f"{k}.mp4")], check=True)
    ds = rl.VideoFolder(tmp_path, clip=clips.random_indices(num_frames_per_clip=2, num_indices_between_frames=2))

    def make():
        return rl.DataLoader(ds, batch_size=1, shuffle=True, num_workers=workers,
                             generator=torch.Generator().manual_seed(3))

    expected = _epoch(make())
    dl = make()
    it = iter(dl)
    state = dl.state_dict()
    _same(_epoch(it), expected)
    resumed = make()
    resumed.load_state_dict(state)
    _same(_epoch(resumed), expected)


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg CLI to make videos")
def test_native_clip_batches_do_not_warn_of_worker_processes(tmp_path: Path, monkeypatch):
    """Natively batched clips run num_workers decode threads, no process: torch's "This
    DataLoader will create N worker processes" (N above the CPUs it sees) is not theirs, and
    under warnings-as-errors it made construction fail. A torch-path video loader (a Python
    transform: torch's worker processes decode) still gets torch's warning."""
    import warnings

    from ringloader.sources import video as rv
    from ringloader.transforms import clips

    if not rv.video_available()[0]:
        pytest.skip("FFmpeg's libraries are not loadable")
    (tmp_path / "a").mkdir()
    for k in range(4):
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                        "testsrc2=size=32x24:rate=10,trim=end_frame=8", "-pix_fmt", "yuv420p", "-c:v",
                        "libx264", str(tmp_path / "a" / f"{k}.mp4")], check=True)
    monkeypatch.setattr(torch._utils, "cpu_count", lambda: 2)  # as torch sees a 2-CPU machine
    sampler = clips.random_indices(num_frames_per_clip=2, num_indices_between_frames=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dl = rl.DataLoader(rl.VideoFolder(tmp_path, clip=sampler), num_workers=3, batch_size=2)
        assert [tuple(t.shape) for _, t in dl] == [(2,), (2,)]
    with pytest.warns(UserWarning, match="This DataLoader will create 3 worker processes"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", rl.FallbackWarning)
            rl.DataLoader(rl.VideoFolder(tmp_path, clip=sampler, transform=lambda c: c), num_workers=3,
                          batch_size=2)


def test_a_checkpoint_inside_a_refilled_batch_taken_again_after_iter_keeps_its_rows(tmp_path: Path):
    """on_error="skip" with drop_last refills batches, so a checkpoint can fall after some rows
    of a batch: loaded, iterated and taken again before the first next(), it still records them
    (before, its rows were 0 and the resumption delivered a sample twice and a batch more)."""
    import warnings

    for i in range(12):
        (tmp_path / f"c{i:02d}").mkdir()
        (tmp_path / f"c{i:02d}" / "x.jpg").write_bytes(b"bad" * 20 if i == 1 else jpeg_bytes(16, 16, seed=i))

    def make() -> rl.DataLoader:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the bad file's skip warning
            return rl.DataLoader(rl.ImageFolder(tmp_path, transform=T.Compose([T.CenterCrop(8), T.ToTensor()])),
                                 batch_size=3, drop_last=True, on_error="skip", max_skipped_fraction=1,
                                 num_workers=1)

    dl = make()
    assert dl.native
    it = iter(dl)
    next(it)
    state = dl.state_dict()
    assert state["rows"] == 1  # the refilled batch's first row (sample 3) went out already
    loaded = make()
    loaded.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rest = [y.tolist() for _, y in iter(loaded)]
        again = make()
        again.load_state_dict(state)
        it = iter(again)
        taken = again.state_dict()
        resumed = make()
        resumed.load_state_dict(taken)
        from_taken = [y.tolist() for _, y in resumed]
    assert rest == [[4, 5, 6], [7, 8, 9]]
    assert (taken["delivered"], taken["rows"]) == (state["delivered"], state["rows"])
    assert from_taken == rest
