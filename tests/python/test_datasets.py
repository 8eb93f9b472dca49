"""DatasetFolder and FileList: torchvision's attributes and sample order, native batching, and the
machinery they share with ImageFolder (per-sample path, pickling, transform reassignment)."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from torch.utils.data import Dataset

import ringloader as rl
from ringloader import transforms as T

from imagegen import make_image_tree

EVAL = T.Compose([T.Resize(32), T.CenterCrop(32), T.ToTensor()])


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    make_image_tree(root, {
        "cat": [{"name": "a.jpg"}, {"name": "b.JPG"}, {"name": "sub/c.jpeg"},
                {"name": "d.png", "format": "PNG"}, {"name": "notes.txt", "data": b"hi"}],
        "dog": [{"name": "e.jpg"}, {"name": "f.webp", "format": "WEBP"}],
        "eel": [{"name": "g.png", "format": "PNG"}],
    })
    return root


def pil_loader(path: str):
    from PIL import Image

    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


def same_listing(ours, theirs) -> None:
    assert ours.classes == theirs.classes
    assert ours.class_to_idx == theirs.class_to_idx
    assert ours.samples == theirs.samples
    assert ours.targets == theirs.targets


@pytest.mark.parametrize("extensions", [(".jpg", ".jpeg"), (".png",), ".webp", (".png", ".webp")])
def test_dataset_folder_lists_as_torchvision(tree: Path, extensions, tmp_path: Path):
    theirs = torchvision.datasets.DatasetFolder(str(tree), pil_loader, extensions=extensions,
                                                allow_empty=True)
    ours = rl.DatasetFolder(str(tree), extensions=extensions, allow_empty=True)
    same_listing(ours, theirs)
    assert ours.find_classes(str(tree)) == theirs.find_classes(str(tree))


def test_dataset_folder_is_valid_file_and_errors_as_torchvision(tree: Path):
    valid = lambda p: Path(p).stem in {"a", "e", "g"}  # noqa: E731
    theirs = torchvision.datasets.DatasetFolder(str(tree), pil_loader, is_valid_file=valid)
    ours = rl.DatasetFolder(str(tree), is_valid_file=valid)
    same_listing(ours, theirs)
    for kwargs in ({}, {"extensions": (".jpg",), "is_valid_file": valid}):
        with pytest.raises(ValueError, match="Both extensions and is_valid_file"):
            rl.DatasetFolder(str(tree), **kwargs)
    with pytest.raises(FileNotFoundError) as theirs_error:
        torchvision.datasets.DatasetFolder(str(tree), pil_loader, extensions=(".png",))
    with pytest.raises(FileNotFoundError) as ours_error:
        rl.DatasetFolder(str(tree), extensions=(".png",))
    assert str(ours_error.value) == str(theirs_error.value)
    with pytest.raises(TypeError, match="loader=.* not supported"):
        rl.DatasetFolder(str(tree), pil_loader, extensions=(".png",))


def test_find_classes_override_is_used(tree: Path):
    class OnlyCats(rl.DatasetFolder):
        def find_classes(self, directory):
            return ["cat"], {"cat": 0}

    ds = OnlyCats(str(tree), extensions=(".jpg", ".jpeg", ".png"))
    assert ds.classes == ["cat"] and len(ds) == 4 and set(ds.targets) == {0}


def test_all_are_torch_datasets(tree: Path, tmp_path: Path):
    listing = tmp_path / "list.txt"
    listing.write_text(f"{tree}/cat/a.jpg 0\n")
    for ds in (rl.ImageFolder(str(tree)), rl.DatasetFolder(str(tree), extensions=(".png", ".jpg")),
               rl.FileList(listing)):
        assert isinstance(ds, Dataset) and isinstance(ds, rl.NativeDataset)


def test_dataset_folder_pixels_and_native_batches_match_torchvision(tree: Path):
    tv = torchvision.transforms
    tv_tf = tv.Compose([tv.Resize(32), tv.CenterCrop(32), tv.ToTensor()])
    theirs = torchvision.datasets.DatasetFolder(str(tree), pil_loader, extensions=(".png", ".webp"),
                                                transform=tv_tf)
    ours = rl.DatasetFolder(str(tree), extensions=(".png", ".webp"), transform=EVAL)
    loader = rl.DataLoader(ours, batch_size=2, num_workers=2)
    assert loader.native
    images, labels = zip(*loader)
    got = torch.cat(images)
    want = torch.stack([theirs[i][0] for i in range(len(theirs))])
    assert torch.cat(labels).tolist() == theirs.targets
    # The same 8-bit pixels (PNG and WebP decode exactly); ToTensor's division may differ by 1 ulp.
    assert torch.equal((got * 255).round(), (want * 255).round())


def test_file_list_from_a_list_file(tree: Path, tmp_path: Path):
    listing = tmp_path / "train.txt"
    # Relative paths resolve against the list's folder; a path may contain spaces.
    (tmp_path / "with space").mkdir()
    (tmp_path / "with space" / "x.jpg").write_bytes((tree / "cat" / "a.jpg").read_bytes())
    listing.write_text(f"# path label\n{tree}/dog/e.jpg 1\n\nwith space/x.jpg\t0\n"
                       f"{tree}/eel/g.png 2\n")
    ds = rl.FileList(listing, transform=EVAL)
    assert ds.samples == [(f"{tree}/dog/e.jpg", 1), (f"{tmp_path}/with space/x.jpg", 0),
                          (f"{tree}/eel/g.png", 2)]
    assert ds.targets == [1, 0, 2]
    assert ds.classes == ["0", "1", "2"] and ds.class_to_idx == {"0": 0, "1": 1, "2": 2}
    assert ds.find_classes() == (ds.classes, ds.class_to_idx)
    folder = rl.ImageFolder(str(tree), transform=EVAL)
    by_path = {p: i for i, (p, _) in enumerate(folder.samples)}
    batches = list(rl.DataLoader(ds, batch_size=3))
    assert len(batches) == 1
    images, labels = batches[0]
    assert labels.tolist() == [1, 0, 2]
    assert torch.equal(images[0], folder[by_path[f"{tree}/dog/e.jpg"]][0])
    assert torch.equal(images[1], folder[by_path[f"{tree}/cat/a.jpg"]][0])


def test_file_list_errors_name_the_line(tmp_path: Path):
    listing = tmp_path / "bad.txt"
    listing.write_text("a.jpg 0\nb.jpg cat\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: label \"cat\""):
        rl.FileList(listing)
    with pytest.raises(FileNotFoundError):
        rl.FileList(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="2 paths but 1 labels"):
        rl.FileList(["a.jpg", "b.jpg"], [0])
    with pytest.raises(ValueError, match="non-negative"):
        rl.FileList(["a.jpg"], [-1])
    with pytest.raises(ValueError, match="label 3 has no name"):
        rl.FileList(["a.jpg"], [3], classes=["x", "y"])
    with pytest.raises(TypeError, match="labels are missing"):
        rl.FileList(["a.jpg"])


def test_file_list_from_paths_and_labels_shares_the_machinery(tree: Path):
    paths = [str(tree / "cat" / "a.jpg"), str(tree / "eel" / "g.png"), str(tree / "dog" / "e.jpg")]
    ds = rl.FileList(paths, np.array([0, 2, 1]), transform=EVAL, classes=["cat", "dog", "eel"])
    assert ds.classes == ["cat", "dog", "eel"] and ds.targets == [0, 2, 1]
    # Pickling and reassigning the transform work as for ImageFolder.
    clone = pickle.loads(pickle.dumps(ds))
    assert torch.equal(clone[1][0], ds[1][0])
    assert copy.deepcopy(ds).samples == ds.samples
    ds.transform = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])
    loader = rl.DataLoader(ds, batch_size=3)
    assert next(iter(loader))[0].shape == (3, 3, 16, 16)
    # A Python step makes it per sample (hybrid path), as for ImageFolder.
    with pytest.warns(UserWarning, match=r"ringloader.FileList\(None\): the transform steps"):
        ds.transform = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor(),
                                  lambda x: x * 2])
    hybrid = rl.DataLoader(ds, batch_size=3, num_workers=0)
    assert not hybrid.native
    images, labels = next(iter(hybrid))
    assert images.shape == (3, 3, 16, 16) and labels.tolist() == [0, 2, 1]
