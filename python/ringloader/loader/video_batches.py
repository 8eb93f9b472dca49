"""Video clips batched natively: a batch's clips decoded by ``_C.ClipPool`` (native threads, each
with its own FFmpeg decoder per open file, the GIL released) straight into the rows of one batch
tensor, after torchvision v2's video transforms run natively with one draw per clip.

:func:`native_chain` says whether a transform runs natively: v2's ``RandomResizedCrop``,
``Resize``, ``CenterCrop``, ``RandomCrop`` (no padding) and ``RandomHorizontalFlip`` (bilinear,
antialiased resizes: torch's uint8 kernel, so the levels equal v2's on the decoded
``tv_tensors.Video`` for the same draws), then per-level steps (``ToDtype``, ``Normalize``,
``ConvertImageDtype``), whose value for each of the 256 levels of each channel is computed once
by torchvision itself, and ``UniformTemporalSubsample`` anywhere among them (which frames of each
clip are kept, as torchvision picks them, chosen before decoding). The geometric draws come from
the sample's augmentation seed (the key every image augmentation has) and the clip sampler's
from ``clips.generator_for`` of the same key, so a batch is the same for any thread count and on
resume.

:class:`VideoClipBatches` serves a Dataset whose samples are ``(VideoFile, target)`` (an
``rl.VideoFolder``, or a Dataset of such pairs, or of any structure holding one video
reference at one place: ``_clip_samples``; a ``VideoFile`` may be a byte range of a file, a
tar shard's member) or ``(VideoBytes, target)`` (decoded from memory through a custom
``AVIOContext``; each native thread keeps a decoder open on a copy of the bytes, found again by
their digest) by whole batches of keys; ``stats()`` counts the decode work (frames decoded per
frame kept).
"""

from __future__ import annotations

import math
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import _C
# What the DataLoader iterates lives in _video_loader; it is found here, beside its source.
from ._video_loader import NativeVideoLoader, _Prefetched, check_unchanged  # noqa: F401
from . import _clip_samples
from ._video_chain import _PER_LEVEL, _flatten, _geometric, _joint_refusal, _subsample
from ..transforms import clips as _clips

__all__ = ["native_chain", "VideoClipBatches", "native_video_source"]

_MASK64 = (1 << 64) - 1


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
        if type(t).__name__ == "UniformTemporalSubsample" and type(t).__module__.startswith("torchvision.transforms.v2"):
            # Which frames of each clip are kept (no draws; per frame steps commute with it):
            # chosen before decoding, so the frames left out are never converted.
            steps.append({"kind": "temporal_subsample", "num_samples": int(t.num_samples)})
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


#: A sample's own errors (reading it, planning or decoding its clip), under ``on_error``; a
#: ``StaleIndexError`` (a shard rewritten since it was indexed) is the dataset's, and raises.
_SAMPLE_ERRORS = (ValueError, IndexError, OSError, RuntimeError)
#: Transforms whose chains a source keeps (by id) before it forgets them all.
_CHAINS_KEPT = 64


def _where(ref: Any) -> str:
    """What errors call a reference: its file (or name); None: a sample that could not be read."""
    return ref._name() if ref is not None else "its sample could not be read"


def _ident(job: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """What a job's metadata is kept under: its file and byte range, or its bytes' key."""
    return ("file", job[0], job[3]) if job[1] is None else ("memory", job[4])


class _KeptTargets(list):
    """A refill batch's targets (``batch(..., refill=True)``), with the names of their clips."""

    names: List[str] = []


class VideoClipBatches:
    """A map-style source of whole batches: ``source[keys]`` (a list of ``SampleKey``) decodes
    the keys' clips natively into one ``[B, ..., T, 3, H, W]`` tensor and returns the batch
    (:meth:`deliver`: ``(clips, targets)`` for pairs).

    Args:
        dataset: ``rl.VideoFolder`` or a Dataset of ``(VideoFile, target)`` or ``(VideoBytes,
            target)`` (decoded from memory, or a file's byte range), or of any structure holding
            one video reference at the same place in every sample; every reference must
            carry the same native ``transform`` (see :func:`native_chain`).
        threads: native decode threads.
        on_error: ``"raise"`` (the error names the file and the frame, with a note naming the
            sample), ``"skip"`` (the batch goes on without the clip) or ``"replace"`` (the row
            gets the clip of a substitute sample, tried in the order an image's are: drawn from
            the row's seed, ``_C.replace_candidates``, with the row's own clip and transform
            draws; the batch keeps its size; the clip's error stands when none decodes).
        pin_memory: the batches in pinned (page-locked) memory when CUDA is available
            (``torch.cuda.is_available()``), as torch's ``pin_memory=True`` gives them: the clips
            decoded straight into a pinned buffer, the targets pinned after collation; plain
            memory otherwise.
        collate_fn: called on each batch's samples as torch's DataLoader calls it, each sample
            with its clip (a view of its row) in place of its video reference; None: torch's
            ``default_collate`` of the rest, the clips put where the samples hold them.
    """

    def __init__(self, dataset: Any, threads: int, on_error: str = "raise", pin_memory: bool = False,
                 collate_fn: Any = None):
        if on_error not in ("raise", "skip", "replace"):
            raise ValueError(f"on_error={on_error!r}: a native video batch takes 'raise', 'skip' or "
                             "'replace'")
        self.dataset, self.threads, self.on_error = dataset, max(int(threads), 1), on_error
        sample, why = _clip_samples.first_sample(dataset, _SAMPLE_ERRORS)
        if sample is None:
            raise ValueError(f"not a native video dataset: {why}")
        #: Where a sample holds its clip; pair: (VideoFile, target) samples, batched as
        #: (clips, collated targets); else the collated sample with the clips at ``path``.
        self.path, _ = _clip_samples.locate(sample)
        #: An rl.Joint sample: its structure is delivered, the clip at ``out_path`` in it.
        self.joint = self.path[:1] == (_clip_samples.JOINT,)
        self.out_path = self.path[1:] if self.joint else self.path
        self.pair = self.path == (0,) and type(sample) is tuple and len(sample) == 2
        self.collate_fn = collate_fn
        first = _clip_samples.at(sample, self.path)
        if self.joint:
            why = _joint_refusal(sample.transform)
            if why is not None:
                raise ValueError(f"not a native video transform for a Joint: {why}")
        chain, why = native_chain(self._transform_of(sample, first))
        if chain is None:
            raise ValueError(f"not a native video transform: {why}")
        self.chain = chain
        self.steps = [s for s in chain[0] if s["kind"] != "temporal_subsample"]  # the native chain's
        self.temporal = [s["num_samples"] for s in chain[0] if s["kind"] == "temporal_subsample"]
        self.levels = chain[1]
        self.transform = self._transform_of(sample, first)
        self._chains: Dict[int, Any] = {}  # id -> (transform, its chain): other objects, same chain
        self.max_frame_pixels, self.max_clip_bytes = first.max_frame_pixels, first.max_clip_bytes
        self.pin_memory = bool(pin_memory) and _cuda_available()
        self._pool: Any = None
        self._pid = 0
        self._meta: Dict[str, Any] = {}
        self._lock = threading.Lock()
        self.frames_decoded = self.frames_kept = self.clips = self.skipped = self.replaced = 0

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
        """Each reference's VideoMetadata, kept per file (and byte range) with the file's
        identity (device, inode, size, mtime, ctime: ``_source.file_identity``) when it was
        probed: a file replaced or rewritten since (between epochs, say) is probed again, so its
        clips are drawn from its frames as they are now (the pool reopens such a file too).
        Bytes in memory are kept under their key (a digest of them). A ``rl.VideoShards`` member
        whose shard was rewritten since raises ``StaleIndexError`` (its check, once a shard)."""
        from ..core._source import file_identity
        from ..sources.video import _metadata

        for check in {r.path: r._unchanged for r in refs if getattr(r, "_unchanged", None) is not None}.values():
            check()
        listed = [r._job() for r in refs]
        idents = [_ident(j) for j in listed]
        jobs = dict(zip(idents, listed))
        now: Dict[Any, Any] = {}
        for ident, job in jobs.items():
            try:
                now[ident] = file_identity(job[0]) if job[1] is None else "memory"
            except OSError:
                now[ident] = None  # gone or unreadable: the probe's error names it
        missing = sorted((i for i, stamp in now.items()
                          if stamp is None or self._meta.get(i, (None, None))[0] != stamp), key=repr)
        failed: Dict[Any, BaseException] = {}  # not kept: each raise gets an error of its own
        if missing:
            for ident, meta in zip(missing, self._probe([jobs[i] for i in missing])):
                if isinstance(meta, BaseException):
                    failed[ident] = meta
                    self._meta.pop(ident, None)
                else:
                    self._meta[ident] = (now[ident], _metadata(meta))
        return [failed[i] if i in failed else self._meta[i][1] for i in idents]

    def _probe(self, jobs: Sequence[Tuple[Any, ...]]) -> List[Any]:
        return self._pool_here().probe([j[0] for j in jobs], [j[1] for j in jobs], names=[j[2] for j in jobs],
                                       ranges=[j[3] for j in jobs], keys=[j[4] for j in jobs])

    def _count(self, clips: int = 0, frames_decoded: int = 0, frames_kept: int = 0, skipped: int = 0,
               replaced: int = 0) -> None:
        """Adds to the counters of stats() under the lock: two iterators of one loader batch from
        this source on their own threads at once, and a bare ``+=`` from each can lose counts."""
        with self._lock:
            self.clips += clips
            self.frames_decoded += frames_decoded
            self.frames_kept += frames_kept
            self.skipped += skipped
            self.replaced += replaced

    def stats(self) -> Dict[str, Any]:
        """Decode work so far: clips, frames decoded and kept, decoded per kept, clips skipped
        and replaced."""
        with self._lock:  # one moment's counts, not a mix of two batches'
            clips, decoded, kept, skipped = self.clips, self.frames_decoded, self.frames_kept, self.skipped
            replaced = self.replaced
        return {"clips": clips, "frames_decoded": decoded, "frames_kept": kept,
                "frames_decoded_per_kept": decoded / kept if kept else 0.0, "skipped": skipped,
                "replaced": replaced}

    def _fail(self, error: BaseException, key: Any, path: str) -> None:
        from ..sources._fallback import _describe

        error.add_note(f"while decoding the clip of sample {key.index} of {_describe(self.dataset)} "
                       f"({path}) natively (ringloader.video_batches)")
        raise error

    def _check_alike(self, sample: Any, key: Any) -> None:
        """Every sample must hold its video where sample 0 does, with the first's chain and limits: one
        batch runs one chain on one pool."""
        ref, why = _clip_samples.reference(sample, self.path)
        if ref is None:
            raise TypeError(f"sample {key.index}: {why}, so its clips cannot be batched natively "
                            "with sample 0's")
        if self.pair and len(sample) != 2:  # as torch's default_collate refuses samples of other sizes
            raise TypeError(f"sample {key.index} ({_where(ref)}) is a tuple of {len(sample)}, sample 0 a "
                            "(video, target) pair: each sample of a batch must have the same size")
        transform = self._transform_of(sample, ref)
        if transform is not self.transform:
            known = self._chains.get(id(transform))
            if known is None or known[0] is not transform:
                if len(self._chains) >= _CHAINS_KEPT:  # a transform built in every __getitem__
                    self._chains.clear()
                known = (transform, native_chain(transform)[0] if not self.joint or
                         _joint_refusal(transform) is None else None)
                self._chains[id(transform)] = known
            if known[1] != self.chain:
                raise ValueError(f"sample {key.index} ({_where(ref)}): its transform {transform!r} "
                                 f"is not sample 0's ({self.transform!r}); native clip batches run "
                                 "one transform for all samples: give every VideoFile the same one")
        if (ref.max_frame_pixels, ref.max_clip_bytes) != (self.max_frame_pixels, self.max_clip_bytes):
            raise ValueError(f"sample {key.index} ({_where(ref)}): its max_frame_pixels/max_clip_bytes "
                             "differ from sample 0's; native clip batches apply one limit to all "
                             "samples: give every VideoFile the same")

    def _plan(self, key: Any, ref: Any, meta: Any) -> Tuple[List[int], int, Tuple[int, ...]]:
        """The clip of ``key``: its frames (flat), the seed of its transform's draws and its
        shape; ValueError naming the file when the clip cannot be made (too short for a clip with
        policy='error', a crop larger than the frames)."""
        if isinstance(meta, BaseException):
            raise meta
        clip = ref.clip
        if clip is None:
            frames, lead = [list(range(meta.num_frames))], ()
        elif hasattr(clip, "frame_indices"):
            draws = _clips.generator_for(key.seed, key.epoch, key.index, key.position)
            try:  # a clip this video is too short for (policy='error'): the clip's error
                frames = [list(map(int, r)) for r in clip.frame_indices(meta.clip_meta(), draws)]
            except ValueError as why:
                raise ValueError(f"{_where(ref)}: {why}") from None
            lead = (len(frames),)
        else:
            from ..sources.video import _rows

            frames, flat = _rows(clip, _where(ref))
            lead = () if flat else (len(frames),)
        frames = _subsample(frames, self.temporal)
        try:  # a crop larger than this video's frames: the clip's error, as a decode's is
            size = _C.video_chain_output_size(self.steps, meta.width, meta.height)
        except ValueError as why:
            raise ValueError(f"{_where(ref)}: {why}") from None
        shape = lead + (len(frames[0]) if frames else 0, 3) + tuple(size)
        seed = _C.sample_seed(key.seed & _MASK64, key.epoch & _MASK64, _C.row_key(key.index, key.position))
        return [i for r in frames for i in r], seed, shape

    @staticmethod
    def _row(ref: Any, frames: List[int], seed: int) -> Tuple[Any, ...]:
        """A clip's decode job: (path, bytes, name, byte range, key, frames, seed)."""
        return ref._job() + (frames, seed)

    def clip_bytes(self, key: Any) -> int:
        """The bytes of the clip ``key`` makes (its shape times the output's element size); what
        the loader sizes its clip batch slots by (``_video_loader.ClipSlots``). Errors as :meth:`_plan`."""
        ref, why = _clip_samples.reference(self.dataset[key.index], self.path)
        if ref is None:
            raise ValueError(f"sample {key.index}: {why}")
        _, _, shape = self._plan(key, ref, self._metadata([ref])[0])
        return self._nbytes(1, shape)

    def _nbytes(self, rows: int, shape: Tuple[int, ...]) -> int:
        """The bytes of ``rows`` clips of ``shape`` in the output's dtype."""
        return rows * math.prod(int(n) for n in shape) * (1 if self.levels is None else 4)

    def __getitem__(self, keys: Sequence[Any]) -> Any:
        return self.deliver(*self.batch(keys))

    def _transform_of(self, sample: Any, ref: Any) -> Any:
        """The transform a sample's clip gets: its Joint's, else its reference's."""
        return sample.transform if self.joint else ref.transform

    def _target(self, sample: Any, ref: Any, meta: Any, key: Any, seed: int) -> Any:
        """What of ``sample`` is collated, its frame leaves filled: a pair's target, else the
        sample with a 0 where its clip is (put back by :meth:`deliver`); a Joint's structure
        with its boxes and keypoints moved by the clip's draws (``seed``)."""
        if self.pair:
            return _clip_samples.with_leaves(sample[1], ref, meta, key)
        if not self.joint:
            return _clip_samples.with_leaves(_clip_samples.put(sample, self.path, 0), ref, meta, key)
        structure = _clip_samples.with_leaves(sample.structure, ref, meta, key)
        ops = _C.video_chain_plan(self.steps, meta.width, meta.height, seed, every_step=True)
        structure = _clip_samples.moved(structure, self.steps, ops, (meta.height, meta.width), _where(ref))
        return _clip_samples.put(structure, self.out_path, 0)

    def _allocate(self, rows: int, shape: Tuple[int, ...], slots: Any, stop: Any) -> Any:
        """The batch tensor, on a buffer of its own charged to ``slots`` (None: uncounted)
        until its last view is freed; None when ``stop`` was set while waiting for room."""
        import numpy as np
        import torch

        nbytes = self._nbytes(rows, shape)
        if slots is not None and not slots.acquire(nbytes, stop):
            return None
        # Pinned: a view of torch's own pinned tensor, never a tensor over its numpy array (a
        # non_blocking copy to the GPU records its stream on the allocation only through torch's
        # storage, so the block is not reused while a copy still reads it). The bytes are
        # released when the buffer's owner goes: the storage, or the array (any slice keeps it).
        if self.pin_memory:
            memory = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            owner = memory.untyped_storage()
        else:
            owner = np.empty(nbytes, dtype=np.uint8)
            memory = torch.from_numpy(owner)
        if slots is not None:
            slots.track(owner, nbytes)
        return memory.view(torch.uint8 if self.levels is None else torch.float32).reshape((rows,) + tuple(shape))

    def _decode(self, rows: List[Tuple[Any, ...]], out: Any, shape: Tuple[int, ...]) -> List[Any]:
        """Decodes ``rows`` (``_row``'s jobs) into the rows of ``out``: each clip's (error or
        None), counted in stats()."""
        import torch

        if not rows:
            return []
        results = self._pool_here().decode([r[0] for r in rows], [r[1] for r in rows], [r[5] for r in rows],
                                           [r[6] for r in rows], self.steps, self.levels,
                                           out.view(torch.uint8).reshape(-1).numpy(),
                                           int(shape[-2]), int(shape[-1]), names=[r[2] for r in rows],
                                           ranges=[r[3] for r in rows], keys=[r[4] for r in rows])
        errors = []
        for error, decoded, kept in results:
            self._count(frames_decoded=decoded, frames_kept=kept, clips=int(error is None))
            errors.append(error)
        return errors

    def _substitutes(self, key: Any, shape: Optional[Tuple[int, ...]]) -> Any:
        """on_error="replace": the samples that may stand in for the failed clip of ``key``, in
        the order the native loader tries an image's (``_C.replace_candidates`` of the row's
        seed: 16 draws, then a walk), each as (index, plan, shape, target) with the row's own
        draws; only those whose clip can be made in ``shape`` (None: any)."""
        seed = _C.sample_seed(key.seed & _MASK64, key.epoch & _MASK64, _C.row_key(key.index, key.position))
        for index in _C.replace_candidates(seed, len(self.dataset)):
            if index == key.index:
                continue
            try:
                sample = self.dataset[index]
                self._check_alike(sample, key._replace(index=index) if hasattr(key, "_replace") else key)
                ref = _clip_samples.at(sample, self.path)
                meta = self._metadata([ref])[0]
                frames, row_seed, this = self._plan(key, ref, meta)
                target = self._target(sample, ref, meta, key, row_seed) if shape is None or this == shape else None
            except _C.StaleIndexError:
                raise  # its shard rewritten: named, never passed over for another candidate
            except (ValueError, TypeError, IndexError, OSError, RuntimeError):
                continue
            if shape is None or this == shape:
                yield index, self._row(ref, frames, row_seed), this, target

    def _replace(self, out: Any, b: int, key: Any, error: BaseException, shape: Tuple[int, ...], path: str) -> Any:
        """Decodes a substitute's clip into row ``b`` of ``out``; its target. Without one that
        decodes, the clip's own error is raised (with its note), as for an image."""
        for index, plan, _, target in self._substitutes(key, shape):
            if self._decode([plan], out[b : b + 1], shape)[0] is None:
                self._count(replaced=1)
                return target
        self._fail(error, key, path)

    def batch(self, keys: Sequence[Any], slots: Any = None, stop: Any = None, tally: Any = None,
              refill: bool = False) -> Any:
        """``(clips, targets)`` of ``keys`` (see the class); the clips' buffer charged to
        ``slots`` (a ``_video_loader.ClipSlots``) when given; None when ``stop`` was set while
        waiting for room in them. ``tally`` (the ``_SkipBudget`` of the epoch that planned
        ``keys``) counts the clips skipped here, whichever epoch runs when they are. ``refill``
        (on_error="skip" with drop_last, ``_video_refill``): the clips tensor keeps all
        ``len(keys)`` rows of its buffer however many clips are skipped (a refilled batch is
        assembled in it), the kept clips in the first rows, and the targets are the list of the
        kept clips' (as many), not collated."""
        samples: List[Any] = []
        for key in keys:  # a sample that cannot be read (dataset[i] raises) is its clip's error
            try:
                samples.append(self.dataset[key.index])
            except _C.StaleIndexError:
                raise
            except _SAMPLE_ERRORS as error:
                samples.append(error)
                continue
            self._check_alike(samples[-1], key)
        refs = [None if isinstance(s, BaseException) else _clip_samples.at(s, self.path) for s in samples]
        metas = iter(self._metadata([r for r in refs if r is not None]))
        plans: List[Any] = []
        targets: List[Any] = []
        shape: Optional[Tuple[int, ...]] = None
        for key, ref, sample in zip(keys, refs, samples):
            targets.append(None)
            try:
                if ref is None:
                    raise sample
                meta = next(metas)
                frames, seed, this = self._plan(key, ref, meta)
                if shape is not None and this != shape:
                    raise ValueError(f"{_where(ref)}: its clip is {list(this)}, the batch's first "
                                     f"{list(shape)}: clips of one batch must have one shape")
                targets[-1] = self._target(sample, ref, meta, key, seed)
                shape = this if shape is None else shape
                plans.append(self._row(ref, frames, seed))
            except _SAMPLE_ERRORS as error:
                if self.on_error == "raise":
                    self._fail(error, key, _where(ref))
                plans.append(error)
        replace = self.on_error == "replace"
        if replace and shape is None and keys:  # every clip failed: a substitute's sets the shape
            shape = next((this for _, _, this, _ in self._substitutes(keys[0], None)), None)
        good = [b for b, p in enumerate(plans) if not isinstance(p, BaseException)]
        shape = shape or (0, 3, 0, 0)
        out = self._allocate(len(keys) if replace or refill else len(good), shape, slots, stop)
        if out is None:
            return None
        errors = self._decode([plans[b] for b in good], out[: len(good)], shape)  # one row each
        for b, error in zip(good, errors):
            if error is not None:
                if self.on_error == "raise":
                    self._fail(error, keys[b], plans[b][2])
                plans[b] = error
        if replace:  # each clip to its key's row (rows only move down: last first), then substitutes
            for j in reversed(range(len(good))):
                if good[j] != j:
                    out[good[j]] = out[j]
            for b, plan in enumerate(plans):
                if isinstance(plan, BaseException):
                    targets[b] = self._replace(out, b, keys[b], plan, shape, _where(refs[b]))
        else:
            kept = [j for j, b in enumerate(good) if not isinstance(plans[b], BaseException)]
            lost = [_where(r) if r is not None else f"sample {k.index} ({p})"  # a sample not read: its error names it
                    for k, r, p in zip(keys, refs, plans) if isinstance(p, BaseException)]
            self._count(skipped=len(lost))
            if tally is not None:
                tally.count(len(lost), lost)
            if len(kept) != len(good):  # compacted in place: the batch stays a view of its buffer
                out[: len(kept)] = out[kept]
            targets = [targets[good[j]] for j in kept]
            if not refill:
                out = out[: len(kept)]
            else:  # the refill names a clip of another size than those it carries by its file
                targets = _KeptTargets(targets)
                targets.names = [_where(refs[good[j]]) for j in kept]
        return out, targets if refill else self.collate(targets)

    def collate(self, targets: List[Any]) -> Any:
        """The batch's targets from the clips' (``default_collate``; pinned as the clips are);
        as they are with a ``collate_fn``, which :meth:`deliver` calls with the clips."""
        import torch
        from torch.utils.data import default_collate

        if self.collate_fn is not None:
            return targets
        # A pair's targets as torch collates them: the second items of the samples zipped (a
        # tuple: strings stay one); another structure's samples as they are (a list).
        targets = default_collate(tuple(targets) if self.pair else targets) if targets else \
            torch.empty(0, dtype=torch.int64)
        return self._pinned(targets)

    def _pinned(self, batch: Any) -> Any:
        if self.pin_memory:  # as torch's pin_memory=True: torch's own walk (a custom batch's pin_memory())
            from torch.utils.data._utils.pin_memory import pin_memory
            batch = pin_memory(batch)
        return batch

    def deliver(self, clips: Any, rest: Any) -> Any:
        """The batch as the user's samples shape it: ``(clips, targets)`` for pairs, else the
        collated samples with the clips where each sample holds its clip; with a
        ``collate_fn``, its result on the samples, each with its row of ``clips`` (a view) in
        place of its video reference, as torch's DataLoader calls it."""
        if self.collate_fn is not None:
            views = list(clips)
            if self.joint:  # as v2 returns a Joint's clip: a tv_tensors.Video (a view still)
                from torchvision import tv_tensors
                views = [v.as_subclass(tv_tensors.Video) for v in views]
            rows = [(views[b], r) if self.pair else _clip_samples.put(r, self.out_path, views[b])
                    for b, r in enumerate(rest)]
            return self._pinned(self.collate_fn(rows))
        return (clips, rest) if self.pair else _clip_samples.put(rest, self.out_path, clips)


def _cuda_available() -> bool:
    import torch
    return bool(torch.cuda.is_available())


def native_video_source(dataset: Any, threads: int, on_error: str = "raise",
                        pin_memory: bool = False, collate_fn: Any = None) -> Tuple[Optional[VideoClipBatches], str]:
    """``(VideoClipBatches, "")`` when ``dataset``'s clips can be batched natively, else
    ``(None, why not)``: the hook the DataLoader's video path asks."""
    try:
        return VideoClipBatches(dataset, threads, on_error, pin_memory, collate_fn), ""
    except (ValueError, TypeError, ImportError) as error:
        return None, str(error)


#: Why a video dataset's clips are batched natively (``describe()``).
NATIVE_REASON = ("its samples hold one VideoFile or VideoBytes each, with a native video transform: "
                 "clips are decoded and transformed in native threads (ringloader.video_batches), batches "
                 "collated there")


def for_loader(dataset: Any, args: Any, num_workers: int) -> Tuple[Optional[VideoClipBatches], str]:
    """The DataLoader's hook: ``(a native source, "")`` for ``dataset`` when its clips batch
    natively (``num_workers`` native threads; ``collate_fn`` and ``pin_memory`` as torch's),
    else ``(None, why not)``: torch's worker processes, as they are for an argument only they
    honour (``worker_init_fn``, ``multiprocessing_context``)."""
    if args.batch_size is None:
        return None, "batch_size=None (one sample at a time)"
    for name in ("worker_init_fn", "multiprocessing_context"):
        if getattr(args, name) is not None:
            return None, f"{name} is given (native clip batches have no worker processes to run it in)"
    return native_video_source(dataset, max(int(num_workers), 1), args.on_error, args.pin_memory,
                               args.collate_fn)
