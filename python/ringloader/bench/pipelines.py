"""The transform pipelines the comparisons build: ``train`` and ``eval`` from either transforms
module (torchvision's or ringloader's), ``train-uint8``, ``train-v2`` (the crop after v2's
``ToImage``), and the training recipes of
torchvision and timm (:data:`RECIPES`)."""

from __future__ import annotations

from typing import Any

from .harness import CROP, IMAGENET_MEAN, IMAGENET_STD, BenchError, _import_torch


RECIPES = ("tv-recipe", "timm-recipe")


def make_recipe(kind: str) -> Any:
    """The training recipes real scripts use, as torchvision/timm build them (ringloader gets
    the same object): ``tv-recipe`` is torchvision's reference ImageNet recipe
    (RandomResizedCrop(176) + flip + TrivialAugmentWide + PILToTensor + ConvertImageDtype +
    Normalize + RandomErasing(0.1)); ``timm-recipe`` is timm's ``create_transform(224,
    is_training=True, auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25, re_mode="pixel")``."""
    torch, torchvision = _import_torch()
    T = torchvision.transforms
    if kind == "tv-recipe":
        return T.Compose([  # torchvision's references/classification recipe (train-crop-size 176)
            T.RandomResizedCrop(176), T.RandomHorizontalFlip(), T.TrivialAugmentWide(),
            T.PILToTensor(), T.ConvertImageDtype(torch.float), T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
            T.RandomErasing(0.1)])
    try:
        from timm.data import create_transform
    except ImportError as e:
        raise BenchError("--transform timm-recipe needs timm (pip install timm)") from e
    _posterize_zero_bits_as_black()
    return create_transform(CROP, is_training=True, auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25,
                            re_mode="pixel")


def _posterize_zero_bits_as_black() -> None:
    """timm's PosterizeIncreasing asks for 0 bits at magnitude 10 (reached through mstd noise),
    which Pillow >= 11 refuses ("bits must be between or equal to 1 and 8") and older Pillow
    turned into a black image. Restore the old meaning so the torch side of the comparison does
    not crash a few batches in (ringloader's native posterize keeps 0 bits as black)."""
    from PIL import Image, ImageOps

    original = ImageOps.posterize
    if getattr(original, "_zero_bits_black", False):
        return

    def posterize(image, bits):
        if bits <= 0:
            return Image.new(image.mode, image.size)
        return original(image, bits)

    posterize._zero_bits_black = True
    ImageOps.posterize = posterize


def make_transform(T: Any, kind: str) -> Any:
    """The ``train`` or ``eval`` pipeline built from a torchvision-compatible
    transforms module (``torchvision.transforms`` or ``ringloader.transforms``), or
    ``train-uint8``, ``train-v2`` or one of :data:`RECIPES` (torchvision's/timm's own objects,
    whatever ``T`` is)."""
    if kind in RECIPES:
        return make_recipe(kind)
    if kind == "train":
        steps = [T.RandomResizedCrop(CROP), T.RandomHorizontalFlip()]
    elif kind == "train-uint8":
        # uint8 batches, normalised later on the GPU: the decode and crop without the float
        # conversion. torchvision's own objects, whatever T is (ringloader.transforms has no
        # PILToTensor; ringloader takes torchvision's as it is).
        _, torchvision = _import_torch()
        tv = torchvision.transforms
        return tv.Compose([tv.RandomResizedCrop(CROP), tv.RandomHorizontalFlip(), tv.PILToTensor()])
    elif kind == "train-v2":
        # torchvision's v2 recipe as its documentation writes it: the tensor conversion first,
        # so the crop's resize is torch's antialiased kernel on the uint8 tensor (ringloader
        # runs that kernel natively). torchvision's own objects, whatever T is.
        torch, _ = _import_torch()
        from torchvision.transforms import v2
        return v2.Compose([v2.ToImage(), v2.RandomResizedCrop(CROP, antialias=True), v2.RandomHorizontalFlip(),
                           v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    elif kind == "eval":
        steps = [T.Resize(256), T.CenterCrop(CROP)]
    else:
        raise ValueError(f"unknown transform {kind!r}")
    return T.Compose(steps + [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
