"""The pixels of one synthetic, photograph-like image and their JPEG encoding, for
:mod:`ringloader.sample_data` (which exports :func:`synthesize_image` and :func:`encode_jpeg`).

Like it, this module imports nothing from the compiled extension."""

from __future__ import annotations

import io

import numpy as np

__all__ = ["encode_jpeg", "synthesize_image"]


# --------------------------------------------------------------------------
# Pixel synthesis
# --------------------------------------------------------------------------


def _spectrum_amplitude(h: int, w: int, alpha: float) -> np.ndarray:
    """Amplitude ``1/f^(alpha/2)`` on the rfft2 grid (power spectrum 1/f^alpha)."""
    fy = np.fft.fftfreq(h).astype(np.float32)[:, None]
    fx = np.fft.rfftfreq(w).astype(np.float32)[None, :]
    f2 = fy * fy + fx * fx
    f2[0, 0] = 1.0
    amp = f2 ** np.float32(-alpha / 4.0)
    amp[0, 0] = 0.0
    return amp


def _noise_fields(h: int, w: int, alpha: float, count: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``count`` independent zero-mean, unit-std 1/f^alpha noise fields of shape (h, w)."""
    amp = _spectrum_amplitude(h, w, alpha)
    out = []
    for _ in range(count):
        spec = rng.standard_normal((h, w // 2 + 1, 2), dtype=np.float32).view(np.complex64)[..., 0]
        spec *= amp
        field = np.fft.irfft2(spec, s=(h, w)).astype(np.float32, copy=False)
        field -= field.mean()
        field *= np.float32(1.0) / (field.std() + np.float32(1e-8))
        out.append(field)
    return out


def _smooth_fields(h: int, w: int, alpha: float, count: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Like :func:`_noise_fields` for steep spectra (alpha >= ~2.2), made at half
    resolution and bilinearly upsampled: such fields carry almost no energy
    near Nyquist, so this is visually equivalent and about 3x cheaper."""
    from PIL import Image

    hs, ws = max(1, (h + 1) // 2), max(1, (w + 1) // 2)
    small = _noise_fields(hs, ws, alpha, count, rng)
    return [np.asarray(Image.fromarray(f, "F").resize((w, h), Image.Resampling.BILINEAR)) for f in small]


def _hsv_to_rgb(h: float, s: float, v: float) -> np.ndarray:
    i = int(h * 6.0) % 6
    f = h * 6.0 - int(h * 6.0)
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    rgb = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)][i]
    return np.asarray(rgb, dtype=np.float32)


def _random_colour(rng: np.random.Generator, hue_centre: float | None) -> np.ndarray:
    if hue_centre is None or rng.random() < 0.35:
        hue = rng.random()
    else:
        hue = (hue_centre + rng.normal(0.0, 0.06)) % 1.0
    sat = float(rng.beta(2.0, 3.0))
    val = float(rng.uniform(0.25, 0.85))
    return _hsv_to_rgb(hue, sat, val)


def _colour_mix(rng: np.random.Generator) -> np.ndarray:
    """3x3 matrix mapping (luminance, chroma1, chroma2) noise to correlated RGB."""
    lum = np.full(3, 1.0, dtype=np.float32) + rng.normal(0, 0.08, 3).astype(np.float32)
    c1 = np.asarray([1.0, -0.5, -0.5], dtype=np.float32)  # red-green-ish axis
    c2 = np.asarray([-0.3, -0.3, 0.6], dtype=np.float32)  # blue-yellow axis
    scale_l = rng.uniform(0.06, 0.18)
    scale_c = rng.uniform(0.012, 0.05)
    return np.stack([lum * scale_l, c1 * scale_c, c2 * scale_c], axis=1).astype(np.float32)


def _shape_mask(h: int, w: int, rng: np.random.Generator) -> tuple[np.ndarray, tuple[int, int, int, int]] | None:
    """Mask of one random occluding shape (ellipse, polygon or bar).

    Returns ``(mask, (y0, y1, x0, x1))`` where ``mask`` is a float32 array in
    [0, 1] covering the bounding box, or None if the shape is off-canvas.
    """
    from PIL import Image, ImageDraw

    canvas = Image.new("L", (w, h), 0)
    draw = ImageDraw.Draw(canvas)
    kind = rng.random()
    cx, cy = rng.uniform(-0.1, 1.1) * w, rng.uniform(-0.1, 1.1) * h
    size = rng.uniform(0.08, 0.6) * min(w, h)
    if kind < 0.4:
        rx, ry = size * rng.uniform(0.5, 1.5), size * rng.uniform(0.5, 1.5)
        draw.ellipse([cx - rx, cy - ry, cx + rx, cy + ry], fill=255)
    elif kind < 0.85:
        n = int(rng.integers(3, 9))
        ang = np.sort(rng.uniform(0, 2 * np.pi, n))
        rad = size * rng.uniform(0.5, 1.3, n)
        pts = [(float(cx + r * np.cos(a)), float(cy + r * np.sin(a))) for a, r in zip(ang, rad)]
        draw.polygon(pts, fill=255)
    else:  # long thin bar (branch, pole, horizon line)
        a = rng.uniform(0, np.pi)
        length = max(w, h) * 1.5
        dx, dy = np.cos(a) * length, np.sin(a) * length
        width = int(rng.integers(3, max(4, min(w, h) // 12)))
        draw.line([(cx - dx, cy - dy), (cx + dx, cy + dy)], fill=255, width=width)
    bbox = canvas.getbbox()
    if bbox is None:
        return None
    x0, y0, x1, y1 = bbox
    mask = np.asarray(canvas.crop(bbox), dtype=np.float32) * np.float32(1.0 / 255.0)
    return mask, (y0, y1, x0, x1)


def synthesize_image(
    width: int,
    height: int,
    rng: np.random.Generator,
    *,
    hue_centre: float | None = None,
) -> np.ndarray:
    """Synthesise a photograph-like RGB image.

    The content is built from the ingredients that give natural images their
    statistics: an illumination gradient, 1/f^alpha noise (alpha ~ 2) mixed
    into correlated colour channels, occluding shapes with sharp edges, their
    own textures and shading, spatially varying fine detail and sensor noise.

    Args:
        width: Image width in pixels (>= 1).
        height: Image height in pixels (>= 1).
        rng: Source of randomness; the result is a pure function of its state.
        hue_centre: Optional dominant hue in [0, 1) (used to give each class of
            the sample set a loose colour identity).

    Returns:
        ``uint8`` array of shape ``(height, width, 3)``.
    """
    if width < 1 or height < 1:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    h, w = int(height), int(width)
    yy = np.linspace(-0.5, 0.5, h, dtype=np.float32)[:, None]
    xx = np.linspace(-0.5, 0.5, w, dtype=np.float32)[None, :]

    # Background: illumination gradient between two colours + correlated pink noise.
    c0, c1 = _random_colour(rng, hue_centre), _random_colour(rng, hue_centre)
    ang = float(rng.uniform(0, 2 * np.pi))
    ramp = np.clip((np.cos(ang) * xx + np.sin(ang) * yy) * rng.uniform(0.8, 2.0) + 0.5, 0, 1)
    alpha = float(rng.uniform(1.8, 2.3))
    lum, ch1, ch2 = _noise_fields(h, w, alpha, 1, rng) + _smooth_fields(h, w, alpha + 0.3, 2, rng)
    mix = _colour_mix(rng)
    img = np.empty((h, w, 3), dtype=np.float32)
    for c in range(3):
        img[..., c] = c0[c] + (c1[c] - c0[c]) * ramp + mix[c, 0] * lum + mix[c, 1] * ch1 + mix[c, 2] * ch2
    del ch1, ch2

    # Occluding shapes (painter's order), each with its own colour, shading
    # and texture.  Textures are shifted copies of two shared pink-noise
    # fields, which is much cheaper than one FFT per shape.
    tex = _noise_fields(h, w, float(rng.uniform(1.6, 2.2)), 2, rng)
    n_shapes = int(rng.integers(2, 9))
    for _ in range(n_shapes):
        shape = _shape_mask(h, w, rng)
        col = _random_colour(rng, hue_centre)
        sh = float(rng.uniform(-0.5, 0.5))
        which, dy, dx = int(rng.integers(0, 2)), int(rng.integers(0, h)), int(rng.integers(0, w))
        tmix = _colour_mix(rng)[:, 0]
        if shape is None:
            continue
        mask, (y0, y1, x0, x1) = shape
        shade = 1.0 + sh * (np.cos(ang + 1.0) * xx[:, x0:x1] + np.sin(ang + 1.0) * yy[y0:y1])
        t = np.roll(tex[which], (dy, dx), axis=(0, 1))[y0:y1, x0:x1]
        region = img[y0:y1, x0:x1]
        for c in range(3):
            layer = col[c] * shade + tmix[c] * t
            region[..., c] += (layer - region[..., c]) * mask
    del tex

    # Fine detail (foliage, fabric, grain) in some regions: rough noise
    # modulated by a smooth mask, plus a little per-pixel sensor noise.
    rough, modf = _noise_fields(h, w, float(rng.uniform(0.6, 1.1)), 1, rng) + _smooth_fields(h, w, 3.0, 1, rng)
    detail_amp = np.float32(rng.uniform(0.04, 0.10))
    region = np.clip(modf * np.float32(0.9) + np.float32(rng.uniform(-0.3, 0.6)), 0, 1)
    detail = rough * region * detail_amp
    detail += rng.standard_normal((h, w), dtype=np.float32) * np.float32(rng.uniform(0.004, 0.012))
    gains = 0.8 + 0.4 * rng.random(3)
    gamma = float(rng.uniform(0.85, 1.15))
    out = np.empty((h, w, 3), dtype=np.uint8)
    for c in range(3):
        ch = img[..., c]
        ch += detail * np.float32(gains[c])
        # Tone curve (mild gamma), then quantise.
        np.clip(ch, 0.0, 1.0, out=ch)
        if abs(gamma - 1.0) > 1e-3:
            np.power(ch, np.float32(gamma), out=ch)
        ch *= np.float32(255.0)
        ch += np.float32(0.5)
        out[..., c] = ch  # truncation after +0.5 == rounding for values in [0, 255.5]
    return out


# --------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------


def encode_jpeg(
    pixels: np.ndarray,
    *,
    quality: int = 90,
    subsampling: str = "4:2:0",
    progressive: bool = False,
    mode: str = "RGB",
    **save_kwargs: object,
) -> bytes:
    """Encode an ``(H, W, 3)`` uint8 RGB array as JPEG bytes with Pillow.

    Args:
        pixels: RGB pixels.
        quality: libjpeg quality (1-100).
        subsampling: ``"4:4:4"``, ``"4:2:2"`` or ``"4:2:0"`` (ignored for ``L``).
        progressive: Write a progressive (SOF2) instead of a baseline file.
        mode: ``"RGB"``, ``"L"`` (grayscale) or ``"CMYK"`` (Adobe, 4 components).
        **save_kwargs: Passed through to ``PIL.Image.Image.save`` (e.g. ``exif``).
    """
    from PIL import Image

    if mode not in ("RGB", "L", "CMYK"):
        raise ValueError(f"unsupported mode {mode!r}")
    im = Image.fromarray(np.ascontiguousarray(pixels), "RGB")
    if mode != "RGB":
        im = im.convert(mode)
    kwargs: dict[str, object] = {"quality": int(quality), "progressive": bool(progressive)}
    if mode != "L":
        kwargs["subsampling"] = subsampling
    kwargs.update(save_kwargs)
    buf = io.BytesIO()
    im.save(buf, format="JPEG", **kwargs)
    return buf.getvalue()
