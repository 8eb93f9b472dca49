"""Video references: ``VideoFile`` and ``VideoBytes``, a video's frames decoded by the native
decoder (``_C.VideoDecoder``) over the system's FFmpeg, as torchcodec's ``VideoDecoder`` decodes
them.

FFmpeg is not part of ringloader: its libraries (``libavformat``, ``libavcodec``, ``libavutil``,
``libswscale``, ``libavfilter`` of the major versions ringloader was built against) are loaded at
run time, the first time a video is opened; without them a video raises ``RuntimeError`` naming
what to install, and images are unaffected.

The decoder scans a video's packets once into a frame table (torchcodec's ``seek_mode="exact"``:
frame ``i`` is the ``i``-th frame in presentation order), seeks to the keyframe at or before a
wanted frame, decodes forward and converts only the frames kept to RGB, with torchcodec 0.17's
conversion (swscale, or FFmpeg's filter graph for widths that are not a multiple of 32 and for
rotated videos), so the frames equal ``torchcodec.decoders.VideoDecoder(...).get_frames_at(...)
.data`` on the same FFmpeg. A stream's rotation (display matrix) is applied as torchcodec applies
it. Frames are ``uint8`` ``[T, 3, H, W]``.

Under ``ringloader.DataLoader``, ``(VideoFile, target)`` samples whose ``transform`` is one of
v2's video steps that run natively (``ringloader.video_batches.native_chain``) are decoded and
transformed in native threads into one batch tensor (``ringloader.video_batches``); other
samples holding these references are decoded in torch's worker processes
(``ringloader.materialize``). Either way the clip sampler draws from ``clips.generator_for`` of
the sample's (seed, epoch, index, position). ``decode()`` itself applies ``transform`` in Python
to the decoded tensor (``[T, C, H, W]`` or ``[N, T, C, H, W]``).

Examples:
    >>> import subprocess
    >>> _ = subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-f", "lavfi", "-i",
    ...                     "testsrc2=size=64x48:rate=10:duration=1", "-pix_fmt", "yuv420p",
    ...                     "clip.mp4"], check=True)
    >>> from ringloader.video import VideoFile
    >>> VideoFile("clip.mp4").decode([0, 5, 9]).shape
    torch.Size([3, 3, 48, 64])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .. import _C

__all__ = ["VideoBytes", "VideoFile", "VideoMetadata", "holds_video", "video_available"]

#: Default largest frame (width * height) a video may have: a decompression-bomb guard.
MAX_FRAME_PIXELS: int = int(_C.VIDEO_MAX_FRAME_PIXELS)
#: Default largest decoded output of one ``decode`` call, in bytes.
MAX_CLIP_BYTES: int = int(_C.VIDEO_MAX_CLIP_BYTES)


def video_available() -> Tuple[bool, str]:
    """``(True, "")`` when videos can be decoded here, else ``(False, what to install)``.

    Examples:
        >>> from ringloader.video import video_available
        >>> ok, why = video_available()
        >>> isinstance(ok, bool) and (ok or "install" in why)
        True
    """
    ok, why = _C.video_available()
    return bool(ok), str(why)


def _require_video() -> None:
    ok, why = video_available()
    if not ok:
        raise RuntimeError(f"ringloader cannot decode videos here: {why}")


@dataclass(frozen=True)
class VideoMetadata:
    """A video stream as the decoder's frame table describes it.

    Attributes:
        num_frames: frames in the stream (packets scanned, as torchcodec's exact mode counts).
        average_fps: ``num_frames / duration_seconds`` (the header's rate when that is 0).
        width, height: the size of the frames returned (after the stream's rotation).
        duration_seconds: ``end_stream_seconds - begin_stream_seconds``.
        begin_stream_seconds: the first frame's presentation time.
        end_stream_seconds: the end of the last frame (its pts plus its duration).
        codec: FFmpeg's codec name (``"h264"``, ``"hevc"``, ``"vp9"``, ``"av1"``...).
        rotation: the display matrix's rotation in degrees (0: none).
        pts_seconds: every frame's presentation time, sorted (frame ``i`` at ``pts_seconds[i]``).
        key_frame_indices: the keyframes' frame indices.

    Examples:
        >>> from ringloader.video import VideoMetadata
        >>> meta = VideoMetadata(2, 2.0, 64, 48, 1.0, 0.0, 1.0, "h264", 0.0, (0.0, 0.5), (0,))
        >>> meta.clip_meta().num_frames
        2
    """

    num_frames: int
    average_fps: float
    width: int
    height: int
    duration_seconds: float
    begin_stream_seconds: float
    end_stream_seconds: float
    codec: str
    rotation: float
    pts_seconds: Tuple[float, ...]
    key_frame_indices: Tuple[int, ...]

    def clip_meta(self) -> Any:
        """This video as :class:`ringloader.clips.VideoMeta`, what clip samplers take."""
        from ..transforms import clips  # lazily: clip sampling is only needed when a sampler is used

        return clips.VideoMeta(num_frames=self.num_frames, average_fps=self.average_fps,
                               begin_stream_seconds=self.begin_stream_seconds,
                               end_stream_seconds=self.end_stream_seconds,
                               pts_seconds=list(self.pts_seconds))


def _metadata(native: dict) -> VideoMetadata:
    return VideoMetadata(num_frames=int(native["num_frames"]),
                         average_fps=float(native["average_fps"]),
                         width=int(native["width"]), height=int(native["height"]),
                         duration_seconds=float(native["duration_seconds"]),
                         begin_stream_seconds=float(native["begin_stream_seconds"]),
                         end_stream_seconds=float(native["end_stream_seconds"]),
                         codec=str(native["codec"]), rotation=float(native["rotation"]),
                         pts_seconds=tuple(native["pts_seconds"]),
                         key_frame_indices=tuple(native["key_frame_indices"]))


Clip = Union[None, Sequence[int], Sequence[Sequence[int]], Any]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) or (hasattr(value, "__index__") and not hasattr(value, "__len__"))


#: What a reference's ``clip`` may be, for the error that refuses anything else.
_CLIP_KINDS = ("a list of frame indices (one clip), a list of such lists (several clips of one "
               "length), a tensor of them, a ringloader.clips sampler (clips.random_indices(...) "
               "and the others, called) or None (every frame)")


def _rows(indices: Any, what: str) -> Tuple[List[List[int]], bool]:
    """Explicit indices as rows of clips, and whether they were one flat clip."""
    if hasattr(indices, "tolist") and not isinstance(indices, (list, tuple)):  # a tensor, an array
        indices = indices.tolist()
    if isinstance(indices, (str, bytes, int)) or callable(indices) or not hasattr(indices, "__iter__"):
        raise TypeError(f"{what}: clip={indices!r} is not a clip: give {_CLIP_KINDS}")
    values = list(indices)
    if all(_is_int(v) for v in values):
        return [[int(v) for v in values]], True
    rows = []
    for row in values:
        if isinstance(row, (str, bytes)) or not hasattr(row, "__iter__"):
            raise TypeError(f"{what}: frame indices must be ints or lists of ints, got {row!r}")
        rows.append([int(v) for v in row])
    return rows, False


class _VideoReference:
    """What VideoFile and VideoBytes share: the clip, the transform, the limits, decoding."""

    def __init__(self, clip: Clip, transform: Optional[Callable], max_frame_pixels: Optional[int],
                 max_clip_bytes: Optional[int]) -> None:
        if clip is not None and not hasattr(clip, "frame_indices"):
            if hasattr(clip, "tolist") and not isinstance(clip, (list, tuple)):
                clip = clip.tolist()  # a tensor or array of indices, as torchcodec takes them
            _rows(clip, self._name())  # checked now: a bad list fails where it is written
        self.clip = clip
        self.transform = transform
        self.max_frame_pixels = MAX_FRAME_PIXELS if max_frame_pixels is None else int(max_frame_pixels)
        self.max_clip_bytes = MAX_CLIP_BYTES if max_clip_bytes is None else int(max_clip_bytes)
        self._meta: Optional[VideoMetadata] = None

    def _name(self) -> str:
        raise NotImplementedError

    def _open(self) -> Any:
        raise NotImplementedError

    def _job(self) -> Tuple[str, Any, str, Optional[Tuple[int, int]], Optional[str]]:
        """How the native clip pool (``_C.ClipPool``) reads this video: ``(path, bytes or None,
        name, (offset, length) or None, key of the bytes or None)``."""
        raise NotImplementedError

    def _decoder(self) -> Any:
        _require_video()
        decoder = self._open()
        if self._meta is None:
            self._meta = _metadata(decoder.metadata)
        return decoder

    @property
    def metadata(self) -> VideoMetadata:
        """The video's :class:`VideoMetadata` (the file is opened and scanned once, then kept)."""
        if self._meta is None:
            self._decoder()
        assert self._meta is not None
        return self._meta

    def decode(self, indices: Clip = None, generator: Any = None) -> Any:
        """The frames of ``indices`` (else of the reference's ``clip``; else every frame) as a
        ``uint8`` tensor: ``[T, 3, H, W]`` for a flat list of frame indices, ``[N, T, 3, H, W]``
        for a list of clips or a :mod:`ringloader.clips` sampler (drawing from ``generator``, a
        ``torch.Generator``; ``None``: torch's global generator). Negative indices count from
        the end. Then ``transform``, when given, is applied to that tensor (in Python)."""
        decoder = self._decoder()
        out = self._decoded(decoder, *self._frames(self.clip if indices is None else indices, generator))
        return self.transform(out) if self.transform is not None else out

    def _frames(self, clip: Clip, generator: Any) -> Tuple[List[List[int]], bool]:
        """The frames ``clip`` names in this video (a sampler drawing from ``generator``), as
        rows of clips, and whether they were one flat clip."""
        meta = self.metadata
        if clip is None:
            return [list(range(meta.num_frames))], True
        if hasattr(clip, "frame_indices"):
            return [list(map(int, r)) for r in clip.frame_indices(meta.clip_meta(), generator)], False
        return _rows(clip, self._name())

    def _decoded(self, decoder: Any, rows: List[List[int]], flat: bool) -> Any:
        """The frames of ``rows`` decoded by ``decoder``: ``[T, 3, H, W]`` or ``[N, T, 3, H, W]``."""
        import torch

        lengths = {len(r) for r in rows}
        if len(lengths) > 1:
            raise ValueError(f"{self._name()}: clips of different lengths {sorted(lengths)} cannot "
                             "be stacked into one tensor")
        frames, _, _ = decoder.get_frames_at([i for r in rows for i in r])
        out = torch.from_numpy(frames)
        if not flat:
            out = out.reshape(len(rows), lengths.pop() if lengths else 0, *out.shape[1:])
        return out

    def decode_played_at(self, seconds: Sequence[float]) -> Any:
        """The frames played at these times (each the frame whose ``pts <= t <`` the next
        frame's pts, as torchcodec's ``get_frames_played_at``): ``uint8`` ``[T, 3, H, W]``; a
        time outside ``[begin_stream_seconds, end_stream_seconds)`` raises ``IndexError``
        naming the range. ``transform`` is applied as in :meth:`decode`."""
        import torch

        frames, _, _ = self._decoder().get_frames_played_at([float(t) for t in seconds])
        out = torch.from_numpy(frames)
        return self.transform(out) if self.transform is not None else out


class _FrameLeaf:
    """What the leaves of a clip (``frame_leaves``) share: the video whose clip decides them."""

    __slots__ = ("video",)

    def __init__(self, video: Any):
        if not isinstance(video, _VideoReference):
            raise TypeError(f"{type(self).__name__}(video=...) needs a ringloader.VideoFile or "
                            f"VideoBytes, got {type(video).__name__}")
        self.video = video

    def _indices(self, drawn: Any) -> Tuple[List[List[int]], bool]:
        """The clip's rows, each index counted from the start (a negative one from the end)."""
        rows, flat = drawn.frames(self.video)
        count = self.video.metadata.num_frames
        out = []
        for row in rows:
            for i in row:
                if not -count <= i < count:
                    raise IndexError(f"{self.video._name()}: frame {i} is out of range (the video "
                                     f"has {count} frames)")
            out.append([i % count for i in row])
        return out, flat

    def value(self, drawn: Any) -> Any:  # pragma: no cover - every leaf has its own
        raise NotImplementedError

    def __reduce__(self) -> Any:
        return (type(self), (self.video,))


#: Classes that wrap a structure of references (``rl.Joint``: its ``structure``), by the
#: attribute holding it: registered by their module, which imports this one.
_WRAPPERS: Dict[type, str] = {}


def holds_video(sample: Any, depth: int = 0) -> bool:
    """True when ``sample`` is or holds (in tuples, lists, namedtuples, dicts, an ``rl.Joint``) a
    video reference or a leaf of one (``rl.ClipIndices``, ``rl.ClipTimes``, ``rl.PerFrame``).

    Examples:
        >>> from ringloader.video import VideoFile, holds_video
        >>> holds_video({"clip": [VideoFile("a.mp4")], "label": 3}), holds_video((1, "a.mp4"))
        (True, False)
    """
    if isinstance(sample, _VideoReference):
        return True
    if depth > 8:
        return False
    if isinstance(sample, _FrameLeaf):
        return True
    inner = _WRAPPERS.get(type(sample))
    if inner is not None:
        return holds_video(getattr(sample, inner), depth + 1)
    if isinstance(sample, (tuple, list)):
        return any(holds_video(v, depth + 1) for v in sample)
    if isinstance(sample, dict):
        return any(holds_video(v, depth + 1) for v in sample.values())
    return False


class VideoFile(_VideoReference):
    """A video file and the frames to decode from it: ``decode()`` returns them as a ``uint8``
    tensor (``[T, 3, H, W]``, or ``[N, T, 3, H, W]`` for several clips).

    The file is read by ringloader itself (``pread``), never through FFmpeg's URL protocols, so
    any name is a file name. Errors name the file: ``FileNotFoundError``; ``ValueError`` for a
    file that is not a video FFmpeg reads, a codec without a decoder, a frame over
    ``max_frame_pixels`` or a clip over ``max_clip_bytes``; ``IndexError`` for a frame index or
    time out of range; ``RuntimeError`` for damaged data (naming the frame) or missing FFmpeg
    libraries (naming what to install).

    Args:
        path: the video file.
        clip: the frames ``decode()`` returns by default: a list of frame indices (one clip), a
            list of such lists (several clips of one length), a :mod:`ringloader.clips` sampler
            (``clips.random_indices(...)`` etc., drawn per call), or ``None``: every frame.
        transform: a callable applied to the decoded tensor (by ``decode()``, in Python; under
            ``rl.DataLoader`` natively when ``video_batches.native_chain`` accepts it).
        max_frame_pixels: the largest ``width * height`` accepted (default
            ``ringloader.video.MAX_FRAME_PIXELS``).
        max_clip_bytes: the largest output of one ``decode`` (default ``MAX_CLIP_BYTES``, 2 GiB).
        byte_range: ``(offset, length)``: the video is these bytes of ``path`` alone (a member of
            an uncompressed tar shard, read in place); None: the whole file.
        name: what errors call it (default ``path``), e.g. ``"shard-000.tar:clip7.mp4"``.

    Examples:
        >>> import subprocess
        >>> _ = subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-f", "lavfi", "-i",
        ...                     "testsrc2=size=64x48:rate=10:duration=1", "-pix_fmt", "yuv420p",
        ...                     "clip.mp4"], check=True)
        >>> import ringloader as rl
        >>> from ringloader import clips
        >>> video = rl.VideoFile("clip.mp4")
        >>> video.metadata.num_frames, video.metadata.width, video.metadata.height
        (10, 64, 48)
        >>> video.decode([9, 0, 5]).shape
        torch.Size([3, 3, 48, 64])
        >>> sampler = clips.regular_indices(num_clips=2, num_frames_per_clip=4)
        >>> rl.VideoFile("clip.mp4", clip=sampler).decode().shape
        torch.Size([2, 4, 3, 48, 64])
    """

    def __init__(self, path: Any, clip: Clip = None, transform: Optional[Callable] = None,
                 max_frame_pixels: Optional[int] = None, max_clip_bytes: Optional[int] = None,
                 byte_range: Optional[Tuple[int, int]] = None, name: Optional[str] = None) -> None:
        import os

        self.path = os.fspath(path)
        self.byte_range = None if byte_range is None else (int(byte_range[0]), int(byte_range[1]))
        if self.byte_range is not None and (self.byte_range[0] < 0 or self.byte_range[1] < 0):
            raise ValueError(f"VideoFile({self.path}): byte_range={byte_range!r} must be (offset, "
                             "length) with both >= 0")
        self.name = self.path if name is None else str(name)
        #: Called before the file is opened to decode (None: nothing): ``rl.VideoShards`` sets it
        #: to its shard's check, so a member of a shard rewritten since raises StaleIndexError.
        self._unchanged: Optional[Callable[[], None]] = None
        super().__init__(clip, transform, max_frame_pixels, max_clip_bytes)

    def _name(self) -> str:
        return self.name

    def _open(self) -> Any:
        if self._unchanged is not None:
            self._unchanged()
        offset, length = self.byte_range or (0, -1)
        return _C.VideoDecoder(self.path, self.max_frame_pixels, self.max_clip_bytes, offset=offset,
                               length=length, name=self.name)

    def _job(self) -> Tuple[str, Any, str, Optional[Tuple[int, int]], Optional[str]]:
        return self.path, None, self.name, self.byte_range, None

    def __repr__(self) -> str:
        where = "" if self.byte_range is None else f", byte_range={self.byte_range!r}"
        return f"VideoFile({self.path!r}{where}, clip={self.clip!r})"


class VideoBytes(_VideoReference):
    """A video held in memory (``bytes``, ``bytearray``, ``memoryview``; e.g. a shard member),
    decoded as :class:`VideoFile` decodes a file; errors name ``name``.

    Args:
        data: the encoded video, whole (the container's bytes, copied once when decoded).
        name: what errors call it (default ``"<video bytes>"``); with an extension it also helps
            FFmpeg recognize the container.
        clip: the frames ``decode()`` returns by default, as for :class:`VideoFile`.
        transform: a callable applied to the decoded tensor, in Python.
        max_frame_pixels: the largest ``width * height`` accepted.
        max_clip_bytes: the largest output of one ``decode``.

    Examples:
        >>> import subprocess
        >>> _ = subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-f", "lavfi", "-i",
        ...                     "testsrc2=size=64x48:rate=10:duration=1", "-pix_fmt", "yuv420p",
        ...                     "clip.mp4"], check=True)
        >>> import ringloader as rl
        >>> with open("clip.mp4", "rb") as f:
        ...     video = rl.VideoBytes(f.read(), name="clip.mp4")
        >>> video.decode([2, 3]).shape
        torch.Size([2, 3, 48, 64])
        >>> bool((video.decode([2]) == rl.VideoFile("clip.mp4").decode([2])).all())
        True
    """

    def __init__(self, data: Any, clip: Clip = None, transform: Optional[Callable] = None,
                 name: str = "<video bytes>", max_frame_pixels: Optional[int] = None,
                 max_clip_bytes: Optional[int] = None) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"VideoBytes({name}): data must be bytes, bytearray or memoryview, got "
                            f"{type(data).__name__}")
        self.data = data
        self.name = str(name)
        super().__init__(clip, transform, max_frame_pixels, max_clip_bytes)

    def _name(self) -> str:
        return self.name

    def _open(self) -> Any:
        view = memoryview(self.data).cast("B")
        return _C.VideoDecoder.from_bytes(view, self.name, self.max_frame_pixels, self.max_clip_bytes)

    def _job(self) -> Tuple[str, Any, str, Optional[Tuple[int, int]], Optional[str]]:
        """The bytes' key is a digest of them (kept for immutable ``bytes``): the same bytes,
        the same key, so a native thread keeps one decoder open on them across batches."""
        import hashlib

        key = self.__dict__.get("_key")
        if key is None:
            view = memoryview(self.data).cast("B")
            key = f"{len(view)}:{hashlib.blake2b(view, digest_size=16).hexdigest()}"
            if isinstance(self.data, bytes):
                self.__dict__["_key"] = key
        return "", self.data, self.name, None, key

    def __repr__(self) -> str:
        return f"VideoBytes(<{len(self.data)} bytes>, name={self.name!r}, clip={self.clip!r})"
