"""torchvision's ``lsj`` detection preset natively: ``ScaleJitter`` draws each sample's output
size as v2 draws it (scale uniform in ``scale_range``, then v2's formula in float32), so the
size depends on the image: a per-sample buffer, a list in the batch. Parity bounds: max |diff| 0
on pixels against v2 on the PIL photo the user's own code opens; float boxes within 1e-4 px
(natively moved in float64, by v2 in float32), integer boxes exactly (v2's kernel replayed)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import ringloader as rl
from imagegen import jpeg_bytes

# Landscape, portrait, square and odd-sized photos (subsampled JPEG, as cameras write them).
SIZES = [(211, 150), (150, 203), (170, 170), (257, 131)]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("lsj")
    out = []
    for i, (w, h) in enumerate(SIZES):
        photo = root / f"photo{i}.jpg"
        photo.write_bytes(jpeg_bytes(w, h, quality=88, seed=90 + i))
        out.append((photo, (w, h)))
    return out


def _opened(path):
    with Image.open(path) as image:
        return image.convert("RGB")


class Detections(torch.utils.data.Dataset):
    """``Joint(t, (image, {"boxes", "labels", "index"}))`` with COCO-style boxes: one inside,
    one partly out of the frame, one degenerate (zero width)."""

    def __init__(self, t, photos, dtype=torch.float32):
        self.t, self.photos, self.dtype = t, photos, dtype

    def __len__(self):
        return len(self.photos)

    def target(self, i):
        w, h = self.photos[i][1]
        boxes = tv_tensors.BoundingBoxes(
            torch.tensor([[10, 13, w - 31, h - 21], [-6, 4, 40, 33], [50, 20, 50, 60]],
                         dtype=self.dtype), format="XYXY", canvas_size=(h, w))
        return {"boxes": boxes, "labels": torch.tensor([1, 2, 3]), "index": i}

    def __getitem__(self, i):
        return rl.Joint(self.t, (rl.ImageFile(self.photos[i][0]), self.target(i)))


def _native_rows(dataset):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # natively, with no warning
        loader = rl.DataLoader(dataset, batch_size=3, collate_fn=list)
    assert loader.native
    rows = [row for batch in loader for row in batch]
    assert len(rows) == len(dataset)
    return rows


def _diff(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a.double() - b.double()).abs().max())


@pytest.mark.parametrize("scale", [0.37, 1.0, 1.93])
def test_fixed_draw_equals_v2_classification_path(photos, scale):
    """scale_range=(s, s) fixes the draw: the native size and pixels are v2's (max |diff| 0)."""
    t = v2.Compose([v2.ScaleJitter((300, 400), scale_range=(scale, scale)), v2.PILToTensor()])

    class Photos(torch.utils.data.Dataset):
        def __len__(self):
            return len(photos)

        def __getitem__(self, i):
            return rl.ImageFile(photos[i][0], transform=t), i

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(Photos(), batch_size=2, collate_fn=list)
    assert loader.native
    rows = [row for batch in loader for row in batch]
    assert len(rows) == len(photos)
    for image, i in rows:
        assert _diff(image, t(_opened(photos[i][0]))) == 0, (scale, i)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("scale", [0.61, 1.47])
def test_fixed_draw_equals_v2_in_a_joint(photos, scale, dtype):
    """Image max |diff| 0; float boxes within 1e-4 px, integer boxes exact (v2 rounds them)."""
    t = v2.Compose([v2.ScaleJitter((256, 320), scale_range=(scale, scale)),
                    v2.RandomHorizontalFlip(p=1.0), v2.PILToTensor(),
                    v2.ToDtype(torch.float32, scale=True)])
    dataset = Detections(t, photos, dtype)
    for image, target in _native_rows(dataset):
        i = target["index"]
        want_image, want = t(_opened(photos[i][0]), dataset.target(i))
        assert _diff(image, want_image) == 0, (scale, i)
        assert target["boxes"].canvas_size == want["boxes"].canvas_size
        assert target["boxes"].dtype == dtype
        if dtype.is_floating_point:
            torch.testing.assert_close(target["boxes"], want["boxes"], atol=1e-4, rtol=0)
        else:
            assert torch.equal(target["boxes"], want["boxes"])
        assert torch.equal(target["labels"], want["labels"])


def test_random_draws_are_v2s_resize_of_the_drawn_size(photos):
    """The default scale_range (0.1, 2.0): each sample's size lies in v2's range and its pixels
    and boxes are v2's resize to that size (max |diff| 0, boxes within 1e-4 px)."""
    target_size = (1024, 1024)
    t = v2.Compose([v2.ScaleJitter(target_size), v2.PILToTensor(),
                    v2.SanitizeBoundingBoxes()])
    dataset = Detections(t, photos)
    sizes = set()
    for image, target in _native_rows(dataset):
        i = target["index"]
        w, h = photos[i][1]
        out_h, out_w = image.shape[-2:]
        sizes.add((out_h, out_w))
        base = min(target_size[1] / h, target_size[0] / w)
        assert int(h * base * 0.1) <= out_h <= int(h * base * 2.0) + 1
        assert abs(out_w / w - out_h / h) <= 1.0 / min(h, w) * 2  # one scale for both sides
        source = _opened(photos[i][0])
        assert _diff(image, F.pil_to_tensor(F.resize(source, [out_h, out_w]))) == 0
        boxes = F.resize(dataset.target(i)["boxes"], [out_h, out_w])
        keep = v2.SanitizeBoundingBoxes()({"boxes": boxes, "labels": torch.tensor([1, 2, 3])})
        # (within 1e-4 px, or float32's rounding of coordinates past 1000 px)
        torch.testing.assert_close(target["boxes"], keep["boxes"], atol=1e-4, rtol=1e-6)
        assert torch.equal(target["labels"], keep["labels"])  # the degenerate box removed
    assert len(sizes) == len(photos)


def test_the_draw_is_uniform_over_the_scale_range(photos):
    """Over many epochs, one photo's drawn scale (its output height over v2's base) covers
    (0.1, 2.0) with the mean of a uniform draw."""
    photo, (w, h) = photos[2]
    t = v2.Compose([v2.ScaleJitter((64, 64)), v2.PILToTensor()])

    class One(torch.utils.data.Dataset):
        def __len__(self):
            return 200

        def __getitem__(self, i):
            return rl.ImageFile(photo, transform=t), i

    loader = rl.DataLoader(One(), batch_size=50, collate_fn=list)
    assert loader.native
    scales = np.array([image.shape[-1] / (w * min(64 / h, 64 / w))
                       for batch in loader for image, _ in batch])
    assert scales.min() < 0.3 and scales.max() > 1.8
    assert abs(scales.mean() - 1.05) < 0.12  # uniform on (0.1, 2.0): mean 1.05, sd/sqrt(200) 0.04


MEAN = (123.0, 117.0, 104.0)


def _lsj(scale_range, target=(256, 320)):
    """torchvision's lsj preset in v2 classes (its FixedSizeCrop is reference code, not v2: the
    v2 ports crop with RandomCrop(pad_if_needed=True) and the mean as fill), a fixed flip."""
    return [v2.ScaleJitter(target, scale_range=scale_range),
            v2.RandomCrop(target, pad_if_needed=True, fill=MEAN),
            v2.RandomHorizontalFlip(p=1.0), v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
            v2.ConvertBoundingBoxFormat("XYXY"), v2.SanitizeBoundingBoxes()]


class Centred(Detections):
    """Detections with a small box at the image's centre first: no crop of the chain cuts it,
    so where it lands tells the native crop's draw."""

    def target(self, i):
        target = super().target(i)
        w, h = self.photos[i][1]
        centre = torch.tensor([[w / 2 - 3, h / 2 - 2, w / 2 + 3, h / 2 + 2]], dtype=self.dtype)
        boxes = tv_tensors.wrap(torch.cat([centre, target["boxes"]]), like=target["boxes"])
        return {"boxes": boxes, "labels": torch.tensor([9, 1, 2, 3]), "index": i}


def _v2_with_crop(steps, top, left):
    """``steps`` with its RandomCrop's draw fixed to (top, left) (v2's own make_params
    otherwise: the padding pad_if_needed adds)."""
    crop = steps[1]
    draw = crop.make_params

    def fixed(flat_inputs):
        params = draw(flat_inputs)
        params.update(top=top, left=left)
        return params

    crop.make_params = fixed
    return v2.Compose(steps)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("scale", [0.5, 1.0])
def test_lsj_preset_equals_v2_for_the_drawn_crop(photos, scale, dtype):
    """The lsj preset natively (ScaleJitter's draw fixed by scale_range=(s, s), the crop's draw
    the loader's own): the centre box tells the crop's offset; v2 with that offset gives the
    same image (max |diff| 0: the fill painted where RandomCrop padded), boxes within 1e-4 px
    (integer boxes exactly: v2 rounds them at the resize) and labels (SanitizeBoundingBoxes
    dropping the degenerate box)."""
    t = v2.Compose(_lsj((scale, scale)))
    dataset = Centred(t, photos, dtype)
    for image, target in _native_rows(dataset):
        i = target["index"]
        source, want_target = _opened(photos[i][0]), dataset.target(i)
        at_zero = _v2_with_crop(_lsj((scale, scale)), 0, 0)(source, want_target)[1]["boxes"]
        left = round(float(target["boxes"][0, 0] - at_zero[0, 0]))
        top = round(float(at_zero[0, 1] - target["boxes"][0, 1]))
        assert left >= 0 and top >= 0, (left, top)
        want_image, want = _v2_with_crop(_lsj((scale, scale)), top, left)(source, want_target)
        assert _diff(image, want_image) == 0, (scale, i, top, left)
        assert target["boxes"].dtype == dtype
        torch.testing.assert_close(target["boxes"], want["boxes"], atol=1e-4, rtol=0)
        assert torch.equal(target["labels"], want["labels"])
        assert 3 not in target["labels"].tolist()  # the zero-width box is gone


def test_a_fractional_fill_pads_with_its_int_part_as_v2(photos):
    """ImageNet's mean in levels (fractional) in a Joint: Pillow pads with its int part, and so
    does the fused pad (max |diff| 0)."""
    fill = (123.675, 116.28, 103.53)
    t = v2.Compose([v2.ScaleJitter((300, 300), scale_range=(0.5, 0.5)),
                    v2.Pad((7, 5, 3, 9), fill=fill), v2.PILToTensor()])
    dataset = Detections(t, photos)
    for image, target in _native_rows(dataset):
        i = target["index"]
        want_image, _ = t(_opened(photos[i][0]), dataset.target(i))
        assert _diff(image, want_image) == 0
        assert image[:, 0, 0].tolist() == [123, 116, 103]


def test_lsj_random_draws_keep_image_and_boxes_aligned(photos):
    """The default scale_range: every sample is the fixed 256 x 320 canvas, and the centre box
    sits where v2 puts it for the drawn size and crop."""
    dataset = Centred(v2.Compose(_lsj((0.1, 2.0))), photos)
    seen = 0
    for _ in range(3):  # a crop of a scale near 2 may cut the centre box away: several epochs
        for image, target in _native_rows(dataset):
            assert image.shape == (3, 256, 320)
            boxes = target["boxes"]
            assert bool((boxes[:, 2] <= 320).all() and (boxes[:, 3] <= 256).all())
            if 9 not in target["labels"].tolist():
                continue
            seen += 1
            box = boxes[target["labels"].tolist().index(9)]
            inside = image[:, int(box[1]):int(box[3]) + 1, int(box[0]):int(box[2]) + 1]
            fill = torch.tensor(MEAN).div(255).view(3, 1, 1)
            assert not torch.allclose(inside, fill.expand_as(inside))  # photo, not padding
    assert seen > 0


def test_a_fill_beside_other_padding_is_named(photos):
    """A RandomCrop filling with the mean after a Pad with zeros: two fills, not native; the
    warning names the step and why, and torch's path runs it."""
    t = v2.Compose([v2.Pad(4), v2.RandomCrop((200, 200), pad_if_needed=True, fill=MEAN),
                    v2.PILToTensor()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Detections(t, photos), batch_size=2, collate_fn=list)
    assert not loader.native
    told = [str(w.message) for w in caught if "RandomCrop" in str(w.message)]
    assert told and "Pad" in told[0] and "one padding" in told[0], [str(w.message) for w in caught]


class FixedSizeCrop(torch.nn.Module):
    """A stand-in for the detection reference's own FixedSizeCrop (its transforms.py, not a v2
    class): called with (image, target), here with the Joint's whole structure."""

    def forward(self, image, target=None):
        return image if target is None else (image, target)


def test_the_references_fixed_size_crop_is_named_with_the_v2_crop_to_use(photos):
    t = v2.Compose([v2.ScaleJitter((256, 320)), FixedSizeCrop(), v2.PILToTensor()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Detections(t, photos), batch_size=2, collate_fn=list)
    assert not loader.native
    told = [str(w.message) for w in caught if "FixedSizeCrop" in str(w.message)]
    assert told and "RandomCrop(size, pad_if_needed=True, fill=mean)" in told[0], \
        [str(w.message) for w in caught]


def _lsj_tensor(scale_range, fill=MEAN, target=(256, 320)):
    """The lsj preset's tensor backend (torchvision's ``backend="tensor"``): PILToTensor first,
    so v2 pads the uint8 tensor with torch's kernel, each channel its own level."""
    return [v2.PILToTensor(), v2.ScaleJitter(target, scale_range=scale_range),
            v2.RandomCrop(target, pad_if_needed=True, fill=fill), v2.RandomHorizontalFlip(p=1.0),
            v2.ToDtype(torch.float32, scale=True), v2.ConvertBoundingBoxFormat("XYXY"),
            v2.SanitizeBoundingBoxes()]


@pytest.mark.parametrize("fill", [MEAN, (123.675, 116.28, 103.53)])
def test_lsj_tensor_backend_pads_each_channel_as_v2(photos, fill):
    """After PILToTensor, v2 pads the uint8 tensor with a per-channel fill (each level cast to
    uint8: truncated): natively the same pixels (max |diff| 0), boxes within 1e-4 px."""
    def v2_at(top, left):
        steps = _lsj_tensor((0.5, 0.5), fill)
        steps.insert(1, steps.pop(2))  # _v2_with_crop fixes the draw of steps[1]
        fixed = _v2_with_crop(steps, top, left).transforms
        fixed.insert(2, fixed.pop(1))  # back in the preset's order
        return v2.Compose(fixed)

    dataset = Centred(v2.Compose(_lsj_tensor((0.5, 0.5), fill)), photos)
    for image, target in _native_rows(dataset):
        i = target["index"]
        source, want_target = _opened(photos[i][0]), dataset.target(i)
        at_zero = v2_at(0, 0)(source, want_target)[1]["boxes"]
        left = round(float(target["boxes"][0, 0] - at_zero[0, 0]))
        top = round(float(at_zero[0, 1] - target["boxes"][0, 1]))
        want_image, want = v2_at(top, left)(source, want_target)
        assert _diff(image, want_image) == 0, (i, top, left)
        torch.testing.assert_close(target["boxes"], want["boxes"], atol=1e-4, rtol=0)
        # The padded corner (scale 0.5 leaves the 256 x 320 canvas larger than the image).
        assert (image[:, -1, 0] * 255).round().tolist() == [float(int(v)) for v in fill]


@pytest.mark.parametrize("fill, told", [(300, "300"), ((123, 117, 300), "(123, 117, 300)")])
def test_a_tensor_fill_torch_refuses_or_wraps_is_named(photos, fill, told):
    """A fill torch's tensor padding refuses (one level over 255) or wraps (a per-channel level
    over 255 cast to uint8), where the native fill clamps: the warning names the fill and what to
    give instead, not the steps that do run natively."""
    t = v2.Compose([v2.PILToTensor(), v2.RandomCrop((256, 320), pad_if_needed=True, fill=fill)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Detections(t, photos), batch_size=2, collate_fn=list)
    assert not loader.native
    message = next(str(w.message) for w in caught if isinstance(w.message, rl.FallbackWarning))
    assert f"its fill {told} is not one integer level in 0..255" in message, message
    assert "fill=<int 0..255>" in message and "flips, crops" not in message, message


class Whole(Detections):
    """One box, the whole image: where it lands says where RandomZoomOut put the image."""

    def target(self, i):
        w, h = self.photos[i][1]
        return {"boxes": tv_tensors.BoundingBoxes([[0.0, 0.0, w, h]], format="XYXY",
                                                  canvas_size=(h, w)), "index": i}


@pytest.mark.parametrize("fill", [(10, 20, 30), (123.7, 116.2, 103.9)])
def test_zoom_out_after_pil_to_tensor_pads_each_channel_as_v2(photos, fill):
    """RandomZoomOut on the uint8 tensor: natively, for the drawn canvas and offset, v2's tensor
    padding of the photo with that fill (max |diff| 0)."""
    t = v2.Compose([v2.PILToTensor(), v2.RandomZoomOut(fill=fill, side_range=(1.5, 1.5), p=1.0)])
    for image, target in _native_rows(Whole(t, photos)):
        i = target["index"]
        w, h = photos[i][1]
        left, top = (int(v) for v in target["boxes"][0, :2])
        padding = [left, top, image.shape[2] - w - left, image.shape[1] - h - top]
        want = F.pad(F.pil_to_tensor(_opened(photos[i][0])), padding, fill=list(fill))
        assert _diff(image, want) == 0, (i, padding)
        assert image[:, 0, 0].tolist() == [int(v) for v in fill]
