"""torchvision's segmentation and detection reference presets given to ``rl.Joint`` as the objects
the references build: their ``__call__(self, img, target)`` takes the structure's two items, so
a Joint calls them as the reference's own dataset does (``preset(image, target)``), and one whose
``__call__`` only returns ``self.transforms(img, target)`` runs natively as that Compose.

The preset classes here are re-creations with the references' constructor and ``__call__``
shape (use_v2, the three backends), not their text. Bounds: max |diff| 0 for images, masks and
boxes against the preset called on the PIL image and ``tv_tensors.Mask`` the user's code opens
(fixed draws: the eval presets, a flip with p=1)."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

import ringloader as rl
from imagegen import jpeg_bytes

SIZES = [(96, 64), (56, 88), (72, 72), (40, 30)]
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class SegmentationPresetTrain:
    """The segmentation reference's train preset: its transforms built in __init__ by backend,
    applied to (image, target) by __call__."""

    def __init__(self, *, base_size, crop_size, hflip_prob=0.5, mean=MEAN, std=STD,
                 backend="pil", use_v2=True):
        steps = {"tensor": [v2.PILToTensor()], "tv_tensor": [v2.ToImage()], "pil": []}[backend]
        steps.append(v2.RandomResize(min_size=int(0.5 * base_size), max_size=int(2.0 * base_size)))
        if hflip_prob > 0:
            steps.append(v2.RandomHorizontalFlip(hflip_prob))
        steps.append(v2.RandomCrop(crop_size, pad_if_needed=True,
                                   fill={tv_tensors.Mask: 255, "others": 0}))
        if backend == "pil":
            steps.append(v2.PILToTensor())
        image_type = tv_tensors.Image if backend == "tv_tensor" else torch.Tensor
        steps += [v2.ToDtype({image_type: torch.float32, tv_tensors.Mask: torch.int64,
                              "others": None}, scale=True),
                  v2.Normalize(mean=mean, std=std), v2.ToPureTensor()]
        self.transforms = v2.Compose(steps)

    def __call__(self, img, target):
        return self.transforms(img, target)


class SegmentationPresetEval:
    def __init__(self, *, base_size, mean=MEAN, std=STD, backend="pil", use_v2=True):
        steps = {"tensor": [v2.PILToTensor()], "tv_tensor": [v2.ToImage()], "pil": []}[backend]
        steps.append(v2.Resize((base_size, base_size)))
        if backend == "pil":
            steps.append(v2.PILToTensor())
        steps += [v2.ToDtype(torch.float, scale=True), v2.Normalize(mean=mean, std=std),
                  v2.ToPureTensor()]
        self.transforms = v2.Compose(steps)

    def __call__(self, img, target):
        return self.transforms(img, target)


class DetectionPresetTrain:
    """The detection reference's train preset, its hflip recipe (the others' steps are tested in
    test_detection_*.py)."""

    def __init__(self, *, data_augmentation, hflip_prob=0.5, mean=(123.0, 117.0, 104.0),
                 backend="pil", use_v2=True):
        steps = {"tensor": [v2.PILToTensor()], "tv_tensor": [v2.ToImage()], "pil": []}[backend]
        if data_augmentation != "hflip":
            raise ValueError(data_augmentation)
        steps.append(v2.RandomHorizontalFlip(p=hflip_prob))
        if backend == "pil":
            steps.append(v2.ToImage())
        steps += [v2.ToDtype(torch.float, scale=True), v2.ConvertBoundingBoxFormat("XYXY"),
                  v2.SanitizeBoundingBoxes(), v2.ToPureTensor()]
        self.transforms = v2.Compose(steps)

    def __call__(self, img, target):
        return self.transforms(img, target)


class DetectionPresetEval:
    def __init__(self, backend="pil", use_v2=True):
        steps = {"tensor": [v2.PILToTensor()], "tv_tensor": [v2.ToImage()],
                 "pil": [v2.ToImage()]}[backend]
        steps += [v2.ToDtype(torch.float, scale=True), v2.ToPureTensor()]
        self.transforms = v2.Compose(steps)

    def __call__(self, img, target):
        return self.transforms(img, target)


class CountingPreset(SegmentationPresetEval):
    """A preset whose __call__ does more than apply its transforms: opaque to the native path."""

    def __call__(self, img, target):
        image, mask = self.transforms(img, target)
        return image, mask + 1


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """(photo, palette-PNG mask, (width, height)) per size."""
    root = tmp_path_factory.mktemp("joint_presets")
    out = []
    for i, (w, h) in enumerate(SIZES):
        photo = root / f"photo{i}.jpg"
        photo.write_bytes(jpeg_bytes(w, h, quality=88, seed=140 + i))
        y, x = np.mgrid[:h, :w]
        labels = ((x // 8 + 3 * (y // 8) + i) % 21).astype(np.uint8)
        labels[h // 2: h // 2 + 2] = 255
        mask = Image.fromarray(labels, "P")
        mask.putpalette(list(range(256)) * 3)
        mask.save(root / f"mask{i}.png")
        out.append((photo, root / f"mask{i}.png", (w, h)))
    return out


def _boxes(w, h):
    return tv_tensors.BoundingBoxes([[2.0, 3.0, w / 2, h - 4.0], [5.0, 1.0, 5.0, 9.0]],
                                    format="XYXY", canvas_size=(h, w))


class Segmentation(torch.utils.data.Dataset):
    def __init__(self, preset, photos):
        self.preset, self.photos = preset, photos

    def __len__(self):
        return len(self.photos)

    def __getitem__(self, i):
        photo, mask, _ = self.photos[i]
        return rl.Joint(self.preset, (rl.ImageFile(photo), rl.ImageFile(mask, mode="mask")))


class Detection(Segmentation):
    def __getitem__(self, i):
        photo, _, (w, h) = self.photos[i]
        return rl.Joint(self.preset, (rl.ImageFile(photo), {"boxes": _boxes(w, h),
                                                            "labels": torch.tensor([1, 2])}))


def _opened(photos, i):
    """(image, target) as the reference's own dataset opens them."""
    photo, mask, _ = photos[i]
    with Image.open(photo) as image, Image.open(mask) as labels:
        return image.convert("RGB"), tv_tensors.Mask(torch.from_numpy(np.array(labels)))


def _quiet_loader(dataset, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # natively, with no warning
        loader = rl.DataLoader(dataset, batch_size=2, collate_fn=list, **kwargs)
    assert loader.native
    return loader


def _diff(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a.double() - b.double()).abs().max())


@pytest.mark.parametrize("backend", ["pil", "tensor", "tv_tensor"])
def test_segmentation_presets_run_natively_as_their_transforms(photos, backend):
    train = SegmentationPresetTrain(base_size=48, crop_size=40, backend=backend)
    assert Segmentation(train, photos)[0].transform is train.transforms  # unwrapped
    rows = [row for batch in _quiet_loader(Segmentation(train, photos)) for row in batch]
    assert [(tuple(image.shape), tuple(mask.shape), mask.dtype) for image, mask in rows] == \
        [((3, 40, 40), (40, 40), torch.int64)] * len(photos)
    preset = SegmentationPresetEval(base_size=32, backend=backend)
    rows = [row for batch in _quiet_loader(Segmentation(preset, photos)) for row in batch]
    for i, (image, mask) in enumerate(rows):
        want_image, want_mask = preset(*_opened(photos, i))  # the reference's own call
        assert _diff(image, want_image) == 0 and _diff(mask, want_mask) == 0


@pytest.mark.parametrize("backend", ["pil", "tensor", "tv_tensor"])
def test_detection_presets_run_natively_as_their_transforms(photos, backend):
    for preset in (DetectionPresetTrain(data_augmentation="hflip", hflip_prob=1.0, backend=backend),
                   DetectionPresetEval(backend=backend)):
        dataset = Detection(preset, photos)
        rows = [row for batch in _quiet_loader(dataset) for row in batch]
        for i, (image, target) in enumerate(rows):
            structure = (_opened(photos, i)[0], {"boxes": _boxes(*photos[i][2]),
                                                 "labels": torch.tensor([1, 2])})
            want_image, want = preset(*structure)
            assert _diff(image, want_image) == 0
            assert _diff(target["boxes"], want["boxes"]) == 0
            assert target["labels"].tolist() == want["labels"].tolist()
            # The train preset sanitizes: box 2 (zero width) is dropped.
            assert want["labels"].tolist() == ([1] if isinstance(preset, DetectionPresetTrain)
                                               else [1, 2])


def test_a_preset_that_does_more_is_called_with_the_items_on_torchs_path(photos):
    preset = CountingPreset(base_size=32)
    dataset = Segmentation(preset, photos)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(dataset, batch_size=2, collate_fn=list, num_workers=1)
    assert not loader.native
    text = next(str(w.message) for w in caught if issubclass(w.category, rl.FallbackWarning))
    assert "CountingPreset" in text and "called with the structure's items" in text, text
    assert "does more than return self.transforms(image, target)" in text
    rows = [row for batch in loader for row in batch]  # in a worker process, no TypeError
    for i, (image, mask) in enumerate(rows):
        want_image, want_mask = preset(*_opened(photos, i))
        assert _diff(image, want_image) == 0 and _diff(mask, want_mask) == 0
        one = rl.materialize(dataset[i])
        assert _diff(one[0], want_image) == 0 and _diff(one[1], want_mask) == 0
    again = pickle.loads(pickle.dumps(dataset[0]))
    assert _diff(rl.materialize(again)[1], rows[0][1]) == 0


def test_joints_with_presets_pickle(photos):
    preset = SegmentationPresetEval(base_size=32)
    joint = Segmentation(preset, photos)[1]
    again = pickle.loads(pickle.dumps(joint))
    assert type(again.transform) is v2.Compose
    for a, b in zip(rl.materialize(joint), rl.materialize(again)):
        assert _diff(a, b) == 0


def test_a_callable_that_cannot_take_the_structure_is_named_when_the_joint_is_built(photos):
    photo, mask, (w, h) = photos[0]
    preset = SegmentationPresetEval(base_size=32)
    with pytest.raises(TypeError, match=r"Joint\(transform=...\): .*SegmentationPresetEval takes "
                                        r"\(img, target\).*a tuple of 3"):
        rl.Joint(preset, (rl.ImageFile(photo), rl.ImageFile(mask, mode="mask"), 7))
    with pytest.raises(TypeError, match=r"SegmentationPresetEval takes .*structure \(ImageFile\)"):
        rl.Joint(preset, rl.ImageFile(photo))

    def three(image, mask, extra):
        return image, mask, extra

    with pytest.raises(TypeError, match=r"test_joint_presets\..*three takes \(image, mask, extra\)"):
        rl.Joint(three, (rl.ImageFile(photo), rl.ImageFile(mask, mode="mask")))
    # A preset whose transforms is itself a function of the items: called with them too.
    wrapper = SegmentationPresetEval(base_size=32)
    wrapper.transforms = lambda image, mask: (v2.functional.pil_to_tensor(image), mask)
    got_image, got_mask = rl.materialize(rl.Joint(wrapper, (rl.ImageFile(photo),
                                                            rl.ImageFile(mask, mode="mask"))))
    assert got_image.shape == (3, h, w) and got_mask.shape == (h, w)
    # A function of the items is called with them.
    joint = rl.Joint(lambda image, target: (v2.functional.pil_to_tensor(image), target),
                     (rl.ImageFile(photo), {"labels": torch.tensor([1])}))
    image, target = rl.materialize(joint)
    assert image.shape == (3, h, w) and target["labels"].tolist() == [1]
