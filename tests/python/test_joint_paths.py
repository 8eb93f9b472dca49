"""One sample, one result: an ``rl.Joint`` gives the same tensors natively, on torch's path (the
fallback, in torch's workers or in-process) and through ``rl.materialize``, and that result is
what the user's own code computes: v2 on the PIL image it would have opened and a
``tv_tensors.Mask`` of the stored label values (with a ``ToImage()`` where a chain without a
tensor conversion first needs a tensor, else at its end). Every parity check here is exact:
max |diff| 0 on images and masks; boxes within 1e-4 px (natively they move by the recorded
geometry in float64, v2 in float32)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

import ringloader as rl
from imagegen import jpeg_bytes

NEAREST = v2.InterpolationMode.NEAREST
BICUBIC = v2.InterpolationMode.BICUBIC
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
# Photos landscape, portrait, square and of odd sizes (subsampled JPEG, as cameras write them).
SIZES = [(211, 150), (150, 203), (170, 170), (257, 131)]


def _python_step(sample):
    """A Python step that changes nothing: a chain holding it runs on torch's path."""
    return sample


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """(photo, palette-PNG mask, (width, height)) for each size in SIZES."""
    root = tmp_path_factory.mktemp("joint_paths")
    rng = np.random.default_rng(36)
    out = []
    for i, (w, h) in enumerate(SIZES):
        photo = root / f"photo{i}.jpg"
        photo.write_bytes(jpeg_bytes(w, h, quality=88, seed=40 + i))
        labels = np.zeros((h, w), np.uint8)
        for label in range(1, 6):  # blocks of labels 1..5 over a background of 0
            x, y = int(rng.integers(0, w - 20)), int(rng.integers(0, h - 20))
            labels[y:y + int(rng.integers(8, h - y)), x:x + int(rng.integers(8, w - x))] = label
        mask = Image.fromarray(labels, "P")
        mask.putpalette(rng.integers(0, 256, 768).astype(np.uint8).tobytes())  # not the labels
        mask.save(root / f"photo{i}_mask.png")
        out.append((photo, root / f"photo{i}_mask.png", (w, h)))
    return out


class Scenes(torch.utils.data.Dataset):
    """``Joint(t, {"image", "mask", "boxes", "index"})``: a photo, its label image and two float
    boxes (one partly out of the frame)."""

    def __init__(self, t, pairs):
        self.t, self.pairs = t, pairs

    def __len__(self):
        return len(self.pairs)

    def target(self, i):
        w, h = self.pairs[i][2]
        return tv_tensors.BoundingBoxes([[10.0, 12.5, w - 30.0, h - 20.0], [-6.0, 4.0, 40.0, 33.0]],
                                        format="XYXY", canvas_size=(h, w))

    def __getitem__(self, i):
        photo, mask, _ = self.pairs[i]
        return rl.Joint(self.t, {"image": rl.ImageFile(photo),
                                 "mask": rl.ImageFile(mask, mode="mask"),
                                 "boxes": self.target(i), "index": i})


def _own(own, pairs, i):
    """What the user's own code computes for sample i: ``own`` (a v2 chain) applied to the PIL
    image it would open, the mask's stored values as a tv_tensors.Mask, and the boxes."""
    photo, mask, _ = pairs[i]
    with Image.open(photo) as opened:
        image = opened.convert("RGB")
    with Image.open(mask) as opened:
        labels = tv_tensors.Mask(torch.from_numpy(np.array(opened)))
    return own({"image": image, "mask": labels, "boxes": Scenes(None, pairs).target(i),
                "index": i})


def _rows(loader):
    return sorted((s for batch in loader for s in batch), key=lambda s: s["index"])


def _max_diff(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    return float((a.double() - b.double()).abs().max())


def _assert_same(got, want, image_type, boxes_exact=True):
    """Bound: max |diff| 0 for the image and the mask; boxes exact (or within 1e-4 px when one
    side is the native path's float64 geometry)."""
    assert type(got["image"]) is image_type and type(want["image"]) is image_type
    assert _max_diff(got["image"], want["image"]) == 0
    assert type(got["mask"]) is tv_tensors.Mask
    assert _max_diff(got["mask"], want["mask"]) == 0
    assert got["boxes"].canvas_size == want["boxes"].canvas_size
    if boxes_exact:
        assert torch.equal(got["boxes"], want["boxes"])
    else:
        torch.testing.assert_close(got["boxes"], want["boxes"], atol=1e-4, rtol=0)
    assert got["index"] == want["index"]


# (steps, the same chain as the user's own code on PIL images writes it, image type out)
CHAINS = {
    # The issue's case: NEAREST then a crop, ending in either conversion.
    "nearest-PILToTensor": ([v2.Resize(97, interpolation=NEAREST), v2.CenterCrop(90),
                             v2.PILToTensor()], None, torch.Tensor),
    "nearest-ToImage": ([v2.Resize(97, interpolation=NEAREST), v2.CenterCrop(90), v2.ToImage()],
                        None, tv_tensors.Image),
    # No tensor conversion: a ToImage at the end.
    "bilinear-no-conversion": ([v2.Resize(97), v2.CenterCrop(90)],
                               [v2.Resize(97), v2.CenterCrop(90), v2.ToImage()],
                               tv_tensors.Image),
    "bicubic-flip-PILToTensor-ToDtype-Normalize": (
        [v2.Resize((90, 120), interpolation=BICUBIC), v2.RandomHorizontalFlip(p=1.0),
         v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)],
        None, torch.Tensor),
    # After the conversion: torch's uint8 bicubic kernel, natively too.
    "ToImage-bicubic-crop": ([v2.ToImage(), v2.Resize(97, interpolation=BICUBIC),
                              v2.CenterCrop(90)], None, tv_tensors.Image),
    # ToDtype with no conversion before it: the ToImage goes before it.
    "bilinear-ToDtype-at-the-end": (
        [v2.Resize(97), v2.CenterCrop(90),
         v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True)],
        [v2.Resize(97), v2.CenterCrop(90), v2.ToImage(),
         v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True)],
        tv_tensors.Image),
    # Colour steps before the conversion: Pillow's kernels on every path.
    "colour-steps-then-ToImage": (
        [v2.Resize(97), v2.CenterCrop(90), v2.RandomPosterize(5, p=1.0),
         v2.RandomSolarize(200, p=1.0), v2.RandomAutocontrast(p=1.0),
         v2.ColorJitter(brightness=(1.2, 1.2)), v2.RandomInvert(p=1.0), v2.ToImage()],
        None, tv_tensors.Image),
    # A conversion first (torchvision's "tensor" backend): torch's tensor kernels after it, for
    # the pure pixel moves that equal Pillow's; ToDtype takes the plain tensor's entry.
    "PILToTensor-first": (
        [v2.PILToTensor(), v2.CenterCrop(90), v2.RandomVerticalFlip(p=1.0),
         v2.ToDtype({torch.Tensor: torch.float32, "others": None}, scale=True)],
        None, torch.Tensor),
    # Resizes after the conversion: torch's uint8 kernels (antialiased bilinear, nearest) on
    # every path, the mask nearest as a Mask.
    "ToImage-first-bilinear-resize": (
        [v2.ToImage(), v2.Resize(97), v2.CenterCrop(90), v2.RandomHorizontalFlip(p=1.0)],
        None, tv_tensors.Image),
    "PILToTensor-first-nearest-resize": (
        [v2.PILToTensor(), v2.Resize((70, 90), interpolation=NEAREST),
         v2.ToDtype({torch.Tensor: torch.float32, "others": None}, scale=True)],
        None, torch.Tensor),
    # torchvision's own v2 recipe: ToDtype(torch.uint8) right after the conversion returns the
    # uint8 image unchanged, so it adds no step (as in the classification path); the dict form
    # leaves the mask as it is ("others": None).
    "ToImage-ToDtype-uint8-then-geometry": (
        [v2.ToImage(), v2.ToDtype(torch.uint8, scale=True), v2.Resize(97), v2.CenterCrop(90),
         v2.RandomHorizontalFlip(p=1.0), v2.ToDtype(torch.float32, scale=True)],
        None, tv_tensors.Image),
    "ToImage-ToDtype-uint8-dict-then-geometry": (
        [v2.ToImage(), v2.ToDtype({tv_tensors.Image: torch.uint8, "others": None}, scale=True),
         v2.Resize((70, 90), interpolation=NEAREST), v2.RandomVerticalFlip(p=1.0)],
        None, tv_tensors.Image),
    "PILToTensor-ToDtype-uint8-then-crop": (
        [v2.PILToTensor(), v2.ToDtype(torch.uint8, scale=True), v2.CenterCrop(90),
         v2.ToDtype({torch.Tensor: torch.float32, "others": None}, scale=True)],
        None, torch.Tensor),
    # Per-pixel steps after the conversion (fixed draws): torch's tensor kernels on every path;
    # natively v2 runs them on the rendered image, the mask and boxes left as the geometry made
    # them.
    "ToImage-then-colour-steps": (
        [v2.ToImage(), v2.Resize(97), v2.CenterCrop(90), v2.RandomHorizontalFlip(p=1.0),
         v2.ColorJitter(brightness=(1.3, 1.3)), v2.RandomSolarize(200, p=1.0),
         v2.RandomPosterize(5, p=1.0), v2.RandomAutocontrast(p=1.0), v2.RandomEqualize(p=1.0),
         v2.RandomAdjustSharpness(2.0, p=1.0), v2.GaussianBlur(5, sigma=(1.2, 1.2)),
         v2.RandomInvert(p=1.0), v2.RandomGrayscale(p=1.0),
         v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True),
         v2.Normalize(MEAN, STD)],
        None, tv_tensors.Image),
    "PILToTensor-then-colour-steps": (
        [v2.PILToTensor(), v2.CenterCrop(90), v2.ColorJitter(saturation=(0.6, 0.6)),
         v2.RandomApply([v2.ColorJitter(hue=(0.1, 0.1))], p=1.0), v2.Grayscale(3)],
        None, torch.Tensor),
    "ToImage-colour-then-ToDtype-with-a-mask-dtype": (
        [v2.ToImage(), v2.CenterCrop(90), v2.RandomHorizontalFlip(p=1.0),
         v2.ColorJitter(saturation=(1.5, 1.5)),
         v2.ToDtype({tv_tensors.Image: torch.float32, tv_tensors.Mask: torch.int64,
                     "others": None}, scale=True),
         v2.Normalize(MEAN, STD)],
        None, tv_tensors.Image),
    "ToImage-ToDtype-float-then-colour": (
        [v2.ToImage(), v2.CenterCrop(90), v2.ToDtype(torch.float32, scale=True),
         v2.ColorJitter(contrast=(0.7, 0.7))],
        None, tv_tensors.Image),
    "ToImage-first-bicubic-before": (
        [v2.Resize(101, interpolation=BICUBIC), v2.ToImage(), v2.CenterCrop((80, 96)),
         v2.RandomHorizontalFlip(p=1.0), v2.ToDtype(torch.float32, scale=True)],
        None, tv_tensors.Image),
}


@pytest.mark.parametrize("name", list(CHAINS))
def test_native_fallback_and_materialize_give_one_result(pairs, name):
    steps, own_steps, image_type = CHAINS[name]
    t = v2.Compose(steps)
    own = v2.Compose(own_steps or steps)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # natively, with no warning
        native = rl.DataLoader(Scenes(t, pairs), batch_size=3, collate_fn=list)
    assert native.native
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fallback = rl.DataLoader(Scenes(v2.Compose(steps + [_python_step]), pairs),
                                 batch_size=3, collate_fn=list)
    assert not fallback.native
    native_rows, fallback_rows = _rows(native), _rows(fallback)
    assert len(native_rows) == len(fallback_rows) == len(pairs)
    for i, (row, back) in enumerate(zip(native_rows, fallback_rows)):
        want = _own(own, pairs, i)
        _assert_same(back, want, image_type)
        _assert_same(row, want, image_type, boxes_exact=False)
        _assert_same(rl.materialize(Scenes(t, pairs)[i]), want, image_type)
    # The warning names the Python step that sent the second loader to torch's path.
    assert any("_python_step" in str(w.message) for w in caught)


def test_the_two_endings_of_the_issue_agree_natively(pairs):
    """Resize(97, NEAREST) + CenterCrop(90) ending in PILToTensor() or in ToImage(): one native
    batch each, equal to each other (max |diff| 0) and to rl.materialize of every sample."""
    batches = []
    for end in (v2.PILToTensor(), v2.ToImage()):
        t = v2.Compose([v2.Resize(97, interpolation=NEAREST), v2.CenterCrop(90), end])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loader = rl.DataLoader(Scenes(t, pairs), batch_size=len(pairs))
        assert loader.native
        batch = next(iter(loader))  # default collate: the zero-copy batch
        for i in range(len(pairs)):
            one = rl.materialize(Scenes(t, pairs)[i])
            assert _max_diff(batch["image"][i], one["image"].as_subclass(torch.Tensor)) == 0
            assert _max_diff(batch["mask"][i], one["mask"].as_subclass(torch.Tensor)) == 0
        batches.append(batch)
    assert _max_diff(batches[0]["image"], batches[1]["image"]) == 0
    assert torch.equal(batches[0]["mask"], batches[1]["mask"])


def test_fallback_in_torchs_workers_gives_the_native_rows(pairs):
    """The fallback with worker processes decodes as in-process: max |diff| 0 to native rows."""
    steps = [v2.Resize(97, interpolation=NEAREST), v2.CenterCrop(90), v2.ToImage()]
    native = _rows(rl.DataLoader(Scenes(v2.Compose(steps), pairs), batch_size=2,
                                 collate_fn=list))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = rl.DataLoader(Scenes(v2.Compose(steps + [_python_step]), pairs), batch_size=2,
                               num_workers=2, collate_fn=list)
    assert not loader.native
    for row, back in zip(native, _rows(loader)):
        _assert_same(back, row, tv_tensors.Image, boxes_exact=False)


@pytest.mark.parametrize("steps, named", [
    ([v2.ToImage(), v2.Resize(97, interpolation=v2.InterpolationMode.LANCZOS),
      v2.CenterCrop(90)], ["Resize", "ToImage", "tensor"]),
    # A colour step on the tensor is run natively by v2 after the geometry; not when a
    # geometric step follows it (the boxes would follow pixels moved after the colour step).
    ([v2.PILToTensor(), v2.ColorJitter(brightness=(1.3, 1.3)), v2.CenterCrop(90)],
     ["CenterCrop", "follows v2.ColorJitter"]),
])
def test_a_step_torchs_tensor_kernel_runs_stays_on_torchs_path_named(pairs, steps, named):
    """ToImage() then a Lanczos Resize, PILToTensor() then ColorJitter then a crop: v2 runs
    them on the tensor with torch's kernels in an order the native path does not reproduce; the
    loader says so, naming the step, and runs the chain on torch's path, where the batch rows
    equal rl.materialize and the user's own code (max |diff| 0)."""
    t = v2.Compose(steps)
    conversion = type(steps[0]).__name__
    image_type = tv_tensors.Image if conversion == "ToImage" else torch.Tensor
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Scenes(t, pairs), batch_size=3, collate_fn=list)
    assert not loader.native
    told = [str(w.message) for w in caught if "Joint" in str(w.message)]
    assert told and all(n in told[0] for n in named), told
    for i, row in enumerate(_rows(loader)):
        want = _own(t, pairs, i)
        _assert_same(row, want, image_type)
        _assert_same(rl.materialize(Scenes(t, pairs)[i]), want, image_type)


def test_a_plain_tensor_before_a_plain_tensor_image_is_named(pairs):
    """After PILToTensor the image is a plain tensor and v2 transforms the sample's first plain
    tensor as the image: a labels tensor placed before the image would be the one cropped, so
    such a Joint is not native, and the warning says why."""
    t = v2.Compose([v2.PILToTensor(), v2.CenterCrop(90)])

    class LabelsFirst(torch.utils.data.Dataset):
        def __len__(self):
            return len(pairs)

        def __getitem__(self, i):
            return rl.Joint(t, (torch.arange(4), rl.ImageFile(pairs[i][0])))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(LabelsFirst(), batch_size=2, collate_fn=list)
    assert not loader.native
    assert any("first plain tensor" in str(w.message) for w in caught), \
        [str(w.message) for w in caught]
    # The image first: native, and the labels pass through.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(Scenes(t, pairs), batch_size=2, collate_fn=list)
    assert loader.native


def test_to_tensor_at_the_end_is_native_and_equal(pairs):
    """v2's (deprecated) ToTensor at the end: a float plain tensor, max |diff| 0 on all paths."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ToTensor's deprecation notice
        end = v2.ToTensor()
    steps = [v2.Resize(97, interpolation=BICUBIC), v2.CenterCrop(90), end]
    t = v2.Compose(steps)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        native = rl.DataLoader(Scenes(t, pairs), batch_size=4, collate_fn=list)
    assert native.native
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fallback = rl.DataLoader(Scenes(v2.Compose(steps + [_python_step]), pairs),
                                 batch_size=4, collate_fn=list)
        fallback_rows = _rows(fallback)
        wants = [_own(t, pairs, i) for i in range(len(pairs))]
    for i, (row, back) in enumerate(zip(_rows(native), fallback_rows)):
        assert row["image"].dtype == torch.float32
        _assert_same(back, wants[i], torch.Tensor)
        _assert_same(row, wants[i], torch.Tensor, boxes_exact=False)
