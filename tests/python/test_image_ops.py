"""Parity of the native image operations with torchvision's PIL path and timm.

Each test runs ``ringloader._C._apply_image_op`` and the reference (torchvision.transforms
.functional v1 on a PIL image, Pillow itself, or timm's ``auto_augment`` op functions) on the
same pixels and states its bound. Every operation is bit-exact (``max_abs_diff == 0``) except
GaussianBlur, which torchvision computes with a float32 conv2d whose summation order is its
own: there the bound is one level on a few values (PSNR well above 60 dB).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image

F = pytest.importorskip("torchvision.transforms.functional")
from torchvision.transforms import InterpolationMode  # noqa: E402
from torchvision.transforms.autoaugment import _apply_op  # noqa: E402

from imagegen import pixels  # noqa: E402
from ringloader import _C  # noqa: E402

NEAREST, BILINEAR, BICUBIC = 0, 2, 3  # Pillow's numbers, as _apply_image_op takes them
TV_MODES = {NEAREST: InterpolationMode.NEAREST, BILINEAR: InterpolationMode.BILINEAR,
            BICUBIC: InterpolationMode.BICUBIC}


def _smooth_noise(h: int, w: int, seed: int) -> np.ndarray:
    """Smooth colour gradients plus noise (a natural-looking image without a decoder)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([128 + 100 * np.sin(x / 7.0 + c) * np.cos(y / 11.0 - c) for c in range(3)], -1)
    return np.clip(base + rng.normal(0, 18, (h, w, 3)), 0, 255).astype(np.uint8)


def _images() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    natural = pixels(224, 224, seed=11)
    grayish = np.clip(natural.mean(-1, keepdims=True) + rng.integers(-6, 7, (224, 224, 3)), 0, 255)
    hues = np.linspace(0, 6, 41 * 29, endpoint=False).reshape(29, 41)
    saturated = np.stack([np.clip(2 - np.abs((hues - k) % 6 - 3), 0, 1) for k in (0, 2, 4)], -1)
    return {
        "natural224": natural,
        "natural37x23": pixels(37, 23, seed=5),
        "noise37x23": _smooth_noise(23, 37, seed=3),
        "w1h5": pixels(1, 5, seed=2),
        "w5h1": _smooth_noise(1, 5, seed=4),
        "grayish": grayish.astype(np.uint8),
        "saturated": (saturated * 255).round().astype(np.uint8),
        "random31x17": rng.integers(0, 256, (17, 31, 3), dtype=np.uint8),
        "flat": np.full((6, 9, 3), (90, 140, 200), np.uint8),
    }


IMAGES = _images()
SMALL_SET = ["natural37x23", "noise37x23", "w1h5", "grayish", "saturated"]


def _diff(name: str, args: dict, reference, image: np.ndarray) -> np.ndarray:
    out = _C._apply_image_op(name, image, {k: [float(v) for v in vs] for k, vs in args.items()})
    expected = np.asarray(reference(Image.fromarray(image)))
    assert out.shape == expected.shape, (name, args, out.shape, expected.shape)
    return np.abs(out.astype(np.int16) - expected.astype(np.int16))


def assert_exact(name: str, args: dict, reference, image_ids=None) -> None:
    """max_abs_diff == 0 on every image."""
    for image_id in image_ids or IMAGES:
        d = _diff(name, args, reference, IMAGES[image_id])
        assert d.max() == 0, f"{name} {args} on {image_id}: {int((d > 0).sum())} values differ, max {d.max()}"


# ---- colour ----------------------------------------------------------------------------------

ENHANCE = {
    "AdjustBrightness": F.adjust_brightness,
    "AdjustContrast": F.adjust_contrast,
    "AdjustSaturation": F.adjust_saturation,
    "AdjustSharpness": F.adjust_sharpness,
}


@pytest.mark.parametrize("name", sorted(ENHANCE))
@pytest.mark.parametrize("factor", [0.0, 0.35, 1.0, 1.8, 3.5])
def test_enhance_ops_are_bit_exact(name, factor):
    assert_exact(name, {"factor": [factor]}, lambda im: ENHANCE[name](im, factor))


@pytest.mark.parametrize("hue_factor", [-0.5, -0.27, 0.0, 0.13, 0.5])
def test_adjust_hue_is_bit_exact(hue_factor):
    assert_exact("AdjustHue", {"hue_factor": [hue_factor]}, lambda im: F.adjust_hue(im, hue_factor))


def test_adjust_hue_is_bit_exact_on_a_colour_cube():
    # 64^3 colours (every 4th level plus 255) through Pillow's float HSV round trip.
    levels = np.append(np.arange(0, 256, 4), 255)[:64].astype(np.uint8)
    r, g, b = np.meshgrid(levels, levels, levels, indexing="ij")
    cube = np.stack([r, g, b], -1).reshape(512, 512, 3)
    for hue_factor in (-0.41, 0.29):
        d = _diff("AdjustHue", {"hue_factor": [hue_factor]}, lambda im: F.adjust_hue(im, hue_factor), cube)
        assert d.max() == 0


def test_to_grayscale_is_bit_exact():
    assert_exact("ToGrayscale", {}, lambda im: F.to_grayscale(im, num_output_channels=3))


# ---- point operations --------------------------------------------------------------------------

@pytest.mark.parametrize("bits", [1, 2, 3, 4, 6, 7, 8])
def test_posterize_is_bit_exact(bits):
    assert_exact("Posterize", {"bits": [bits]}, lambda im: F.posterize(im, bits))


def test_posterize_zero_bits_is_black_like_torchvision_tensor_path():
    # Pillow 13's ImageOps.posterize rejects 0 bits; torchvision's tensor path (and older
    # Pillow) give a black image, and so does the native op.
    torch = pytest.importorskip("torch")
    image = IMAGES["natural37x23"]
    out = _C._apply_image_op("Posterize", image, {"bits": [0.0]})
    expected = F.posterize(torch.from_numpy(image.copy()).permute(2, 0, 1).contiguous(), 0).permute(1, 2, 0).numpy()
    assert np.array_equal(out, expected) and not out.any()


@pytest.mark.parametrize("threshold", [0.0, 64.5, 128.0, 200.7, 255.0, 256.0])
def test_solarize_is_bit_exact(threshold):
    assert_exact("Solarize", {"threshold": [threshold]}, lambda im: F.solarize(im, threshold))


@pytest.mark.parametrize("name,reference", [("Invert", F.invert), ("AutoContrast", F.autocontrast),
                                            ("Equalize", F.equalize)])
def test_histogram_and_inversion_ops_are_bit_exact(name, reference):
    assert_exact(name, {}, reference)


@pytest.mark.parametrize("counts", [(300, 1), (1000, 3, 2), (256, 255), (510, 1, 1, 1)])
def test_equalize_matches_pillow_on_sparse_histograms(counts):
    # A few levels with skewed counts: Pillow's lookup table exceeds 255 and Image.point clips.
    levels = np.concatenate([np.full(c, (i * 37) % 256, np.uint8) for i, c in enumerate(counts)])
    image = np.stack([levels, levels[::-1], np.roll(levels, 5)], -1).reshape(1, -1, 3)
    d = _diff("Equalize", {}, F.equalize, image)
    assert d.max() == 0


# ---- filtering ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kernel,sigma", [((3, 3), (1.0, 1.0)), ((5, 3), (1.5, 0.7)), ((9, 9), (2.0, 2.0)),
                                          ((23, 23), (3.3, 3.3)), ((1, 7), (0.5, 4.0))])
def test_gaussian_blur_within_one_level(kernel, sigma):
    """Bound: max_abs_diff <= 1, under 0.1% of values differ, PSNR > 60 dB."""
    for image_id in ["natural224", "natural37x23", "noise37x23", "random31x17", "grayish"]:
        image = IMAGES[image_id]
        if kernel[0] // 2 >= image.shape[1] or kernel[1] // 2 >= image.shape[0]:
            continue  # torch's reflect padding needs the image wider than half the kernel
        d = _diff("GaussianBlur", {"kernel": list(kernel), "sigma": list(sigma)},
                  lambda im: F.gaussian_blur(im, list(kernel), list(sigma)), image)
        mse = float((d.astype(np.float64) ** 2).mean())
        psnr = math.inf if mse == 0 else 10 * math.log10(255**2 / mse)
        assert d.max() <= 1, (image_id, kernel, sigma)
        assert (d > 0).mean() < 1e-3, (image_id, kernel, sigma, int((d > 0).sum()))
        assert psnr > 60, (image_id, kernel, sigma, psnr)


# ---- geometry ----------------------------------------------------------------------------------

AFFINE_CASES = [
    # angle, translate, scale, shear, center, fill
    (0.0, (0, 0), 1.0, (0.0, 0.0), None, (0, 0, 0)),
    (17.3, (3, -2), 1.1, (5.0, -7.0), None, (10, 200, 30)),
    (-45.0, (0, 0), 0.8, (0.0, 0.0), None, (255, 255, 255)),
    (90.0, (1, 0), 1.0, (0.0, 0.0), None, (0, 0, 0)),
    (0.0, (5, 3), 1.0, (0.0, 0.0), None, (128, 128, 128)),
    (0.0, (0, 0), 1.0, (math.degrees(math.atan(-0.3)), 0.0), [0, 0], (124, 116, 104)),
    (-163.0, (-4, 7), 1.7, (-12.0, 30.0), [5, 2], (1, 2, 3)),
]


@pytest.mark.parametrize("interpolation", [NEAREST, BILINEAR, BICUBIC])
@pytest.mark.parametrize("angle,translate,scale,shear,center,fill", AFFINE_CASES)
def test_affine_is_bit_exact(interpolation, angle, translate, scale, shear, center, fill):
    args = {"angle": [angle], "translate": list(translate), "scale": [scale], "shear": list(shear),
            "interpolation": [interpolation], "fill": list(fill)}
    if center is not None:
        args["center"] = center
    assert_exact("Affine", args, lambda im: F.affine(im, angle, list(translate), scale, list(shear),
                                                     TV_MODES[interpolation], list(fill), center))


@pytest.mark.parametrize("interpolation", [NEAREST, BILINEAR, BICUBIC])
@pytest.mark.parametrize("angle", [0.0, 90.0, -90.0, 180.0, 270.0, 33.3, -127.25, 450.0])
@pytest.mark.parametrize("center", [None, [3, 4]])
def test_rotate_is_bit_exact(interpolation, angle, center):
    args = {"angle": [angle], "interpolation": [interpolation], "fill": [5, 6, 7]}
    if center is not None:
        args["center"] = center
    assert_exact("Rotate", args, lambda im: F.rotate(im, angle, TV_MODES[interpolation], center=center,
                                                     fill=[5, 6, 7]), SMALL_SET + ["natural224"])


def test_random_affine_matrices_are_bit_exact():
    """Image.transform(AFFINE) for random matrices: Pillow's scale-only, fixed-point and float
    nearest loops and the bilinear/bicubic filters."""
    rng = np.random.default_rng(5)
    ids = ["natural37x23", "w1h5", "w5h1", "random31x17", "saturated"]
    for trial in range(600):
        image = IMAGES[ids[trial % len(ids)]]
        h, w = image.shape[:2]
        kind = trial % 4
        if kind == 0:  # rotation, shear and scale
            matrix = rng.normal(0, 1, 6) * [1, 1, 20, 1, 1, 20]
        elif kind == 1:  # scale and translation only
            matrix = [rng.uniform(-2, 2), 0.0, rng.uniform(-50, 50), 0.0, rng.uniform(-2, 2), rng.uniform(-50, 50)]
        elif kind == 2:  # translations by whole, half and quarter pixels
            matrix = [1, 0, rng.integers(-40, 40) + rng.choice([0, 0.5, 0.25]), 0, 1, rng.integers(-40, 40)]
        else:  # beyond 16.16 fixed-point range
            matrix = rng.normal(0, 1, 6) * [1, 1, 40000, 1, 1, 40000]
        matrix = [float(v) for v in matrix]
        interpolation = (NEAREST, BILINEAR, BICUBIC)[trial % 3]
        d = _diff("TransformAffine", {"matrix": matrix, "interpolation": [interpolation], "fill": [1, 2, 3]},
                  lambda im: im.transform((w, h), Image.Transform.AFFINE, matrix, interpolation, fillcolor=(1, 2, 3)),
                  image)
        assert d.max() == 0, (trial, matrix, interpolation)


@pytest.mark.parametrize("mode_id,mode", list(enumerate(["constant", "edge", "reflect", "symmetric"])))
@pytest.mark.parametrize("padding", [(1, 2, 3, 4), (0, 0, 0, 0), (5, 0, 0, 7), (-1, 2, -3, 1),
                                     (30, 31, 29, 40), (-2, -1, -1, 0)])
def test_pad_is_bit_exact(mode_id, mode, padding):
    for image_id in SMALL_SET + ["natural224"]:
        image = IMAGES[image_id]
        h, w = image.shape[:2]
        left, top, right, bottom = padding
        if w - max(-left, 0) - max(-right, 0) <= 0 or h - max(-top, 0) - max(-bottom, 0) <= 0:
            continue  # cropped away entirely
        d = _diff("Pad", {"padding": list(padding), "mode": [mode_id], "fill": [9, 99, 199]},
                  lambda im: F.pad(im, list(padding), fill=(9, 99, 199), padding_mode=mode), image)
        assert d.max() == 0, (image_id, mode, padding)


# ---- AutoAugment family ------------------------------------------------------------------------

TV_OPS = [
    ("ShearX", [0.3, -0.3, 0.17]), ("ShearY", [0.3, -0.25]), ("TranslateX", [10.7, -14.0, 150.3]),
    ("TranslateY", [5.2, -9.9]), ("Rotate", [30.0, -12.5, 90.0, 180.0]), ("Brightness", [0.5, -0.9]),
    ("Color", [0.3, -0.7]), ("Contrast", [0.8, -0.4]), ("Sharpness", [0.9, -0.9]), ("Posterize", [4.0, 6.7, 8.0]),
    ("Solarize", [255.0, 128.0, 17.4, 0.0]), ("AutoContrast", [0.0]), ("Equalize", [0.0]), ("Invert", [0.0]),
    ("Identity", [0.0]),
]


@pytest.mark.parametrize("op,magnitudes", TV_OPS, ids=[op for op, _ in TV_OPS])
def test_torchvision_apply_op_is_bit_exact(op, magnitudes):
    for magnitude in magnitudes:
        for interpolation in (NEAREST, BILINEAR, BICUBIC):
            for fill in ([0, 0, 0], [128, 64, 255]):
                assert_exact(f"ApplyAugOp:{op}",
                             {"magnitude": [magnitude], "interpolation": [interpolation], "fill": fill},
                             lambda im: _apply_op(im, op, magnitude, TV_MODES[interpolation], [float(f) for f in fill]),
                             SMALL_SET)


GEOMETRIC_TV_OPS = [(op, m) for op, m in TV_OPS if op in ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")]


@pytest.mark.parametrize("op,magnitudes", GEOMETRIC_TV_OPS, ids=[op for op, _ in GEOMETRIC_TV_OPS])
def test_torchvision_v2_policy_ops_are_bit_exact(op, magnitudes):
    """The v2 policies' ops on PIL images, with each filter Pillow's transform takes (v2 also takes
    strings, and NEAREST_EXACT, which it hands Pillow as NEAREST)."""
    v2 = pytest.importorskip("torchvision.transforms.v2")
    modes = [(NEAREST, "nearest"), (NEAREST, InterpolationMode.NEAREST_EXACT), (NEAREST, "nearest-exact"),
             (BILINEAR, "bilinear"), (BICUBIC, InterpolationMode.BICUBIC), (BICUBIC, 3)]
    for native, mode in modes:
        for fill in ([0, 0, 0], [128, 64, 255]):
            policy = v2.RandAugment(interpolation=mode, fill=fill)
            for magnitude in magnitudes:
                assert_exact(f"ApplyAugOp:{op}",
                             {"magnitude": [magnitude], "interpolation": [native], "fill": fill},
                             lambda im: policy._apply_image_or_video_transform(
                                 im, op, magnitude, interpolation=policy.interpolation, fill=policy._fill),
                             SMALL_SET + ["random31x17"])


def _timm():
    return pytest.importorskip("timm.data.auto_augment")


TIMM_OPS = [
    ("ShearX", "shear_x", [0.3, -0.27]), ("ShearY", "shear_y", [0.12, -0.3]),
    ("TranslateX", "translate_x_abs", [100.0, -45.5, 3.3]), ("TranslateY", "translate_y_abs", [-20.7, 7.0]),
    ("Rotate", "rotate", [30.0, -27.0, 90.0, 180.0]), ("Brightness", "brightness", [0.1, 1.9]),
    ("Color", "color", [0.1, 1.5]), ("Contrast", "contrast", [0.37, 1.9]), ("Sharpness", "sharpness", [0.1, 1.9]),
    ("Posterize", "posterize", [1, 3, 4, 8]), ("Solarize", "solarize", [0, 128, 230, 256]),
    ("SolarizeAdd", "solarize_add", [0, 33, 110]), ("AutoContrast", "auto_contrast", [None]),
    ("Equalize", "equalize", [None]), ("Invert", "invert", [None]),
]


@pytest.mark.parametrize("op,fn_name,args", TIMM_OPS, ids=[op for op, _, _ in TIMM_OPS])
def test_timm_ops_are_bit_exact(op, fn_name, args):
    fn = getattr(_timm(), fn_name)
    fill = [124, 116, 104]  # timm's img_mean for the ImageNet mean
    for arg in args:
        for interpolation in (NEAREST, BILINEAR, BICUBIC):
            kwargs = dict(resample=interpolation, fillcolor=tuple(fill))
            reference = (lambda im: fn(im, **kwargs)) if arg is None else (lambda im: fn(im, arg, **kwargs))
            assert_exact(f"ApplyTimmOp:{op}",
                         {"arg": [0 if arg is None else arg], "interpolation": [interpolation], "fill": fill},
                         reference, SMALL_SET)


@pytest.mark.parametrize("pct", [0.45, -0.3, 0.1])
def test_timm_relative_translations_are_bit_exact(pct):
    timm_aa = _timm()
    for image_id in SMALL_SET:
        image = IMAGES[image_id]
        h, w = image.shape[:2]
        for axis, size, fn in (("X", w, timm_aa.translate_x_rel), ("Y", h, timm_aa.translate_y_rel)):
            for interpolation in (NEAREST, BILINEAR, BICUBIC):
                d = _diff(f"ApplyTimmOp:Translate{axis}",
                          {"arg": [pct * size], "interpolation": [interpolation], "fill": [128, 128, 128]},
                          lambda im: fn(im, pct, resample=interpolation, fillcolor=(128, 128, 128)), image)
                assert d.max() == 0, (image_id, axis, pct, interpolation)


def test_unknown_operations_and_bad_arguments_are_rejected():
    image = IMAGES["flat"]
    with pytest.raises(ValueError, match="unknown image operation"):
        _C._apply_image_op("Sepia", image, {})
    with pytest.raises(ValueError, match="factor"):
        _C._apply_image_op("AdjustContrast", image, {})
    with pytest.raises(ValueError, match="interpolation"):
        _C._apply_image_op("Rotate", image, {"angle": [3.0], "interpolation": [1.0], "fill": [0.0]})
