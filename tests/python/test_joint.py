"""rl.Joint: a v2 transform applied jointly to decoded references, boxes, keypoints and values."""

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
        want = t(_decoded(image, mask) + (7,))
        assert isinstance(got[1], tv_tensors.Mask) and got[2] == 7
        assert got[1].dtype == torch.uint8 and torch.equal(got[1], want[1])
        assert torch.allclose(got[0], want[0], atol=1e-6, rtol=0)
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
        want_image, want = t(_decoded(image, image)[0], {"boxes": boxes,
                                                          "labels": torch.tensor([1, 2, 3])})
        assert torch.equal(got_image, want_image)
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
    boxes = tv_tensors.BoundingBoxes([[2, 2, 30, 20]], format="XYXY", canvas_size=(48, 64))

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
