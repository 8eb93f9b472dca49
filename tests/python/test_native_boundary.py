"""The rules the Python package asks the extension for instead of keeping its own copies: the
transform stage order (``_C.check_transform``), the fixed output size (``_C.fixed_size``), the
per-sample seeds (``_C.row_key``, ``_C.sample_seed``), ``IMG_EXTENSIONS``; and the binding's
refusal of step keys it does not know."""

from __future__ import annotations

import pytest

import ringloader as rl
from ringloader import _C
from ringloader.sources.datasets import SampleKey, tail_seed

R = {"kind": "resize", "size_h": 64}
RR = {"kind": "resize", "size_h": 33, "size_w": 40}
RRC = {"kind": "random_resized_crop", "size_h": 32}
CC = {"kind": "center_crop", "size_h": 60}
FLIP = {"kind": "random_horizontal_flip", "p": 0.5}
TT = {"kind": "to_tensor"}
NORM = {"kind": "normalize", "mean": [0.5], "std": [0.25]}
ERASE = {"kind": "random_erasing", "p": 0.5, "ranges": [[0.02, 0.33], [0.3, 3.3]]}
CJ = {"kind": "color_jitter", "ranges": [[0.6, 1.4]]}
GRAY = {"kind": "grayscale", "p": 1.0}
ROT = {"kind": "random_rotation", "ranges": [[-10, 10]]}
AFF = {"kind": "random_affine", "ranges": [[-5, 5]]}
BLUR = {"kind": "gaussian_blur", "size_h": 3, "size_w": 3, "ranges": [[0.1, 2.0]]}
POST = {"kind": "aug_op", "op": "Posterize", "magnitude": 4.0, "p": 0.5}
RA = {"kind": "rand_augment", "num_ops": 2, "magnitude": 9, "num_bins": 31}
TA = {"kind": "trivial_augment_wide", "num_bins": 31}
AA = {"kind": "auto_augment", "policy": 0}
TIMM = {"kind": "timm_rand_augment", "num_ops": 2, "magnitude": 9, "timm_ops": ["Equalize"]}
PAD0 = {"kind": "pad", "pad": [3, 1, 4, 2]}
PADF = {"kind": "pad", "pad": [2, 2, 2, 2], "fill": [7]}
PADR = {"kind": "pad", "pad": [5, 5, 5, 5], "pad_mode": "reflect"}
CROPR = {"kind": "random_crop", "size_h": 32, "pad": [4, 4, 4, 4], "pad_mode": "reflect"}
CROPE = {"kind": "random_crop", "size_h": 32, "pad": [4, 4, 4, 4], "pad_mode": "edge"}
CROPS = {"kind": "random_crop", "size_h": 32, "pad": [4, 4, 4, 4], "pad_mode": "symmetric"}
CROPF = {"kind": "random_crop", "size_h": 32, "pad": [4, 4, 4, 4], "fill": [1, 2, 3]}
CROP0 = {"kind": "random_crop", "size_h": 32, "pad": [4, 4, 4, 4]}

# (native steps so far, the steps of the next transform, the reason the Python rule
# transforms._stage_error gave before it moved into the extension: computed with that function
# and written down here, so the native rule is held to the texts users and tests already saw).
CASES = [
    ([R, CC], [FLIP], None),
    ([R, CC, TT], [NORM], None),
    ([R, CC, TT, NORM], [ERASE], None),
    ([R, CC, TT], [FLIP], "it runs on the tensor after ToTensor"),
    ([R, CC, TT], [CJ], "it runs on the tensor after ToTensor"),
    ([R, CC, TT], [TT], "it runs on the tensor after ToTensor"),
    ([R, CC], [NORM], "it needs ToTensor before it"),
    ([R, CC], [ERASE], "it needs ToTensor before it"),
    ([R], [RR], "a second resize would need a second resample, which is not native"),
    ([R, CC, PAD0], [RR], "a second resize would need a second resample, which is not native"),
    ([RRC, FLIP], [R], "a second resize would need a second resample, which is not native"),
    ([R, CC], [CJ], None),
    ([CROP0, FLIP], [R], None),
    ([PAD0], [RR], None),
    ([CJ, TT], [R], "it runs on the tensor after ToTensor"),
    ([RRC, FLIP, CJ, TT, NORM], [ERASE], None),
]
_FUSE = ("a resize after an earlier step that cannot fuse into the resample ({}) would need a second "
         "resample, which is not native")
CASES += [(prior, new, _FUSE.format(why)) for prior, new, why in [
    ([R, CJ, CC], [R], "ColorJitter runs on the 8-bit image"),
    ([CROPR, FLIP], [R], "RandomCrop with padding_mode='reflect' runs on the 8-bit image"),
    ([CROPE], [RRC], "RandomCrop with padding_mode='edge' runs on the 8-bit image"),
    ([CROPS], [R], "RandomCrop with padding_mode='symmetric' runs on the 8-bit image"),
    ([CROPF], [R], "RandomCrop with a non-zero fill runs on the 8-bit image"),
    ([PADF], [R], "Pad with a non-zero fill runs on the 8-bit image"),
    ([PADR], [R], "Pad with padding_mode='reflect' runs on the 8-bit image"),
    ([GRAY], [R], "Grayscale runs on the 8-bit image"),
    ([ROT], [R], "RandomRotation runs on the 8-bit image"),
    ([AFF], [RRC], "RandomAffine runs on the 8-bit image"),
    ([BLUR], [R], "GaussianBlur runs on the 8-bit image"),
    ([POST], [R], "the Posterize step runs on the 8-bit image"),
    ([R, POST, CC], [RR], "the Posterize step runs on the 8-bit image"),
    ([RA], [R], "RandAugment runs on the 8-bit image"),
    ([TA], [R], "TrivialAugmentWide runs on the 8-bit image"),
    ([AA], [R], "AutoAugment runs on the 8-bit image"),
    ([TIMM], [R], "timm's RandAugment runs on the 8-bit image"),
]]


@pytest.mark.parametrize("prior,new,reason", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_check_transform_gives_the_reasons_the_python_rule_gave(prior, new, reason):
    assert _C.check_transform(prior + new, len(prior)) == reason


def test_check_transform_judges_each_new_step_after_the_ones_before_it():
    # The old Python rule judged every new step against the earlier transforms only, so a
    # transform that expands to ToTensor + Normalize was refused ("it needs ToTensor before it");
    # the loader accepts that chain, and so does the one rule now.
    assert _C.check_transform([R, CC, TT, NORM], 2) is None
    assert _C.check_transform([R, CC, TT, NORM]) is None
    assert _C.check_transform([R, CJ, R, CC], 2).startswith("a resize after an earlier step")
    # Steps before `first` are not judged: only where the new part breaks a rule.
    assert _C.check_transform([R, RR, CC], 2) is None
    assert _C.check_transform([R, RR, CC]) == "a second resize would need a second resample, which is not native"


def test_the_split_reason_is_the_native_rule():
    import torchvision.transforms as v1

    split = rl.transforms.split(v1.Compose([v1.Resize(64), v1.ColorJitter(0.4), v1.CenterCrop(60),
                                            v1.Resize(56), v1.ToTensor()]))
    assert [s["kind"] for s in split.steps] == ["resize", "color_jitter", "center_crop"]
    assert split.reason.endswith(_C.check_transform(split.steps + [R], len(split.steps)))


@pytest.mark.parametrize("steps,fixed", [
    ([R], False),
    ([R, CC], True),
    ([CC, R], True),  # Resize(int) of a known size is known
    ([RR], True),
    ([RRC, FLIP, TT, NORM], True),
    ([R, PAD0], False),
    ([CROP0, PAD0], True),
    ([R, CJ, TT], False),
    ([], False),
])
def test_fixed_size_is_the_loaders(steps, fixed):
    assert _C.fixed_size(steps) is fixed


def test_fixed_size_of_an_invalid_chain_raises_naming_the_step():
    with pytest.raises(ValueError, match=r"step 0 \(Normalize\)"):
        _C.fixed_size([NORM, R, CC])


# (seed, epoch, index, position) -> (row key, tail seed), computed with the Python functions
# datasets.SampleKey.row_key and datasets.tail_seed had before they asked the extension
# (their own _mix64 copy of splitmix64), and written down here.
SEEDS = [
    ((0, 0, 0, 0), 0, 7606012053026511699),
    ((12345, 0, 7, 7), 7, 11101905468625285747),
    ((12345, 0, 7, 3), 17179869191, 10005280359634293503),
    ((2**64 - 1, 3, 1000, 5), 4316442133480, 14651014128605535868),
    ((-1, 0, 4, 9), 55834574852, 13771741181985144507),
    ((42, 2, 123456, 654321), 2280047813714496, 1091373263156422585),
]


@pytest.mark.parametrize("key,row_key,seed", SEEDS)
def test_row_key_and_tail_seed_keep_their_values(key, row_key, seed):
    seed_, epoch, index, position = key
    sample_key = SampleKey(index, seed_, epoch, position)
    assert sample_key.row_key() == _C.row_key(index, position) == row_key
    assert tail_seed(sample_key) == seed


def test_img_extensions_are_the_native_scans_and_torchvisions():
    folder = pytest.importorskip("torchvision.datasets.folder")
    assert rl.IMG_EXTENSIONS == _C.IMG_EXTENSIONS == tuple(folder.IMG_EXTENSIONS)


def test_an_unknown_step_key_is_refused_naming_the_key_and_the_step():
    with pytest.raises(TypeError, match=r"transform step 'resize' \(Resize\) has no parameter 'sizeh'; "
                                        r"its parameters: size_h size_w max_size size_max size_choices "
                                        r"scale_jitter interpolation"):
        _C.check_transform([{"kind": "resize", "size_h": 8, "sizeh": 8}])
    # A key of another kind is refused too (CenterCrop has no p), and the loader parses its
    # options' steps the same way.
    with pytest.raises(TypeError, match=r"'center_crop' \(CenterCrop\) has no parameter 'p'"):
        _C.choose_auto_threads({"batch_size": 2, "transform": [{"kind": "center_crop", "size_h": 8, "p": 1}]})
    with pytest.raises(ValueError, match="unknown transform step 'resise'"):
        _C.fixed_size([{"kind": "resise", "size_h": 8}])
    with pytest.raises(TypeError, match=r"unknown loader option\(s\): \['batchsize'\]"):
        _C.choose_auto_threads({"batchsize": 2})


def test_a_steps_values_are_read_by_its_kind_and_a_bad_one_is_named():
    # Each kind's parse (its StepKinds row) reads the dict; what its fields cannot hold is refused.
    with pytest.raises(ValueError, match="fill needs 1 or 3 values"):
        _C.check_transform([{"kind": "pad", "pad": [1, 1, 1, 1], "fill": [1, 2]}])
    with pytest.raises(ValueError, match="unknown interpolation 'cubic'"):
        _C.check_transform([{"kind": "resize", "size_h": 8, "interpolation": "cubic"}])
    with pytest.raises(ValueError, match="unknown timm op 'Twirl'"):
        _C.check_transform([{"kind": "timm_rand_augment", "timm_ops": ["Rotate", "Twirl"]}])
    # None leaves rotation's centre and a ColorJitter range at their defaults.
    rotate = {"kind": "random_rotation", "ranges": [[-10, 10]], "center": None}
    jitter = {"kind": "color_jitter", "ranges": [[0.6, 1.4], None, None, [-0.1, 0.1]]}
    assert _C.fixed_size([{"kind": "center_crop", "size_h": 8, "size_w": 8}, rotate, jitter])


def test_every_step_the_transforms_emit_parses():
    # What rl.transforms writes for each kind is within that kind's parameters (a recipe of
    # every kind the split maps; the recipe and preset suites cover the rest).
    import torchvision.transforms as v1

    t = v1.Compose([v1.RandomResizedCrop(32), v1.RandomHorizontalFlip(), v1.RandomVerticalFlip(),
                    v1.Pad(2, padding_mode="reflect"), v1.RandomCrop(32, padding=4, fill=3),
                    v1.ColorJitter(0.4, 0.4, 0.4, 0.1), v1.RandomGrayscale(0.2), v1.RandomRotation(10),
                    v1.RandomAffine(5, translate=(0.1, 0.1)), v1.GaussianBlur(3), v1.RandomPosterize(4),
                    v1.RandAugment(), v1.TrivialAugmentWide(), v1.AutoAugment(), v1.ToTensor(),
                    v1.Normalize([0.5] * 3, [0.25] * 3), v1.RandomErasing()])
    steps = rl.transforms.to_steps(t)
    assert len(steps) == 17
    assert _C.check_transform(steps) is None
    assert _C.fixed_size(steps)


def test_a_misspelt_step_key_fails_the_loader_instead_of_using_the_default(tmp_path):
    # Before, "scale" misspelt left RandomResizedCrop at its default scale without a word.
    step = {"kind": "random_resized_crop", "size_h": 8, "scales": [1.0, 1.0]}
    with pytest.raises(TypeError, match=r"'random_resized_crop' \(RandomResizedCrop\) has no parameter 'scales'"):
        _C.Loader([str(tmp_path / "a.jpg")], [0], {"batch_size": 1, "transform": [step]})
