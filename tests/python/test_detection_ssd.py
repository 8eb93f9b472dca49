"""torchvision's ``ssd`` and ``ssdlite`` detection presets (v2 classes, as the reference builds
them with use_v2=True) run natively: RandomPhotometricDistort and RandomZoomOut in the native
render, RandomIoUCrop drawn per sample on the boxes with v2's own rejection loop and taken as a
slice of the rendered image, the flips after it natively. For the draws the loader made, the
pixels equal v2's on the PIL photo (max |diff| 0), boxes within 1e-4 px, labels exact."""

from __future__ import annotations

import warnings
from collections import defaultdict

import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import ringloader as rl
from imagegen import jpeg_bytes

MEAN = (123.0, 117.0, 104.0)
#: The presets' steps as torchvision's detection reference composes them (references/detection/
#: presets.py, use_v2=True), before the backend's conversion.
PRESETS = {
    "ssd": lambda: [v2.RandomPhotometricDistort(),
                    v2.RandomZoomOut(fill=defaultdict(lambda: MEAN, {tv_tensors.Mask: 0})),
                    v2.RandomIoUCrop(), v2.RandomHorizontalFlip(0.5)],
    "ssdlite": lambda: [v2.RandomIoUCrop(), v2.RandomHorizontalFlip(0.5)],
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
def test_the_preset_runs_natively_and_keyed(tmp_path, name):
    """The preset as the reference composes it (then PILToTensor, ToDtype, the box steps) is
    native without a warning; random draws (v2's defaults) keep each row's boxes inside its
    image with their labels, and are the same for any worker count and every run, another
    seed other crops."""
    paths = _photos(tmp_path, 6, 120)
    t = v2.Compose(PRESETS[name]() + [v2.PILToTensor(), v2.ToDtype(torch.float, scale=True),
                                      v2.ConvertBoundingBoxFormat("XYXY"),
                                      v2.SanitizeBoundingBoxes(), v2.ToPureTensor()])

    def rows(seed, num_workers):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loader = rl.DataLoader(Detections(t, paths), batch_size=3, collate_fn=list,
                                   num_workers=num_workers,
                                   generator=torch.Generator().manual_seed(seed))
        assert loader.native
        return [row for batch in loader for row in batch]

    first = rows(5, 0)
    assert len(first) == len(paths)
    for image, target in first:
        assert image.dtype == torch.float32 and 0 <= float(image.min()) <= float(image.max()) <= 1
        height, width = image.shape[-2:]
        boxes = target["boxes"]
        assert type(boxes) is torch.Tensor and len(boxes) == len(target["labels"]) > 0
        assert bool((boxes[:, 2] <= width).all() and (boxes[:, 3] <= height).all())
    for other in (rows(5, 2), rows(5, 1)):
        for (a, ta), (b, tb) in zip(first, other):
            assert torch.equal(a, b) and torch.equal(ta["boxes"], tb["boxes"])
            assert torch.equal(ta["labels"], tb["labels"])
    assert any(a.shape != b.shape for (a, _), (b, _) in zip(first, rows(6, 2)))


def _crop_of(canvas, image):
    """Every (top, left) at which ``image`` is a slice of ``canvas`` ([C, H, W]), exactly."""
    height, width = image.shape[-2:]
    rows, cols = canvas.shape[-2] - height + 1, canvas.shape[-1] - width + 1
    if rows <= 0 or cols <= 0:
        return []
    # Positions whose corners and centre match first (the fill repeats one colour), then all.
    fits = torch.ones(rows, cols, dtype=torch.bool)
    for dy, dx in [(0, 0), (height // 2, width // 2), (height - 1, width - 1), (0, width - 1),
                   (height - 1, 0)]:
        fits &= (canvas[:, dy:dy + rows, dx:dx + cols] == image[:, dy:dy + 1, dx:dx + 1]).all(0)
    ys, xs = torch.nonzero(fits, as_tuple=True)
    return [(int(y), int(x)) for y, x in zip(ys, xs)
            if torch.equal(canvas[:, y:y + height, x:x + width], image)]


def _iou_params(canvas_boxes, crop, canvas_hw):
    """v2's RandomIoUCrop parameters for the crop (top, left, height, width) of a canvas of
    ``canvas_hw``: {} where it is the whole canvas (v2's "leave as is" option); the boxes whose
    centre lies strictly inside it kept (v2's rule)."""
    top, left, height, width = crop
    if (height, width) == tuple(canvas_hw):
        return {}
    b = F.convert_bounding_box_format(canvas_boxes, new_format=tv_tensors.BoundingBoxFormat.XYXY)
    cx, cy = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2
    within = (left < cx) & (cx < left + width) & (top < cy) & (cy < top + height)
    return dict(top=top, left=left, height=height, width=width, is_within_crop_area=within)


def ssd_chain(first, end, crop=True, padding=None, params=None, iou=None):
    """``first``, the distort (fixed factors; ``params``: its draws), a zoom-out by 1.6
    (``padding``: its offset), RandomIoUCrop when ``crop`` (``iou``: its crop), then ``end``."""
    distort = _distort() if params is None else _fixed(_distort(), params)
    zoom = v2.RandomZoomOut(fill=MEAN, side_range=(1.6, 1.6), p=1.0)
    if padding is not None:
        _fixed(zoom, {"padding": padding})
    ioucrop = [v2.RandomIoUCrop() if iou is None else _fixed(v2.RandomIoUCrop(), iou)]
    return v2.Compose(first + [distort, zoom] + (ioucrop if crop else []) + end)


def _fixed(step, params):
    step.make_params = lambda flat_inputs: params
    return step


def test_ssdlite_equals_v2_for_the_drawn_crop(tmp_path):
    """ssdlite (RandomIoUCrop, then a flip, p=1 here): each row is a slice of v2's flipped photo;
    v2 with that crop as its draw gives the same image (max |diff| 0) and boxes (within 1e-4
    px: moved, the boxes whose centre falls outside dropped by SanitizeBoundingBoxes) and
    labels. The photos are one size: the rows come from one batch tensor."""
    paths = _photos(tmp_path, 6, 240)
    tail = [v2.RandomHorizontalFlip(1.0), v2.PILToTensor(), v2.SanitizeBoundingBoxes()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(Centred(v2.Compose([v2.RandomIoUCrop()] + tail), paths),
                               batch_size=3, collate_fn=list,
                               generator=torch.Generator().manual_seed(3))
    assert loader.native
    rows = [row for batch in loader for row in batch]
    cropped = 0
    for path, (image, target) in zip(paths, rows):
        photo, want_target = _opened(path), Centred(None, paths).target()
        canvas = F.horizontal_flip(F.pil_to_tensor(photo))
        found = _crop_of(canvas, image)
        assert len(found) == 1, (path, found)
        top, flipped_left = found[0]
        height, width = image.shape[-2:]
        crop = (top, 211 - flipped_left - width, height, width)
        params = _iou_params(want_target["boxes"], crop, (150, 211))
        cropped += bool(params)
        want_image, want = v2.Compose([_fixed(v2.RandomIoUCrop(), params)] + tail)(
            photo, want_target)
        assert torch.equal(image, want_image), crop
        torch.testing.assert_close(target["boxes"], want["boxes"], atol=1e-4, rtol=0)
        assert torch.equal(target["labels"], want["labels"])
    assert cropped > 0


def test_integer_boxes_follow_the_iou_crop_as_v2_rounds_them(tmp_path):
    """int64 boxes through ssdlite's crop and flip: exactly v2's."""
    paths = _photos(tmp_path, 4, 250)

    class Integer(Centred):
        def target(self):
            target = super().target()
            target["boxes"] = tv_tensors.wrap(target["boxes"].to(torch.int64),
                                              like=target["boxes"])
            return target

    tail = [v2.RandomHorizontalFlip(1.0), v2.PILToTensor(), v2.SanitizeBoundingBoxes()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(Integer(v2.Compose([v2.RandomIoUCrop()] + tail), paths),
                               batch_size=4, collate_fn=list,
                               generator=torch.Generator().manual_seed(4))
    assert loader.native
    for path, (image, target) in zip(paths, next(iter(loader))):
        photo, want_target = _opened(path), Integer(None, paths).target()
        (top, flipped_left), = _crop_of(F.horizontal_flip(F.pil_to_tensor(photo)), image)
        height, width = image.shape[-2:]
        params = _iou_params(want_target["boxes"], (top, 211 - flipped_left - width, height,
                                                    width), (150, 211))
        want_image, want = v2.Compose([_fixed(v2.RandomIoUCrop(), params)] + tail)(
            photo, want_target)
        assert target["boxes"].dtype == torch.int64
        assert torch.equal(image, want_image) and torch.equal(target["boxes"], want["boxes"])


@pytest.mark.parametrize("backend", ["pil", "tensor", "tv_tensor"])
def test_ssd_equals_v2_for_the_drawn_distort_zoom_and_crop(tmp_path, backend):
    """The whole ssd preset (distort with fixed factors, zoom-out by 1.6, RandomIoUCrop, flip)
    in each backend of torchvision's reference (the conversion last, or PILToTensor/ToImage
    first: then v2 distorts the uint8 tensor with torch's kernels, natively v2's own distort on
    the photo's pixels of the rendered canvas): the loader without the crop, same seed, gives
    the canvas (the zoom-out's offset told by the centre box, the distort's draw found among
    v2's); each row of the loader with it is a slice of that canvas, and v2 with those draws
    gives the same image (max |diff| 0), boxes (within 1e-4 px) and labels."""
    paths = _photos(tmp_path, 3, 260)
    first = {"pil": [], "tensor": [v2.PILToTensor()], "tv_tensor": [v2.ToImage()]}[backend]
    last = [v2.PILToTensor()] if backend == "pil" else []

    def chain(crop=True, padding=None, params=None, iou=None):
        return ssd_chain(first, [v2.RandomHorizontalFlip(p=1.0)] + last +
                         [v2.SanitizeBoundingBoxes()], crop, padding, params, iou)

    def rows(crop):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loader = rl.DataLoader(Centred(chain(crop), paths), batch_size=3, collate_fn=list,
                                   generator=torch.Generator().manual_seed(9))
        assert loader.native
        return [row for batch in loader for row in batch]

    canvas_w, canvas_h = int(211 * torch.tensor(1.6)), int(150 * torch.tensor(1.6))
    cropped = 0
    for path, (image, target), (canvas, whole) in zip(paths, rows(True), rows(False)):
        box = whole["boxes"][0]
        left, top = round(canvas_w - 110 - float(box[0])), round(float(box[1]) - 70)
        padding = [left, top, canvas_w - 211 - left, canvas_h - 150 - top]
        photo, want_target = _opened(path), Centred(None, paths).target()
        draws = _equal_for_some_draw(canvas, lambda params: chain(False, padding, params)(
            photo, want_target)[0])
        assert draws, (path, padding)
        found = _crop_of(canvas, image)
        assert len(found) == 1, (path, found)
        height, width = image.shape[-2:]
        crop = (found[0][0], canvas_w - found[0][1] - width, height, width)
        zoomed = v2.Compose(first + [_fixed(_distort(), draws[0]),
                             _fixed(v2.RandomZoomOut(fill=MEAN, side_range=(1.6, 1.6), p=1.0),
                                    {"padding": padding})])(photo, want_target)[1]["boxes"]
        params = _iou_params(zoomed, crop, (canvas_h, canvas_w))
        cropped += bool(params)
        want_image, want = chain(True, padding, draws[0], params)(photo, want_target)
        assert torch.equal(image, want_image), (path, crop)
        torch.testing.assert_close(target["boxes"], want["boxes"], atol=1e-4, rtol=0)
        assert torch.equal(target["labels"], want["labels"])
    assert cropped > 0


@pytest.mark.parametrize("steps, named", [
    ([v2.RandomHorizontalFlip(1.0), v2.RandomIoUCrop()], "RandomIoUCrop at position 1 follows v2.RandomHorizontalFlip"),
    ([v2.RandomIoUCrop(), v2.Resize(100)], "Resize(100) at position 1 follows"),
    ([v2.RandomIoUCrop(), v2.RandomPhotometricDistort()],
     "RandomPhotometricDistort at position 1 follows"),
])
def test_what_cannot_follow_the_iou_crop_natively_is_named(tmp_path, steps, named):
    """The crop is a slice of the rendered image: a flip before it, a geometric step or a step
    that looks at the whole image after it keep the Joint on torch's path, named."""
    paths = _photos(tmp_path, 1, 270)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Detections(v2.Compose(steps + [v2.PILToTensor()]), paths),
                               batch_size=1, collate_fn=list)
    assert not loader.native
    told = [str(w.message) for w in caught if "Joint" in str(w.message)]
    assert told and named in told[0] and "RandomIoUCrop" in told[0], told


@pytest.mark.parametrize("steps, why", [
    ([v2.RandomRotation(10, expand=True)], "expand=True"),
    ([v2.ColorJitter(0.2), v2.RandomAffine(5, translate=(0.1, 0.1))], "follows v2.ColorJitter")])
def test_rotation_and_affine_boxes_cannot_follow_are_named_with_why(tmp_path, steps, why):
    """Boxes follow a rotation or affine natively (test_joint_affine.py) but for these."""
    path = tmp_path / "photo.jpg"
    path.write_bytes(jpeg_bytes(211, 150, quality=88, seed=130))
    t = v2.Compose([v2.Resize(100), *steps, v2.PILToTensor()])
    step = steps[-1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Detections(t, [path]), batch_size=1, collate_fn=list)
    assert not loader.native
    told = [str(w.message) for w in caught if "Joint" in str(w.message)]
    where = f"v2.{type(step).__name__} at position {len(steps)}"
    assert told and where in told[0] and why in told[0], told


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
    the draws v2 can make; the draws that match. The factors as given, then float32-rounded:
    v2 draws each as a float32 uniform in its range (what v2's own step hands its kernels,
    as on the tensor backends' tail; the native Pillow path takes the range's value)."""
    def f32(params):
        return {k: float(torch.tensor(v, dtype=torch.float32)) if k.endswith("_factor") else v
                for k, v in params.items()}

    return [params for params in [*_candidates(), *map(f32, _candidates())]
            if torch.equal(run(params), image)]


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


#: What may follow the conversion: nothing (uint8), the preset's float scaling, and a
#: Normalize after it (float values computed per level, the fill written without being read).
_OUTPUTS = {"uint8": [], "float": [v2.ToDtype(torch.float32, scale=True)],
            "normalized": [v2.ToDtype(torch.float32, scale=True),
                           v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]}


@pytest.mark.parametrize("output", list(_OUTPUTS))
@pytest.mark.parametrize("fill", [MEAN, 0])
def test_ssd_distort_and_zoom_out_equal_v2_with_the_fill_undistorted(tmp_path, fill, output):
    """The ssd preset's first two steps and its flip natively (the distort runs after the
    zoom-out, on the pixels that show the photo): for the loader's drawn offset and one of the
    distort's draws, v2 gives the same image (max |diff| 0: the fill, the mean or zeros, left
    undistorted, and the contrast takes the photo's mean; uint8 or float output) and boxes
    (within 1e-4 px)."""
    paths = _photos(tmp_path, 3, 170)

    def chain(padding=None, params=None):
        distort = _distort()
        if params is not None:
            distort.make_params = lambda flat_inputs: params
        zoom = v2.RandomZoomOut(fill=fill, side_range=(1.6, 1.6), p=1.0)
        if padding is not None:
            zoom.make_params = lambda flat_inputs: {"padding": padding}
        return v2.Compose([distort, zoom, v2.RandomHorizontalFlip(p=1.0), v2.PILToTensor(),
                           *_OUTPUTS[output], v2.SanitizeBoundingBoxes()])

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
        if output == "uint8":
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


def test_photometric_distort_after_a_tensor_conversion_runs_v2_on_the_native_tensor(tmp_path):
    """After PILToTensor v2 runs the distort with torch's tensor kernels (not Pillow's): natively
    v2's own step runs on the decoded tensor, its draws seeded per row; each row equals v2's
    distort of the PIL photo's tensor with torch's generator seeded as that row's (max |diff|
    0), boxes and labels unchanged (with the zoom-out after it, the tensor backends of the ssd
    preset: test_detection_ssd_tensor.py)."""
    from ringloader.sources import _joint_tail

    paths = _photos(tmp_path, 3, 190)
    t = v2.Compose([v2.PILToTensor(), v2.RandomPhotometricDistort(p=0.9)])
    from ringloader.sources import _tail_pool

    seeds = []
    real, threads = _joint_tail._tail_seed, _tail_pool._threads
    try:  # rows one at a time: the seeds in their order
        _tail_pool._threads = lambda: 1
        _joint_tail._tail_seed = lambda g: seeds.append(real(g)) or seeds[-1]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loader = rl.DataLoader(Detections(t, paths), batch_size=3, collate_fn=list)
            rows = next(iter(loader))
    finally:
        _joint_tail._tail_seed, _tail_pool._threads = real, threads
    assert loader.native and len(seeds) == 3
    for (image, target), path, seed in zip(rows, paths, seeds):
        with Image.open(path) as opened:
            tensor = v2.PILToTensor()(opened.convert("RGB"))
        saved = torch.get_rng_state()
        torch.manual_seed(seed)
        want = v2.RandomPhotometricDistort(p=0.9)(tensor)
        torch.set_rng_state(saved)
        assert type(image) is torch.Tensor and float((image.double() - want.double()).abs().max()) == 0
        assert torch.equal(target["boxes"], Detections(t, paths).target()["boxes"])
        assert torch.equal(target["labels"], torch.tensor([1, 2]))


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


def test_a_mask_is_cropped_with_its_image(tmp_path):
    """A label image (``mode="mask"``) in the Joint: v2 crops it with the image, so natively it
    is the same slice of its rendered view, aligned pixel for pixel."""
    import numpy as np
    from PIL import Image

    (photo,) = _photos(tmp_path, 1, 280)
    mask_path = tmp_path / "mask.png"
    levels = (np.arange(150 * 211).reshape(150, 211) % 7).astype(np.uint8)
    Image.fromarray(levels).save(mask_path)
    t = v2.Compose([v2.RandomIoUCrop(), v2.RandomHorizontalFlip(1.0), v2.PILToTensor(),
                    v2.SanitizeBoundingBoxes()])

    class Masked(Detections):
        def __getitem__(self, i):
            return rl.Joint(self.t, {"image": rl.ImageFile(photo),
                                     "mask": rl.ImageFile(mask_path, mode="mask"),
                                     **self.target()})

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(Masked(t, [photo] * 6), batch_size=6, collate_fn=list,
                               generator=torch.Generator().manual_seed(2))
    assert loader.native
    canvas = F.horizontal_flip(F.pil_to_tensor(_opened(photo)))
    mask_canvas = F.horizontal_flip(torch.from_numpy(levels))
    shapes = set()
    for row in next(iter(loader)):
        assert isinstance(row["mask"], tv_tensors.Mask)
        (top, left), = _crop_of(canvas, row["image"])
        height, width = row["mask"].shape
        assert torch.equal(row["mask"], mask_canvas[top:top + height, left:left + width])
        shapes.add((height, width))
    assert len(shapes) > 1


@pytest.mark.parametrize("dtype, fmt", [(torch.float32, "XYXY"), (torch.float32, "XYWH"),
                                        (torch.float64, "CXCYWH"), (torch.int64, "XYXY")])
def test_the_crop_draw_is_v2s_make_params_for_the_same_seed(dtype, fmt):
    """The loader draws RandomIoUCrop's parameters with numpy in the boxes' dtype rather than
    with v2's torch operations (a few hundred a sample): for 150 seeds and random boxes
    (degenerate, out-of-frame and tiny ones among them) and two settings of the step, the
    parameters equal v2's make_params run with torch's global generator seeded alike."""
    from ringloader.transforms import _detection

    gen = torch.Generator().manual_seed(11)
    steps = [v2.RandomIoUCrop(), v2.RandomIoUCrop(min_scale=0.1, max_scale=0.9, trials=8,
                                                  sampler_options=[0.2, 0.5, 0.95, 2.0])]
    saved = torch.random.get_rng_state()
    try:
        for seed in range(150):
            h, w = (int(v) for v in torch.randint(20, 900, (2,), generator=gen))
            n = int(torch.randint(1, 6, (1,), generator=gen))
            xy = torch.rand(n, 2, generator=gen) * torch.tensor([w, h]) * 1.1 - 5
            wh = torch.rand(n, 2, generator=gen) * torch.tensor([w, h]) * 0.6
            wh[0] *= seed % 3  # a degenerate box every third draw
            boxes = F.convert_bounding_box_format(
                tv_tensors.BoundingBoxes(torch.cat([xy, xy + wh], 1).to(dtype), format="XYXY",
                                         canvas_size=(h, w)), new_format=fmt)
            step = steps[seed % 2]
            ours = _detection.iou_crop_params(step, [boxes], seed * 7919)
            torch.manual_seed(seed * 7919)
            want = step.make_params([boxes])
            assert ours.keys() == want.keys(), seed
            for key in want:
                if key == "is_within_crop_area":
                    assert torch.equal(ours[key], want[key]), seed
                else:
                    assert ours[key] == want[key], (seed, key)
    finally:
        torch.random.set_rng_state(saved)


def test_a_resumed_epoch_draws_the_same_crops(tmp_path):
    """The crop's draw is keyed by the sample's seed: an epoch stopped after one batch and
    resumed from ``state_dict()`` in a new loader (shuffled) gives the rest of the epoch's rows
    exactly as the uninterrupted epoch did, images and boxes."""
    paths = _photos(tmp_path, 6, 290)
    t = v2.Compose(PRESETS["ssd"]() + [v2.PILToTensor(), v2.SanitizeBoundingBoxes()])

    def loader():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            made = rl.DataLoader(Detections(t, paths), batch_size=2, shuffle=True, collate_fn=list,
                                 generator=torch.Generator().manual_seed(21))
        assert made.native
        return made

    whole = [row for batch in loader() for row in batch]
    first = loader()
    it = iter(first)
    next(it)
    state = first.state_dict()
    del it
    resumed = loader()
    resumed.load_state_dict(state)
    rest = [row for batch in resumed for row in batch]
    assert len(rest) == len(whole) - 2
    for (a, ta), (b, tb) in zip(whole[2:], rest):
        assert torch.equal(a, b) and torch.equal(ta["boxes"], tb["boxes"])
        assert torch.equal(ta["labels"], tb["labels"])
