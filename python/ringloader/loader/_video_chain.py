"""What of a v2 transform runs natively on a clip, step by step: the geometric steps as the
native clip chain's dicts (``_geometric``), the per-level steps by name (``_PER_LEVEL``);
``video_batches.native_chain`` puts them together."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple


def _flatten(transform: Any) -> List[Any]:
    if transform is None:
        return []
    inner = getattr(transform, "transforms", None)
    if type(transform).__name__ == "Compose" and isinstance(inner, (list, tuple)):
        return [t for part in inner for t in _flatten(part)]
    return [transform]


def _size(size: Any) -> Tuple[int, int]:
    if isinstance(size, int):
        return size, size
    size = list(size)
    return (int(size[0]), int(size[0])) if len(size) == 1 else (int(size[0]), int(size[1]))


def _bilinear_aa(t: Any) -> Optional[str]:
    from torchvision.transforms import InterpolationMode

    mode = getattr(t, "interpolation", InterpolationMode.BILINEAR)
    if InterpolationMode(mode) != InterpolationMode.BILINEAR:
        return f"{type(t).__name__}: only bilinear interpolation runs natively on video"
    if getattr(t, "antialias", True) is not True:
        return f"{type(t).__name__}: only antialias=True runs natively on video"
    return None


def _geometric(t: Any) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    name = type(t).__name__
    if not type(t).__module__.startswith("torchvision.transforms.v2"):
        return None, f"{name} is not a torchvision v2 transform"
    if name == "RandomResizedCrop":
        h, w = _size(t.size)
        return {"kind": "random_resized_crop", "height": h, "width": w, "scale": tuple(t.scale),
                "ratio": tuple(t.ratio)}, _bilinear_aa(t)
    if name == "Resize":
        if t.size is None:
            return None, "Resize(size=None) does not run natively on video"
        size = [t.size] if isinstance(t.size, int) else list(t.size)
        step = {"kind": "resize", "height": int(size[0]), "width": int(size[1]) if len(size) == 2 else 0,
                "max_size": int(t.max_size or 0)}
        return step, _bilinear_aa(t)
    if name == "CenterCrop":
        h, w = _size(t.size)
        return {"kind": "center_crop", "height": h, "width": w}, None
    if name == "RandomCrop":
        if t.padding is not None or t.pad_if_needed:
            return None, "RandomCrop with padding does not run natively on video"
        h, w = _size(t.size)
        return {"kind": "random_crop", "height": h, "width": w}, None
    if name == "RandomHorizontalFlip":
        return {"kind": "horizontal_flip", "p": float(t.p)}, None
    return None, f"{name} has no native video equivalent"


_PER_LEVEL = {"ToDtype", "Normalize", "ConvertImageDtype", "ToPureTensor"}
