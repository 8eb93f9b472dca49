"""v2's RandomRotation and RandomAffine inside an ``rl.Joint``, natively: the image turned by
Pillow's kernel as v2 turns the PIL image the user's code opens, the mask by v2's own kernel for
a ``tv_tensors.Mask`` (nearest, the fill v2 gives masks), boxes and keypoints by v2's kernels
(the corners through the affine map, their hull, clamped; integer boxes rounded as v2 rounds
them), all with the draws the native image step made (recorded with the row's geometry).

Bounds, for the same draws as v2's: max |diff| 0 for the image and the mask; integer boxes
equal; float32 boxes within 1e-4 pixel (7.6e-6 measured: the native path moves them through
the resize and flip in float64 before v2's kernel, v2 in float32 step by step). ``expand=True`` (the canvas
grows with the drawn angle), a rotation after a colour step and one after the chain's tensor
conversion stay on torch's path, named.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

import ringloader as rl
from imagegen import jpeg_bytes

I = v2.InterpolationMode
SIZES = [(96, 72), (64, 88)]  # landscape and portrait
OUT = (56, 64)  # Resize's (height, width)
FILL = {tv_tensors.Mask: 255, "others": (10, 200, 30)}


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """(JPEG photo, palette-PNG mask, (width, height)): labels 0..20 in 6-pixel blocks."""
    root = tmp_path_factory.mktemp("joint_affine")
    rng = np.random.default_rng(7)
    out = []
    for i, (w, h) in enumerate(SIZES):
        photo = root / f"photo{i}.jpg"
        photo.write_bytes(jpeg_bytes(w, h, quality=90, seed=70 + i))
        y, x = np.mgrid[:h, :w]
        mask = Image.fromarray(((x // 6 + 3 * (y // 6) + i) % 21).astype(np.uint8), "P")
        mask.putpalette(rng.integers(0, 256, 768).astype(np.uint8).tobytes())
        mask.save(root / f"photo{i}_mask.png")
        out.append((photo, root / f"photo{i}_mask.png", (w, h)))
    return out


def _boxes(w, h, dtype):
    """COCO-style boxes (XYWH): ordinary, degenerate (zero width), partly and wholly out of
    the frame."""
    return tv_tensors.BoundingBoxes(
        [[4, 6, 30, 20], [w // 2, h // 3, 0, 12], [w - 10, h - 8, 25, 30], [-15, 2, 20, 10],
         [w + 5, h + 5, 10, 10], [10, 10, w - 20, h - 20]],
        format="XYWH", canvas_size=(h, w), dtype=dtype)


def _witness(w, h):
    """A keypoint that lands on the centre of the resized, flipped image (v2 flips keypoints
    about (width - 1) / 2): the affine map's centre, so it moves by the drawn translation."""
    return tv_tensors.KeyPoints([[(OUT[1] / 2 - 1) * w / OUT[1], h / 2]], canvas_size=(h, w),
                                dtype=torch.float64)


class Dataset(torch.utils.data.Dataset):
    def __init__(self, t, photos, dtype=torch.float32):
        self.t, self.photos, self.dtype = t, photos, dtype

    def __len__(self):
        return len(self.photos)

    def __getitem__(self, i):
        photo, mask, (w, h) = self.photos[i]
        return rl.Joint(self.t, (rl.ImageFile(photo), rl.ImageFile(mask, mode="mask"),
                                 {"boxes": _boxes(w, h, self.dtype), "kp": _witness(w, h)}, i))


def _native(dataset, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # natively: no warning
        loader = rl.DataLoader(dataset, batch_size=2, collate_fn=list, **kwargs)
    assert loader.native, loader.describe()
    return sorted((s for batch in loader for s in batch), key=lambda s: s[3])


def _v2(t, photos, i, params, dtype=torch.float32):
    """v2's ``t`` on sample i as the user's code opens it (the PIL image, the mask's stored
    values as a Mask), its rotation or affine with ``params``."""
    photo, mask, (w, h) = photos[i]
    with Image.open(photo) as opened:
        image = opened.convert("RGB")
    with Image.open(mask) as opened:
        labels = tv_tensors.Mask(torch.from_numpy(np.array(opened)))
    t = copy.deepcopy(t)
    turn = next(s for s in t.transforms if type(s).__name__ in ("RandomRotation", "RandomAffine"))
    turn.make_params = lambda flat: dict(params)
    return t((image, labels, {"boxes": _boxes(w, h, dtype), "kp": _witness(w, h)}))


def _chain(turn):
    return v2.Compose([v2.Resize(OUT), v2.RandomHorizontalFlip(p=1.0), turn, v2.PILToTensor()])


def _diff(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    return float((a.double() - b.double()).abs().max())


TURNS = [
    v2.RandomRotation((17.5, 17.5), interpolation=I.NEAREST, fill=FILL),
    v2.RandomRotation((-33.25, -33.25), interpolation=I.BILINEAR, fill=FILL),
    v2.RandomRotation((90.0, 90.0), interpolation=I.BILINEAR),
    v2.RandomRotation((200.0, 200.0), interpolation=I.NEAREST, fill=7, center=(20, 15)),
    v2.RandomAffine((12.0, 12.0), scale=(0.8, 0.8), shear=(5.0, 5.0, -7.0, -7.0),
                    interpolation=I.BILINEAR, fill=FILL),
    v2.RandomAffine((-40.0, -40.0), translate=(0.15, 0.1), scale=(1.25, 1.25),
                    interpolation=I.NEAREST, fill=FILL),
    v2.RandomAffine((3.0, 3.0), translate=(0.2, 0.2), shear=(-10.0, -10.0),
                    interpolation=I.BICUBIC, fill={tv_tensors.Mask: 9, "others": 0}),
]


@pytest.mark.parametrize("turn", TURNS, ids=[f"{type(t).__name__}{n}" for n, t in enumerate(TURNS)])
def test_fixed_draws_equal_v2_on_image_mask_boxes_and_keypoints(photos, turn):
    t = _chain(turn)
    rows = _native(Dataset(t, photos), generator=torch.Generator().manual_seed(3))
    worst = 0.0
    for image, mask, target, i in rows:
        # v2's own draws: float32 values (torch.empty(1).uniform_), as the native step's.
        f32 = lambda v: float(np.float32(v))  # noqa: E731
        params = {"angle": f32(turn.degrees[0])}
        if type(turn).__name__ == "RandomAffine":
            dx, dy = (target["kp"][0] - torch.tensor([OUT[1] / 2, OUT[0] / 2])).tolist()
            params.update(translate=(round(dx), round(dy)), scale=f32(turn.scale[0]) if turn.scale
                          else 1.0, shear=(f32(turn.shear[0]), f32(turn.shear[2]) if turn.shear and
                                           len(turn.shear) == 4 else 0.0) if turn.shear
                          else (0.0, 0.0))
        want_image, want_mask, want = _v2(t, photos, i, params)
        assert _diff(image, want_image) == 0
        assert isinstance(mask, tv_tensors.Mask) and _diff(mask, want_mask) == 0
        assert isinstance(target["boxes"], tv_tensors.BoundingBoxes)
        assert target["boxes"].format == want["boxes"].format
        assert tuple(target["boxes"].canvas_size) == tuple(want["boxes"].canvas_size) == OUT
        worst = max(worst, _diff(target["boxes"], want["boxes"]), _diff(target["kp"], want["kp"]))
    assert worst <= 1e-4, worst
    if isinstance(turn.fill, dict) and turn.fill[tv_tensors.Mask] == 255:
        assert any((m == 255).any() for _, m, _, _ in rows)  # the mask's fill shows


def test_integer_boxes_equal_v2_exactly(photos):
    turn = v2.RandomRotation((25.0, 25.0), fill=FILL)
    t = _chain(turn)
    rows = _native(Dataset(t, photos, torch.int64))
    for image, mask, target, i in rows:
        want_image, want_mask, want = _v2(t, photos, i, {"angle": 25.0}, torch.int64)
        assert target["boxes"].dtype == torch.int64
        assert torch.equal(target["boxes"], want["boxes"])
        assert _diff(image, want_image) == 0 and _diff(mask, want_mask) == 0


def test_random_draws_equal_v2_for_the_draws_each_row_recorded(photos, monkeypatch):
    """Random draws, an output size that depends on the image (Resize(60)): each row equals v2
    run with the draws its geometry record holds (the flip; the affine's angle, translation,
    scale, shears); the same seed gives the same rows."""
    from ringloader.sources import _joint

    recorded = {}
    resolve = _joint.resolve

    def spy(leaf, g):
        out = resolve(leaf, g)
        recorded[out[3]] = [float(v) for v in g]
        return out

    monkeypatch.setattr(_joint, "resolve", spy)
    turn = v2.RandomAffine(20, translate=(0.1, 0.2), scale=(0.7, 1.3), shear=(-8, 8, -4, 4),
                           interpolation=I.BILINEAR, fill=FILL)
    t = v2.Compose([v2.Resize(60), v2.RandomHorizontalFlip(), turn, v2.PILToTensor()])
    angles = set()
    for seed in (0, 1, 0):
        rows = _native(Dataset(t, photos), generator=torch.Generator().manual_seed(seed))
        for image, mask, target, i in rows:
            g = recorded[i]
            params = dict(angle=g[13], translate=(int(g[14]), int(g[15])), scale=g[16],
                          shear=(g[17], g[18]))
            flip = v2.RandomHorizontalFlip(p=float(g[8]))
            want_image, want_mask, want = _v2(v2.Compose([t.transforms[0], flip,
                                                          *t.transforms[2:]]), photos, i, params)
            assert _diff(image, want_image) == 0 and _diff(mask, want_mask) == 0
            assert _diff(target["boxes"], want["boxes"]) <= 1e-4
            angles.add((seed, i, round(g[13], 6)))
    assert len({a for s, _, a in angles}) == 4  # seeds 0 and 1 draw apart; 0 twice alike


def test_random_draws_keep_image_mask_and_boxes_aligned(tmp_path):
    """A picture of its own coordinates (red x, green y, blue 90) and a mask of the x's: under
    random draws the mask's fill (255) is where the image's is (blue 0), each mask pixel's label
    is the x its image pixel shows (both nearest, up to one pixel where the two kernels round a
    centre differently), and the pixels showing a box's inside lie in the moved box."""
    w, h = 90, 70
    y, x = np.mgrid[:h, :w].astype(np.uint8)
    Image.fromarray(np.stack([x, y, np.full_like(x, 90)], 2)).save(tmp_path / "coords.png")
    labels = Image.fromarray(x, "P")
    labels.putpalette(bytes(range(256)) * 3)
    labels.save(tmp_path / "coords_mask.png")
    pairs = [(tmp_path / "coords.png", tmp_path / "coords_mask.png", (w, h))] * 6
    box = [20.0, 15.0, 30.0, 25.0]  # XYWH
    t = v2.Compose([v2.RandomRotation(40, interpolation=I.NEAREST, fill={tv_tensors.Mask: 255,
                                                                       "others": 0}),
                    v2.PILToTensor()])

    class Coords(torch.utils.data.Dataset):
        def __len__(self):
            return len(pairs)

        def __getitem__(self, i):
            boxes = tv_tensors.BoundingBoxes([box], format="XYWH", canvas_size=(h, w))
            return rl.Joint(t, (rl.ImageFile(pairs[i][0]), rl.ImageFile(pairs[i][1], mode="mask"),
                                {"boxes": boxes}, i))

    angles = set()
    for image, mask, target, _ in _native(Coords()):
        outside = mask == 255
        assert float((outside != (image[2] == 0)).double().mean()) < 0.02
        inside = ~outside & (image[2] == 90)
        assert (mask[inside].long() - image[0][inside].long()).abs().max() <= 1
        assert float((mask[inside] != image[0][inside]).double().mean()) < 0.05
        x0, y0, bw, bh = target["boxes"][0].tolist()
        shown = ((image[0] > box[0]) & (image[0] < box[0] + box[2] - 1) & (image[1] > box[1])
                 & (image[1] < box[1] + box[3] - 1) & (image[2] == 90))
        ys, xs = torch.nonzero(shown, as_tuple=True)
        assert len(xs) > 50
        assert xs.min() >= x0 - 1 and xs.max() <= x0 + bw and ys.min() >= y0 - 1
        assert ys.max() <= y0 + bh
        angles.add(round(bw, 1))
    assert len(angles) > 2  # the draws vary


def _warning(t, photos):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Dataset(t, photos), batch_size=2, collate_fn=list)
    assert not loader.native
    return " ".join(str(w.message) for w in caught)


def test_expand_and_other_cases_stay_on_torchs_path_named(photos):
    message = _warning(_chain(v2.RandomRotation(30, expand=True)), photos)
    assert "v2.RandomRotation" in message and "expand=True" in message, message
    message = _warning(v2.Compose([v2.ColorJitter(0.2), v2.RandomAffine(10)]), photos)
    assert "v2.RandomAffine" in message and "follows v2.ColorJitter" in message, message
    message = _warning(v2.Compose([v2.PILToTensor(), v2.RandomRotation(10)]), photos)
    assert "v2.RandomRotation" in message and "tensor conversion" in message, message
    # A fill of three values for the mask's one channel (v2 raises): named; without a mask, native.
    t = _chain(v2.RandomRotation((10.0, 10.0), fill=(10, 200, 30)))
    message = _warning(t, photos)
    assert "v2.RandomRotation" in message and "fills a tv_tensors.Mask" in message, message

    class Boxes(Dataset):
        def __getitem__(self, i):
            joint = super().__getitem__(i)
            image, _, target, i = joint.structure
            return rl.Joint(joint.transform, (image, 0, target, i))

    rows = _native(Boxes(t, photos))
    corner = rows[0][0][:, 0, 0]  # outside the turned photo
    assert rows[0][0].shape == (3, *OUT) and corner.tolist() == [10, 200, 30]
