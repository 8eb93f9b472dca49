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

__version__ = "0.1.0"

__all__ = [
    "DataLoader",
    "DatasetFolder",
    "FileList",
    "ImageFolder",
    "IMG_EXTENSIONS",
    "LoaderTimeoutError",
    "NativeDataset",
    "SampleError",
    "SlotsExhaustedError",
    "transforms",
    "__version__",
]
