"""Segmentation Datasets natively: label images (``mode="mask"``) decoded as stored, and
samples whose references point to several files (an image and its mask), equal to the same
Dataset decoding with PIL under torch's DataLoader."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.utils.data as tud
import torchvision.transforms as v1
from PIL import Image

import ringloader as rl

N = v1.InterpolationMode.NEAREST
IMAGE = v1.Compose([v1.Resize(40), v1.CenterCrop(32), v1.ToTensor(),
                    v1.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
MASK = v1.Compose([v1.Resize(40, interpolation=N), v1.CenterCrop(32), v1.PILToTensor()])
MASK_RANDOM = v1.Compose([v1.RandomResizedCrop(24, interpolation=N), v1.RandomHorizontalFlip(),
                          v1.PILToTensor()])
KINDS = ("png-P", "png-L", "bmp-P", "bmp-L", "tiff-P", "tiff-L")


def _write_mask(labels: np.ndarray, kind: str, path: Path, seed: int) -> None:
    fmt, mode = kind.split("-")
    mask = Image.fromarray(labels, "L")
    if mode == "P":
        mask = Image.fromarray(labels, "P")
        # A colour palette: the native decode must give the indices, not these colours.
        mask.putpalette(np.random.default_rng(seed).integers(0, 256, 768).astype(np.uint8).tobytes())
    mask.save(path, format=fmt.upper())
    with Image.open(path) as back:
        assert back.mode == mode  # what Pillow reads back, and the native path matches


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    """12 JPEG images (sizes vary) and, for each kind of label image, a mask of each."""
    root = tmp_path_factory.mktemp("seg")
    rng = np.random.default_rng(3)
    out: dict = {"images": []}
    for kind in KINDS:
        out[kind] = []
    for i in range(12):
        h, w = 45 + 3 * i, 60 - i
        image = root / f"img{i}.jpg"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(image, quality=90)
        out["images"].append(image)
        labels = rng.integers(0, 21, (h, w), dtype=np.uint8)
        labels[: h // 2, : w // 3] = 255  # "ignore" regions, as VOC has
        for kind in KINDS:
            path = root / f"mask{i}-{kind}.{kind[:3]}"
            _write_mask(labels, kind, path, i)
            out[kind].append(path)
    return out


class Segmentation(tud.Dataset):
    """What users write: an image and its label image, as references (``lazy``) or opened
    with PIL."""

    def __init__(self, images, masks, lazy: bool, image_t=IMAGE, mask_t=MASK):
        self.images, self.masks, self.lazy = images, masks, lazy
        self.image_t, self.mask_t = image_t, mask_t

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        if self.lazy:
            return (rl.ImageFile(self.images[i], self.image_t),
                    rl.ImageFile(self.masks[i], self.mask_t, mode="mask"))
        return (self.image_t(Image.open(self.images[i]).convert("RGB")),
                self.mask_t(Image.open(self.masks[i])))


def _native(dataset, **kwargs) -> rl.DataLoader:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the native path serves it
        loader = rl.DataLoader(dataset, **kwargs)
    assert loader.native
    return loader


@pytest.mark.parametrize("kind", KINDS)
def test_image_and_mask_equal_pil_under_torch(data, kind):
    images, masks = data["images"], data[kind]
    loader = _native(Segmentation(images, masks, lazy=True), batch_size=5, num_workers=2,
                     persistent_workers=False)
    got = list(loader)
    want = list(tud.DataLoader(Segmentation(images, masks, lazy=False), batch_size=5))
    assert len(got) == len(want) == 3
    for (image, mask), (want_image, want_mask) in zip(got, want):
        assert mask.dtype == want_mask.dtype == torch.uint8
        assert mask.shape == want_mask.shape == (len(want_mask), 1, 32, 32)
        assert torch.equal(mask, want_mask)  # max |diff| 0
        assert image.dtype == want_image.dtype and torch.equal(image, want_image)
    assert 255 in got[0][1] and int(got[0][1][got[0][1] != 255].max()) < 21  # indices, not colours
    # One decode per file: 12 images and 12 masks.
    assert loader.stats()["decodes"] == 24
    # The same through rl.materialize and default_collate, the reference of every reference.
    lazy = Segmentation(images, masks, lazy=True)
    first = tud.default_collate([rl.materialize(lazy[i]) for i in range(5)])
    assert torch.equal(first[1], got[0][1]) and torch.equal(first[0], got[0][0])


@pytest.mark.parametrize("mask_t", [
    v1.Compose([v1.Resize(40, interpolation=N), v1.CenterCrop(32), v1.ToTensor()]),
    v1.Compose([v1.Resize((36, 40), interpolation=N), v1.Pad(4, fill=255), v1.CenterCrop(42),
                v1.PILToTensor()]),
], ids=["to_tensor", "pad_fill"])
def test_other_fixed_mask_transforms_equal_pil(data, mask_t):
    """ToTensor scales the labels as torchvision does (value / 255); padding fills with the
    given label."""
    images, masks = data["images"], data["png-P"]
    got = list(_native(Segmentation(images, masks, lazy=True, mask_t=mask_t), batch_size=6))
    want = list(tud.DataLoader(Segmentation(images, masks, lazy=False, mask_t=mask_t), batch_size=6))
    for (_, mask), (_, want_mask) in zip(got, want):
        assert mask.dtype == want_mask.dtype and torch.equal(mask, want_mask)


def test_a_mask_alone_and_beside_views_of_its_image(data):
    """A mask as the only reference, and an image's mask beside two views of the image: each
    view renders its own file."""
    masks, images = data["png-P"], data["images"]

    class Views(tud.Dataset):
        def __len__(self):
            return len(images)

        def __getitem__(self, i):
            return {"mask": rl.ImageFile(masks[i], MASK, mode="mask"),
                    "views": [rl.ImageFile(images[i], IMAGE), rl.ImageFile(masks[i], MASK, mode="mask"),
                              rl.ImageFile(images[i], IMAGE)], "i": i}

    alone = list(_native([rl.ImageFile(m, MASK, mode="mask") for m in masks], batch_size=4))
    eager = [MASK(Image.open(m)) for m in masks]
    assert torch.equal(torch.cat(alone), torch.stack(eager))
    want = list(tud.DataLoader([rl.materialize(Views()[i]) for i in range(len(images))], batch_size=4))
    for layout in ("NCHW", "NHWC"):
        got = list(_native(Views(), batch_size=4, num_workers=2, layout=layout))
        assert got[0]["mask"].shape == ((4, 1, 32, 32) if layout == "NCHW" else (4, 32, 32, 1))
        for a, b in zip(got, want):
            if layout == "NHWC":  # channels last: the same values, one channel kept
                b = {"mask": b["mask"].permute(0, 2, 3, 1), "i": b["i"],
                     "views": [t.permute(0, 2, 3, 1) for t in b["views"]]}
            assert torch.equal(a["mask"], b["mask"]) and torch.equal(a["i"], b["i"])
            for x, y in zip(a["views"], b["views"]):
                assert torch.equal(x, y)


def test_seeded_random_masks_draw_as_gray_images_and_keep_labels(data):
    """With random transforms the draws are the loader's (per sample and view, as for any
    reference): a palette mask renders exactly as a gray image of its indices would with the
    same draws, and its values stay labels."""
    palette, gray = data["png-P"], data["png-L"]  # the same labels, stored two ways

    class Pair(tud.Dataset):
        def __init__(self, masks, mode):
            self.masks, self.mode = masks, mode

        def __len__(self):
            return len(self.masks)

        def __getitem__(self, i):
            return (rl.ImageFile(data["images"][i], IMAGE),
                    rl.ImageFile(self.masks[i], MASK_RANDOM, mode=self.mode))

    def run(masks, mode, workers):
        torch.manual_seed(5)
        return list(_native(Pair(masks, mode), batch_size=4, shuffle=True, num_workers=workers))

    as_masks = run(palette, "mask", 1)
    as_gray = run(gray, "L", 2)
    for (image, mask), (image_g, mask_g) in zip(as_masks, as_gray):
        assert torch.equal(image, image_g)
        assert mask.shape == (len(mask), 1, 24, 24) and torch.equal(mask, mask_g)
        assert set(mask.unique().tolist()) <= set(range(21)) | {255}
    # Deterministic for any number of decode threads.
    for a, b in zip(as_masks, run(palette, "mask", 3)):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_a_missing_or_unreadable_mask_names_its_file(data, tmp_path):
    images = data["images"]
    masks = list(data["png-P"])
    masks[4] = tmp_path / "gone.png"
    rgb = tmp_path / "rgb.png"
    Image.new("RGB", (40, 40), (1, 2, 3)).save(rgb)
    masks[9] = rgb  # Pillow opens it as "RGB": not a label image
    ds = Segmentation(images, masks, lazy=True)
    it = iter(_native(ds, batch_size=4))
    next(it)
    with pytest.raises(rl.SampleError) as info:
        next(it)
    assert info.value.index == 4 and "gone.png" in str(info.value)
    loader = _native(ds, batch_size=4, on_error="skip", persistent_workers=False)
    got = list(loader)
    assert sum(len(mask) for _, mask in got) == 10
    errors = " ".join(loader.stats()["recent_errors"])
    assert "sample 4 (" + str(masks[4]) in errors
    assert "sample 9 (" + str(rgb) in errors and "8-bit RGB PNG" in errors
    # The delivered rows are the good samples, in order.
    kept = [i for i in range(12) if i not in (4, 9)]
    eager = Segmentation(images, masks, lazy=False)
    assert torch.equal(torch.cat([m for _, m in got]), torch.stack([eager[i][1] for i in kept]))
    # replace: every row is a whole good sample (its image and its own mask).
    by_image = {eager[i][0].numpy().tobytes(): eager[i][1] for i in kept}
    for image, mask in _native(ds, batch_size=4, on_error="replace"):
        for x, m in zip(image, mask):
            assert torch.equal(by_image[x.numpy().tobytes()], m)


def test_image_bytes_masks_and_pairs_in_memory(data):
    images, masks = data["images"], data["bmp-P"]
    blobs = [(Path(a).read_bytes(), Path(b).read_bytes()) for a, b in zip(images, masks)]

    class InMemory(tud.Dataset):
        def __len__(self):
            return len(blobs)

        def __getitem__(self, i):
            # Both in memory, the image from memory and the mask from its file, and the reverse.
            if i % 3 == 0:
                return rl.ImageBytes(blobs[i][0], IMAGE), rl.ImageBytes(blobs[i][1], MASK, mode="mask")
            if i % 3 == 1:
                return rl.ImageBytes(blobs[i][0], IMAGE), rl.ImageFile(masks[i], MASK, mode="mask")
            return rl.ImageFile(images[i], IMAGE), rl.ImageBytes(blobs[i][1], MASK, mode="mask")

    got = list(_native(InMemory(), batch_size=6, num_workers=2))
    want = list(tud.DataLoader(Segmentation(images, masks, lazy=False), batch_size=6))
    for (a, am), (b, bm) in zip(got, want):
        assert torch.equal(a, b) and torch.equal(am, bm)


def test_what_stays_on_torchs_path_warns(data):
    images, masks = data["images"], data["png-P"]

    class Shifting(tud.Dataset):
        """Sample 3's references point at one file, the others' at two."""

        def __len__(self):
            return 6

        def __getitem__(self, i):
            mask = images[i] if i == 3 else masks[i]
            return rl.ImageFile(images[i], IMAGE), rl.ImageFile(mask, MASK, mode="mask")

    with pytest.warns(UserWarning, match=r"sample 3 point to files \[0, 0\]"):
        assert not rl.DataLoader(Shifting(), batch_size=2).native


def test_the_benchmarks_segmentation_dataset_is_native_and_equals_pil(data, tmp_path):
    from ringloader.bench import SegmentationRows, _write_masks

    rows = [(str(p), 0) for p in data["images"][:4]]
    masks = _write_masks(rows, tmp_path)
    got = next(iter(_native(SegmentationRows(rows, masks, lazy=True), batch_size=4)))
    want = next(iter(tud.DataLoader(SegmentationRows(rows, masks, lazy=False), batch_size=4)))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert got[1].shape == (4, 1, 224, 224) and int(got[1].max()) > 0


def test_the_native_loaders_more_files_argument_is_checked(data):
    from ringloader import _C
    from ringloader import transforms as T

    paths = [str(p) for p in data["images"][:2]]
    view = {"transform": T.split(v1.CenterCrop(8)).steps, "dtype": "uint8"}
    options = {"batch_size": 1, "views": [view, dict(view, file=1, mask=True)]}
    with pytest.raises(ValueError, match="more_files has 1 entries; expected one per path"):
        _C.Loader(paths, [0, 1], options, more_files=[[str(data["png-P"][0])]])
    with pytest.raises(TypeError, match=r"more_files\[1\] entries must be a path"):
        _C.Loader(paths, [0, 1], options, more_files=[None, [3]])
    with pytest.raises(ValueError, match=r"sample 0 \(.*img0.jpg\) has 1 file\(s\); the views render 2"):
        _C.Loader(paths, [0, 1], options, more_files=[None, [str(data["png-P"][1])]])
    with pytest.raises(TypeError, match="unknown view option 'files'"):
        _C.Loader(paths, [0, 1], {"batch_size": 1, "views": [dict(view, files=1)]})
