"""A ``torchvision.datasets.ImageFolder``/``DatasetFolder`` served natively: its samples,
classes and transforms as a :class:`ringloader.FileList` (:class:`TorchvisionFolder`) when
:func:`torchvision_folder` finds they convert, else the reason it stays on torch's path.
"""

from __future__ import annotations

from typing import Any

from ._fallback import chain_reasons
from .datasets import FileList

__all__ = ["TorchvisionFolder", "torchvision_folder"]


class TorchvisionFolder(FileList):
    """A ``torchvision.datasets.ImageFolder``/``DatasetFolder`` served natively: its samples,
    classes, transform and target_transform as a :class:`ringloader.FileList`. A transform,
    target_transform or samples list assigned on the torchvision dataset later is taken up at
    the loader's next ``iter()``, as with a ringloader ImageFolder."""

    _warns_on_python_steps = False  # no strict=; the DataLoader's warning names the step

    #: A torch dataset served natively: arguments only torch's worker processes honour
    #: (``_native_sources._torch_only``) keep the loader on torch's path instead of being refused.
    serves_torch_dataset = True

    def __init__(self, folder: Any):
        self._folder = folder  # first: ``version`` reads it
        self._seen = (folder.transform, folder.target_transform, folder.samples)
        super().__init__([p for p, _ in folder.samples], [t for _, t in folder.samples],
                         transform=folder.transform, target_transform=folder.target_transform,
                         classes=list(folder.classes))

    @property
    def version(self) -> int:
        folder = self.__dict__.get("_folder")
        if folder is not None:
            seen = (folder.transform, folder.target_transform, folder.samples)
            if any(a is not b for a, b in zip(seen, self._seen)):
                self._seen = seen
                self.samples = folder.samples
                self.transform = folder.transform
                self.target_transform = folder.target_transform
        return self._version

    @version.setter
    def version(self, value: int) -> None:
        self._version = value

    def _name(self) -> str:
        folder = self._folder
        return f"{type(folder).__module__}.{type(folder).__name__}({folder.root!r})"

    def describe(self) -> str:
        return (f"{self._name()} served natively: {len(self)} samples, {len(self.classes)} "
                "classes")


def torchvision_folder(dataset: Any) -> tuple:
    """``(source, None)`` when ``dataset`` is a torchvision ``DatasetFolder`` (``ImageFolder``)
    the native path serves as it is: its own ``__getitem__`` and ``__len__``, torchvision's
    Pillow loader, a transform that runs natively to a fixed size and int targets after its
    target_transform; ``(None, why not)`` for another torchvision folder; ``(None, None)`` for
    any other dataset."""
    import sys

    if "torchvision.datasets.folder" not in sys.modules:
        # No torchvision folder exists yet, so this is none. Not imported here: its import
        # costs a second, and torch keeps frames of it (torch.fx's wrap keeps the module frame
        # calling it) whose callers would then hold the loader being built.
        return None, None
    from torchvision import get_image_backend
    from torchvision.datasets import folder as tvf

    if not isinstance(dataset, tvf.DatasetFolder):
        return None, None
    kind = type(dataset)
    if kind.__getitem__ is not tvf.DatasetFolder.__getitem__ or \
            kind.__len__ is not tvf.DatasetFolder.__len__:
        return None, "its class overrides __getitem__ or __len__"
    loader = getattr(dataset, "loader", None)
    if not (loader is tvf.pil_loader or
            (loader is tvf.default_loader and get_image_backend() == "PIL")):
        return None, (f"its loader {getattr(loader, '__qualname__', type(loader).__name__)} is "
                      "not torchvision's Pillow loader (ringloader decodes the files itself)")
    if not dataset.samples:
        return None, "it has no samples"
    try:
        reasons = chain_reasons(dataset.transform, "its transform")
    except (TypeError, ValueError) as exc:
        return None, f"its transform is refused: {exc}"
    if reasons:
        return None, reasons[0]
    try:
        source = TorchvisionFolder(dataset)
        source.native_targets()  # target_transform must map each target to an int
    except (TypeError, ValueError) as exc:
        return None, f"{exc}"
    return source, None
