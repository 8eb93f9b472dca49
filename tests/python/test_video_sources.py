"""Videos that are not whole files, batched natively (_C.ClipPool): VideoBytes decoded from memory
through the decoder's custom AVIOContext, and VideoFile over a byte range of a file (a member of
an uncompressed tar shard, read in place). The clips equal those of the same video read from its
own file (max |diff| 0) for the same draws; errors name the bytes' or member's name.
rl.VideoShards reads tar shards of video members that way; rl.WebDataset (images) says so."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import warnings
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader import _C
from ringloader.transforms import clips
from ringloader.sources import video as rv

pytestmark = [
    pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg CLI to make videos"),
    pytest.mark.skipif(not rv.video_available()[0], reason="FFmpeg's libraries are not loadable"),
]
v2 = pytest.importorskip("torchvision.transforms.v2")

SAMPLER = clips.random_indices(num_clips=1, num_frames_per_clip=4, num_indices_between_frames=2)
CHAIN = v2.Compose([v2.RandomResizedCrop(20), v2.RandomHorizontalFlip()])


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> list:
    """Three tiny clips (H.264 with B-frames in MP4, VP9 in WebM, MPEG-4 in MKV), 32x24, 20
    frames, a keyframe every 5, and one uncompressed tar shard holding them with labels."""
    top = tmp_path_factory.mktemp("videos")
    paths = []
    for k, (ext, codec) in enumerate((("mp4", "libx264"), ("webm", "libvpx-vp9"), ("mkv", "mpeg4"))):
        path = top / f"v{k}.{ext}"
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                        f"testsrc2=size=32x24:rate=10:duration=2,hue=h={70 * k}", "-pix_fmt", "yuv420p",
                        "-c:v", codec, "-g", "5", *(["-bf", "2"] if codec == "libx264" else []), str(path)],
                       check=True)
        (top / f"v{k}.cls").write_text(str(k))
        paths.append(path)
    with tarfile.open(top / "shard.tar", "w") as tar:
        for path in paths:
            tar.add(path, arcname=path.name)
            tar.add(path.with_suffix(".cls"), arcname=f"{path.stem}.cls")
    return paths


class Pairs(torch.utils.data.Dataset):
    def __init__(self, make):
        self.make = make

    def __len__(self):
        return 3

    def __getitem__(self, i):
        return self.make(i), i


def loader(dataset, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rl.FallbackWarning)
        return rl.DataLoader(dataset, batch_size=3, generator=torch.Generator().manual_seed(3), **kwargs)


def members(shard: Path) -> dict:
    with tarfile.open(shard) as tar:
        return {m.name: (m.offset_data, m.size) for m in tar.getmembers()}


def test_video_bytes_batch_natively_with_the_files_pixels(videos):
    datas = [p.read_bytes() for p in videos]
    files = loader(Pairs(lambda i: rl.VideoFile(videos[i], clip=SAMPLER, transform=CHAIN)))
    memory = loader(Pairs(lambda i: rl.VideoBytes(datas[i], clip=SAMPLER, transform=CHAIN,
                                                  name=f"mem-{videos[i].name}")), num_workers=2)
    assert "native threads" in memory.describe() and "video" in memory.stats()
    for _ in range(2):  # two epochs: new draws, the kept decoders found again by the bytes' key
        (a, ta), (b, tb) = next(iter(files)), next(iter(memory))
        assert a.shape == (3, 1, 4, 3, 20, 20) and torch.equal(ta, tb)
        assert (a.int() - b.int()).abs().max().item() == 0
    assert memory.stats()["video"]["clips"] == 6


def test_video_bytes_errors_name_the_bytes(videos):
    bad = loader(Pairs(lambda i: rl.VideoBytes(b"not a video" * 50 if i == 1 else videos[i].read_bytes(),
                                               clip=SAMPLER, name=f"member-{i}.mp4")), on_error="skip")
    clip, target = next(iter(bad))
    assert clip.shape[0] == 2 and target.tolist() == [0, 2] and bad.stats()["video"]["skipped"] == 1
    with pytest.raises(ValueError, match="member-1.mp4"):
        next(iter(loader(bad.dataset)))


def test_a_tar_member_decodes_in_place_as_its_file(videos):
    shard = videos[0].parent / "shard.tar"
    ranges = members(shard)
    for path in videos:
        member = rl.VideoFile(shard, byte_range=ranges[path.name], name=f"shard.tar:{path.name}")
        assert member.metadata.num_frames == 20
        assert torch.equal(member.decode([0, 7, 19, 3]), rl.VideoFile(path).decode([0, 7, 19, 3]))
    size = shard.stat().st_size
    with pytest.raises(ValueError, match=r"shard.tar:late.mp4: bytes .* past its end"):
        rl.VideoFile(shard, byte_range=(size - 10, 100), name="shard.tar:late.mp4").metadata


def test_tar_members_batch_natively_with_the_files_pixels(videos):
    shard = videos[0].parent / "shard.tar"
    ranges = members(shard)
    files = loader(Pairs(lambda i: rl.VideoFile(videos[i], clip=SAMPLER, transform=CHAIN)))
    shards = loader(Pairs(lambda i: rl.VideoFile(shard, clip=SAMPLER, transform=CHAIN,
                                                 byte_range=ranges[videos[i].name])))
    assert "native threads" in shards.describe()
    (a, _), (b, _) = next(iter(files)), next(iter(shards))
    assert (a.int() - b.int()).abs().max().item() == 0


def test_pool_keeps_a_keyed_memory_decoder_on_its_own_copy(videos):
    """A keyed memory job's decoder is kept open on a copy of the bytes: the caller's buffer may
    change after the call returns, and the next call with that key decodes the same frames."""
    import numpy as np

    data = bytearray(videos[0].read_bytes())
    pool = _C.ClipPool(1, rv.MAX_FRAME_PIXELS, rv.MAX_CLIP_BYTES)
    first, second = (np.zeros((1, 2, 3, 24, 32), dtype=np.uint8) for _ in range(2))
    args = ([[1, 8]], [5], [], None)
    assert pool.decode(["v.mp4"], [data], *args, first, 24, 32, keys=["k"])[0][0] is None
    data[:] = bytes(len(data))  # the kept decoder reads its copy, not these zeros
    assert pool.decode(["v.mp4"], [data], *args, second, 24, 32, keys=["k"])[0][0] is None
    assert np.array_equal(first, second) and first.any()
    error = pool.decode(["v.mp4"], [data], *args, second, 24, 32, names=["zeros.mp4"])[0][0]
    assert isinstance(error, ValueError) and "zeros.mp4" in str(error)  # unkeyed: read in place


def test_video_shards_batch_natively_with_the_files_pixels(videos):
    shard = videos[0].parent / "shard.tar"
    ds = rl.VideoShards(str(shard), clip=SAMPLER, transform=CHAIN)
    assert ds.targets == [0, 1, 2] and [s[1] for s in ds.samples] == [p.name for p in videos]
    ref, target = ds[1]
    assert ref.name == f"{shard}:v1.webm" and target == 1
    files = loader(Pairs(lambda i: rl.VideoFile(videos[i], clip=SAMPLER, transform=CHAIN)))
    shards = loader(ds, num_workers=2)
    assert "native threads" in shards.describe()
    (a, ta), (b, tb) = next(iter(files)), next(iter(shards))
    assert torch.equal(ta, tb) and (a.int() - b.int()).abs().max().item() == 0


def test_video_shards_name_bad_samples(videos, tmp_path):
    with tarfile.open(tmp_path / "nolabel.tar", "w") as tar:
        tar.add(videos[0], arcname="a.mp4")
        tar.add(videos[1], arcname="b.webm")
        tar.add(videos[1].with_suffix(".cls"), arcname="b.cls")
    ds = rl.VideoShards(str(tmp_path / "nolabel.tar"))
    with pytest.raises(ValueError, match=r"nolabel.tar: sample 'a' has no .cls member"):
        ds[0]
    assert ds[1][1] == 1


def test_webdataset_names_video_members_and_what_reads_them(videos):
    shard = videos[0].parent / "shard.tar"
    ds = rl.WebDataset(str(shard), index_cache=None)
    with pytest.raises(Exception, match=r"member 'v0.mp4' is a video.*rl.VideoShards"):
        ds[0]
    with pytest.raises(ValueError, match="'mp4' is a video extension.*rl.VideoShards"):
        rl.WebDataset(str(shard), image_exts=["mp4"], index_cache=None)
