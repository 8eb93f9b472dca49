"""torchvision's segmentation reference presets (``references/segmentation/presets.py``, use_v2)
through ``rl.Joint``: the train preset (RandomResize, RandomHorizontalFlip, padding to the crop
size with 0 for the image and 255 for the mask, RandomCrop, PILToTensor, ToDtype, Normalize,
ToPureTensor) and the eval preset (Resize((base, base))), natively, equal to v2 on the same
decoded pixels.

Bounds: max |diff| 0 for the mask (torch's nearest, as v2 resizes a Mask) and max |diff| 0 for
the float image (Pillow's resize as v2 runs on the PIL image the user's code opens, then torch's
float32 operations one at a time).

The preset's own ``PadIfSmaller`` (a class in the reference's ``v2_extras.py``, not torchvision's)
is user code: it is not recognised, the Joint falls back naming it and pointing to
``v2.RandomCrop(crop, pad_if_needed=True, fill={tv_tensors.Mask: 255, "others": 0})``, which pads
natively (on both sides, where PadIfSmaller pads right and bottom). The "tensor" and "tv_tensor"
backends resize the uint8 tensor with torch's kernel (1 level off Pillow's), natively too.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

import ringloader as rl
from imagegen import jpeg_bytes

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
BASE, CROP = 48, 40  # RandomResize(24, 96): the short side is below the crop about a fifth
# Photos: landscape, portrait, square, small, wide (a 4:2:0 JPEG, as cameras write them).
SIZES = [(96, 64), (56, 88), (72, 72), (40, 30), (120, 50)]
FILL = {tv_tensors.Mask: 255, "others": 0}


def train_preset(backend="pil", pad=None, hflip_prob=0.5):
    """The reference's train preset (use_v2=True), its padding ``pad`` (default: RandomCrop's
    pad_if_needed with per-type fill; or the reference's PadIfSmaller)."""
    steps = {"tensor": [v2.PILToTensor()], "tv_tensor": [v2.ToImage()], "pil": []}[backend]
    steps += [v2.RandomResize(min_size=int(0.5 * BASE), max_size=int(2.0 * BASE))]
    if hflip_prob > 0:
        steps.append(v2.RandomHorizontalFlip(hflip_prob))
    if pad is None:
        steps.append(v2.RandomCrop(CROP, pad_if_needed=True, fill=dict(FILL)))
    else:
        steps += [pad, v2.RandomCrop(CROP)]
    if backend == "pil":
        steps.append(v2.PILToTensor())
    image_type = tv_tensors.Image if backend == "tv_tensor" else torch.Tensor
    steps += [v2.ToDtype({image_type: torch.float32, tv_tensors.Mask: torch.int64, "others": None},
                         scale=True),
              v2.Normalize(mean=MEAN, std=STD), v2.ToPureTensor()]
    return v2.Compose(steps)


def eval_preset(backend="pil"):
    steps = {"tensor": [v2.PILToTensor()], "tv_tensor": [v2.ToImage()], "pil": []}[backend]
    steps.append(v2.Resize((BASE, BASE)))
    if backend == "pil":
        steps.append(v2.PILToTensor())
    steps += [v2.ToDtype(torch.float, scale=True), v2.Normalize(mean=MEAN, std=STD),
              v2.ToPureTensor()]
    return v2.Compose(steps)


class PadIfSmaller(v2.Transform):
    """Pads right and bottom up to ``size``, with v2's per-type fill (the reference's helper,
    written here from its description)."""

    def __init__(self, size, fill):
        super().__init__()
        self.size, self.fill = size, fill

    def make_params(self, flat_inputs):
        _, h, w = v2.query_chw(flat_inputs) if hasattr(v2, "query_chw") else \
            v2._utils.query_chw(flat_inputs)
        return {"padding": [0, 0, max(self.size - w, 0), max(self.size - h, 0)]}

    def transform(self, inpt, params):
        if not any(params["padding"]):
            return inpt
        fill = self.fill.get(type(inpt), self.fill["others"])
        return v2.functional.pad(inpt, padding=params["padding"], fill=fill)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """(photo, palette-PNG mask, (width, height)) per size: labels 0..20 in 8-pixel blocks and
    a band of 255 ("ignore", as VOC has), in a palette whose colours are not the labels."""
    root = tmp_path_factory.mktemp("seg_reference")
    rng = np.random.default_rng(36)
    out = []
    for i, (w, h) in enumerate(SIZES):
        photo = root / f"photo{i}.jpg"
        photo.write_bytes(jpeg_bytes(w, h, quality=88, seed=60 + i))
        y, x = np.mgrid[:h, :w]
        labels = ((x // 8 + 5 * (y // 8) + i) % 21).astype(np.uint8)
        labels[h // 3: h // 3 + 3] = 255
        mask = Image.fromarray(labels, "P")
        mask.putpalette(rng.integers(0, 256, 768).astype(np.uint8).tobytes())
        mask.save(root / f"photo{i}_mask.png")
        out.append((photo, root / f"photo{i}_mask.png", (w, h)))
    return out


def _witness(w, h):
    """Two boxes that say the draws: the whole image (size and offset after the resize and the
    crop) and its left half (the flip); never clamped, in float64."""
    return tv_tensors.BoundingBoxes([[0.0, 0.0, w, h], [0.0, 0.0, w / 2, h]], format="XYXY",
                                    canvas_size=(h, w), dtype=torch.float64, clamping_mode=None)


class Reference(torch.utils.data.Dataset):
    """What the reference's dataset returns, as references: ``(image, target)`` with a
    witness and the index beside them."""

    def __init__(self, t, photos):
        self.t, self.photos = t, photos

    def __len__(self):
        return len(self.photos)

    def __getitem__(self, i):
        photo, mask, (w, h) = self.photos[i]
        return rl.Joint(self.t, (rl.ImageFile(photo), rl.ImageFile(mask, mode="mask"),
                                 _witness(w, h), i))


def _decoded(photos, i):
    """The PIL image the user's code opens and the mask's stored values as a Mask."""
    photo, mask, _ = photos[i]
    with Image.open(photo) as opened:
        image = opened.convert("RGB")
    with Image.open(mask) as opened:
        return image, tv_tensors.Mask(torch.from_numpy(np.array(opened)))


def _v2_with_draws(t, photos, i, witness):
    """v2's train preset ``t`` on sample i's decoded pixels, with the draws the moved ``witness``
    says (RandomResize's size, the flip, RandomCrop's offsets): each step's own transform()."""
    image, mask = _decoded(photos, i)
    w, h = photos[i][2]
    whole, half = witness.as_subclass(torch.Tensor).tolist()
    rw, rh = round(whole[2] - whole[0]), round(whole[3] - whole[1])
    size = rw if w <= h else rh
    flipped = half[0] > whole[0] + 0.5
    pad_x, pad_y = max(CROP - rw, 0), max(CROP - rh, 0)
    left, top = pad_x - round(whole[0]), pad_y - round(whole[1])
    steps = list(t.transforms)
    if type(steps[0]).__name__ in ("PILToTensor", "ToImage"):  # the "tensor"/"tv_tensor" backends
        image = steps.pop(0)(image)
    resize, flip, crop, *rest = steps
    crop_params = {"needs_crop": True, "top": top, "left": left, "height": CROP, "width": CROP,
                   "needs_pad": bool(pad_x or pad_y), "padding": [pad_x, pad_y, pad_x, pad_y]}
    leaves = []
    for leaf in (image, mask):
        leaf = resize.transform(leaf, {"size": [size]})
        if flipped:
            leaf = flip.transform(leaf, {})
        leaves.append(crop.transform(leaf, crop_params))
    return v2.Compose(rest)(tuple(leaves)), (pad_x, pad_y, left, top, rw, rh)


def _native(dataset, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # natively: no warning
        loader = rl.DataLoader(dataset, **kwargs)
    assert loader.native, loader.describe()
    return loader


def _rows(loader):
    return sorted((s for batch in loader for s in batch), key=lambda s: s[3])


def _max_diff(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    return float((a.double() - b.double()).abs().max())


@pytest.mark.parametrize("backend", ["pil", "tensor", "tv_tensor"])
def test_train_preset_runs_natively_equal_to_v2_for_its_draws_with_255_padding(photos, backend):
    """In every backend: "pil" resizes with Pillow, "tensor" (PILToTensor first) and
    "tv_tensor" (ToImage first) resize the uint8 tensor with torch's kernel, natively too."""
    t = train_preset(backend)
    rows = []
    for seed in range(4):  # several epochs of draws: padded and unpadded, flipped and not
        loader = _native(Reference(t, photos), batch_size=3, collate_fn=list,
                         generator=torch.Generator().manual_seed(seed))
        rows += _rows(loader)
    padded = flipped = 0
    for image, mask, witness, i in rows:
        assert type(image) is torch.Tensor and image.dtype == torch.float32
        assert image.shape == (3, CROP, CROP)
        assert type(mask) is torch.Tensor and mask.dtype == torch.int64  # ToDtype's Mask entry
        assert mask.shape == (CROP, CROP)
        (want_image, want_mask), (pad_x, pad_y, left, top, rw, rh) = \
            _v2_with_draws(t, photos, i, witness)
        assert _max_diff(mask, want_mask) == 0
        assert _max_diff(image, want_image) == 0
        # The padding: 255 in the mask, level 0 (normalised) in the image, on the same pixels.
        inside = torch.zeros(CROP, CROP, dtype=torch.bool)
        inside[max(pad_y - top, 0):pad_y - top + rh, max(pad_x - left, 0):pad_x - left + rw] = True
        assert (mask[~inside] == 255).all()
        zero = torch.tensor([-m / s for m, s in zip(MEAN, STD)], dtype=torch.float32)
        torch.testing.assert_close(image[:, ~inside], zero[:, None].expand(3, int((~inside).sum())),
                                   atol=1e-6, rtol=0)
        padded += bool((~inside).any())
        flipped += witness[1, 0] > witness[0, 0] + 0.5
    assert padded >= 3 and 3 <= flipped <= len(rows) - 3  # the draws vary


def test_random_draws_keep_mask_and_image_on_one_crop(photos, tmp_path):
    """Image and mask made from one picture of coordinates (the image's red is x, its blue 90;
    the mask's labels are x): after any draw, the mask's padding (255) is exactly the image's
    (0), and each mask pixel's label is the x its image pixel shows, up to what bilinear and
    torch's nearest pick differently (2 + source pixels per output pixel)."""
    w, h = 100, 80
    y, x = np.mgrid[:h, :w].astype(np.uint8)
    Image.fromarray(np.stack([x, y, np.full_like(x, 90)], 2)).save(tmp_path / "coords.png")
    labels = Image.fromarray(x, "P")
    labels.putpalette(bytes(range(256)) * 3)
    labels.save(tmp_path / "coords_mask.png")
    pairs = [(tmp_path / "coords.png", tmp_path / "coords_mask.png", (w, h))] * 8
    t = v2.Compose(train_preset().transforms[:3] + [v2.PILToTensor()])
    rows = [s for b in _native(Reference(t, pairs), batch_size=4, collate_fn=list) for s in b]
    drawn = set()
    for image, mask, witness, _ in rows:
        pad = mask == 255
        assert (image[:, pad] == 0).all() and (image[2][~pad] == 90).all()
        whole = witness[0].tolist()
        per_pixel = w / (whole[2] - whole[0])
        diff = (mask[~pad].double() - image[0][~pad].double()).abs().max()
        assert diff <= 2 + per_pixel, (diff, per_pixel)
        drawn.add(tuple(round(v) for v in whole))
    assert len(drawn) > 3


def test_materialize_and_the_fallback_equal_the_native_rows_for_fixed_draws(photos):
    """Fixed draws (a RandomResize of one size, a flip with p=1, crops the size of the image or
    of a padded one): native rows, torch's path and rl.materialize give one result."""
    square = [p for p in photos if p[2][0] == p[2][1]]  # 72x72
    t = train_preset(hflip_prob=1.0)
    t.transforms[0] = v2.RandomResize(CROP, CROP + 1)  # 40x40: the crop is the whole image
    native = _rows(_native(Reference(t, square), batch_size=1, collate_fn=list))
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        fallback = rl.DataLoader(Reference(v2.Compose(t.transforms + [lambda s: s]), square),
                                 batch_size=1, collate_fn=list)
    assert not fallback.native
    for (a, b) in zip(native, _rows(fallback)):
        one = rl.materialize(Reference(t, square)[a[3]])
        for got in (b, one):
            assert _max_diff(got[0], a[0]) == 0 and _max_diff(got[1], a[1]) == 0
        want, _ = _v2_with_draws(t, square, a[3], a[2])
        assert _max_diff(want[0], a[0]) == 0 and _max_diff(want[1], a[1]) == 0


def test_eval_preset_runs_natively_equal_to_v2(photos):
    t = eval_preset()
    loader = _native(Reference(t, photos), batch_size=len(photos))
    image, mask, _, index = next(iter(loader))  # default collate: the zero-copy batch
    assert image.shape == (len(photos), 3, BASE, BASE) and mask.shape == (len(photos), BASE, BASE)
    for k, i in enumerate(index.tolist()):
        want_image, want_mask = t(_decoded(photos, i))
        assert _max_diff(image[k], want_image) == 0
        assert _max_diff(mask[k], want_mask) == 0  # uint8: v2's ToDtype(float) leaves masks


def test_default_collate_batches_int64_masks(photos):
    loader = _native(Reference(train_preset(), photos), batch_size=len(photos))
    image, mask, _, _ = next(iter(loader))
    assert image.shape == (len(photos), 3, CROP, CROP) and image.dtype == torch.float32
    assert mask.shape == (len(photos), CROP, CROP) and mask.dtype == torch.int64
    assert (mask == 255).any()


def test_deterministic_under_a_seed_for_any_worker_count_and_on_resume(photos):
    t = train_preset()

    def make(workers):
        return _native(Reference(t, photos * 2), batch_size=2, shuffle=True, num_workers=workers)

    def epoch(loader, seed=3):
        torch.manual_seed(seed)
        return [(x.clone(), m.clone(), i.clone()) for x, m, _, i in loader]

    one, two = epoch(make(1)), epoch(make(2))
    assert len(one) == len(photos)
    for a, b in zip(one, two):
        assert all(torch.equal(p, q) for p, q in zip(a, b))
    assert not all(torch.equal(a[1], b[1]) for a, b in zip(one, epoch(make(1), seed=4)))

    loader = make(2)
    torch.manual_seed(3)
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    del it
    resumed = make(1)
    resumed.load_state_dict(state)
    rest = [(x.clone(), m.clone(), i.clone()) for x, m, _, i in resumed]
    assert len(rest) == len(one) - 2
    for a, b in zip(rest, one[2:]):
        assert all(torch.equal(p, q) for p, q in zip(a, b))


def _warning(dataset):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(dataset, batch_size=2, collate_fn=list)
    assert not loader.native
    return " ".join(str(w.message) for w in caught)


def test_reference_pad_if_smaller_falls_back_named_with_the_native_equivalent(photos):
    message = _warning(Reference(train_preset(pad=PadIfSmaller(CROP, dict(FILL))), photos))
    assert "PadIfSmaller" in message and "pad_if_needed=True" in message


@pytest.mark.parametrize("backend", ["tensor", "tv_tensor"])
def test_tensor_backends_eval_preset_is_native_and_equal_to_v2(photos, backend):
    """The eval preset after PILToTensor/ToImage: v2 resizes the uint8 tensor with torch's
    antialiased bilinear kernel, and so does the native path (bound: exact on the image, which
    after Normalize is one float per level)."""
    t = eval_preset(backend)
    rows = _rows(_native(Reference(t, photos), batch_size=2, collate_fn=list))
    for image, mask, _, i in rows:
        want_image, want_mask = t(_decoded(photos, i))
        assert _max_diff(image, want_image) == 0
        assert _max_diff(mask, want_mask) == 0


def test_a_mask_fill_natively_impossible_is_named(photos):
    t = v2.Compose([v2.Pad(2), v2.RandomResize(24, 96),
                    v2.RandomCrop(CROP, pad_if_needed=True, fill=dict(FILL)), v2.PILToTensor()])
    message = _warning(Reference(t, photos))
    assert "RandomCrop" in message and "pads it with 0" in message, message


@pytest.mark.timeout(240)
def test_the_benchmark_reports_both_rates(image_tree):
    """``python -m ringloader.bench --dataset segmentation-reference``: the report's shape (not
    its timings)."""
    import re
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "ringloader.bench", "--dataset", "segmentation-reference",
         "--root", str(image_tree), "--batch-size", "4", "--rounds", "1", "--warmup-batches",
         "1", "--num-workers", "2", "--quiet"], capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "torchvision's segmentation train preset" in out and "over 24 images" in out, out
    assert re.search(r"torch DataLoader \+ PIL \+ v2 *: +\d+ samples/s", out), out
    assert re.search(r"ringloader \+ rl.Joint *: +\d+ samples/s \([0-9.]+x\)", out), out
