"""Clip sampling: which frames of a video make each clip, chosen as ``torchcodec.samplers`` chooses
them. :meth:`ClipSampler.frame_indices` applies a sampler to one video's :class:`VideoMeta`: the
frame indices of each clip (clips x frames). The four samplers take torchcodec 0.17's parameters,
defaults, edge policies and errors (its ``clips_at_random_indices`` is :func:`random_indices`, and
so on), and the random ones make the same draws from the same torch RNG state: pass a
``torch.Generator``, or nothing to draw from torch's global one as torchcodec does. :func:`indices` and :func:`timestamps` name the frames instead.
:func:`generator_for` gives a sample's generator keyed by (seed, epoch, index), as the loader
keys every other augmentation draw: the same clips for any thread count, and on resume.

Timestamps name the frame played at them (``pts <= t <`` the next frame's ``pts``), as
torchcodec's ``VideoDecoder.get_frames_played_at`` does; without ``pts_seconds`` in the
:class:`VideoMeta`, frame ``floor((t - begin_stream_seconds) * average_fps)`` (torchcodec's
``seek_mode="approximate"``).

On purpose, a ``sampling_range_start`` below minus the number of frames is refused (torchcodec
samples negative indices from it and fails later, or not, by chance).

Examples:
    >>> from ringloader import clips
    >>> meta = clips.VideoMeta(num_frames=50, average_fps=25.0, begin_stream_seconds=0.0,
    ...                        end_stream_seconds=2.0)
    >>> clips.regular_indices(num_clips=3, num_frames_per_clip=4,
    ...                       num_indices_between_frames=2).frame_indices(meta)
    [[0, 2, 4, 6], [21, 23, 25, 27], [43, 45, 47, 49]]
    >>> sampler = clips.random_indices(num_clips=2, num_frames_per_clip=3)
    >>> key = clips.generator_for(seed=0, epoch=1, index=7)
    >>> sampler.frame_indices(meta, key) == sampler.frame_indices(meta, clips.generator_for(0, 1, 7))
    True
    >>> clips.regular_timestamps(seconds_between_clip_starts=0.5).timestamps(meta)
    [[0.0], [0.5], [1.0], [1.5]]
    >>> clips.timestamps([0.03, 1.99]).frame_indices(meta)
    [[0, 49]]
"""

from __future__ import annotations

import bisect
import math
import operator
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

from .. import _C

__all__ = ["VideoMeta", "ClipSampler", "IndexClips", "TimestampClips", "FrameIndices",
           "Timestamps", "random_indices", "regular_indices", "random_timestamps",
           "regular_timestamps", "indices", "timestamps", "as_sampler", "frames_played_at",
           "generator_for", "POLICIES"]

#: The edge policies: how a clip reaching past the video's end is completed.
POLICIES: Tuple[str, ...] = ("repeat_last", "wrap", "error")

_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class VideoMeta:
    """What clip sampling needs to know of one video stream (a decoder's metadata).

    Args:
        num_frames: the number of frames.
        average_fps: frames per second on average, or ``None`` when unknown (the timestamp
            samplers then refuse the video).
        begin_stream_seconds: the first frame's presentation time.
        end_stream_seconds: the end of the last frame, or ``None`` when unknown.
        pts_seconds: the presentation time of every frame in order (sorted), optional: with it a
            timestamp names the frame played at it exactly; without it, the frame is computed from
            ``average_fps``.

    Examples:
        >>> from ringloader.clips import VideoMeta
        >>> meta = VideoMeta(3, 2.0, 0.0, 1.5, pts_seconds=[0.0, 0.5, 1.0])
        >>> meta.pts_seconds, meta.num_frames
        ((0.0, 0.5, 1.0), 3)
        >>> VideoMeta(2, 2.0, 0.0, 1.0, pts_seconds=[0.0])
        Traceback (most recent call last):
        ...
        ValueError: VideoMeta: pts_seconds has 1 entries for num_frames=2
    """

    num_frames: int
    average_fps: Optional[float]
    begin_stream_seconds: float
    end_stream_seconds: Optional[float]
    pts_seconds: Optional[Tuple[float, ...]] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        num_frames = _integer(self.num_frames, "VideoMeta num_frames")
        if num_frames < 0:
            raise ValueError(f"VideoMeta: num_frames ({num_frames}) must be >= 0")
        object.__setattr__(self, "num_frames", num_frames)
        object.__setattr__(self, "begin_stream_seconds", float(self.begin_stream_seconds))
        for name in ("average_fps", "end_stream_seconds"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))
        if self.pts_seconds is not None:
            pts = tuple(float(t) for t in self.pts_seconds)
            if len(pts) != num_frames:
                raise ValueError(f"VideoMeta: pts_seconds has {len(pts)} entries for "
                                 f"num_frames={num_frames}")
            if any(b < a for a, b in zip(pts, pts[1:])):
                raise ValueError("VideoMeta: pts_seconds must be sorted (presentation order)")
            object.__setattr__(self, "pts_seconds", pts)


def _integer(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {value!r}") from None


def _check_common(num_frames_per_clip: int, policy: str) -> None:
    if num_frames_per_clip <= 0:
        raise ValueError(f"num_frames_per_clip ({num_frames_per_clip}) must be strictly positive")
    if policy not in POLICIES:
        raise ValueError(f"Invalid policy ({policy}). Supported values are {list(POLICIES)}.")


def _check_video(meta: VideoMeta) -> None:
    if not isinstance(meta, VideoMeta):
        raise TypeError(f"clip sampling needs a ringloader.clips.VideoMeta, got {type(meta).__name__}")
    if meta.num_frames < 1:
        raise ValueError(f"the video must have at least one frame, found {meta.num_frames} frames")


def _complete(clip: List[Any], length: int, policy: str) -> List[Any]:
    """``clip`` (its frames inside the video) brought to ``length`` frames by ``policy``."""
    if len(clip) >= length:
        return clip
    if policy == "repeat_last":
        return clip + [clip[-1]] * (length - len(clip))
    if policy == "wrap":
        return [clip[i % len(clip)] for i in range(length)]
    raise ValueError(
        "policy='error': a clip reaches past the end of the video (it would need a frame beyond "
        "the last). Leave sampling_range_end at its default (None), or pick policy='repeat_last' "
        "or 'wrap'.")


def _generator(generator: Any) -> Any:
    import torch

    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    return generator


class ClipSampler:
    """What every clip sampler offers: :meth:`frame_indices` of a video's clips."""

    num_frames_per_clip: int

    def frame_indices(self, meta: VideoMeta, generator: Any = None) -> List[List[int]]:
        """The frame indices of each clip (a list per clip, ``num_frames_per_clip`` each) in the
        video ``meta`` describes; random samplers draw from ``generator`` (a
        ``torch.Generator``; ``None``: torch's global generator)."""
        raise NotImplementedError


@dataclass(frozen=True)
class IndexClips(ClipSampler):
    """Clips whose starts are drawn (``kind="random"``) or evenly spaced (``"regular"``) over
    frame indices; made by :func:`random_indices` and :func:`regular_indices`."""

    kind: str
    num_clips: int = 1
    num_frames_per_clip: int = 1
    num_indices_between_frames: int = 1
    sampling_range_start: int = 0
    sampling_range_end: Optional[int] = None
    policy: str = "repeat_last"

    def __post_init__(self) -> None:
        for name in ("num_clips", "num_frames_per_clip", "num_indices_between_frames",
                     "sampling_range_start"):
            object.__setattr__(self, name, _integer(getattr(self, name), name))
        if self.sampling_range_end is not None:
            object.__setattr__(self, "sampling_range_end",
                               _integer(self.sampling_range_end, "sampling_range_end"))
        _check_common(self.num_frames_per_clip, self.policy)
        if self.num_clips <= 0:
            raise ValueError(f"num_clips ({self.num_clips}) must be > 0")
        if self.num_indices_between_frames <= 0:
            raise ValueError(f"num_indices_between_frames ({self.num_indices_between_frames}) "
                             "must be strictly positive")

    def _span(self) -> int:
        """Frames from a clip's first to its last, both included."""
        return self.num_indices_between_frames * (self.num_frames_per_clip - 1) + 1

    def _range(self, num_frames: int) -> Tuple[int, int]:
        """The clip starts' range ``[start, end)`` in a video of ``num_frames`` frames."""
        start = self.sampling_range_start
        if start < 0:
            start += num_frames
            if start < 0:
                raise ValueError(f"sampling_range_start ({self.sampling_range_start}) must be at "
                                 f"least minus the number of frames ({-num_frames})")
        if start >= num_frames:
            raise ValueError(f"sampling_range_start ({start}) must be smaller than the number of "
                             f"frames ({num_frames}).")
        end = self.sampling_range_end
        if end is None:
            end = max(num_frames - self._span() + 1, 1)
            if start >= end:
                raise ValueError(f"sampling_range_end was determined as {end} (the last start "
                                 f"from which a clip of {self._span()} frames fits, plus one), "
                                 f"which is not above sampling_range_start ({start}).")
        else:
            if end < 0:
                end += num_frames  # -1: the last frame
            end = min(end, num_frames)
            if start >= end:
                raise ValueError(f"sampling_range_start ({start}) must be smaller than "
                                 f"sampling_range_end ({end}).")
        return start, end

    def frame_indices(self, meta: VideoMeta, generator: Any = None) -> List[List[int]]:
        import torch

        _check_video(meta)
        start, end = self._range(meta.num_frames)
        if self.kind == "random":
            starts = torch.randint(start, end, (self.num_clips,), generator=_generator(generator))
        else:
            # Evenly spaced with torch's own rounding (more clips than starts repeat some).
            starts = torch.linspace(start, end - 1, steps=self.num_clips, dtype=torch.int)
        out = []
        for first in starts.tolist():
            stop = min(first + self._span(), meta.num_frames)
            clip = list(range(first, stop, self.num_indices_between_frames))
            out.append(_complete(clip, self.num_frames_per_clip, self.policy))
        return out


@dataclass(frozen=True)
class TimestampClips(ClipSampler):
    """Clips whose starts are drawn (``kind="random"``) or spaced by
    ``seconds_between_clip_starts`` (``"regular"``) over time; made by :func:`random_timestamps`
    and :func:`regular_timestamps`."""

    kind: str
    num_clips: Optional[int] = None
    seconds_between_clip_starts: Optional[float] = None
    num_frames_per_clip: int = 1
    seconds_between_frames: Optional[float] = None
    sampling_range_start: Optional[float] = None
    sampling_range_end: Optional[float] = None
    policy: str = "repeat_last"

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_frames_per_clip",
                           _integer(self.num_frames_per_clip, "num_frames_per_clip"))
        _check_common(self.num_frames_per_clip, self.policy)
        if self.kind == "random":
            object.__setattr__(self, "num_clips", _integer(self.num_clips, "num_clips"))
            if self.num_clips <= 0:
                raise ValueError(f"num_clips ({self.num_clips}) must be > 0")
        elif self.seconds_between_clip_starts is None or not self.seconds_between_clip_starts > 0:
            raise ValueError(f"seconds_between_clip_starts ({self.seconds_between_clip_starts}) "
                             "must be > 0")
        if self.seconds_between_frames is not None and not self.seconds_between_frames > 0:
            raise ValueError(f"seconds_between_frames ({self.seconds_between_frames}) must be > 0")

    def _range(self, meta: VideoMeta, between: float) -> Tuple[float, float]:
        """The clip starts' range ``[start, end)`` in seconds."""
        begin, finish = meta.begin_stream_seconds, meta.end_stream_seconds
        start = self.sampling_range_start
        if start is None:
            start = begin
        elif start < begin:
            raise ValueError(f"sampling_range_start ({start}) must be at least {begin}")
        elif start >= finish:
            raise ValueError(f"sampling_range_start ({start}) must be smaller than {finish}")
        end = self.sampling_range_end
        if end is None:
            # The last start whose clip stays inside the video: every frame's time < finish.
            end = finish - (self.num_frames_per_clip - 1) * between
        elif end <= begin:
            raise ValueError(f"sampling_range_end ({end}) must be at least {begin}")
        if start >= end:
            raise ValueError(f"sampling_range_start ({start}) must be smaller than "
                             f"sampling_range_end ({end})")
        return start, min(end, finish)

    def timestamps(self, meta: VideoMeta, generator: Any = None) -> List[List[float]]:
        """The sampling time (seconds) of each frame of each clip."""
        import torch

        _check_video(meta)
        for name in ("average_fps", "end_stream_seconds"):
            if getattr(meta, name) is None:
                raise ValueError(f"the video's {name} is unknown: timestamp samplers need it; use "
                                 "an index sampler (random_indices, regular_indices) instead")
        between = self.seconds_between_frames
        if between is None:
            between = 1 / meta.average_fps
        start, end = self._range(meta, between)
        if self.kind == "random":
            draws = torch.rand(self.num_clips, dtype=torch.float64, generator=_generator(generator))
            starts = (draws * (end - start) + start).tolist()
        else:
            grid = torch.arange(start, end, self.seconds_between_clip_starts, dtype=torch.float64)
            starts = grid[grid < end].tolist()  # arange may reach `end` by rounding
        finish = meta.end_stream_seconds
        out = []
        for first in starts:
            clip = [t for t in (first + i * between for i in range(self.num_frames_per_clip))
                    if t < finish]
            out.append(_complete(clip, self.num_frames_per_clip, self.policy))
        return out

    def frame_indices(self, meta: VideoMeta, generator: Any = None) -> List[List[int]]:
        return [frames_played_at(meta, clip) for clip in self.timestamps(meta, generator)]


def _clip_rows(values: Any, what: str) -> Tuple[Tuple[Any, ...], ...]:
    """``values`` (one clip, or a list of clips of equal length) as a tuple of tuples."""
    if hasattr(values, "tolist"):  # a tensor or an array
        values = values.tolist()
    rows = list(values)
    if not rows:
        raise ValueError(f"{what}: no clip given")
    if not isinstance(rows[0], (list, tuple)) and not hasattr(rows[0], "tolist"):
        rows = [rows]  # one clip
    rows = [tuple(r.tolist() if hasattr(r, "tolist") else r) for r in rows]
    if any(len(r) == 0 for r in rows):
        raise ValueError(f"{what}: a clip has no frame")
    if len({len(r) for r in rows}) != 1:
        raise ValueError(f"{what}: clips of different lengths {sorted({len(r) for r in rows})}; "
                         "every clip of a video must have the same number of frames")
    return tuple(rows)


@dataclass(frozen=True)
class FrameIndices(ClipSampler):
    """Clips of frames named by index (negative ones count from the end, as in Python); made by
    :func:`indices`."""

    clips: Tuple[Tuple[int, ...], ...]

    def __post_init__(self) -> None:
        rows = _clip_rows(self.clips, "clips.indices")
        object.__setattr__(self, "clips", tuple(
            tuple(_integer(i, "a frame index") for i in row) for row in rows))

    @property
    def num_frames_per_clip(self) -> int:  # type: ignore[override]
        return len(self.clips[0])

    def frame_indices(self, meta: VideoMeta, generator: Any = None) -> List[List[int]]:
        _check_video(meta)
        n = meta.num_frames
        out = []
        for row in self.clips:
            for i in row:
                if not -n <= i < n:
                    raise IndexError(f"frame index {i} is out of range for a video of {n} frames")
            out.append([i + n if i < 0 else i for i in row])
        return out


@dataclass(frozen=True)
class Timestamps(ClipSampler):
    """Clips of the frames played at given times (seconds); made by :func:`timestamps`."""

    clips: Tuple[Tuple[float, ...], ...]

    def __post_init__(self) -> None:
        rows = _clip_rows(self.clips, "clips.timestamps")
        for row in rows:
            for t in row:
                if isinstance(t, bool) or not isinstance(t, (int, float)) or math.isnan(t):
                    raise TypeError(f"clips.timestamps: {t!r} is not a time in seconds")
        object.__setattr__(self, "clips", tuple(tuple(float(t) for t in row) for row in rows))

    @property
    def num_frames_per_clip(self) -> int:  # type: ignore[override]
        return len(self.clips[0])

    def timestamps(self, meta: VideoMeta, generator: Any = None) -> List[List[float]]:
        """The given times, one list per clip."""
        _check_video(meta)
        return [list(row) for row in self.clips]

    def frame_indices(self, meta: VideoMeta, generator: Any = None) -> List[List[int]]:
        return [frames_played_at(meta, row) for row in self.timestamps(meta)]


def frames_played_at(meta: VideoMeta, seconds: Sequence[float]) -> List[int]:
    """The index of the frame played at each time of ``seconds``: the last frame whose
    ``pts <= t`` (its successor's pts is above ``t``); times must lie in
    ``[begin_stream_seconds, end_stream_seconds)``.

    Examples:
        >>> from ringloader.clips import VideoMeta, frames_played_at
        >>> meta = VideoMeta(3, 2.0, 0.0, 1.5, pts_seconds=[0.0, 0.4, 1.1])
        >>> frames_played_at(meta, [0.0, 0.39, 0.4, 1.49])
        [0, 0, 1, 2]
    """
    _check_video(meta)
    begin, end = meta.begin_stream_seconds, meta.end_stream_seconds
    out = []
    for t in seconds:
        if t < begin or (end is not None and t >= end):
            raise ValueError(f"time {t} s is outside the video's [{begin}, {end}) seconds")
        if meta.pts_seconds is not None:
            out.append(bisect.bisect_right(meta.pts_seconds, t, 1) - 1)
            continue
        if meta.average_fps is None:
            raise ValueError("the video has neither pts_seconds nor average_fps: no frame can be "
                             "found by time")
        index = math.floor((t - begin) * meta.average_fps)
        if not 0 <= index < meta.num_frames:
            raise ValueError(f"time {t} s maps to frame {index} by average_fps, outside the "
                             f"video's {meta.num_frames} frames")
        out.append(index)
    return out


def random_indices(num_clips: int = 1, num_frames_per_clip: int = 1,
                   num_indices_between_frames: int = 1, sampling_range_start: int = 0,
                   sampling_range_end: Optional[int] = None,
                   policy: str = "repeat_last") -> IndexClips:
    """Clips starting at random frame indices (torchcodec's ``clips_at_random_indices``).

    Args:
        num_clips: clips per video.
        num_frames_per_clip: frames per clip.
        num_indices_between_frames: the step between a clip's frames (1: consecutive frames).
        sampling_range_start: the first index a clip may start at (negative: from the end).
        sampling_range_end: the index clips start before (exclusive; negative: from the end);
            ``None``: the last start whose clip fits in the video, plus one.
        policy: how a clip reaching past the last frame is completed: ``"repeat_last"`` (its last
            frame again), ``"wrap"`` (its first frames again) or ``"error"`` (``ValueError``).

    Raises:
        ValueError: a parameter out of range (the message names it), here or when sampling.

    Examples:
        >>> import torch
        >>> from ringloader import clips
        >>> meta = clips.VideoMeta(100, 25.0, 0.0, 4.0)
        >>> sampler = clips.random_indices(num_clips=2, num_frames_per_clip=4,
        ...                                num_indices_between_frames=3)
        >>> picked = sampler.frame_indices(meta, torch.Generator().manual_seed(0))
        >>> len(picked), [b - a for a, b in zip(picked[0], picked[0][1:])]
        (2, [3, 3, 3])
    """
    return IndexClips("random", num_clips, num_frames_per_clip, num_indices_between_frames,
                      sampling_range_start, sampling_range_end, policy)


def regular_indices(num_clips: int = 1, num_frames_per_clip: int = 1,
                    num_indices_between_frames: int = 1, sampling_range_start: int = 0,
                    sampling_range_end: Optional[int] = None,
                    policy: str = "repeat_last") -> IndexClips:
    """Clips starting at evenly spaced frame indices (torchcodec's ``clips_at_regular_indices``);
    the parameters are :func:`random_indices`'.

    Examples:
        >>> from ringloader import clips
        >>> meta = clips.VideoMeta(10, 5.0, 0.0, 2.0)
        >>> clips.regular_indices(2, 3, sampling_range_end=-1, policy="wrap").frame_indices(meta)
        [[0, 1, 2], [8, 9, 8]]
    """
    return IndexClips("regular", num_clips, num_frames_per_clip, num_indices_between_frames,
                      sampling_range_start, sampling_range_end, policy)


def random_timestamps(num_clips: int = 1, num_frames_per_clip: int = 1,
                      seconds_between_frames: Optional[float] = None,
                      sampling_range_start: Optional[float] = None,
                      sampling_range_end: Optional[float] = None,
                      policy: str = "repeat_last") -> TimestampClips:
    """Clips starting at random times (torchcodec's ``clips_at_random_timestamps``).

    Args:
        num_clips: clips per video.
        num_frames_per_clip: frames per clip.
        seconds_between_frames: the time between a clip's frames; ``None``: ``1 / average_fps``.
        sampling_range_start: the first time a clip may start at; ``None``: the stream's begin.
        sampling_range_end: the time clips start before (exclusive); ``None``: the last start
            whose clip ends inside the video.
        policy: ``"repeat_last"``, ``"wrap"`` or ``"error"``, as in :func:`random_indices`.

    Examples:
        >>> import torch
        >>> from ringloader import clips
        >>> meta = clips.VideoMeta(100, 25.0, 0.0, 4.0)
        >>> sampler = clips.random_timestamps(num_clips=3, seconds_between_frames=0.5,
        ...                                   num_frames_per_clip=2)
        >>> times = sampler.timestamps(meta, torch.Generator().manual_seed(0))
        >>> [round(b - a, 9) for a, b in times]
        [0.5, 0.5, 0.5]
    """
    return TimestampClips("random", num_clips, None, num_frames_per_clip, seconds_between_frames,
                          sampling_range_start, sampling_range_end, policy)


def regular_timestamps(seconds_between_clip_starts: float, num_frames_per_clip: int = 1,
                       seconds_between_frames: Optional[float] = None,
                       sampling_range_start: Optional[float] = None,
                       sampling_range_end: Optional[float] = None,
                       policy: str = "repeat_last") -> TimestampClips:
    """Clips starting every ``seconds_between_clip_starts`` (torchcodec's
    ``clips_at_regular_timestamps``: the number of clips follows from the video's length); the
    other parameters are :func:`random_timestamps`'.

    Examples:
        >>> from ringloader import clips
        >>> meta = clips.VideoMeta(20, 10.0, 0.0, 2.0)
        >>> clips.regular_timestamps(0.8, num_frames_per_clip=2).frame_indices(meta)
        [[0, 1], [8, 9], [16, 17]]
    """
    return TimestampClips("regular", None, seconds_between_clip_starts, num_frames_per_clip,
                          seconds_between_frames, sampling_range_start, sampling_range_end, policy)


def indices(clips: Any) -> FrameIndices:
    """Clips of the frames at the given indices: one clip (a list of ints) or several (a list of
    equal-length lists, or a 2-D tensor); negative indices count from the end.

    Examples:
        >>> from ringloader import clips
        >>> clips.indices([[0, 4, 8], [1, 5, 9]]).frame_indices(clips.VideoMeta(10, 5.0, 0.0, 2.0))
        [[0, 4, 8], [1, 5, 9]]
    """
    return FrameIndices(clips)


def timestamps(clips: Any) -> Timestamps:
    """Clips of the frames played at the given times in seconds: one clip (a list of floats) or
    several (a list of equal-length lists).

    Examples:
        >>> from ringloader import clips
        >>> clips.timestamps([[0.0, 1.0], [0.5, 1.5]]).frame_indices(clips.VideoMeta(4, 2.0, 0.0, 2.0))
        [[0, 2], [1, 3]]
    """
    return Timestamps(clips)


def as_sampler(clip: Any) -> ClipSampler:
    """``clip`` as a sampler: a :class:`ClipSampler` as it is; a plain list, tuple, range, tensor
    or array as frame indices (:func:`indices`; times need :func:`timestamps`, explicitly).

    Examples:
        >>> from ringloader import clips
        >>> clips.as_sampler([[0, 2], [4, 6]])
        FrameIndices(clips=((0, 2), (4, 6)))
        >>> clips.as_sampler([0.5])
        Traceback (most recent call last):
        ...
        TypeError: a frame index must be an int, got 0.5
    """
    if isinstance(clip, ClipSampler):
        return clip
    if isinstance(clip, (list, tuple, range)) or hasattr(clip, "tolist"):
        return FrameIndices(list(clip) if isinstance(clip, range) else clip)
    raise TypeError(f"clip must be a ringloader.clips sampler (random_indices, regular_indices, "
                    f"random_timestamps, regular_timestamps, indices, timestamps) or a list of "
                    f"frame indices, got {type(clip).__name__}")


def generator_for(seed: int, epoch: int, index: int, position: Optional[int] = None) -> Any:
    """A ``torch.Generator`` for the clip draws of sample ``index`` in ``epoch`` of a run seeded
    with ``seed``: the same generator whatever the thread count or process, and again on resume.
    It is seeded from the sample's augmentation seed in the native pipeline
    (``_C.sample_seed`` of ``_C.row_key(index, position)``; ``position`` defaults to ``index``),
    mixed with an offset of its own so clip draws are independent of the image transforms'.

    Examples:
        >>> from ringloader import clips
        >>> a = clips.generator_for(seed=3, epoch=0, index=5)
        >>> b = clips.generator_for(seed=3, epoch=0, index=5)
        >>> a.initial_seed() == b.initial_seed() != clips.generator_for(3, 1, 5).initial_seed()
        True
    """
    import torch

    seed, epoch, index = (_integer(v, name) for v, name in ((seed, "seed"), (epoch, "epoch"),
                                                            (index, "index")))
    key = _C.row_key(index, index if position is None else _integer(position, "position"))
    sample = _C.sample_seed(seed & _MASK64, epoch & _MASK64, key)
    return torch.Generator().manual_seed(_C.mix64((sample + 2) & _MASK64))
