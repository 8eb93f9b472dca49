"""torchvision's ``ssd`` detection preset in its ``"tensor"`` and ``"tv_tensor"`` backends
(``PILToTensor()`` or ``ToImage()`` first, as references/detection/presets.py builds it): v2 runs
RandomPhotometricDistort on the uint8 tensor with torch's tensor kernels, before the zoom-out
pads it. Natively the canvas is rendered (the conversion, the zoom-out with its fill, the flips),
then v2's own distort runs on the pixels showing the photo, unflipped (the fill undistorted, as
v2 leaves it), then RandomIoUCrop is a slice. For the loader's draws the image equals v2's
(max |diff| 0), boxes within 1e-4 px, labels exactly (the whole preset with its crop, in each
backend: test_detection_ssd.py)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torchvision.transforms import v2

import ringloader as rl
from test_detection_ssd import (MEAN, PRESETS, Centred, Detections, _crop_of, _distort,
                                _equal_for_some_draw, _fixed, _iou_params, _opened, _photos,
                                ssd_chain)

CONVERSIONS = {"tensor": v2.PILToTensor, "tv_tensor": v2.ToImage}


def _told(t, paths):
    """The Joint warnings of a loader over ``t`` that runs on torch's path."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Detections(t, paths), batch_size=1, collate_fn=list)
    assert not loader.native
    return [str(w.message) for w in caught if "Joint" in str(w.message)]


def _loader(t, paths, seed, dataset=Detections, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(dataset(t, paths), collate_fn=list,
                               generator=torch.Generator().manual_seed(seed), **kw)
    assert loader.native, loader.describe()
    return loader


@pytest.mark.parametrize("backend", list(CONVERSIONS))
def test_the_tensor_backends_of_ssd_run_natively_and_keyed(tmp_path, backend):
    """The preset as the reference composes it for the backend runs natively without a warning,
    its distort named in describe(); rows keep their boxes inside the image, and are the same
    for any worker count, another seed other draws."""
    paths = _photos(tmp_path, 6, 280)
    t = v2.Compose([CONVERSIONS[backend]()] + PRESETS["ssd"]() + [
        v2.ToDtype(torch.float, scale=True), v2.ConvertBoundingBoxFormat("XYXY"),
        v2.SanitizeBoundingBoxes(), v2.ToPureTensor()])

    def rows(seed, num_workers):
        loader = _loader(t, paths, seed, batch_size=3, num_workers=num_workers)
        assert "v2.RandomPhotometricDistort" in loader.describe()
        return [row for batch in loader for row in batch]

    first = rows(5, 0)
    assert len(first) == len(paths)
    for image, target in first:
        assert image.dtype == torch.float32 and 0 <= float(image.min()) <= float(image.max()) <= 1
        boxes = target["boxes"]
        assert len(boxes) == len(target["labels"]) > 0
        assert bool((boxes[:, 2] <= image.shape[-1]).all() and
                    (boxes[:, 3] <= image.shape[-2]).all())
    for (a, ta), (b, tb) in zip(first, rows(5, 2)):
        assert torch.equal(a, b) and torch.equal(ta["boxes"], tb["boxes"])
    assert any(a.shape != b.shape or not torch.equal(a, b)
               for (a, _), (b, _) in zip(first, rows(6, 2)))


def test_tensor_distort_before_a_flip_keeps_the_flip_native(tmp_path):
    """ToImage, the distort, then a flip and no padding (v2's order: distort the photo, then
    flip it): each row equals v2's for one of the distort's draws, max |diff| 0."""
    paths = _photos(tmp_path, 3, 300)

    def chain(params=None):
        distort = _distort() if params is None else _fixed(_distort(), params)
        return v2.Compose([v2.ToImage(), distort, v2.RandomHorizontalFlip(1.0)])

    rows = [row for batch in _loader(chain(), paths, 3, batch_size=3) for row in batch]
    for path, (image, _) in zip(paths, rows):
        photo = _opened(path)
        assert _equal_for_some_draw(image, lambda params: chain(params)(photo)), path


def test_tensor_distort_after_a_resize_is_named(tmp_path):
    """On a tensor, a distort between a resize and the zoom-out would see the resized photo,
    which the native canvas no longer holds apart: torch's path, the warning naming both."""
    paths = _photos(tmp_path, 1, 310)
    t = v2.Compose([v2.ToImage(), v2.Resize(100), v2.RandomPhotometricDistort(),
                    v2.RandomZoomOut(fill=MEAN), v2.ToDtype(torch.float, scale=True)])
    told = _told(t, paths)
    assert told and "RandomPhotometricDistort" in told[0] and "Resize" in told[0], told


def test_a_tensor_colour_step_before_the_iou_crop_runs_on_the_whole_canvas(tmp_path):
    """ToImage, ColorJitter (fixed factors: its contrast blends with the whole image's mean), then
    RandomIoUCrop: v2 jitters the whole photo, then crops; each row is a slice of v2's jittered
    photo for one of the jitter's orders, and v2 with that order and crop gives the same image
    (max |diff| 0) and boxes (within 1e-4 px)."""
    import itertools

    from torchvision.transforms.v2 import functional as F

    paths = _photos(tmp_path, 4, 320)
    f32 = lambda x: float(torch.tensor(x, dtype=torch.float32))  # noqa: E731 (v2's draw)

    def jitter(params=None):
        step = v2.ColorJitter(brightness=(1.2, 1.2), contrast=(0.6, 0.6))
        return step if params is None else _fixed(step, params)

    def chain(params=None, iou=None):
        crop = v2.RandomIoUCrop() if iou is None else _fixed(v2.RandomIoUCrop(), iou)
        return v2.Compose([v2.ToImage(), jitter(params), crop, v2.SanitizeBoundingBoxes()])

    orders = [dict(fn_idx=torch.tensor(list(p)), brightness_factor=f32(1.2),
                   contrast_factor=f32(0.6), saturation_factor=None, hue_factor=None)
              for p in itertools.permutations(range(4))]
    rows = [row for batch in _loader(chain(), paths, 11, dataset=Centred, batch_size=2)
            for row in batch]
    cropped = 0
    for path, (image, target) in zip(paths, rows):
        photo, want_target = _opened(path), Centred(None, paths).target()
        found = [(params, place) for params in orders
                 for place in _crop_of(jitter(params)(F.to_image(photo)), image)]
        assert found, path
        params, (top, left) = found[0]
        height, width = image.shape[-2:]
        crop = (top, left, height, width)
        iou = _iou_params(want_target["boxes"], crop, (150, 211))
        cropped += bool(iou)
        want_image, want = chain(params, iou)(photo, want_target)
        assert torch.equal(image, want_image), (path, crop)
        torch.testing.assert_close(target["boxes"], want["boxes"], atol=1e-4, rtol=0)
    assert cropped > 0


@pytest.mark.parametrize("conversion", [v2.PILToTensor, v2.ToImage])
def test_box_steps_after_a_lone_iou_crop_follow_it(tmp_path, conversion):
    """RandomIoUCrop as the chain's one geometric step, SanitizeBoundingBoxes after it: v2
    zeroes the boxes whose centre the crop leaves out, then drops them; natively the box steps
    after the crop run after it too (they ran before it, keeping zeroed boxes). Each row equals
    v2 with the crop it took: image max |diff| 0, boxes within 1e-4 px, labels exactly."""
    paths = _photos(tmp_path, 8, 330)
    tail = [conversion(), v2.SanitizeBoundingBoxes()]
    rows = [row for batch in _loader(v2.Compose([v2.RandomIoUCrop()] + tail), paths, 12,
                                     dataset=Centred, batch_size=4) for row in batch]
    dropped = 0
    for path, (image, target) in zip(paths, rows):
        photo, want_target = _opened(path), Centred(None, paths).target()
        from torchvision.transforms.v2 import functional as F

        (top, left), = _crop_of(F.pil_to_tensor(photo), image)
        crop = (top, left) + tuple(image.shape[-2:])
        params = _iou_params(want_target["boxes"], crop, (150, 211))
        want_image, want = v2.Compose([_fixed(v2.RandomIoUCrop(), params)] + tail)(
            photo, want_target)
        assert torch.equal(image, want_image)
        torch.testing.assert_close(target["boxes"], want["boxes"], atol=1e-4, rtol=0)
        assert torch.equal(target["labels"], want["labels"])
        dropped += len(want["labels"]) < 3
    assert dropped > 0


def test_a_box_step_between_a_zoom_out_and_the_iou_crop_is_named(tmp_path):
    """v2 sanitizes the zoomed boxes before the crop draws on them; natively the box steps run
    before or after the geometry, so this one is named."""
    paths = _photos(tmp_path, 1, 340)
    t = v2.Compose([v2.RandomZoomOut(p=1.0), v2.SanitizeBoundingBoxes(), v2.RandomIoUCrop(),
                    v2.PILToTensor()])
    told = _told(t, paths)
    assert told and "SanitizeBoundingBoxes" in told[0] and "between geometric" in told[0], told


@pytest.mark.parametrize("backend", list(CONVERSIONS))
def test_both_flips_and_normalize_after_the_crop_equal_v2(tmp_path, backend):
    """The tensor backends' ssd with both flips after the crop and ToDtype + Normalize at the
    end (run on the crop's pixels): the loader without the crop gives v2's canvas for one of
    the distort's draws, the offset told by the centre box mirrored both ways; each row with
    the crop is a slice of it, and v2 with those draws gives the same float image (max |diff|
    0), boxes within 1e-4 px, labels exactly."""
    paths = _photos(tmp_path, 3, 350)
    convert = CONVERSIONS[backend]
    end = [v2.RandomHorizontalFlip(1.0), v2.RandomVerticalFlip(1.0),
           v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.4, 0.5, 0.6], [0.2, 0.3, 0.25]),
           v2.SanitizeBoundingBoxes()]

    def chain(crop=True, padding=None, params=None, iou=None):
        return ssd_chain([convert()], end, crop, padding, params, iou)

    def rows(crop):
        loader = _loader(chain(crop), paths, 13, dataset=Centred, batch_size=3)
        return [row for batch in loader for row in batch]

    canvas_w, canvas_h = int(211 * torch.tensor(1.6)), int(150 * torch.tensor(1.6))
    cropped = 0
    for path, (image, target), (canvas, whole) in zip(paths, rows(True), rows(False)):
        box = whole["boxes"][0]  # flipped both ways: x0 = W - (110 + left), y0 = H - (80 + top)
        left, top = round(canvas_w - 110 - float(box[0])), round(canvas_h - 80 - float(box[1]))
        padding = [left, top, canvas_w - 211 - left, canvas_h - 150 - top]
        photo, want_target = _opened(path), Centred(None, paths).target()
        draws = _equal_for_some_draw(canvas, lambda params: chain(False, padding, params)(
            photo, want_target)[0])
        assert draws, (path, padding)
        (row, col), = _crop_of(canvas, image)
        height, width = image.shape[-2:]
        crop = (canvas_h - row - height, canvas_w - col - width, height, width)
        zoomed = v2.Compose([convert(), _fixed(_distort(), draws[0]),
                             _fixed(v2.RandomZoomOut(fill=MEAN, side_range=(1.6, 1.6), p=1.0),
                                    {"padding": padding})])(photo, want_target)[1]["boxes"]
        params = _iou_params(zoomed, crop, (canvas_h, canvas_w))
        cropped += bool(params)
        want_image, want = chain(True, padding, draws[0], params)(photo, want_target)
        assert image.dtype == torch.float32 and torch.equal(image, want_image), (path, crop)
        torch.testing.assert_close(target["boxes"], want["boxes"], atol=1e-4, rtol=0)
        assert torch.equal(target["labels"], want["labels"])
    assert cropped > 0
