"""What rl.DataLoader says when a dataset leaves the native path, and the torch habits that keep
it on: one warning per loader naming the step (class and position) or leaf and what to change,
``describe()`` listing every reason, a hint for Datasets that open their images with Pillow,
``collate_fn=default_collate`` as the default, and torchvision's ImageFolder served natively."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import pytest
import torch
import torch.utils.data as tud
import torchvision
from PIL import Image
from torchvision import transforms as v1
from torchvision.transforms import v2

import ringloader as rl
from ringloader.sources import _torch_path


class Jitter:
    """A Python step with no native equivalent (a user's own augmentation)."""

    def __call__(self, image):
        return image


class Shift:
    """Another one."""

    def __call__(self, image):
        return image


def jpegs(tree: Path) -> list:
    return sorted(str(p) for p in tree.rglob("*.jpg"))


class References(tud.Dataset):
    """A user's Dataset of image references, one transform per position."""

    def __init__(self, files, *transforms):
        self.files, self.transforms = files, transforms

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        refs = tuple(rl.ImageFile(self.files[i], t) for t in self.transforms)
        return (*refs, i % 4)


class JointSamples(tud.Dataset):
    def __init__(self, files, transform):
        self.files, self.transform = files, transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        return rl.Joint(self.transform, rl.ImageFile(self.files[i])), i % 4


def built(dataset, **kwargs):
    """(the loader, every warning raised while the Dataset was listed and the loader built)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(dataset, batch_size=4, **kwargs)
    return loader, [w for w in caught if issubclass(w.category, UserWarning)]


# ---- 1. fallback messages -------------------------------------------------------------------

def test_a_python_step_gets_one_warning_naming_it_without_strict_advice(image_tree: Path):
    t = v1.Compose([v1.RandomResizedCrop(32), Jitter(), v1.PILToTensor()])
    loader, caught = built(References(jpegs(image_tree), t))
    assert not loader.native
    assert len(caught) == 1, [str(w.message) for w in caught]
    [w] = caught
    text = str(w.message)
    assert w.category is rl.FallbackWarning
    assert "Jitter at position 1 of the references' transform runs in Python" in text
    assert "replace it with a step that runs natively" in text
    assert "strict" not in text  # neither rl.ImageFile nor rl.DataLoader has strict=
    # It runs on torch's path, each sample as materialize makes it.
    images, labels = next(iter(loader))
    want = torch.stack([rl.materialize(rl.ImageFile(p, t)) for p in jpegs(image_tree)[:4]])
    assert images.shape == want.shape == (4, 3, 32, 32) and labels.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("resize", [v2.Resize(200), v2.Resize(24, max_size=40)])
def test_a_size_that_depends_on_the_image_in_a_joint_runs_natively(image_tree: Path, resize):
    # Each sample is rendered into a tensor of its own (tests/python/test_variable_size.py).
    t = v2.Compose([v2.RandomHorizontalFlip(), resize, v2.ToImage()])
    loader, caught = built(JointSamples(jpegs(image_tree), t), collate_fn=list)
    assert loader.native and not caught, [str(w.message) for w in caught]


def test_a_joint_step_is_named_by_its_position(image_tree: Path):
    # Two flips: the refused one is the second (after a colour step), at position 2.
    t = v2.Compose([v2.RandomHorizontalFlip(), v2.ColorJitter(0.2), v2.RandomHorizontalFlip(),
                    v2.CenterCrop(16)])
    loader, caught = built(JointSamples(jpegs(image_tree), t), collate_fn=list)
    assert not loader.native and len(caught) == 1
    assert "v2.RandomHorizontalFlip at position 2 follows" in str(caught[0].message)


def test_describe_lists_every_reason(image_tree: Path):
    first = v1.Compose([v1.CenterCrop(32), Jitter(), v1.ToTensor(), Shift()])
    second = v1.Compose([v1.Resize(20), v1.ToTensor()])
    loader, caught = built(References(jpegs(image_tree), first, second))
    assert not loader.native and len(caught) == 1
    assert "loader.describe() lists all 2 reasons" in str(caught[0].message)
    lines = [line for line in loader.describe().splitlines() if line.startswith("  why:")]
    assert len(lines) == 2, loader.describe()
    assert "Jitter at position 1 of the transform of reference 0 runs in Python" in lines[0]
    assert "Shift at position 3 of the transform of reference 0 has no native equivalent" in lines[1]
    # Reference 1's Resize(20) is no reason: a size that depends on the image renders natively.
    assert "Resize(20)" not in loader.describe()


def test_describe_lists_every_step_that_keeps_a_joint_off_the_native_path(image_tree: Path):
    # Two steps force the fallback (RandomPerspective at 1, a Lambda at 3); the warning names the
    # first, describe() both, by class and position in the transform as written.
    t = v2.Compose([v2.RandomHorizontalFlip(), v2.RandomPerspective(), v2.CenterCrop(16),
                    v2.Lambda(lambda image: image), v2.ToImage()])
    loader, caught = built(JointSamples(jpegs(image_tree), t), collate_fn=list)
    assert not loader.native and len(caught) == 1, [str(w.message) for w in caught]
    text = str(caught[0].message)
    assert "v2.RandomPerspective at position 1" in text and "Lambda" not in text
    assert "loader.describe() lists all 2 reasons" in text
    lines = [line for line in loader.describe().splitlines() if line.startswith("  why:")]
    assert len(lines) == 2, loader.describe()
    assert "sample 0 holds a ringloader.Joint that is not native" in lines[0]
    assert "v2.RandomPerspective at position 1 is not a crop" in lines[0]
    assert "v2.Lambda at position 3 is not a crop" in lines[1]
    # Without the perspective step the Lambda alone is the reason, still at its own position.
    t = v2.Compose([v2.RandomHorizontalFlip(), v2.CenterCrop(16), v2.Lambda(lambda image: image),
                    v2.ToImage()])
    loader, _ = built(JointSamples(jpegs(image_tree), t), collate_fn=list)
    lines = [line for line in loader.describe().splitlines() if line.startswith("  why:")]
    assert len(lines) == 1 and "v2.Lambda at position 2" in lines[0], loader.describe()
    # The batches are torch's path's, each sample as materialize makes it.
    batch = next(iter(loader))
    assert [tuple(image.shape) for image, _ in batch] == [(3, 16, 16)] * 4


def test_an_image_folder_with_python_steps_lists_them_in_describe(image_tree: Path):
    with pytest.warns(UserWarning, match="Jitter"):  # the dataset's own warning, when it is made
        ds = rl.ImageFolder(image_tree, transform=v1.Compose([v1.CenterCrop(32), Jitter(),
                                                              v1.ToTensor()]))
    loader, caught = built(ds)
    assert not loader.native and caught == []
    assert "why:     runs per sample: " in loader.describe()
    assert "Jitter at position 1 of the transform runs in Python" in loader.describe()


class OpensItself(tud.Dataset):
    """The usual torch Dataset: opens its images with Pillow in __getitem__."""

    def __init__(self, files, transform=None):
        self.files, self.transform = files, transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        image = Image.open(self.files[i]).convert("RGB")
        return (image if self.transform is None else self.transform(image)), 0


class ReturnsPil(OpensItself):
    """Images decoded elsewhere, returned as PIL images."""

    def __init__(self, files):
        super().__init__(files)
        self.images = [Image.new("RGB", (8, 8)) for _ in files]

    def __getitem__(self, i):
        return self.images[i], 0


class FromBytes(OpensItself):
    """Encoded images held in memory, opened with Pillow."""

    def __init__(self, files, transform):
        super().__init__(files, transform)
        self.blobs = [Path(f).read_bytes() for f in files]

    def __getitem__(self, i):
        return self.transform(Image.open(io.BytesIO(self.blobs[i])).convert("RGB")), 0


def test_a_dataset_that_opens_pil_images_gets_a_one_time_hint(image_tree: Path, monkeypatch):
    monkeypatch.setattr(_torch_path, "_hinted", set())
    files = jpegs(image_tree)
    t = v1.Compose([v1.Resize((16, 16)), v1.PILToTensor()])
    loader, caught = built(OpensItself(files, t))
    assert not loader.native and len(caught) == 1
    assert caught[0].category is rl.FallbackWarning
    text = str(caught[0].message)
    assert "OpensItself.__getitem__ opens the image" in text and files[0] in text
    assert "Return ringloader.ImageFile(path, transform)" in text
    assert "category=ringloader.FallbackWarning" in text
    assert built(OpensItself(files, t))[1] == []  # once per Dataset class
    # Returned as PIL images: the same hint.
    assert "ReturnsPil.__getitem__ opens a PIL image" in str(built(ReturnsPil(files))[1][0].message)
    # Opened from bytes: ImageBytes is the reference that fits.
    text = str(built(FromBytes(files, t))[1][0].message)
    assert "FromBytes.__getitem__ opens an image from bytes" in text
    assert "Return ringloader.ImageBytes(data, transform)" in text
    # Silenced as the hint says.
    monkeypatch.setattr(_torch_path, "_hinted", set())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=rl.FallbackWarning)
        rl.DataLoader(OpensItself(files, t), batch_size=4)
    # A Dataset of tensors is not hinted at.
    monkeypatch.setattr(_torch_path, "_hinted", set())
    assert built(tud.TensorDataset(torch.zeros(8, 3)))[1] == []


# ---- 2. collate_fn=default_collate is the default ---------------------------------------------

def test_default_collate_keeps_the_zero_copy_slot_batch(image_tree: Path):
    from torch.utils.data import default_collate as collate  # under any name

    t = v1.Compose([v1.Resize(40), v1.CenterCrop(32), v1.PILToTensor()])
    for dataset in (rl.ImageFolder(image_tree, transform=t), References(jpegs(image_tree), t)):
        plain = list(rl.DataLoader(dataset, batch_size=4))
        loader = rl.DataLoader(dataset, batch_size=4, collate_fn=collate)
        assert loader.native and loader.collate_fn is collate
        got = []
        for batch in loader:
            # The batch is the slot: held while its tensor is, as without collate_fn (a copy made
            # by default_collate would have released it).
            assert isinstance(batch, list) and len(batch) == 2
            assert loader.stats()["slots_held"] >= 1
            got.append(batch)
        assert len(got) == len(plain)
        for (x, y), (px, py) in zip(got, plain):
            assert torch.equal(x, px) and torch.equal(y, py)
            assert torch.equal(x, collate([(r, int(l)) for r, l in zip(px, py)])[0])
        del got, batch, x
        assert loader.stats()["slots_held"] == 0
        assert "collate_fn is torch's default_collate" in loader.describe()


# ---- 3. torchvision's ImageFolder -----------------------------------------------------------

def torch_batches(dataset, **kwargs):
    return list(tud.DataLoader(dataset, batch_size=4, **kwargs))


@pytest.mark.parametrize("transform", [
    v1.Compose([v1.Resize(40), v1.CenterCrop(32), v1.PILToTensor()]),
    v2.Compose([v2.Resize((24, 32)), v2.PILToTensor()]),
    v1.Compose([v1.Resize(36), v1.CenterCrop(32), v1.ToTensor(),
                v1.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]),
])
def test_torchvision_image_folder_is_served_natively(image_tree: Path, transform):
    tv = torchvision.datasets.ImageFolder(image_tree, transform=transform,
                                          target_transform=lambda t: t + 10)
    loader, caught = built(tv, shuffle=False)
    assert loader.native and caught == [], [str(w.message) for w in caught]
    assert loader.dataset is tv and len(loader) == 6
    got, want = list(loader), torch_batches(tv)
    assert len(got) == len(want)
    for (x, y), (wx, wy) in zip(got, want):
        assert torch.equal(y, wy)  # labels after target_transform
        # Bound: max |diff| 0, for the float chain too (ToTensor/Normalize as torch computes them).
        assert x.dtype == wx.dtype and torch.equal(x, wx)
    # A transform assigned on the torchvision dataset is used from the next iter().
    tv.transform = v1.Compose([v1.CenterCrop(16), v1.PILToTensor()])
    x, _ = next(iter(loader))
    assert torch.equal(x, torch_batches(tv)[0][0])
    # One with a Python step cannot be served by this loader: named, no advice about strict=.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tv.transform = v1.Compose([v1.CenterCrop(16), Jitter(), v1.PILToTensor()])
        with pytest.raises(TypeError, match=r"Jitter at position 1 of the transform runs in "
                                            r"Python.*create a new ringloader.DataLoader"):
            iter(loader)


def test_torchvision_image_folder_that_cannot_be_served_is_named(image_tree: Path):
    t = v1.Compose([v1.CenterCrop(32), Jitter(), v1.PILToTensor()])
    tv = torchvision.datasets.ImageFolder(image_tree, transform=t)
    loader, caught = built(tv)
    assert not loader.native and len(caught) == 1
    text = str(caught[0].message)
    assert caught[0].category is rl.FallbackWarning
    assert "torchvision.datasets.folder.ImageFolder(" in text and str(image_tree) in text
    assert "Jitter at position 1 of its transform runs in Python" in text
    assert "Use ringloader.ImageFolder" in text
    assert "Jitter at position 1" in loader.describe()
    for (x, y), (wx, wy) in zip(loader, torch_batches(tv)):  # torch's own path, torch's samples
        assert torch.equal(x, wx) and torch.equal(y, wy)
    # Its own loader: decoded by that function, which ringloader cannot do natively.
    own = torchvision.datasets.DatasetFolder(image_tree, loader=lambda p: Image.open(p).convert("L"),
                                             extensions=(".jpg",), transform=v1.PILToTensor())
    loader, caught = built(own)
    assert not loader.native and len(caught) == 1
    assert "its loader" in str(caught[0].message) and "not torchvision's Pillow loader" in \
        str(caught[0].message)


def _init_worker(worker_id):
    pass


def test_torchvision_image_folder_with_worker_init_fn_keeps_torchs_workers(image_tree: Path):
    t = v1.Compose([v1.Resize(40), v1.CenterCrop(32), v1.PILToTensor()])
    tv = torchvision.datasets.ImageFolder(image_tree, transform=t)
    # What a native loader refuses for ringloader's datasets stays torch's for torchvision's.
    loader, caught = built(tv, num_workers=1, worker_init_fn=_init_worker)
    assert not loader.native and len(caught) == 1
    text = str(caught[0].message)
    assert "because worker_init_fn is given" in text and "Without it the folder is served " \
        "natively" in text
    for (x, y), (wx, wy) in zip(loader, torch_batches(tv)):
        assert torch.equal(x, wx) and torch.equal(y, wy)
    assert built(tv)[0].native
