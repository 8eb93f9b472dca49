"""A new user's first tries of this round's features, from the manual alone."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torchvision.transforms.v2 as v2
from PIL import Image
from torchvision.datasets import ImageFolder as TorchvisionImageFolder

import ringloader as rl
from imagegen import jpeg_bytes

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("newuser7")
    (root / "c").mkdir()
    for k, (w, h) in enumerate([(203, 278), (120, 90)]):
        (root / "c" / f"{k}.jpg").write_bytes(jpeg_bytes(w, h, seed=7100 + k))
    return root


def _recipe(dtype_step) -> v2.Compose:
    # torchvision's "Getting started with transforms v2" recipe, its draws fixed (the central
    # box of scale 1, a flip with p=1): ToImage(), then ToDtype(torch.uint8, scale=True)
    # ("optional, most input are already uint8 at this point"), then the crop.
    return v2.Compose([v2.ToImage(), dtype_step, v2.RandomResizedCrop((64, 64), scale=(1, 1), ratio=(1, 1),
                                                                      antialias=True),
                       v2.RandomHorizontalFlip(1.0), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(MEAN, STD)])


@pytest.mark.parametrize("dtype_step", [v2.ToDtype(torch.uint8, scale=True),
                                        v2.ToDtype({"others": torch.uint8}, scale=True)],
                         ids=["uint8", "dict"])
def test_torchvisions_own_v2_recipe_with_its_uint8_todtype_is_native(tree: Path, dtype_step):
    transform = _recipe(dtype_step)
    split = rl.transforms.split(transform)
    assert split.tail is None, split.reason  # was: "only a conversion to torch.float32 ..."
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a Python tail would warn
        loader = rl.DataLoader(rl.ImageFolder(str(tree), transform=transform), batch_size=1,
                               fast_decode=False)
    assert loader.native
    ref = TorchvisionImageFolder(str(tree), transform=transform)
    for i, (images, _) in enumerate(loader):
        assert images[0].shape == ref[i][0].shape
        assert (images[0] - ref[i][0]).abs().max().item() <= 1e-6


def test_a_uint8_conversion_before_the_tensor_conversion_stays_in_python():
    # v1's ConvertImageDtype takes tensors only: on the PIL image torchvision raises, and so
    # does the Python tail; it is not taken for a no-op.
    import torchvision.transforms as v1

    split = rl.transforms.split(v1.Compose([v1.ConvertImageDtype(torch.uint8), v1.PILToTensor()]))
    assert split.tail_names and split.tail_names[0].endswith("ConvertImageDtype")
    split = rl.transforms.split(v1.Compose([v1.PILToTensor(), v1.ConvertImageDtype(torch.uint8),
                                            v1.CenterCrop(32)]))
    assert split.tail is None, split.reason


def test_a_uint8_todtype_after_the_float_conversion_stays_in_python():
    # After ToDtype(float32) torchvision converts floats back to uint8: not a no-op.
    transform = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                            v2.ToDtype(torch.uint8, scale=True)])
    split = rl.transforms.split(transform)
    assert split.tail_names and split.tail_names[0].endswith("ToDtype")


def test_the_uint8_todtype_in_a_joint_keeps_it_native(tree: Path):
    from torchvision import tv_tensors

    transform = v2.Compose([v2.ToImage(), v2.ToDtype(torch.uint8, scale=True),
                            v2.RandomResizedCrop(48, antialias=True), v2.RandomHorizontalFlip(),
                            v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True),
                            v2.ToPureTensor()])
    paths = sorted((tree / "c").iterdir())

    class Boxes(torch.utils.data.Dataset):
        def __len__(self):
            return len(paths)

        def __getitem__(self, i):
            with Image.open(paths[i]) as image:
                canvas = (image.height, image.width)
            boxes = tv_tensors.BoundingBoxes([[4.0, 4.0, 30.0, 20.0]], format="XYXY", canvas_size=canvas)
            return rl.Joint(transform, (rl.ImageFile(str(paths[i])), {"boxes": boxes}))

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's path would warn
        loader = rl.DataLoader(Boxes(), batch_size=1, collate_fn=lambda b: tuple(zip(*b)))
    assert loader.native


@pytest.mark.parametrize("state", [{}, [1, 2]], ids=["empty dict", "list"])
def test_load_state_dict_of_something_else_names_the_argument(tree: Path, state):
    loader = rl.DataLoader(rl.ImageFolder(str(tree), transform=v2.Compose([v2.ToImage(), v2.CenterCrop(32)])),
                           batch_size=1)
    with pytest.raises((TypeError, ValueError), match=r"load_state_dict\(state\).*state_dict\(\) returned"):
        loader.load_state_dict(state)


def test_a_lanczos_resize_after_toimage_warns_naming_it_and_where_it_runs(tree: Path):
    transform = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(32, interpolation=v2.InterpolationMode.LANCZOS)])
    with pytest.warns(UserWarning) as caught:
        rl.ImageFolder(str(tree), transform=transform)
    (message,) = [str(w.message) for w in caught]
    assert "RandomResizedCrop" in message and "follows ToImage" in message
    assert "bilinear and bicubic ones with antialias=True" in message  # what runs natively there
    assert "the main process with num_workers=0" in message  # the default runs no worker processes


def test_describe_of_native_clip_batches_does_not_say_torch_does_the_work(tmp_path: Path):
    import shutil

    from ringloader.sources import video as rv

    if shutil.which("ffmpeg") is None or not rv.video_available()[0]:
        pytest.skip("needs the ffmpeg CLI and FFmpeg's libraries")
    from videogen import SAMPLER, make_clip

    (tmp_path / "a").mkdir()
    make_clip(tmp_path / "a" / "0.mp4", 0, frames=10)
    folder = rl.VideoFolder(str(tmp_path), clip=SAMPLER, transform=v2.CenterCrop(16))
    head = rl.DataLoader(folder, batch_size=1).describe().splitlines()[0]
    assert "native clip batches" in head and "torch.utils.data.DataLoader does the work" not in head, head
