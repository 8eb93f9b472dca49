"""An ``rl.Joint`` whose per-pixel steps follow its tensor conversion (colour steps after
``ToImage``/``PILToTensor``: torch's tensor kernels) stays native: the native chain renders the
decode and geometry, then v2 itself runs those steps on each rendered image in the iterating
thread, their draws keyed per sample. Fixed draws: equal to v2 on the same sample (max |diff| 0,
``test_joint_paths.py``); random draws: repeatable for a seeded generator and for any thread
count, different between samples, boxes and masks as without those steps (exact)."""

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

COLOURS = [v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8), v2.RandomGrayscale(p=0.2),
           v2.RandomApply([v2.GaussianBlur(9, sigma=(0.1, 2.0))], p=0.5),
           v2.RandomSolarize(128, p=0.2)]  # DINO's colour augmentation, per view


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(photo, label image) pairs: one photo repeated (samples differ only by their draws) and
    two others."""
    root = tmp_path_factory.mktemp("joint_tail")
    rng = np.random.default_rng(3)
    out = []
    for i, (w, h) in enumerate([(160, 120)] * 6 + [(131, 170), (200, 99)]):
        photo = root / f"p{i}.jpg"
        photo.write_bytes(jpeg_bytes(w, h, quality=90, seed=70 + (i if i >= 6 else 0)))
        labels = rng.integers(0, 4, (h, w), dtype=np.uint8)
        Image.fromarray(labels).save(root / f"p{i}.png")
        out.append((photo, root / f"p{i}.png", (w, h)))
    return out


class Scenes(torch.utils.data.Dataset):
    def __init__(self, t, files):
        self.t, self.files = t, files

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        photo, mask, (w, h) = self.files[i]
        boxes = tv_tensors.BoundingBoxes([[10.0, 12.5, w - 30.0, h - 20.0]], format="XYXY",
                                         canvas_size=(h, w))
        return rl.Joint(self.t, {"image": rl.ImageFile(photo),
                                 "mask": rl.ImageFile(mask, mode="mask"),
                                 "boxes": boxes, "index": i})


def _rows(t, files, seed, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # natively: no fallback warning
        loader = rl.DataLoader(Scenes(t, files), batch_size=3, collate_fn=list,
                               generator=torch.Generator().manual_seed(seed), **kwargs)
    assert loader.native
    return sorted((s for batch in loader for s in batch), key=lambda s: s["index"]), loader


GEOMETRY = [v2.ToImage(), v2.RandomResizedCrop(64, scale=(0.3, 1.0)), v2.RandomHorizontalFlip()]
END = [v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True)]


def test_random_colour_steps_after_toimage_are_native_repeatable_and_per_sample(files):
    """DINO's colour steps after ToImage and random geometry: native; the same generator seed
    gives the same batches (max |diff| 0) with 1 or 3 decode threads; samples of one photo
    differ; boxes and masks equal those of the chain without the colour steps (exact)."""
    t = v2.Compose(GEOMETRY + COLOURS + END)
    first, loader = _rows(t, files, seed=5, num_workers=1)
    again, _ = _rows(t, files, seed=5, num_workers=3)
    other, _ = _rows(t, files, seed=6, num_workers=1)
    plain, _ = _rows(v2.Compose(GEOMETRY + END), files, seed=5, num_workers=2)
    for a, b, c in zip(first, again, plain):
        assert type(a["image"]) is tv_tensors.Image and a["image"].dtype == torch.float32
        assert float((a["image"] - b["image"]).abs().max()) == 0
        assert torch.equal(a["mask"], b["mask"]) and torch.equal(a["mask"], c["mask"])
        assert type(a["mask"]) is tv_tensors.Mask
        assert torch.equal(a["boxes"], c["boxes"]) and a["boxes"].canvas_size == (64, 64)
    # The colour steps changed pixels (their draws: 0.8 for the jitter) and differ by sample
    # and by seed; six samples of one photo are six different images.
    assert any(float((a["image"] - c["image"]).abs().max()) > 0.05 for a, c in zip(first, plain))
    views = [r["image"] for r in first[:6]]
    assert all(float((views[i] - views[j]).abs().max()) > 0 for i in range(6) for j in range(i))
    assert any(float((a["image"] - o["image"]).abs().max()) > 0 for a, o in zip(first, other))
    told = loader.describe()
    assert "tail:" in told and "v2.ColorJitter" not in told  # the RandomApply is the step named
    assert "v2.RandomApply, v2.RandomGrayscale" in told and "iterating thread" in told


def test_the_tail_equals_v2_on_the_rendered_image_for_its_draws(files):
    """The native rows equal v2's colour steps applied to the rendered image of the chain
    without them, with torch's generator seeded as the loader seeds that row (max |diff| 0):
    the steps run on the pixels the geometry gave, nothing else."""
    from ringloader.sources import _joint_tail, _tail_pool

    t = v2.Compose(GEOMETRY + COLOURS)
    plain, _ = _rows(v2.Compose(GEOMETRY), files, seed=9)
    seeds = []
    real, threads = _joint_tail._tail_seed, _tail_pool._threads
    try:  # the seed each row's tail got: rows in index order (no shuffle), one at a time
        _joint_tail._tail_seed = lambda g: seeds.append(real(g)) or seeds[-1]
        _tail_pool._threads = lambda: 1
        rows, _ = _rows(t, files, seed=9)
    finally:
        _joint_tail._tail_seed, _tail_pool._threads = real, threads
    assert len(seeds) == len(files) and len(set(seeds)) == len(files)
    colour = v2.Compose(COLOURS)
    for i, (row, base) in enumerate(zip(rows, plain)):
        saved = torch.get_rng_state()
        torch.manual_seed(seeds[i])
        want = colour(tv_tensors.Image(base["image"].clone()))
        torch.set_rng_state(saved)
        assert float((row["image"].double() - want.double()).abs().max()) == 0


@pytest.mark.parametrize("steps, named", [
    # a geometric step after the colour step: the boxes would follow pixels moved after it
    (GEOMETRY[:1] + [v2.ColorJitter(0.4), v2.RandomResizedCrop(64)], "follows v2.ColorJitter"),
    # a RandomIoUCrop: its crop is drawn against the boxes and taken after the native chain
    ([v2.RandomIoUCrop(), v2.ToImage(), v2.Resize((64, 64)), v2.ColorJitter(0.4)], "RandomIoUCrop"),
])
def test_what_is_not_per_pixel_after_the_conversion_stays_on_torchs_path_named(files, steps, named):
    t = v2.Compose(steps)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = rl.DataLoader(Scenes(t, files), batch_size=2, collate_fn=list)
    assert not loader.native
    told = [str(w.message) for w in caught if "Joint" in str(w.message)]
    assert told and named in told[0], told


def test_the_default_collate_batch_and_pil_to_tensor(files):
    """The default collate stacks the tail's outputs (a plain batch tensor, as without a tail);
    after PILToTensor the image is a plain tensor and stays one."""
    t = v2.Compose([v2.PILToTensor(), v2.CenterCrop(64), v2.RandomGrayscale(p=1.0),
                    v2.RandomInvert(p=1.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(Scenes(t, files), batch_size=4)
    assert loader.native
    batch = next(iter(loader))
    assert batch["image"].shape == (4, 3, 64, 64) and batch["image"].dtype == torch.uint8
    assert type(batch["image"]) is torch.Tensor
    for i in range(4):
        photo = files[i][0]
        with Image.open(photo) as opened:
            want = t(opened.convert("RGB"))
        assert float((batch["image"][i].double() - want.double()).abs().max()) == 0


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_a_size_per_image_with_a_float_contrast_equals_v2(files, layout):
    """Resize(80) (a size per image: a tensor per sample) then ToDtype and a contrast on the
    float image, whose mean torch sums in an order that depends on the tensor's layout and on
    its intra-op thread count: each row equals v2 on the PIL photo with one thread, as torch's
    DataLoader workers run it (max |diff| 0), in either native layout."""
    from ringloader.core._sample_keys import one_intra_op_thread

    t = v2.Compose([v2.ToImage(), v2.Resize(80), v2.ToDtype(torch.float32, scale=True),
                    v2.ColorJitter(contrast=(0.6, 0.6))])
    rows, _ = _rows(t, files, seed=1, layout=layout)
    for i, row in enumerate(rows):
        with Image.open(files[i][0]) as opened, one_intra_op_thread():
            want = t(opened.convert("RGB"))
        got = row["image"] if layout == "NCHW" else row["image"].permute(2, 0, 1)
        assert got.shape == want.shape and float((got.double() - want.double()).abs().max()) == 0


def test_a_float_contrast_is_one_result_on_every_path_whatever_the_threads(files):
    """The caller's torch runs 2 intra-op threads: the native rows and rl.materialize in the
    main process still give one result (max |diff| 0), v2's steps run on one intra-op thread
    on every path (as in torch's workers); the caller's count is kept."""
    t = v2.Compose([v2.ToImage(), v2.Resize(80), v2.ToDtype(torch.float32, scale=True),
                    v2.ColorJitter(contrast=(0.6, 0.6))])
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        rows, _ = _rows(t, files, seed=1)
        assert torch.get_num_threads() == 2
        dataset = Scenes(t, files)
        for row in rows:
            want = rl.materialize(dataset[row["index"]])["image"]
            assert torch.equal(row["image"], want)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(saved)


def test_dtype_with_a_tail_is_refused_naming_the_steps(files):
    """dtype= converts the native image, before the steps v2 runs after it: refused, naming
    them and what to write instead."""
    t = v2.Compose([v2.ToImage(), v2.CenterCrop(64), v2.RandomGrayscale(p=1.0)])

    class Images(torch.utils.data.Dataset):  # one view: the image (dtype= applies to it)
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            return rl.Joint(t, (rl.ImageFile(files[i][0]), i))

    with pytest.raises(ValueError, match=r"dtype=.*v2\.RandomGrayscale.*ToDtype"):
        rl.DataLoader(Images(), batch_size=2, dtype=torch.float32, collate_fn=list)
    assert rl.DataLoader(Images(), batch_size=2, collate_fn=list).native
