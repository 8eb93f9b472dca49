"""``batch_size=None`` (torch's unbatched loading) on the native path: each sample delivered
alone, ``collate_fn`` (torch's ``default_convert`` unless given) applied to it, as torch's
DataLoader does; a checkpoint resumes at the next sample."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.utils.data as tud
import torchvision
from torchvision.transforms import v2

import ringloader as rl
from imagegen import jpeg_bytes
from videogen import NEEDS_VIDEO, make_clip

EVAL = v2.Compose([v2.ToImage(), v2.Resize(40), v2.CenterCrop(32)])


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("unbatched")
    for c in range(2):
        (root / f"class_{c}").mkdir()
        for i in range(5):
            (root / f"class_{c}" / f"{i}.jpg").write_bytes(
                jpeg_bytes(60 + 7 * i, 50 + 5 * c, seed=700 + 10 * c + i))
    return root


class Files(tud.Dataset):
    def __init__(self, root: Path, joint: bool = False):
        self.samples = torchvision.datasets.ImageFolder(str(root)).samples
        self.joint = joint

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        if self.joint:
            return rl.Joint(EVAL, {"image": rl.ImageFile(path), "label": label})
        return rl.ImageFile(path, transform=EVAL), label


def _native(dataset, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(dataset, batch_size=None, **kwargs)
    assert loader.native and loader.batch_size is None
    return loader


@pytest.mark.parametrize("kind", ["ImageFolder", "references", "joint", "torchvision"])
def test_each_sample_alone_as_torch_delivers_it(tree: Path, kind: str):
    """The samples, in torch's order, equal torch's DataLoader(batch_size=None) over the same
    files decoded with PIL (max |diff| 0), with default_convert's types: an image tensor and a
    plain int label in a list (default_convert turns a tuple into a list), a dict for a Joint."""
    torch_ds = torchvision.datasets.ImageFolder(str(tree), transform=EVAL)
    want = list(tud.DataLoader(torch_ds, batch_size=None))
    dataset = {"ImageFolder": lambda: rl.ImageFolder(str(tree), transform=EVAL),
               "references": lambda: Files(tree), "joint": lambda: Files(tree, joint=True),
               "torchvision": lambda: torch_ds}[kind]()
    loader = _native(dataset)
    assert len(loader) == len(want) and loader.batch_sampler is None  # as torch's
    assert loader.sampler is not None and loader.collate_fn is tud.default_convert
    got = list(loader)
    assert len(got) == len(want)
    for sample, (image, label) in zip(got, want):
        if kind == "joint":
            assert set(sample) == {"image", "label"}
            sample = [sample["image"], sample["label"]]
        assert type(sample) is list and len(sample) == 2
        assert sample[0].shape == image.shape == (3, 32, 32)
        assert torch.equal(sample[0], image)
        assert type(sample[1]) is int and sample[1] == label


def test_collate_fn_applies_to_each_sample_and_shuffle_follows_the_generator(tree: Path):
    """A collate_fn gets the sample itself (not a list), as torch's unbatched loading gives it;
    shuffle draws torch's order from the generator."""
    seen = []

    def collate(sample):
        seen.append(type(sample))
        return sample[1]

    loader = _native(rl.ImageFolder(str(tree), transform=EVAL), collate_fn=collate, shuffle=True,
                     generator=torch.Generator().manual_seed(3))
    labels = list(loader)
    order = tud.DataLoader(range(10), batch_size=None, shuffle=True,
                           generator=torch.Generator().manual_seed(3))
    assert labels == [int(i) // 5 for i in order]
    assert seen and all(t is tuple for t in seen)
    assert "batch_size=None" in loader.describe()


def test_a_checkpoint_resumes_at_the_next_sample(tree: Path):
    loader = _native(rl.ImageFolder(str(tree), transform=EVAL))
    it = iter(loader)
    first = [next(it) for _ in range(4)]
    state = loader.state_dict()
    rest = list(it)
    resumed = _native(rl.ImageFolder(str(tree), transform=EVAL))
    resumed.load_state_dict(state)
    again = list(resumed)
    assert len(first) + len(rest) == 10 and len(again) == len(rest)
    assert all(torch.equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(again, rest))


@pytest.mark.parametrize("kwargs, match", [
    (dict(drop_last=True), "mutually exclusive with drop_last"),
    (dict(batch_transform=v2.MixUp(num_classes=2)), "batch_size=None delivers samples one by one"),
])
def test_what_unbatched_loading_cannot_take_is_refused_by_name(tree: Path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        rl.DataLoader(rl.ImageFolder(str(tree), transform=EVAL), batch_size=None, **kwargs)


def test_references_on_torchs_path_are_materialised_one_by_one(tree: Path):
    """A Joint the native path refuses (a Python step in it) with batch_size=None: torch's path
    decodes each sample's references in its workers and applies default_convert to the sample
    alone (they reached the user as references before); the same samples as the native path
    gives without the Python step, which changes nothing here. Its checkpoint is refused, as
    for torch's unbatched loading (no batch sampler to replay)."""
    def same(image):
        return image

    class Refused(Files):
        def __getitem__(self, i):
            path, label = self.samples[i]
            return rl.Joint(v2.Compose([EVAL, v2.Lambda(same)]),
                            {"image": rl.ImageFile(path), "label": label})

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = rl.DataLoader(Refused(tree), batch_size=None, num_workers=2)
    assert not loader.native and loader.batch_size is None and loader.batch_sampler is None
    with pytest.raises(TypeError, match="batch_size=None"):  # torch's unbatched path: no order
        loader.state_dict()
    got = list(loader)
    want = list(_native(Files(tree, joint=True)))
    assert len(got) == len(want) == 10
    for a, b in zip(got, want):
        assert torch.equal(a["image"], b["image"]) and a["label"] == b["label"]


@NEEDS_VIDEO[0]
@NEEDS_VIDEO[1]
def test_video_references_unbatched_are_decoded_clips(tmp_path: Path):
    """Video references with batch_size=None: each sample's clip decoded (the frames
    VideoFile.decode gives for explicit indices, max |diff| 0), its label an int."""
    from ringloader import clips

    videos = [make_clip(tmp_path / f"{k}.mp4", 60 * k) for k in range(3)]

    class Videos(tud.Dataset):
        def __len__(self):
            return len(videos)

        def __getitem__(self, k):
            return rl.VideoFile(str(videos[k]), clip=clips.indices([0, 2, 4, 6])), k

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = rl.DataLoader(Videos(), batch_size=None)
    got = list(loader)
    assert [label for _, label in got] == [0, 1, 2]
    for (frames, label), path in zip(got, videos):
        want = Videos()[label][0].decode()
        assert type(label) is int and frames.dtype == torch.uint8
        assert torch.equal(frames, want), path
