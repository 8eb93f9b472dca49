"""v2's ``SanitizeBoundingBoxes`` on a native Joint row, its mask computed in numpy.

v2's step finds the boxes to keep with about fifteen torch operations on the row's few boxes
(``F._misc._get_sanitize_bounding_boxes_mask``), each costing more in the iterating thread than
the arithmetic it does. :func:`sanitize` runs the step as its ``forward`` does (its
``labels_getter``, its checks and their messages, its ``transform`` on every leaf of the
flattened sample, the sample rebuilt), with that mask computed in numpy by torch's rules: the
boxes converted to XYXY by v2's own function, widths, heights and areas in the boxes' dtype
(an integer area wraps as torch's does), each comparison with ``min_size``, ``min_area`` or the
canvas in the dtype torch compares in (a float scalar against integer boxes: torch's default
float dtype; against float boxes, or an integer scalar against integer boxes: the boxes'
dtype), NaN failing every comparison. Only v2's own class, unrotated boxes of dtype float32,
float64, int64 or int32 on the CPU, scalars torch would take as they are and a module without
hooks take this path (:func:`mask`); anything else runs v2's call itself.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

__all__ = ["mask", "sanitize"]

_FLOATS = {"float32": np.float32, "float64": np.float64}
_INTS = {"int64": np.int64, "int32": np.int32}


def _scalar(value: Any, box: Any, default: Any) -> Optional[Any]:
    """``value`` (a Python int or float) as the numpy scalar torch compares boxes of numpy dtype
    ``box`` against, in that dtype (the type of the scalar gives it); None where torch's
    conversion is not followed here (other types, values the dtype does not hold)."""
    kind = type(value)
    if kind is float:
        cmp = box if box.kind == "f" else default
        if cmp is None or abs(value) > np.finfo(cmp).max:  # inf or an overflow: v2's own
            return None
        return cmp.type(value)
    if kind is int:
        if box.kind == "f":
            return box.type(value) if abs(value) <= 2 ** 53 else None
        info = np.iinfo(box)
        return box.type(value) if info.min <= value <= info.max else None
    return None


# (box dtype, min_size, min_area, torch's default dtype) -> the scalars as torch compares them
_SCALARS: Dict[Tuple[Any, ...], Optional[Tuple[Any, Any]]] = {}
_SCALARS_KEPT = 256


def _scalars(name: str, min_size: Any, min_area: Any) -> Optional[Tuple[Any, Any]]:
    import torch

    default = torch.get_default_dtype()
    key = (name, type(min_size), min_size, type(min_area), min_area, default)
    try:
        return _SCALARS[key]
    except KeyError:
        pass
    except TypeError:  # not hashable: v2's own
        return None
    dt = np.dtype(_FLOATS.get(name) or _INTS[name])
    cmp = {torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64)}.get(default)
    size, area = _scalar(min_size, dt, cmp), _scalar(min_area, dt, cmp)
    if len(_SCALARS) >= _SCALARS_KEPT:
        _SCALARS.clear()
    found = _SCALARS[key] = None if size is None or area is None else (size, area)
    return found


def mask(boxes: Any, min_size: Any, min_area: Any) -> Optional[Any]:
    """v2's ``_get_sanitize_bounding_boxes_mask(boxes, ...)`` (a bool tensor [N]) for the
    ``tv_tensors.BoundingBoxes`` ``boxes``, or None where this path does not follow torch's
    arithmetic (the module docstring says where)."""
    import torch

    name = str(boxes.dtype)[6:]  # "torch.float32"
    if (name not in _FLOATS and name not in _INTS) or boxes.device.type != "cpu" \
            or boxes.dim() != 2 or boxes.shape[-1] != 4:
        return None
    found = _scalars(name, min_size, min_area)
    height, width = boxes.canvas_size
    if found is None or type(width) is not int or type(height) is not int:
        return None
    size, area = found
    plain = boxes.as_subclass(torch.Tensor).detach()
    fmt = boxes.format
    if fmt.name != "XYXY":  # v2's own conversion, as its mask converts them
        from torchvision import tv_tensors
        from torchvision.transforms.v2.functional._meta import _convert_bounding_box_format

        if tv_tensors.is_rotated_bounding_format(fmt):
            return None
        plain = _convert_bounding_box_format(
            plain, new_format=tv_tensors.BoundingBoxFormat.XYXY, old_format=fmt)
    b = plain.numpy()
    dt = b.dtype
    if dt.kind == "i":  # the canvas compared in the boxes' integer dtype: it must hold it
        info = np.iinfo(dt)
        if not (info.min <= width <= info.max and info.min <= height <= info.max):
            return None
    limit = np.array([width, height, width, height], dtype=dt)
    with np.errstate(all="ignore"):
        sides = b[:, 2:] - b[:, :2]  # widths and heights in the boxes' dtype
        areas = sides[:, 0] * sides[:, 1]  # an integer area wraps, as torch's does
        if sides.dtype != size.dtype:  # integer boxes against a float: torch's default float
            sides = sides.astype(size.dtype)
        if areas.dtype != area.dtype:
            areas = areas.astype(area.dtype)
        valid = (sides >= size).all(axis=1)
        valid &= areas >= area
        valid &= ((b >= 0) & (b <= limit)).all(axis=1)
    return torch.from_numpy(valid)


def _plain_module(step: Any) -> bool:
    """Whether calling ``step`` runs its ``forward`` and nothing else: v2's own class, no hooks
    of its own or global ones (``nn.Module.__call__`` would run them), not compiled, no forward
    or transform set on the instance."""
    from torch.nn.modules import module
    from torchvision.transforms import v2

    if type(step) is not v2.SanitizeBoundingBoxes:
        return False
    own = vars(step)
    if "forward" in own or "transform" in own or "_labels_getter" not in own \
            or getattr(step, "_compiled_call_impl", None) is not None:
        return False
    hooks = (step._forward_hooks, step._forward_pre_hooks, module._global_forward_hooks,
             module._global_forward_pre_hooks, getattr(step, "_backward_hooks", None),
             getattr(step, "_backward_pre_hooks", None), module._global_backward_hooks,
             module._global_backward_pre_hooks)
    return not any(hooks)


def sanitize(step: Any, structure: Any) -> Any:
    """``step(structure)`` for v2's ``SanitizeBoundingBoxes`` ``step``: its ``forward``, the mask
    from :func:`mask` where it follows torch (v2's own call otherwise)."""
    import torch

    with torch._C.DisableTorchFunctionSubclass():  # the boxes' ops without per-op dispatch
        if not _plain_module(step):
            return step(structure)
        return _forward(step, structure)


def _forward(step: Any, inputs: Any) -> Any:
    """v2's ``SanitizeBoundingBoxes.forward(inputs)``, step for step, the mask from :func:`mask`."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten
    from torchvision.transforms.v2 import functional as F
    from torchvision.transforms.v2._utils import get_bounding_boxes

    labels = step._labels_getter(inputs)
    if labels is not None:
        msg = "The labels in the input to forward() must be a tensor or None, got {type} instead."
        if isinstance(labels, torch.Tensor):
            labels = (labels,)
        elif isinstance(labels, (tuple, list)):
            for entry in labels:
                if not isinstance(entry, torch.Tensor):
                    raise ValueError(msg.format(type=type(entry)))
        else:
            raise ValueError(msg.format(type=type(labels)))

    flat_inputs, spec = tree_flatten(inputs)
    boxes = get_bounding_boxes(flat_inputs)

    if labels is not None:
        for label in labels:
            if boxes.shape[0] != label.shape[0]:
                raise ValueError(
                    f"Number of boxes (shape={boxes.shape}) and must match the number of labels."
                    f"Found labels with shape={label.shape}).")

    valid = mask(boxes, step.min_size, step.min_area)
    if valid is None:
        valid = F._misc._get_sanitize_bounding_boxes_mask(
            boxes, format=boxes.format, canvas_size=boxes.canvas_size,
            min_size=step.min_size, min_area=step.min_area)
    params = dict(valid=valid, labels=labels)
    return tree_unflatten([step.transform(inpt, params) for inpt in flat_inputs], spec)
