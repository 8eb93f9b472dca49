"""Self-supervised augmentations (DINO, iBOT, SimCLR) written with torchvision's own classes run
natively in a multi-crop Dataset of ``rl.ImageFile`` references, and give torch's pixels.

The recipes wrap their colour and blur steps in ``RandomApply``. Natively a ``RandomApply``
draws one uniform per view and, when it is below ``p``, runs the steps it guards, which then
make their own draws, as torchvision's does. The draws come from ringloader's per-sample
generator, not torch's (docs/transforms.md), so parity is stated two ways:

* every draw pinned (``p`` of 0 or 1, one-point parameter ranges): the batches equal torch's
  DataLoader over the same Dataset opening the files with PIL, under the same seed: max |diff|
  0, except views that blur: GaussianBlur's documented bound of 1 level (<= 1/255/std after
  Normalize);
* the recipe's own probabilities over pinned parameters: every native view equals (within the
  same bound) one of the outputs torchvision can give for that image, and each guarded step is
  applied at about its probability.
"""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import pytest
import torch
import torch.utils.data as tud
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
from PIL import Image

import ringloader as rl
from imagegen import write_flavour_tree

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
BICUBIC = v1.InterpolationMode.BICUBIC
#: GaussianBlur is within 1 level of torchvision's (test_recipes.py); after Normalize a level is
#: 1/255/std of the channel.
BLUR_BOUND = 1.0 / 255.0 / min(STD) + 1e-6


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list:
    """8 JPEGs of every flavour (4:2:0/4:4:4/4:2:2, progressive, gray, CMYK), landscape,
    portrait and square, 333-512 px."""
    root = write_flavour_tree(tmp_path_factory.mktemp("dino"), seed=3600)
    return [str(p) for p in sorted(root.rglob("*.jpg"))]


class MultiCrop(tud.Dataset):
    """A DINO-style Dataset: each sample is every view of one image and an index; the image is
    referenced (``lazy``) or opened with PIL and transformed per view, as users write it."""

    def __init__(self, files, views, lazy: bool):
        self.files, self.views, self.lazy = files, views, lazy

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        if self.lazy:
            crops = [rl.ImageFile(self.files[i], t) for t in self.views]
        else:
            with Image.open(self.files[i]) as f:
                image = f.convert("RGB")
            crops = [t(image) for t in self.views]
        return {"crops": crops, "index": i}


def native_loader(files, views, **kwargs):
    """rl.DataLoader over the references, asserting that it runs natively without a word."""
    for t in views:
        split = rl.transforms.split(t)
        assert split.tail is None, (split.tail_names, split.reason)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback warns: that would fail here
        loader = rl.DataLoader(MultiCrop(files, views, lazy=True), **kwargs)
    assert loader.native, loader.describe()
    return loader


def dino_views(n_local: int = 4, local_size: int = 96):
    """DINO's DataAugmentationDINO (main_dino.py) in torchvision's classes (its own blur and
    solarization classes are torchvision's GaussianBlur and RandomSolarize here), as iBOT uses it
    too: 2 global crops at 224 and ``n_local`` local crops."""
    flip_and_color_jitter = v1.Compose([
        v1.RandomHorizontalFlip(p=0.5),
        v1.RandomApply([v1.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1)],
                       p=0.8),
        v1.RandomGrayscale(p=0.2),
    ])
    normalize = v1.Compose([v1.ToTensor(), v1.Normalize(MEAN, STD)])
    blur = v1.GaussianBlur(23, sigma=(0.1, 2.0))
    global1 = v1.Compose([v1.RandomResizedCrop(224, scale=(0.4, 1.0), interpolation=Image.BICUBIC),
                          flip_and_color_jitter, v1.RandomApply([blur], p=1.0), normalize])
    global2 = v1.Compose([v1.RandomResizedCrop(224, scale=(0.4, 1.0), interpolation=Image.BICUBIC),
                          flip_and_color_jitter, v1.RandomApply([blur], p=0.1),
                          v1.RandomSolarize(threshold=128, p=0.2), normalize])
    local = v1.Compose([v1.RandomResizedCrop(local_size, scale=(0.05, 0.4),
                                             interpolation=Image.BICUBIC),
                        flip_and_color_jitter, v1.RandomApply([blur], p=0.5), normalize])
    return [global1, global2] + [local] * n_local


def simclr_views(size: int = 96, use_v2: bool = False):
    """SimCLR's two views (s=1): RandomResizedCrop, flip, RandomApply([ColorJitter(0.8, 0.8,
    0.8, 0.2)], p=0.8), RandomGrayscale(0.2), blur (torchvision's GaussianBlur with SimCLR's
    kernel of about a tenth of the size), ToTensor."""
    T = v2 if use_v2 else v1
    to_float = [T.PILToTensor(), T.ToDtype(torch.float32, scale=True)] if use_v2 else [T.ToTensor()]
    view = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(),
                      T.RandomApply([T.ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8),
                      T.RandomGrayscale(p=0.2), T.GaussianBlur(9, sigma=(0.1, 2.0))] + to_float)
    return [view, view]


def test_dino_multi_crop_runs_natively(files):
    views = dino_views()
    loader = native_loader(files, views, batch_size=4, num_workers=2, persistent_workers=False)
    batches = list(loader)
    assert len(batches) == 2
    crops = batches[0]["crops"]
    assert [tuple(c.shape) for c in crops] == [(4, 3, 224, 224)] * 2 + [(4, 3, 96, 96)] * 4
    assert all(c.dtype == torch.float32 for c in crops)
    stats = loader.stats()
    assert stats["decodes"] == 8 and stats["views_rendered"] == 48
    # RandomGrayscale(0.2) runs per view: some views of the colour images come out gray, most
    # do not.
    gray = colour = 0
    for b in batches:
        for i, index in enumerate(b["index"].tolist()):
            with Image.open(files[index]) as f:
                if f.mode == "L":
                    continue
            for c in b["crops"]:
                x = c[i] * torch.tensor(STD).view(3, 1, 1) + torch.tensor(MEAN).view(3, 1, 1)
                colour += 1
                gray += int((x[0] - x[1]).abs().max() < 1e-5 and (x[1] - x[2]).abs().max() < 1e-5)
    assert colour == 42 and 0 < gray < 21, gray


@pytest.mark.parametrize("use_v2", [False, True], ids=["v1", "v2"])
def test_simclr_views_run_natively(files, use_v2):
    loader = native_loader(files, simclr_views(use_v2=use_v2), batch_size=4, num_workers=2)
    batch = next(iter(loader))
    assert [tuple(c.shape) for c in batch["crops"]] == [(4, 3, 96, 96)] * 2
    assert not torch.equal(batch["crops"][0], batch["crops"][1])  # each view draws its own


def pinned_views():
    """DINO's steps with every draw pinned (p 0 or 1, one-point ranges, a crop whose
    RandomResizedCrop falls back to its deterministic centre crop), v1 and v2 classes, nested
    RandomApply included. Returns (views, which of them blur)."""
    normalize = [v1.ToTensor(), v1.Normalize(MEAN, STD)]
    crop = v1.RandomResizedCrop(224, scale=(1.0, 1.0), ratio=(1.0, 1.0), interpolation=BICUBIC)
    small = v1.RandomResizedCrop(96, scale=(1.0, 1.0), ratio=(1.0, 1.0), interpolation=BICUBIC)
    never = v1.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1)
    views = [
        v1.Compose([crop, v1.RandomHorizontalFlip(p=1.0),
                    v1.RandomApply([v1.ColorJitter(brightness=(1.3, 1.3))], p=1.0),
                    v1.RandomGrayscale(p=0.0),
                    v1.RandomApply([v1.GaussianBlur(23, sigma=(1.3, 1.3))], p=1.0), *normalize]),
        v1.Compose([crop, v1.RandomHorizontalFlip(p=0.0), v1.RandomApply([never], p=0.0),
                    v1.RandomGrayscale(p=1.0), v1.RandomApply([v1.GaussianBlur(23, (0.5, 2.0))], p=0.0),
                    v1.RandomSolarize(threshold=128, p=1.0), *normalize]),
        v1.Compose([small, v1.RandomApply([v1.ColorJitter(saturation=(1.6, 1.6)),
                                           v1.RandomApply([v1.ColorJitter(hue=(0.1, 0.1))], p=1.0)],
                                          p=1.0),
                    v1.RandomApply([v1.GaussianBlur(23, sigma=(0.4, 0.4))], p=1.0), *normalize]),
        v1.Compose([small, v1.RandomApply([v1.ColorJitter(contrast=(0.7, 0.7)),
                                           v1.RandomApply([never], p=0.0)], p=1.0),
                    v1.RandomSolarize(threshold=128, p=1.0), *normalize]),
        v2.Compose([v2.RandomResizedCrop(96, scale=(1.0, 1.0), ratio=(1.0, 1.0),
                                         interpolation=v2.InterpolationMode.BICUBIC),
                    v2.RandomApply([v2.ColorJitter(brightness=(0.8, 0.8))], p=1.0),
                    v2.RandomApply([v2.RandomGrayscale(p=1.0)], p=0.0),
                    v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]),
    ]
    return views, [True, False, True, False, False]


def test_pinned_dino_views_equal_torchs_dataloader(files):
    views, blurs = pinned_views()
    torch.manual_seed(5)
    got = list(native_loader(files, views, batch_size=4, shuffle=True, num_workers=2))
    torch.manual_seed(5)
    want = list(tud.DataLoader(MultiCrop(files, views, lazy=False), batch_size=4, shuffle=True,
                               num_workers=2))
    assert len(got) == len(want) == 2
    worst = [0.0] * len(views)
    for a, b in zip(got, want):
        assert torch.equal(a["index"], b["index"])
        for v, (x, y) in enumerate(zip(a["crops"], b["crops"])):
            assert x.shape == y.shape and x.dtype == y.dtype
            worst[v] = max(worst[v], (x.double() - y.double()).abs().max().item())
    for v, blur in enumerate(blurs):
        assert worst[v] <= (BLUR_BOUND if blur else 0.0), (v, worst)


def outcomes(image: Image.Image, geometry, steps) -> dict:
    """Every output torchvision can give for `image` through `geometry`, then each of `steps`
    applied or not (a pinned step each), then ToTensor + Normalize: {flags: tensor}."""
    out = {}
    for flags in itertools.product((False, True), repeat=len(steps)):
        chosen = [s for s, on in zip(steps, flags) if on]
        out[flags] = v1.Compose([geometry, *chosen, v1.ToTensor(), v1.Normalize(MEAN, STD)])(image)
    return out


def test_recipe_probabilities_draw_per_view_among_torchvisions_outcomes(files):
    """DINO's RandomApply/RandomGrayscale/RandomSolarize probabilities over pinned parameters:
    each view is one of torchvision's 16 outcomes for its image, and each step is applied at
    about its probability (8 images x 8 views)."""
    geometry = v1.RandomResizedCrop(96, scale=(1.0, 1.0), ratio=(1.0, 1.0), interpolation=BICUBIC)
    jitter = v1.ColorJitter(brightness=(1.4, 1.4))
    blur = v1.GaussianBlur(23, sigma=(1.0, 1.0))
    view = v1.Compose([geometry, v1.RandomApply([jitter], p=0.8), v1.RandomGrayscale(p=0.2),
                       v1.RandomApply([blur], p=0.5), v1.RandomSolarize(threshold=128, p=0.2),
                       v1.ToTensor(), v1.Normalize(MEAN, STD)])
    pinned = [jitter, v1.Grayscale(3), blur, v1.RandomSolarize(threshold=128, p=1.0)]
    torch.manual_seed(0)
    batch = next(iter(native_loader(files, [view] * 8, batch_size=len(files), num_workers=2)))
    applied = [0] * len(pinned)
    for i in range(len(files)):
        with Image.open(files[batch["index"][i]]) as f:
            possible = outcomes(f.convert("RGB"), geometry, pinned)
        for crop in batch["crops"]:
            match = None
            for flags, want in possible.items():
                bound = BLUR_BOUND if flags[2] else 0.0
                if (crop[i].double() - want.double()).abs().max().item() <= bound:
                    match = flags
                    break
            assert match is not None, f"image {i}: a view torchvision cannot produce"
            applied = [n + on for n, on in zip(applied, match)]
    n = len(files) * 8
    rates = [a / n for a in applied]
    # 64 draws each: within 0.2 of p (over 4 standard deviations for every step).
    for rate, p in zip(rates, (0.8, 0.2, 0.5, 0.2)):
        assert abs(rate - p) <= 0.2, rates
    assert all(0 < a < n for a in applied), applied


def test_simclr_color_jitter_is_applied_at_its_probability(files):
    """SimCLR's RandomApply([ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8): a view left unjittered is
    exactly torchvision's crop of the image, and about a fifth of the views are."""
    geometry = v1.RandomResizedCrop(64, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    view = v1.Compose([geometry, v1.RandomApply([v1.ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8),
                       v1.ToTensor()])
    torch.manual_seed(1)
    batch = next(iter(native_loader(files, [view] * 8, batch_size=len(files))))
    plain = 0
    for i in range(len(files)):
        with Image.open(files[batch["index"][i]]) as f:
            unjittered = v1.Compose([geometry, v1.ToTensor()])(f.convert("RGB"))
        plain += sum(int(torch.equal(crop[i], unjittered)) for crop in batch["crops"])
    assert 0.05 <= plain / (len(files) * 8) <= 0.4, plain


def test_random_apply_over_steps_that_cannot_be_guarded_runs_in_python(files):
    """A RandomApply over a step that changes the size, or over a Python step, is the first step
    of the Python tail, and the reason names it."""
    resize = v1.Compose([v1.RandomResizedCrop(64), v1.RandomApply([v1.CenterCrop(48)], p=0.5),
                         v1.ToTensor()])
    split = rl.transforms.split(resize)
    assert split.tail_names[0].endswith("RandomApply"), split
    assert "CenterCrop is not one" in split.reason, split.reason
    odd = v1.Compose([v1.CenterCrop(64), v1.RandomApply([v1.Lambda(lambda x: x)], p=0.5),
                      v1.PILToTensor()])
    split = rl.transforms.split(odd)
    assert split.tail_names[0] == "torchvision.transforms.transforms.RandomApply", split
    assert "Lambda" in split.reason, split.reason
    # Such a chain still gives torchvision's result, on torch's path.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = rl.DataLoader(MultiCrop(files, [odd], lazy=True), batch_size=4)
    assert not loader.native
    with Image.open(files[0]) as f:
        want = v1.Compose([v1.CenterCrop(64), v1.PILToTensor()])(f.convert("RGB"))
    assert torch.equal(next(iter(loader))["crops"][0][0], want)


@pytest.mark.timeout(240)
def test_the_dino_benchmark_reports_both_rates(image_tree):
    """``python -m ringloader.bench --dataset dino``: DINO's whole augmentation (2 x 224 + 10 x 96
    views) runs natively there (the bench refuses otherwise); the report's shape, not timings."""
    import re
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "ringloader.bench", "--dataset", "dino", "--root", str(image_tree),
         "--batch-size", "4", "--rounds", "1", "--warmup-batches", "1", "--max-images", "8",
         "--num-workers", "2", "--quiet"], capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(r"ringloader dino benchmark: a user Dataset over \d+ images, DINO's whole "
                     r"augmentation \(2 x 224 \+ 10 x 96 views", out), out
    assert re.search(r"torch DataLoader \+ PIL *: +\d+ samples/s", out), out
    assert re.search(r"ringloader \+ ImageFile *: +\d+ samples/s \([0-9.]+x\)", out), out
