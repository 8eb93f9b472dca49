"""A user's own Dataset: the same class decoding with PIL under torch's DataLoader against
returning ImageFile references under ringloader's (``--dataset custom``, ``multicrop``,
``dino``, ``segmentation``), and the eager-against-lazy run the Joint comparisons share."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

from .harness import (CROP, IMAGENET_MEAN, IMAGENET_STD, Config, _import_ringloader, _import_torch,
                      _warm_page_cache, alternating_rounds, native_build_seconds,
                      ringloader_factory)
from .pipelines import make_transform


def _dino_views(T: Any) -> list:
    """DINO's crops (geometry and normalisation): 2 global at 224, 6 local at 96."""
    norm = [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    big = T.Compose([T.RandomResizedCrop(224, scale=(0.4, 1.0)), T.RandomHorizontalFlip()] + norm)
    small = T.Compose([T.RandomResizedCrop(96, scale=(0.05, 0.4)), T.RandomHorizontalFlip()] + norm)
    return [big] * 2 + [small] * 6


def _dino_recipe_views(T: Any, local_crops: int = 10) -> list:
    """DINO's whole augmentation (DataAugmentationDINO, main_dino.py; iBOT's is the same) in
    torchvision's classes: flip, RandomApply([ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
    RandomGrayscale(0.2), GaussianBlur(23, (0.1, 2.0)) with p 1.0 / 0.1 / 0.5, RandomSolarize(128,
    p=0.2) on the second global crop; 2 global crops at 224, ``local_crops`` at 96, bicubic."""
    bicubic = T.InterpolationMode.BICUBIC
    flip_and_jitter = [T.RandomHorizontalFlip(p=0.5),
                       T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
                       T.RandomGrayscale(p=0.2)]
    norm = [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]

    def blur(p: float) -> Any:
        return T.RandomApply([T.GaussianBlur(23, sigma=(0.1, 2.0))], p=p)

    big = [T.RandomResizedCrop(224, scale=(0.4, 1.0), interpolation=bicubic)] + flip_and_jitter
    small = [T.RandomResizedCrop(96, scale=(0.05, 0.4), interpolation=bicubic)] + flip_and_jitter
    return ([T.Compose(big + [blur(1.0)] + norm),
             T.Compose(big + [blur(0.1), T.RandomSolarize(128, p=0.2)] + norm)]
            + [T.Compose(small + [blur(0.5)] + norm)] * local_crops)


def open_rgb(path: str) -> Any:
    """The image at ``path`` as a user's Dataset opens it: PIL, converted to RGB."""
    from PIL import Image

    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


class RowsDataset:
    """What a user writes over a CSV of (path, label) rows: ``__getitem__`` opens the image with
    PIL and applies each transform (``lazy=False``), or returns ringloader ImageFile references
    to the same file with the same transforms (``lazy=True``). One transform gives
    ``(image, label)``; several give ``(list of views, label)``."""

    def __init__(self, rows: list, transforms: list, lazy: bool):
        self.rows, self.transforms, self.lazy = rows, transforms, lazy

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Any:
        path, label = self.rows[i]
        if self.lazy:
            rl = _import_ringloader()
            views = [rl.ImageFile(path, t) for t in self.transforms]
        else:
            image = open_rgb(path)
            views = [t(image) for t in self.transforms]
        return (views[0] if len(views) == 1 else views), label


class SegmentationRows:
    """A segmentation Dataset: each image and its label image (a palette PNG), opened with PIL
    (``lazy=False``) or as references (``lazy=True``, the mask with ``mode="mask"``); fixed
    geometry (random crops of two references would not line up), the mask resized nearest."""

    def __init__(self, rows: list, masks: list, lazy: bool):
        T = _import_torch()[1].transforms
        nearest = T.InterpolationMode.NEAREST
        self.rows, self.masks, self.lazy = rows, masks, lazy
        self.image_t = make_transform(T, "eval")
        self.mask_t = T.Compose([T.Resize(256, interpolation=nearest), T.CenterCrop(CROP),
                                 T.PILToTensor()])

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Any:
        path, mask = self.rows[i][0], self.masks[i]
        if self.lazy:
            rl = _import_ringloader()
            return rl.ImageFile(path, self.image_t), rl.ImageFile(mask, self.mask_t, mode="mask")
        from PIL import Image

        image = open_rgb(path)
        with open(mask, "rb") as f:
            labels = Image.open(f)
            labels.load()
        return self.image_t(image), self.mask_t(labels)


def _write_masks(rows: list, work: Path) -> list:
    """A palette PNG label image the size of each image: a few class blocks on background."""
    import numpy as np
    from PIL import Image

    palette = [0, 0, 0] + [(37 * k) % 256 for k in range(3, 3 * 21)]
    masks = []
    for i, (path, _) in enumerate(rows):
        with Image.open(path) as im:
            w, h = im.size
        labels = np.zeros((h, w), np.uint8)
        for k in range(4):
            y, x = (i * 7 + k * 31) % max(h // 2, 1), (i * 13 + k * 17) % max(w // 2, 1)
            labels[y:y + h // 3, x:x + w // 3] = 1 + (i + k) % 20
        mask = Image.fromarray(labels, "P")
        mask.putpalette(palette)
        masks.append(work / f"{i}.png")
        mask.save(masks[-1])
    return masks


def _eager_vs_lazy(cfg: Config, eager: Any, lazy: Any, kind: str, what: str,
                   log: Callable[[str], None], collate_fn: Any = None,
                   reference: Any = None) -> dict[str, Any]:
    """Times the same Dataset class decoding with PIL under torch's DataLoader (``eager``)
    against returning references under ringloader's (``lazy``), in alternating rounds, after
    checking that ``lazy`` runs natively (``what`` names it in the error). ``reference``, a
    (name, factory) pair, joins the rounds between them. Returns the report's common fields."""
    import torch.utils.data as tud

    extra = {} if collate_fn is None else {"collate_fn": collate_fn}
    build_s = native_build_seconds(lazy, cfg, what, **extra)
    factories = {
        "torch": lambda: tud.DataLoader(eager, batch_size=cfg.batch_size, shuffle=True,
                                        num_workers=cfg.num_workers, drop_last=True, **extra),
        **dict([reference] if reference else []),
        "ringloader": ringloader_factory(lazy, cfg, **extra),
    }
    _warm_page_cache(cfg.root)
    results, decodes = alternating_rounds(factories, cfg, kind, log)
    return {"kind": kind, "build_seconds": build_s, "ringloader_decodes_views": decodes,
            "results": {name: {"runs": res.runs, "median_samples_per_s": res.median}
                        for name, res in results.items()}}


def run_custom_benchmark(cfg: Config, kind: str, log: Callable[[str], None]) -> dict[str, Any]:
    """The same user Dataset class, decoding with PIL under torch's DataLoader and returning
    ImageFile references under ringloader's, ``cfg.num_workers`` workers each, torchvision's
    transforms in both, alternating rounds (medians)."""
    import tempfile

    torch, torchvision = _import_torch()
    rl = _import_ringloader()
    rows = list(rl.ImageFolder(str(cfg.root)).samples)
    T = torchvision.transforms
    if kind == "segmentation":
        work = Path(tempfile.mkdtemp(prefix="ringloader-bench-masks-"))
        log(f"writing a label image for each of the {len(rows)} images under {work} ...")
        masks = _write_masks(rows, work)
        transforms = [None, None]
        eager, lazy = SegmentationRows(rows, masks, False), SegmentationRows(rows, masks, True)
    else:
        transforms = ([make_transform(T, "train")] if kind == "custom"
                      else _dino_recipe_views(T) if kind == "dino" else _dino_views(T))
        eager = RowsDataset(rows, transforms, lazy=False)
        lazy = RowsDataset(rows, transforms, lazy=True)
    reference = None
    if kind == "custom":
        # The same files as a ringloader ImageFolder: the native rate the references can reach
        # (the ratio to torch is the decode's, not the Dataset path's).
        reference = ("ringloader ImageFolder", ringloader_factory(
            rl.ImageFolder(str(cfg.root), transform=transforms[0]), cfg))
    try:
        report = _eager_vs_lazy(cfg, eager, lazy, kind, "the ImageFile Dataset", log,
                                reference=reference)
    finally:
        if kind == "segmentation":
            shutil.rmtree(work, ignore_errors=True)
    return {**report, "views": len(transforms)}


def format_custom_report(cfg: Config, machine: dict[str, Any], data: dict[str, Any], kind: str,
                         report: dict[str, Any]) -> str:
    res = report["results"]
    torch_s, rl_s = res["torch"]["median_samples_per_s"], res["ringloader"]["median_samples_per_s"]
    what = {"custom": "train transform",
            "multicrop": "DINO multi-crop (2 x 224 + 6 x 96 views a sample)",
            "dino": "DINO's whole augmentation (2 x 224 + 10 x 96 views a sample: RandomApply "
                    "colour jitter, grayscale, blur, solarize)",
            "segmentation": "each with its palette-PNG mask (mode='mask'), eval geometry, mask "
                            "nearest"}[kind]
    return "\n".join([
        f"ringloader {kind} benchmark: a user Dataset over {data['images']} images, {what}, "
        f"batch {cfg.batch_size}, {cfg.num_workers} workers each, median of {cfg.rounds} rounds",
        f"  torch DataLoader + PIL    : {torch_s:8.0f} samples/s",
        *[f"  {name:26s}: {r['median_samples_per_s']:8.0f} samples/s "
          f"({r['median_samples_per_s'] / torch_s:.2f}x)"
          for name, r in res.items() if name not in ("torch", "ringloader")],
        f"  ringloader + ImageFile    : {rl_s:8.0f} samples/s ({rl_s / torch_s:.2f}x)",
        f"  __getitem__ for every index when the DataLoader is built: "
        f"{report['build_seconds']:.2f} s",
        f"  machine: {machine.get('cpu', '?')}",
    ])
