"""``ringloader.DataLoader``: torch's DataLoader signature over the native pipeline.

Two paths:

* **native** — the dataset is a ringloader dataset (:class:`ringloader.ImageFolder`,
  ``DatasetFolder`` or ``FileList``: any :class:`ringloader.NativeDataset`) whose transform runs
  wholly natively to a fixed size, or a ``Subset``/``random_split``/``ConcatDataset`` of such datasets
  (a ConcatDataset's members sharing one transform): reading, decoding, transforms and batching
  run on native threads; batches arrive zero-copy through DLPack and their slot is recycled
  when the tensors are freed. A ``collate_fn`` receives the batch as torch's list of samples
  (views of the slot's rows); ``batch_transform`` applies CutMix/MixUp to the batch in its
  slot.
* **generic** — any other ``torch.utils.data.Dataset``: reading, ``__getitem__`` and collation
  are delegated to ``torch.utils.data.DataLoader`` with the same arguments, so results match
  torch's; ringloader still shards (``rank``/``world_size`` or a process group), stages (with
  ``device=`` each batch is copied on a side CUDA stream while the previous one is in use) and
  checkpoints (``state_dict``: the epoch's sample order resumes exactly; see its docstring).
  An ImageFolder that runs per sample (Python transform steps, or sizes that depend on the
  image) takes this path: native decode and prefix then the Python steps run in torch's worker
  processes, each sample's augmentations seeded by (base seed, index, position in the
  epoch).
  A wrapper around a ringloader ImageFolder that the native path cannot serve says so (a
  UserWarning naming it and the cost).

A ``torchvision.datasets.ImageFolder``/``DatasetFolder`` with torchvision's Pillow loader and a
transform that runs natively to a fixed size is served natively from its ``samples``,
``transform`` and ``target_transform`` (``_torchvision_folder``). A dataset left on
torch's path gets one :class:`ringloader.FallbackWarning` per loader naming the first step or
leaf that forces it (class and position) and what to change, or a one-time hint when its
``__getitem__`` opens images with Pillow; ``describe()`` lists every reason.

``loader.native`` tells which path a loader takes. This module is the facade: it checks the
arguments shared by both paths, picks the backend (``_native.NativeBackend`` or
``_generic.GenericBackend``, the protocol in ``_backend``) and delegates to it; planning and
read-ahead live in ``_planning``, checkpoints in ``_checkpoint``, device staging in ``_staging``,
the distributed layout in ``_distributed``, and what a source must provide in ``_source``.
"""

from __future__ import annotations

import types
import warnings
from typing import Any, Callable, Iterator, Optional, Tuple, Union

from ._backend import Backend
from ._generic import GenericBackend
from ._native import NativeBackend, _check_streams
from ._native_sources import _native_view, _servable, _torch_only
from ..core._options import (MAX_SKIPPED_FRACTION, _check_dtype, _check_fast_decode, _check_int,
                             _check_layout, _check_prefetch, _check_skipped_fraction, _check_workers,
                             _parse_memory)
# Kept importable from here (tests and tools use them): what num_workers="auto" chooses.
from ..core._options import _auto_threads, _format_bytes, _torch_default_threads  # noqa: F401

__all__ = ["DataLoader"]


def _forward(name: str, doc: str) -> property:
    """A read-only attribute of the loader that is its backend's."""
    return property(lambda self: getattr(self._backend, name), doc=doc)


class DataLoader:
    """Drop-in for ``torch.utils.data.DataLoader`` (see the module docstring for the two paths).

    torch arguments keep their meaning: ``num_workers`` is the number of native decode threads
    (0 means one), ``prefetch_factor`` batches per worker are decoded ahead (default 2; as
    torch, a number is refused with ``num_workers=0``, where the one thread still keeps 2 batches
    ahead), and ``pin_memory`` asks for page-locked slots when a GPU is visible.

    ``num_workers="auto"`` sizes decode and reader threads from the CPUs this process may use
    (affinity mask, the NUMA node's CPUs with ``numa``, the cgroup CPU quota rounded to the
    nearest CPU), leaving the training loop ``min(T, usable - 1)`` CPUs when its thread count T
    was set explicitly (``OMP_NUM_THREADS``, or ``torch.set_num_threads`` to other than torch's
    default), else 1 CPU from 4 usable ones; readers: one per 8 decode threads. On the generic
    path it sets torch's worker processes to the same count. ``prefetch_factor="auto"`` starts 2
    batches deep and deepens by one batch whenever the loop had to wait after the pipeline stood
    full and idle, up to half the slots ``max_memory`` allows (at most 64). ``max_memory``
    (bytes, or ``"2GB"`` = 2*10**9, ``"2GiB"``/``"2G"`` = 2*2**30; default: a quarter of the
    available memory, cgroup limit included, at most 2 GiB) bounds slot memory, batches you keep
    included: a depth that does not fit is cut to the slots it holds less one (warning when
    ``prefetch_factor`` was given) and the next epoch is then not read ahead; below 2 slots
    construction raises ``ValueError`` naming the budget and the bytes needed (the default alone
    may rise to 2 slots when they fit in half of the available memory). ``describe()`` says what
    was chosen, what the budget covers and what it cut.

    On the native path the pipeline does not drain between epochs (as with
    ``persistent_workers=True``, the default here): while the last batches of an epoch are delivered, the next epoch's batches are read
    and decoded, within the same slot bound, wherever its order and augmentation seed can be
    computed ahead without drawing from any RNG; the next ``iter()`` keeps that work only if
    its order and seed are exactly the predicted ones (``set_epoch`` to another epoch,
    ``load_state_dict`` or anything else drawn from torch's RNG in between cancels it), so
    results never depend on it; nor does it keep old bytes of files that changed before that
    ``iter()`` (a folder swapped, a file replaced or rewritten: their inode, size and times are
    compared, and a change drops the work; the manual's "Determinism and resume" page says what
    this cannot see).
    ``persistent_workers=False`` given explicitly turns this off (the
    pipeline then starts empty every epoch); ``describe()`` says which applies and why.
    ``pin_memory_device`` is accepted and has no effect (pinned slots are portable), ``in_order=False``
    warns that delivery stays in order, and ``worker_init_fn``/``multiprocessing_context`` are
    refused with the reason (there are no worker processes).

    ``collate_fn`` is called in the iterating thread with the list of samples
    ``[(image, label), ...]`` as torch's loader gives it: each image a view of its row of the
    slot (no copy; on the device with ``device=``), each label a Python int; whatever it
    returns is yielded. The slot is recycled once every view of it is released, so a view
    kept is never overwritten (keeping every slot raises ``SlotsExhaustedError``). Without
    ``collate_fn`` the batch tensors are yielded zero-copy; torch's ``default_collate`` (the
    function object, under any name) is that default: the same zero-copy tensors, as the list
    ``[images, labels]`` that ``default_collate`` makes of ``(image, label)`` samples.

    ``batch_transform``: torchvision's ``v2.CutMix``/``v2.MixUp`` (``num_classes`` given), a
    ``v2.RandomChoice`` of them, or ``timm.data.Mixup`` (``mode="batch"``; even batch sizes).
    Each batch is mixed in place in its slot, in the iterating thread, with torch ops, before it
    is yielded; labels become float32 ``[B, num_classes]`` tensors. The parameters are drawn as
    the object's library draws them (lambda from Beta(alpha, alpha); the CutMix box from lambda,
    clipped, lambda set from its area; torchvision pairs each row with the one before it,
    timm with row B-1-i; timm's ``prob``, ``switch_prob``, ``cutmix_minmax``, ``correct_lam``,
    ``label_smoothing`` and ``mixup_enabled``, read at every batch) from a generator seeded by
    the epoch's base seed and the batch's number, so they are the same for any ``num_workers``
    and after ``load_state_dict``. Blending (MixUp) needs floating batches: ``ValueError`` for
    a uint8 loader. Exclusive with ``collate_fn``; native path only.

    ringloader-only keyword
    arguments: ``dtype`` (``"uint8"``, ``"float32"``, ``"float16"``, ``"bfloat16"`` or the torch
    dtype), ``memory_format`` (``torch.contiguous_format`` or ``torch.channels_last``: an
    NCHW-shaped tensor with channels-last strides, a zero-copy view of the native NHWC batch),
    ``layout`` (``"NCHW"``, or ``"NHWC"`` for the raw [B,H,W,3] tensor; ``torch.channels_last``
    means the same as ``memory_format``), ``io`` (``"auto"``, ``"uring"``, ``"pread"``),
    ``reader_threads``, ``io_depth``, ``max_slots`` (bound on slots including batches you keep),
    ``fast_decode``, ``strict_decode``, ``max_image_pixels``, ``on_error``,
    ``max_skipped_fraction`` (below), ``stall_seconds`` and ``batch_transform`` (above).

    ``stall_seconds`` (default 60): when batches are in flight and none has completed for this
    long, ``stats()["stalled"]`` is True and ``describe()`` has a ``stalled:`` line saying which
    stage holds what (requests queued, reads outstanding, read buffers, the decode queue, busy
    decoders, slots). It only reports; ``timeout=`` bounds a wait, and its
    ``LoaderTimeoutError`` names the same state and the last sample error. Remote shards still
    downloading are named there and on a ``remote:`` line of ``describe()`` (stalled or not): URL,
    bytes landed of those expected, rate now, seconds since the download started.

    ``fast_decode`` (default False: pixels equal torchvision's) lets libjpeg decode at a reduced
    DCT scale (1/8, 2/8 or 4/8), chosen per sample after the crop is drawn. ``True`` or
    ``"scale"``: the smallest scale whose decoded crop still covers the output; on photos over
    2,000 px that is 1.2-1.5x faster per image and differs from torchvision (PSNR >= 37 dB,
    mean |diff| about 1 level, max |diff| up to 27 of 255); most ImageNet-sized images decode
    exactly as with False. ``"fastest"``: a scale covering 3/4 of the output (the resampler
    enlarges the rest) and the fast integer IDCT, which engages on ImageNet-sized photos too
    (PSNR >= 31 dB). Other values raise ValueError (the manual's "DataLoader arguments" page,
    ``fast_decode``).

    ``strict_decode`` (default True): JPEG data that libjpeg only warns about ("Corrupt JPEG data:
    N extraneous bytes before marker", "premature end of data segment", bad Huffman codes...) is a
    sample error (``DataLoss``) handled by ``on_error``: libjpeg decodes past it into wrong
    pixels. ``False`` accepts those files, as Pillow and ``torchvision.io.decode_jpeg`` do (the
    files Pillow refuses are refused either way). The per-sample path (``ds[i]``) is always strict.
    A file read clean once on this machine, by any process, is not read past its crop again (the
    memo file ``RINGLOADER_SCAN_MEMO`` chooses: the manual's "Bad data" page).

    ``on_error``:

    * ``"raise"`` (default): a bad sample raises :class:`ringloader.SampleError` at its batch,
      after every earlier batch; iterating again continues with the next batch.
    * ``"skip"``: the sample is left out, its batch is delivered shorter (a batch whose every
      sample failed is dropped); counted in ``stats()["skipped"]``. With ``drop_last=True`` every
      batch stays full instead: the surviving samples of the epoch, in order, are cut into
      batches of ``batch_size`` (so a short batch is completed by the samples that follow it, and
      the rows after a skip are copied rather than zero-copy) and a short remainder at the end is
      dropped; the epoch then ends earlier by whole batches (``len(loader)`` is the planned count,
      an upper bound).
    * ``"replace"``: the row gets a substitute sample drawn deterministically from
      (base seed, index); batches keep their size; counted in ``stats()["replaced"]``.

    ``max_skipped_fraction`` (default 0.5): with ``on_error="skip"``, an epoch that has skipped
    more than this fraction of the samples it planned raises ``RuntimeError`` as soon as it has
    (at an epoch's end at the latest, so an epoch never ends quietly with nothing), naming how
    many were lost and where (the shards or files of the last errors). Skipping is for a few bad
    samples; losing more than half an epoch is a server down, a mount gone or shards lost, not
    bad data. 1 turns the check off.

    Placement and device staging:

    * ``numa``: ``None`` (default: ``"auto"`` when ``device`` is a GPU, else threads and memory
      are left where the OS puts them), ``"off"`` (left there in any case), ``"auto"`` (the node of ``device``'s GPU; without a device, of the process's own GPU:
      ``LOCAL_RANK``'s or the current CUDA device; without a GPU, the node of the CPU the
      constructing thread runs on) or a node number (``ValueError`` if it does not exist).
      Reader and decode threads are pinned to that node's CPUs (never outside the process's
      affinity mask) and slot memory is allocated on it. With several ranks on the machine and
      ``num_workers="auto"``, each rank's threads also get CPUs of their own (docs/distributed.md).
      ``loader.describe()`` says what was done.
    * ``device``: ``None``/``"cpu"`` (batches in host slots) or ``"cuda"``/``"cuda:N"``: as
      soon as a batch is decoded, a native stage thread copies it on the loader's own CUDA stream
      into a ring of device buffers, so it is on the GPU before the training step asks for it;
      batches are yielded as CUDA tensors (images and labels). No host synchronisation:
      ``torch.from_dlpack`` makes the current stream wait for the copy. ``prefetch_factor`` maps
      to ``P = max(2, prefetch_factor * num_workers)`` batches: P are decoded ahead into host
      slots, and up to P more are staged ahead on the device; the ring holds ``P + 1`` buffers
      (the staged ones and the one the step uses), so device memory is bounded by ``P + 1``
      batches. A buffer is reused once the images of its batch are freed (labels are a small
      copy and never hold it); hold more batches than the ring and iteration raises
      ``SlotsExhaustedError`` (nothing is lost: free some and go on). Slots are page-locked
      automatically. Without a visible GPU, construction raises ``RuntimeError``.

    Distributed: with ``rank``/``world_size`` given, or a ``torch.distributed`` process group
    initialised and no ``sampler``/``batch_sampler`` given, each rank reads its shard exactly as
    ``DistributedSampler(dataset, world_size, rank, shuffle, seed, drop_last)`` lays it out; call
    ``loader.set_epoch(epoch)`` as with torch. A ``DistributedSampler`` passed as ``sampler``
    works the same way.

    A :class:`ringloader.WebDataset` without a ``sampler`` is ordered by
    :class:`ringloader.webdataset.WebDatasetSampler` (shards permuted per epoch, a contiguous
    equal part per rank, a seeded shuffle buffer), seeded by ``seed`` (or, when a ``generator``
    is given, its ``initial_seed()``); the epoch is the loader's own count of ``iter()`` calls,
    or what ``set_epoch`` set. An explicit sampler over a WebDataset is allowed for local shards
    and refused for ``pipe:`` shards (a stream has no random access).

    Arguments, in short: ``dataset`` is a :class:`ringloader.NativeDataset` (``ImageFolder``,
    ``DatasetFolder``, ``FileList``), a :class:`ringloader.WebDataset`, a
    ``Subset``/``ConcatDataset`` of them (native path), or any ``torch.utils.data.Dataset``
    (generic path); torch's arguments (``batch_size``, ``shuffle``, ``sampler``,
    ``batch_sampler``, ``num_workers``, ``collate_fn``, ``pin_memory``, ``drop_last``,
    ``timeout``, ``worker_init_fn``, ``multiprocessing_context``, ``generator``,
    ``prefetch_factor``, ``persistent_workers``, ``pin_memory_device``, ``in_order``) mean what
    they mean to torch, with the differences above; ``rank``, ``world_size`` and ``seed`` choose
    the distributed shard; the rest are ringloader's own (above), and the generic and hybrid
    paths refuse those that configure the native pipeline (listed on the manual's "DataLoader
    arguments" page).

    Raises:
        TypeError: at construction, an argument the native path cannot honour
            (``worker_init_fn``, ``multiprocessing_context``, ``ImageFolder(loader=...)``), an
            argument of the wrong type; at
            ``iter()``, a transform reassigned to one that needs Python steps.
        ValueError: at construction, a value out of range or a combination torch refuses
            (``batch_size=None`` with ``drop_last``, ``prefetch_factor`` with
            ``num_workers=0``, a ringloader-only argument on the generic or hybrid path, a
            ``max_memory`` below two slots, a NUMA node that does not exist, MixUp on a uint8
            loader, ``collate_fn`` with ``batch_transform``), each message naming the argument.
        RuntimeError: ``device="cuda"`` without a visible GPU; an iterator superseded by a
            newer ``iter()`` or created before a ``fork()``; from ``next()``, an epoch that
            skipped more than ``max_skipped_fraction`` of its samples.
        ringloader.SampleError: from ``next()``, a bad sample under ``on_error="raise"``.
        ringloader.SlotsExhaustedError: from ``next()``, when every slot is held by batches
            kept.
        ringloader.LoaderTimeoutError: from ``next()``, when ``timeout`` passes without a batch.
        ringloader.StaleIndexError: from ``iter()``/``next()``, a WebDataset shard changed since
            it was indexed.

    Examples:
        >>> import torch
        >>> from torchvision.transforms import v2
        >>> import ringloader as rl
        >>> from ringloader.sample_data import make_sample_dataset
        >>> root = make_sample_dataset("photos", num_images=8, num_classes=2)
        >>> train = v2.Compose([v2.RandomResizedCrop(64), v2.RandomHorizontalFlip(),
        ...                     v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
        >>> loader = rl.DataLoader(rl.ImageFolder(root, transform=train), batch_size=4,
        ...                        shuffle=True, num_workers=2)
        >>> for images, labels in loader:
        ...     print(tuple(images.shape), images.dtype, tuple(labels.shape))
        (4, 3, 64, 64) torch.float32 (4,)
        (4, 3, 64, 64) torch.float32 (4,)
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: Optional[int] = 1,
        shuffle: Optional[bool] = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: Union[int, str] = 0,
        collate_fn: Optional[Callable] = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Optional[Callable] = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: Union[int, str, None] = None,
        persistent_workers: Optional[bool] = None,
        pin_memory_device: str = "",
        in_order: bool = True,
        dtype: Any = None,
        layout: Any = "NCHW",
        memory_format: Any = None,
        io: str = "auto",
        reader_threads: Optional[int] = None,
        io_depth: int = 32,
        max_slots: int = 0,
        fast_decode: Union[bool, str] = False,
        strict_decode: bool = True,
        max_image_pixels: Optional[int] = None,
        on_error: str = "raise",
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        seed: int = 0,
        device: Any = None,
        numa: Any = None,
        max_memory: Union[int, str, None] = None,
        stall_seconds: float = 60,
        batch_transform: Any = None,
        max_skipped_fraction: float = MAX_SKIPPED_FRACTION,
    ):
        num_workers = _check_workers(num_workers)
        if timeout < 0:
            raise ValueError(f"timeout option should be non-negative, got {timeout}")
        prefetch_factor = _check_prefetch(prefetch_factor, num_workers)
        max_memory = _parse_memory(max_memory)
        max_skipped_fraction = _check_skipped_fraction(max_skipped_fraction)
        if reader_threads is not None:
            _check_int("reader_threads", reader_threads, 1)
        dtype = _check_dtype(dtype)
        fast_decode = _check_fast_decode(fast_decode)
        native_layout, channels_last = _check_layout(layout, memory_format)
        view = _native_view(dataset)
        _check_streams(dataset, view, sampler, batch_sampler)
        args = types.SimpleNamespace(
            batch_size=batch_size, shuffle=shuffle, sampler=sampler, batch_sampler=batch_sampler,
            num_workers=num_workers, collate_fn=collate_fn, pin_memory=pin_memory,
            drop_last=drop_last, timeout=timeout, worker_init_fn=worker_init_fn,
            multiprocessing_context=multiprocessing_context, generator=generator,
            prefetch_factor=prefetch_factor, persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device, in_order=in_order, dtype=dtype,
            layout=native_layout, channels_last=channels_last, io=io, reader_threads=reader_threads,
            io_depth=io_depth, max_slots=max_slots, fast_decode=fast_decode,
            strict_decode=strict_decode, max_image_pixels=max_image_pixels, on_error=on_error,
            rank=rank, world_size=world_size, seed=seed, device=device, numa=numa,
            max_memory=max_memory, stall_seconds=stall_seconds, batch_transform=batch_transform,
            max_skipped_fraction=max_skipped_fraction)
        if view is not None and any(f.serves_torch_dataset for f in view[0]) \
                and _torch_only(args) is not None:
            view = None  # torch's path, as the argument asks (GenericBackend says so)
        if view is not None and _servable(view[0]) is None:
            native = NativeBackend(dataset, view, args)
            if native.unpinned_note is not None:
                _warn_no_pinning_once(native.unpinned_note)
            self._backend: Backend = native
        else:
            self._backend = GenericBackend(dataset, view, args)

    native = _forward("native", "True when the native pipeline batches (see the module docstring).")
    dataset = _forward("dataset", "The dataset, as given.")
    batch_size = _forward("batch_size", "As torch's DataLoader.batch_size.")
    drop_last = _forward("drop_last", "As torch's DataLoader.drop_last.")
    sampler = _forward("sampler", "As torch's DataLoader.sampler.")
    @property
    def batch_sampler(self) -> Any:
        """As torch's DataLoader.batch_sampler: None with ``batch_size=None`` (natively the
        samples still pass as one-row batches)."""
        backend = self._backend
        return None if getattr(backend, "_unbatched", False) else backend.batch_sampler

    generator = _forward("generator", "The generator given, as torch's DataLoader.generator.")
    num_workers = _forward("num_workers", "Decode threads (native) or worker processes (generic); "
                           "with num_workers='auto', the number chosen.")
    timeout = _forward("timeout", "Seconds a batch may take (0: no limit).")
    pin_memory = _forward("pin_memory", "As given.")
    collate_fn = _forward("collate_fn", "As given (native path; None on the generic path).")
    batch_transform = _forward("batch_transform", "As given (native path).")
    # The native backend's pipeline, its read-ahead prediction and its samples' paths, for
    # inspection (tests look at what was read ahead).
    _native = _forward("_native", "The native pipeline (_C.Loader).")
    _ahead = _forward("_ahead", "The next epoch's prediction (_planning._Ahead), or None.")
    _paths = _forward("_paths", "The native samples' paths.")

    # ---- torch-compatible surface -----------------------------------------------------------

    def __len__(self) -> int:
        return len(self._backend)

    def __iter__(self) -> Iterator[Tuple[Any, Any]]:
        return iter(self._backend)

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch of a distributed sampler (as ``DistributedSampler.set_epoch``). Takes
        effect exactly: an epoch other than the one being read ahead cancels that work.

        Args:
            epoch: the epoch the next ``iter()`` reads (its shuffle order and, for a
                WebDataset, its shard order)."""
        self._backend.set_epoch(epoch)

    def state_dict(self) -> dict:
        """A mid-epoch checkpoint: a few integers (see ``ringloader.core._order`` for the sampler part).

        ``load_state_dict`` on a loader over the same dataset makes its next ``iter()`` yield exactly
        the batches this one had not yet delivered, bit-identical, then continue with later epochs.
        The checkpoint holds the states of the ``generator`` given to the loader and of its
        sampler's, as they are now, and ``load_state_dict`` sets them back: the epochs after the
        resumed one draw their seed and order as an uninterrupted run would. torch's global RNG
        (used when no ``generator`` is given) is yours: save ``torch.get_rng_state()`` beside this
        state and restore it, as with torch.

        Generic path (any map-style Dataset): the remaining batches hold exactly the remaining
        samples, in order. Randomness inside ``__getitem__`` is the dataset's own: torch seeds its
        workers from a fresh base seed each ``iter()``, so random augmentations of the resumed
        batches are not those the first run would have drawn.

        Returns:
            a dict of plain integers and lists (picklable, ``torch.save``-able).

        Raises:
            TypeError: unbatched loaders (``batch_size=None``) on torch's path and
                IterableDatasets have no order to resume.
        """
        return self._backend.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict`; also onto another world size (the manual's
        "Distributed" page). Work read ahead for the next epoch is cancelled: the next ``iter()``
        follows the checkpoint.

        Args:
            state: a dict :meth:`state_dict` returned, from this run or another (any rank's).

        Raises:
            TypeError: the generic path over an iterable dataset or without batches (nothing to
                resume), or a `state` that is not a dict.
            ValueError: a checkpoint of an unknown version, of a dataset of another size, of a
                generic-path loader loaded by a native one, or holding a different number of
                generator states than this loader's ``generator``/sampler have."""
        self._backend.load_state_dict(state)

    def stats(self) -> dict:
        """Counters of the native pipeline (samples, errors, stage busy seconds, io backend...).

        Returns:
            a dict; ``{"native": False}`` on the generic path. Keys are listed on the manual's
            "Threads and memory" and "Bad data" pages (``errors``, ``skipped``, ``replaced``,
            ``recent_errors``, ``stalled``, ``samples_ahead``, ``prefetch_batches``...)."""
        return self._backend.stats()

    def describe(self) -> str:
        """Where the pipeline runs: threads, CPUs, NUMA node, slot memory, device, I/O.

        Returns:
            a multi-line report: what ``"auto"`` chose and from which limits, what the memory
            budget cut, whether the next epoch is read ahead and why, and a ``stalled:`` line
            when no batch has completed for ``stall_seconds``."""
        return self._backend.describe()


_warned_pinning = False


def _warn_no_pinning_once(why: str) -> None:
    global _warned_pinning
    if _warned_pinning:
        return
    _warned_pinning = True
    import torch

    if not torch.cuda.is_available():
        message = ("pin_memory=True ignored: no CUDA GPU is visible; batches use ordinary host "
                   "memory")
    else:
        message = (f"pin_memory=True ignored: page-locked memory could not be allocated ({why}); "
                   "batches use ordinary host memory")
    warnings.warn(message, stacklevel=3)
