"""Video clips batched natively: a batch's clips decoded by ``_C.ClipPool`` (native threads, each
with its own FFmpeg decoder per open file, the GIL released) straight into the rows of one batch
tensor, after torchvision v2's video transforms run natively with one draw per clip.

:func:`native_chain` says whether a transform runs natively: v2's ``RandomResizedCrop``,
``Resize``, ``CenterCrop``, ``RandomCrop`` (no padding) and ``RandomHorizontalFlip`` (bilinear,
antialiased resizes: torch's uint8 kernel, so the levels equal v2's on the decoded
``tv_tensors.Video`` for the same draws), then per-level steps (``ToDtype``, ``Normalize``,
``ConvertImageDtype``), whose value for each of the 256 levels of each channel is computed once
by torchvision itself. The geometric draws come from the sample's augmentation seed (the key
every image augmentation has) and the clip sampler's from ``clips.generator_for`` of the same
key, so a batch is the same for any thread count and on resume.

:class:`VideoClipBatches` serves a Dataset whose samples are ``(VideoFile, target)`` (an
``rl.VideoFolder``, or a Dataset of such pairs) by whole batches of keys; ``stats()`` counts the
decode work (frames decoded per frame kept).
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import _C
from ..transforms import clips as _clips

__all__ = ["native_chain", "VideoClipBatches", "native_video_source"]

_MASK64 = (1 << 64) - 1


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


def native_chain(transform: Any) -> Tuple[Optional[Tuple[List[Dict[str, Any]], Optional[List[float]]]], str]:
    """``((steps, levels), "")`` when ``transform`` runs natively on a clip (``levels``: None for
    a uint8 output, else the 3 x 256 float32 values of the levels), else ``(None, why not)``.

    Examples:
        >>> import torch
        >>> from torchvision.transforms import v2
        >>> from ringloader.video_batches import native_chain
        >>> chain, why = native_chain(v2.Compose([v2.RandomResizedCrop(8), v2.RandomHorizontalFlip(),
        ...                                       v2.ToDtype(torch.float32, scale=True)]))
        >>> [s["kind"] for s in chain[0]], len(chain[1]), why
        (['random_resized_crop', 'horizontal_flip'], 768, '')
        >>> native_chain(v2.ColorJitter(0.4))[1]
        'ColorJitter has no native video equivalent'
    """
    steps: List[Dict[str, Any]] = []
    tail: List[Any] = []
    for t in _flatten(transform):
        if type(t).__name__ in _PER_LEVEL and type(t).__module__.startswith("torchvision.transforms.v2"):
            tail.append(t)
            continue
        if tail:
            return None, f"{type(t).__name__} follows {type(tail[-1]).__name__}: not native on video"
        step, why = _geometric(t)
        if step is None or why is not None:
            return None, str(why)
        steps.append(step)
    if not tail:
        return (steps, None), ""
    import torch
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    levels = torch.arange(256, dtype=torch.uint8).view(1, 1, 1, 256).expand(1, 3, 1, 256).contiguous()
    try:
        out = v2.Compose(tail)(tv_tensors.Video(levels))
    except Exception as error:  # noqa: BLE001 - v2's own refusal is the reason
        return None, f"{type(tail[0]).__name__}...: {error}"
    if out.dtype == torch.uint8 and torch.equal(out.as_subclass(torch.Tensor), levels):
        return (steps, None), ""
    if out.dtype != torch.float32 or tuple(out.shape) != (1, 3, 1, 256):
        return None, f"the transform's output dtype {out.dtype} is not native on video (uint8 or float32)"
    return (steps, out.reshape(-1).tolist()), ""


def _reference(sample: Any) -> Tuple[Any, Optional[str]]:
    from ..sources.video import VideoFile

    if isinstance(sample, tuple) and len(sample) == 2 and isinstance(sample[0], VideoFile):
        return sample[0], None
    return None, "its samples are not (VideoFile, target) pairs"


class VideoClipBatches:
    """A map-style source of whole batches: ``source[keys]`` (a list of ``SampleKey``) decodes
    the keys' clips natively into one ``[B, ..., T, 3, H, W]`` tensor and returns
    ``(clips, targets)``.

    Args:
        dataset: ``rl.VideoFolder`` or a Dataset of ``(VideoFile, target)``; every reference must
            carry the same native ``transform`` (see :func:`native_chain`).
        threads: native decode threads.
        on_error: ``"raise"`` (the error names the file and the frame, with a note naming the
            sample) or ``"skip"`` (the batch goes on without the clip).
    """

    def __init__(self, dataset: Any, threads: int, on_error: str = "raise"):
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error={on_error!r}: a native video batch takes 'raise' or 'skip'")
        self.dataset, self.threads, self.on_error = dataset, max(int(threads), 1), on_error
        first, why = _reference(dataset[0]) if len(dataset) else (None, "the dataset is empty")
        if first is None:
            raise ValueError(f"not a native video dataset: {why}")
        chain, why = native_chain(first.transform)
        if chain is None:
            raise ValueError(f"not a native video transform: {why}")
        self.steps, self.levels = chain
        self.transform = first.transform
        self._chains: Dict[int, Any] = {}  # id -> (transform, its chain): other objects, same chain
        self.max_frame_pixels, self.max_clip_bytes = first.max_frame_pixels, first.max_clip_bytes
        self._pool: Any = None
        self._pid = 0
        self._meta: Dict[str, Any] = {}
        self._lock = threading.Lock()
        self.frames_decoded = self.frames_kept = self.clips = self.skipped = 0

    def __getstate__(self) -> Dict[str, Any]:  # to a worker process: no threads, no cache
        state = dict(self.__dict__)
        state.update(_pool=None, _pid=0, _meta={}, _lock=None)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.dataset)

    def _pool_here(self) -> Any:
        import os

        if self._pool is None or self._pid != os.getpid():  # a forked child starts its own threads
            self._pool = _C.ClipPool(self.threads, self.max_frame_pixels, self.max_clip_bytes)
            self._pid = os.getpid()
        return self._pool

    def _metadata(self, refs: Sequence[Any]) -> List[Any]:
        from ..sources.video import _metadata

        missing = sorted({r.path for r in refs if r.path not in self._meta})
        failed: Dict[str, BaseException] = {}  # not kept: each raise gets an error of its own
        if missing:
            for path, meta in zip(missing, self._pool_here().probe(missing, [])):
                if isinstance(meta, BaseException):
                    failed[path] = meta
                else:
                    self._meta[path] = _metadata(meta)
        return [failed[r.path] if r.path in failed else self._meta[r.path] for r in refs]

    def _count(self, clips: int = 0, frames_decoded: int = 0, frames_kept: int = 0, skipped: int = 0) -> None:
        """Adds to the counters of stats() under the lock: two iterators of one loader batch from
        this source on their own threads at once, and a bare ``+=`` from each can lose counts."""
        with self._lock:
            self.clips += clips
            self.frames_decoded += frames_decoded
            self.frames_kept += frames_kept
            self.skipped += skipped

    def stats(self) -> Dict[str, Any]:
        """Decode work so far: clips, frames decoded and kept, decoded per kept, clips skipped."""
        with self._lock:  # one moment's counts, not a mix of two batches'
            clips, decoded, kept, skipped = self.clips, self.frames_decoded, self.frames_kept, self.skipped
        return {"clips": clips, "frames_decoded": decoded, "frames_kept": kept,
                "frames_decoded_per_kept": decoded / kept if kept else 0.0, "skipped": skipped}

    def _fail(self, error: BaseException, key: Any, path: str) -> None:
        from ..sources._fallback import _describe

        error.add_note(f"while decoding the clip of sample {key.index} of {_describe(self.dataset)} "
                       f"({path}) natively (ringloader.video_batches)")
        raise error

    def _check_alike(self, sample: Any, key: Any) -> None:
        """Every sample must be a (VideoFile, target) with the first's chain and limits: one
        batch runs one chain on one pool."""
        ref, why = _reference(sample)
        if ref is None:
            raise TypeError(f"sample {key.index}: {why} (sample 0 is), so its clips cannot be "
                            "batched natively with the others")
        if ref.transform is not self.transform:
            known = self._chains.get(id(ref.transform))
            if known is None or known[0] is not ref.transform:
                known = (ref.transform, native_chain(ref.transform)[0])
                self._chains[id(ref.transform)] = known
            if known[1] != (self.steps, self.levels):
                raise ValueError(f"sample {key.index} ({ref.path}): its transform {ref.transform!r} "
                                 f"is not sample 0's ({self.transform!r}); native clip batches run "
                                 "one transform for all samples: give every VideoFile the same one")
        if (ref.max_frame_pixels, ref.max_clip_bytes) != (self.max_frame_pixels, self.max_clip_bytes):
            raise ValueError(f"sample {key.index} ({ref.path}): its max_frame_pixels/max_clip_bytes "
                             "differ from sample 0's; native clip batches apply one limit to all "
                             "samples: give every VideoFile the same")

    def __getitem__(self, keys: Sequence[Any]) -> Any:
        import torch

        samples = [self.dataset[k.index] for k in keys]
        for key, sample in zip(keys, samples):
            self._check_alike(sample, key)
        refs = [s[0] for s in samples]
        metas = self._metadata(refs)
        rows, good, shape = [], [], None
        for b, (key, ref, meta) in enumerate(zip(keys, refs, metas)):
            if isinstance(meta, BaseException):
                if self.on_error == "raise":
                    self._fail(meta, key, ref.path)
                self._count(skipped=1)
                continue
            clip = ref.clip
            if clip is None:
                frames, lead = [list(range(meta.num_frames))], ()
            elif hasattr(clip, "frame_indices"):
                draws = _clips.generator_for(key.seed, key.epoch, key.index, key.position)
                try:  # a clip this video is too short for (policy='error'): the clip's error
                    frames = [list(map(int, r)) for r in clip.frame_indices(meta.clip_meta(), draws)]
                except ValueError as why:
                    if self.on_error == "raise":
                        self._fail(ValueError(f"{ref.path}: {why}"), key, ref.path)
                    self._count(skipped=1)
                    continue
                lead = (len(frames),)
            else:
                from ..sources.video import _rows

                frames, flat = _rows(clip, ref.path)
                lead = () if flat else (len(frames),)
            flat_frames = [i for r in frames for i in r]
            try:  # a crop larger than this video's frames: the clip's error, as a decode's is
                size = _C.video_chain_output_size(self.steps, meta.width, meta.height)
            except ValueError as why:
                if self.on_error == "raise":
                    self._fail(ValueError(f"{ref.path}: {why}"), key, ref.path)
                self._count(skipped=1)
                continue
            this = lead + (len(frames[0]) if frames else 0, 3) + tuple(size)
            if shape is None:
                shape = this
            elif this != shape:
                error = ValueError(f"{ref.path}: its clip is {list(this)}, the batch's first "
                                   f"{list(shape)}: clips of one batch must have one shape")
                if self.on_error == "raise":
                    self._fail(error, key, ref.path)
                self._count(skipped=1)
                continue
            seed = _C.sample_seed(key.seed & _MASK64, key.epoch & _MASK64, _C.row_key(key.index, key.position))
            rows.append((ref.path, flat_frames, seed))
            good.append(b)
        dtype = torch.uint8 if self.levels is None else torch.float32
        out = torch.empty((len(rows),) + (shape or (0, 3, 0, 0)), dtype=dtype)
        if rows:
            results = self._pool_here().decode([r[0] for r in rows], [], [r[1] for r in rows],
                                               [r[2] for r in rows], self.steps, self.levels,
                                               out.view(torch.uint8).reshape(-1).numpy(),
                                               int(shape[-2]), int(shape[-1]))
        else:
            results = []
        keep = []
        for j, (error, decoded, kept) in enumerate(results):
            self._count(frames_decoded=decoded, frames_kept=kept)
            if error is not None:
                if self.on_error == "raise":
                    self._fail(error, keys[good[j]], rows[j][0])
                self._count(skipped=1)
                continue
            self._count(clips=1)
            keep.append(j)
        if len(keep) != len(rows):
            out = out[keep]
        targets = [samples[good[j]][1] for j in keep]
        from torch.utils.data import default_collate

        return out, default_collate(targets) if targets else torch.empty(0, dtype=torch.int64)


def native_video_source(dataset: Any, threads: int, on_error: str = "raise") -> Tuple[Optional[VideoClipBatches], str]:
    """``(VideoClipBatches, "")`` when ``dataset``'s clips can be batched natively, else
    ``(None, why not)``: the hook the DataLoader's video path asks."""
    try:
        return VideoClipBatches(dataset, threads, on_error), ""
    except (ValueError, TypeError, ImportError) as error:
        return None, str(error)


class _Prefetched:
    """The batches of ``batches`` (lists of keys) from ``source``, made ``depth`` ahead on a
    thread of their own (the decode runs without the GIL, so the training step goes on)."""

    def __init__(self, source: VideoClipBatches, batches: Any, depth: int, timeout: float):
        import queue

        self._queue: Any = queue.Queue(maxsize=max(depth, 1))
        self._stop = threading.Event()
        self._timeout = timeout
        # The thread holds the queue and the flag, not this iterator: dropping it (a loop left)
        # runs __del__, which stops the thread.
        self._thread = threading.Thread(target=_Prefetched._run, args=(source, batches, self._queue, self._stop),
                                        daemon=True, name="ringloader-video-batches")
        self._thread.start()

    @staticmethod
    def _put(queue: Any, stop: threading.Event, item: Any) -> bool:
        """Queues ``item``; False when the consumer left (``close()``) before there was room."""
        while not stop.is_set():
            try:
                queue.put(item, timeout=0.1)
                return True
            except Exception:  # noqa: BLE001 - queue.Full: look at the stop flag again
                continue
        return False

    @staticmethod
    def _run(source: VideoClipBatches, batches: Any, queue: Any, stop: threading.Event) -> None:
        try:
            for keys in batches:
                if not _Prefetched._put(queue, stop, (True, source[list(keys)])):
                    return
            _Prefetched._put(queue, stop, (False, None))
        except BaseException as error:  # noqa: BLE001 - handed to the consumer
            _Prefetched._put(queue, stop, (False, error))

    def __iter__(self) -> "_Prefetched":
        return self

    def __next__(self) -> Any:
        import queue

        from .._C import LoaderTimeoutError

        try:
            ok, item = self._queue.get(timeout=self._timeout if self._timeout > 0 else None)
        except queue.Empty:
            raise LoaderTimeoutError(f"no video batch within timeout={self._timeout:g} s from the "
                                     "native clip decoder") from None
        if ok:
            return item
        self._stop.set()
        if item is None:
            raise StopIteration
        raise item

    def close(self) -> None:
        self._stop.set()

    def __del__(self) -> None:
        self._stop.set()


class NativeVideoLoader:
    """What the DataLoader's generic path iterates for a video dataset whose clips batch
    natively: ``source``'s batches over ``batches`` (the loader's planned batches of keys),
    prefetched ``prefetch`` deep (0: made when asked). Each ``iter()`` first draws the base
    seed torch's DataLoader iterator draws from ``generator``, so the planned order and the RNG
    consumption are torch's."""

    def __init__(self, source: VideoClipBatches, batches: Any, prefetch: int, timeout: float,
                 generator: Any = None):
        self.source, self.batches, self.prefetch, self.timeout = source, batches, prefetch, timeout
        self.generator = generator

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Any:
        import torch

        torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        if self.prefetch <= 0:
            return (self.source[list(keys)] for keys in self.batches)
        return _Prefetched(self.source, self.batches, self.prefetch, self.timeout)


#: Why a video dataset's clips are batched natively (``describe()``).
NATIVE_REASON = ("its samples are (VideoFile, target) with a native video transform: clips are "
                 "decoded and transformed in native threads (ringloader.video_batches), batches "
                 "collated there")


def for_loader(dataset: Any, args: Any, num_workers: int) -> Optional[VideoClipBatches]:
    """The DataLoader's hook: a native source for ``dataset`` when its clips batch natively
    (no ``collate_fn``; ``num_workers`` native threads), else None (torch's worker processes)."""
    if args.collate_fn is not None or args.batch_size is None:
        return None
    source, _ = native_video_source(dataset, max(int(num_workers), 1), args.on_error)
    return source
