"""ringloader: native, high-throughput image data loading for PyTorch.

    import ringloader as rl
    from ringloader import transforms as T
    ds = rl.ImageFolder(root, transform=T.Compose([T.RandomResizedCrop(224),
                                                   T.RandomHorizontalFlip(), T.ToTensor()]))
    for images, labels in rl.DataLoader(ds, batch_size=256, shuffle=True, num_workers=2):
        ...

Map of the package (public modules first, then private ones):

* ``dataloader``: ``DataLoader``, the facade: checks the arguments, picks a backend, delegates.
* ``datasets``: ``ImageFolder``, ``DatasetFolder``, ``FileList`` (``NativeDataset``), sample tables.
* ``references``: ``ImageFile``/``ImageBytes`` image references a user's Dataset returns, ``Joint``, ``materialize``.
* ``hf``: ``HFDataset`` and ``Parquet``: image bytes read from Arrow buffers into references.
* ``webdataset``: ``WebDataset`` (tar shards, local, ``pipe:`` or remote) and its order, ``WebDatasetSampler``.
* ``clips``: video clip sampling as ``torchcodec.samplers`` samples (``random_indices``...), explicit frames, keyed draws, ``VideoMeta``.
* ``video``: ``VideoFile``/``VideoBytes`` video references decoded frame-exactly by the system's FFmpeg (loaded at run time), ``VideoMetadata``.
* ``video_folder``: ``VideoFolder``, class folders of video files (Kinetics/UCF101 layout), ``VIDEO_EXTENSIONS``.
* ``video_batches``: video clips batched natively (``_C.ClipPool``: native decode threads, v2's video transforms with one draw per clip), ``native_chain``.
* ``transforms``: native transforms (``Compose``, ``Resize``, ...), ``to_steps`` and ``split`` (a chain into its native steps and its Python tail).
* ``_steps``: the ``Transform`` protocol, the registry of converters of torchvision's and timm's classes, the parameter readers they share, ``to_steps``.
* ``_tv_converters``: the converters of torchvision's (v1, v2) and timm's classes, registered on import.
* ``pack``: packs a folder or a file list into WebDataset shards (``python -m ringloader.pack``).
* ``bench``: the throughput comparisons with torch's DataLoader and the peers (``python -m ringloader.bench``), a package of one module per comparison, mapped in its own docstring.
* ``sample_data``: the synthetic ImageNet-like sample set the benchmark and examples use.
* ``_C``: the native extension (readers, decoders, transforms, the batch ring).
* ``_source``: the Source protocol every sample source implements (length, table, shards, columns...), ``StaleIndexError``, the native loader's per-sample columns over all sources.
* ``_user_source``: ``UserSource``, a user's Dataset of image references as a native source (``source_for`` finds it); ``find_source``, the source standing for a Dataset the loader is given.
* ``_sample_table``: ``_SampleTable``, a native dataset's paths and labels in one arena, and its list-like views (``samples``, ``targets``).
* ``_folder_scan``: torchvision's folder scan (``find_classes``, the files of each class folder).
* ``_sample_keys``: ``SampleKey``, a sample and its augmentation seed on the generic path, and the seeds drawn from it.
* ``_synthetic_images``: the pixels of one synthetic photograph-like image and their JPEG encoding, for ``sample_data``.
* ``_pack_sources``: what ``pack`` reads: its sources' samples, each file opened within the source tree, checked as an image and re-encoded when needed.
* ``_arrow_columns``: Arrow columns as arrays for ``hf``: the image column's buffers, offsets and lengths, passed-through values, column checks.
* ``_parquet_files``: ``Parquet``'s files: globs and URLs found, remote files downloaded, the memory-mapped Arrow copy.
* ``_row_groups``: ``Parquet(copy=False)``'s row groups, read as an epoch needs them and fed to the native loader.
* ``_structures``: a user's samples' structures, their references replaced by placeholder leaves that a batch fills.
* ``_columns``: a columnar source's table (``Columns``), handed over whole.
* ``_batcher``: ``Batcher``, a user's batch rebuilt in its samples' structure from a native batch.
* ``_fallback``: ``FallbackWarning`` and why a dataset runs on torch's path, naming the step or reference.
* ``_torchvision_folder``: a torchvision ``ImageFolder``/``DatasetFolder`` served natively (``TorchvisionFolder``).
* ``_joint``: a ``Joint`` natively: its v2 transform split, boxes and keypoints moved by the recorded geometry.
* ``_detection``: converters of the steps of torchvision's detection references (``ScaleJitter``, ``RandomZoomOut``), and why the others are not native.
* ``_shard_index``: a WebDataset's shard URLs expanded, tar member keys, shard indexes (scan, sidecar, index cache).
* ``_remote_shards``: ``RemoteShards``, a WebDataset's remote shards: kept indexes, epoch downloads, range reads, ETags.
* ``_remote``: http(s) and s3 shards fetched natively into the node-local shard cache.
* ``_schemes``: the table of URL schemes (``file``, ``pipe:``, ``http(s)``, ``s3``) every path is classified by.
* ``_backend``: the backend protocol behind ``DataLoader`` and its shared checkpoint surface.
* ``_native``: the native backend (``_C.Loader``) and its epoch iterator.
* ``_native_sources``: which datasets the native backend serves (its view of their sources) and why others run on torch's path.
* ``_native_epoch``: one epoch of the native backend: its plan drawn, adopted or resumed, the next queued, batches delivered.
* ``_native_report``: the native backend's ``describe()`` lines and its remote links' estimates.
* ``_generic``: the generic backend (torch's DataLoader over any Dataset).
* ``_video_loader``: what the generic backend iterates for natively batched clips: their batches made ahead or when asked, within ``max_memory`` (``ClipSlots``).
* ``_options``: argument checks and what ``num_workers="auto"`` chooses.
* ``_planning``: epoch plans, the next epoch predicted and read ahead, the generic batch plan.
* ``_checkpoint``: ``state_dict``/``load_state_dict``: the epoch record and its resumption.
* ``_order``: samplers' epoch orders as a few integers (replay, resharding, WebDataset order).
* ``_distributed``: rank/world-size layout and the default sampler of a sharded run.
* ``_node``: the ranks sharing this machine (torchrun, SLURM, MPI variables), each one's share of its CPUs and memory, its GPU's NUMA node and its disjoint CPUs.
* ``_staging``: device staging on the generic path (side CUDA stream).
* ``_mixing``: CutMix/MixUp applied in place to a batch in its slot.
* ``_atomic``: files written whole or not at all (pack outputs, index caches).
* ``_sizes``: byte sizes written as text (``"2GB"``).
* ``_cli``: the ``ringloader`` command (``compare``, ``bench``, ``tune``, ``pack``, ``doctor``) and its alias console scripts.
* ``doctor``: ``ringloader doctor``: the node inspected as a training job runs on it, each finding with its fix.
* ``__main__``: ``python -m ringloader``, the same command.
* ``_version``: the version, written by the build.
"""
from . import _C
from . import transforms
from . import _tv_converters  # noqa: F401 (registers the converters of torchvision's and timm's classes)
from ._C import LoaderTimeoutError, SampleError, SlotsExhaustedError
from .dataloader import DataLoader
from .datasets import IMG_EXTENSIONS, DatasetFolder, FileList, ImageFolder, NativeDataset
from .hf import HFDataset, Parquet
from .references import ImageBytes, ImageFile, Joint, materialize
from ._fallback import FallbackWarning
from ._source import StaleIndexError
from .webdataset import WebDataset
from . import clips
from .video import VideoBytes, VideoFile
from .video_folder import VideoFolder
from ._version import __version__  # written by the build from pyproject.toml's version

__all__ = [
    "DataLoader",
    "DatasetFolder",
    "FallbackWarning",
    "FileList",
    "HFDataset",
    "ImageFolder",
    "IMG_EXTENSIONS",
    "ImageBytes",
    "ImageFile",
    "Joint",
    "LoaderTimeoutError",
    "materialize",
    "NativeDataset",
    "Parquet",
    "SampleError",
    "StaleIndexError",
    "SlotsExhaustedError",
    "clips",
    "transforms",
    "VideoBytes",
    "VideoFile",
    "VideoFolder",
    "WebDataset",
    "__version__",
]
