"""Native clip batches on a real GPU: ``pin_memory=True`` decodes into pinned memory, and
``device="cuda"`` stages clip batches (a refilled ``on_error="skip"``/``drop_last`` epoch
included) equal to the host batches and resumable. Skipped without a GPU, or without FFmpeg's
libraries and CLI (the clips are made by ``ffmpeg``, never downloaded).

Run by ``bench/gpu_check.sh`` on a GPU machine; here every test reports why it was skipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torchvision.transforms import v2

import ringloader as rl
from ringloader import clips

from videogen import NEEDS_VIDEO, make_clip

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible (torch.cuda.is_available() is False)"),
    *NEEDS_VIDEO,
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cuda_clips")
    for c, label in enumerate("ab"):
        (root / label).mkdir()
        for k in range(4):
            make_clip(root / label / f"{k}.mp4", hue=40 * (4 * c + k))
    return root


def _loader(root: Path, **kw) -> rl.DataLoader:
    transform = v2.Compose([v2.RandomResizedCrop(16), v2.RandomHorizontalFlip(),
                            v2.ToDtype(torch.float32, scale=True)])
    dataset = rl.VideoFolder(root, clip=clips.random_indices(num_frames_per_clip=3), transform=transform)
    kw.setdefault("batch_size", 3)
    return rl.DataLoader(dataset, num_workers=2, shuffle=True, generator=torch.Generator().manual_seed(7), **kw)


def test_pin_memory_decodes_clip_batches_into_pinned_memory(folder: Path):
    host = list(_loader(folder))
    pinned = _loader(folder, pin_memory=True)
    assert "native clip batches" in pinned.describe()
    batches = list(pinned)
    assert len(batches) == len(host) == 3
    for (x, y), (xh, yh) in zip(batches, host):
        assert x.is_pinned() and y.is_pinned()
        assert torch.equal(x, xh) and torch.equal(y, yh)


def test_device_staged_clip_batches_equal_the_host_batches(folder: Path):
    host = list(_loader(folder))
    device = list(_loader(folder, device="cuda"))
    assert len(device) == len(host)
    for (x, y), (xh, yh) in zip(device, host):
        assert x.is_cuda and y.is_cuda
        assert torch.equal(x.cpu(), xh) and torch.equal(y.cpu(), yh)


def test_refilled_epoch_on_the_device_resumes_exactly(folder: Path, tmp_path: Path):
    root = tmp_path / "cut"
    for label in "ab":
        (root / label).mkdir(parents=True)
        for clip in sorted((folder / label).iterdir()):
            (root / label / clip.name).write_bytes(clip.read_bytes())
    bad = root / "a" / "1.mp4"
    bad.write_bytes(bad.read_bytes()[:300])  # cut: skipped, its batch refilled from the next clips
    kw = dict(device="cuda", on_error="skip", drop_last=True, batch_size=2)
    whole = [(x.cpu(), y.cpu()) for x, y in _loader(root, **kw)]
    assert len(whole) == 3 and all(x.shape[0] == 2 for x, _ in whole)
    loader = _loader(root, **kw)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    resumed = _loader(root, **kw)
    resumed.load_state_dict(state)
    rest = [(x.cpu(), y.cpu()) for x, y in resumed]
    assert len(rest) == 2
    for (x, y), (xw, yw) in zip(rest, whole[1:]):
        assert torch.equal(x, xw) and torch.equal(y, yw)


class _Batch:
    """A custom batch (torch's documented pattern): pin_memory=True calls its pin_memory()."""

    def __init__(self, samples):
        self.clips = torch.stack([s["video"] for s in samples])
        self.pinned = False

    def pin_memory(self):
        self.clips, self.pinned = self.clips.pin_memory(), True
        return self


def test_pin_memory_with_a_collate_fn_pins_as_torch_does(folder: Path):
    import collections

    class Dicts(torch.utils.data.Dataset):
        def __init__(self):
            self.folder = rl.VideoFolder(folder, clip=[0, 1], transform=v2.Resize(12))

        def __len__(self):
            return len(self.folder)

        def __getitem__(self, i):
            video, label = self.folder[i]
            return collections.OrderedDict(video=video, label=label)

    custom = rl.DataLoader(Dicts(), batch_size=2, collate_fn=_Batch, pin_memory=True)
    assert "native clip batches" in custom.describe()
    batch = next(iter(custom))
    assert batch.pinned and batch.clips.is_pinned()
    plain = next(iter(rl.DataLoader(Dicts(), batch_size=2, pin_memory=True)))
    assert type(plain) is collections.OrderedDict and plain["video"].is_pinned() and plain["label"].is_pinned()
