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

``loader.native`` tells which path a loader takes.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple, Union

import numpy as np

from . import _C, _mixing, _order, _sizes, _user_source
from .datasets import NativeDataset, SampleKey, _PathsView, _SampleTable
from .webdataset import StaleIndexError, WebDataset, WebDatasetSampler, annotate_error

__all__ = ["DataLoader"]

_log = logging.getLogger("ringloader")
_reported_io_notes: set = set()

_DTYPES = ("uint8", "float32", "float16", "bfloat16")

# The epoch number the DataLoader gives the per-sample augmentation seeds (native SampleSeed and
# the hybrid path's SampleKey): always 0, so a sample's augmentations follow from the base seed
# drawn at iter() (and its index and position) alone, as torch's worker seeds follow from its
# base seed: torch.manual_seed(s) before iter() repeats the epoch's augmentations too. Epochs
# still differ, each iter() drawing a new base seed.
_AUGMENT_EPOCH = 0


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} should be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} should be >= {minimum}, got {value}")
    return int(value)


def _check_workers(num_workers: Any) -> Any:
    """``num_workers``: an int >= 0 (torch's meaning) or ``"auto"``."""
    if isinstance(num_workers, str):
        if num_workers != "auto":
            raise ValueError(f"num_workers should be an int >= 0 or 'auto', got {num_workers!r}")
        return "auto"
    return _check_int("num_workers", num_workers, 0)


def _check_prefetch(prefetch_factor: Any, num_workers: Any) -> Any:
    """``prefetch_factor``: None (2), an int >= 1 or ``"auto"``. As torch, a number needs
    ``num_workers`` > 0 (or ``"auto"``, which is at least one): with ``num_workers=0`` torch
    loads in the calling process, so it has nothing to prefetch with and refuses one."""
    if isinstance(prefetch_factor, str):
        if prefetch_factor != "auto":
            raise ValueError(f"prefetch_factor should be an int >= 1, None or 'auto', got {prefetch_factor!r}")
        return "auto"
    if prefetch_factor is not None:
        _check_int("prefetch_factor", prefetch_factor, 1)
        if num_workers == 0:
            raise ValueError(
                f"prefetch_factor={prefetch_factor} needs num_workers > 0 (or 'auto'), as with torch's "
                "DataLoader: with num_workers=0 leave prefetch_factor=None (or 'auto')")
    return prefetch_factor


def _parse_memory(max_memory: Any) -> Optional[int]:
    """``max_memory``: None, a number of bytes > 0, or a size string: "2GB" (10**9), "2GiB" or
    "2G" (2**30), "512MB", "1.5GiB"..."""
    if max_memory is None:
        return None
    if isinstance(max_memory, bool):
        raise TypeError(f"max_memory should be bytes (an int) or a size like '2GB', got {max_memory!r}")
    if isinstance(max_memory, (int, np.integer)):
        if max_memory <= 0:
            raise ValueError(f"max_memory should be > 0 bytes, got {max_memory}")
        return int(max_memory)
    if isinstance(max_memory, str):
        return _sizes.parse_size(max_memory, "max_memory")
    raise TypeError(f"max_memory should be bytes (an int) or a size like '2GB', got "
                    f"{type(max_memory).__name__} {max_memory!r}")


def _torch_default_threads() -> set:
    """The intra-op thread counts torch may pick by itself: the physical cores (distinct
    (package, core) pairs in sysfs) of the machine or of the affinity mask, or the CPUs of the
    mask (OpenMP's default under `taskset`)."""
    mask = os.sched_getaffinity(0)
    cores, cores_in_mask = set(), set()
    base = "/sys/devices/system/cpu"
    try:
        names = os.listdir(base)
    except OSError:
        names = []
    for name in names:
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        try:
            with open(f"{base}/{name}/topology/physical_package_id") as f:
                package = f.read().strip()
            with open(f"{base}/{name}/topology/core_id") as f:
                core = f.read().strip()
        except OSError:
            continue
        cores.add((package, core))
        if int(name[3:]) in mask:
            cores_in_mask.add((package, core))
    return {n for n in (len(cores), len(cores_in_mask), len(mask), os.cpu_count()) if n}


def _training_threads() -> Tuple[int, str]:
    """The training loop's compute threads when they were set explicitly, else (-1, "").

    ``OMP_NUM_THREADS`` in the environment (its first value), or ``torch.get_num_threads()`` when
    it differs from every count torch picks by itself (see ``_torch_default_threads``): that is,
    after ``torch.set_num_threads(n)``. (Setting it to a default count is indistinguishable from
    not setting it; then 1 CPU is reserved from 4 usable ones, as when unset.)"""
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env), "OMP_NUM_THREADS"
    import torch

    n = torch.get_num_threads()
    if n not in _torch_default_threads():
        return n, "torch.get_num_threads()"
    return -1, ""


def _format_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


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
    compared, and a change drops the work; see the README for what this cannot see).
    ``persistent_workers=False`` given explicitly turns this off (the
    pipeline then starts empty every epoch); ``describe()`` says which applies and why.
    ``pin_memory_device`` is accepted and has no effect (pinned slots are portable), ``in_order=False``
    warns that delivery stays in order, and ``worker_init_fn``/``multiprocessing_context`` are
    refused with the reason (there are no worker processes).

    ``collate_fn`` is called in the iterating thread with the list of samples
    ``[(image, label), ...]`` as torch's loader gives it: each image a view of its row of the
    slot (no copy; on the device with ``device=``), each label a Python int; whatever it
    returns is yielded. The slot is recycled once every view of it is released, so a view
    kept is never overwritten (keeping every slot raises ``SlotsExhaustedError``);
    ``default_collate`` copies, releasing the slot at once. Without ``collate_fn`` the batch
    tensors are yielded zero-copy.

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
    ``fast_decode``, ``strict_decode``, ``max_image_pixels``, ``on_error``, ``stall_seconds`` and
    ``batch_transform`` (above).

    ``stall_seconds`` (default 60): when batches are in flight and none has completed for this
    long, ``stats()["stalled"]`` is True and ``describe()`` has a ``stalled:`` line saying which
    stage holds what (requests queued, reads outstanding, read buffers, the decode queue, busy
    decoders, slots). It only reports; ``timeout=`` bounds a wait, and its
    ``LoaderTimeoutError`` names the same state and the last sample error.

    ``fast_decode`` (default False: pixels equal torchvision's) lets libjpeg decode at 1/2, 1/4 or
    1/8 scale when the output is at least that much smaller. On photos over 2,000 px that is
    1.2-1.5x faster per image and differs from torchvision (PSNR >= 37 dB, mean |diff| about 1
    level, max |diff| up to 27 of 255); on ImageNet-sized images it changes nothing (README,
    "Refused arguments and differences from torch").

    ``strict_decode`` (default True): JPEG data that libjpeg only warns about ("Corrupt JPEG data:
    N extraneous bytes before marker", "premature end of data segment", bad Huffman codes...) is a
    sample error (``DataLoss``) handled by ``on_error``: libjpeg decodes past it into wrong
    pixels. ``False`` accepts those files, as Pillow and ``torchvision.io.decode_jpeg`` do (the
    files Pillow refuses are refused either way). The per-sample path (``ds[i]``) is always strict.

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

    Placement and device staging:

    * ``numa``: ``None`` (default: threads and memory are left where the OS puts them),
      ``"auto"`` (the node of ``device``'s GPU; without a device, the node of the CPU the
      constructing thread runs on) or a node number (``ValueError`` if it does not exist).
      Reader and decode threads are pinned to that node's CPUs (never outside the process's
      affinity mask) and slot memory is allocated on it. ``loader.describe()`` says what was done.
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
        fast_decode: bool = False,
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
    ):
        import torch.utils.data as tud

        self.dataset = dataset
        num_workers = _check_workers(num_workers)
        self.num_workers = num_workers
        if timeout < 0:
            raise ValueError(f"timeout option should be non-negative, got {timeout}")
        prefetch_factor = _check_prefetch(prefetch_factor, num_workers)
        max_memory = _parse_memory(max_memory)
        if reader_threads is not None:
            _check_int("reader_threads", reader_threads, 1)
        self.timeout = float(timeout)
        self.pin_memory = bool(pin_memory)
        self.generator = generator
        dtype = _check_dtype(dtype)
        native_layout, self._channels_last = _check_layout(layout, memory_format)
        view = _native_view(dataset)
        _check_streams(dataset, view, sampler, batch_sampler)
        if isinstance(dataset, WebDataset) and generator is not None:
            seed = int(generator.initial_seed())
        self.native = view is not None and _servable(view[0]) is None

        if not self.native:
            native_only = [name for name, given in (
                ("dtype", dtype is not None), ("layout", native_layout != "NCHW"),
                ("memory_format", self._channels_last), ("io", io != "auto"),
                ("reader_threads", reader_threads not in (None, 1)), ("io_depth", io_depth != 32),
                ("max_memory", max_memory is not None),
                ("max_slots", max_slots != 0), ("fast_decode", bool(fast_decode)),
                ("strict_decode", not strict_decode),
                ("max_image_pixels", max_image_pixels is not None), ("on_error", on_error != "raise"),
                ("numa", numa is not None), ("stall_seconds", stall_seconds != 60),
                ("batch_transform", batch_transform is not None)) if given]
            if native_only:
                raise ValueError(
                    f"{', '.join(native_only)} only apply to natively batched datasets; this loader "
                    f"runs on torch's generic path ({_generic_reason(dataset, view)}), "
                    "where samples come from __getitem__ as with torch (a bad sample raises there): "
                    "leave them at their defaults, or convert dtype/layout in the transform or "
                    "collate_fn (which can also call CutMix/MixUp on the collated batch)")
            if not isinstance(dataset, NativeDataset) and _wraps_image_folder(dataset):
                _warn_wrapper(dataset, _generic_reason(dataset, view))
            if view is not None and _user_source.flat_targets(view[0]) is not None:
                _user_source.warn_refused(dataset, _servable(view[0]))
            # Sharding and device staging apply to the generic path too.
            shard = _shard_sampler(dataset, sampler, batch_sampler, rank, world_size, shuffle, seed,
                                   drop_last)
            if shard is not None:
                sampler, shuffle = shard, None
            self._device = _generic_device(_check_device(device))
            if num_workers == "auto":
                # torch's worker processes, as many as the native path would run decode threads.
                num_workers = _auto_threads({"numa": None})["decode_threads"]
                self.num_workers = num_workers
            if prefetch_factor == "auto":
                prefetch_factor = None  # torch's default (2 per worker); no adaptive depth here
            kwargs = dict(
                batch_size=batch_size, shuffle=shuffle, sampler=sampler,
                batch_sampler=batch_sampler, num_workers=num_workers, collate_fn=collate_fn,
                pin_memory=pin_memory, drop_last=drop_last, timeout=timeout,
                worker_init_fn=worker_init_fn, multiprocessing_context=multiprocessing_context,
                generator=generator, prefetch_factor=prefetch_factor,
                persistent_workers=bool(persistent_workers), pin_memory_device=pin_memory_device,
            )
            if not in_order:
                kwargs["in_order"] = False
            torch_loader = tud.DataLoader(dataset, **kwargs)  # torch validates the arguments
            self.batch_size = torch_loader.batch_size
            self.drop_last = torch_loader.drop_last
            self.sampler = torch_loader.sampler
            self.batch_sampler = torch_loader.batch_sampler
            self._epoch = 0
            self._resume: Optional[dict] = None
            self._current: Optional["_Progress"] = None
            self._planned = None
            if self.batch_sampler is not None and not isinstance(dataset, tud.IterableDataset):
                # torch's loader again, drawing its batches from an epoch plan: the same order and
                # RNG consumption, and a plan can be resumed mid-epoch (state_dict). ringloader
                # ImageFolders (also inside Subset/ConcatDataset) get SampleKeys, which carry each
                # sample's augmentation seed.
                self._planned = _PlannedBatches(self, self.batch_sampler, len(dataset),
                                                keyed=view is not None)
                for name in ("batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"):
                    kwargs.pop(name)
                source = dataset if view is None or isinstance(dataset, NativeDataset) else _KeyedView(*view)
                torch_loader = tud.DataLoader(source, batch_sampler=self._planned, **kwargs)
            self._generic = torch_loader
            return

        # ---- native path: validate like torch, then build the sampling chain with torch's own
        # samplers so index order (and RNG consumption) is exactly torch's.
        if worker_init_fn is not None:
            raise TypeError("worker_init_fn is not supported: ringloader workers are native threads, not Python processes")
        if multiprocessing_context is not None:
            raise TypeError("multiprocessing_context is not supported: ringloader uses native threads")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last")
            batch_size = None
        elif batch_size is None:
            raise ValueError("batch_size=None (unbatched samples) is not supported by the native path")
        else:
            _check_int("batch_size", batch_size, 1)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if on_error not in ("raise", "skip", "replace"):
            raise ValueError(f"on_error must be 'raise', 'skip' or 'replace', got {on_error!r}")
        shard = _shard_sampler(dataset, sampler, batch_sampler, rank, world_size, shuffle, seed,
                               drop_last)
        if shard is not None:
            sampler = shard
        elif sampler is None:
            sampler = (tud.RandomSampler(dataset, generator=generator) if shuffle
                       else tud.SequentialSampler(dataset))
        if batch_sampler is None:
            batch_sampler = tud.BatchSampler(sampler, batch_size, drop_last)
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.batch_size = batch_size
        self.drop_last = drop_last
        if not in_order:
            warnings.warn("in_order=False has no effect: ringloader always delivers in sampler order",
                          stacklevel=2)

        self._folders, self._index_map = view
        # A user's Dataset of image references: batches rebuilt in its own structure.
        self._batcher = (_user_source.Batcher(self._folders, self._channels_last, native_layout == "NHWC")
                         if _user_source.flat_targets(self._folders) is not None else None)
        if self._batcher is not None and dtype is not None and \
                any(len(f.view_transforms) > 1 for f in self._folders):
            raise ValueError("dtype= sets one output dtype; samples with several views take each view's "
                             "dtype from its transform (ToTensor: float32, else uint8)")
        if self._batcher is not None and batch_transform is not None:
            raise ValueError("batch_transform needs ringloader's (images, labels) batches; a Dataset of "
                             "image references is batched in its own structure: call CutMix/MixUp in "
                             "collate_fn or in the training step")
        self._dtype = dtype
        self._versions = [f.version for f in self._folders]
        steps_options = self._steps_options()
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"collate_fn should be callable, got {type(collate_fn).__name__}")
        if collate_fn is not None and batch_transform is not None:
            raise ValueError("collate_fn and batch_transform were both given: batch_transform mixes the "
                             "batch in its slot, collate_fn builds the batch from samples; pass one (a "
                             "collate_fn can call CutMix/MixUp itself)")
        self.collate_fn = collate_fn
        self.batch_transform = batch_transform
        self._mix_note = None if batch_transform is None else _mixing.check(
            batch_transform, steps_options["dtype"], batch_size)
        auto = num_workers == "auto"
        self._auto_threads = None
        if auto:
            # Chosen natively (common/cpu_budget.h): here only to size prefetch_factor * workers.
            self._auto_threads = _auto_threads({"numa": _check_numa(numa), "device": _check_device(device),
                                                "reader_threads": reader_threads or 0})
            workers = self._auto_threads["decode_threads"]
        else:
            workers = max(1, num_workers)
        self._auto_prefetch = prefetch_factor == "auto"
        prefetch_given = prefetch_factor if isinstance(prefetch_factor, int) else None
        prefetch = 2 if prefetch_factor in (None, "auto") else prefetch_factor
        max_batch = batch_size or getattr(batch_sampler, "batch_size", None) or \
            max(1, max((len(b) for b in batch_sampler), default=1))
        options = dict(
            batch_size=int(max_batch),
            num_workers=workers,
            reader_threads=reader_threads if reader_threads is not None else (0 if auto else 1),
            io_depth=_check_int("io_depth", io_depth, 1),
            # auto: start at 2 batches; the pipeline deepens while the training loop waits.
            prefetch_batches=2 if self._auto_prefetch else max(2, prefetch * workers),
            auto_prefetch=self._auto_prefetch,
            max_slots=_check_int("max_slots", max_slots, 0),
            io=io,
            layout=native_layout,
            fast_decode=bool(fast_decode),
            strict_decode=bool(strict_decode),
            pin_memory=self.pin_memory,
            on_error=on_error,
            device=_check_device(device),
            numa=_check_numa(numa),
            **steps_options,
        )
        if max_image_pixels is not None:
            options["max_image_pixels"] = _check_int("max_image_pixels", max_image_pixels, 1)
        if max_memory is not None:
            options["max_memory"] = max_memory
        if isinstance(stall_seconds, bool) or not isinstance(stall_seconds, (int, float)) or \
                not stall_seconds > 0:
            raise ValueError(f"stall_seconds should be a number of seconds > 0, got {stall_seconds!r}")
        options["stall_seconds"] = float(stall_seconds)
        if auto:
            options.update(_training_options())
            options["auto_threads"] = True
        self._options = options
        # Epoch overlap (see the class docstring): off only when persistent_workers=False is given.
        self._overlap_off: Optional[str] = (
            "persistent_workers=False: the pipeline starts empty every epoch"
            if persistent_workers is False else None)
        self._queued: Optional[tuple] = None  # (epoch, seed) of the epoch queued natively
        self._ahead: Optional[_Ahead] = None  # its prediction, reused by the next iter()
        # Read-ahead epochs dropped because their files changed before adoption, and the last why.
        self._stale_drops = 0
        self._stale_why = ""
        self._last_sampler_epoch: Optional[int] = None
        self._native = self._make_native()
        if auto:
            self.num_workers = self._native.stats()["decode_threads"]
        self._epoch = 0
        self._generation = 0
        self._resume: Optional[dict] = None
        self._current: Optional["_Progress"] = None
        started = self._native.stats()
        note = started["io_note"]
        if note and note not in _reported_io_notes:
            _reported_io_notes.add(note)
            _log.warning("ringloader: %s", note)
        if self.pin_memory and not started["memory"].startswith("cuda-pinned"):
            _warn_no_pinning_once(started["memory_note"])
        if started["slots_note"]:
            # The memory budget cut the depth or the slots (never exceeded: see describe()).
            if prefetch_given is not None and started["prefetch_batches"] < options["prefetch_batches"]:
                warnings.warn(f"prefetch_factor={prefetch_given} ({options['prefetch_batches']} batches) does not "
                              f"fit the memory budget ({_format_bytes(started['max_memory'])}): "
                              f"{started['slots_note']}; pass max_memory= to allow more", stacklevel=2)
            if not started["read_ahead"] and self._overlap_off is None:
                self._overlap_off = "the memory budget is too tight to read the next epoch ahead (see 'cut')"

    def _steps_options(self) -> dict:
        options = self._folders[0].native_options()
        if self._dtype is not None:
            options["dtype"] = self._dtype
        return options

    # ---- torch-compatible surface -----------------------------------------------------------

    def __len__(self) -> int:
        if not self.native:
            return len(self._generic)
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[Tuple[Any, Any]]:
        if not self.native:
            batches = _start_generic(self._generic)
            if self._device is not None:
                batches = _device_prefetch(batches, self._device)
            return batches if self._planned is None else _count_delivered(self, batches)
        versions = [f.version for f in self._folders]
        if versions != self._versions:
            # transform or target_transform was reassigned: rebuild the pipeline with the new one.
            why = _servable(self._folders)
            if why is not None:
                raise TypeError(f"the dataset's transform changed and it {why}; the native path built "
                                "for it cannot serve it: create a new ringloader.DataLoader")
            self._versions = versions
            self._options.update(self._steps_options())
            self._native.stop()
            self._native = self._make_native()
        elif self._pid != os.getpid():
            # A fork()ed child: the parent's native threads do not exist here. Start afresh.
            self._native = self._make_native()
        return _NativeIter(self)

    def _make_native(self) -> "_C.Loader":
        self._pid = os.getpid()
        # The folders' compact sample tables, end to end: the native loader is built from the
        # path arena (no str per sample); native sample i is read from self._paths[i].
        table = _SampleTable.concat([f._table for f in self._folders])
        self._paths = _PathsView(table, "paths")
        paths = table.arena()
        targets = np.concatenate([np.asarray(f.native_targets(), dtype=np.int64) for f in self._folders])
        flat = _user_source.flat_targets(self._folders)
        if flat is not None:
            targets = flat  # each row's label is its sample's flat index (see _user_source)
        ranges = [f.byte_ranges() for f in self._folders]
        memory = _user_source.memory_column(self._folders)  # ImageBytes references' bytes
        if not any(ranges):
            return _C.Loader(paths, targets, self._options, memory=memory)
        # Shard members: byte ranges of the shards (whole files elsewhere: length -1), and which
        # are members of a pipe: stream (only a WebDataset's own pipe: URLs; any path else is a
        # file, whatever its name).
        offsets, lengths, errors, pipes, tar_members = [], [], [], [], []
        for f, r in zip(self._folders, ranges):
            none = np.zeros(len(f), dtype=bool)
            if r:
                offsets.append(r["offsets"])
                lengths.append(r["lengths"])
                errors += r["errors"]
                pipes.append(np.asarray(r.get("pipes", none), dtype=bool))
                tar_members.append(np.asarray(r.get("tar_members", none), dtype=bool))
            else:
                offsets.append(np.zeros(len(f), dtype=np.int64))
                lengths.append(np.full(len(f), -1, dtype=np.int64))
                errors += [""] * len(f)
                pipes.append(none)
                tar_members.append(none)
        return _C.Loader(paths, targets, self._options, offsets=np.concatenate(offsets),
                         lengths=np.concatenate(lengths), errors=errors,
                         pipes=np.concatenate(pipes), tar_members=np.concatenate(tar_members),
                         memory=memory)

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch of a distributed sampler (as ``DistributedSampler.set_epoch``). Takes
        effect exactly: an epoch other than the one being read ahead cancels that work."""
        target = getattr(self.batch_sampler, "sampler", self.sampler)
        if hasattr(target, "set_epoch"):
            target.set_epoch(epoch)
        self._epoch = int(epoch)
        if self.native and self._queued is not None and self._queued[0] != self._epoch:
            self._cancel_queued()  # another epoch than the one read ahead: stop its work now

    def state_dict(self) -> dict:
        """A mid-epoch checkpoint: a few integers (see ``ringloader._order`` for the sampler part).

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
        batches are not those the first run would have drawn. Unbatched loaders
        (``batch_size=None``) and IterableDatasets have no order to resume: TypeError.
        """
        if not self.native and self._planned is None:
            raise TypeError("state_dict() needs a map-style dataset with batches (batch_size or batch_sampler): "
                            "an IterableDataset or batch_size=None has no sample order to resume")
        it = self._current
        generators = [g.get_state() for g in _generators(self)]
        if it is None or it.done:
            state = {"version": 1, "epoch": self._epoch, "delivered": 0, "complete": True}
            if generators:
                state["generators"] = generators
            return state
        state = {
            "version": 1,
            "epoch": it.epoch,
            "delivered": it.skip + it.delivered,
            "rows": it.rows,
            "complete": False,
            "sampler": it.sampler_state,
            "dataset_size": len(self.dataset),
        }
        if it.seed is not None:
            state["base_seed"] = it.seed  # the augmentation seed of the epoch
        if generators:
            # Where the epochs after this one draw from: as they are now, the epoch's own draws done.
            state["generators"] = generators
        return state

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict`; also onto another world size (see the README). Work
        read ahead for the next epoch is cancelled: the next ``iter()`` follows the checkpoint."""
        if not self.native and self._planned is None:
            raise TypeError("load_state_dict() needs a map-style dataset with batches (batch_size or batch_sampler)")
        if state.get("version") != 1:
            raise ValueError(f"unknown ringloader state version {state.get('version')!r}")
        if not state["complete"] and state["dataset_size"] != len(self.dataset):
            raise ValueError(f"checkpoint is for a dataset of {state['dataset_size']} samples, "
                             f"this one has {len(self.dataset)}")
        if self.native and not state["complete"] and "base_seed" not in state:
            raise ValueError("this checkpoint comes from a generic-path loader over a dataset other than "
                             "a ringloader ImageFolder (no base_seed); the native path needs one to "
                             "reproduce its augmentations")
        generators = _generators(self)
        saved = state.get("generators")
        if saved is not None and len(saved) != len(generators):
            raise ValueError(
                f"checkpoint holds the state of {len(saved)} random generator(s) (the loader's "
                f"generator= and its sampler's), this loader has {len(generators)}: pass the same "
                "generator arguments as the run that wrote it")
        self._epoch = int(state["epoch"])
        self._resume = None if state["complete"] else dict(state)
        if self.native:
            self._cancel_queued()  # the next iter() follows the checkpoint, not the prediction
        if state["complete"]:
            _restore_generators(self, saved)
        # Else the resumed iter() restores them, after any draw of its own (torch's loader draws
        # a base seed at each iter() on the generic path).

    def _cancel_queued(self) -> None:
        self._queued = self._ahead = None
        self._native.cancel_queued()

    def stats(self) -> dict:
        """Counters of the native pipeline (samples, errors, stage busy seconds, io backend...)."""
        if not self.native:
            return {"native": False}
        s = self._native.stats()
        s["native"] = True
        return s

    def describe(self) -> str:
        """Where the pipeline runs: threads, CPUs, NUMA node, slot memory, device, I/O."""
        if not self.native:
            return "ringloader.DataLoader (generic path: torch.utils.data.DataLoader does the work)"
        s = self._native.stats()
        node = s["numa_node"]
        lines = [
            "ringloader.DataLoader (native)",
            f"  threads: {s['decode_threads']} decode, {s['reader_threads']} reader, "
            f"1 dispatcher" + (", 1 device stage thread" if s["device"] != "cpu" else ""),
            f"  numa:    {'node ' + str(node) if node >= 0 else 'not placed'} ({s['numa_note']})",
            f"  cpus:    {s['numa_cpus'] or 'not pinned'}"
            + (f"; {s['threads_pinned']} threads pinned, read back: {s['thread_cpus']}"
               if s["threads_pinned"] else ""),
            f"  memory:  {s['memory']}" + (f" ({s['memory_note']})" if s["memory_note"] else "")
            + f", {s['slots_allocated']} slots allocated",
            f"  device:  {s['device']}" + (f", {s['device_buffers']} device buffers allocated, "
                                            f"{s['device_buffers_held']} held"
                                            if s["device"] != "cpu" else ""),
            f"  io:      {s['io_backend']}" + (f" ({s['io_note']})" if s["io_note"] else ""),
            f"  chosen:  {s['threads_note']}" if self._options.get("auto_threads")
            else f"  chosen:  {s['threads_note']} (num_workers='auto' sizes them from the usable CPUs)",
            "  prefetch: " + (
                f"auto, {s['prefetch_batches']} batches deep now (starts at 2, grew {s['prefetch_grown']} "
                f"times, at most {s['prefetch_max']}: half the slots max_memory allows)"
                if self._auto_prefetch else f"{s['prefetch_batches']} batches (prefetch_factor x num_workers"
                + (f" = {self._options['prefetch_batches']}, cut to fit the memory budget: see 'cut')"
                   if s["prefetch_batches"] < self._options["prefetch_batches"] else ")")),
            f"  slots:   at most {s['max_slots']} of {_format_bytes(s['slot_bytes'])} "
            f"(max_memory {_format_bytes(s['max_memory'])}: {s['memory_budget_note']})"
            f"; the pipeline waited for a free slot {s['producer_waits']} times",
            f"  budget:  covers the batch slots, batches you keep included; not the {s['read_buffers']} file "
            "read buffers per epoch (each as large as the largest file it read; a second set while the next "
            "epoch is read ahead), nor device buffers",
        ] + ([f"  cut:     {s['slots_note']}"] if s["slots_note"] else []) + (
            [f"  batch:   batch_transform={self._mix_note}, applied in place in the slot by the iterating thread"]
            if self._mix_note else []) + (
            ["  batch:   collate_fn receives the samples (views of the slot's rows) in the iterating thread"]
            if self.collate_fn is not None else []) + [
            "  epochs:  " + ("the next epoch is read and decoded while this one is delivered "
                             f"({_read_ahead_counts(s, self._native.has_queued_epoch())})"
                             if self._overlap_off is None else f"drained between epochs ({self._overlap_off})")
            + (f"; {self._stale_drops} read ahead dropped because their files changed before "
               f"the epoch began, last: {self._stale_why}" if self._stale_drops else ""),
        ]
        if s["errors"]:
            lines.append(f"  errors:  {s['errors']} samples failed ({s['skipped']} skipped, {s['replaced']} "
                         f"replaced); last: {s['last_error']}")
        if s["stalled"]:
            lines.append(f"  stalled: {s['pipeline_state']}")
        return "\n".join(lines)

    def __del__(self):
        native = getattr(self, "_native", None)
        if native is not None:
            native.stop()


_warned_pinning = False


def _training_options() -> dict:
    count, source = _training_threads()
    if count < 0:
        return {}
    return {"training_threads": count, "training_threads_source": source}


def _auto_threads(options: dict) -> dict:
    """What num_workers='auto' chooses (decode_threads, reader_threads, usable_cpus,
    reserved_cpus, note) for these native options."""
    options = {k: v for k, v in options.items() if v is not None or k == "numa"}
    options.update(_training_options())
    return _C.choose_auto_threads(options)


def _read_ahead_counts(s: dict, waiting: bool) -> str:
    """describe()'s count of queued epochs: adopted, cancelled, and one waiting for iter()."""
    queued, adopted = s["epochs_queued"], s["epochs_adopted"]
    cancelled = queued - adopted - (1 if waiting else 0)
    text = f"{adopted} of {queued} epochs read ahead were used"
    if waiting:
        text += ", 1 is waiting for the next iter()"
    return text + (f", {cancelled} cancelled" if cancelled else "")


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


def _check_dtype(dtype: Any) -> Optional[str]:
    """The native dtype name for a string or a torch dtype, or None for the default."""
    if dtype is None:
        return None
    import torch

    name = str(dtype)[len("torch."):] if isinstance(dtype, torch.dtype) else dtype
    if isinstance(name, str) and name in _DTYPES:
        return name
    raise ValueError(f"dtype must be one of {', '.join(_DTYPES)} (a string or the torch dtype), "
                     f"got {dtype!r}")


def _check_layout(layout: Any, memory_format: Any) -> Tuple[str, bool]:
    """(native layout, whether batches are viewed as NCHW with channels-last strides)."""
    import torch

    if memory_format is not None and memory_format not in (torch.contiguous_format, torch.channels_last):
        raise ValueError("memory_format must be None, torch.contiguous_format or torch.channels_last, "
                         f"got {memory_format!r}")
    if layout is torch.channels_last:
        layout, memory_format = "NCHW", torch.channels_last
    elif layout is torch.contiguous_format:
        layout = "NCHW"
    if not isinstance(layout, str) or layout not in ("NCHW", "NHWC"):
        raise ValueError(f"layout must be 'NCHW', 'NHWC' (raw [B,H,W,3]) or torch.channels_last, got {layout!r}")
    if memory_format is torch.channels_last:
        if layout == "NHWC":
            raise ValueError("layout='NHWC' (a raw [B,H,W,3] tensor) and memory_format=torch.channels_last "
                             "(an NCHW-shaped view of it) contradict each other: pass one of them")
        return "NHWC", True
    return layout, False


def _native_view(dataset: Any):
    """(ImageFolders, index map) of ``dataset`` when it is a ringloader ImageFolder, or a
    ``Subset`` (``random_split``'s parts) or ``ConcatDataset`` built from them at any depth: the
    folders' samples concatenated are the native loader's samples, and position ``i`` of
    ``dataset`` is sample ``index_map[i]`` of them (no map: the identity). None otherwise."""
    import torch.utils.data as tud

    if isinstance(dataset, NativeDataset):
        return [dataset], None
    if type(dataset) is tud.Subset:
        inner = _native_view(dataset.dataset)
        if inner is None:
            return None
        folders, index_map = inner
        indices = np.asarray(dataset.indices, dtype=np.int64).reshape(-1)
        indices = np.where(indices < 0, indices + len(dataset.dataset), indices)
        return folders, indices if index_map is None else index_map[indices]
    if type(dataset) is tud.ConcatDataset:
        folders, maps, base = [], [], 0
        for member in dataset.datasets:
            inner = _native_view(member)
            if inner is None:
                return None
            member_folders, index_map = inner
            size = sum(len(f) for f in member_folders)
            maps.append((np.arange(size, dtype=np.int64) if index_map is None else index_map) + base)
            folders += member_folders
            base += size
        return folders, np.concatenate(maps) if maps else np.zeros(0, dtype=np.int64)
    source = _user_source.source_for(dataset)  # a user's Dataset of image references
    return None if source is None else ([source], None)


class _KeyedView:
    """A Subset/ConcatDataset chain of ringloader ImageFolders (``_native_view``) for the generic
    path: position ``key.index`` of the chain is made by the ImageFolder it resolves to, with the
    key's seed. Subset and ConcatDataset only map indices, so the samples are the chain's own."""

    def __init__(self, folders: Sequence[NativeDataset], index_map: Optional[np.ndarray]):
        self.folders = list(folders)
        self.index_map = index_map
        self.starts = np.cumsum([0] + [len(f) for f in self.folders])

    def __len__(self) -> int:
        return int(self.starts[-1]) if self.index_map is None else len(self.index_map)

    def __getitem__(self, key: SampleKey):
        flat = key.index if self.index_map is None else int(self.index_map[key.index])
        member = int(np.searchsorted(self.starts, flat, side="right")) - 1
        return self.folders[member][key._replace(index=flat - int(self.starts[member]))]


def _servable(folders: Sequence[NativeDataset]) -> Optional[str]:
    """Why the native pipeline cannot batch these folders together, or None when it can."""
    why = _user_source.refused(folders)
    if why is not None:
        return why
    for f in folders:
        if f.per_sample:
            return ("runs per sample (Python transform steps, or an output size that depends on "
                    "the image)")
    first = folders[0].native_options()
    if any(f.native_options() != first for f in folders[1:]):
        return "combines ImageFolders with different transforms"
    return None


def _generic_reason(dataset: Any, view: Any) -> str:
    if view is None:
        return (f"{type(dataset).__module__}.{type(dataset).__name__} is not a ringloader "
                "ImageFolder, DatasetFolder or FileList")
    return "the dataset " + _servable(view[0])


def _wraps_image_folder(dataset: Any, depth: int = 0) -> bool:
    """True when a ringloader ImageFolder is inside ``dataset`` (``.dataset``/``.datasets``)."""
    if isinstance(dataset, NativeDataset):
        return True
    if depth > 8:
        return False
    inner = [getattr(dataset, "dataset", None)] + list(getattr(dataset, "datasets", None) or [])
    return any(d is not None and _wraps_image_folder(d, depth + 1) for d in inner)


def _warn_wrapper(dataset: Any, reason: str) -> None:
    """One warning per loader (Python's default filter then shows it once per call site)."""
    name = f"{type(dataset).__module__}.{type(dataset).__name__}"
    warnings.warn(
        f"ringloader.DataLoader: {name} wraps a ringloader.ImageFolder but {reason}, so it runs on "
        "torch's generic path (per-sample __getitem__ in worker processes, about 4x slower than "
        "the native path). Subset, random_split and ConcatDataset of ImageFolders with one "
        "transform stay native.", UserWarning, stacklevel=3)


class _Progress:
    """What state_dict() needs to know about the epoch in progress."""

    __slots__ = ("epoch", "seed", "sampler_state", "skip", "delivered", "rows", "done")

    def __init__(self, epoch: int, seed: Optional[int], sampler_state: dict, skip: int):
        self.epoch, self.seed, self.sampler_state, self.skip = epoch, seed, sampler_state, skip
        self.delivered = 0
        self.rows = 0  # rows of the next planned batch already delivered (skip refill)
        self.done = False


def _resumed_batches(loader: DataLoader, state: dict, n: int):
    """(the batches of the epoch ``state`` was taken in, sampler state, batches already
    delivered): iteration resumes at that batch of those batches."""
    delivered = int(state["delivered"])
    sampler_state = state["sampler"]
    if sampler_state["kind"] in ("distributed", "resharded", "webdataset",
                                 "webdataset_resharded"):
        target = getattr(loader.batch_sampler, "sampler", loader.sampler)
        rank, world = getattr(target, "rank", 0), getattr(target, "num_replicas", 1)
        if sampler_state["num_replicas"] != world:
            # The new layout's epoch is what remains; its own checkpoints count from there.
            resharded = _order.reshard(sampler_state, delivered, rank, world, loader.batch_size,
                                       loader.drop_last)
            return _order.replay_epoch(resharded, loader.batch_sampler, n), resharded, 0
        # Same world size: this rank's part of the layout, whichever rank wrote the checkpoint.
        sampler_state = dict(sampler_state, rank=rank)
    return _order.replay_epoch(sampler_state, loader.batch_sampler, n), sampler_state, delivered


def _generators(loader: DataLoader) -> list:
    """The random generators an epoch's plan draws from besides torch's global one: the loader's
    ``generator`` (the base seed) and its sampler's (the order), each once."""
    sampler = getattr(loader.batch_sampler, "sampler", loader.sampler)
    found = []
    for g in (loader.generator, getattr(sampler, "generator", None)):
        if g is not None and all(g is not h for h in found):
            found.append(g)
    return found


def _restore_generators(loader: DataLoader, states: Optional[list]) -> None:
    """Sets the loader's generators to a checkpoint's states: the epochs after the resumed one
    then draw their seed and order where the checkpointed run would have (a fresh generator would
    repeat epoch 0's)."""
    for g, state in zip(_generators(loader), states or ()):
        g.set_state(state)


def _attributes(obj: Any) -> dict:
    """A shallow snapshot of ``obj``'s attributes: numbers and strings by value, anything else
    by identity (a sampler's dataset, weights or generator)."""
    return {k: v if isinstance(v, (bool, int, float, str, type(None))) else id(v)
            for k, v in vars(obj).items()}


class _Ahead:
    """The epoch the next ``iter()`` is predicted to plan: its base seed and batches, computed
    with every RNG involved set back afterwards (torch's global one, the loader's and the
    sampler's generators), and the RNG states before and after those draws.

    A guess, never a draw. At the next ``iter()``, if every input of the plan is still what it
    was (the RNG states, the sampler's and batch sampler's attributes, a DistributedSampler's
    epoch as predicted), drawing again would give the very same seed and batches and leave the
    RNGs in the recorded after-states: the plan is used and the RNGs are set to those states,
    so order and RNG consumption are exactly torch's without planning twice. Otherwise it is
    dropped and the epoch planned as usual (and the native loader cancels the queued work).
    """

    def __init__(self, loader: DataLoader):
        import torch

        self.kind = _order._sampler_kind(loader.batch_sampler.sampler)
        sampler = loader.batch_sampler.sampler
        self.generators = _generators(loader)
        saved_epoch = getattr(sampler, "epoch", None)
        if self.kind == "webdataset":
            sampler.epoch = loader._epoch  # what _sync_epoch will set at the next iter()
        if self.kind == "distributed":
            # The next epoch is one more than this one while set_epoch advances it, else the same.
            last, loader._last_sampler_epoch = loader._last_sampler_epoch, saved_epoch
            sampler.epoch = saved_epoch + 1 if last is None or last != saved_epoch else saved_epoch
        self.rng_before = torch.get_rng_state()
        self.before = [g.get_state() for g in self.generators]
        self.attributes = (_attributes(loader.batch_sampler), _attributes(sampler))
        self.dataset_len = len(loader.dataset)
        try:
            self.seed = int(torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item())
            plan = _order.plan_epoch(loader.batch_sampler, len(loader.dataset))
            self.rng_after = torch.get_rng_state()
            self.after = [g.get_state() for g in self.generators]
        finally:
            torch.set_rng_state(self.rng_before)
            for g, state in zip(self.generators, self.before):
                g.set_state(state)
            if self.kind in ("distributed", "webdataset"):
                sampler.epoch = saved_epoch
        self.batches, self.sampler_state = plan.batches, plan.sampler_state
        self.files: Optional[dict] = None  # set by the caller before the epoch is queued
        self.flat, self.offsets = _order.to_arrays(plan.batches)
        if loader._index_map is not None:
            self.flat = loader._index_map[self.flat]

    def miss(self, loader: DataLoader) -> Optional[str]:
        """None when the prediction holds now; else "rng" (torch's RNG was drawn from in
        between) or "inputs" (set_epoch, a changed sampler...)."""
        import torch

        sampler = loader.batch_sampler.sampler
        if (_attributes(loader.batch_sampler), _attributes(sampler)) != self.attributes:
            return "inputs"
        if len(loader.dataset) != self.dataset_len:  # samples reassigned
            return "inputs"
        if not torch.equal(torch.get_rng_state(), self.rng_before):
            return "rng"
        if any(not torch.equal(g.get_state(), state) for g, state in zip(self.generators, self.before)):
            return "rng"
        return None

    def draw(self) -> None:
        """Leaves the RNGs as drawing the plan would have."""
        import torch

        torch.set_rng_state(self.rng_after)
        for g, state in zip(self.generators, self.after):
            g.set_state(state)


def _file_states(loader: DataLoader, flat: np.ndarray) -> dict:
    """{path: (device, inode, size, mtime, ctime) or None if it cannot be stat'ed} of the files
    an epoch read ahead in the order ``flat`` may read before it is adopted, and of their
    directories. The pipeline holds at most its prefetch depth of batches (the pool's pipeline
    share, ``prefetch_max`` with auto prefetch), so only that many leading rows can be read ahead;
    the rest of the epoch is read after adoption, as the files are then."""
    s = loader._native.stats()
    rows = max(s["prefetch_batches"], s["prefetch_max"]) * loader._options["batch_size"]
    files = dict.fromkeys(loader._paths[i] for i in flat[:rows].tolist())
    folders = dict.fromkeys(os.path.dirname(p) or "." for p in files)
    return {path: _file_state(path) for path in list(folders) + list(files)}


def _file_state(path: str) -> Optional[tuple]:
    """(device, inode, size, mtime, ctime) of ``path``, or None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _changed_files(before: Optional[dict]) -> str:
    """What changed since ``before`` (``_file_states``) was taken, or "" when nothing did."""
    for path, was in (before or {}).items():
        now = _file_state(path)
        if now == was:
            continue
        if now is None or was is None:
            return f"{path} {'disappeared' if now is None else 'appeared'}"
        if now[:2] != was[:2]:
            return f"{path} was replaced (another inode)"
        what = "size" if now[2] != was[2] else "modification time" if now[3] != was[3] else \
            "status change time"
        return f"{path} changed ({what})"
    return ""


def _plan_ahead(loader: DataLoader) -> Optional[_Ahead]:
    """The next epoch's prediction, or None where the next order cannot be computed without
    side effects (a sampler other than torch's, which might keep its own state)."""
    import torch.utils.data as tud

    if type(loader.batch_sampler) is not tud.BatchSampler:
        return None
    if _order._sampler_kind(loader.batch_sampler.sampler) == "opaque":
        return None
    return _Ahead(loader)


def _peek_seed(generator: Any) -> int:
    """A seed from torch's RNG (``generator``'s, else the global one) without advancing it: the
    generic path's augmentation seed, taken where torch's own RNG use is already done, so the
    RNG stream the caller sees is exactly torch's."""
    import torch

    source = generator if generator is not None else torch.default_generator
    state = source.get_state()
    seed = int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())
    source.set_state(state)
    return seed


class _PlannedBatches:
    """The generic path's batch sampler: torch's own batch sampler, evaluated as an epoch plan.

    torch's loader iterates it in the main process when it first needs indices, after drawing its
    base seed, the moment torch's own sampler would draw: so order and RNG consumption are
    torch's. A pending ``load_state_dict`` replays the recorded epoch from where it stopped.

    With ``keyed``, batches hold :class:`SampleKey` s instead of indices: each sample's
    augmentations are seeded by (base seed, index, position in the epoch), whichever worker
    process makes it, and a resumed epoch keeps the positions (so its samples equal an
    uninterrupted run's). The base seed is peeked from torch's RNG after torch's own draws
    (``_peek_seed``) and saved in ``state_dict``.
    """

    def __init__(self, loader: DataLoader, batch_sampler: Any, dataset_len: int, keyed: bool):
        self._loader, self._inner, self._n, self._keyed = loader, batch_sampler, dataset_len, keyed

    def __len__(self) -> int:
        return len(self._inner)

    def __iter__(self):
        loader = self._loader
        resume, loader._resume = loader._resume, None
        if resume is None:
            _sync_epoch(loader)
            plan = _order.plan_epoch(self._inner, self._n)
            batches, sampler_state, skip = plan.batches, plan.sampler_state, 0
            seed = _peek_seed(loader.generator) if self._keyed else None
        else:
            batches, sampler_state, skip = _resumed_batches(loader, resume, self._n)
            _restore_generators(loader, resume.get("generators"))
            seed = resume.get("base_seed") if self._keyed else None
            if self._keyed and seed is None:
                raise ValueError("this checkpoint has no base_seed (it comes from a loader over another "
                                 "dataset); a ringloader ImageFolder needs it to repeat its augmentations")
        epoch = loader._epoch
        loader._current = _Progress(epoch, seed, sampler_state, skip)
        loader._epoch += 1
        if not self._keyed:
            yield from batches[skip:]
            return
        position = sum(len(b) for b in batches[:skip])
        for batch in batches[skip:]:
            yield [SampleKey(int(i), seed, _AUGMENT_EPOCH, position + k) for k, i in enumerate(batch)]
            position += len(batch)


def _start_generic(torch_loader: Any) -> Iterator[Any]:
    """``iter(torch_loader)``, where torch forks its worker processes, without losing a Ctrl-C.

    A SIGINT that arrives while ``os.fork()`` runs is handled at the first Python line of the
    interpreter's fork callbacks (``logging`` registers some), and CPython reports an exception
    raised there as "Exception ignored" and drops it: the KeyboardInterrupt vanishes and the
    training loop carries on as if Ctrl-C had never been pressed. Here such an interrupt is kept
    and raised once the iterator is made (whose workers then shut down as on any Ctrl-C). It
    cannot be signalled again from the report: the handler would run, and be dropped, there."""
    import sys
    import threading

    pid, thread = os.getpid(), threading.get_ident()
    previous = sys.unraisablehook
    dropped: list = []
    starting = True

    def hook(unraisable: Any) -> None:
        # Fork callbacks run on the forking thread; a forked child keeps the default report, and
        # so does everything once the start is over (another thread may have chained onto this).
        if (starting and unraisable.exc_type is not None
                and issubclass(unraisable.exc_type, KeyboardInterrupt)
                and os.getpid() == pid and threading.get_ident() == thread):
            dropped.append(unraisable.exc_value)
            return
        previous(unraisable)

    sys.unraisablehook = hook
    try:
        batches = iter(torch_loader)
    finally:
        starting = False
        if sys.unraisablehook is hook:  # unless something replaced it meanwhile
            sys.unraisablehook = previous
    if dropped:
        del batches  # shuts its workers down
        raise dropped[0].with_traceback(None)
    return batches


def _count_delivered(loader: DataLoader, batches: Iterator[Any]) -> Iterator[Any]:
    """Counts the batches the caller received (after torch's prefetching and any device
    staging, which run ahead), for the generic path's state_dict."""
    progress = None
    for batch in batches:
        if progress is None:
            progress = loader._current  # made by _PlannedBatches when torch first drew from it
        progress.delivered += 1
        yield batch
    if loader._current is not None:
        loader._current.done = True


class _NativeIter:
    """One epoch of a native DataLoader. A newer ``iter(loader)`` supersedes this one."""

    def __init__(self, loader: DataLoader):
        import torch

        self._loader = loader
        self._torch = torch
        try:
            # A local shard changed since its index was built: nothing of this epoch may be read
            # with that index (before any RNG is drawn, so a retry after rebuilding is the same).
            for f in loader._folders:
                if isinstance(f, WebDataset):
                    f.check_shards()
        except StaleIndexError:
            loader._native.cancel_queued()
            raise
        resume, loader._resume = loader._resume, None
        n = len(loader.dataset)
        self._skip = 0
        self._drop_rows = 0
        ahead, loader._ahead = loader._ahead, None
        if resume is None:
            _sync_epoch(loader)  # a WebDataset's order takes the loader's epoch (before the check)
        miss = "inputs" if ahead is None or resume is not None else ahead.miss(loader)
        if miss == "rng" and loader._overlap_off is None:
            # Something draws from torch's RNG between epochs, so predictions would keep missing
            # (wasted work): stop predicting.
            loader._overlap_off = ("torch's random generator is drawn from or re-seeded between "
                                   "epochs, so the next epoch's seed cannot be known ahead")
        if miss is None:
            # The prediction holds: the same seed and batches as drawing now, RNGs advanced alike.
            ahead.draw()
            changed = _changed_files(ahead.files)
            if changed:
                # Its order and seed are right, but rows read ahead may hold the old files'
                # bytes: start the epoch afresh, reading the files as they are now.
                loader._native.cancel_queued()
                loader._stale_drops += 1
                loader._stale_why = changed
            self._seed, batches, self._sampler_state = ahead.seed, ahead.batches, ahead.sampler_state
            flat, offsets = ahead.flat, ahead.offsets
        else:
            if resume is None:
                # Same RNG consumption as torch's iterator: the base seed first, then the sampler.
                self._seed = int(torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item())
                plan = _order.plan_epoch(loader.batch_sampler, n)
                batches, self._sampler_state = plan.batches, plan.sampler_state
            else:
                self._seed = resume["base_seed"]
                batches, self._sampler_state, self._skip = _resumed_batches(loader, resume, n)
                _restore_generators(loader, resume.get("generators"))
                self._drop_rows = int(resume.get("rows", 0))
            flat, offsets = _order.to_arrays(batches)
            if loader._index_map is not None:
                flat = loader._index_map[flat]  # a Subset/ConcatDataset's positions -> samples
        loader._generation += 1
        self._generation = loader._generation
        self._epoch = loader._epoch
        loader._epoch += 1
        self._pid = os.getpid()
        # The loader keeps only this record (for state_dict), never the iterator itself, so an
        # abandoned iterator is collected and its __del__ stops the epoch's threads.
        self._progress = loader._current = _Progress(
            self._epoch, self._seed, self._sampler_state, self._skip)
        self._len = len(batches) - self._skip
        # on_error="skip" with drop_last: every batch full (see the class docstring). _carry holds
        # [batch number, first row, images, labels] of rows received and not yet delivered.
        self._refill = loader._options["on_error"] == "skip" and loader.drop_last and \
            loader.batch_size is not None
        self._carry: list = []
        loader._queued = None
        # Whole order, started at the first undelivered batch: rows keep their positions (seeds).
        # A queued epoch with this very order and seed is adopted (its batches decoded ahead are
        # delivered); anything else cancels it.
        loader._native.start_epoch(_AUGMENT_EPOCH, self._seed & (2**64 - 1), flat, offsets, self._skip)
        self._done = False
        if loader._overlap_off is None:
            ahead = _plan_ahead(loader)
            if ahead is not None:
                # Before anything of it is read: what the next iter() compares the files with.
                ahead.files = _file_states(loader, ahead.flat)
                loader._native.queue_epoch(_AUGMENT_EPOCH, ahead.seed & (2**64 - 1), ahead.flat, ahead.offsets)
                loader._queued, loader._ahead = (loader._epoch, ahead.seed), ahead

    def __iter__(self) -> "_NativeIter":
        return self

    def __len__(self) -> int:
        return self._len

    def __next__(self):
        if self._done:
            raise StopIteration
        if self._pid != os.getpid():
            raise RuntimeError(
                "this ringloader iterator was created before fork(); its native threads live in the "
                f"parent (pid {self._pid}). Call iter(loader) again in this process to restart.")
        if self._generation != self._loader._generation:
            raise RuntimeError(
                "this iterator was superseded: a newer iter() over the same ringloader.DataLoader "
                "started another epoch (one epoch runs at a time per loader)"
            )
        while True:
            try:
                item = self._loader._native.next(self._loader.timeout)
            except StaleIndexError as exc:
                # A pipe: shard's index (cached) no longer matches its stream: the epoch ended.
                told = exc
                for f in self._loader._folders:
                    if isinstance(f, WebDataset):
                        told = f.stale_index_error(told)
                try:
                    if told is exc:
                        raise
                    raise told from None
                finally:
                    del told
            except _C.SampleError as exc:
                annotated = annotate_error(exc, self._loader._folders)
                try:
                    if annotated is exc:
                        raise
                    raise annotated from None
                finally:
                    # A local holding the exception raised from this frame would be a cycle
                    # (exception -> traceback -> frame -> exception) keeping the iterator, and
                    # the batches it references, alive until the garbage collector runs.
                    del annotated
            if item is None:
                self._done = self._progress.done = True  # refill: a short remainder is dropped
                raise StopIteration
            images, labels, _indices, number = item
            from_dlpack = self._torch.from_dlpack
            images, labels = from_dlpack(images), from_dlpack(labels)
            if labels.is_cuda:
                # A copy on the current stream, after the wait from_dlpack queued: keeping labels
                # (for metrics) must not keep the batch's device buffer out of the ring.
                labels = labels.clone()
            if self._refill:
                batch = self._refilled(number, images, labels)
                if batch is None:
                    continue
                images, labels, number = batch
            else:
                self._progress.delivered = number + 1 - self._skip
            loader = self._loader
            if loader._batcher is not None:
                return loader._batcher.batch(images, labels, loader.collate_fn, loader._native.views)
            if loader._channels_last:
                images = images.permute(0, 3, 1, 2)  # NCHW shape, channels-last strides, no copy
            if loader.batch_transform is not None:
                labels = self._mix(images, labels, number)
            if loader.collate_fn is not None:
                # torch's contract: the list of samples. Each image is a view of its slot row;
                # the slot is recycled only once every view of it is released.
                samples = list(zip(images.unbind(0), labels.tolist()))
                del images, labels
                return loader.collate_fn(samples)
            return images, labels

    def _mix(self, images: Any, labels: Any, number: int) -> Any:
        """batch_transform on the batch in its slot (``_mixing``), seeded by (base seed, batch
        number in the epoch); returns the soft labels."""
        view = images
        if self._loader._options["layout"] == "NHWC" and not self._loader._channels_last:
            view = images.permute(0, 3, 1, 2)  # the raw [B,H,W,3] batch, mixed through NCHW
        gen = _mixing.rng(self._seed, number)
        params = _mixing.sample(self._loader.batch_transform, gen, view.shape[0], view.shape[2],
                                view.shape[3])
        return _mixing.apply(view, labels, params)

    def _refilled(self, number: int, images: Any, labels: Any):
        """A full batch from the rows received so far, or None when more rows are needed.

        Rule: the rows that survive skipping, in epoch order, cut into batches of batch_size.
        """
        first = 0
        if self._drop_rows:  # resumed inside this batch: its first rows were delivered before
            first, self._drop_rows = self._drop_rows, 0
            images, labels = images[first:], labels[first:]
        size = self._loader.batch_size
        if not self._carry and images.shape[0] == size:
            self._progress.delivered, self._progress.rows = number + 1 - self._skip, 0
            return images, labels, number
        self._carry.append([number, first, images, labels])
        if sum(segment[2].shape[0] for segment in self._carry) < size:
            self._carry[-1][2] = images.clone()  # kept across next(): a copy, not the slot
            return None
        # The batch's number (its mixing seed) is that of the planned batch its first row is from:
        # distinct for every delivered batch, and the same after a resume.
        parts_images, parts_labels, need, start = [], [], size, self._carry[0][0]
        while need:
            segment = self._carry[0]
            take = min(need, segment[2].shape[0])
            parts_images.append(segment[2][:take])
            parts_labels.append(segment[3][:take])
            need -= take
            if take == segment[2].shape[0]:
                self._carry.pop(0)
            else:
                segment[1] += take
                segment[2], segment[3] = segment[2][take:].clone(), segment[3][take:]
        if self._carry:
            self._progress.delivered = self._carry[0][0] - self._skip
            self._progress.rows = self._carry[0][1]
        else:
            self._progress.delivered, self._progress.rows = number + 1 - self._skip, 0
        cat = self._torch.cat
        return cat(parts_images), cat(parts_labels), start

    def __del__(self):
        # An abandoned epoch (break, exception in the loop) stops its threads now rather than at
        # the next iter(); a superseded iterator leaves the newer epoch alone.
        loader = getattr(self, "_loader", None)
        try:
            if loader is not None and not self._done and self._generation == loader._generation \
                    and self._pid == os.getpid():
                loader._native.stop()
        except Exception:  # interpreter shutdown: the loader's own destructor stops it
            pass


def _check_device(device: Any) -> str:
    """``None``/``"cpu"``/``"cuda"``/``"cuda:N"`` or a ``torch.device``, as the native string."""
    if device is None:
        return "cpu"
    text = str(device)  # torch.device("cuda", 1) -> "cuda:1"
    if text == "cpu" or text == "cuda" or (text.startswith("cuda:") and text[5:].isdigit()):
        return text
    raise ValueError(f"device must be None, 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def _generic_device(device: str):
    """The torch.device batches of the generic path are staged to, or None for host batches."""
    if device == "cpu":
        return None
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"device={device!r} but no CUDA device is visible to torch")
    return torch.device(device)


def _device_prefetch(batches: Iterator[Any], device: Any) -> Iterator[Any]:
    """Generic-path staging: copies batch i+1 to `device` on a side stream while the consumer
    works on batch i; the consumer's stream waits on the copy's event, never the host."""
    import torch

    copy_stream = torch.cuda.Stream(device=device)

    def stage(batch):
        with torch.cuda.stream(copy_stream):
            moved = _map_tensors(batch, lambda t: t.to(device, non_blocking=True))
        event = torch.cuda.Event()
        event.record(copy_stream)
        return moved, event

    pending = None
    for batch in batches:
        staged = stage(batch)
        if pending is not None:
            yield _hand_over(*pending, device)
        pending = staged
    if pending is not None:
        yield _hand_over(*pending, device)


def _hand_over(batch: Any, event: Any, device: Any) -> Any:
    import torch

    current = torch.cuda.current_stream(device)
    current.wait_event(event)
    # The tensors were allocated on the copy stream: tell the caching allocator they are used
    # on the consumer's stream too, so their memory is not reused before that work finishes.
    _map_tensors(batch, lambda t: (t.record_stream(current), t)[1])
    return batch


def _map_tensors(obj: Any, fn: Callable) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (list, tuple)):
        mapped = [_map_tensors(o, fn) for o in obj]
        return type(obj)(*mapped) if hasattr(obj, "_fields") else type(obj)(mapped)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return obj


def _check_numa(numa: Any) -> Any:
    if numa is None or numa == "auto":
        return numa
    if isinstance(numa, bool) or not isinstance(numa, (int, np.integer)) or numa < 0:
        raise ValueError(f"numa must be None, 'auto' or a node number >= 0, got {numa!r}")
    return int(numa)


def _shard_sampler(dataset: Any, sampler: Any, batch_sampler: Any, rank: Optional[int],
                   world_size: Optional[int], shuffle: Any, seed: int, drop_last: bool):
    """The DistributedSampler that shards the default order, or None when not distributed.

    Both paths shard the same way: by ``rank``/``world_size`` or an initialised process group,
    and only when the user gave no sampler of their own.
    """
    import torch.utils.data as tud

    if sampler is not None or batch_sampler is not None:
        if rank is not None or world_size is not None:
            raise ValueError("rank/world_size shard the default sampler; they are mutually "
                             "exclusive with sampler and batch_sampler (use a DistributedSampler)")
        return None
    rank, world_size = _distributed_layout(rank, world_size)
    if isinstance(dataset, WebDataset):
        return WebDatasetSampler(dataset, world_size or 1, rank or 0, shuffle=bool(shuffle),
                                 seed=seed, drop_last=drop_last)
    if world_size is None:
        return None
    return tud.distributed.DistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                              shuffle=bool(shuffle), seed=seed, drop_last=drop_last)


def _sync_epoch(loader: DataLoader) -> None:
    """A WebDataset order's epoch is the loader's (its count of iter() calls, or set_epoch's)."""
    target = getattr(loader.batch_sampler, "sampler", loader.sampler)
    if isinstance(target, WebDatasetSampler):
        target.set_epoch(loader._epoch)


def _check_streams(dataset: Any, view: Any, sampler: Any, batch_sampler: Any) -> None:
    """pipe: shards are read front to back: only a WebDataset's own order can read them."""
    folders = view[0] if view is not None else []
    streamed = [f for f in folders if isinstance(f, WebDataset) and f.streamed]
    if not streamed:
        return
    if streamed[0].per_sample:
        raise ValueError(
            f"{streamed[0]._name()} has pipe: shards and its transform runs per sample (Python "
            "steps, or an output size that depends on the image), which needs random access to "
            "samples: use a transform that runs natively to a fixed size, or local shards")
    if not isinstance(dataset, WebDataset):
        raise ValueError(
            f"{type(dataset).__name__} over a WebDataset with pipe: shards: a stream is read "
            "front to back, so only the WebDataset itself, in its own order, can be loaded. Use "
            "local shards for Subset/ConcatDataset/random_split.")
    custom = batch_sampler if batch_sampler is not None else sampler
    if custom is not None and not isinstance(custom, WebDatasetSampler) and not isinstance(
            getattr(custom, "sampler", None), WebDatasetSampler):
        raise ValueError(
            f"sampler/batch_sampler {type(custom).__name__} over a WebDataset with pipe: shards: "
            "a stream is read front to back and cannot serve an arbitrary order. Leave sampler "
            "unset (the WebDataset order shuffles shards and a buffer; rank/world_size shard it), "
            "or use local shards, which allow any sampler.")


def _distributed_layout(rank: Optional[int], world_size: Optional[int]):
    """(rank, world_size) from the arguments or an initialised torch.distributed group."""
    if rank is None and world_size is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return None, None
    if rank is None or world_size is None:
        raise ValueError("rank and world_size must be given together")
    world_size = _check_int("world_size", world_size, 1)
    rank = _check_int("rank", rank, 0)
    if rank >= world_size:
        raise ValueError(f"rank should be in [0, world_size), got rank={rank} world_size={world_size}")
    return rank, world_size
