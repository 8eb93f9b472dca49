"""torchvision's ``ssd`` and ``ssdlite`` detection presets (v2 classes, as the reference builds
them with use_v2=True) are not native: RandomIoUCrop draws its crop against the boxes. The
loader says so once, naming the first such step, its position and why, and torch's path runs
the preset. Their RandomPhotometricDistort and RandomZoomOut are native: for the draws the
loader made, the pixels equal v2's on the PIL photo (max |diff| 0), boxes within 1e-4 px."""

from __future__ import annotations

import warnings
from collections import defaultdict

import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import ringloader as rl
from imagegen import jpeg_bytes

MEAN = (123.0, 117.0, 104.0)
PRESETS = {
    "ssd": (lambda: [v2.RandomPhotometricDistort(),
                     v2.RandomZoomOut(fill=defaultdict(lambda: MEAN, {tv_tensors.Mask: 0})),
                     v2.RandomIoUCrop(), v2.RandomHorizontalFlip(0.5)],
            "v2.RandomIoUCrop at position 2", "rejection loop"),
    "ssdlite": (lambda: [v2.RandomIoUCrop(), v2.RandomHorizontalFlip(0.5)],
                "v2.RandomIoUCrop at position 0", "rejection loop"),
}


class Detections(torch.utils.data.Dataset):
    def __init__(self, t, paths):
        self.t, self.paths = t, paths

    def __len__(self):
        return len(self.paths)

    def target(self):
        boxes = tv_tensors.BoundingBoxes([[10.0, 12.0, 150.0, 120.0], [30.0, 40.0, 90.0, 130.0]],
                                         format="XYXY", canvas_size=(150, 211))
        return {"boxes": boxes, "labels": torch.tensor([1, 2])}

    def __getitem__(self, i):
        return rl.Joint(self.t, (rl.ImageFile(self.paths[i]), self.target()))


@pytest.mark.parametrize("name", list(PRESETS))
def test_the_preset_falls_back_naming_its_step(tmp_path, name):
    steps, where, why = PRESETS[name]
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"photo{i}.jpg")
        paths[-1].write_bytes(jpeg_bytes(211, 150, quality=88, seed=120 + i))
    t = v2.Compose(steps() + [v2.PILToTensor(), v2.ToDtype(torch.float, scale=True),
                              v2.ConvertBoundingBoxFormat("XYXY"), v2.SanitizeBoundingBoxes(),
                              v2.ToPureTensor()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Detections(t, paths), batch_size=2, collate_fn=list)
    assert not loader.native
    told = [str(w.message) for w in caught if "Joint" in str(w.message)]
    assert len(told) == 1 and where in told[0] and why in told[0], told
    # Torch's path runs v2 itself: each row a float image, its boxes inside it.
    rows = [row for batch in loader for row in batch]
    assert len(rows) == len(paths)
    for image, target in rows:
        assert image.dtype == torch.float32 and 0 <= float(image.min()) <= float(image.max()) <= 1
        height, width = image.shape[-2:]
        boxes = target["boxes"]
        assert type(boxes) is torch.Tensor and len(boxes) == len(target["labels"])
        assert bool((boxes[:, 2] <= width).all() and (boxes[:, 3] <= height).all())


@pytest.mark.parametrize("step, why", [(v2.RandomRotation(10), "rotated corners"),
                                       (v2.RandomAffine(5, translate=(0.1, 0.1)), "affine map")])
def test_rotation_and_affine_are_named_with_why(tmp_path, step, why):
    path = tmp_path / "photo.jpg"
    path.write_bytes(jpeg_bytes(211, 150, quality=88, seed=130))
    t = v2.Compose([v2.Resize(100), step, v2.PILToTensor()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Detections(t, [path]), batch_size=1, collate_fn=list)
    assert not loader.native
    told = [str(w.message) for w in caught if "Joint" in str(w.message)]
    assert told and f"v2.{type(step).__name__} at position 1" in told[0] and why in told[0], told


def _opened(path):
    from PIL import Image

    with Image.open(path) as image:
        return image.convert("RGB")


class Centred(Detections):
    """A small box at the photo's centre first: where it lands tells the zoom-out's offset."""

    def target(self):
        target = super().target()
        boxes = torch.cat([torch.tensor([[100.0, 70.0, 110.0, 80.0]]), target["boxes"]])
        return {"boxes": tv_tensors.wrap(boxes, like=target["boxes"]),
                "labels": torch.tensor([9, 1, 2])}


@pytest.mark.parametrize("side", [1.0, 1.7, 3.2])
def test_random_zoom_out_equals_v2_for_the_drawn_offset(tmp_path, side):
    """RandomZoomOut natively (the ssd preset's second step; p=1 and side_range=(s, s) fix the
    canvas, the offset is the loader's draw, told by the centre box): v2 with that offset gives
    the same image (max |diff| 0, the fill painted around it) and boxes (within 1e-4 px)."""
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"photo{i}.jpg")
        paths[-1].write_bytes(jpeg_bytes(211, 150, quality=88, seed=140 + i))

    def chain(padding=None):
        zoom = v2.RandomZoomOut(fill=MEAN, side_range=(side, side), p=1.0)
        if padding is not None:
            zoom.make_params = lambda flat_inputs: {"padding": padding}
        return v2.Compose([zoom, v2.RandomHorizontalFlip(p=1.0), v2.PILToTensor(),
                           v2.SanitizeBoundingBoxes()])

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(Centred(chain(), paths), batch_size=2, collate_fn=list)
    assert loader.native
    rows = [row for batch in loader for row in batch]
    canvas_w, canvas_h = int(211 * torch.tensor(side)), int(150 * torch.tensor(side))
    for path, (image, target) in zip(paths, rows):
        assert image.shape == (3, canvas_h, canvas_w)
        box = target["boxes"][0]  # flipped: x0 = canvas_w - (110 + left)
        left, top = round(canvas_w - 110 - float(box[0])), round(float(box[1]) - 70)
        assert 0 <= left <= canvas_w - 211 and 0 <= top <= canvas_h - 150
        padding = [left, top, canvas_w - 211 - left, canvas_h - 150 - top]
        want_image, want = chain(padding)(_opened(path), Centred(None, paths).target())
        assert torch.equal(image, want_image), (side, padding)
        torch.testing.assert_close(target["boxes"], want["boxes"], atol=1e-4, rtol=0)
        assert torch.equal(target["labels"], want["labels"])


def test_a_resize_after_random_zoom_out_is_named(tmp_path):
    """A resize after RandomZoomOut would blend its fill: torch's path, the warning naming both."""
    path = tmp_path / "photo.jpg"
    path.write_bytes(jpeg_bytes(211, 150, quality=88, seed=150))
    t = v2.Compose([v2.RandomZoomOut(fill=MEAN), v2.Resize((120, 120)), v2.PILToTensor()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Detections(t, [path]), batch_size=1, collate_fn=list)
    assert not loader.native
    told = [str(w.message) for w in caught if "Joint" in str(w.message)]
    assert told and "Resize" in told[0] and "RandomZoomOut" in told[0], told
    image, target = next(iter(loader))[0]
    assert image.shape == (3, 120, 120)


BRIGHTNESS, CONTRAST, SATURATION, HUE = 1.1, 0.7, 1.3, 0.03


def _distort(p=1.0):
    return v2.RandomPhotometricDistort(brightness=(BRIGHTNESS, BRIGHTNESS),
                                       contrast=(CONTRAST, CONTRAST),
                                       saturation=(SATURATION, SATURATION), hue=(HUE, HUE), p=p)


def _candidates():
    """Every draw v2's RandomPhotometricDistort can make with p=1 and fixed factors: the
    contrast before or after the others, and each channel permutation."""
    import itertools

    for before in (True, False):
        for perm in itertools.permutations(range(3)):
            yield {"brightness_factor": BRIGHTNESS, "contrast_factor": CONTRAST,
                   "saturation_factor": SATURATION, "hue_factor": HUE,
                   "contrast_before": before, "channel_permutation": torch.tensor(perm)}


def _equal_for_some_draw(image, run):
    """Whether ``run(params)`` (v2 with those fixed draws) gives ``image`` exactly, for one of
    the draws v2 can make; the draws that match."""
    return [params for params in _candidates() if torch.equal(run(params), image)]


def _photos(tmp_path, n, seed):
    paths = []
    for i in range(n):
        paths.append(tmp_path / f"photo{i}.jpg")
        paths[-1].write_bytes(jpeg_bytes(211, 150, quality=88, seed=seed + i))
    return paths


def test_photometric_distort_equals_v2_for_the_drawn_parameters(tmp_path):
    """RandomPhotometricDistort natively, first in the chain as in the ssd preset: with p=1 and
    fixed factors, each row equals v2 on the PIL photo for one of v2's draws (contrast before
    or after, the channel permutation): max |diff| 0; with p=0 it is the photo itself."""
    paths = _photos(tmp_path, 4, 160)
    for p in (1.0, 0.0):
        t = v2.Compose([_distort(p), v2.RandomHorizontalFlip(1.0), v2.PILToTensor(),
                        v2.SanitizeBoundingBoxes()])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loader = rl.DataLoader(Detections(t, paths), batch_size=2, collate_fn=list)
        assert loader.native
        rows = [row for batch in loader for row in batch]
        for path, (image, target) in zip(paths, rows):
            photo = _opened(path)
            if p == 0.0:
                assert torch.equal(image, F.pil_to_tensor(F.horizontal_flip(photo)))
                continue

            def run(params):
                distort = _distort()
                distort.make_params = lambda flat_inputs: params
                return v2.Compose([distort, v2.RandomHorizontalFlip(1.0), v2.PILToTensor()])(photo)

            matches = _equal_for_some_draw(image, run)
            assert matches, path
            assert torch.equal(target["boxes"], F.horizontal_flip(
                Detections(None, paths).target()["boxes"]))


@pytest.mark.parametrize("fill", [MEAN, 0])
def test_ssd_distort_and_zoom_out_equal_v2_with_the_fill_undistorted(tmp_path, fill):
    """The ssd preset's first two steps and its flip natively (the distort runs after the
    zoom-out, on the pixels that show the photo): for the loader's drawn offset and one of the
    distort's draws, v2 gives the same image (max |diff| 0: the fill, the mean or zeros, left
    undistorted, and the contrast takes the photo's mean) and boxes (within 1e-4 px)."""
    paths = _photos(tmp_path, 3, 170)

    def chain(padding=None, params=None):
        distort = _distort()
        if params is not None:
            distort.make_params = lambda flat_inputs: params
        zoom = v2.RandomZoomOut(fill=fill, side_range=(1.6, 1.6), p=1.0)
        if padding is not None:
            zoom.make_params = lambda flat_inputs: {"padding": padding}
        return v2.Compose([distort, zoom, v2.RandomHorizontalFlip(p=1.0), v2.PILToTensor(),
                           v2.SanitizeBoundingBoxes()])

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(Centred(chain(), paths), batch_size=3, collate_fn=list)
    assert loader.native
    (rows,) = list(loader)
    canvas_w, canvas_h = int(211 * torch.tensor(1.6)), int(150 * torch.tensor(1.6))
    for path, (image, target) in zip(paths, rows):
        box = target["boxes"][0]
        left, top = round(canvas_w - 110 - float(box[0])), round(float(box[1]) - 70)
        padding = [left, top, canvas_w - 211 - left, canvas_h - 150 - top]
        photo, want_target = _opened(path), Centred(None, paths).target()
        matches = _equal_for_some_draw(image, lambda params: chain(padding, params)(
            photo, want_target)[0])
        assert matches, (path, padding)
        _, want = chain(padding, matches[0])(photo, want_target)
        torch.testing.assert_close(target["boxes"], want["boxes"], atol=1e-4, rtol=0)
        assert image[:, 0, 0].tolist() == [int(m) for m in (MEAN if fill else (0, 0, 0))]


def test_photometric_distort_draws_are_keyed_per_sample_and_epoch(tmp_path):
    """Random draws (v2's defaults, p=0.5): a seeded loader gives the same rows every run,
    another epoch other draws."""
    paths = _photos(tmp_path, 3, 180)
    t = v2.Compose([v2.RandomPhotometricDistort(), v2.PILToTensor()])

    def epochs(seed):
        loader = rl.DataLoader(Detections(t, paths), batch_size=3, collate_fn=list,
                               generator=torch.Generator().manual_seed(seed))
        assert loader.native
        return [[row[0] for row in batch] for _ in range(2) for batch in loader]

    first, again = epochs(7), epochs(7)
    assert all(torch.equal(a, b) for x, y in zip(first, again) for a, b in zip(x, y))
    assert any(not torch.equal(a, b) for a, b in zip(first[0], first[1]))


def test_photometric_distort_after_a_tensor_conversion_is_named(tmp_path):
    """After PILToTensor v2 runs the distort with torch's tensor kernels (not Pillow's): torch's
    path, the warning naming the step."""
    paths = _photos(tmp_path, 1, 190)
    t = v2.Compose([v2.PILToTensor(), v2.RandomPhotometricDistort()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Detections(t, paths), batch_size=1, collate_fn=list)
    assert not loader.native
    told = [str(w.message) for w in caught if "Joint" in str(w.message)]
    assert told and "RandomPhotometricDistort" in told[0], told


def test_a_fill_beside_a_zoom_out_is_named_by_the_native_rule(tmp_path):
    """Whether a pad's fill fuses is the native rule's (``_C.fuses``): a Pad filling with the
    mean before a RandomZoomOut filling with zeros pads the image twice, with two fills, so
    torch's path runs it, and the warning names the Pad (the step whose fill cannot be the one
    padding) beside the zoom-out."""
    paths = _photos(tmp_path, 1, 200)
    t = v2.Compose([v2.Pad(4, fill=MEAN), v2.RandomZoomOut(fill=0, p=1.0), v2.PILToTensor()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Detections(t, paths), batch_size=1, collate_fn=list)
    assert not loader.native
    told = [str(w.message) for w in caught if "Joint" in str(w.message)]
    assert told and "v2.Pad pads the image with (123.0, 117.0, 104.0) beside v2.RandomZoomOut " \
        "at position 1" in told[0] and "one padding" in told[0], told


def test_a_distort_after_the_zoom_out_distorts_the_fill_too(tmp_path):
    """After the padding (its place among the colour steps) the distort runs on the whole
    canvas, as v2 runs it on the padded image: the fill is distorted with the photo, the
    contrast's mean taken over both (max |diff| 0 for one of v2's draws)."""
    paths = _photos(tmp_path, 2, 210)

    def chain(padding=None, params=None):
        zoom = v2.RandomZoomOut(fill=MEAN, side_range=(1.5, 1.5), p=1.0)
        if padding is not None:
            zoom.make_params = lambda flat_inputs: {"padding": padding}
        distort = _distort()
        if params is not None:
            distort.make_params = lambda flat_inputs: params
        return v2.Compose([zoom, distort, v2.PILToTensor()])

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(Centred(chain(), paths), batch_size=2, collate_fn=list)
    assert loader.native
    canvas_w, canvas_h = int(211 * torch.tensor(1.5)), int(150 * torch.tensor(1.5))
    for path, (image, target) in zip(paths, next(iter(loader))):
        box = target["boxes"][0]
        left, top = round(float(box[0]) - 100), round(float(box[1]) - 70)
        padding = [left, top, canvas_w - 211 - left, canvas_h - 150 - top]
        photo, want_target = _opened(path), Centred(None, paths).target()
        assert _equal_for_some_draw(image, lambda params: chain(padding, params)(
            photo, want_target)[0]), (path, padding)
        assert image[:, 0, 0].tolist() != [int(m) for m in MEAN]  # the fill distorted too


def test_a_distort_between_the_zoom_out_and_a_flip_distorts_the_fill_too(tmp_path):
    """A flip after the distort does not change what v2 distorts: the whole padded canvas, the
    fill with the photo (the distort may run after the flip, but on the whole image, not only
    on the pixels showing the photo as when it comes before the padding)."""
    paths = _photos(tmp_path, 2, 230)

    def chain(padding=None, params=None):
        zoom = v2.RandomZoomOut(fill=MEAN, side_range=(1.5, 1.5), p=1.0)
        if padding is not None:
            zoom.make_params = lambda flat_inputs: {"padding": padding}
        distort = _distort()
        if params is not None:
            distort.make_params = lambda flat_inputs: params
        return v2.Compose([zoom, distort, v2.RandomHorizontalFlip(p=1.0), v2.PILToTensor()])

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(Centred(chain(), paths), batch_size=2, collate_fn=list)
    assert loader.native
    canvas_w, canvas_h = int(211 * torch.tensor(1.5)), int(150 * torch.tensor(1.5))
    for path, (image, target) in zip(paths, next(iter(loader))):
        box = target["boxes"][0]
        left, top = round(canvas_w - 110 - float(box[0])), round(float(box[1]) - 70)
        padding = [left, top, canvas_w - 211 - left, canvas_h - 150 - top]
        photo, want_target = _opened(path), Centred(None, paths).target()
        assert image[:, 0, 0].tolist() != [int(m) for m in MEAN]  # the fill distorted too
        assert _equal_for_some_draw(image, lambda params: chain(padding, params)(
            photo, want_target)[0]), (path, padding)
