"""GIF, first frame, against torchvision's ImageFolder (Pillow ``Image.open(f).convert("RGB")``)
with the same transform. Bound: max |difference| 0 for every file.

Files written by Pillow (adaptive palettes, transparency, interlaced or not, grey, bilevel,
animated) and hand-built byte streams (``gifgen``) for what Pillow does not write: a first frame
smaller than the logical screen or offset in it (filled with the transparency index, else index
0), a frame reaching past the screen (the canvas grows), short colour tables with indices past
them (black), grey-ramp tables (no palette: index i is grey i), a grey-ramp local table over a
coloured global one, no colour table, LZW code sizes 1 and 8, stray bytes and extensions before
the image, a missing trailer or block terminator, an end code before the frame is full followed
by more than the 64 KiB Pillow had read. Damaged files fail in Pillow and go through
``on_error`` here with a reason naming GIF.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from torchvision import transforms as tvt

import ringloader as rl

from gifgen import gif, palette_bytes
from test_formats import NO_RESIZE, RESIZE, compare, texture, write_tree

PAL4 = palette_bytes([(10, 20, 30), (40, 50, 60), (70, 80, 90), (100, 110, 120)])
GREY4 = palette_bytes([(i, i, i) for i in range(4)])


def save(img: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "GIF", **kw)
    return buf.getvalue()


def pillow_files() -> dict:
    rgb = Image.fromarray(texture(83, 61, 41))
    p = rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=256)
    p16 = rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    frames = [Image.fromarray(texture(70, 50, s)).convert("P", palette=Image.Palette.ADAPTIVE)
              for s in (42, 43, 44)]
    return {
        "adaptive": save(p),
        "adaptive_not_interlaced": save(p, interlace=False),
        "adaptive_16_optimized": save(p16, optimize=True),
        "web_palette": save(rgb.convert("P")),
        "transparency": save(p, transparency=7),
        "grey": save(rgb.convert("L")),
        "bilevel": save(rgb.convert("1")),
        "tiny": save(p.resize((3, 2))),
        "animated": save(frames[0], save_all=True, append_images=frames[1:], duration=40,
                         loop=0),
        "animated_transparent": save(frames[0], save_all=True, append_images=frames[1:],
                                     transparency=3, disposal=2),
        "gif87a_version": save(p, interlace=False).replace(b"GIF89a", b"GIF87a", 1),
    }


def long_gif(end_code_after: int) -> bytes:
    """A 170 KB GIF (random 8-bit indices) with an end code after `end_code_after` indices."""
    rng = np.random.default_rng(1)
    idx = rng.integers(0, 256, (300, 400))
    pal = bytes(rng.integers(0, 256, 768).astype(np.uint8))
    return gif((400, 300), [dict(idx=idx, bits=8, end_code_after=end_code_after)], pal)


def hand_built_files() -> dict:
    rng = np.random.default_rng(5)
    idx4 = rng.integers(0, 4, (37, 45))
    idx8 = rng.integers(0, 256, (30, 41))
    small = rng.integers(0, 4, (20, 25))
    base = gif((45, 37), [dict(idx=idx4)], PAL4)
    image_at = base.index(b",", 13 + len(PAL4))
    return {
        "indices_past_palette": gif((41, 30), [dict(idx=idx8, bits=8)], PAL4),
        "offset_frame": gif((60, 50), [dict(idx=small, x=7, y=11)], PAL4, background=2),
        "offset_frame_transparency": gif((60, 50), [dict(idx=small, x=30, y=3,
                                                         transparency=3)], PAL4, background=1),
        "frame_past_screen": gif((30, 20), [dict(idx=small, x=20, y=10)], PAL4),
        "zero_screen": gif((0, 0), [dict(idx=small, x=2, y=1)], PAL4),
        "grey_global": gif((41, 30), [dict(idx=idx8, bits=8)], GREY4),
        "grey_local_over_colour": gif((41, 30), [dict(idx=idx8, bits=8, palette=GREY4)], PAL4),
        "colour_local_over_grey": gif((41, 30), [dict(idx=idx8, bits=8, palette=PAL4[:6])],
                                      GREY4),
        "no_palette_transparency": gif((60, 50), [dict(idx=idx8, x=5, y=5, bits=8,
                                                       transparency=200)]),
        "code_size_1": gif((45, 37), [dict(idx=idx4 % 2, bits=1)], PAL4),
        "interlaced": gif((45, 37), [dict(idx=idx4, interlace=True)], PAL4),
        "interlaced_3_rows": gif((45, 3), [dict(idx=idx4[:3], interlace=True)], PAL4),
        "interlaced_offset": gif((60, 50), [dict(idx=small, x=4, y=9, interlace=True)], PAL4),
        "two_frames_first_used": gif((45, 37), [dict(idx=idx4), dict(idx=3 - idx4)], PAL4),
        "stray_bytes_and_extensions": base[:image_at] + b"\x07\x08!\xfe\x03abc\x00"
        + b"!\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00" + base[image_at:],
        # An end code before the frame is full: Pillow reads the next 64 KiB of the file and
        # decodes on; here there is one.
        "end_code_then_more_data": long_gif(60000),
        "no_trailer": base[:-1],
        "no_block_terminator": base[:-2],
    }


# Pillow warns when convert("RGB") drops a palette image's transparency; the pixels are RGB.
@pytest.mark.filterwarnings("ignore:Palette images with Transparency")
@pytest.mark.parametrize("transform", [RESIZE, NO_RESIZE], ids=["resize_crop", "center_crop"])
@pytest.mark.parametrize("kind", ["pillow", "hand_built"])
def test_gif_matches_torchvision(tmp_path: Path, kind: str, transform):
    files = pillow_files() if kind == "pillow" else hand_built_files()
    # torchvision's IMG_EXTENSIONS has no ".gif": a GIF reaches ImageFolder under another image
    # extension, and both sides read it by its signature.
    diffs = compare(write_tree(tmp_path, files, ".png"), transform)
    assert diffs == {name: 0 for name in files}, diffs


def damaged_files() -> dict:
    rng = np.random.default_rng(6)
    idx = rng.integers(0, 4, (40, 50))
    good = gif((50, 40), [dict(idx=idx)], PAL4)
    return {
        "truncated_data": (good[: len(good) - 30], "truncated GIF"),
        "truncated_header": (good[:20], "truncated GIF"),
        "early_end_code": (gif((50, 40), [dict(idx=idx, early_end=700)], PAL4),
                           "truncated GIF"),
        "no_image": (good[: 13 + len(PAL4)] + b";", "GIF"),
        # An end code in the last 64 KiB read: no more data for Pillow to decode on with.
        "end_code_in_last_read": (long_gif(110000), "truncated GIF"),
        "code_size_13": (gif((50, 40), [dict(idx=idx, bits=13)], PAL4), "corrupt GIF"),
        "empty_frame": (gif((50, 40), [dict(idx=np.zeros((0, 5)))], PAL4), "corrupt GIF"),
    }


def test_damaged_gif_fails_like_pillow(tmp_path: Path):
    for name, (data, needle) in damaged_files().items():
        root = tmp_path / name
        (root / "c").mkdir(parents=True)
        (root / "c" / "img.png").write_bytes(data)
        with pytest.raises((OSError, ValueError, SyntaxError)):
            torchvision.datasets.ImageFolder(root)[0]
        ds = rl.ImageFolder(root, transform=NO_RESIZE)
        with pytest.raises(rl.SampleError) as info:
            list(rl.DataLoader(ds, batch_size=1, on_error="raise"))
        assert needle in info.value.reason, (name, info.value.reason)


def test_gif_pixel_limit_from_logical_screen(tmp_path: Path):
    # A 1 x 1 frame on a 5000 x 5000 screen: the screen is what counts.
    data = gif((5000, 5000), [dict(idx=np.zeros((1, 1)))], PAL4)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "big.png").write_bytes(data)
    loader = rl.DataLoader(rl.ImageFolder(tmp_path, transform=NO_RESIZE), batch_size=1,
                           max_image_pixels=1000 * 1000)
    with pytest.raises(rl.SampleError) as info:
        list(loader)
    assert "GIF" in info.value.reason and "limit" in info.value.reason


@pytest.mark.filterwarnings("ignore:Palette images with Transparency")
def test_mutated_gifs_get_pillows_verdict_and_pixels(tmp_path: Path):
    """Bit flips, byte overwrites and truncations anywhere in Pillow-written and hand-built GIFs:
    each file is refused by both or decoded to the same pixels by both."""
    rng = np.random.default_rng(11)
    frames = [Image.fromarray(texture(30, 20, s)).convert("P", palette=Image.Palette.ADAPTIVE,
                                                         colors=16) for s in (50, 51)]
    animated = io.BytesIO()
    frames[0].save(animated, "GIF", save_all=True, append_images=frames[1:], loop=0,
                   transparency=2, comment=b"note")
    idx = rng.integers(0, 8, (13, 17))
    bases = [animated.getvalue(), save(frames[0].convert("L"), interlace=True),
             gif((20, 15), [dict(idx=idx, x=3, y=2, transparency=5, bits=3)], PAL4),
             gif((9, 9), [dict(idx=idx, interlace=True, bits=5)], None)]
    (tmp_path / "c").mkdir()
    mutated = []
    for b in bases:
        for trial in range(60):
            m = bytearray(b)
            if trial % 3 == 0:
                m[int(rng.integers(6, len(m)))] ^= 1 << int(rng.integers(0, 8))
            elif trial % 3 == 1:
                m = m[: int(rng.integers(10, len(m)))]
            else:
                m[int(rng.integers(6, len(m)))] = int(rng.integers(0, 256))
            (tmp_path / "c" / f"{len(mutated):04d}.png").write_bytes(bytes(m))
            mutated.append(bytes(m))
    ds = rl.ImageFolder(tmp_path, transform=tvt.PILToTensor())
    verdicts = {"decoded": 0, "refused": 0}
    for i, m in enumerate(mutated):
        try:
            ref = tvt.PILToTensor()(Image.open(io.BytesIO(m)).convert("RGB"))
        except Exception:  # any refusal of Pillow's (OSError, ValueError, struct.error, ...)
            ref = None
        if ref is None:
            with pytest.raises(rl.SampleError) as info:
                ds[i]
            assert "GIF" in info.value.reason, (i, info.value.reason)
            verdicts["refused"] += 1
        else:
            assert torch.equal(ds[i][0], ref), i
            verdicts["decoded"] += 1
    assert verdicts["decoded"] > 50 and verdicts["refused"] > 50, verdicts
