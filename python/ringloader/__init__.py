"""ringloader: native, high-throughput image data loading for PyTorch.

    import ringloader as rl
    from ringloader import transforms as T
    ds = rl.ImageFolder(root, transform=T.Compose([T.RandomResizedCrop(224),
                                                   T.RandomHorizontalFlip(), T.ToTensor()]))
    for images, labels in rl.DataLoader(ds, batch_size=256, shuffle=True, num_workers=2):
        ...

The package is folded by layer, lowest first; a module imports only from its own layer and
those below (tests/python/test_structure.py checks it). Each folder's docstring maps its modules.

* ``core``: the foundation: the Source protocol and sample table, options and node, orders, checkpoints and ranks, URL schemes, the shard index and remote downloads.
* ``transforms``: native transforms (``Compose``, ``Resize``, ...), the converters of torchvision's and timm's classes, clip sampling (``clips``).
* ``sources``: the datasets (``ImageFolder``, ``WebDataset``, ``HFDataset``, ``VideoFolder``...), the references a user's Dataset returns, and how each is read.
* ``loader``: ``DataLoader``, its two backends, epoch planning, video clip batches.
* ``_public_paths``: the import paths of the public modules that live in the folders above (``ringloader.webdataset`` is ``ringloader.sources.webdataset``).

The top level holds the tools, above every folder:

* ``pack``: packs a folder or a file list into WebDataset shards (``python -m ringloader.pack``).
* ``bench``: the throughput comparisons with torch's DataLoader and the peers (``python -m ringloader.bench``), a package of one module per comparison, mapped in its own docstring.
* ``sample_data``: the synthetic ImageNet-like sample set the benchmark and examples use.
* ``_C``: the native extension (readers, decoders, transforms, the batch ring).
* ``_synthetic_images``: the pixels of one synthetic photograph-like image and their JPEG encoding, for ``sample_data``.
* ``_pack_sources``: what ``pack`` reads: its sources' samples, each file opened within the source tree, checked as an image and re-encoded when needed.
* ``_cli``: the ``ringloader`` command (``compare``, ``bench``, ``tune``, ``pack``, ``doctor``) and its alias console scripts.
* ``doctor``: ``ringloader doctor``: the node inspected as a training job runs on it, each finding with its fix.
* ``__main__``: ``python -m ringloader``, the same command.
* ``_version``: the version, written by the build.
"""
from . import _C
from . import transforms
from .transforms import _tv_converters  # noqa: F401 (registers the converters of torchvision's and timm's classes)
from ._C import LoaderTimeoutError, SampleError, SlotsExhaustedError
from .loader.dataloader import DataLoader
from .sources.datasets import IMG_EXTENSIONS, DatasetFolder, FileList, ImageFolder, NativeDataset
from .sources.hf import HFDataset, Parquet
from .sources.references import ImageBytes, ImageFile, Joint, materialize
from .sources._fallback import FallbackWarning
from .core._source import StaleIndexError
from .sources.webdataset import WebDataset
from .transforms import clips
from .sources.video import VideoBytes, VideoFile
from .sources.frame_leaves import ClipIndices, ClipTimes, PerFrame
from .sources.video_folder import VideoFolder, VideoShards
from ._version import __version__  # written by the build from pyproject.toml's version
from . import _public_paths

_public_paths.register(__name__)

__all__ = [
    "ClipIndices",
    "ClipTimes",
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
    "PerFrame",
    "SampleError",
    "StaleIndexError",
    "SlotsExhaustedError",
    "clips",
    "transforms",
    "VideoBytes",
    "VideoFile",
    "VideoFolder",
    "VideoShards",
    "WebDataset",
    "__version__",
]
