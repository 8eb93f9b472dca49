"""torch's path with no workers draws an epoch's order at the first ``next()``. A ``state_dict()``
taken right after ``iter()``, before that ``next()``, plans the epoch then (the same draws, from
the same RNGs, that the ``next()`` would have made, and none again at the ``next()``) and holds its
order as any other checkpoint: the run goes on exactly as without the checkpoint (batches, RNG
states), and a fresh loader resumes it with the global RNG state saved beside it, a sampler's own
state and a ``DistributedSampler``'s epoch, then the epochs after it as the uninterrupted run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import torch.utils.data as tud

import ringloader as rl
from ringloader import transforms as T

from imagegen import jpeg_bytes

EPOCHS = 3
AT = 1  # the epoch checkpointed right after its iter()


class _Noisy(tud.Dataset):
    """A user's Dataset (torch's path) whose samples draw from torch's global RNG, as a random
    augmentation does with no workers: a sample's value is its index plus that noise."""

    def __len__(self) -> int:
        return 7

    def __getitem__(self, i: int):
        return torch.full((2,), float(i)) + torch.rand(2), i


class _OwnState(tud.Sampler):
    """A sampler with state of its own (the epochs it gave), which its state_dict records: epoch
    k's order is a permutation seeded by k."""

    def __init__(self, n: int):
        self.n, self.count = n, 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(100 + self.count))
        self.count += 1
        return iter(order.tolist())

    def state_dict(self) -> dict:
        return {"count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.count = state["count"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """6 classes x 1 tiny JPEG: a label is its sample's index."""
    root = tmp_path_factory.mktemp("planned_at_iter")
    for i in range(6):
        (root / f"c{i}").mkdir()
        (root / f"c{i}" / "x.jpg").write_bytes(jpeg_bytes(20 + i, 18, seed=i))
    return root


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> Path:
    if shutil.which("ffmpeg") is None:
        pytest.skip("needs the ffmpeg CLI to make videos")
    from ringloader.sources import video as rv

    if not rv.video_available()[0]:
        pytest.skip("FFmpeg's libraries are not loadable")
    root = tmp_path_factory.mktemp("planned_clips")
    for n in range(4):
        (root / f"c{n}").mkdir()
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                        f"testsrc2=size=32x24:rate=10,trim=end_frame=12,hue=h={60 * n}", "-pix_fmt",
                        "yuv420p", "-c:v", "libx264", str(root / f"c{n}" / "0.mp4")], check=True)
    return root


def _loader(kind: str, tree: Path, videos) -> rl.DataLoader:
    """A loader as a fresh process builds it, on torch's path with no workers."""
    import warnings

    if kind == "global_rng":
        return rl.DataLoader(_Noisy(), batch_size=3, shuffle=True)
    if kind == "generator":
        return rl.DataLoader(_Noisy(), batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(7))
    if kind == "own_state":
        return rl.DataLoader(_Noisy(), batch_size=3, sampler=_OwnState(7))
    if kind == "distributed":
        return rl.DataLoader(_Noisy(), batch_size=2, sampler=tud.DistributedSampler(
            range(7), num_replicas=2, rank=1, shuffle=True, seed=5))
    if kind == "images":  # a Python transform: torch's path, each sample's augmentation seeded
        train = T.Compose([T.RandomResizedCrop(8), T.ToTensor(), lambda x: x * 1.0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the Python step's and torch's path's, once each
            return rl.DataLoader(rl.ImageFolder(str(tree), transform=train), batch_size=4, shuffle=True)
    from ringloader.transforms import clips

    assert kind == "clips"  # native clip batches, the generic path's plan
    sampler = clips.random_indices(num_frames_per_clip=2, num_indices_between_frames=2)
    return rl.DataLoader(rl.VideoFolder(videos(), clip=sampler), batch_size=3, shuffle=True)


def _batches(batches) -> list:
    return [(x.clone(), y.tolist()) for x, y in batches]


def _epochs(loader: rl.DataLoader, first: int, last: int) -> list:
    """Epochs first..last-1 as a training loop runs them (set_epoch with a DistributedSampler)."""
    out = []
    for e in range(first, last):
        if isinstance(loader.sampler, tud.DistributedSampler):
            loader.set_epoch(e)
        out.append(_batches(loader))
    return out


def _rngs(loader: rl.DataLoader) -> list:
    """Every state the epochs draw from or advance: torch's global RNG, the loader's generator,
    a sampler's own."""
    states = [torch.get_rng_state()]
    if loader.generator is not None:
        states.append(loader.generator.get_state())
    if isinstance(loader.sampler, _OwnState):
        states.append(torch.tensor(loader.sampler.count))
    return states


def _same_epochs(got: list, want: list) -> None:
    assert len(got) == len(want)
    for e, (a, b) in enumerate(zip(got, want)):
        assert [y for _, y in a] == [y for _, y in b], f"epoch {e}: order"
        assert all(torch.equal(x, w) for (x, _), (w, _) in zip(a, b)), f"epoch {e}: samples"


def _same_rngs(got: list, want: list) -> None:
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))


def _reference(kind: str, tree: Path, videos) -> tuple:
    torch.manual_seed(0)
    loader = _loader(kind, tree, videos)
    return _epochs(loader, 0, EPOCHS), _rngs(loader)


def _checkpointed(kind: str, tree: Path, videos) -> tuple:
    """The run with a state_dict() right after epoch AT's iter(): (the epochs it saw, its RNG
    states at the end, the checkpoint, torch's global RNG state saved beside it)."""
    torch.manual_seed(0)
    loader = _loader(kind, tree, videos)
    seen = _epochs(loader, 0, AT)
    if isinstance(loader.sampler, tud.DistributedSampler):
        loader.set_epoch(AT)
    it = iter(loader)
    state, rng = loader.state_dict(), torch.get_rng_state()
    seen.append(_batches(it))
    seen += _epochs(loader, AT + 1, EPOCHS)
    return seen, _rngs(loader), state, rng


KINDS = ["global_rng", "generator", "own_state", "distributed", "images", "clips"]


@pytest.fixture
def videos_if(request):
    """The video tree, made (once) only for the clip case."""
    return lambda: request.getfixturevalue("videos")


@pytest.mark.parametrize("kind", KINDS)
def test_the_checkpoint_holds_the_order_and_the_run_goes_on_as_without_it(tree: Path, videos_if,
                                                                          kind: str):
    want, want_rngs = _reference(kind, tree, videos_if)
    seen, rngs, state, _ = _checkpointed(kind, tree, videos_if)
    _same_epochs(seen, want)  # the order drawn at state_dict() is the one the next() would draw
    _same_rngs(rngs, want_rngs)  # and drawn once: every RNG ends where torch's run leaves it
    # The epoch itself, from its first batch (not the epoch number and the RNGs to draw it again).
    assert (state["complete"], state["epoch"], state["delivered"]) == (False, AT, 0), state
    assert "sampler" in state


@pytest.mark.parametrize("kind", KINDS)
def test_a_fresh_loader_resumes_that_epoch_and_the_ones_after(tree: Path, videos_if, kind: str):
    want, want_rngs = _reference(kind, tree, videos_if)
    _, _, state, rng = _checkpointed(kind, tree, videos_if)
    torch.manual_seed(1234)  # a new process: its global RNG elsewhere, its sampler fresh
    resumed = _loader(kind, tree, videos_if)
    resumed.load_state_dict(state)
    torch.set_rng_state(rng)  # the state saved beside the checkpoint, after iter()
    got = [_batches(resumed)]  # the resumed epoch: no set_epoch again
    got += _epochs(resumed, AT + 1, EPOCHS)
    _same_epochs(got, want[AT:])
    _same_rngs(_rngs(resumed), want_rngs)


def test_a_mid_epoch_checkpoint_without_generator_resumes_the_epochs_after():
    """Any checkpoint: a resumed iter() takes back the base seed torch's iterator draws from the
    global RNG, so the samples drawing from it and the epochs after the resumed one are the
    uninterrupted run's (before, all of them one draw further on)."""
    want, want_rngs = _reference("global_rng", Path(), None)
    torch.manual_seed(0)
    loader = _loader("global_rng", Path(), None)
    _epochs(loader, 0, AT)
    it = iter(loader)
    head = _batches([next(it)])
    state, rng = loader.state_dict(), torch.get_rng_state()
    torch.manual_seed(1234)
    resumed = _loader("global_rng", Path(), None)
    resumed.load_state_dict(state)
    torch.set_rng_state(rng)
    got = [head + _batches(resumed)] + _epochs(resumed, AT + 1, EPOCHS)
    _same_epochs(got, want[AT:])
    _same_rngs(_rngs(resumed), want_rngs)


def test_a_loaded_checkpoint_taken_again_right_after_iter_is_the_same_epoch():
    """load_state_dict (mid-epoch), iter(), state_dict() before the first next(): the loaded
    epoch, from where it stopped (its base seed taken back at once); that iterator goes on with
    it, and so does a loader resuming the new checkpoint."""
    torch.manual_seed(0)
    want = _batches(_loader("global_rng", Path(), None))
    torch.manual_seed(0)
    first = _loader("global_rng", Path(), None)
    it = iter(first)
    head = _batches([next(it)])
    state, rng = first.state_dict(), torch.get_rng_state()
    again = _loader("global_rng", Path(), None)
    again.load_state_dict(state)
    torch.set_rng_state(rng)
    it = iter(again)
    taken, rng = again.state_dict(), torch.get_rng_state()
    assert (taken["epoch"], taken["delivered"], taken["sampler"]) == (0, 1, state["sampler"])
    _same_epochs([head + _batches(it)], [want])
    last = _loader("global_rng", Path(), None)
    last.load_state_dict(taken)
    torch.set_rng_state(rng)
    _same_epochs([head + _batches(last)], [want])
