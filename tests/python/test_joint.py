"""rl.Joint: a v2 transform applied jointly to decoded references, boxes, keypoints and values."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

import ringloader as rl


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(0)
    image = tmp_path / "a.png"
    Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(image)
    mask = tmp_path / "a_mask.png"
    labels = Image.fromarray(rng.integers(0, 21, (48, 64), dtype=np.uint8), mode="L").convert("P")
    labels.putpalette([i % 256 for i in range(768)])
    labels.save(mask)
    return image, mask


def _decoded(image, mask):
    pixels = torch.from_numpy(np.array(Image.open(image).convert("RGB"))).permute(2, 0, 1)
    labels = torch.from_numpy(np.array(Image.open(mask)))
    return tv_tensors.Image(pixels.contiguous()), tv_tensors.Mask(labels)


def test_segmentation_matches_v2_on_the_same_seed(files):
    image, mask = files
    t = v2.Compose([v2.RandomResizedCrop(32, antialias=True), v2.RandomHorizontalFlip(),
                    v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True),
                    v2.Normalize([0.5] * 3, [0.25] * 3)])
    sample = rl.Joint(t, (rl.ImageFile(image), rl.ImageFile(mask, mode="mask"), 7))
    for seed in range(5):
        torch.manual_seed(seed)
        got = rl.materialize(sample)
        torch.manual_seed(seed)
        # The user's own code: v2 on the PIL image, with the ToImage the chain needs before
        # ToDtype (ringloader adds it where a chain has no tensor conversion).
        own = v2.Compose(t.transforms[:2] + [v2.ToImage()] + t.transforms[2:])
        want = own((_pil(image, "RGB"), _decoded(image, mask)[1], 7))
        assert isinstance(got[1], tv_tensors.Mask) and got[2] == 7
        assert got[1].dtype == torch.uint8 and torch.equal(got[1], want[1])
        assert isinstance(got[0], tv_tensors.Image) and torch.equal(got[0], want[0])
        # The stored palette indices survive (masks are resampled nearest).
        assert set(got[1].unique().tolist()) <= set(range(21))


def test_detection_matches_v2_and_sanitizes(files):
    image, _ = files
    boxes = tv_tensors.BoundingBoxes([[2, 2, 30, 20], [40, 30, 62, 46], [0, 0, 3, 3]],
                                     format="XYXY", canvas_size=(48, 64))
    t = v2.Compose([v2.RandomHorizontalFlip(), v2.RandomResizedCrop(40, scale=(0.3, 1.0)),
                    v2.SanitizeBoundingBoxes(min_size=4)])
    sample = rl.Joint(t, (rl.ImageFile(image), {"boxes": boxes, "labels": torch.tensor([1, 2, 3])}))
    dropped = False
    for seed in range(8):
        torch.manual_seed(seed)
        got_image, got = rl.materialize(sample)
        torch.manual_seed(seed)
        want_image, want = v2.Compose([t, v2.ToImage()])(
            _pil(image, "RGB"), {"boxes": boxes, "labels": torch.tensor([1, 2, 3])})
        assert isinstance(got_image, tv_tensors.Image) and torch.equal(got_image, want_image)
        assert torch.equal(got["boxes"], want["boxes"]) and torch.equal(got["labels"], want["labels"])
        assert got["boxes"].canvas_size == (40, 40)
        dropped |= len(got["labels"]) < 3
    assert dropped  # the tiny box is sanitized away on some draws, as v2 does


def test_keypoints_follow_the_flip(files):
    image, _ = files
    points = tv_tensors.KeyPoints([[10.0, 5.0], [60.0, 40.0]], canvas_size=(48, 64))
    got_image, got = rl.materialize(rl.Joint(v2.RandomHorizontalFlip(p=1.0),
                                             (rl.ImageFile(image), points)))
    assert torch.equal(got_image, _decoded(image, image)[0].flip(-1))
    want = v2.RandomHorizontalFlip(p=1.0)(points)
    assert isinstance(got, tv_tensors.KeyPoints) and torch.equal(got, want)
    assert not torch.equal(got, points)


def test_unknown_leaf_and_own_transform_are_refused(files):
    image, _ = files
    with pytest.raises(TypeError, match=r"structure\[1\] is a object"):
        rl.Joint(v2.RandomHorizontalFlip(), (rl.ImageFile(image), object()))
    with pytest.raises(ValueError, match="transform of its own"):
        rl.Joint(v2.RandomHorizontalFlip(), [rl.ImageFile(image, transform=v2.ToImage())])
    with pytest.raises(TypeError, match="callable"):
        rl.Joint("flip", [rl.ImageFile(image)])


def test_dataloader_runs_joint_on_torchs_path_with_one_warning_and_fixed_draws(files):
    import warnings

    image, mask = files
    t = v2.Compose([v2.RandomResizedCrop(24, antialias=True), v2.RandomHorizontalFlip()])
    # Rotated boxes keep a Joint on torch's path (integer boxes follow this chain natively).
    boxes = tv_tensors.BoundingBoxes([[16.0, 11.0, 28.0, 18.0, 0.0]], format="CXCYWHR",
                                     canvas_size=(48, 64))

    class Seg(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return rl.Joint(t, (rl.ImageFile(image), rl.ImageFile(mask, mode="mask"), boxes, i))

    def epoch(num_workers):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader = rl.DataLoader(Seg(), batch_size=2, num_workers=num_workers,
                                   generator=torch.Generator().manual_seed(3),
                                   collate_fn=lambda b: tuple(zip(*b)))
        joint = [w for w in caught if "Joint" in str(w.message)]
        assert len(joint) == 1 and "torch's generic path" in str(joint[0].message)
        assert not loader.native
        return [x for batch in loader for x in zip(*batch)]

    first, second = epoch(0), epoch(1)
    assert [s[3] for s in first] == [0, 1, 2, 3]
    for a, b in zip(first, second):  # the same seed draws the same crops and flips, in a worker too
        assert all(torch.equal(x, y) for x, y in zip(a[:3], b[:3]))
    for image_, mask_, boxes_, _ in first:  # each leaf saw the same geometry
        assert isinstance(mask_, tv_tensors.Mask) and mask_.shape == (24, 24)
        assert image_.shape == (3, 24, 24) and boxes_.canvas_size == (24, 24)


# ---- the native path ---------------------------------------------------------------------------

RED = (250, 20, 10)


def _scene(path, size, box):
    """A black PNG of ``size`` (width, height) with the XYXY rectangle ``box`` in RED."""
    pixels = np.zeros((size[1], size[0], 3), dtype=np.uint8)
    x0, y0, x1, y1 = box
    pixels[y0:y1, x0:x1] = RED
    Image.fromarray(pixels).save(path)
    return path


class _Boxes(torch.utils.data.Dataset):
    """Samples ``(Joint(t, (image, {"boxes", "labels", "points"})), i)`` over ``scenes``: a list
    of (path, (width, height), boxes)."""

    def __init__(self, t, scenes):
        self.t, self.scenes = t, scenes

    def __len__(self):
        return len(self.scenes)

    def __getitem__(self, i):
        path, (w, h), boxes = self.scenes[i]
        target = {"boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=(h, w)),
                  "labels": torch.arange(len(boxes)) + 1,
                  "points": tv_tensors.KeyPoints([[3.0, 4.0], [w - 5.0, h - 7.0]],
                                                 canvas_size=(h, w))}
        return rl.Joint(self.t, (rl.ImageFile(path), target)), i


def _native_loader(dataset, **kwargs):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the native path is taken: no warning
        loader = rl.DataLoader(dataset, **kwargs)
    assert loader.native
    return loader


def _scenes(tmp_path, n=6, even=False):
    rng = np.random.default_rng(1)
    out = []
    for i in range(n):
        w, h = int(rng.integers(60, 120)), int(rng.integers(50, 100))
        if even:  # v2 pads a CenterCrop's image by (crop - size) // 2 but shifts its boxes by
            w, h = w - w % 2, h - h % 2  # round((crop - size) / 2): they agree for even sizes

        x0, y0 = int(rng.integers(0, w // 2)), int(rng.integers(0, h // 2))
        x1, y1 = int(rng.integers(x0 + 8, w)), int(rng.integers(y0 + 8, h))
        path = _scene(tmp_path / f"scene{i}.png", (w, h), (x0, y0, x1, y1))
        out.append((path, (w, h), [[x0, y0, x1, y1], [0.0, 0.0, 3.0, 3.0]]))
    return out


@pytest.mark.parametrize("steps", [
    [v2.Resize((40, 56))],
    [v2.Resize(48), v2.CenterCrop(40), v2.RandomHorizontalFlip(p=1.0)],
    [v2.RandomVerticalFlip(p=1.0), v2.CenterCrop((36, 30))],
    [v2.RandomHorizontalFlip(p=1.0), v2.Resize((44, 44)), v2.Pad(3), v2.ColorJitter(0, 0, 0)],
    [v2.CenterCrop(80)],  # larger than the images: v2 pads, boxes shift
])
def test_fixed_transforms_match_v2(tmp_path, steps):
    scenes = _scenes(tmp_path, even=True)
    t = v2.Compose(steps)
    loader = _native_loader(_Boxes(t, scenes), batch_size=3, collate_fn=lambda b: tuple(zip(*b)))
    for samples, indices in loader:
        for (image, target), i in zip(samples, indices):
            path, (w, h), boxes = scenes[i]
            want_image = t(Image.open(path).convert("RGB"))  # Pillow's numerics, as natively
            want_image = torch.from_numpy(np.array(want_image)).permute(2, 0, 1)
            assert isinstance(image, tv_tensors.Image) and torch.equal(image, want_image)
            # v2 on the decoded image and the sample's target (an image in the input, so v2 does
            # not take the labels tensor for one).
            want = t(_decoded(path, path)[0], _Boxes(t, scenes)[i][0].structure[1])[1]
            assert isinstance(target["boxes"], tv_tensors.BoundingBoxes)
            assert isinstance(target["points"], tv_tensors.KeyPoints)
            assert target["boxes"].canvas_size == want["boxes"].canvas_size
            assert want["boxes"].canvas_size == tuple(image.shape[1:])
            assert target["points"].canvas_size == want["points"].canvas_size
            torch.testing.assert_close(target["boxes"], want["boxes"], atol=1e-4, rtol=0)
            torch.testing.assert_close(target["points"], want["points"], atol=1e-4, rtol=0)
            assert torch.equal(target["labels"], want["labels"])


def _red(image):
    return (image[0] == RED[0]) & (image[1] == RED[1]) & (image[2] == RED[2])


def _on_rectangle(image, target):
    """Asserts that the box labelled 1 covers exactly the red pixels (nearest resampling: those
    whose centre lies in it), or is gone when none are; True when it is kept."""
    red = _red(image)
    boxes, labels = target["boxes"], target["labels"].tolist()
    height, width = image.shape[1:]
    assert boxes.canvas_size == (height, width)
    for b, label in zip(boxes, labels):  # what SanitizeBoundingBoxes(min_size=2) keeps
        assert (b[2] - b[0]).item() >= 2 and (b[3] - b[1]).item() >= 2 and label in (1, 2)
    if not red.any():
        # The rectangle left the crop: its box has no area, and v2's sanitize drops it.
        assert 1 not in labels
        return False
    ys, xs = torch.nonzero(red, as_tuple=True)
    seen = torch.tensor([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], dtype=torch.float32)
    if 1 not in labels:
        # v2 moves boxes in float32: one flipped against an edge of the canvas can land a hair
        # outside it, and its sanitize drops it; the native path replays v2's kernels and so
        # drops it too. Only at an edge.
        assert seen[0] == 0 or seen[1] == 0 or seen[2] == width or seen[3] == height, (seen, boxes)
        return False
    box = boxes[labels.index(1)]
    torch.testing.assert_close(box, seen, atol=1.0, rtol=0)
    x0, y0, x1, y1 = box.tolist()
    xs_c, ys_c = torch.arange(width) + 0.5, torch.arange(height) + 0.5
    inside = (xs_c[None] > x0) & (xs_c[None] < x1) & (ys_c[:, None] > y0) & (ys_c[:, None] < y1)
    assert torch.equal(inside, red)
    return True


RANDOM = v2.Compose([v2.RandomResizedCrop((48, 64), scale=(0.2, 1.0),
                                          interpolation=v2.InterpolationMode.NEAREST),
                     v2.RandomHorizontalFlip(), v2.RandomVerticalFlip(),
                     v2.SanitizeBoundingBoxes(min_size=2)])


def test_random_crops_and_flips_keep_boxes_on_their_rectangle(tmp_path):
    dataset = _Boxes(RANDOM, _scenes(tmp_path, 8))
    kept = flipped = 0
    for epoch in range(3):
        loader = _native_loader(dataset, batch_size=4, collate_fn=lambda b: tuple(zip(*b)),
                                generator=torch.Generator().manual_seed(epoch))
        for samples, _ in loader:
            for image, target in samples:
                kept += _on_rectangle(image, target)
                flipped += int(target["points"][0, 0] > 32)
    assert kept > 10 and flipped > 0


@pytest.mark.parametrize("on_error", ["skip", "replace"])
def test_skipped_and_replaced_rows_keep_their_own_geometry(tmp_path, on_error):
    scenes = _scenes(tmp_path, 8)
    scenes[3][0].write_bytes(b"not an image")
    loader = _native_loader(_Boxes(RANDOM, scenes), batch_size=4, on_error=on_error,
                            collate_fn=lambda b: tuple(zip(*b)))
    indices = []
    for samples, batch_indices in loader:
        for image, target in samples:
            _on_rectangle(image, target)
        indices += list(batch_indices)
    assert 3 not in indices and len(indices) == (7 if on_error == "skip" else 8)


def test_sanitize_drops_exactly_what_v2_drops(tmp_path):
    scenes = _scenes(tmp_path)
    t = v2.Compose([v2.RandomResizedCrop(32, scale=(0.1, 0.5)), v2.RandomHorizontalFlip()])
    sanitize = v2.SanitizeBoundingBoxes(min_size=3)
    with_sanitize = v2.Compose(t.transforms + [sanitize])
    plain = _native_loader(_Boxes(t, scenes), batch_size=6, collate_fn=lambda b: tuple(zip(*b)),
                           generator=torch.Generator().manual_seed(5))
    sanitized = _native_loader(_Boxes(with_sanitize, scenes), batch_size=6,
                               collate_fn=lambda b: tuple(zip(*b)),
                               generator=torch.Generator().manual_seed(5))
    changed = 0
    for (a, _), (b, _) in zip(plain, sanitized):
        for (image_a, target_a), (image_b, target_b) in zip(a, b):
            assert torch.equal(image_a, image_b)  # the same draws
            want = sanitize(target_a)  # v2's rule on the moved boxes
            assert torch.equal(target_b["boxes"], want["boxes"])
            assert torch.equal(target_b["labels"], want["labels"])
            changed += len(want["labels"]) < len(target_a["labels"])
    assert changed > 0


def test_native_joint_is_deterministic_across_workers_and_batches_without_collate_fn(tmp_path):
    scenes = _scenes(tmp_path)
    t = v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(),
                    v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True),
                    v2.Normalize([0.5] * 3, [0.25] * 3)])

    class OneBox(_Boxes):
        def __getitem__(self, i):
            joint, i = super().__getitem__(i)
            image, target = joint.structure
            return rl.Joint(self.t, {"image": image, "boxes": target["boxes"][:1]}), i

    def epoch(num_workers):
        loader = _native_loader(OneBox(t, scenes), batch_size=3, num_workers=num_workers,
                                generator=torch.Generator().manual_seed(11))
        return list(loader)

    first, second = epoch(0), epoch(2)
    for (a, ia), (b, ib) in zip(first, second):
        assert a["image"].shape == (3, 3, 32, 32) and a["image"].dtype == torch.float32
        assert a["boxes"].shape == (3, 1, 4)
        assert torch.equal(ia, ib) and torch.equal(a["image"], b["image"])
        assert torch.equal(a["boxes"], b["boxes"])


def test_steps_boxes_cannot_follow_keep_torchs_path_naming_them(tmp_path):
    import warnings

    scenes = _scenes(tmp_path, 2)
    for t, name in [(v2.Compose([v2.RandomRotation(10, expand=True)]), "expand=True"),
                    (v2.Compose([v2.RandomIoUCrop(), v2.Resize((32, 32))]), "RandomIoUCrop"),
                    (v2.Compose([v2.ColorJitter(0.3), v2.RandomHorizontalFlip()]),
                     "v2.RandomHorizontalFlip at position 1 follows v2.ColorJitter")]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader = rl.DataLoader(_Boxes(t, scenes), batch_size=2,
                                   collate_fn=lambda b: tuple(zip(*b)))
        assert not loader.native
        assert any(name in str(w.message) and "Joint" in str(w.message) for w in caught), \
            [str(w.message) for w in caught]


def test_canvas_that_is_not_the_image_is_named(tmp_path):
    path, (w, h), boxes = _scenes(tmp_path, 1)[0]

    class Wrong(torch.utils.data.Dataset):
        def __len__(self):
            return 1

        def __getitem__(self, i):
            box = tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=(h + 1, w))
            return rl.Joint(v2.CenterCrop(20), (rl.ImageFile(path), box))

    loader = _native_loader(Wrong(), batch_size=1, collate_fn=list)
    with pytest.raises(ValueError, match=r"scene0\.png.*canvas_size"):
        next(iter(loader))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind,what", [("detection", "ringloader detection benchmark: a detection"),
                                       ("detection-hflip", "ringloader detection-hflip benchmark: "
                                                           "a detection"),
                                       ("detection-lsj", "ringloader detection-lsj benchmark: "
                                                         "a detection"),
                                       ("detection-ssd-tensor", "ringloader detection-ssd-tensor "
                                                                "benchmark: a detection"),
                                       ("segmentation-joint", "segmentation-joint benchmark: a "
                                                              "segmentation")])
def test_joint_benchmarks_report_both_rates(image_tree, kind, what):
    """``python -m ringloader.bench --dataset KIND`` (detection, detection-hflip, detection-lsj,
    detection-ssd-tensor, segmentation-joint): the report's shape (not its timings)."""
    import re
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "ringloader.bench", "--dataset", kind, "--root",
         str(image_tree), "--batch-size", "4", "--rounds", "1", "--warmup-batches", "1",
         "--num-workers", "2", "--quiet"], capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(re.escape(what) + r" Dataset over 24 images", out), out
    assert re.search(r"torch DataLoader \+ PIL \+ v2 *: +\d+ samples/s", out), out
    assert re.search(r"ringloader \+ rl.Joint *: +\d+ samples/s \([0-9.]+x\)", out), out


def test_image_bytes_joint_runs_natively_like_the_file(tmp_path):
    scenes = _scenes(tmp_path, 3)
    t = v2.Compose([v2.RandomResizedCrop(24), v2.RandomHorizontalFlip()])

    class FromBytes(_Boxes):
        def __getitem__(self, i):
            joint, i = super().__getitem__(i)
            image, target = joint.structure
            return rl.Joint(self.t, (rl.ImageBytes(Path(image.path).read_bytes()), target)), i

    def batches(dataset):
        return list(_native_loader(dataset, batch_size=3, collate_fn=lambda b: tuple(zip(*b)),
                                   generator=torch.Generator().manual_seed(2)))

    for (a, _), (b, _) in zip(batches(_Boxes(t, scenes)), batches(FromBytes(t, scenes))):
        for (image_a, target_a), (image_b, target_b) in zip(a, b):
            assert torch.equal(image_a, image_b)
            assert torch.equal(target_a["boxes"], target_b["boxes"])


def test_other_box_formats_and_box_only_steps_match_v2(tmp_path):
    scenes = _scenes(tmp_path, 3, even=True)
    t = v2.Compose([v2.ClampBoundingBoxes(), v2.Resize(50), v2.CenterCrop((40, 44)),
                    v2.RandomHorizontalFlip(p=1.0),
                    v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYWH)])

    class Centred(torch.utils.data.Dataset):
        def __len__(self):
            return len(scenes)

        def __getitem__(self, i):
            path, (w, h), boxes = scenes[i]
            xyxy = torch.tensor(boxes, dtype=torch.float32)
            cxcywh = torch.cat([(xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]], 1)
            return rl.Joint(t, (rl.ImageFile(path), tv_tensors.BoundingBoxes(
                cxcywh, format="CXCYWH", canvas_size=(h, w))))

    loader = _native_loader(Centred(), batch_size=3, collate_fn=list)
    for i, (image, boxes) in enumerate(next(iter(loader))):
        _, want = t(_decoded(scenes[i][0], scenes[i][0])[0], Centred()[i].structure[1])
        assert boxes.format == want.format == tv_tensors.BoundingBoxFormat.XYWH
        torch.testing.assert_close(boxes, want, atol=1e-4, rtol=0)
        assert boxes.canvas_size == want.canvas_size == (40, 44)


def test_to_pure_tensor_unwraps_every_leaf_and_mixed_samples_are_refused(tmp_path):
    import warnings

    scenes = _scenes(tmp_path, 2)
    t = v2.Compose([v2.CenterCrop(32), v2.ToPureTensor()])
    (samples, _), = _native_loader(_Boxes(t, scenes), batch_size=2,
                                   collate_fn=lambda b: tuple(zip(*b)))
    image, target = samples[0]
    assert type(image) is torch.Tensor and type(target["boxes"]) is torch.Tensor
    assert image.shape == (3, 32, 32)

    class Mixed(_Boxes):  # sample 1's image is a plain reference, sample 0's a Joint's
        def __getitem__(self, i):
            joint, i = super().__getitem__(i)
            return (joint if i == 0 else (rl.ImageFile(scenes[i][0], v2.CenterCrop(32)),
                                          joint.structure[1])), i

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Mixed(v2.CenterCrop(32), scenes), batch_size=2, collate_fn=list)
    assert not loader.native
    assert any("differ in which image references are a Joint's" in str(w.message) for w in caught)


def test_dtype_reaches_the_joints_image(tmp_path):
    scenes = _scenes(tmp_path, 2)
    t = v2.Compose([v2.CenterCrop(32), v2.ToDtype(torch.float32, scale=True)])
    loader = _native_loader(_Boxes(t, scenes), batch_size=2, dtype=torch.float16,
                            collate_fn=lambda b: tuple(zip(*b)))
    (samples, _), = list(loader)
    assert samples[0][0].dtype == torch.float16 and samples[0][0].shape == (3, 32, 32)
    want = t(_decoded(scenes[0][0], scenes[0][0])[0])  # float32 in [0, 1]
    assert torch.allclose(samples[0][0].float(), want.half().float(), atol=1e-3)


# ---- an image and its mask, natively ------------------------------------------------------------

NEAREST = v2.InterpolationMode.NEAREST
TO_FLOAT = v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True)


def _painted(tmp_path, n=6, size=(64, 48), block=1, seed=4):
    """``n`` (image, mask) PNG pairs of ``size`` (width, height): labels 0..5 drawn at random in
    ``block``-pixel squares, the image painting label k in gray level 40 k, so that labels can be
    read back from pixels rendered with nearest interpolation."""
    rng = np.random.default_rng(seed)
    w, h = size
    out = []
    for i in range(n):
        labels = rng.integers(0, 6, (-(-h // block), -(-w // block)), dtype=np.uint8)
        labels = labels.repeat(block, 0).repeat(block, 1)[:h, :w]
        image, mask = tmp_path / f"paint{i}.png", tmp_path / f"paint{i}_mask.png"
        Image.fromarray(np.repeat((labels * 40)[..., None], 3, 2)).save(image)
        palette = Image.fromarray(labels, "P")
        palette.putpalette(rng.integers(0, 256, 768).astype(np.uint8).tobytes())  # not the labels
        palette.save(mask)
        out.append((image, mask))
    return out


def _pil(path, mode=None):
    with Image.open(path) as image:
        return image.convert(mode) if mode else image.copy()


class _Segmentation(torch.utils.data.Dataset):
    """``Joint(t, {"image", "mask", "boxes", "index"})`` over (image, mask) pairs."""

    def __init__(self, t, pairs, reference=rl.ImageFile):
        self.t, self.pairs, self.reference = t, pairs, reference

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        image, mask = self.pairs[i]
        if self.reference is rl.ImageBytes:
            image, mask = Path(image).read_bytes(), Path(mask).read_bytes()
        with Image.open(self.pairs[i][0]) as opened:
            h, w = opened.size[::-1]
        boxes = tv_tensors.BoundingBoxes([[4.0, 6.0, 30.0, 40.0]], format="XYXY",
                                         canvas_size=(h, w))
        return rl.Joint(self.t, {"image": self.reference(image),
                                 "mask": self.reference(mask, mode="mask"),
                                 "boxes": boxes, "index": i})


@pytest.mark.parametrize("steps, pillow_differs", [
    ([v2.Resize((96, 128)), v2.CenterCrop(80), v2.RandomHorizontalFlip(p=1.0)], False),
    ([v2.RandomVerticalFlip(p=1.0), v2.CenterCrop((36, 30)), v2.ColorJitter(0.4, 0.4),
      v2.ToImage(), TO_FLOAT, v2.Normalize([0.5] * 3, [0.25] * 3)], False),
    ([v2.Pad(3), v2.CenterCrop(50), v2.ToPureTensor()], False),
    # A downscale by a non-integer factor: torch's nearest (v2 on a Mask tensor) picks other
    # pixels than Pillow's NEAREST would; the native mask follows torch's, as v2 does.
    ([v2.Resize((40, 56))], True),
    ([v2.Resize((29, 37)), v2.CenterCrop((24, 30))], True),
])
def test_fixed_transforms_render_the_mask_as_v2(tmp_path, steps, pillow_differs):
    pairs = _painted(tmp_path, 3, block=3)
    t = v2.Compose(steps)
    loader = _native_loader(_Segmentation(t, pairs), batch_size=3, collate_fn=list)
    pure = isinstance(steps[-1], v2.ToPureTensor)
    for sample in next(iter(loader)):
        image, mask = pairs[sample["index"]]
        torch.manual_seed(0)  # ColorJitter(0.4, 0.4): the native image has its own draws
        want = t({"image": _pil(image, "RGB"),
                  "mask": tv_tensors.Mask(torch.from_numpy(np.array(_pil(mask)))),
                  "boxes": _Segmentation(t, pairs)[sample["index"]].structure["boxes"]})
        got = sample["mask"]
        assert type(got) is (torch.Tensor if pure else tv_tensors.Mask)
        assert got.dtype == torch.uint8 and got.shape == want["mask"].shape
        assert int((got.int() - want["mask"].int()).abs().max()) == 0
        if pillow_differs:  # the case is one where the two conventions part
            pillow = _pil(mask).resize(steps[0].size[::-1], Image.NEAREST)
            for step in steps[1:]:
                pillow = step(pillow)
            assert not np.array_equal(np.array(pillow), want["mask"].numpy())
        assert got.shape == sample["image"].shape[1:]
        if any(isinstance(s, v2.ColorJitter) for s in steps):
            continue  # the image's colour draws are the loader's, not torch's
        want_image = want["image"]
        if not isinstance(want_image, torch.Tensor):
            want_image = torch.from_numpy(np.array(want_image)).permute(2, 0, 1)
        assert torch.equal(sample["image"], want_image)  # Pillow's numerics, as natively
        torch.testing.assert_close(sample["boxes"], want["boxes"], atol=1e-4, rtol=0)


RANDOM_SEG = v2.Compose([v2.RandomResizedCrop((40, 48), scale=(0.1, 1.0), interpolation=NEAREST),
                         v2.RandomHorizontalFlip(), v2.RandomVerticalFlip()])


def _coordinates(tmp_path, n=6, size=(64, 48), seed=4):
    """``n`` (image, mask_x, mask_y) PNG triples of ``size`` (width, height) whose pixels say where
    they are: the image's red is x, its green y (blue a per-image shade), mask_x's labels are x
    and mask_y's are y. After a random crop, resize and flips the image's pixels name the source
    pixels Pillow's NEAREST picked, the masks' those torch's nearest picked (v2 on a Mask)."""
    w, h = size
    x, y = (np.ascontiguousarray(a) for a in np.meshgrid(np.arange(w, dtype=np.uint8),
                                                         np.arange(h, dtype=np.uint8)))
    out = []
    for i in range(n):
        names = [tmp_path / f"coord{i}{suffix}.png" for suffix in ("", "_x", "_y")]
        Image.fromarray(np.stack([x, y, np.full_like(x, 30 * i)], 2)).save(names[0])
        Image.fromarray(x, "L").save(names[1])  # both kinds of label image
        palette = Image.fromarray(y, "P")
        palette.putpalette(bytes(range(256)) * 3)
        palette.save(names[2])
        out.append(tuple(names))
    return out


def _nearest_rules(size, out):
    """Source indices of ``out`` resized pixels from ``size`` source pixels, for every crop width
    w <= size: Pillow's NEAREST (the image's) and torch's interpolate(mode="nearest") (a Mask's:
    floor(i * (w / out)) in float32, clamped)."""
    rules = {}
    for w in range(1, size + 1):
        pillow = np.array(Image.fromarray(np.arange(w, dtype=np.uint8)[None]).resize(
            (out, 1), Image.NEAREST))[0].astype(np.int64)
        scale = np.float32(w) / np.float32(out)
        torch_rule = np.minimum(np.floor(np.arange(out, dtype=np.float32) * scale), w - 1)
        rules[w] = (pillow, torch_rule.astype(np.int64))
    return rules


def _assert_one_crop(image_line, mask_line, rules):
    """Some crop (left, width) and flip explain both lines: the image's source indices by
    Pillow's rule and the mask's by torch's, with the same draws."""
    image_line, mask_line = image_line.astype(np.int64), mask_line.astype(np.int64)
    for flip in (False, True):
        a = image_line[::-1] if flip else image_line
        b = mask_line[::-1] if flip else mask_line
        for pillow, torch_rule in rules.values():
            left = a[0] - pillow[0]
            if np.array_equal(a, left + pillow) and np.array_equal(b, left + torch_rule):
                return
    raise AssertionError(f"no crop explains image {image_line.tolist()} "
                         f"and mask {mask_line.tolist()}")


def test_random_crops_and_flips_keep_the_mask_on_its_image(tmp_path):
    triples = _coordinates(tmp_path, 8)
    t = v2.Compose(RANDOM_SEG.transforms + [v2.SanitizeBoundingBoxes(labels_getter=None)])

    def epoch(axis, num_workers):
        dataset = _Segmentation(t, [(image, masks[axis]) for image, *masks in triples])
        loader = _native_loader(dataset, batch_size=4, num_workers=num_workers,
                                persistent_workers=False, collate_fn=list,
                                generator=torch.Generator().manual_seed(7))
        samples = [s for batch in loader for s in batch]
        assert loader.stats()["decodes"] == 2 * len(triples)  # one decode per file
        return samples

    along_x, along_y = epoch(0, 0), epoch(1, 2)
    assert [s["index"] for s in along_x] == [s["index"] for s in along_y]
    rules_x, rules_y = _nearest_rules(64, 48), _nearest_rules(48, 40)
    crops = set()
    for a, b in zip(along_x, along_y):
        assert torch.equal(a["image"], b["image"])  # the same draws for any worker count
        assert isinstance(a["mask"], tv_tensors.Mask) and a["mask"].shape == (40, 48)
        assert a["boxes"].canvas_size == (40, 48)
        image = a["image"].numpy()
        # The crop is one rectangle: every row names the same columns, every column the same rows.
        assert (image[0] == image[0, :1]).all() and (image[1] == image[1, :, :1]).all()
        assert (a["mask"].numpy() == a["mask"].numpy()[:1]).all()
        assert (b["mask"].numpy() == b["mask"].numpy()[:, :1]).all()
        _assert_one_crop(image[0, 0], a["mask"].numpy()[0], rules_x)
        _assert_one_crop(image[1, :, 0], b["mask"].numpy()[:, 0], rules_y)
        crops.add(image.tobytes())
    assert len(crops) == len(triples)


def test_masks_batch_without_collate_fn_and_from_bytes(tmp_path):
    triples = _coordinates(tmp_path, 4)
    pairs = [(image, mask_x) for image, mask_x, _ in triples]
    t = v2.Compose(RANDOM_SEG.transforms + [v2.ToImage(), TO_FLOAT])

    def batches(reference):
        loader = _native_loader(_Segmentation(t, pairs[:2] * 2, reference), batch_size=4,
                                generator=torch.Generator().manual_seed(1),
                                collate_fn=lambda b: {k: [s[k] for s in b] for k in b[0]})
        return next(iter(loader))

    files, blobs = batches(rl.ImageFile), batches(rl.ImageBytes)
    rules = _nearest_rules(64, 48)
    for a, b, image in zip(files["mask"], blobs["mask"], files["image"]):
        assert torch.equal(a, b)
        assert image.dtype == torch.float32
        columns = (image[0, 0] * 255).round().to(torch.uint8).numpy()
        _assert_one_crop(columns, a.numpy()[0], rules)

    loader = _native_loader(_Segmentation(t, pairs), batch_size=4)  # default collate
    batch = next(iter(loader))
    assert batch["mask"].shape == (4, 40, 48) and batch["mask"].dtype == torch.uint8
    for image, mask in zip(batch["image"], batch["mask"]):
        columns = (image[0, 0] * 255).round().to(torch.uint8).numpy()
        _assert_one_crop(columns, mask.numpy()[0], rules)


def test_a_missing_mask_is_skipped_naming_its_file(tmp_path):
    pairs = _painted(tmp_path, 6)
    pairs[2] = (pairs[2][0], tmp_path / "gone_mask.png")
    loader = _native_loader(_Segmentation(RANDOM_SEG, pairs), batch_size=3, on_error="skip",
                            persistent_workers=False, collate_fn=list)
    indices = [s["index"] for batch in loader for s in batch]
    assert sorted(indices) == [0, 1, 3, 4, 5]
    errors = " ".join(loader.stats()["recent_errors"])
    assert "sample 2 (" + str(tmp_path / "gone_mask.png") in errors


def test_mask_steps_v2_would_change_keep_torchs_path_naming_them(tmp_path):
    import warnings

    pairs = _painted(tmp_path, 2)
    for t, name in [
        # No dtype for a Mask (v2 raises); a Mask entry (int64, the segmentation reference's)
        # is native: test_segmentation_reference.py.
        (v2.Compose([v2.CenterCrop(32), v2.ToImage(),
                     v2.ToDtype({tv_tensors.Image: torch.float32}, scale=True)]), "ToDtype"),
        (v2.Compose([v2.CenterCrop(32), v2.ToImage(), v2.ConvertImageDtype(torch.float32)]),
         "ConvertImageDtype"),
        (v2.Compose([v2.RandomRotation(10, expand=True)]), "RandomRotation"),
    ]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader = rl.DataLoader(_Segmentation(t, pairs), batch_size=2, collate_fn=list)
        assert not loader.native
        assert any(name in str(w.message) and "Joint" in str(w.message) for w in caught), \
            [str(w.message) for w in caught]


def test_a_mask_of_another_size_than_its_image_is_named(tmp_path):
    pairs = _painted(tmp_path, 1)
    small = tmp_path / "small_mask.png"
    Image.fromarray(np.zeros((20, 30), np.uint8), "L").save(small)
    loader = _native_loader(_Segmentation(v2.CenterCrop(16), [(pairs[0][0], small)]),
                            batch_size=1, collate_fn=list)
    with pytest.raises(ValueError, match=r"small_mask\.png.* 30x20 .*paint0\.png.* 64x48"):
        next(iter(loader))


def test_a_mask_before_its_image_in_the_structure_still_follows_it(tmp_path):
    import warnings

    pairs = [(image, mask_x) for image, mask_x, _ in _coordinates(tmp_path, 4)]

    class MaskFirst(torch.utils.data.Dataset):
        def __init__(self, before=None):
            self.before = before

        def __len__(self):
            return len(pairs)

        def __getitem__(self, i):
            image, mask = pairs[i]
            joint = rl.Joint(RANDOM_SEG, (rl.ImageFile(mask, mode="mask"), rl.ImageFile(image)))
            return joint if self.before is None else (rl.ImageFile(image, self.before), joint)

    loader = _native_loader(MaskFirst(), batch_size=4, collate_fn=list)
    for mask, image in next(iter(loader)):
        assert isinstance(mask, tv_tensors.Mask)
        _assert_one_crop(image[0, 0].numpy(), mask.numpy()[0], _nearest_rules(64, 48))
    # Another reference first: its view 0 is not the Joint's image, whose draws masks replay.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(MaskFirst(v2.CenterCrop(32)), batch_size=2, collate_fn=list)
    assert not loader.native
    assert any("put that Joint first" in str(w.message) for w in caught)
