"""collate_fn on the native path, and batch_transform (CutMix/MixUp) against torchvision and timm."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from timm.data import mixup as timm_mixup
from torch.utils.data import default_collate
from torchvision.transforms import v2

import ringloader as rl
from ringloader.loader import _mixing

CLASSES = 4  # image_tree has 4 classes


def float_tf(size: int = 32):
    return v2.Compose([v2.RandomResizedCrop(size), v2.RandomHorizontalFlip(), v2.ToImage(),
                       v2.ToDtype(torch.float32, scale=True)])


def ks_statistic(a, b) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    a, b = np.sort(np.asarray(a, dtype=np.float64)), np.sort(np.asarray(b, dtype=np.float64))
    grid = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, grid, side="right") / len(a)
                               - np.searchsorted(b, grid, side="right") / len(b))))


def ks_bound(n: int, m: int) -> float:
    """The statistic two samples of one distribution exceed with probability 0.001 (continuous
    case; ties make the test conservative)."""
    return 1.95 * np.sqrt((n + m) / (n * m))


N = 3000


def ours(obj, height=24, width=40, batch=6):
    return [_mixing.sample(obj, _mixing.rng(12345, k), batch, height, width) for k in range(N)]


# ---- parameter distributions ------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.2, 1.0])
def test_mixup_lambda_follows_torchvision(alpha):
    t = v2.MixUp(alpha=alpha, num_classes=CLASSES)
    torch.manual_seed(0)
    theirs = [t.make_params([])["lam"] for _ in range(N)]
    mine = [p.lam for p in ours(t)]
    assert all(p.kind == "mixup" and p.pairing == "roll" for p in ours(t)[:10])
    assert ks_statistic(mine, theirs) < ks_bound(N, N)
    assert abs(np.mean(mine) - 0.5) < 4 * np.sqrt(1 / (4 * (2 * alpha + 1)) / N)  # Beta mean 1/2


def test_cutmix_box_and_lambda_follow_torchvision():
    t = v2.CutMix(alpha=1.0, num_classes=CLASSES)
    image = torch.zeros(6, 3, 24, 40)  # H != W: the axes must not be swapped
    torch.manual_seed(1)
    theirs = [t.make_params([image]) for _ in range(N)]
    mine = ours(t)
    for p, q in zip(mine, theirs):
        y1, y2, x1, x2 = p.box
        assert 0 <= y1 <= y2 <= 24 and 0 <= x1 <= x2 <= 40
        assert p.lam == 1.0 - (y2 - y1) * (x2 - x1) / (24 * 40)  # lambda from the area cut
    bound = ks_bound(N, N)
    assert ks_statistic([p.lam for p in mine], [q["lam_adjusted"] for q in theirs]) < bound
    assert ks_statistic([p.box[3] - p.box[2] for p in mine], [q["box"][2] - q["box"][0] for q in theirs]) < bound
    assert ks_statistic([p.box[1] - p.box[0] for p in mine], [q["box"][3] - q["box"][1] for q in theirs]) < bound
    assert ks_statistic([p.box[0] for p in mine], [q["box"][1] for q in theirs]) < bound
    assert ks_statistic([p.box[2] for p in mine], [q["box"][0] for q in theirs]) < bound


def test_random_choice_picks_by_its_probabilities():
    t = v2.RandomChoice([v2.CutMix(num_classes=CLASSES), v2.MixUp(alpha=0.5, num_classes=CLASSES)],
                        p=[0.3, 0.7])
    kinds = [p.kind for p in ours(t)]
    share = kinds.count("cutmix") / N
    assert abs(share - 0.3) < 4 * np.sqrt(0.3 * 0.7 / N)
    assert set(kinds) == {"cutmix", "mixup"}


def timm_draws(m: timm_mixup.Mixup, height=24, width=40):
    """timm's own final lambdas (after its box correction) for N batches, from numpy's RNG."""
    np.random.seed(2)
    x = torch.zeros(2, 1, height, width)
    return [float(m._mix_batch(x.clone())) for _ in range(N)]


@pytest.mark.parametrize("kwargs", [
    dict(mixup_alpha=0.8, cutmix_alpha=1.0, prob=0.9, switch_prob=0.5),
    dict(mixup_alpha=0.0, cutmix_alpha=1.0),
    dict(mixup_alpha=0.2, cutmix_alpha=0.0, prob=0.5),
    dict(mixup_alpha=0.0, cutmix_alpha=0.0, cutmix_minmax=(0.2, 0.8)),
    dict(mixup_alpha=0.0, cutmix_alpha=1.0, correct_lam=False),
])
def test_timm_mixup_lambda_and_box_area_follow_timm(kwargs):
    m = timm_mixup.Mixup(num_classes=10, label_smoothing=0.1, **kwargs)
    theirs = timm_draws(m)
    mine = ours(m)
    assert ks_statistic([p.lam for p in mine], theirs) < ks_bound(N, N)
    # No mixing (prob): lambda exactly 1, as often as timm's.
    unmixed = sum(p.kind == "none" for p in mine) / N
    assert abs(unmixed - sum(lam == 1.0 for lam in theirs) / N) < 4 * np.sqrt(0.25 / N) * 1.5
    for p in mine:
        if p.kind == "cutmix" and (m.correct_lam or m.cutmix_minmax is not None):
            y1, y2, x1, x2 = p.box
            assert p.lam == 1.0 - (y2 - y1) * (x2 - x1) / (24 * 40)
        assert p.pairing == "flip" and p.on == pytest.approx(0.9 + 0.01) and p.off == pytest.approx(0.01)


def test_timm_mixup_enabled_is_read_at_every_batch():
    m = timm_mixup.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=10)
    m.mixup_enabled = False  # timm's training script, after mixup_off_epoch
    assert all(p.kind == "none" and p.lam == 1.0 for p in ours(m)[:50])


# ---- the mixing itself equals theirs, bit for bit, given the same parameters -----------------

def batch(b=5, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, 3, 24, 40, generator=g).to(dtype), torch.randint(0, CLASSES, (b,), generator=g)


@pytest.mark.parametrize("kind,dtype", [("mixup", torch.float32), ("mixup", torch.float16),
                                        ("cutmix", torch.float32), ("cutmix", torch.uint8)])
@pytest.mark.parametrize("rows", [1, 5, 17])
def test_torchvision_mixing_is_exact(kind, dtype, rows):
    t = (v2.MixUp if kind == "mixup" else v2.CutMix)(alpha=1.0, num_classes=CLASSES)
    images, labels = batch(rows, torch.float32 if dtype == torch.uint8 else dtype)
    if dtype == torch.uint8:
        images = (images * 255).to(torch.uint8)
    for k in range(5):
        p = _mixing.sample(t, _mixing.rng(7, k), rows, 24, 40)
        if kind == "mixup":
            t.make_params = lambda _flat, p=p: dict(lam=p.lam)
        else:
            y1, y2, x1, x2 = p.box
            t.make_params = lambda _flat, p=p, box=(x1, y1, x2, y2): dict(box=box, lam_adjusted=p.lam)
        want_images, want_labels = t(images, labels)
        # In place, also through a channels-last view (the loader's NHWC slots).
        for mine in (images.clone(), images.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)):
            soft = _mixing.apply(mine, labels, p)
            assert torch.equal(mine, want_images)
            assert torch.equal(soft, want_labels) and soft.dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kwargs", [dict(mixup_alpha=1.0, cutmix_alpha=0.0),
                                    dict(mixup_alpha=0.0, cutmix_alpha=1.0),
                                    dict(mixup_alpha=0.0, cutmix_alpha=0.0, cutmix_minmax=(0.2, 0.8)),
                                    dict(mixup_alpha=1.0, cutmix_alpha=0.0, prob=0.0)])
def test_timm_mixing_is_exact(monkeypatch, kwargs, dtype):
    m = timm_mixup.Mixup(num_classes=CLASSES, label_smoothing=0.1, **kwargs)
    images, labels = batch(18, dtype)
    for k in range(5):
        p = _mixing.sample(m, _mixing.rng(9, k), 18, 24, 40)
        use_cutmix = p.kind == "cutmix"
        monkeypatch.setattr(m, "_params_per_batch", lambda p=p, c=use_cutmix: (p.lam, c))
        monkeypatch.setattr(timm_mixup, "cutmix_bbox_and_lam",
                            lambda *a, p=p, **kw: (p.box, p.lam))
        want_images, want_labels = m(images.clone(), labels)
        mine = images.clone()
        soft = _mixing.apply(mine, labels, p)
        assert torch.equal(mine, want_images)
        assert torch.equal(soft, want_labels)


# ---- the loader -------------------------------------------------------------------------------

def epoch(loader, seed=0):
    torch.manual_seed(seed)
    return [(x.clone(), y.clone()) for x, y in loader]


def test_batch_transform_in_the_loader_is_the_seeded_mixing_of_the_plain_batches(image_tree: Path):
    ds = rl.ImageFolder(image_tree, transform=float_tf())
    t = v2.RandomChoice([v2.CutMix(num_classes=CLASSES), v2.MixUp(num_classes=CLASSES)])
    mixed = rl.DataLoader(ds, batch_size=5, shuffle=True, batch_transform=t)
    plain = rl.DataLoader(ds, batch_size=5, shuffle=True)
    torch.manual_seed(3)
    it = iter(mixed)
    first = next(it)
    base_seed = mixed.state_dict()["base_seed"]
    got = [first] + list(it)
    want = epoch(plain, seed=3)
    assert len(got) == len(want) == 5
    assert "batch_transform=torchvision RandomChoice(CutMix(alpha=1.0, num_classes=4) p=0.5" in mixed.describe()
    for number, ((x, y), (px, py)) in enumerate(zip(got, want)):
        assert y.shape == (px.shape[0], CLASSES) and y.dtype == torch.float32
        assert torch.allclose(y.sum(1), torch.ones(px.shape[0]))
        p = _mixing.sample(t, _mixing.rng(base_seed, number), px.shape[0], 32, 32)
        soft = _mixing.apply(px, py, p)
        assert torch.equal(x, px) and torch.equal(y, soft)


def test_batch_transform_is_deterministic_for_workers_and_resume(image_tree: Path):
    ds = rl.ImageFolder(image_tree, transform=float_tf())
    m = timm_mixup.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=CLASSES)
    make = lambda workers: rl.DataLoader(ds, batch_size=4, shuffle=True, num_workers=workers,
                                         batch_transform=m)
    one, three = epoch(make(1), seed=5), epoch(make(3), seed=5)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(one, three))
    assert any((y.max(1).values < 0.92).any() for _, y in one)  # mixed (unmixed: 0.925, smoothed)

    loader = make(2)
    torch.manual_seed(5)
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    del it
    resumed = make(1)
    resumed.load_state_dict(state)
    rest = [(x.clone(), y.clone()) for x, y in resumed]
    assert len(rest) == len(one) - 2
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(rest, one[2:]))


def test_batch_transform_on_nhwc_and_channels_last_slots(image_tree: Path):
    ds = rl.ImageFolder(image_tree, transform=float_tf())
    t = v2.CutMix(num_classes=CLASSES)
    nchw = epoch(rl.DataLoader(ds, batch_size=6, batch_transform=t))
    nhwc = epoch(rl.DataLoader(ds, batch_size=6, batch_transform=t, layout="NHWC"))
    cl = epoch(rl.DataLoader(ds, batch_size=6, batch_transform=t, memory_format=torch.channels_last))
    for (a, ya), (b, yb), (c, yc) in zip(nchw, nhwc, cl):
        assert torch.equal(a, b.permute(0, 3, 1, 2)) and torch.equal(a, c)
        assert torch.equal(ya, yb) and torch.equal(ya, yc)


def test_the_references_collate_fn_runs_natively_like_torchs_loader(image_tree: Path):
    cutmix_or_mixup = v2.RandomChoice([v2.CutMix(num_classes=CLASSES), v2.MixUp(num_classes=CLASSES)])
    collate = lambda b: cutmix_or_mixup(*default_collate(b))
    ours = rl.DataLoader(rl.ImageFolder(image_tree, transform=float_tf()), batch_size=5,
                         shuffle=True, collate_fn=collate)
    assert ours.native
    torchs = torch.utils.data.DataLoader(
        torchvision.datasets.ImageFolder(str(image_tree), transform=float_tf()), batch_size=5,
        shuffle=True, collate_fn=collate)
    got, want = list(ours), list(torchs)
    assert [(x.shape, x.dtype, y.shape, y.dtype) for x, y in got] == \
        [(x.shape, x.dtype, y.shape, y.dtype) for x, y in want]


def test_collate_fn_gets_samples_as_torchs_loader_gives_them(image_tree: Path):
    ds = rl.ImageFolder(image_tree, transform=float_tf())
    seen = []
    loader = rl.DataLoader(ds, batch_size=5, collate_fn=lambda b: seen.append(b) or len(b))
    torch.manual_seed(0)
    assert list(loader) == [5, 5, 5, 5, 4]
    plain = epoch(rl.DataLoader(ds, batch_size=5))
    for samples, (x, y) in zip(seen, plain):
        assert all(type(s) is tuple and len(s) == 2 and type(s[1]) is int for s in samples)
        assert torch.equal(torch.stack([s[0] for s in samples]), x)
        assert [s[1] for s in samples] == y.tolist()


def test_collate_fn_views_keep_their_slot(image_tree: Path):
    ds = rl.ImageFolder(image_tree, transform=float_tf())
    loader = rl.DataLoader(ds, batch_size=2, collate_fn=lambda b: b, max_slots=16)
    kept = list(loader)
    copies = [[(x.clone(), y) for x, y in b] for b in kept]
    for _ in loader:  # another epoch reuses only the slots no view holds
        pass
    assert all(torch.equal(a[0], b[0]) for ka, kb in zip(kept, copies) for a, b in zip(ka, kb))
    # Holding every slot through the samples' views is an error, never an overwrite.
    loader = rl.DataLoader(ds, batch_size=2, max_slots=3, collate_fn=lambda b: b)
    held, it = [], iter(loader)
    with pytest.raises(rl.SlotsExhaustedError):
        for samples in it:
            held.append(samples)
    assert len(held) == 3
    held.clear()
    del samples
    assert sum(1 for _ in it) == 12 - 3  # released views free their slots; nothing was lost


def test_bad_batch_transforms_are_named(image_tree: Path):
    ds = rl.ImageFolder(image_tree, transform=float_tf())
    uint8 = rl.ImageFolder(image_tree, transform=v2.Compose([v2.RandomResizedCrop(32), v2.PILToTensor()]))
    cases = [
        (ds, dict(batch_transform=v2.RandomHorizontalFlip()), TypeError, "RandomHorizontalFlip"),
        (ds, dict(batch_transform=v2.RandomChoice([v2.CutMix(num_classes=4), v2.RandomErasing()])),
         TypeError, "RandomErasing"),
        (ds, dict(batch_transform=v2.MixUp()), ValueError, "num_classes"),
        (uint8, dict(batch_transform=v2.MixUp(num_classes=4)), ValueError, "uint8"),
        (ds, dict(batch_transform=timm_mixup.Mixup(mode="elem")), ValueError, "mode='batch'"),
        (ds, dict(batch_transform=timm_mixup.FastCollateMixup()), TypeError, "FastCollateMixup"),
        (ds, dict(batch_transform=timm_mixup.Mixup(), batch_size=3), ValueError, "even batch size"),
        (ds, dict(batch_transform=v2.CutMix(num_classes=4), collate_fn=default_collate), ValueError,
         "both given"),
        (ds, dict(collate_fn=3), TypeError, "collate_fn"),
        (torchvision.datasets.FakeData(4), dict(batch_transform=v2.CutMix(num_classes=4)), ValueError,
         "batch_transform"),
    ]
    for dataset, kwargs, exc, match in cases:
        kwargs.setdefault("batch_size", 4)
        with pytest.raises(exc, match=match):
            rl.DataLoader(dataset, **kwargs)
    # CutMix only moves pixels: uint8 batches are fine.
    x, y = next(iter(rl.DataLoader(uint8, batch_size=4, batch_transform=v2.CutMix(num_classes=4))))
    assert x.dtype == torch.uint8 and y.shape == (4, 4)


def test_timm_odd_last_batch_is_named(image_tree: Path):
    ds = rl.ImageFolder(image_tree, transform=float_tf())
    part = torch.utils.data.Subset(ds, range(21))
    loader = rl.DataLoader(part, batch_size=10, batch_transform=timm_mixup.Mixup(num_classes=CLASSES))
    it = iter(loader)
    next(it), next(it)
    with pytest.raises(ValueError, match="drop_last=True"):
        next(it)  # the last batch has 1 row
    loader = rl.DataLoader(part, batch_size=10, drop_last=True,
                           batch_transform=timm_mixup.Mixup(num_classes=CLASSES))
    assert len(list(loader)) == 2
