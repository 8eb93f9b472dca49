"""torchvision's classification reference presets run natively, and only they are unwrapped.

A preset is an object whose ``__call__`` only applies ``self.transforms`` (see
``ringloader.transforms._unwrap_preset``); anything that does more stays a Python callable.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import pytest
import torch
import torchvision.transforms as v1
from torchvision.datasets import ImageFolder as TorchvisionImageFolder

import ringloader as rl
from classification_presets import ClassificationPresetEval, ClassificationPresetTrain
from imagegen import write_flavour_tree


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """8 JPEGs of every flavour (4:2:0/4:4:4/4:2:2, progressive, gray, CMYK), 2 classes."""
    return write_flavour_tree(tmp_path_factory.mktemp("presets"), seed=7100)


def native_loader(root: Path, transform) -> rl.DataLoader:
    """The loader, asserting that nothing warned (no Python tail, no generic path)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = rl.ImageFolder(str(root), transform=transform)
        loader = rl.DataLoader(ds, batch_size=len(ds), fast_decode=False)
    assert loader.native and not ds.per_sample and ds.python_steps == []
    return loader


def first_batch(loader: rl.DataLoader, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    images, _ = next(iter(loader))
    return images.clone()


@pytest.mark.parametrize("use_v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("interpolation", [v1.InterpolationMode.BILINEAR, v1.InterpolationMode.BICUBIC],
                         ids=["bilinear", "bicubic"])
def test_eval_preset_is_native_and_equals_torchvision(tree: Path, use_v2, interpolation):
    preset = ClassificationPresetEval(crop_size=64, resize_size=72, interpolation=interpolation, use_v2=use_v2)
    ours = first_batch(native_loader(tree, preset))
    ref = TorchvisionImageFolder(str(tree), transform=preset)
    theirs = torch.stack([ref[i][0] for i in range(len(ref))])
    assert type(theirs) is torch.Tensor and ours.dtype == theirs.dtype == torch.float32
    assert ours.shape == theirs.shape == (8, 3, 64, 64)
    assert (ours - theirs).abs().max().item() == 0


@pytest.mark.parametrize("use_v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("policy", [None, "ta_wide", "ra"])
def test_train_preset_runs_its_transforms_natively(tree: Path, use_v2, policy):
    preset = ClassificationPresetTrain(crop_size=48, auto_augment_policy=policy, random_erase_prob=0.25,
                                       use_v2=use_v2)
    split = rl.transforms.split(preset)
    assert split.tail is None, split.reason
    assert split.steps == rl.transforms.split(preset.transforms).steps
    assert [s["kind"] for s in split.steps][:2] == ["random_resized_crop", "random_horizontal_flip"]
    # The preset gives exactly the batches of the Compose it wraps (whose steps test_recipes.py
    # compares with torchvision), draw for draw.
    ours = first_batch(native_loader(tree, preset), seed=4)
    inner = first_batch(native_loader(tree, preset.transforms), seed=4)
    assert ours.shape == (8, 3, 48, 48) and torch.equal(ours, inner)
    assert not torch.equal(ours, first_batch(native_loader(tree, preset), seed=5))


# ---- look-alikes: unwrapped only when calling them is exactly calling .transforms ------------

EVAL = v1.Compose([v1.Resize(40), v1.CenterCrop(32), v1.PILToTensor()])


class RenamedArgument:
    """Only applies its transforms (any argument name, a repr): unwrapped."""

    def __init__(self):
        self.transforms = EVAL

    def __call__(self, x):
        return self.transforms(x)

    def __repr__(self):
        return "RenamedArgument()"


class Subclass(RenamedArgument):
    pass


class Doubles:
    def __init__(self):
        self.transforms = EVAL

    def __call__(self, img):
        return self.transforms(img) // 2


class Counts:
    def __init__(self):
        self.transforms = EVAL
        self.calls = 0

    def __call__(self, img):
        self.calls += 1
        return self.transforms(img)


class ExtraMethod(RenamedArgument):
    def shrink(self):  # could change what __call__ applies later
        self.transforms = v1.Compose([v1.Resize(20), v1.CenterCrop(16), v1.PILToTensor()])


class PropertyTransforms:
    @property
    def transforms(self):
        return EVAL

    def __call__(self, img):
        return self.transforms(img)


def _logged(fn):
    @functools.wraps(fn)
    def wrapper(self, img):
        return fn(self, img)
    return wrapper


class Decorated:
    def __init__(self):
        self.transforms = EVAL

    @_logged
    def __call__(self, img):
        return self.transforms(img)


class DefaultArgument:
    def __init__(self):
        self.transforms = EVAL

    def __call__(self, img, scale=1):
        return self.transforms(img)


class OtherAttribute:
    def __init__(self):
        self.transforms = EVAL
        self.pipeline = v1.Compose([v1.Resize(20), v1.CenterCrop(16), v1.PILToTensor()])

    def __call__(self, img):
        return self.pipeline(img)


@pytest.mark.parametrize("cls", [RenamedArgument, Subclass])
def test_a_preset_that_only_applies_its_transforms_is_unwrapped(tree: Path, cls):
    split = rl.transforms.split(cls())
    assert split.tail is None and split.steps == rl.transforms.split(EVAL).steps
    assert torch.equal(first_batch(native_loader(tree, cls())), first_batch(native_loader(tree, EVAL)))


@pytest.mark.parametrize("cls", [Doubles, Counts, ExtraMethod, PropertyTransforms, Decorated,
                                 DefaultArgument, OtherAttribute])
def test_a_look_alike_that_does_more_stays_a_python_callable(tree: Path, cls):
    obj = cls()
    split = rl.transforms.split(obj)
    assert split.steps == [] and split.tail_names == [f"{cls.__module__}.{cls.__name__}"]
    with pytest.warns(UserWarning, match=cls.__name__):
        ds = rl.ImageFolder(str(tree), transform=obj)
    assert ds.per_sample
    image, _ = ds[0]
    ref = TorchvisionImageFolder(str(tree), transform=cls())[0][0]
    assert torch.equal(image, ref)  # its own behaviour, as torchvision's ImageFolder runs it
    if cls is Counts:
        assert obj.calls == 1
