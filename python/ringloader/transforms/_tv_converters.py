"""Converters of torchvision's (v1, v2) and timm's transform classes to native steps.

Each function is registered with ``_steps._converts`` for the classes it converts; importing
this module registers them all (the package's ``__init__`` does). A converter takes (the
transform, its "module.Class" name for messages) and returns native steps, or raises TypeError
(no native equivalent) / ValueError (a setting the library itself refuses).
"""

from __future__ import annotations

import functools

from typing import Any, Dict, List

from ._steps import (_TIMM, Step, _Refused, _center, _converts, _fill, _interpolation, _is_v2, _pair,
                     _padding, _range, _step_name, _transform_filter, to_steps)
from . import (CenterCrop, Compose, Normalize, RandomHorizontalFlip, RandomResizedCrop,
               Resize, ToTensor)


_AUTO_AUGMENT_POLICIES = {"imagenet": 0, "cifar10": 1, "svhn": 2}

# timm/data/auto_augment.py op names ringloader runs natively (NAME_TO_OP keys).
_TIMM_OPS = {
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "PosterizeIncreasing",
    "PosterizeOriginal", "Solarize", "SolarizeIncreasing", "SolarizeAdd", "Color",
    "ColorIncreasing", "Contrast", "ContrastIncreasing", "Brightness", "BrightnessIncreasing",
    "Sharpness", "SharpnessIncreasing", "ShearX", "ShearY", "TranslateX", "TranslateY",
    "TranslateXRel", "TranslateYRel",
}

# The timm ops that resample (Image.transform / Image.rotate with the op's resample).
_TIMM_GEOMETRIC = {"Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY", "TranslateXRel",
                   "TranslateYRel"}


def _timm_rand_augment(t: Any, where: str) -> List[Dict[str, Any]]:
    """timm's RandAugment (rand-m*-n*-mstd*-inc*...): one native step when every op is native and
    the ops share their settings (as rand_augment_transform makes them)."""
    if t.choice_weights is not None:
        raise TypeError(f"{where}: weighted op choice (the 't' config section) has no native equivalent")
    ops = list(t.ops)
    if not ops:
        return []
    first = ops[0]
    names = []
    for op in ops:
        if op.name not in _TIMM_OPS:
            raise TypeError(f"{where}: timm op {op.name} has no native equivalent")
        same = (op.prob, op.magnitude, op.magnitude_std, op.magnitude_max, op.kwargs.get("fillcolor"),
                op.kwargs.get("resample"), op.hparams.get("translate_pct", 0.45),
                op.hparams.get("translate_const"))
        if same != (first.prob, first.magnitude, first.magnitude_std, first.magnitude_max,
                    first.kwargs.get("fillcolor"), first.kwargs.get("resample"),
                    first.hparams.get("translate_pct", 0.45), first.hparams.get("translate_const")):
            raise TypeError(f"{where}: ops with different settings have no native equivalent")
        names.append(op.name)
    resample = first.kwargs.get("resample")
    random_interp = isinstance(resample, (list, tuple))
    if random_interp:
        modes = sorted(_interpolation(r, where) for r in resample)
        if modes != ["bicubic", "bilinear"]:
            raise TypeError(f"{where}: a random choice among {resample!r} has no native equivalent")
        interp = "bilinear"
    else:
        interp = _interpolation(resample, where)
    if interp not in ("nearest", "bilinear", "bicubic"):
        if _TIMM_GEOMETRIC.intersection(names):
            raise ValueError(f"{where}: resample {resample!r} is not a filter Pillow's "
                             "Image.transform/rotate accept (timm's geometric ops raise ValueError "
                             "with it); use nearest, bilinear, bicubic or 'random'")
        interp = "bilinear"  # no op of this policy transforms geometry: the filter is never used
    mstd = float(first.magnitude_std or 0.0)
    return [Step("timm_rand_augment", timm_ops=names, num_ops=int(t.num_layers),
                 p=float(first.prob), magnitude=float(first.magnitude), magnitude_std=mstd,
                 magnitude_max=float(first.magnitude_max or 10.0),
                 translate_pct=float(first.hparams.get("translate_pct", 0.45)),
                 translate_const=float(first.hparams.get("translate_const", 250)),
                 fill=_fill(first.kwargs.get("fillcolor", (128, 128, 128)), where),
                 interpolation=interp, random_interpolation=random_interp)]


def _timm_random_erasing(t: Any, where: str) -> List[Dict[str, Any]]:
    import math

    if getattr(t, "num_splits", 0):
        raise TypeError(f"{where}: num_splits (AugMix splits) has no native equivalent")
    mode = {"const": 0, "pixel": 1, "rand": 2}.get(t.mode)
    if mode is None:
        raise TypeError(f"{where}: mode {t.mode!r} has no native equivalent")
    lo, hi = t.log_aspect_ratio
    if int(t.min_count) != 1:
        raise TypeError(f"{where}: min_count other than 1 has no native equivalent")
    return [Step("random_erasing", p=float(t.probability), timm_erasing=True,
                 ranges=[(float(t.min_area), float(t.max_area)), (math.exp(lo), math.exp(hi))],
                 erase_mode=mode, erase_count=int(t.max_count), fill=[0.0, 0.0, 0.0])]


def _random_erasing(t: Any, where: str) -> List[Dict[str, Any]]:
    value = t.value
    step: Dict[str, Any] = Step("random_erasing", p=float(t.p),
                                ranges=[_range(t.scale), _range(t.ratio)])
    if value is None or (isinstance(value, str) and value == "random"):
        step["erase_mode"] = 1
    else:
        step["fill"] = _fill(value, where)
    return [step]


def _aug_op(name: str, magnitude: float, p: float) -> List[Dict[str, Any]]:
    return [Step("aug_op", op=name, magnitude=float(magnitude), p=float(p))]


@_converts("Compose")
def _compose(t: Any, where: str) -> List[Dict[str, Any]]:
    return Compose(t.transforms).steps()


@_converts("Resize")
def _resize(t: Any, where: str) -> List[Dict[str, Any]]:
    interp = _interpolation(getattr(t, "interpolation", "bilinear"), where)
    if t.size is None:
        raise TypeError(f"{where}: size=None (max_size only) has no native equivalent")
    step = Resize(t.size, max_size=getattr(t, "max_size", None)).steps()[0]
    step["interpolation"] = interp
    return [step]


@_converts("RandomResize")
def _random_resize(t: Any, where: str) -> List[Dict[str, Any]]:
    """v2's RandomResize: the shorter side drawn per sample from [min_size, max_size) (the
    sample's keyed draws), then resized as ``Resize(drawn)``."""
    interp = _interpolation(getattr(t, "interpolation", "bilinear"), where)
    if int(t.max_size) <= int(t.min_size):
        raise TypeError(f"{where}: max_size must be greater than min_size (torch.randint draws "
                        "from [min_size, max_size))")
    return [Step("resize", size_h=int(t.min_size), size_w=0, size_max=int(t.max_size),
                 interpolation=interp)]


@_converts("RandomShortestSize")
def _random_shortest_size(t: Any, where: str) -> List[Dict[str, Any]]:
    """v2's RandomShortestSize: the shorter side drawn per sample from ``min_size`` (the
    sample's keyed draws), the longer side capped at ``max_size``."""
    interp = _interpolation(getattr(t, "interpolation", "bilinear"), where)
    choices = [int(c) for c in t.min_size]
    if not choices or min(choices) <= 0:
        raise TypeError(f"{where}: min_size must hold sizes > 0")
    return [Step("resize", size_h=min(choices), size_w=0, size_choices=choices,
                 max_size=int(t.max_size or 0), interpolation=interp)]


@_converts("RandomResizedCrop")
@_converts("RandomResizedCropAndInterpolation", modules=_TIMM)
def _random_resized_crop(t: Any, where: str) -> List[Dict[str, Any]]:
    interp = getattr(t, "interpolation", "bilinear")
    if isinstance(interp, (list, tuple)):
        raise TypeError(f"{where}: interpolation='random' has no native equivalent")
    step = RandomResizedCrop(t.size, scale=tuple(t.scale), ratio=tuple(t.ratio)).steps()[0]
    step["interpolation"] = _interpolation(interp, where)
    return [step]


@_converts("CenterCrop")
def _center_crop(t: Any, where: str) -> List[Dict[str, Any]]:
    return CenterCrop(t.size).steps()


@_converts("RandomHorizontalFlip")
def _horizontal_flip(t: Any, where: str) -> List[Dict[str, Any]]:
    return RandomHorizontalFlip(t.p).steps()


@_converts("RandomVerticalFlip")
def _vertical_flip(t: Any, where: str) -> List[Dict[str, Any]]:
    return [Step("random_vertical_flip", p=float(t.p))]


@_converts("RandomCrop", "Pad")
def _crop_or_pad(t: Any, where: str) -> List[Dict[str, Any]]:
    crop = type(t).__name__ == "RandomCrop"
    mode = getattr(t, "padding_mode", "constant")
    if mode not in ("constant", "edge", "reflect", "symmetric"):
        raise TypeError(f"{where}: padding_mode {mode!r} has no native equivalent")
    pad = _padding(t.padding, where)
    if _is_v2(t) and crop and t.padding:
        pad = [pad[0], pad[2], pad[1], pad[3]]  # v2's RandomCrop keeps [left, right, top, bottom]
    step = Step("random_crop" if crop else "pad", pad=pad, fill=_fill(t.fill, where), pad_mode=mode)
    if crop:
        size = _pair(t.size, where)
        step.update(size_h=size[0], size_w=size[1], pad_if_needed=bool(t.pad_if_needed))
    return [step]


@_converts("ColorJitter")
def _color_jitter(t: Any, where: str) -> List[Dict[str, Any]]:
    ranges = [_range(t.brightness), _range(t.contrast), _range(t.saturation), _range(t.hue)]
    if all(r is None for r in ranges):
        return []
    return [Step("color_jitter", ranges=ranges)]


@_converts("Grayscale", "RandomGrayscale")
def _grayscale(t: Any, where: str) -> List[Dict[str, Any]]:
    always = type(t).__name__ == "Grayscale"
    if always and int(getattr(t, "num_output_channels", 1)) != 3:
        raise TypeError(f"{where}: num_output_channels=1 (a 1-channel image) has no native "
                        "equivalent; use num_output_channels=3")
    return [Step("grayscale", p=1.0 if always else float(t.p))]


@_converts("RandomRotation")
def _rotation(t: Any, where: str) -> List[Dict[str, Any]]:
    if t.expand:
        raise TypeError(f"{where}: expand=True (a size that depends on the angle) has no native equivalent")
    return [Step("random_rotation", ranges=[_range(t.degrees)],
                 interpolation=_transform_filter(t.interpolation, where),
                 fill=_fill(t.fill, where), center=_center(t.center))]


@_converts("RandomAffine")
def _affine(t: Any, where: str) -> List[Dict[str, Any]]:
    shear = None if t.shear is None else [float(v) for v in t.shear]
    ranges = [_range(t.degrees), _range(t.translate), _range(t.scale),
              None if shear is None else (shear[0], shear[1]),
              None if shear is None or len(shear) < 4 else (shear[2], shear[3])]
    return [Step("random_affine", ranges=ranges,
                 interpolation=_transform_filter(t.interpolation, where),
                 fill=_fill(t.fill, where), center=_center(t.center))]


@_converts("GaussianBlur")
def _gaussian_blur(t: Any, where: str) -> List[Dict[str, Any]]:
    kx, ky = (int(v) for v in t.kernel_size)
    return [Step("gaussian_blur", size_w=kx, size_h=ky, ranges=[_range(t.sigma)])]


@_converts("RandomApply")
def _random_apply(t: Any, where: str) -> List[Dict[str, Any]]:
    """torchvision's RandomApply (v1 and v2): a ``random_apply`` step guarding the native steps
    of its transforms. Natively it draws one uniform per sample and, when the draw is below
    ``p``, runs the guarded steps, which then make their own draws (torchvision calls them only
    then). Only image steps that keep the size can be guarded (the stage rule says so)."""
    inner: List[Dict[str, Any]] = []
    for sub in t.transforms:
        try:
            inner.extend(to_steps(sub))
        except _Refused:
            raise
        except TypeError as error:
            raise TypeError(f"{where} over {_step_name(sub)}: {error}") from None
    if not inner:
        return []  # nothing to apply (e.g. a ColorJitter with no factor)
    return [Step("random_apply", p=float(t.p), num_steps=len(inner))] + inner


@_converts("RandomPosterize")
def _posterize(t: Any, where: str) -> List[Dict[str, Any]]:
    return _aug_op("Posterize", t.bits, t.p)


@_converts("RandomSolarize")
def _solarize(t: Any, where: str) -> List[Dict[str, Any]]:
    return _aug_op("Solarize", t.threshold, t.p)


@_converts("RandomAdjustSharpness")
def _sharpness(t: Any, where: str) -> List[Dict[str, Any]]:
    return _aug_op("Sharpness", float(t.sharpness_factor) - 1.0, t.p)


@_converts("RandomAutocontrast")
def _autocontrast(t: Any, where: str) -> List[Dict[str, Any]]:
    return _aug_op("AutoContrast", 0, t.p)


@_converts("RandomEqualize")
def _equalize(t: Any, where: str) -> List[Dict[str, Any]]:
    return _aug_op("Equalize", 0, t.p)


@_converts("RandomInvert")
def _invert(t: Any, where: str) -> List[Dict[str, Any]]:
    return _aug_op("Invert", 0, t.p)


@_converts("RandAugment", "TrivialAugmentWide", "AutoAugment")
def _auto_augment(t: Any, where: str) -> List[Dict[str, Any]]:
    name = type(t).__name__
    kind = {"AutoAugment": "auto_augment", "RandAugment": "rand_augment"}.get(name, "trivial_augment_wide")
    step = Step(kind, interpolation=_transform_filter(t.interpolation, where),
                fill=_fill(t.fill, where), v2_magnitudes=_is_v2(t))
    if name == "AutoAugment":
        policy = str(getattr(t.policy, "value", t.policy)).lower()
        step.update(policy=_AUTO_AUGMENT_POLICIES[policy])
    else:
        step.update(num_bins=int(t.num_magnitude_bins))
        if name == "RandAugment":
            step.update(num_ops=int(t.num_ops), magnitude=float(t.magnitude))
    return [step]


@functools.lru_cache(maxsize=None)
def torch_grid_fuses() -> bool:
    """Whether torch's ``bmm`` fuses each multiply and add of the affine grid F.affine builds on a
    tensor (``_gen_affine_grid``: a half-pixel grid times the float32 inverse matrix), as MKL's
    kernels do on Intel CPUs, or rounds each, as they do on AMD's: the native AugMix follows
    whichever this process's torch does (asked once, on a grid where the two differ)."""
    import numpy as np
    import torch

    w, h = 53, 39
    xs = torch.linspace(-w * 0.5 + 0.5, w * 0.5 - 0.5, steps=w)
    ys = torch.linspace(-h * 0.5 + 0.5, h * 0.5 - 0.5, steps=h)
    grid = torch.stack([xs.expand(h, w), ys[:, None].expand(h, w), torch.ones(h, w)], -1)
    theta = torch.tensor([[[1.0, 0.0, 0.0], [0.03347, 1.0, 0.0]]]).transpose(1, 2)
    theta = theta / torch.tensor([0.5 * w, 0.5 * h])
    got = grid.view(1, h * w, 3).bmm(theta)[0, :, 1].numpy()
    g, t = grid.view(h * w, 3).numpy(), theta[0, :, 1].numpy()
    rounded = (g[:, 0] * t[0] + g[:, 1] * t[1]) + t[2]  # float32: each operation rounded
    return not np.array_equal(got, rounded)


@_converts("AugMix")
def _augmix(t: Any, where: str) -> List[Dict[str, Any]]:
    """torchvision's AugMix (v1 and v2). It turns a PIL image into a uint8 tensor first, so its
    ops run torch's tensor kernels (grid_sample for the affine ops), which take nearest and
    bilinear only; the native step follows those kernels (augment.cc)."""
    if t.fill is not None:
        raise TypeError(f"{where}: a fill colour has no native equivalent (only fill=None)")
    raw = str(getattr(t.interpolation, "value", t.interpolation)).lower()
    interp = _interpolation(t.interpolation, where) if raw != "nearest-exact" else "nearest-exact"
    if interp not in ("nearest", "bilinear"):
        raise TypeError(f"{where}: interpolation {t.interpolation!r} has no native equivalent "
                        "(AugMix's tensor kernels take nearest or bilinear)")
    return [Step("augmix", severity=int(t.severity), mixture_width=int(t.mixture_width),
                 chain_depth=int(t.chain_depth), alpha=float(t.alpha), all_ops=bool(t.all_ops),
                 interpolation=interp, v2_magnitudes=_is_v2(t), fused_grid=torch_grid_fuses())]


_converts("RandAugment", modules=_TIMM)(_timm_rand_augment)
_converts("RandomErasing", modules=_TIMM)(_timm_random_erasing)
_converts("RandomErasing")(_random_erasing)


@_converts("ToTensor")
@_converts("ToTensor", "MaybeToTensor", modules=_TIMM)
def _to_tensor(t: Any, where: str) -> List[Dict[str, Any]]:
    return ToTensor().steps()


@_converts("Normalize")
def _normalize(t: Any, where: str) -> List[Dict[str, Any]]:
    return Normalize([float(v) for v in t.mean], [float(v) for v in t.std]).steps()


@_converts("PILToTensor", "ToImage", "ToImageTensor")
@_converts("MaybePILToTensor", modules=_TIMM)
def _to_uint8_tensor(t: Any, where: str) -> List[Dict[str, Any]]:
    return []  # uint8 CHW tensor: the native default without ToTensor


@_converts("ToPureTensor", modules=("torchvision.transforms.v2",))
def _to_pure_tensor(t: Any, where: str) -> List[Dict[str, Any]]:
    return []  # only unwraps tv_tensors subclasses: values and plain tensors pass unchanged


@_converts("ConvertImageDtype", "ToDtype")
def _to_dtype(t: Any, where: str) -> List[Dict[str, Any]]:
    import torch

    dtype = getattr(t, "dtype", None)
    if isinstance(dtype, dict):
        dtype = next(iter(dtype.values()), None)
    scale = getattr(t, "scale", True) if type(t).__name__ == "ToDtype" else True
    if dtype is torch.float32 and scale:
        step = ToTensor().steps()[0]
        if _is_v2(t):
            step["by_reciprocal"] = True  # v2 multiplies by 1/255 where v1 divides by 255
        return [step]
    raise TypeError(f"{where}: only a conversion to torch.float32 with scaling is native")


@_converts("ImageClassification", modules=("torchvision.transforms._presets",))
def _image_classification(t: Any, where: str) -> List[Dict[str, Any]]:
    """A pretrained model's preset (``weights.transforms()``): its forward is F.resize of the
    shorter side (Pillow's resize on a PIL image, where ``antialias`` does not apply), F.center_crop,
    PILToTensor, v1's ConvertImageDtype(float) (level / 255) and Normalize."""
    resize = Resize(list(t.resize_size)).steps()[0]
    resize["interpolation"] = _interpolation(t.interpolation, where)
    return ([resize] + CenterCrop(list(t.crop_size)).steps() + ToTensor().steps()
            + Normalize(list(t.mean), list(t.std)).steps())
