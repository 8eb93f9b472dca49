"""Joint samples (``rl.Joint``): an image with its boxes (``--dataset detection``,
``detection-hflip``, ``detection-lsj``, ``detection-ssd``) or with its mask under one random geometry (``segmentation-joint``,
``segmentation-reference``), v2 in Python under torch's DataLoader against ringloader's."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

from .custom import _eager_vs_lazy, _write_masks, open_rgb
from .harness import CROP, IMAGENET_MEAN, IMAGENET_STD, Config, _import_ringloader, _import_torch


class BoxesDataset:
    """A detection Dataset over (path, label) rows: three boxes an image (fixed per row, in
    the image's pixels), a v2 transform applied jointly to the image and its target. With
    ``lazy`` the sample is an ``rl.Joint`` over an ImageFile; else the image is opened with PIL
    and the transform applied in Python, as torchvision's detection references do."""

    def __init__(self, rows: list, sizes: list, transform: Any, lazy: bool):
        self.rows, self.sizes, self.transform, self.lazy = rows, sizes, transform, lazy

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Any:
        import torch
        from torchvision import tv_tensors

        path, label = self.rows[i]
        w, h = self.sizes[i]
        boxes = tv_tensors.BoundingBoxes(
            [[0.1 * w, 0.1 * h, 0.5 * w, 0.6 * h], [0.4 * w, 0.3 * h, 0.9 * w, 0.9 * h],
             [0.2 * w, 0.5 * h, 0.35 * w, 0.7 * h]], format="XYXY", canvas_size=(h, w))
        target = {"boxes": boxes, "labels": torch.tensor([label, label + 1, label + 2])}
        if self.lazy:
            return _import_ringloader().Joint(self.transform, (_import_ringloader().ImageFile(path),
                                                               target))
        return self.transform(open_rgb(path), target)


class JointSegmentationRows:
    """A segmentation Dataset with random geometry shared by each image and its label image: a
    v2 transform applied to ``{"image", "mask", "label"}``. With ``lazy`` the sample is an
    ``rl.Joint`` over two ImageFiles (the mask with ``mode="mask"``); else the image is opened
    with PIL, the mask as a ``tv_tensors.Mask`` of its stored values, and v2 runs in Python."""

    def __init__(self, rows: list, masks: list, transform: Any, lazy: bool):
        self.rows, self.masks, self.transform, self.lazy = rows, masks, transform, lazy

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Any:
        path, label = self.rows[i]
        if self.lazy:
            rl = _import_ringloader()
            return rl.Joint(self.transform, {"image": rl.ImageFile(path),
                                             "mask": rl.ImageFile(self.masks[i], mode="mask"),
                                             "label": label})
        import numpy as np
        import torch
        from PIL import Image
        from torchvision import tv_tensors

        image = open_rgb(path)
        with open(self.masks[i], "rb") as f:
            mask = tv_tensors.Mask(torch.from_numpy(np.array(Image.open(f))))
        return self.transform({"image": image, "mask": mask, "label": label})


def run_joint_segmentation_benchmark(cfg: Config, log: Callable[[str], None]) -> dict[str, Any]:
    """``segmentation-joint``: each image and its palette-PNG mask under one random v2 transform
    (RandomResizedCrop + flip + ToDtype + Normalize), torch's DataLoader (PIL + v2 in Python)
    against ringloader's (rl.Joint: both rendered natively, the mask with the image's draws),
    default collate, ``cfg.num_workers`` workers each, alternating rounds (medians)."""
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    torch, _ = _import_torch()
    transform = v2.Compose([
        v2.RandomResizedCrop(CROP, antialias=True), v2.RandomHorizontalFlip(), v2.ToImage(),
        v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True),
        v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    return _run_masks_under_joint(cfg, log, transform, "segmentation-joint")


def _run_masks_under_joint(cfg: Config, log: Callable[[str], None], transform: Any,
                           name: str) -> dict[str, Any]:
    """Each image of ``cfg.root`` and a palette-PNG mask written for it (in a temporary folder,
    removed after) under the Joint ``transform``: torch's DataLoader against ringloader's."""
    import tempfile

    rl = _import_ringloader()
    rows = list(rl.ImageFolder(str(cfg.root)).samples)
    work = Path(tempfile.mkdtemp(prefix="ringloader-bench-masks-"))
    try:
        log(f"writing a label image for each of the {len(rows)} images under {work} ...")
        masks = _write_masks(rows, work)
        eager = JointSegmentationRows(rows, masks, transform, lazy=False)
        lazy = JointSegmentationRows(rows, masks, transform, lazy=True)
        return _eager_vs_lazy(cfg, eager, lazy, name, "the Joint Dataset", log)
    finally:
        shutil.rmtree(work, ignore_errors=True)


#: torchvision's segmentation reference (VOC/COCO): base_size and crop_size of its train preset.
SEG_BASE, SEG_CROP = 520, 480


def segmentation_reference_preset(base_size: int = SEG_BASE, crop_size: int = SEG_CROP) -> Any:
    """torchvision's segmentation train preset (``references/segmentation/presets.py``,
    use_v2=True, the PIL backend) with its padding as ``v2.RandomCrop(pad_if_needed=True)``
    with fill 0 for the image and 255 for the mask (the reference's own PadIfSmaller is user
    code, which runs on torch's path)."""
    import torch
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    return v2.Compose([
        v2.RandomResize(min_size=int(0.5 * base_size), max_size=int(2.0 * base_size)),
        v2.RandomHorizontalFlip(0.5),
        v2.RandomCrop(crop_size, pad_if_needed=True, fill={tv_tensors.Mask: 255, "others": 0}),
        v2.PILToTensor(),
        v2.ToDtype({torch.Tensor: torch.float32, tv_tensors.Mask: torch.int64, "others": None},
                   scale=True),
        v2.Normalize(mean=IMAGENET_MEAN, std=IMAGENET_STD), v2.ToPureTensor()])


def run_segmentation_reference_benchmark(cfg: Config,
                                         log: Callable[[str], None]) -> dict[str, Any]:
    """``segmentation-reference``: torchvision's segmentation train preset
    (:func:`segmentation_reference_preset`) on each image and its palette-PNG mask, torch's
    DataLoader (PIL + v2 in Python) against ringloader's (rl.Joint), default collate,
    ``cfg.num_workers`` workers each, alternating rounds (medians)."""
    return _run_masks_under_joint(cfg, log, segmentation_reference_preset(),
                                  "segmentation-reference")


def format_segmentation_reference_report(cfg: Config, machine: dict[str, Any],
                                         data: dict[str, Any], report: dict[str, Any]) -> str:
    return _joint_report(
        f"ringloader segmentation-reference benchmark: torchvision's segmentation train preset "
        f"(RandomResize({SEG_BASE // 2}, {SEG_BASE * 2}), flip, RandomCrop({SEG_CROP}) padding "
        f"the mask with 255, PILToTensor, ToDtype, Normalize) over {data['images']} images and "
        f"their palette-PNG masks, batch {cfg.batch_size}, {cfg.num_workers} workers each, "
        f"median of {cfg.rounds} rounds", machine, report)


def format_joint_segmentation_report(cfg: Config, machine: dict[str, Any], data: dict[str, Any],
                                     report: dict[str, Any]) -> str:
    return _joint_report(
        f"ringloader segmentation-joint benchmark: a segmentation Dataset over {data['images']} "
        f"images, each with its palette-PNG mask, v2 RandomResizedCrop({CROP}) + flip on both, "
        f"ToDtype + Normalize on the image, batch {cfg.batch_size}, {cfg.num_workers} workers "
        f"each, median of {cfg.rounds} rounds", machine, report)


def _joint_report(title: str, machine: dict[str, Any], report: dict[str, Any]) -> str:
    """A Joint benchmark's report under ``title``: both rates, the ratio, the build time."""
    res = report["results"]
    torch_s, rl_s = res["torch"]["median_samples_per_s"], res["ringloader"]["median_samples_per_s"]
    return "\n".join([
        title,
        f"  torch DataLoader + PIL + v2 : {torch_s:8.0f} samples/s",
        f"  ringloader + rl.Joint       : {rl_s:8.0f} samples/s ({rl_s / torch_s:.2f}x)",
        f"  __getitem__ for every index when the DataLoader is built: "
        f"{report['build_seconds']:.2f} s",
        f"  machine: {machine.get('cpu', '?')}",
    ])


def detection_hflip_preset() -> Any:
    """torchvision's detection train preset ``hflip`` (``references/detection/presets.py``,
    use_v2=True, the PIL backend): each image keeps its own size."""
    import torch
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    return v2.Compose([
        v2.RandomHorizontalFlip(0.5), v2.ToImage(), v2.ToDtype(torch.float, scale=True),
        v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
        v2.SanitizeBoundingBoxes(), v2.ToPureTensor()])


def detection_lsj_preset() -> Any:
    """torchvision's detection train preset ``lsj`` in v2 classes, the PIL backend: ScaleJitter
    to 1024 x 1024, the reference's own FixedSizeCrop written as v2's RandomCrop with
    pad_if_needed and the mean as fill (every sample the fixed 1024 x 1024 canvas), the flip."""
    import torch
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    return v2.Compose([
        v2.ScaleJitter((1024, 1024)),
        v2.RandomCrop((1024, 1024), pad_if_needed=True, fill=(123.0, 117.0, 104.0)),
        v2.RandomHorizontalFlip(0.5), v2.PILToTensor(), v2.ToDtype(torch.float, scale=True),
        v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
        v2.SanitizeBoundingBoxes(), v2.ToPureTensor()])


def detection_ssd_preset(backend: str = "pil") -> Any:
    """torchvision's detection train preset ``ssd`` (``references/detection/presets.py``,
    use_v2=True): RandomPhotometricDistort, RandomZoomOut filled with the mean (0 for masks),
    RandomIoUCrop, the flip, then the box steps; the PIL backend converts after the flip, the
    ``"tensor"`` backend first (PILToTensor: the distort runs torch's tensor kernels)."""
    from collections import defaultdict

    import torch
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    mean = (123.0, 117.0, 104.0)
    first, then = ([v2.PILToTensor()], []) if backend == "tensor" else ([], [v2.PILToTensor()])
    return v2.Compose(first + [
        v2.RandomPhotometricDistort(),
        v2.RandomZoomOut(fill=defaultdict(lambda: mean, {tv_tensors.Mask: 0})),
        v2.RandomIoUCrop(), v2.RandomHorizontalFlip(0.5)] + then + [
        v2.ToDtype(torch.float, scale=True),
        v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
        v2.SanitizeBoundingBoxes(), v2.ToPureTensor()])


def run_detection_benchmark(cfg: Config, log: Callable[[str], None],
                            kind: str = "detection") -> dict[str, Any]:
    """The same detection Dataset class under torch's DataLoader (PIL + v2 in Python) and
    ringloader's (rl.Joint: the image native, boxes moved by the recorded geometry), the
    detection collate_fn, ``cfg.num_workers`` workers each, alternating rounds (medians).
    ``detection-hflip``: torchvision's hflip preset (:func:`detection_hflip_preset`), each
    image at its own size (natively a tensor a sample, charged to max_memory)."""
    from PIL import Image
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    torch, _ = _import_torch()
    rl = _import_ringloader()
    rows = list(rl.ImageFolder(str(cfg.root)).samples)
    sizes = []
    for path, _ in rows:
        with Image.open(path) as im:
            sizes.append(im.size)
    presets = {"detection-hflip": detection_hflip_preset, "detection-lsj": detection_lsj_preset,
               "detection-ssd": detection_ssd_preset,
               "detection-ssd-tensor": lambda: detection_ssd_preset("tensor")}
    transform = presets[kind]() if kind in presets else v2.Compose([
        v2.RandomResizedCrop(CROP, antialias=True), v2.RandomHorizontalFlip(), v2.ToImage(),
        v2.SanitizeBoundingBoxes(),
        v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True),
        v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    eager = BoxesDataset(rows, sizes, transform, lazy=False)
    lazy = BoxesDataset(rows, sizes, transform, lazy=True)

    def collate(batch: list) -> tuple:
        return tuple(zip(*batch))

    return _eager_vs_lazy(cfg, eager, lazy, kind, "the Joint Dataset", log, collate_fn=collate)


def format_detection_report(cfg: Config, machine: dict[str, Any], data: dict[str, Any],
                            report: dict[str, Any]) -> str:
    steps = ("torchvision's hflip train preset (flip, ToImage, ToDtype, ConvertBoundingBoxFormat, "
             "SanitizeBoundingBoxes, ToPureTensor; each image its own size)"
             if report["kind"] == "detection-hflip" else
             "torchvision's lsj train preset (ScaleJitter 1024, RandomCrop 1024 padded with the "
             "mean, flip, PILToTensor, ToDtype, ConvertBoundingBoxFormat, SanitizeBoundingBoxes, "
             "ToPureTensor)" if report["kind"] == "detection-lsj" else
             "torchvision's ssd train preset (RandomPhotometricDistort, RandomZoomOut filled with "
             "the mean, RandomIoUCrop, flip, PILToTensor, ToDtype, ConvertBoundingBoxFormat, "
             "SanitizeBoundingBoxes, ToPureTensor)" if report["kind"] == "detection-ssd" else
             "torchvision's ssd train preset, tensor backend (PILToTensor first: the distort on "
             "the uint8 tensor with torch's kernels, then RandomZoomOut, RandomIoUCrop, flip, "
             "ToDtype and the box steps)" if report["kind"] == "detection-ssd-tensor" else
             f"v2 RandomResizedCrop({CROP}) + flip + SanitizeBoundingBoxes + ToDtype + Normalize")
    return _joint_report(
        f"ringloader {report['kind']} benchmark: a detection Dataset over {data['images']} "
        f"images, 3 boxes each, {steps}, batch {cfg.batch_size}, {cfg.num_workers} workers "
        f"each, median of {cfg.rounds} rounds", machine, report)
