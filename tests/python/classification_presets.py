"""The preset objects of torchvision's classification training references
(references/classification/presets.py), rebuilt here with the same transform lists.

Each preset builds a ``Compose`` in ``__init__``, keeps it as ``self.transforms`` and only applies
it in ``__call__``. ``use_v2`` picks ``torchvision.transforms.v2`` (which converts with
``ToDtype(float32, scale=True)`` and ends with ``ToPureTensor()``) instead of v1 (which converts
with ``ConvertImageDtype(float)``). ``backend`` is where the image becomes a tensor: "pil" after
the PIL steps, "tensor" (``PILToTensor``) or "tv_tensor" (``ToImage``) before them.
"""

from __future__ import annotations

import torch
from torchvision.transforms.functional import InterpolationMode

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def _module(use_v2: bool):
    if use_v2:
        import torchvision.transforms.v2 as module
    else:
        import torchvision.transforms as module
    return module


def _head(T, backend: str) -> list:
    """The conversion a tensor backend puts first."""
    backend = backend.lower()
    if backend == "tv_tensor":
        return [T.ToImage()]
    if backend == "tensor":
        return [T.PILToTensor()]
    if backend != "pil":
        raise ValueError(f"backend can be 'tv_tensor', 'tensor' or 'pil', but got {backend}")
    return []


def _to_float(T, use_v2: bool, backend: str, mean, std) -> list:
    steps = [T.PILToTensor()] if backend.lower() == "pil" else []
    steps.append(T.ToDtype(torch.float, scale=True) if use_v2 else T.ConvertImageDtype(torch.float))
    steps.append(T.Normalize(mean=mean, std=std))
    return steps


class ClassificationPresetTrain:
    def __init__(self, *, crop_size, mean=MEAN, std=STD, interpolation=InterpolationMode.BILINEAR,
                 hflip_prob=0.5, auto_augment_policy=None, ra_magnitude=9, augmix_severity=3,
                 random_erase_prob=0.0, backend="pil", use_v2=False):
        T = _module(use_v2)
        steps = _head(T, backend)
        steps.append(T.RandomResizedCrop(crop_size, interpolation=interpolation, antialias=True))
        if hflip_prob > 0:
            steps.append(T.RandomHorizontalFlip(hflip_prob))
        if auto_augment_policy is not None:
            if auto_augment_policy == "ra":
                steps.append(T.RandAugment(interpolation=interpolation, magnitude=ra_magnitude))
            elif auto_augment_policy == "ta_wide":
                steps.append(T.TrivialAugmentWide(interpolation=interpolation))
            elif auto_augment_policy == "augmix":
                steps.append(T.AugMix(interpolation=interpolation, severity=augmix_severity))
            else:
                policy = T.AutoAugmentPolicy(auto_augment_policy)
                steps.append(T.AutoAugment(policy=policy, interpolation=interpolation))
        steps += _to_float(T, use_v2, backend, mean, std)
        if random_erase_prob > 0:
            steps.append(T.RandomErasing(p=random_erase_prob))
        if use_v2:
            steps.append(T.ToPureTensor())
        self.transforms = T.Compose(steps)

    def __call__(self, img):
        return self.transforms(img)


class ClassificationPresetEval:
    def __init__(self, *, crop_size, resize_size=256, mean=MEAN, std=STD,
                 interpolation=InterpolationMode.BILINEAR, backend="pil", use_v2=False):
        T = _module(use_v2)
        steps = _head(T, backend)
        steps += [T.Resize(resize_size, interpolation=interpolation, antialias=True), T.CenterCrop(crop_size)]
        steps += _to_float(T, use_v2, backend, mean, std)
        if use_v2:
            steps.append(T.ToPureTensor())
        self.transforms = T.Compose(steps)

    def __call__(self, img):
        return self.transforms(img)
