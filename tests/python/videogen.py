"""Tiny H.264 test clips made by the ffmpeg CLI (never downloaded), shared by the video tests
added with the clip loader's robustness work."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ringloader.sources import video as rv
from ringloader.transforms import clips

# The marks of a test module that makes and decodes clips.
NEEDS_VIDEO = [
    pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg CLI to make videos"),
    pytest.mark.skipif(not rv.video_available()[0], reason="FFmpeg's libraries are not loadable"),
]
# Four frames two apart, as the clip loader's tests draw them.
SAMPLER = clips.random_indices(num_frames_per_clip=4, num_indices_between_frames=2)


def make_clip(path: Path, hue: int, frames: int = 20) -> Path:
    """A 32x24 H.264 clip at 10 fps of ``frames`` frames, a keyframe every 5, tinted by ``hue``
    degrees (so clips differ)."""
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    f"testsrc2=size=32x24:rate=10,trim=end_frame={frames},hue=h={hue}", "-pix_fmt", "yuv420p",
                    "-c:v", "libx264", "-g", "5", str(path)], check=True)
    return path


def class_folder_with_a_cut_clip(top: Path, per_class: int) -> Path:
    """Classes ``a`` and ``b`` of ``per_class`` clips each (``k.mp4``), ``a/1.mp4`` cut to its
    first third (a truncated download: a sample error when read)."""
    for c, label in enumerate("ab"):
        (top / label).mkdir()
        for k in range(per_class):
            make_clip(top / label / f"{k}.mp4", 60 * (per_class * c + k))
    bad = top / "a" / "1.mp4"
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 3])
    return top


def resized_clip(path: Path, python: bool = False):
    """A ``VideoFile`` of three frames drawn by ``clips.random_indices``, resized to 12 rows by
    v2's ``Resize``: as the transform itself (native clip batches), or as a Python callable
    calling it (``python``: the same pixels, decoded in torch's worker processes)."""
    from torchvision.transforms import v2

    import ringloader as rl

    resize = v2.Resize(12)
    return rl.VideoFile(path, clip=clips.random_indices(num_frames_per_clip=3),
                        transform=(lambda x: resize(x)) if python else resize)
