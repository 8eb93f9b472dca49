"""A user's own Dataset returning ImageFile references runs natively and batches exactly as
torch's DataLoader over the same Dataset decoding with PIL."""

from __future__ import annotations

import collections
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.utils.data as tud
import torchvision.transforms as v1
from PIL import Image

import ringloader as rl
from conftest import write_tree

FIXED = v1.Compose([v1.Resize(40), v1.CenterCrop(32), v1.ToTensor(),
                    v1.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
GRAY = v1.Compose([v1.Resize(40), v1.CenterCrop(32), v1.ToTensor()])
RANDOM = v1.Compose([v1.RandomResizedCrop(24), v1.RandomHorizontalFlip(), v1.ToTensor()])

Pair = collections.namedtuple("Pair", "image label")


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> list:
    """(path, label, name, weight) rows, as a CSV would give them: 3 classes x 5 JPEGs."""
    root = write_tree(tmp_path_factory.mktemp("refs"), num_classes=3, per_class=5, seed=11)
    files = sorted(root.rglob("*.jpg"))
    return [(str(p), i % 3, p.name, 0.5 * i) for i, p in enumerate(files)]


class CsvDataset(tud.Dataset):
    """What users write: a row per sample, the image opened with PIL (``lazy=False``) or
    referenced for ringloader (``lazy=True``)."""

    def __init__(self, rows, transform, lazy: bool, shape: str = "dict"):
        self.rows, self.transform, self.lazy, self.shape = rows, transform, lazy, shape

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        path, label, name, weight = self.rows[i]
        if self.lazy:
            image = rl.ImageFile(path, self.transform)
        else:
            image = self.transform(Image.open(path).convert("RGB"))
        if self.shape == "tuple":
            return image, label
        if self.shape == "namedtuple":
            return Pair(image, label)
        return {"image": image, "label": label, "meta": {"name": name, "weight": weight,
                                                          "box": np.array([i, 2 * i], np.float32)}}


def assert_same(a, b):
    """Same structure, types, dtypes and values (max |diff| 0)."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b), (a.double() - b.double()).abs().max().item()
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


@pytest.mark.parametrize("shape", ["dict", "tuple", "namedtuple"])
def test_native_batches_equal_torch_default_collate(rows, shape):
    ours = rl.DataLoader(CsvDataset(rows, FIXED, lazy=True, shape=shape), batch_size=4,
                         num_workers=2)
    assert ours.native
    torchs = tud.DataLoader(CsvDataset(rows, FIXED, lazy=False, shape=shape), batch_size=4)
    got, want = list(ours), list(torchs)
    assert len(got) == len(want) == 4
    for a, b in zip(got, want):
        assert_same(a, b)


def test_materialize_is_what_torch_computes(rows):
    lazy, eager = CsvDataset(rows, FIXED, lazy=True), CsvDataset(rows, FIXED, lazy=False)
    assert isinstance(lazy[3]["image"], rl.ImageFile)
    assert_same(rl.materialize(lazy[3]), eager[3])
    # torch's own DataLoader over the same class, materialising in the Dataset's place.
    wrapped = [rl.materialize(lazy[i]) for i in range(len(lazy))]
    assert_same(tud.default_collate(wrapped[:4]), next(iter(tud.DataLoader(eager, batch_size=4))))


def test_random_transform_draws_as_image_folder(rows, tmp_path):
    """The draws are keyed by (base seed, index, position) as for ImageFolder: a Dataset of
    ImageFile references over the same files gives the very same batches."""
    folder = write_tree(tmp_path / "f", num_classes=2, per_class=4, seed=5)
    reference = rl.ImageFolder(str(folder), transform=RANDOM)

    class Refs(tud.Dataset):
        def __len__(self):
            return len(reference)

        def __getitem__(self, i):
            path, label = reference.samples[i]
            return rl.ImageFile(path, RANDOM), label

    torch.manual_seed(4)
    want = list(rl.DataLoader(reference, batch_size=3, shuffle=True))
    torch.manual_seed(4)
    got = list(rl.DataLoader(Refs(), batch_size=3, shuffle=True))
    for (gi, gl), (wi, wl) in zip(got, want):
        assert torch.equal(gi, wi) and torch.equal(gl, wl)


def test_deterministic_for_any_thread_count_and_on_resume(rows):
    ds = CsvDataset(rows, RANDOM, lazy=True, shape="tuple")

    def run(workers):
        torch.manual_seed(9)
        return list(rl.DataLoader(ds, batch_size=4, shuffle=True, num_workers=workers))

    one, three = run(1), run(3)
    for a, b in zip(one, three):
        assert_same(a, b)
    torch.manual_seed(9)
    loader = rl.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2)
    it = iter(loader)
    first = next(it)
    state = loader.state_dict()
    del it
    resumed = rl.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2)
    resumed.load_state_dict(state)
    assert_same(first, one[0])
    for a, b in zip(list(resumed), one[1:]):
        assert_same(a, b)


def test_collate_fn_gets_materialised_samples(rows):
    ds = CsvDataset(rows, FIXED, lazy=True)
    got = next(iter(rl.DataLoader(ds, batch_size=4, collate_fn=lambda b: tuple(zip(*[
        (s["image"], s["meta"]["name"]) for s in b])))))
    want = next(iter(tud.DataLoader(CsvDataset(rows, FIXED, lazy=False), batch_size=4,
                                    collate_fn=lambda b: tuple(zip(*[
                                        (s["image"], s["meta"]["name"]) for s in b])))))
    assert got[1] == want[1]
    for a, b in zip(got[0], want[0]):
        assert torch.equal(a, b)


def test_rank_world_size_subset_and_concat(rows):
    ds = CsvDataset(rows, FIXED, lazy=True, shape="tuple")
    eager = CsvDataset(rows, FIXED, lazy=False, shape="tuple")
    seen = []
    for rank in range(2):
        for images, labels in rl.DataLoader(ds, batch_size=4, rank=rank, world_size=2):
            seen.append(images)
    assert sum(len(b) for b in seen) == 16  # 15 samples padded to 2 x 8, as DistributedSampler
    indices = [1, 4, 7, 14]
    sub = next(iter(rl.DataLoader(tud.Subset(ds, indices), batch_size=4)))
    assert_same(sub, tud.default_collate([eager[i] for i in indices]))
    concat = rl.DataLoader(tud.ConcatDataset([ds, ds]), batch_size=10)
    assert concat.native
    batches = list(concat)
    assert_same(batches[1], tud.default_collate([eager[i] for i in range(10, 15)] +
                                                [eager[i] for i in range(5)]))


def test_on_error_names_the_sample(rows, tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    broken = list(rows)
    broken[5] = (str(bad),) + rows[5][1:]
    ds = CsvDataset(broken, FIXED, lazy=True, shape="tuple")
    it = iter(rl.DataLoader(ds, batch_size=4))
    next(it)
    with pytest.raises(rl.SampleError) as info:
        next(it)
    assert info.value.index == 5 and "bad.jpg" in str(info.value)
    skipped = list(rl.DataLoader(ds, batch_size=4, on_error="skip"))
    assert sum(len(labels) for _, labels in skipped) == 14
    # A replacement's ordinary leaves are its own: every label matches its image.
    eager = CsvDataset(rows, FIXED, lazy=False, shape="tuple")
    by_image = {eager[i][0].numpy().tobytes(): eager[i][1] for i in range(len(rows)) if i != 5}
    for images, labels in rl.DataLoader(ds, batch_size=4, on_error="replace"):
        for image, label in zip(images, labels.tolist()):
            assert by_image[image.numpy().tobytes()] == label


def test_refused_references_warn_and_run_materialised(rows):
    class Gray(CsvDataset):
        def __getitem__(self, i):
            return rl.ImageFile(self.rows[i][0], GRAY, mode="L"), self.rows[i][1]

    with pytest.warns(UserWarning, match="mode 'L'"):
        loader = rl.DataLoader(Gray(rows, FIXED, lazy=True), batch_size=4)
    assert not loader.native
    images, labels = next(iter(loader))
    want = torch.stack([GRAY(Image.open(rows[i][0]).convert("L")) for i in range(4)])
    assert torch.equal(images, want)


def test_bad_structures_are_named(rows):
    class Uneven(CsvDataset):
        def __getitem__(self, i):
            return (rl.ImageFile(self.rows[i][0], FIXED),) * (1 + (i == 2))

    with pytest.raises(ValueError, match="sample 2 holds 2 image references"):
        rl.DataLoader(Uneven(rows, FIXED, lazy=True), batch_size=4)
    with pytest.raises(ValueError, match="mode must be"):
        rl.ImageFile("x.jpg", mode="CMYK")
    with pytest.raises(TypeError, match="bytes-like"):
        rl.ImageBytes(3)


def test_references_pickle(rows):
    ref = rl.ImageFile(rows[0][0], FIXED)
    back = pickle.loads(pickle.dumps(ref))
    assert back.path == ref.path and back.mode == "RGB"
    data = np.frombuffer(Path(rows[0][0]).read_bytes(), np.uint8)
    bytes_ref = rl.ImageBytes(memoryview(data), FIXED)
    assert torch.equal(pickle.loads(pickle.dumps(bytes_ref)).materialize(), ref.materialize())


def test_generic_datasets_are_not_probed_into_other_draws(rows):
    """Looking for references calls dataset[0] once; torch's RNG is left as it was, so a
    Dataset of decoded values still batches exactly as torch's loader."""
    ds = CsvDataset(rows, RANDOM, lazy=False, shape="tuple")
    torch.manual_seed(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = next(iter(rl.DataLoader(ds, batch_size=4, shuffle=True)))
    torch.manual_seed(2)
    want = next(iter(tud.DataLoader(ds, batch_size=4, shuffle=True)))
    assert_same(got, want)
