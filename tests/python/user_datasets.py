"""Small user Datasets the tests share: what a user's own ``torch.utils.data.Dataset`` returning
image references looks like."""

from __future__ import annotations

import torch

import ringloader as rl


class ImageFiles(torch.utils.data.Dataset):
    """``(rl.ImageFile(path, transform), index)`` for each path: a user's Dataset made native."""

    def __init__(self, paths, transform):
        self.paths, self.transform = paths, transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return rl.ImageFile(self.paths[i], transform=self.transform), i
