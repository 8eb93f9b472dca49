"""What of a v2 transform runs natively on a clip, step by step: the geometric steps as the
native clip chain's dicts (``_geometric``), the per-level steps by name (``_PER_LEVEL``);
``video_batches.native_chain`` puts them together."""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional, Sequence, Tuple


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


@functools.lru_cache(maxsize=256)
def _temporal_positions(frames: int, num_samples: int) -> Tuple[int, ...]:
    """The positions v2's ``UniformTemporalSubsample(num_samples)`` keeps of a clip of
    ``frames`` frames, as torchvision itself picks them (run on a video of the positions)."""
    import torch
    from torchvision import tv_tensors
    from torchvision.transforms.v2 import functional as F

    positions = tv_tensors.Video(torch.arange(frames).view(frames, 1, 1, 1))
    return tuple(F.uniform_temporal_subsample(positions, num_samples).reshape(-1).tolist())


def _subsample(rows: List[List[int]], counts: Sequence[int]) -> List[List[int]]:
    """Each clip's frame indices after the chain's ``UniformTemporalSubsample`` steps."""
    for n in counts:
        rows = [[r[i] for i in _temporal_positions(len(r), n)] for r in rows]
    return rows


def _joint_refusal(transform: Any) -> Optional[str]:
    """Why a Joint's ``transform`` does more natively than its clip chain says, or None: steps
    that v2 also applies to the Joint's other leaves (``ToPureTensor`` unwraps them all; a
    ``ToDtype`` with a dtype per type may convert its boxes)."""
    for t in _flatten(transform):
        if type(t).__name__ == "ToPureTensor":
            return "ToPureTensor (v2 turns every leaf of the Joint into a plain tensor)"
        if type(t).__name__ == "ToDtype" and isinstance(getattr(t, "dtype", None), dict):
            return "ToDtype with a dtype per type (v2 may convert the Joint's boxes too)"
    return None
