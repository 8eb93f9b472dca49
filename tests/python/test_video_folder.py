"""rl.VideoFolder finds torchvision's classes and samples, in torchvision's order, on the same
tree (nested folders, symbolic links, upper-case extensions, files that are not videos), names the
folder when there is nothing to find, and hands out VideoFile references."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader.transforms import clips
from ringloader.sources.video_folder import VIDEO_EXTENSIONS

FILES = [
    "punch/v_Punch_g01_c01.avi", "punch/v_Punch_g01_c02.AVI", "punch/notes.txt",
    "punch/deeper/b.mp4", "punch/deeper/a.webm", "punch/Z.mkv", "punch/a.mov",
    "archery/x.mp4", "archery/x.mp4.part", "archery/clip.M4V",
    "Bowling/1.mp4", "bowling/2.mkv", "_extra/0.mp4",
]


def make_tree(root: Path) -> Path:
    for name in FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"")  # the folder scan never opens a file
    outside = root.parent / f"{root.name}_outside"
    (outside / "inner").mkdir(parents=True)
    (outside / "inner" / "linked.mp4").write_bytes(b"")
    os.symlink(outside, root / "archery" / "link")  # followed, as torchvision's walk does
    (root / "not_a_class.mp4").write_bytes(b"")  # a file at the top is no class
    return root


def torchvision_folder(root: Path, **kwargs):
    from torchvision.datasets import DatasetFolder

    return DatasetFolder(str(root), loader=lambda path: path, **kwargs)


def test_classes_and_samples_are_torchvisions(tmp_path: Path, monkeypatch):
    root = make_tree(tmp_path / "videos")
    ours = rl.VideoFolder(root)
    theirs = torchvision_folder(root, extensions=VIDEO_EXTENSIONS)
    assert ours.classes == theirs.classes == ["Bowling", "_extra", "archery", "bowling", "punch"]
    assert ours.class_to_idx == theirs.class_to_idx
    assert ours.samples == theirs.samples and ours.targets == theirs.targets
    assert len(ours) == len(theirs) == 12
    names = [os.path.relpath(path, root) for path, _ in ours.samples]
    assert "archery/link/inner/linked.mp4" in names and "punch/v_Punch_g01_c02.AVI" in names
    assert not any(n.endswith((".txt", ".part")) for n in names)
    monkeypatch.setenv("HOME", str(tmp_path))  # a string root's ~ is expanded, as torchvision's
    assert rl.VideoFolder("~/videos").samples == torchvision_folder("~/videos",
                                                                  extensions=VIDEO_EXTENSIONS).samples
    # Other choices of files match too.
    for kwargs in ({"extensions": (".avi",)}, {"extensions": ".mp4"},
                   {"is_valid_file": lambda path: "deeper" in path}):
        kwargs["allow_empty"] = True  # most classes hold none of these
        ours = rl.VideoFolder(root, **kwargs)
        theirs = torchvision_folder(root, **kwargs)
        assert ours.samples == theirs.samples and ours.classes == theirs.classes, kwargs


def test_a_subclass_chooses_its_classes(tmp_path: Path):
    root = make_tree(tmp_path / "videos")

    class TwoClasses(rl.VideoFolder):
        def find_classes(self, directory):
            return ["punch", "archery"], {"punch": 0, "archery": 1}

    ds = TwoClasses(root)
    assert ds.classes == ["punch", "archery"] and set(ds.targets) == {0, 1}
    assert ds.samples[0] == (str(root / "punch" / "Z.mkv"), 0)  # the walk is sorted: Z < a


def test_missing_and_empty_folders_are_named(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match=f"VideoFolder root '{tmp_path / 'nowhere'}' is not a directory"):
        rl.VideoFolder(tmp_path / "nowhere")
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.mp4").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=f"Couldn't find any class folder in {tmp_path / 'flat'}"):
        rl.VideoFolder(tmp_path / "flat")
    (tmp_path / "some" / "run").mkdir(parents=True)
    (tmp_path / "some" / "jump").mkdir()
    (tmp_path / "some" / "jump" / "a.mp4").write_bytes(b"")
    (tmp_path / "some" / "run" / "a.jpg").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"Found no valid file for the classes run\. "
                                                r"Supported extensions are: \.avi, \.m4v"):
        rl.VideoFolder(tmp_path / "some")
    assert len(rl.VideoFolder(tmp_path / "some", allow_empty=True)) == 1
    with pytest.raises(ValueError, match="extensions or is_valid_file, not both"):
        rl.VideoFolder(tmp_path / "some", extensions=(".mp4",), is_valid_file=bool)
    with pytest.raises(ValueError, match="extensions or is_valid_file"):
        rl.VideoFolder(tmp_path / "some", extensions=None)


def test_items_are_video_references(tmp_path: Path):
    root = make_tree(tmp_path / "videos")
    sampler = clips.random_indices(num_clips=2, num_frames_per_clip=8)
    ds = rl.VideoFolder(root, clip=sampler, target_transform=lambda t: t * 10)
    assert ds.clip is sampler
    assert rl.VideoFolder(root, clip=[0, 2, 4]).clip == [0, 2, 4]  # as given: VideoFile reads it
    with pytest.raises(TypeError, match="clip must be a ringloader.clips sampler"):
        rl.VideoFolder(root, clip="first")
    plain = rl.VideoFolder(root, clip=sampler)
    copy = pickle.loads(pickle.dumps(plain))  # for worker processes
    assert copy.samples == plain.samples and copy.clip == sampler
    try:
        from ringloader.sources.video import VideoFile
    except ImportError:
        with pytest.raises(ImportError, match=r"VideoFolder\[0\] \(.*Bowling/1.mp4\) needs "
                                              r"ringloader.video.VideoFile"):
            ds[0]
        return
    video, target = ds[len(ds) - 1]
    assert isinstance(video, VideoFile) and target == 40
    assert video.path == ds.samples[-1][0]


def test_a_folder_video_decodes_the_clip_torchcodec_samples(tmp_path: Path):
    # The contract between the folder, the clip samplers and VideoFile, on a real video.
    video_module = pytest.importorskip("ringloader.video")
    torchcodec = pytest.importorskip("torchcodec.samplers")
    if shutil.which("ffmpeg") is None or not video_module.video_available()[0]:
        pytest.skip("needs the ffmpeg command line tool and FFmpeg's libraries")
    from torchcodec.decoders import VideoDecoder

    path = tmp_path / "videos" / "waving" / "a.mp4"
    path.parent.mkdir(parents=True)
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-t", "1", "-i",
                    "testsrc=size=64x48:rate=25", "-c:v", "libx264", "-pix_fmt", "yuv420p",
                    str(path)], check=True, timeout=60)
    sampler = clips.random_indices(num_clips=2, num_frames_per_clip=4, num_indices_between_frames=2)
    video, target = rl.VideoFolder(tmp_path / "videos", clip=sampler)[0]
    torch.manual_seed(11)
    frames = video.decode()
    torch.manual_seed(11)
    expected = torchcodec.clips_at_random_indices(VideoDecoder(str(path)), num_clips=2,
                                                  num_frames_per_clip=4,
                                                  num_indices_between_frames=2)
    assert target == 0 and frames.shape == (2, 4, 3, 48, 64)
    assert torch.equal(frames, expected.data)
