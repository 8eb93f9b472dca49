"""ringloader: native, high-throughput image data loading for PyTorch.

    import ringloader as rl
    from ringloader import transforms as T
    ds = rl.ImageFolder(root, transform=T.Compose([T.RandomResizedCrop(224),
                                                   T.RandomHorizontalFlip(), T.ToTensor()]))
    for images, labels in rl.DataLoader(ds, batch_size=256, shuffle=True, num_workers=2):
        ...
"""

from . import _C
from . import transforms
from ._C import LoaderTimeoutError, SampleError, SlotsExhaustedError
from .dataloader import DataLoader
from .datasets import IMG_EXTENSIONS, DatasetFolder, FileList, ImageFolder, NativeDataset
from .hf import HFDataset, Parquet
from .references import ImageBytes, ImageFile, materialize
from .webdataset import StaleIndexError, WebDataset
from ._version import __version__  # written by the build from pyproject.toml's version

__all__ = [
    "DataLoader",
    "DatasetFolder",
    "FileList",
    "HFDataset",
    "ImageFolder",
    "IMG_EXTENSIONS",
    "ImageBytes",
    "ImageFile",
    "LoaderTimeoutError",
    "materialize",
    "NativeDataset",
    "Parquet",
    "SampleError",
    "StaleIndexError",
    "SlotsExhaustedError",
    "transforms",
    "WebDataset",
    "__version__",
]
