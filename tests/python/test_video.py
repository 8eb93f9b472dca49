"""VideoFile / VideoBytes: the native decoder over the system's FFmpeg against torchcodec's
VideoDecoder (the pinned 0.17.0) on videos the ffmpeg CLI makes here, frame for frame (max
difference 0), and its errors and limits."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader.sources import video as rv

pytestmark = [
    pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg CLI to make videos"),
    pytest.mark.skipif(not rv.video_available()[0], reason="FFmpeg's libraries are not loadable"),
]

SOURCE = "testsrc2=size=160x96:rate=24:duration=1.5"  # 36 frames
#: name -> (ffmpeg output arguments, input filter chain or None)
VIDEOS = {
    "h264_bframes.mp4": "-c:v libx264 -preset ultrafast -bf 3 -g 12 -pix_fmt yuv420p",
    "h264_open_gop.mkv": "-c:v libx264 -preset veryfast -bf 3 -x264-params open-gop=1:keyint=12 "
                         "-pix_fmt yuv420p",
    "hevc.mp4": "-c:v libx265 -preset ultrafast -x265-params log-level=error:keyint=12 -pix_fmt yuv420p",
    "hevc_10bit.mkv": "-c:v libx265 -preset ultrafast -x265-params log-level=error:keyint=12 "
                      "-pix_fmt yuv420p10le",
    "vp9.webm": "-c:v libvpx-vp9 -deadline realtime -cpu-used 8 -g 12",
    "av1.mp4": "-c:v libsvtav1 -preset 12 -g 12",
    # MPEG-4 Part 2 without B-frames: with them (packed bitstream in AVI) torchcodec and this
    # decoder both stop one frame short of the packet count.
    "mpeg4.avi": "-c:v mpeg4 -g 12",
    "mjpeg.avi": "-c:v mjpeg",
    "odd_97x61.mkv": "-vf scale=97:61 -c:v libx264 -preset ultrafast -pix_fmt yuv444p",
    "odd_97x61.avi": "-vf scale=97:61 -c:v mpeg4",
    "vfr.mkv": "-vf setpts='if(lt(N,12),N*2,N*5+24)' -fps_mode vfr -c:v libx264 -preset ultrafast "
               "-pix_fmt yuv420p",
}


def _ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", *args], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def videos(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("videos")
    for name, args in VIDEOS.items():
        _ffmpeg("-f", "lavfi", "-i", SOURCE, *args.split(), str(root / name))
    # Display matrices turning the picture (FFmpeg 5.1's mov muxer writes them from the tag).
    for degrees in (90, 180, 270):
        _ffmpeg("-i", str(root / "h264_bframes.mp4"), "-c", "copy", "-metadata:s:v:0",
                f"rotate={degrees}", str(root / f"rotated_{degrees}.mp4"))
    return root


ALL = sorted(VIDEOS) + ["rotated_90.mp4", "rotated_180.mp4", "rotated_270.mp4"]


def _torchcodec(path: Path):
    from torchcodec.decoders import VideoDecoder

    return VideoDecoder(str(path))


@pytest.mark.parametrize("name", ALL)
def test_frames_equal_torchcodec(videos: Path, name: str):
    path = videos / name
    meta = rl.VideoFile(path).metadata
    tm = _torchcodec(path).metadata
    assert (meta.num_frames, meta.width, meta.height, meta.codec) == \
        (tm.num_frames, tm.width, tm.height, tm.codec)
    assert (meta.average_fps, meta.begin_stream_seconds, meta.end_stream_seconds) == \
        (tm.average_fps, tm.begin_stream_seconds, tm.end_stream_seconds)
    n = meta.num_frames
    scattered = [n - 1, 3, n // 2, 0, 3, 7, n // 3, n - 5, 1]  # unsorted, a repeat, both ends
    for indices in (scattered, list(range(n))):
        ours = rl.VideoFile(path).decode(indices)
        expected = _torchcodec(path).get_frames_at(indices)
        assert ours.dtype == torch.uint8 and ours.shape == expected.data.shape
        assert (ours.int() - expected.data.int()).abs().max().item() == 0, indices
    assert list(meta.pts_seconds) == expected.pts_seconds.tolist()


def test_frames_played_at_equal_torchcodec(videos: Path):
    path = videos / "vfr.mkv"
    meta = rl.VideoFile(path).metadata
    times = [meta.end_stream_seconds - 1e-6, 0.0, meta.pts_seconds[13] + 0.01, 0.5, 1.0]
    ours = rl.VideoFile(path).decode_played_at(times)
    assert torch.equal(ours, _torchcodec(path).get_frames_played_at(times).data)
    with pytest.raises(IndexError, match=r"vfr\.mkv.*\[0, "):
        rl.VideoFile(path).decode_played_at([meta.end_stream_seconds])


def test_rotation_is_applied_as_torchcodec(videos: Path):
    meta = rl.VideoFile(videos / "rotated_90.mp4").metadata
    assert (meta.rotation, meta.width, meta.height) == (90.0, 96, 160)
    upright = rl.VideoFile(videos / "h264_bframes.mp4").decode([5])
    for degrees, quarter_turns in ((90, 1), (180, 2), (270, 3)):
        turned = rl.VideoFile(videos / f"rotated_{degrees}.mp4").decode([5])
        assert torch.equal(turned, torch.rot90(upright, quarter_turns, dims=(2, 3))), degrees


def test_bytes_equal_path(videos: Path):
    path = videos / "h264_open_gop.mkv"
    data = path.read_bytes()
    for blob in (data, bytearray(data), memoryview(data)):
        from_bytes = rl.VideoBytes(blob, name="member.mkv").decode([20, 2, 13])
        assert torch.equal(from_bytes, rl.VideoFile(path).decode([20, 2, 13]))


def test_clips_and_samplers_give_clip_shapes(videos: Path):
    from ringloader.transforms import clips

    path = videos / "h264_bframes.mp4"
    frames = rl.VideoFile(path).decode()
    assert frames.shape == (36, 3, 96, 160)
    two = rl.VideoFile(path, clip=[[0, 4, 8], [30, 31, 35]]).decode()
    assert two.shape == (2, 3, 3, 96, 160)
    assert torch.equal(two[1], frames[[30, 31, 35]])
    sampler = clips.random_indices(num_clips=3, num_frames_per_clip=4, num_indices_between_frames=2)
    drawn = rl.VideoFile(path, clip=sampler).decode(generator=torch.Generator().manual_seed(5))
    again = rl.VideoFile(path, clip=sampler).decode(generator=torch.Generator().manual_seed(5))
    assert drawn.shape == (3, 4, 3, 96, 160) and torch.equal(drawn, again)
    # The same draws as torchcodec's sampler from the same global RNG state, frame for frame.
    from torchcodec.samplers import clips_at_random_indices

    torch.manual_seed(11)
    ours = rl.VideoFile(path, clip=sampler).decode()
    torch.manual_seed(11)
    theirs = clips_at_random_indices(_torchcodec(path), num_clips=3, num_frames_per_clip=4,
                                     num_indices_between_frames=2)
    assert torch.equal(ours, theirs.data)
    halved = rl.VideoFile(path, clip=[1, 2], transform=lambda t: t // 2).decode()
    assert torch.equal(halved, frames[[1, 2]] // 2)


def test_errors_name_the_file(videos: Path, tmp_path: Path):
    text = tmp_path / "notes.mp4"
    text.write_text("not a video at all")
    with pytest.raises(ValueError, match="notes.mp4.*not a video"):
        rl.VideoFile(text).metadata
    whole = (videos / "h264_bframes.mp4").read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole[: len(whole) // 2])  # the index (moov) is at the end: gone
    with pytest.raises(ValueError, match="cut.mp4"):
        rl.VideoFile(cut).decode([0])
    empty = tmp_path / "empty.mkv"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty.mkv"):
        rl.VideoFile(empty).metadata
    with pytest.raises(FileNotFoundError, match="missing.mp4"):
        rl.VideoFile(tmp_path / "missing.mp4").metadata
    with pytest.raises(ValueError, match="member.bin"):
        rl.VideoBytes(b"\x00" * 1000, name="member.bin").metadata
    # Damaged data in the middle of an H.264 stream: the frame that fails is named.
    data = bytearray(whole)
    for i in range(len(data) // 2, len(data) // 2 + 2000):
        data[i] ^= 0x5A
    damaged = tmp_path / "damaged.mp4"
    damaged.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match=r"damaged\.mp4.*frame \d+"):
        rl.VideoFile(damaged).decode()
    with pytest.raises(IndexError, match=r"h264_bframes\.mp4.*0\.\.35"):
        rl.VideoFile(videos / "h264_bframes.mp4").decode([0, 36])


def test_limits_guard_frame_size_and_clip_bytes(videos: Path):
    path = videos / "h264_bframes.mp4"
    with pytest.raises(ValueError, match="max_frame_pixels"):
        rl.VideoFile(path, max_frame_pixels=160 * 96 - 1).metadata
    assert rl.VideoFile(path, max_frame_pixels=160 * 96).metadata.num_frames == 36
    frame = 3 * 160 * 96
    small = rl.VideoFile(path, max_clip_bytes=4 * frame)
    assert small.decode([0, 1, 2, 3]).shape[0] == 4
    with pytest.raises(ValueError, match=r"h264_bframes\.mp4.*max_clip_bytes"):
        small.decode([0, 1, 2, 3, 4])


def test_without_ffmpeg_videos_say_what_to_install_and_images_work(tmp_path: Path):
    from PIL import Image

    Image.new("RGB", (8, 6), (200, 10, 10)).save(tmp_path / "red.jpg")
    script = textwrap.dedent(f"""
        import ringloader as rl
        image, label = rl.FileList([{str(tmp_path / "red.jpg")!r}], [3])[0]
        assert image.size == (8, 6) and label == 3
        try:
            rl.VideoFile("any.mp4").decode([0])
        except RuntimeError as e:
            print(e)
    """)
    env = dict(os.environ, RINGLOADER_FFMPEG_DIR=str(tmp_path))  # holds no FFmpeg
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "libavformat.so." in out.stdout and "apt-get install libavutil" in out.stdout
