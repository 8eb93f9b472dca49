"""v2's box kernels that only translate, clamp and mirror (pad, crop, flips), in numpy.

On a native Joint row these run on a few boxes, where each torch operation (and tv_tensors'
dispatch around it) costs more in the iterating thread than the arithmetic. For XYXY boxes of
a float dtype the kernels are elementwise float operations, done here in the same dtype and
order as v2 does them: a pad adds (left, top) to both corners, a crop subtracts them, both
then clamp to the new canvas unless the boxes' ``clamping_mode`` is None (soft and hard clamp
alike for unrotated boxes; ``np.clip`` keeps a -0.0 as torch's ``clamp_`` does), a flip
mirrors and swaps the edges as ``-(x - size)``. Other formats and dtypes run v2's kernels.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

__all__ = ["boxes_array", "clamp", "flip", "replay"]


def boxes_array(boxes: Any) -> Optional[Any]:
    """The numpy array of ``boxes`` (``tv_tensors.BoundingBoxes``) where these kernels follow
    v2 for them (XYXY, float32 or float64, [N, 4] on the CPU, not requiring grad, a known
    clamping mode), else None. It shares the boxes' memory: kernels here never write to it."""
    import torch
    from torchvision import tv_tensors

    plain = boxes.as_subclass(torch.Tensor)
    if (boxes.format is not tv_tensors.BoundingBoxFormat.XYXY or plain.dim() != 2
            or plain.shape[-1] != 4 or plain.dtype not in (torch.float32, torch.float64)
            or plain.device.type != "cpu" or plain.requires_grad
            or boxes.clamping_mode not in (None, "soft", "hard")):
        return None
    return plain.numpy()


def clamp(b: Any, height: int, width: int, mode: Any) -> Any:
    """``b`` clamped to a canvas of ``height`` x ``width`` in place, as v2's
    ``clamp_bounding_boxes`` does (nothing for ``clamping_mode`` None)."""
    if mode is not None:
        dt = b.dtype.type
        np.clip(b[:, 0::2], dt(0), dt(width), out=b[:, 0::2])
        np.clip(b[:, 1::2], dt(0), dt(height), out=b[:, 1::2])
    return b


def shift(b: Any, left: int, top: int, sign: int) -> Any:
    """A new array: ``b`` plus (sign +1, a pad) or minus (-1, a crop) ``(left, top)`` on both
    corners, in its dtype (v2 adds or subtracts a tensor of those offsets)."""
    offsets = np.array([left, top, left, top], dtype=b.dtype)
    return b + offsets if sign > 0 else b - offsets


def flip(b: Any, axis: int, size: int) -> Any:
    """``b`` mirrored along x (``axis`` 0) or y (1) on a canvas ``size`` long, in place."""
    b[:, [axis + 2, axis]] = -(b[:, [axis, axis + 2]] - b.dtype.type(size))
    return b


def replay(boxes: Any, ops: List[Tuple[str, Dict[str, Any]]]) -> Optional[Any]:
    """``boxes`` moved by v2's kernels ``ops`` ((name in ``v2.functional``, its arguments), as
    ``_integer_boxes.draws`` lists them; "zoom_out" a pad), or None where one of them or the
    boxes are not followed here (v2's kernels then run)."""
    import torch
    from torchvision import tv_tensors
    from torchvision.transforms.v2.functional._geometry import _parse_pad_padding

    if any(kernel not in _KERNELS for kernel, _ in ops) or any(
            kwargs.get("padding_mode", "constant") != "constant" for _, kwargs in ops):
        return None
    b = boxes_array(boxes)
    if b is None:
        return None
    if not ops:
        return boxes
    height, width = boxes.canvas_size
    mode = boxes.clamping_mode
    b = b.copy()
    for kernel, kwargs in ops:
        if kernel in ("pad", "zoom_out"):
            left, right, top, bottom = _parse_pad_padding(kwargs["padding"])
            height, width = height + top + bottom, width + left + right
            b = clamp(shift(b, left, top, 1), height, width, mode)
        elif kernel == "crop":
            height, width = kwargs["height"], kwargs["width"]
            b = clamp(shift(b, kwargs["left"], kwargs["top"], -1), height, width, mode)
        else:
            b = flip(b, int(kernel == "vertical_flip"), height if kernel == "vertical_flip"
                     else width)
    return tv_tensors.wrap(torch.from_numpy(b), like=boxes, canvas_size=(height, width))


_KERNELS = ("pad", "zoom_out", "crop", "horizontal_flip", "vertical_flip")
