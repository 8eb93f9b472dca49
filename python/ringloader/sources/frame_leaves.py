"""Leaves of a sample that the frames of its video's clip decide: ``ClipIndices(video)``,
``ClipTimes(video)`` and ``PerFrame(video, values)``.

A video reference with a clip sampler draws its frames when the sample is decoded; a model that
needs to know which frames it got (their indices, their presentation times) or a per-frame
annotation of those frames (boxes, keypoints, labels of each frame) puts one of these leaves in
the sample beside the video. The leaf takes the frames that same reference draws (one draw per
reference and sample, shared by its leaves, whatever their order in the sample), before the
reference's or a Joint's transform: a ``UniformTemporalSubsample`` in the transform selects
frames of the clip, not of the leaf, as v2 leaves a list of boxes as it is.

Inside an ``rl.Joint``, a ``PerFrame`` of ``tv_tensors.BoundingBoxes`` gives the boxes of the
clip's frames, and v2 moves them with the clip's one geometric draw, as it moves every box of a
call::

    video = rl.VideoFile(path, clip=rl.clips.random_indices(num_frames_per_clip=8))
    rl.Joint(v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()]),
             (video, {"boxes": rl.PerFrame(video, boxes_by_frame), "frames": rl.ClipIndices(video)}))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Dict, List, Tuple

from .video import _WRAPPERS, _FrameLeaf, _VideoReference

__all__ = ["ClipIndices", "ClipTimes", "PerFrame", "DrawnClips", "check_leaves"]


class DrawnClips:
    """The frames each video reference of one sample drew: one draw per reference object, from
    ``generator`` (a ``torch.Generator``; None: torch's global one), in the order the sample's
    references and leaves ask for them."""

    def __init__(self, generator: Any = None):
        self.generator = generator
        self._rows: Dict[int, Tuple[_VideoReference, Tuple[List[List[int]], bool]]] = {}

    def frames(self, video: _VideoReference) -> Tuple[List[List[int]], bool]:
        """``video``'s clip: rows of frame indices, and whether it was one flat clip."""
        found = self._rows.get(id(video))
        if found is None:  # the reference is kept with its rows, so that its id stays its own
            found = self._rows[id(video)] = (video, video._frames(video.clip, self.generator))
        return found[1]

    def decode(self, video: _VideoReference) -> Any:
        """``video``'s clip decoded (``uint8`` ``[T, 3, H, W]`` or ``[N, T, 3, H, W]``), before
        its transform."""
        decoder = video._decoder()
        return video._decoded(decoder, *self.frames(video))


def _shaped(rows: List[List[Any]], flat: bool) -> Any:
    return rows[0] if flat else rows


class ClipIndices(_FrameLeaf):
    """The frame indices of ``video``'s clip in this sample: an ``int64`` tensor ``[T]`` (one
    clip) or ``[N, T]`` (a clip sampler, or a list of clips), as the clip's own leading shape.

    Examples:
        >>> import subprocess
        >>> _ = subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-f", "lavfi", "-i",
        ...                     "testsrc2=size=64x48:rate=10:duration=1", "-pix_fmt", "yuv420p",
        ...                     "clip.mp4"], check=True)
        >>> import torch
        >>> import ringloader as rl
        >>> video = rl.VideoFile("clip.mp4", clip=rl.clips.random_indices(num_frames_per_clip=3))
        >>> clip, frames = rl.materialize((video, rl.ClipIndices(video)), torch.Generator().manual_seed(0))
        >>> tuple(clip.shape), tuple(frames.shape), bool((frames[0, 1:] - frames[0, :-1] == 1).all())
        ((1, 3, 3, 48, 64), (1, 3), True)
    """

    __slots__ = ()

    def value(self, drawn: DrawnClips) -> Any:
        import torch

        return torch.tensor(_shaped(*self._indices(drawn)), dtype=torch.int64)

    def __repr__(self) -> str:
        return f"ClipIndices({self.video!r})"


class ClipTimes(_FrameLeaf):
    """The presentation times (seconds) of the frames of ``video``'s clip in this sample: a
    ``float64`` tensor shaped as :class:`ClipIndices` (torchcodec's ``FrameBatch.pts_seconds``
    of the same frames).

    Examples:
        >>> import subprocess
        >>> _ = subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-f", "lavfi", "-i",
        ...                     "testsrc2=size=64x48:rate=10:duration=1", "-pix_fmt", "yuv420p",
        ...                     "clip.mp4"], check=True)
        >>> import ringloader as rl
        >>> video = rl.VideoFile("clip.mp4", clip=[0, 5, 9])
        >>> rl.materialize(rl.ClipTimes(video)).tolist()
        [0.0, 0.5, 0.9]
    """

    __slots__ = ()

    def value(self, drawn: DrawnClips) -> Any:
        import torch

        pts = self.video.metadata.pts_seconds
        rows, flat = self._indices(drawn)
        return torch.tensor(_shaped([[pts[i] for i in row] for row in rows], flat),
                            dtype=torch.float64)

    def __repr__(self) -> str:
        return f"ClipTimes({self.video!r})"


class PerFrame(_FrameLeaf):
    """``values`` of the frames of ``video``'s clip in this sample: ``values`` holds one value
    per frame of the video, by frame index (a list or tuple, a mapping from frame index, or a
    tensor whose first dimension is the frame). The leaf is the list of the clip's frames'
    values (``[T]``, or a list of ``N`` such lists for several clips); for a tensor, the tensor
    of those rows (``values[indices]``, ``[T, ...]`` or ``[N, T, ...]``); for a ``tv_tensors``
    type (one box per frame: ``BoundingBoxes`` ``[num_frames, 4]``), a tensor of that type of
    the clip's rows (``[T, ...]``, its canvas and format kept), or a list of ``N`` of them. A frame without a value raises ``IndexError`` naming the video and the frame (a
    sample error under ``on_error``).

    Inside an ``rl.Joint`` each value is transformed with the clip (one draw for all): a list of
    ``tv_tensors.BoundingBoxes``, one per frame, is moved as the frames are.

    Examples:
        >>> import subprocess
        >>> _ = subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-f", "lavfi", "-i",
        ...                     "testsrc2=size=64x48:rate=10:duration=1", "-pix_fmt", "yuv420p",
        ...                     "clip.mp4"], check=True)
        >>> import ringloader as rl
        >>> video = rl.VideoFile("clip.mp4", clip=[2, 5])
        >>> rl.materialize(rl.PerFrame(video, {i: f"frame {i}" for i in range(10)}))
        ['frame 2', 'frame 5']
    """

    __slots__ = ("values",)

    def __init__(self, video: Any, values: Any):
        super().__init__(video)
        if isinstance(values, (str, bytes)) or not (isinstance(values, Mapping)
                                                     or hasattr(values, "__getitem__")):
            raise TypeError(f"PerFrame({video._name()}): values must be a list, tuple, mapping or "
                            f"tensor indexed by frame, got {type(values).__name__}")
        self.values = values

    def value(self, drawn: DrawnClips) -> Any:
        import torch

        rows, flat = self._indices(drawn)
        values = self.values
        if isinstance(values, torch.Tensor):
            wanted = max((i for row in rows for i in row), default=-1)
            if wanted >= len(values):
                raise IndexError(f"PerFrame({self.video._name()}): no value for frame {wanted} "
                                 f"(values has {len(values)} rows)")
            if type(values) is torch.Tensor:
                return values[torch.tensor(_shaped(rows, flat), dtype=torch.int64)]
            from torchvision import tv_tensors  # a tv_tensor stays one (canvas, format kept)

            taken = [tv_tensors.wrap(values[torch.tensor(row, dtype=torch.int64)], like=values)
                     for row in rows]
            return _shaped(taken, flat)
        return _shaped([[self._one(i) for i in row] for row in rows], flat)

    def _one(self, i: int) -> Any:
        try:
            return self.values[i]
        except KeyError:  # an IndexError as a list's: one error for a frame without a value
            raise IndexError(f"PerFrame({self.video._name()}): no value for frame {i}") from None
        except IndexError:
            raise IndexError(f"PerFrame({self.video._name()}): no value for frame {i} (values "
                             f"has {len(self.values)})") from None

    def __reduce__(self) -> Any:
        return (PerFrame, (self.video, self.values))

    def __repr__(self) -> str:
        return f"PerFrame({self.video!r}, <{type(self.values).__name__}>)"


def check_leaves(sample: Any) -> None:
    """Refuses a frame leaf whose video object the sample does not hold beside one of the same
    video that it does: the leaf would take the frames of its own object's clip, another draw."""
    videos: list = []
    leaves: list = []

    def walk(value: Any, depth: int) -> None:
        if isinstance(value, _VideoReference):
            videos.append(value)
        elif isinstance(value, _FrameLeaf):
            leaves.append(value)
        elif depth < 8:
            wrapped = _WRAPPERS.get(type(value))  # an rl.Joint: its structure
            inner = getattr(value, wrapped) if wrapped is not None else value
            for item in (inner.values() if isinstance(inner, dict) else
                         inner if isinstance(inner, (tuple, list)) else ()):
                walk(item, depth + 1)

    walk(sample, 0)
    held = {id(v) for v in videos}
    for leaf in leaves:
        if id(leaf.video) not in held and any(v._name() == leaf.video._name() for v in videos):
            raise ValueError(f"{type(leaf).__name__}({leaf.video._name()}) is given another "
                             "VideoFile/VideoBytes object than the one the sample holds for that "
                             "video: a leaf takes the frames its own object draws, so give it the "
                             "sample's reference")
