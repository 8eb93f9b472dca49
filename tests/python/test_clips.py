"""ringloader.clips picks the frames torchcodec.samplers picks: for the same torch RNG state, on
real videos made here with the ffmpeg CLI (constant and variable frame rate, one whose stream
begins after 0), torchcodec's sampled frames have the pts of the frames our indices name, for many
parameter sets, every edge policy and the errors. Keyed draws repeat for a sample and differ across
samples and epochs."""

from __future__ import annotations

import itertools
import random
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch

from ringloader import _C
from ringloader.transforms import clips

samplers = pytest.importorskip("torchcodec.samplers")
from torchcodec.decoders import VideoDecoder  # noqa: E402

if shutil.which("ffmpeg") is None:
    pytest.skip("the ffmpeg command line tool makes the test videos", allow_module_level=True)

# name -> ffmpeg arguments between the lavfi input and the output file
VIDEOS = {
    # 50 frames at 25 fps, a keyframe every 10
    "cfr.mp4": ["-f", "lavfi", "-t", "2", "-i", "testsrc=size=64x48:rate=25", "-g", "10"],
    # 50 frames spaced ever wider (0.04 s to 0.16 s apart), pts kept as they are
    "vfr.mkv": ["-f", "lavfi", "-t", "2", "-i", "testsrc=size=64x48:rate=25",
                "-vf", "setpts='(N+N*N/40)/25/TB'", "-fps_mode", "vfr"],
    # 30 frames at 30 fps from 1.3 s on, with B-frames
    "late.mp4": ["-f", "lavfi", "-t", "1", "-i", "testsrc=size=64x48:rate=30",
                 "-vf", "setpts=PTS+1.3/TB", "-bf", "2"],
}


class Video(NamedTuple):
    path: str
    decoder: Any
    meta: clips.VideoMeta
    pts: list


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("videos")
    out = {}
    for name, args in VIDEOS.items():
        path = folder / name
        subprocess.run(["ffmpeg", "-v", "error", "-y", *args, "-c:v", "libx264", "-pix_fmt",
                        "yuv420p", str(path)], check=True, timeout=60)
        decoder = VideoDecoder(str(path))
        pts = decoder.get_frames_in_range(0, len(decoder)).pts_seconds.tolist()
        m = decoder.metadata
        meta = clips.VideoMeta(len(decoder), m.average_fps, m.begin_stream_seconds,
                               m.end_stream_seconds, pts_seconds=pts)
        out[name] = Video(str(path), decoder, meta, pts)
    return out


def test_the_videos_are_what_the_parity_needs(videos: dict):
    cfr, vfr, late = videos["cfr.mp4"], videos["vfr.mkv"], videos["late.mp4"]
    assert cfr.meta.num_frames == vfr.meta.num_frames == 50 and late.meta.num_frames == 30
    gaps = [b - a for a, b in zip(vfr.pts, vfr.pts[1:])]
    assert max(gaps) > 3 * min(gaps)  # really variable
    assert late.meta.begin_stream_seconds == pytest.approx(1.3) and late.pts[0] == pytest.approx(1.3)


def run_both(tc_sampler, ours, video: Video, kwargs: dict, seed: int):
    """torchcodec's clips' pts and ours (the pts of the frames our indices name), or the
    exception each raised. Ours draws from a Generator, then again from the global RNG, which
    must end in the state torchcodec left it in."""
    torch.manual_seed(seed)
    try:
        expected = tc_sampler(video.decoder, **kwargs).pts_seconds.tolist()
    except ValueError as error:
        expected = error
    after_theirs = torch.rand(4)
    try:
        sampler = ours(**kwargs)
        picked = sampler.frame_indices(video.meta, torch.Generator().manual_seed(seed))
        torch.manual_seed(seed)
        assert sampler.frame_indices(video.meta) == picked  # the global RNG by default
        assert torch.equal(torch.rand(4), after_theirs)  # as many draws as torchcodec's
        got: Any = [[video.pts[i] for i in clip] for clip in picked]
    except ValueError as error:
        got = error
    return expected, got


def check_grid(videos: dict, tc_sampler, ours, grid: dict, count: int):
    combos = list(itertools.product(*grid.values()))
    chosen = random.Random(0).sample(combos, min(count, len(combos)))
    outcomes = {"same clips": 0, "both refused": 0}
    for name, video in videos.items():
        for values in chosen:
            kwargs = dict(zip(grid, values))
            for seed in (0, 7):
                expected, got = run_both(tc_sampler, ours, video, kwargs, seed)
                where = f"{name} {kwargs} seed {seed}"
                if isinstance(expected, ValueError):
                    assert isinstance(got, ValueError), f"{where}: torchcodec refused ({expected})"
                    outcomes["both refused"] += 1
                else:
                    assert got == expected, where
                    outcomes["same clips"] += 1
    return outcomes


def test_random_and_regular_indices_pick_torchcodecs_frames(videos: dict):
    grid = {
        "num_clips": [1, 3, 8],
        "num_frames_per_clip": [1, 4, 9],
        "num_indices_between_frames": [1, 3],
        "sampling_range_start": [0, 7, -12, 45],
        "sampling_range_end": [None, -1, 26, 1000],
        "policy": ["repeat_last", "wrap", "error"],
    }
    for tc_sampler, ours in ((samplers.clips_at_random_indices, clips.random_indices),
                             (samplers.clips_at_regular_indices, clips.regular_indices)):
        outcomes = check_grid(videos, tc_sampler, ours, grid, 60)
        assert outcomes["same clips"] > 150 and outcomes["both refused"] > 40, outcomes


def test_random_and_regular_timestamps_pick_torchcodecs_frames(videos: dict):
    grid = {
        "num_frames_per_clip": [1, 4, 11],
        "seconds_between_frames": [None, 0.03, 0.1, 0.35],
        "sampling_range_start": [None, 0.5, 1.4, 2.1],
        "sampling_range_end": [None, 0.2, 1.9, 9.0],
        "policy": ["repeat_last", "wrap", "error"],
    }
    random_grid = {"num_clips": [1, 2, 6], **grid}
    outcomes = check_grid(videos, samplers.clips_at_random_timestamps, clips.random_timestamps,
                          random_grid, 60)
    assert outcomes["same clips"] > 150 and outcomes["both refused"] > 40, outcomes
    regular_grid = {"seconds_between_clip_starts": [0.07, 0.3, 1.0], **grid}
    outcomes = check_grid(videos, samplers.clips_at_regular_timestamps, clips.regular_timestamps,
                          regular_grid, 60)
    assert outcomes["same clips"] > 150 and outcomes["both refused"] > 40, outcomes


def test_sampled_times_name_the_frame_played_then(videos: dict):
    for video in videos.values():
        sampler = clips.random_timestamps(num_clips=20, num_frames_per_clip=3)
        generator = torch.Generator().manual_seed(3)
        times = sampler.timestamps(video.meta, generator)
        frames = sampler.frame_indices(video.meta, torch.Generator().manual_seed(3))
        for clip_times, clip_frames in zip(times, frames):
            for t, i in zip(clip_times, clip_frames):
                after = video.pts[i + 1] if i + 1 < len(video.pts) else float("inf")
                assert video.pts[i] <= t < after


def test_each_policy_completes_a_clip_past_the_end(videos: dict):
    video = videos["cfr.mp4"]  # 50 frames: a clip from 45 in steps of 2 has 45, 47, 49
    kwargs = dict(num_clips=1, num_frames_per_clip=5, num_indices_between_frames=2,
                  sampling_range_start=45, sampling_range_end=46)
    assert clips.regular_indices(**kwargs).frame_indices(video.meta) == [[45, 47, 49, 49, 49]]
    assert clips.regular_indices(**kwargs, policy="wrap").frame_indices(video.meta) == \
        [[45, 47, 49, 45, 47]]
    for tc_sampler, ours in ((samplers.clips_at_regular_indices, clips.regular_indices),
                             (samplers.clips_at_random_indices, clips.random_indices)):
        with pytest.raises(ValueError, match="'error'"):
            tc_sampler(video.decoder, **kwargs, policy="error")
        with pytest.raises(ValueError, match="policy='error'.*sampling_range_end"):
            ours(**kwargs, policy="error").frame_indices(video.meta)
    # The same in time: from 1.9 s, frames every 0.04 s until 2.0 s.
    times = dict(seconds_between_clip_starts=1.0, num_frames_per_clip=4, sampling_range_start=1.9,
                 sampling_range_end=1.95)
    for policy, frames in (("repeat_last", [47, 48, 49, 49]), ("wrap", [47, 48, 49, 47])):
        ours = clips.regular_timestamps(**times, policy=policy).frame_indices(video.meta)
        theirs = samplers.clips_at_regular_timestamps(video.decoder, **times, policy=policy)
        assert ours == [frames] and theirs.pts_seconds.tolist() == [[video.pts[i] for i in frames]]
    with pytest.raises(ValueError, match="policy='error'"):
        clips.regular_timestamps(**times, policy="error").frame_indices(video.meta)


# (sampler name, keyword arguments, the argument the message must name)
REFUSED = [
    ("random_indices", dict(num_clips=0), "num_clips"),
    ("regular_indices", dict(num_frames_per_clip=0), "num_frames_per_clip"),
    ("random_indices", dict(num_indices_between_frames=0), "num_indices_between_frames"),
    ("random_indices", dict(policy="loop"), "policy"),
    ("regular_indices", dict(sampling_range_start=50), "sampling_range_start"),
    ("random_indices", dict(sampling_range_start=10, sampling_range_end=10), "sampling_range_end"),
    ("random_indices", dict(num_frames_per_clip=60, sampling_range_start=1), "sampling_range_end"),
    ("random_timestamps", dict(num_clips=-1), "num_clips"),
    ("random_timestamps", dict(num_frames_per_clip=-2), "num_frames_per_clip"),
    ("regular_timestamps", dict(seconds_between_clip_starts=0), "seconds_between_clip_starts"),
    ("random_timestamps", dict(sampling_range_start=-0.5), "sampling_range_start"),
    ("random_timestamps", dict(sampling_range_start=2.0), "sampling_range_start"),
    ("random_timestamps", dict(sampling_range_end=0.0), "sampling_range_end"),
    ("random_timestamps", dict(sampling_range_start=1.0, sampling_range_end=0.5), "sampling_range_end"),
    ("random_timestamps", dict(num_frames_per_clip=60), "sampling_range_end"),
    ("regular_timestamps", dict(policy="nearest"), "policy"),
]
TORCHCODEC = {"random_indices": "clips_at_random_indices",
              "regular_indices": "clips_at_regular_indices",
              "random_timestamps": "clips_at_random_timestamps",
              "regular_timestamps": "clips_at_regular_timestamps"}


@pytest.mark.parametrize("name,kwargs,argument", REFUSED)
def test_errors_are_torchcodecs_and_name_the_argument(videos: dict, name: str, kwargs: dict,
                                                      argument: str):
    video = videos["cfr.mp4"]
    if name == "regular_timestamps":
        kwargs = {"seconds_between_clip_starts": 0.5, **kwargs}
    with pytest.raises(ValueError, match=argument):
        getattr(samplers, TORCHCODEC[name])(video.decoder, **kwargs)
    with pytest.raises(ValueError, match=argument):
        getattr(clips, name)(**kwargs).frame_indices(video.meta)


def test_errors_torchcodec_words_otherwise(videos: dict):
    video = videos["cfr.mp4"]
    # torchcodec's message names seconds_between_clip_starts here; ours names the argument given.
    with pytest.raises(ValueError):
        samplers.clips_at_random_timestamps(video.decoder, seconds_between_frames=0)
    with pytest.raises(ValueError, match=r"seconds_between_frames \(0\) must be > 0"):
        clips.random_timestamps(seconds_between_frames=0)
    # A start still negative once the length is added: refused, naming it.
    with pytest.raises(ValueError, match=r"sampling_range_start \(-60\) must be at least .*-50"):
        clips.random_indices(sampling_range_start=-60).frame_indices(video.meta)
    empty = clips.VideoMeta(0, 25.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="at least one frame, found 0"):
        clips.random_indices().frame_indices(empty)
    unknown = clips.VideoMeta(50, None, 0.0, 2.0)
    with pytest.raises(ValueError, match="average_fps is unknown.*index sampler"):
        clips.random_timestamps().frame_indices(unknown)
    with pytest.raises(ValueError, match="end_stream_seconds is unknown"):
        clips.regular_timestamps(0.5).frame_indices(clips.VideoMeta(50, 25.0, 0.0, None))
    with pytest.raises(TypeError, match="num_clips must be an int, got 2.5"):
        clips.random_indices(num_clips=2.5)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        clips.random_indices().frame_indices(video.meta, generator=3)


def test_keyed_draws_repeat_per_sample_and_differ_across_samples_and_epochs(videos: dict):
    meta = videos["cfr.mp4"].meta
    sampler = clips.random_indices(num_clips=2, num_frames_per_clip=4)

    def draw(seed: int, epoch: int, index: int) -> list:
        return sampler.frame_indices(meta, clips.generator_for(seed, epoch, index))

    serial = [draw(5, 0, i) for i in range(64)]
    with ThreadPoolExecutor(8) as pool:  # any thread count, any completion order
        threaded = list(pool.map(lambda i: draw(5, 0, i), reversed(range(64))))[::-1]
    assert threaded == serial == [draw(5, 0, i) for i in range(64)]
    assert len({str(c) for c in serial}) > 50  # samples differ
    assert sum(draw(5, 1, i) != serial[i] for i in range(64)) > 55  # epochs differ
    assert sum(draw(6, 0, i) != serial[i] for i in range(64)) > 55  # seeds differ
    # The generator is seeded from the native per-sample key, position included.
    assert clips.generator_for(5, 0, 3, position=9).initial_seed() != \
        clips.generator_for(5, 0, 3).initial_seed()
    native = _C.sample_seed(5, 0, _C.row_key(3, 9))
    assert clips.generator_for(5, 0, 3, position=9).initial_seed() == _C.mix64(native + 2)


def test_explicit_indices_and_timestamps(videos: dict):
    video = videos["vfr.mkv"]
    assert clips.indices([0, 5, -1]).frame_indices(video.meta) == [[0, 5, 49]]
    assert clips.indices(torch.tensor([[1, 2], [3, 4]])).frame_indices(video.meta) == [[1, 2], [3, 4]]
    assert clips.as_sampler([[1, 2], [3, 4]]) == clips.indices([[1, 2], [3, 4]])
    sampler = clips.random_indices(num_clips=2)
    assert clips.as_sampler(sampler) is sampler
    with pytest.raises(IndexError, match="frame index 50 is out of range for a video of 50 frames"):
        clips.indices([[50]]).frame_indices(video.meta)
    with pytest.raises(ValueError, match="clips of different lengths"):
        clips.indices([[1, 2], [3]])
    with pytest.raises(TypeError, match="frame index must be an int, got 0.5"):
        clips.as_sampler([0.5])
    with pytest.raises(TypeError, match="clip must be a ringloader.clips sampler"):
        clips.as_sampler("0,1")
    # Times name the frames torchcodec's get_frames_played_at returns.
    times = [[video.pts[0], 0.5, video.pts[7]], [1.234, 3.0, video.meta.end_stream_seconds - 1e-9]]
    ours = clips.timestamps(times).frame_indices(video.meta)
    theirs = video.decoder.get_frames_played_at(sum(times, [])).pts_seconds.tolist()
    assert [video.pts[i] for i in sum(ours, [])] == theirs
    assert ours[0][2] == 7
    with pytest.raises(ValueError, match=r"time 9.0 s is outside the video's \[0.0, 4.4\)"):
        clips.timestamps([9.0]).frame_indices(video.meta)


def test_without_pts_times_map_by_the_average_rate(videos: dict):
    # torchcodec's approximate mode: frame floor((t - begin) * fps) from the header alone.
    for name in ("cfr.mp4", "late.mp4"):
        exact = videos[name]
        decoder = VideoDecoder(exact.path, seek_mode="approximate")
        m = decoder.metadata
        meta = clips.VideoMeta(len(decoder), m.average_fps, m.begin_stream_seconds,
                               m.end_stream_seconds)
        sampler = clips.random_timestamps(num_clips=10, num_frames_per_clip=3)
        torch.manual_seed(1)
        theirs = samplers.clips_at_random_timestamps(decoder, num_clips=10, num_frames_per_clip=3)
        ours = sampler.frame_indices(meta, torch.Generator().manual_seed(1))
        assert [[exact.pts[i] for i in clip] for clip in ours] == theirs.pts_seconds.tolist()


def test_video_meta_checks_its_fields():
    meta = clips.VideoMeta(2, 1.0, 0.0, 2.0, pts_seconds=[0, 1])
    assert meta.pts_seconds == (0.0, 1.0) and hash(meta) == hash(clips.VideoMeta(2, 1.0, 0.0, 2.0, (0.0, 1.0)))
    with pytest.raises(ValueError, match="pts_seconds must be sorted"):
        clips.VideoMeta(2, 1.0, 0.0, 2.0, pts_seconds=[1.0, 0.0])
    with pytest.raises(ValueError, match=r"num_frames \(-1\) must be >= 0"):
        clips.VideoMeta(-1, 1.0, 0.0, 2.0)
    with pytest.raises(TypeError, match="VideoMeta num_frames must be an int"):
        clips.VideoMeta(2.0, 1.0, 0.0, 2.0)


def test_the_native_decoder_agrees_on_metadata_and_on_the_frame_played_at(videos: dict):
    # The native decoder's VideoMeta is the one torchcodec's metadata gives, so the samplers pick
    # the same frames from it; and its own played-at rule (C++, used by decode_played_at) names
    # the frames frames_played_at names, so the two cannot drift apart unseen.
    video_module = pytest.importorskip("ringloader.video")
    if not video_module.video_available()[0]:
        pytest.skip("FFmpeg's libraries are not loadable here")
    picker = random.Random(5)
    for video in videos.values():
        assert video_module.VideoFile(video.path).metadata.clip_meta() == video.meta
        native = _C.VideoDecoder(video.path, _C.VIDEO_MAX_FRAME_PIXELS, _C.VIDEO_MAX_CLIP_BYTES)
        begin, end = video.meta.begin_stream_seconds, video.meta.end_stream_seconds
        times = [picker.uniform(begin, end) for _ in range(100)] + video.pts
        times = [t for t in times if t < end]
        assert list(native.indices_played_at(times)) == clips.frames_played_at(video.meta, times)
