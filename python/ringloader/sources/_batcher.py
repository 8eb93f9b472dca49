"""The user's batch built from a native one (:class:`Batcher`): each sample's structure
(``_structures``) found again from its row's label (its flat index), each image reference given
its view of the batch tensor, and the whole collated by torch's own ``collate``; an error
collating it names the sample unlike the others and what to change.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from .. import _C
from ..transforms import _detection
from . import _joint_tail
from ._joint import JointLeaf
from ._structures import _fill, _Leaf, _resolve_joints, _Structures, collate_hint, odd_one
from .datasets import NativeDataset
from .references import rebuild


class Batcher:
    """Builds the user's batch from a native one: ordinary leaves collated by torch's own
    ``collate``, the image position given the batch tensor (or, with a ``collate_fn``, each
    sample rebuilt with its row)."""

    def __init__(self, folders: Sequence[NativeDataset], channels_last: bool = False,
                 nhwc: bool = False):
        import torch
        from torch.utils.data._utils.collate import collate, default_collate_fn_map

        self._torch = torch
        self._channels_last = channels_last
        self._nhwc = nhwc  # the native layout (channels_last is an NHWC layout too)
        self._folders = list(folders)
        self._starts = np.cumsum([0] + [len(f) for f in self._folders])
        self._collate = collate
        self._map = dict(default_collate_fn_map)
        self._joints = any(f.joint_views for f in self._folders)
        self._masks = sorted({k for f in self._folders for k in f.joint_masks})
        # A Joint's per-pixel steps after its tensor conversion, run by v2 on its rendered image.
        names = [n for f in self._folders if f.joint_views and len(f.structures)
                 for n in _joint_tail.tail_names(f.structures[0], JointLeaf)]
        self.tail_note = _joint_tail.tail_note(list(dict.fromkeys(names))) if names else None

    def _structures(self, flat: List[int]) -> List[Any]:
        if len(self._folders) == 1:
            table = self._folders[0].structures
            if isinstance(table, _Structures):
                return table.many(flat)
            return [table[i] for i in flat]
        out = []
        for i in flat:
            member = int(np.searchsorted(self._starts, i, side="right")) - 1
            out.append(self._folders[member].structures[i - int(self._starts[member])])
        return out

    def _split(self, images: Any, views: Optional[list], native: Any = None) -> List[Any]:
        """The batch tensor of each view: zero-copy, strided views of the slot's rows; for a
        view whose size depends on the image, the list of its samples' tensors, each the
        buffer it was rendered in (taken from the batch by the records in its rows). ``views``:
        (byte offset in a row, shape of one sample, dtype) of each, None for one image."""
        if views is None:
            out = [images]
        else:
            torch = self._torch
            out = []
            variable = (native.variable_views if native is not None else None) or [False] * len(views)
            for (offset, shape, dtype, channels), sized in zip(views, variable):
                if sized:
                    out.append(self._outputs(images, offset, channels, native))
                    continue
                dt = getattr(torch, dtype)
                nbytes = int(np.prod(shape)) * torch.empty((), dtype=dt).element_size()
                view = images[:, offset:offset + nbytes].view(dt).view(images.shape[0], *shape)
                if channels == 1:  # a gray view, rendered replicated: keep one channel
                    view = view[..., :1] if self._nhwc else view[:, :1]
                out.append(view)
        if self._channels_last:
            out = [[t.permute(2, 0, 1) for t in v] if isinstance(v, list) else v.permute(0, 3, 1, 2)
                   for v in out]
        for k in self._masks:  # a Joint's mask: [B, H, W], as v2 keeps a mask decoded as stored
            if isinstance(out[k], list):
                out[k] = [t[..., 0] if self._nhwc and not self._channels_last else t[0]
                          for t in out[k]]
            else:
                out[k] = out[k][..., 0] if self._nhwc and not self._channels_last else out[k][:, 0]
        return out

    def _outputs(self, images: Any, offset: int, channels: int, native: Any) -> List[Any]:
        """A variable-size view's tensors, one a row: the records (int64 id, height, width,
        bytes) at ``offset`` in the rows name the outputs, taken from the batch."""
        torch = self._torch
        records = images[:, offset:offset + 32].view(torch.int64).cpu().numpy()
        tensors = [torch.from_dlpack(t) for t in native.take_outputs(records[:, 0].copy())]
        if channels == 1:  # a gray view, rendered replicated: keep one channel
            tensors = [t[..., :1] if self._nhwc else t[:1] for t in tensors]
        return tensors

    def _records(self, images: Any, geometry: Optional[list]) -> Dict[int, Any]:
        """Each recording view's geometry records of the batch: float64 [B, GEOMETRY_FIELDS]."""
        out = {}
        nbytes = _C.GEOMETRY_FIELDS * 8
        for k, offset in enumerate(geometry or []):
            if offset is not None:
                rows = images[:, offset:offset + nbytes].view(self._torch.float64)
                out[k] = rows.cpu().numpy()
        return out

    def batch(self, images: Any, labels: Any, collate_fn: Optional[Callable],
              views: Optional[list], geometry: Optional[list] = None, native: Any = None) -> Any:
        flat = labels.tolist()
        structures = self._structures(flat)
        tails = None
        if self._joints:
            records = self._records(images, geometry)
            if self.tail_note is not None:
                tails = [_joint_tail.joint_tails(s, records, row, JointLeaf)
                         for row, s in enumerate(structures)]
            structures = [_resolve_joints(s, records, row) for row, s in enumerate(structures)]
        views = self._split(images, views, native)
        if self._joints:
            hwc = self._nhwc and not self._channels_last
            if tails is not None:  # the image's per-pixel steps: v2 on the rendered canvases
                views = _joint_tail.run_tails(views, tails, hwc)
            # Then a RandomIoUCrop's crops, drawn by _resolve_joints: slices of the views (the
            # steps v2 runs after the crop are flips and per-pixel ones, which commute with it),
            # and the tails' per-value steps on the pixels each crop keeps.
            views, structures = _detection.take_crops(views, structures, hwc, rebuild)
            if tails is not None:
                views = _joint_tail.run_tails(views, tails, hwc, after_crop=True)
        del images
        try:
            if collate_fn is not None:
                # torch's contract: the list of samples; each image a view of its slot row (or,
                # sized by its image, its own tensor).
                rows = list(zip(*[v if isinstance(v, list) else v.unbind(0) for v in views]))
                return collate_fn([_fill(s, row) for s, row in zip(structures, rows)])
            fn_map = dict(self._map)

            def leaf(batch: Any, *, collate_fn_map: Any = None) -> Any:
                view = views[batch[0].k]
                dtype = getattr(batch[0], "dtype", None)  # a Joint's masks: ToDtype's for them
                if isinstance(view, list):  # sized by each image: stacked as torch's collate does
                    view = view if dtype is None else [v.to(dtype) for v in view]
                    return self._collate(view, collate_fn_map=self._map)
                return view if dtype is None else view.to(dtype)

            fn_map[_Leaf] = leaf
            return self._collate(structures, collate_fn_map=fn_map)
        except Exception as exc:
            told = self._explain(exc, flat, structures, collate_fn is not None)
            if told is exc:
                raise
            try:
                raise told from exc
            finally:
                del told

    def _sample_name(self, flat: int) -> tuple:
        """(what the Dataset of flat sample ``flat`` is, the sample as its errors name it)."""
        member = int(np.searchsorted(self._starts, flat, side="right")) - 1
        folder, i = self._folders[member], flat - int(self._starts[member])
        name = folder.name_row(i)  # a columnar row without a path, as its source names it
        return folder._name(), f"sample {i}" + (f" ({name})" if name is not None else "")

    def _explain(self, exc: BaseException, flat: List[int], structures: List[Any],
                 custom: bool) -> BaseException:
        """``exc`` raised collating the samples ``flat``: an error that names the sample unlike
        the others and says what to change, or ``exc`` with a note naming the batch's samples."""
        odd = odd_one(structures)
        if odd is None:
            names = [self._sample_name(i) for i in flat[:8]]
            exc.add_note(f"while collating {', '.join(n for _, n in names)}"
                         f"{', ...' if len(flat) > 8 else ''} of {names[0][0]}")
            return exc
        what, odd_name = self._sample_name(flat[odd[0]])
        _, usual_name = self._sample_name(flat[odd[1]])
        return collate_hint(exc, what, odd_name, structures[odd[0]], usual_name,
                            structures[odd[1]], custom)
