"""Outputs whose size depends on the image, rendered natively: torchvision's detection reference
presets (``hflip`` train, eval) and a ``Resize(200)`` / ``Resize(..., max_size=)`` inside an
``rl.Joint``, each sample into a buffer of its own (charged to ``max_memory``), reaching the
batch as a list of tensors.

Parity bound: pixels equal v2 on the same decoded pixels (the PIL image the user's code would
open) exactly, max |diff| 0; integer boxes equal v2's exactly (v2's own kernels, each step
rounded as v2 rounds it); float boxes within 1e-4 pixel (one affine map instead of v2's steps).
"""

import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

import ringloader as rl

from imagegen import jpeg_bytes

SIZES = [(96, 64), (50, 81), (121, 90), (64, 64), (77, 51), (40, 120)]  # width, height


def _collate(batch):
    return tuple(zip(*batch))


@pytest.fixture()
def photos(tmp_path):
    out = []
    for i, (w, h) in enumerate(SIZES):
        path = tmp_path / f"photo{i}.jpg"
        path.write_bytes(jpeg_bytes(w, h, quality=88, seed=i))
        out.append((path, (w, h)))
    return out


def _boxes(w, h, dtype):
    """COCO-style XYWH boxes: an ordinary one, a degenerate one (no width), one partly out of
    frame and one wholly out of frame."""
    data = [[3, 4, 19, 23], [10, 12, 0, 9], [w - 12, h - 8, 30, 20], [w + 5, 2, 10, 10]]
    return tv_tensors.BoundingBoxes(torch.tensor(data, dtype=dtype), format="XYWH",
                                    canvas_size=(h, w))


class Coco(torch.utils.data.Dataset):
    """A COCO-style detection Dataset: ``rl.Joint(t, (image, target))`` with the target's boxes
    and labels, as torchvision's detection reference builds its samples."""

    def __init__(self, t, photos, dtype=torch.float32):
        self.t, self.photos, self.dtype = t, photos, dtype

    def __len__(self):
        return len(self.photos)

    def target(self, i):
        _, (w, h) = self.photos[i]
        return {"boxes": _boxes(w, h, self.dtype), "labels": torch.tensor([1, 2, 3, 4]),
                "image_id": i}

    def __getitem__(self, i):
        return rl.Joint(self.t, (rl.ImageFile(self.photos[i][0]), self.target(i)))


def hflip_train(backend, p=0.5):
    """The steps of torchvision's DetectionPresetTrain(data_augmentation="hflip", use_v2=True)."""
    steps = []
    if backend == "tensor":
        steps.append(v2.PILToTensor())
    elif backend == "tv_tensor":
        steps.append(v2.ToImage())
    steps.append(v2.RandomHorizontalFlip(p=p))
    if backend == "pil":
        steps.append(v2.ToImage())
    steps += [v2.ToDtype(torch.float, scale=True),
              v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
              v2.SanitizeBoundingBoxes(), v2.ToPureTensor()]
    return v2.Compose(steps)


def detection_eval(backend):
    """The steps of torchvision's DetectionPresetEval(use_v2=True)."""
    first = v2.PILToTensor() if backend == "tensor" else v2.ToImage()
    return v2.Compose([first, v2.ToDtype(torch.float, scale=True), v2.ToPureTensor()])


def _native(dataset, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the native path is taken: no fallback warning
        loader = rl.DataLoader(dataset, **kwargs)
    assert loader.native
    return loader


def _v2(t, dataset, i):
    """v2 on what the user's own code would hold: the PIL image and the sample's target."""
    path = dataset.photos[i][0]
    with Image.open(path) as im:
        return t(im.convert("RGB"), dataset.target(i))


def _assert_target(got, want, dtype):
    assert got["boxes"].dtype == want["boxes"].dtype == dtype
    if dtype.is_floating_point:
        torch.testing.assert_close(got["boxes"], want["boxes"], atol=1e-4, rtol=0)
    else:
        assert torch.equal(got["boxes"], want["boxes"])
    assert torch.equal(got["labels"], want["labels"]) and got["image_id"] == want["image_id"]


@pytest.mark.parametrize("backend", ["pil", "tensor", "tv_tensor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_hflip_preset_matches_v2_for_fixed_draws(photos, backend, dtype):
    for p in (0.0, 1.0):
        t = hflip_train(backend, p)
        ds = Coco(t, photos, dtype)
        loader = _native(ds, batch_size=4, collate_fn=_collate)
        assert loader._backend._native.variable_views == [True]
        seen = 0
        for images, targets in loader:
            assert isinstance(images, tuple) and len(images) == len(targets)
            for image, target in zip(images, targets):
                i = target["image_id"]
                want_image, want = _v2(t, ds, i)
                assert type(image) is torch.Tensor and image.dtype == torch.float32
                assert image.shape == want_image.shape == (3, SIZES[i][1], SIZES[i][0])
                assert (image - want_image).abs().max().item() == 0
                _assert_target(target, want, dtype)
                # SanitizeBoundingBoxes dropped the degenerate and the out-of-frame boxes.
                assert len(target["labels"]) == len(want["labels"]) < 4
                seen += 1
        assert seen == len(SIZES)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_random_flips_move_boxes_with_their_image(photos, dtype):
    ds = Coco(hflip_train("pil"), photos, dtype)
    flipped, kept = Coco(hflip_train("pil", 1.0), photos, dtype), Coco(hflip_train("pil", 0.0),
                                                                          photos, dtype)
    loader = _native(ds, batch_size=3, collate_fn=_collate, shuffle=True,
                     generator=torch.Generator().manual_seed(3))
    drawn = set()
    for _ in range(2):
        for images, targets in loader:
            for image, target in zip(images, targets):
                i = target["image_id"]
                for name, other in (("flipped", flipped), ("kept", kept)):
                    want_image, want = _v2(other.t, other, i)
                    if torch.equal(image, want_image):
                        _assert_target(target, want, dtype)
                        drawn.add(name)
                        break
                else:
                    raise AssertionError(f"sample {i} is neither v2's flip nor its image")
    assert drawn == {"flipped", "kept"}


@pytest.mark.parametrize("backend", ["pil", "tensor", "tv_tensor"])
def test_eval_preset_matches_v2(photos, backend):
    t = detection_eval(backend)
    ds = Coco(t, photos, torch.int64)
    for images, targets in _native(ds, batch_size=4, collate_fn=_collate):
        for image, target in zip(images, targets):
            want_image, want = _v2(t, ds, target["image_id"])
            assert image.shape == want_image.shape and torch.equal(image, want_image)
            _assert_target(target, want, torch.int64)


@pytest.mark.parametrize("steps", [
    [v2.Resize(200)],
    [v2.Resize(37), v2.RandomHorizontalFlip(1.0)],
    [v2.RandomVerticalFlip(1.0), v2.Resize(37, max_size=50)],
    [v2.Resize(30, interpolation=v2.InterpolationMode.NEAREST), v2.RandomHorizontalFlip(1.0)],
    [v2.RandomShortestSize((41,), max_size=60), v2.RandomHorizontalFlip(1.0)],
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("to_image", ["last", "first"])
def test_resize_by_the_shorter_side_inside_a_joint_matches_v2(photos, steps, dtype, to_image):
    # ToImage first: v2 resizes the uint8 tensor (torch's kernels), and so does the native path.
    t = v2.Compose(steps + [v2.ToImage()] if to_image == "last" else [v2.ToImage()] + steps)
    ds = Coco(t, photos, dtype)
    loader = _native(ds, batch_size=4, collate_fn=_collate)
    sizes = set()
    for images, targets in loader:
        for image, target in zip(images, targets):
            want_image, want = _v2(t, ds, target["image_id"])
            assert isinstance(image, tv_tensors.Image)
            assert image.shape == want_image.shape and torch.equal(image, want_image)
            assert target["boxes"].canvas_size == tuple(image.shape[1:])
            _assert_target(target, want, dtype)
            sizes.add(tuple(image.shape))
    assert len(sizes) > 1  # several output sizes in one loader


def test_fixed_size_outputs_keep_the_slot_rows(photos):
    t = v2.Compose([v2.Resize((40, 56)), v2.ToImage()])
    loader = _native(Coco(t, photos), batch_size=3)
    assert loader._backend._native.variable_views == [False]
    images, targets = next(iter(loader))
    assert images.shape == (3, 3, 40, 56)  # one tensor over the slot, zero-copy, as before


def test_without_collate_fn_equal_sizes_stack_and_unequal_ones_fail_as_torchs(photos, tmp_path):
    t = v2.Compose([v2.Resize(32), v2.ToImage()])
    square = [(tmp_path / f"sq{i}.jpg", (48, 48)) for i in range(4)]
    for i, (path, _) in enumerate(square):
        path.write_bytes(jpeg_bytes(48, 48, seed=10 + i))
    images, target = next(iter(_native(Coco(t, square), batch_size=4)))
    assert images.shape == (4, 3, 32, 32)
    assert target["labels"].shape == (4, 4)
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        next(iter(_native(Coco(t, photos), batch_size=4)))


def test_same_seed_same_batches_and_workers_do_not_change_them(photos):
    def run(workers):
        ds = Coco(hflip_train("pil"), photos)
        loader = _native(ds, batch_size=2, collate_fn=_collate, shuffle=True, num_workers=workers,
                         generator=torch.Generator().manual_seed(11))
        return [(image, target["boxes"]) for images, targets in loader
                for image, target in zip(images, targets)]

    a, b, c = run(1), run(1), run(2)
    for (ia, ba), (ib, bb), (ic, bc) in zip(a, b, c):
        assert torch.equal(ia, ib) and torch.equal(ia, ic)
        assert torch.equal(ba, bb) and torch.equal(ba, bc)


@pytest.mark.parametrize("on_error", ["skip", "replace"])
def test_on_error_skips_or_replaces_a_broken_photo(photos, tmp_path, on_error):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(jpeg_bytes(60, 40, seed=99)[:300])
    items = photos[:2] + [(broken, (60, 40))] + photos[2:4]
    ds = Coco(hflip_train("pil", 1.0), items)
    loader = _native(ds, batch_size=5, collate_fn=_collate, on_error=on_error)
    images, targets = next(iter(loader))
    ids = [t["image_id"] for t in targets]
    assert 2 not in ids
    assert len(images) == (4 if on_error == "skip" else 5)
    for image, target in zip(images, targets):  # every row is its own sample's, sized by it
        want_image, want = _v2(ds.t, ds, target["image_id"])
        assert torch.equal(image, want_image)
        _assert_target(target, want, torch.float32)


def test_an_output_larger_than_max_memory_is_a_clear_error(tmp_path):
    path = tmp_path / "large.jpg"
    path.write_bytes(jpeg_bytes(400, 300, seed=5))
    # 400 x 300 x 3 float32 = 1.44 MB per output; the slots' rows are a few records.
    ds = Coco(hflip_train("pil"), [(path, (400, 300))] * 2)
    loader = _native(ds, batch_size=2, collate_fn=_collate, max_memory=1 << 20)
    with pytest.raises(rl.SampleError, match=r"max_memory.*Raise max_memory="):
        next(iter(loader))
    # The same budget serves outputs that fit, and the loop frees what it held (the outputs of
    # each batch are charged while held: more batches than the budget holds at once run).
    small = tmp_path / "small.jpg"
    small.write_bytes(jpeg_bytes(120, 90, seed=6))  # 130 KB an output
    ds = Coco(hflip_train("pil"), [(small, (120, 90))] * 24)
    loader = _native(ds, batch_size=2, collate_fn=_collate, max_memory=1 << 20)
    assert sum(len(images) for images, _ in loader) == 24


def test_skip_with_drop_last_is_refused_naming_what_to_pass(photos):
    # Refilling a batch from the next one's rows would outlive the outputs of the batch it
    # came from: a clear error instead of a batch that cannot be built.
    with pytest.raises(ValueError, match=r"drop_last=False .* or on_error='replace'"):
        rl.DataLoader(Coco(hflip_train("pil"), photos), batch_size=4, collate_fn=_collate,
                      on_error="skip", drop_last=True)


def multiscale_train(min_size, max_size):
    """The steps of torchvision's DetectionPresetTrain(data_augmentation="multiscale",
    use_v2=True, backend "pil")."""
    return v2.Compose([
        v2.RandomShortestSize(min_size=min_size, max_size=max_size), v2.RandomHorizontalFlip(0.5),
        v2.ToImage(), v2.ToDtype(torch.float, scale=True),
        v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
        v2.SanitizeBoundingBoxes(), v2.ToPureTensor()])


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_multiscale_preset_matches_v2_for_each_drawn_size(photos, dtype):
    # One size to draw from: v2's draw is fixed, the image and boxes equal v2's (the flip drawn
    # natively: each sample equals v2 with or without it). max_size caps the long side.
    choices = (40, 48, 56)
    drawn = set()
    ds = Coco(multiscale_train(choices, 90), photos, dtype)
    loader = _native(ds, batch_size=3, collate_fn=_collate)
    for _ in range(3):
        for images, targets in loader:
            for image, target in zip(images, targets):
                i = target["image_id"]
                found = False
                for size in choices:
                    for p in (0.0, 1.0):
                        t = multiscale_train(size, 90)
                        t.transforms[1].p = p
                        want_image, want = _v2(t, Coco(t, photos, dtype), i)
                        if want_image.shape == image.shape and torch.equal(image, want_image):
                            _assert_target(target, want, dtype)
                            drawn.add(size)
                            found = True
                            break
                    if found:
                        break
                assert found, f"sample {i}: no draw of v2's gives these pixels"
    assert len(drawn) > 1  # the shorter side is drawn per sample


def test_a_mask_follows_its_image_at_the_image_s_own_size(photos, tmp_path):
    t = v2.Compose([v2.Resize(30), v2.RandomHorizontalFlip(1.0), v2.ToImage()])
    masks = []
    for i, (_, (w, h)) in enumerate(photos[:4]):
        labels = np.random.default_rng(i).integers(0, 5, (h, w), dtype=np.uint8)
        Image.fromarray(labels).save(tmp_path / f"mask{i}.png")
        masks.append(tmp_path / f"mask{i}.png")

    class Segmentation(torch.utils.data.Dataset):
        def __len__(self):
            return len(masks)

        def __getitem__(self, i):
            return rl.Joint(t, (rl.ImageFile(photos[i][0]), rl.ImageFile(masks[i], mode="mask")))

    images, labels = next(iter(_native(Segmentation(), batch_size=4, collate_fn=_collate)))
    for i, (image, mask) in enumerate(zip(images, labels)):
        with Image.open(photos[i][0]) as im, Image.open(masks[i]) as m:
            want_image, want_mask = t(im.convert("RGB"),
                                      tv_tensors.Mask(torch.from_numpy(np.array(m))))
        assert isinstance(mask, tv_tensors.Mask) and mask.shape == image.shape[1:]
        assert torch.equal(image, want_image) and torch.equal(mask, want_mask)


def test_a_plain_reference_without_a_resize_keeps_each_image_s_size(photos):
    class Plain(torch.utils.data.Dataset):
        def __len__(self):
            return len(photos)

        def __getitem__(self, i):
            return rl.ImageFile(photos[i][0], v2.PILToTensor()), i

    for images, indices in _native(Plain(), batch_size=3, collate_fn=_collate):
        for image, i in zip(images, indices):
            with Image.open(photos[i][0]) as im:
                want = torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1)
            assert torch.equal(image, want)


@pytest.mark.parametrize("transform", [None, v2.Resize(20)], ids=["none", "resize"])
def test_a_plain_reference_that_stays_a_pil_image_is_one_as_in_torch(photos, transform):
    # Without a tensor conversion the user's own code holds PIL images (rl.materialize, torch's
    # workers): the loader gives them PIL images too, on torch's path with a warning naming the
    # fix, never a tensor that the same Dataset would not give elsewhere.
    class Plain(torch.utils.data.Dataset):
        def __len__(self):
            return len(photos)

        def __getitem__(self, i):
            return rl.ImageFile(photos[i][0], transform), i

    with pytest.warns(rl.FallbackWarning, match=r"PIL image of its own size.*PILToTensor\(\) or ToImage\(\)"):
        loader = rl.DataLoader(Plain(), batch_size=3, collate_fn=_collate)
    images, indices = next(iter(loader))
    for image, i in zip(images, indices):
        want = rl.materialize(Plain()[i])[0]
        assert isinstance(image, Image.Image) and image.size == want.size
        assert np.array_equal(np.asarray(image), np.asarray(want))


def test_a_small_max_memory_never_stalls_the_batch_due(tmp_path):
    # Float outputs of about 1 MB each, a budget of a few batches: samples of batches decoded
    # ahead hold the room while the batch the consumer waits for needs some. That batch is let
    # in (nothing else would free room), so the epoch ends, whether the consumer drops its
    # batches or keeps them all. Run in a child process so that a stall fails within the limit.
    import subprocess
    import sys
    import textwrap

    for i in range(24):
        (tmp_path / f"{i}.jpg").write_bytes(jpeg_bytes(300 + i, 280, quality=88, seed=i))
    script = textwrap.dedent(f"""
        import torch
        from pathlib import Path
        from torchvision.transforms import v2
        import ringloader as rl
        paths = sorted(Path({str(tmp_path)!r}).glob("*.jpg"))
        t = v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip(), v2.ToDtype(torch.float, scale=True),
                        v2.ToPureTensor()])
        class DS(torch.utils.data.Dataset):
            def __len__(self):
                return len(paths)
            def __getitem__(self, i):
                return rl.Joint(t, (rl.ImageFile(paths[i]), {{"image_id": i}}))
        dropped = rl.DataLoader(DS(), batch_size=4, collate_fn=len, max_memory="9MB", num_workers=2)
        print(sum(dropped))
        kept = rl.DataLoader(DS(), batch_size=4, collate_fn=lambda b: tuple(zip(*b)), max_memory="12MB",
                             num_workers=2)
        print(len(list(kept)))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["24", "6"]


def test_reused_output_buffers_never_show_an_earlier_sample(photos):
    """A dropped output's buffer is kept and reused for a later output of up to its size (no
    fresh pages): images of different sizes, taken one at a time and dropped before the next,
    over several epochs (each buffer reused for other sizes), each equal v2's exactly (max
    |diff| 0), flipped (the copying resample mirrored) and not."""
    for p in (1.0, 0.0):
        t = hflip_train("pil", p)
        ds = Coco(t, photos)
        loader = _native(ds, batch_size=1, collate_fn=_collate)
        seen = 0
        for epoch in range(3):
            for images, targets in loader:
                want_image, _ = _v2(t, ds, targets[0]["image_id"])
                assert images[0].shape == want_image.shape
                assert (images[0] - want_image).abs().max().item() == 0
                del images, targets
                seen += 1
        assert seen == 3 * len(SIZES)


def test_large_outputs_reuse_kept_buffers_shrunk_or_grown(tmp_path):
    """Outputs of 1 MiB and more are pages of their own: a kept one serves a later output of any
    size (shrunk, or grown keeping its pages: slot_pool_test.cc), and each image still equals
    v2's exactly (max |diff| 0), whatever buffer it was rendered into. stats() and describe()
    count the outputs rendered into kept buffers and into new ones."""
    sizes = [(900, 700), (420, 300), (1200, 260), (640, 480), (300, 900)]  # 1.5-7.6 MB as float
    photos = []
    for i, (w, h) in enumerate(sizes):
        path = tmp_path / f"big{i}.jpg"
        path.write_bytes(jpeg_bytes(w, h, quality=85, seed=50 + i))
        photos.append((path, (w, h)))
    t = hflip_train("pil", 0.5)
    ds = Coco(t, photos)
    loader = _native(ds, batch_size=1, shuffle=True, collate_fn=_collate,
                     generator=torch.Generator().manual_seed(3))
    epochs = 4
    for _ in range(epochs):
        for images, targets in loader:
            want, _ = _v2(t, ds, targets[0]["image_id"])
            assert images[0].shape == want.shape
            # The draw flipped it or not: one of the two, exactly.
            assert min((images[0] - w).abs().max().item() for w in (want, want.flip(-1))) == 0
            del images, targets
    stats = loader.stats()
    assert stats["outputs_new"] + stats["outputs_reused"] >= epochs * len(sizes)
    assert stats["outputs_reused"] > 0 and stats["outputs_new"] < epochs * len(sizes), stats
    assert (f"{stats['outputs_reused']} into the buffer of an output dropped earlier"
            in loader.describe())
