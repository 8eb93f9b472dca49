"""An IterableDataset (a stream) whose samples hold ringloader references, under rl.DataLoader:
torch's loader iterates it in its worker processes (its sharding by get_worker_info() unchanged)
and each sample holding an image or video reference is materialised there, as a stream of
decoded samples would be; other samples pass unchanged. Before, the references reached torch's
default_collate, which refused them."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import pytest
import torch
import torch.utils.data as tud
from torchvision.transforms import v2

import ringloader as rl
from ringloader import clips
from ringloader.sample_data import make_sample_dataset
from videogen import NEEDS_VIDEO, make_clip

FIXED = v2.Compose([v2.Resize(40), v2.CenterCrop(32), v2.PILToTensor()])


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = make_sample_dataset(tmp_path_factory.mktemp("stream"), num_images=6, num_classes=2)
    return [p for p, _ in rl.ImageFolder(str(root)).samples]


class Stream(tud.IterableDataset):
    """Yields ``make(k, path)`` for each path, sharded over torch's workers by position."""

    def __init__(self, paths, make, length=None):
        self.paths, self.make, self.length = paths, make, length

    def __iter__(self):
        info = tud.get_worker_info()
        for k, path in enumerate(self.paths):
            if info is None or k % info.num_workers == info.id:
                yield self.make(k, path)


class Sized(Stream):
    def __len__(self):
        return len(self.paths)


def _image_sample(k, path):
    return {"image": rl.ImageFile(str(path), transform=FIXED), "label": k}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_stream_of_image_references_is_decoded_in_the_workers(paths, num_workers):
    """Each batch holds the decoded images (max |diff| 0 to rl.materialize of the sample), every
    sample once whatever the workers, collated by torch's default_collate."""
    loader = rl.DataLoader(Stream(paths, _image_sample), batch_size=2, num_workers=num_workers)
    assert not loader.native
    got = {}
    for batch in loader:
        assert batch["image"].dtype == torch.uint8 and batch["image"].shape[1:] == (3, 32, 32)
        for image, label in zip(batch["image"], batch["label"]):
            got[int(label)] = image
    assert sorted(got) == list(range(len(paths)))
    for k, path in enumerate(paths):
        want = rl.materialize(_image_sample(k, path))["image"]
        assert torch.equal(got[k], want), path


@dataclasses.dataclass
class Record:
    value: int


def test_samples_without_references_pass_as_they_are(paths):
    """A sample holding no reference is not rebuilt: a defaultdict, a dataclass and a tuple
    subclass reach collate_fn as the stream made them (the same objects without workers)."""
    made = []

    def make(k, path):
        sample = (defaultdict(list, {"k": k}), Record(k))
        made.append(sample)
        return sample

    loader = rl.DataLoader(Stream(paths[:3], make), batch_size=3, collate_fn=list)
    (batch,) = list(loader)
    assert [a is b for a, b in zip(batch, made)] == [True, True, True]


def test_describe_and_len_are_the_streams(paths):
    """describe() says it runs on torch's path; len() is the stream's own: batches of a sized
    stream, a TypeError naming the class for one without."""
    loader = rl.DataLoader(Sized(paths, _image_sample), batch_size=4)
    assert "generic path" in loader.describe()
    assert len(loader) == 2  # 6 samples, batches of 4: torch's ceil
    with pytest.raises(TypeError, match="Stream"):
        len(rl.DataLoader(Stream(paths, _image_sample), batch_size=4))


def test_a_bad_file_in_the_stream_names_it(paths, tmp_path):
    """A file whose header Pillow cannot read fails its batch with an error naming it."""
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    loader = rl.DataLoader(Stream([bad], _image_sample), batch_size=1)
    with pytest.raises(Exception, match="broken.jpg"):
        list(loader)


def _needs_video(test):
    for mark in NEEDS_VIDEO:
        test = mark(test)
    return test


@_needs_video
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_stream_of_video_references_is_decoded_in_the_workers(tmp_path, num_workers):
    """Video references in a stream: each clip decoded in the worker (explicit frame indices:
    the frames VideoFile.decode gives, max |diff| 0), collated into [B, T, C, H, W]."""
    videos = [make_clip(tmp_path / f"{k}.mp4", 60 * k) for k in range(3)]

    def make(k, path):
        return rl.VideoFile(str(path), clip=clips.indices([0, 2, 4, 6])), k

    loader = rl.DataLoader(Stream(videos, make), batch_size=3, num_workers=num_workers)
    got = {}
    for frames, labels in loader:
        assert frames.shape[1:] == (1, 4, 3, 24, 32) and frames.dtype == torch.uint8
        got.update({int(label): clip for clip, label in zip(frames, labels)})
    assert sorted(got) == [0, 1, 2]
    for k, path in enumerate(videos):
        assert torch.equal(got[k], make(k, path)[0].decode()), path
