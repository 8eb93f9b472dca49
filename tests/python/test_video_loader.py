"""Video references under rl.DataLoader: a Dataset whose samples hold VideoFile/VideoBytes (and
rl.VideoFolder) runs on torch's path with one FallbackWarning, each reference decoded in the
worker processes with its clip drawn from clips.generator_for of its sample's key (the same
clips for any num_workers, again on resume, new ones each epoch), batches as torch's
DataLoader collates the same decoded clips, and errors that name the file."""

from __future__ import annotations

import gc
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader.transforms import clips
from ringloader.sources import video as rv

pytestmark = [
    pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg CLI to make videos"),
    pytest.mark.skipif(not rv.video_available()[0], reason="FFmpeg's libraries are not loadable"),
]

FRAMES = 20  # 2 s at 10 fps: every frame of testsrc2 differs from the others
SAMPLER = clips.random_indices(num_clips=1, num_frames_per_clip=4, num_indices_between_frames=2)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """Two classes of three tiny H.264 clips each (32x24, 20 frames, a keyframe every 5)."""
    top = tmp_path_factory.mktemp("videos")
    for c, label in enumerate(("archery", "bowling")):
        (top / label).mkdir()
        for k in range(3):
            subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi",
                            "-i", f"testsrc2=size=32x24:rate=10:duration=2,hue=h={60 * (3 * c + k)}",
                            "-pix_fmt", "yuv420p", "-c:v", "libx264", "-g", "5",
                            str(top / label / f"{k}.mp4")], check=True)
    return top


def loader(dataset, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rl.FallbackWarning)
        return rl.DataLoader(dataset, **kwargs)


def epochs(dl, count=1):
    return [[(clip.clone(), label.clone()) for clip, label in dl] for _ in range(count)]


def same(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1])
                                    for x, y in zip(a, b))


def test_video_folder_batches_collate_clips(root: Path):
    folder = rl.VideoFolder(root, clip=SAMPLER)
    batches = epochs(loader(folder, batch_size=2))[0]
    assert len(batches) == 3
    assert all(c.shape == (2, 1, 4, 3, 24, 32) and c.dtype == torch.uint8 for c, _ in batches)
    assert torch.cat([t for _, t in batches]).tolist() == folder.targets
    flat = rl.VideoFolder(root, clip=[0, 5, 19])  # one clip of explicit frames: [B, T, C, H, W]
    clip, labels = next(iter(loader(flat, batch_size=3, collate_fn=lambda b: (
        torch.stack([c for c, _ in b]), [t for _, t in b]))))
    assert clip.shape == (3, 3, 3, 24, 32) and labels == [0, 0, 0]
    assert torch.equal(clip[1], rl.VideoFile(flat.samples[1][0]).decode([0, 5, 19]))


def test_nested_references_and_bytes(root: Path):
    paths = sorted(str(p) for p in root.rglob("*.mp4"))

    class Nested(torch.utils.data.Dataset):
        def __len__(self):
            return len(paths)

        def __getitem__(self, i):
            data = Path(paths[i]).read_bytes()
            return {"views": [rl.VideoFile(paths[i], clip=[1, 2]),
                              rl.VideoBytes(data, clip=[[3], [4]], name=paths[i],
                                            transform=lambda t: t.float() / 255)],
                    "index": i}

    batch = next(iter(loader(Nested(), batch_size=2, num_workers=2)))
    assert batch["views"][0].shape == (2, 2, 3, 24, 32)
    assert batch["views"][1].shape == (2, 2, 1, 3, 24, 32) and batch["views"][1].dtype == torch.float32
    assert batch["index"].tolist() == [0, 1]
    assert torch.equal(batch["views"][1][1, 0, 0], rl.VideoFile(paths[1]).decode([3])[0] / 255)


def test_keyed_clips_same_for_any_workers_new_each_epoch(root: Path):
    folder = rl.VideoFolder(root, clip=SAMPLER)

    def run(workers):
        return epochs(loader(folder, batch_size=2, num_workers=workers, shuffle=True,
                             generator=torch.Generator().manual_seed(11)), count=2)

    serial, parallel, again = run(0), run(2), run(2)
    assert same(serial[0], parallel[0]) and same(serial[1], parallel[1])
    assert same(parallel[0], again[0]) and same(parallel[1], again[1])
    assert not same(serial[0], serial[1])  # a new base seed, new clips (and order) each epoch


def test_same_batches_as_torch_over_a_dataset_decoding_itself(root: Path):
    """torch's DataLoader over a Dataset calling decode(generator=clips.generator_for(...))
    itself, with the loader's base seed, gives the very same batches."""
    folder = rl.VideoFolder(root, clip=SAMPLER)
    dl = loader(folder, batch_size=2, num_workers=2, generator=torch.Generator().manual_seed(5))
    batches = iter(dl)
    first = next(batches)
    seed = dl.state_dict()["base_seed"]  # the epoch's seed, peeked from torch's RNG
    ours = [first] + list(batches)

    class Decoding(torch.utils.data.Dataset):
        def __len__(self):
            return len(folder)

        def __getitem__(self, i):
            video, label = folder[i]
            return video.decode(generator=clips.generator_for(seed, 0, i)), label

    theirs = list(torch.utils.data.DataLoader(Decoding(), batch_size=2, num_workers=2))
    assert same(ours, theirs)
    # Its order is torch's: shuffled by the same generator, explicit frames, the same batches.
    fixed = rl.VideoFolder(root, clip=[2, 7])
    ours = epochs(loader(fixed, batch_size=4, shuffle=True,
                         generator=torch.Generator().manual_seed(3)))[0]

    class Fixed(torch.utils.data.Dataset):
        def __len__(self):
            return len(fixed)

        def __getitem__(self, i):
            video, label = fixed[i]
            return video.decode(), label

    theirs = list(torch.utils.data.DataLoader(Fixed(), batch_size=4, shuffle=True,
                                              generator=torch.Generator().manual_seed(3)))
    assert same(ours, theirs)


def test_resume_mid_epoch_gives_the_same_clips(root: Path):
    folder = rl.VideoFolder(root, clip=SAMPLER)

    def make():
        return loader(folder, batch_size=2, num_workers=2, shuffle=True,
                      generator=torch.Generator().manual_seed(7))

    whole = epochs(make())[0]
    first = make()
    batches = iter(first)
    next(batches)
    state = first.state_dict()
    del batches
    resumed = make()
    resumed.load_state_dict(state)
    assert same(epochs(resumed)[0], whole[1:])


def test_bad_videos_name_the_file(root: Path, tmp_path: Path):
    corrupt = tmp_path / "corrupt.mp4"
    corrupt.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)
    missing = tmp_path / "missing.mp4"

    class Bad(torch.utils.data.Dataset):
        def __init__(self, path):
            self.path = path

        def __len__(self):
            return 2

        def __getitem__(self, i):
            return rl.VideoFile(self.path, clip=SAMPLER), i

    # (torch's workers take 5 s to shut down after a worker's error: one such case only)
    for path, kind, counts in ((missing, FileNotFoundError, (0, 2)), (corrupt, ValueError, (0,))):
        for workers in counts:
            batches = iter(loader(Bad(path), batch_size=2, num_workers=workers))
            with pytest.raises(kind) as caught:
                next(batches)
            text = str(caught.value) + "".join(getattr(caught.value, "__notes__", []))
            del batches, caught  # its worker processes end here, not at the session's end
            gc.collect()
            assert str(path) in text
            if workers == 0:
                assert "sample 0 of" in text
    # on_error="skip" drops them from natively batched clips; a clip whose transform runs in
    # Python (worker processes) refuses on_error, saying why.
    # (a batch whose every clip failed is dropped, as the image loader drops one; an epoch that
    # loses more than max_skipped_fraction of its clips raises)
    with pytest.raises(RuntimeError, match="skipped 2 of the 2 clips.*missing.mp4"):
        list(loader(Bad(missing), batch_size=2, on_error="skip"))
    skipped = loader(Bad(missing), batch_size=2, on_error="skip", max_skipped_fraction=1)
    assert list(skipped) == [] and skipped.stats()["video"]["skipped"] == 2

    class Python(Bad):
        def __getitem__(self, i):
            return rl.VideoFile(self.path, clip=SAMPLER, transform=lambda c: c), i

    with pytest.raises(ValueError, match="on_error only applies to natively batched datasets.*"
                       "video references.*worker processes"):
        loader(Python(missing), batch_size=2, on_error="skip")


def test_native_clip_batches_need_no_warning(root: Path):
    folder = rl.VideoFolder(root, clip=SAMPLER)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dl = rl.DataLoader(folder, batch_size=2, num_workers=2)
    assert "native threads" in dl.describe()
    assert [tuple(c.shape) for c, _ in dl] == [(2, 1, 4, 3, 24, 32)] * 3
    stats = dl.stats()["video"]
    assert stats["frames_kept"] == 6 * 4 and stats["frames_decoded_per_kept"] >= 1


def test_one_fallback_warning_says_where_clips_are_decoded(root: Path):
    # A transform written in Python keeps the clips in torch's worker processes.
    folder = rl.VideoFolder(root, clip=SAMPLER, transform=lambda clip: clip)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dl = rl.DataLoader(folder, batch_size=2)
    told = [w for w in caught if issubclass(w.category, rl.FallbackWarning)]
    assert len(told) == 1 and len(caught) == 1
    text = str(told[0].message)
    assert text.startswith("ringloader.DataLoader: ringloader.video_folder.VideoFolder returns "
                           "video references")
    assert "decoded by ringloader's native FFmpeg decoder in worker processes" in text
    assert "cannot batch natively (not a native video transform: function is not a torchvision v2 " \
           "transform)" in text
    assert not dl.native and "video references" in dl.describe()
    # A Subset (random_split) of the folder is served, and told, the same way.
    with pytest.warns(rl.FallbackWarning, match="returns video references"):
        part = rl.DataLoader(torch.utils.data.Subset(folder, [4, 1]), batch_size=2)
    clip, labels = next(iter(part))
    assert clip.shape == (2, 1, 4, 3, 24, 32) and labels.tolist() == [1, 0]


def test_images_and_videos_in_one_sample(root: Path, tmp_path: Path):
    from torchvision.transforms import v2

    from ringloader.sample_data import make_sample_dataset

    images = sorted(str(p) for p in make_sample_dataset(tmp_path / "photos", num_images=4,
                                                        num_classes=2).rglob("*.jpg"))
    videos = sorted(str(p) for p in root.rglob("*.mp4"))
    resize = v2.Compose([v2.PILToTensor(), v2.Resize((8, 8))])

    class Mixed(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return rl.ImageFile(images[i], transform=resize), rl.VideoFile(videos[i], clip=SAMPLER)

    with pytest.warns(rl.FallbackWarning, match="holds video references"):
        dl = rl.DataLoader(Mixed(), batch_size=2, num_workers=2,
                           generator=torch.Generator().manual_seed(1))
    ours = [b for b in dl]
    assert ours[0][0].shape == (2, 3, 8, 8) and ours[0][1].shape == (2, 1, 4, 3, 24, 32)
    serial = [b for b in loader(Mixed(), batch_size=2, generator=torch.Generator().manual_seed(1))]
    assert all(torch.equal(a[1], b[1]) for a, b in zip(ours, serial))


def test_bench_video_mode_reports_both_loaders_and_cleans_up(monkeypatch, capsys, tmp_path: Path):
    """``ringloader compare --dataset video``: the report's shape (not its timings), on 2 tiny
    clips, and its temporary folder of videos removed."""
    pytest.importorskip("torchcodec")
    from ringloader.bench import cli, video as bench_video

    monkeypatch.setattr(bench_video, "VIDEOS", 2)
    monkeypatch.setattr(bench_video, "SIZE", "64x36")
    monkeypatch.setattr(bench_video, "SECONDS", 3)  # 90 frames: a 16-frame clip 4 apart fits
    monkeypatch.setattr(bench_video, "BATCH", 2)
    monkeypatch.setattr(bench_video, "TIMED_BATCHES", 1)
    monkeypatch.setattr(bench_video.tempfile, "tempdir", str(tmp_path))
    assert cli.main(["--dataset", "video", "--rounds", "1", "--num-workers", "0", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "16 frames, stride 4, RandomResizedCrop(224)" in out
    assert "torchcodec VideoDecoder + clips_at_random_indices" in out and "clips/s" in out
    assert "ratio ringloader / torchcodec:" in out and "load average" in out
    assert "v2 transform (native clip batches)" in out and "frames decoded per frame kept" in out
    assert list(tmp_path.iterdir()) == []  # the clips are removed
