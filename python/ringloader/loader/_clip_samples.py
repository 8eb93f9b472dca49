"""Where a sample's clip sits, for native clip batches of any sample structure: the one video
reference of a sample (in tuples, lists, namedtuples and dicts, at any depth) found by its path,
the rest of the sample with a placeholder there (what is collated), and the batch's clips put
back at that path of the collated batch, or each row's clip at its sample's place for a
``collate_fn`` (as torch's DataLoader hands ``collate_fn`` the samples)."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

Path = Tuple[Any, ...]

#: How deep a sample's structure is searched for its video reference.
_DEPTH = 8


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

    found: List[Path] = []
    other: List[str] = []
    leaves: List[Any] = []

    def walk(value: Any, path: Path, depth: int) -> None:
        if isinstance(value, _VideoReference):
            found.append(path)
        elif isinstance(value, _FrameLeaf):
            leaves.append(value)
        elif isinstance(value, (ImageReference, Joint)):
            other.append(type(value).__name__)
        elif depth < _DEPTH:
            for key, item in _children(value):
                walk(item, path + (key,), depth + 1)

    walk(sample, (), 0)
    if other:
        return None, (f"its samples hold a ringloader.{other[0]} beside the video (a sample batches "
                      "natively with one clip and no image references or Joint)")
    if len(found) != 1:
        return None, ("its samples hold no VideoFile or VideoBytes" if not found else
                      f"its samples hold {len(found)} video references (one a sample batches natively)")
    if any(leaf.video is not at(sample, found[0]) for leaf in leaves):
        return None, ("its samples hold a leaf (ClipIndices, ClipTimes, PerFrame) of another video "
                      "than their own")
    return found[0], ""


def at(sample: Any, path: Path) -> Any:
    """The value at ``path`` of ``sample``; None when the sample has none there."""
    for key in path:
        try:
            sample = sample[key]
        except (KeyError, IndexError, TypeError):
            return None
    return sample


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
