"""Where a sample's clip sits, for native clip batches of any sample structure: the one video
reference of a sample (in tuples, lists, namedtuples and dicts, at any depth) found by its path,
the rest of the sample with a placeholder there (what is collated), and the batch's clips put
back at that path of the collated batch, or each row's clip at its sample's place for a
``collate_fn`` (as torch's DataLoader hands ``collate_fn`` the samples).

A sample that is an ``rl.Joint`` holding a video batches natively too when its transform runs
natively on the clip: its path starts with :data:`JOINT` (its structure), the clip is the
Joint's transform run natively with the row's draws, and its boxes and keypoints are moved by
v2's own kernels with the same draws (``_C.video_chain_plan``: :func:`moved`)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

Path = Tuple[Any, ...]

#: How deep a sample's structure is searched for its video reference.
_DEPTH = 8


class _Structure:
    """The first key of a path into an ``rl.Joint`` sample: its structure."""

    def __repr__(self) -> str:
        return "Joint.structure"


JOINT = _Structure()


def _children(value: Any) -> List[Tuple[Any, Any]]:
    if isinstance(value, (tuple, list)):
        return list(enumerate(value))
    if isinstance(value, dict):
        return list(value.items())
    return []


def locate(sample: Any) -> Tuple[Optional[Path], str]:
    """``(path, "")`` of the one video reference in ``sample``, else ``(None, why not)``: a
    sample batches natively with one clip, beside values, targets and the clip's own leaves."""
    from ..sources.references import ImageReference, Joint
    from ..sources.video import _FrameLeaf, _VideoReference

    from torchvision import tv_tensors

    found: List[Path] = []
    other: List[str] = []
    leaves: List[Any] = []

    def unmoved(value: Any) -> Optional[str]:
        """What of a Joint's leaf the native path would not transform as v2 does: pixels
        (masks, images, videos) and rotated boxes; the values of a PerFrame too."""
        values = getattr(value, "values", None) if isinstance(value, _FrameLeaf) else None
        if values is not None and not isinstance(values, tv_tensors.TVTensor):
            items = values.values() if isinstance(values, dict) else values
            return next((why for why in map(unmoved, items if isinstance(items, (list, tuple))
                                            else list(items)) if why), None)
        value = values if values is not None else value
        if isinstance(value, (tv_tensors.Mask, tv_tensors.Image, tv_tensors.Video)):
            return f"Joint with a tv_tensors.{type(value).__name__}"
        if isinstance(value, tv_tensors.BoundingBoxes) and tv_tensors.is_rotated_bounding_format(value.format):
            return "Joint with rotated boxes"
        return None

    def walk(value: Any, path: Path, depth: int) -> None:
        why = unmoved(value) if path[:1] == (JOINT,) else None
        if why is not None:
            other.append(why)
        elif isinstance(value, _VideoReference):
            found.append(path)
        elif isinstance(value, _FrameLeaf):
            leaves.append(value)
        elif isinstance(value, (ImageReference, Joint)):
            other.append(f"ringloader.{type(value).__name__}")
        elif depth < _DEPTH:
            for key, item in _children(value):
                walk(item, path + (key,), depth + 1)

    if isinstance(sample, Joint):  # the sample itself: its structure, the clip and its targets
        walk(sample.structure, (JOINT,), 0)
    else:
        walk(sample, (), 0)
    if other:
        return None, (f"its samples hold a {other[0]} beside the video (a sample batches natively "
                      "with one clip, no image references, masks or images, and no Joint but itself)")
    if len(found) != 1:
        return None, ("its samples hold no VideoFile or VideoBytes" if not found else
                      f"its samples hold {len(found)} video references (one a sample batches natively)")
    if any(leaf.video is not at(sample, found[0]) for leaf in leaves):
        return None, ("its samples hold a leaf (ClipIndices, ClipTimes, PerFrame) of another video "
                      "than their own")
    return found[0], ""


def reference(sample: Any, path: Optional[Tuple[Any, ...]] = None) -> Tuple[Any, Optional[str]]:
    """The one video reference of ``sample`` (at ``path`` when given: where sample 0 holds its
    own), and why not (``_clip_samples.locate``)."""
    found, why = locate(sample)
    if found is None:
        return None, why
    if path is not None and found != path:
        return None, f"its video reference is at {list(found)}, sample 0's at {list(path)}"
    return at(sample, found), None


def first_sample(dataset: Any, errors: Tuple[type, ...]) -> Tuple[Any, Optional[str]]:
    """The first of the first 16 samples that can be read (a bad sample,
    ``rl.VideoShards``' sample without a video say, is that sample's error under ``on_error``,
    not a reason to leave the native path), and why not when none is."""
    from .._C import StaleIndexError

    if not len(dataset):
        return None, "the dataset is empty"
    first_error: Optional[BaseException] = None
    for index in range(min(len(dataset), 16)):
        try:
            sample = dataset[index]
            ref, why = reference(sample)
            return (sample, None) if ref is not None else (None, why)
        except StaleIndexError:
            raise
        except errors as error:
            first_error = first_error or error
    return None, f"none of its first samples could be read ({first_error})"


def at(sample: Any, path: Path) -> Any:
    """The value at ``path`` of ``sample``; None when the sample has none there."""
    for key in path:
        try:
            sample = sample.structure if key is JOINT else sample[key]
        except (KeyError, IndexError, TypeError, AttributeError):
            return None
    return sample


def _v2_calls(steps: List[Dict[str, Any]], ops: List[Tuple[Any, ...]], size: Tuple[int, int]) -> List[Any]:
    """The calls v2's transforms of ``steps`` make on a box or keypoint leaf of a clip of frames
    ``size`` (height, width), given the clip's ``ops`` of every step
    (``_C.video_chain_plan(..., every_step=True)``): ``Resize``, ``CenterCrop`` and
    ``RandomResizedCrop`` call their kernel whatever it changes (and a crop clamps the boxes),
    ``RandomCrop`` only when its crop is smaller than the frames (v2's ``needs_crop``)."""
    from torchvision.transforms.v2 import functional as F

    calls: List[Any] = []
    at = 0
    for step in steps:
        kind, op = step["kind"], ops[at]
        at += 2 if kind == "random_resized_crop" else 1
        if kind == "resize":
            calls.append(lambda v, size=[op[3], op[4]]: F.resize(v, size))
        elif kind == "center_crop":
            calls.append(lambda v, size=[op[3], op[4]]: F.center_crop(v, size))
        elif kind == "random_crop" and tuple(op[3:5]) != tuple(size):
            calls.append(lambda v, box=op[1:5]: F.crop(v, *box))
        elif kind == "random_resized_crop":
            calls.append(lambda v, box=op[1:5], size=[step["height"], step["width"]]: F.resized_crop(v, *box, size))
        elif kind == "horizontal_flip" and op[5]:
            calls.append(F.horizontal_flip)
        if kind != "horizontal_flip":
            size = (step["height"], step["width"]) if kind != "resize" else (op[3], op[4])
    return calls


def moved(structure: Any, steps: List[Dict[str, Any]], ops: List[Tuple[Any, ...]], size: Tuple[int, int],
          where: str) -> Any:
    """``structure`` with its ``tv_tensors.BoundingBoxes`` and ``KeyPoints`` moved as v2 moves
    them along with a clip of frames ``size`` (height, width) whose draws gave ``ops`` (of every
    step): v2's own kernels, called as its transforms of ``steps`` call them. A leaf
    whose canvas is not the frames' size (which v2 would move apart from the clip) is a
    ValueError naming ``where``."""
    from torchvision import tv_tensors

    from ..sources.references import rebuild

    calls = _v2_calls(steps, ops, size)

    def move(value: Any) -> Any:
        if not isinstance(value, (tv_tensors.BoundingBoxes, tv_tensors.KeyPoints)):
            return rebuild(value, move)
        if tuple(value.canvas_size) != tuple(size):
            raise ValueError(f"{where}: a {type(value).__name__} of canvas_size "
                             f"{tuple(value.canvas_size)} beside frames of {tuple(size)} (height, width)")
        for call in calls:
            value = call(value)
        return value

    return move(structure)


def put(structure: Any, path: Path, value: Any) -> Any:
    """``structure`` with ``value`` at ``path`` (the containers along it rebuilt as their own
    types: a tuple stays a tuple, a namedtuple its class, a list a list, a dict its mapping)."""
    if not path:
        return value
    key, rest = path[0], path[1:]
    if isinstance(structure, tuple):
        items = list(structure)
        items[key] = put(items[key], rest, value)
        return type(structure)(*items) if hasattr(structure, "_fields") else tuple(items)
    if isinstance(structure, list):
        items = list(structure)
        items[key] = put(items[key], rest, value)
        return items
    items = dict(structure)
    items[key] = put(items[key], rest, value)
    return items if type(structure) is dict else type(structure)(items)


def with_leaves(target: Any, ref: Any, meta: Any, key: Any) -> Any:
    """``target`` with its frame leaves (``rl.ClipIndices``, ``rl.ClipTimes``, ``rl.PerFrame``)
    replaced by their values for the clip ``ref`` draws for ``key``: drawn again from the key's
    generator, as ``_plan`` draws it and as ``materialize`` draws a (video, target) sample (the
    video first); ``meta`` is the video's kept metadata, so nothing is opened for it."""
    from ..sources.frame_leaves import DrawnClips, _FrameLeaf
    from ..sources.references import _flat, rebuild

    if not any(isinstance(leaf, _FrameLeaf) for leaf in _flat(target)):
        return target
    from ..transforms.clips import generator_for

    ref._meta = meta
    drawn = DrawnClips(generator_for(key.seed, key.epoch, key.index, key.position))
    drawn.frames(ref)

    def fill(value: Any) -> Any:
        return value.value(drawn) if isinstance(value, _FrameLeaf) else rebuild(value, fill)

    return fill(target)


class Delivered:
    """The batches of ``inner`` (``(clips, rest)`` as the clip batch source makes them) as the
    user's structure: ``source.deliver`` of each; ``close()`` passed on."""

    def __init__(self, inner: Any, source: Any):
        self._inner, self._source = inner, source

    def __iter__(self) -> "Delivered":
        return self

    def __next__(self) -> Any:
        clips, rest = next(self._inner)
        return self._source.deliver(clips, rest)

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()
