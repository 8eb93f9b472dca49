"""rl.VideoShards over ``pipe:COMMAND`` shards: each command run once at construction, its stdout
written to a file of the dataset's under the cache folder and read in place as a local shard.
The samples and batches equal the local shard's; a failing command names itself, its status and
its stderr; ``cache_limit`` bounds the copies; a copy changed after indexing is stale; copies go
with their dataset (never with a forked child's copy of it) or, left by a dead process, with the
next construction."""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import re
import shutil
import subprocess
import tarfile
import time
import warnings
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader.sources._pipe_spool import SPOOL_FOLDER

from videogen import NEEDS_VIDEO, SAMPLER, make_clip

pytestmark = NEEDS_VIDEO
v2 = pytest.importorskip("torchvision.transforms.v2")

CHAIN = v2.CenterCrop(16)


@pytest.fixture(scope="module")
def shard(tmp_path_factory) -> Path:
    """A tar of three tiny H.264 clips (video + label each), labels 0, 1, 2."""
    top = tmp_path_factory.mktemp("pipe_videos")
    path = top / "train-0.tar"
    with tarfile.open(path, "w") as tar:
        for k in range(3):
            video = make_clip(top / f"v{k}.mp4", 70 * k)
            (top / f"v{k}.cls").write_text(str(k))
            tar.add(video, arcname=video.name)
            tar.add(top / f"v{k}.cls", arcname=f"v{k}.cls")
    return path


def copies(cache: Path) -> list:
    folder = cache / SPOOL_FOLDER
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def batches(dataset, **kwargs) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # natively batched: no fallback warning
        loader = rl.DataLoader(dataset, batch_size=2, generator=torch.Generator().manual_seed(5), **kwargs)
        return [(clip.clone(), target.clone()) for clip, target in loader]


def test_a_pipe_shard_gives_the_local_shards_samples_and_batches(tmp_path: Path, shard: Path):
    local = rl.VideoShards(str(shard), clip=SAMPLER, transform=CHAIN)
    piped = rl.VideoShards(f"pipe:cat {shard}", clip=SAMPLER, transform=CHAIN, cache_dir=str(tmp_path))
    assert piped.urls == [f"pipe:cat {shard}"] and piped.url_pipes == [True]
    assert [s[1:] for s in piped.samples] == [s[1:] for s in local.samples]
    assert piped.targets == local.targets == [0, 1, 2] and piped.classes == local.classes
    assert len(copies(tmp_path)) == 2 and piped.shard_paths[0].startswith(str(tmp_path / SPOOL_FOLDER))
    for kwargs in ({"shuffle": True}, {"shuffle": True, "num_workers": 2}):
        ours, theirs = batches(piped, **kwargs), batches(local, **kwargs)
        assert len(ours) == 2
        for (a, y), (b, z) in zip(ours, theirs):
            assert torch.equal(a, b) and torch.equal(y, z)
    ref, target = piped[1]
    assert ref.name == f"pipe:cat {shard}:v1.mp4" and target == 1
    torch.manual_seed(0)  # decode() draws its clip with torch's global generator
    clip = ref.decode()
    torch.manual_seed(0)
    assert torch.equal(clip, local[1][0].decode())


def test_the_copy_goes_with_its_dataset_and_its_references_never_with_a_forked_childs(
        tmp_path: Path, shard: Path):
    ds = rl.VideoShards(f"pipe:cat {shard} {shard}", clip=[0, 1], cache_dir=str(tmp_path))
    assert len(ds) == 3  # tar readers stop at the first end-of-archive, as the stream's does
    path = ds.shard_paths[0]
    child = multiprocessing.get_context("fork").Process(target=gc.collect)  # the child's copy dies
    child.start()
    child.join()
    assert child.exitcode == 0 and os.path.isfile(path)
    ref, _ = ds[2]
    del ds
    gc.collect()
    assert os.path.isfile(path) and ref.decode().shape == (2, 3, 24, 32)  # a reference keeps it
    del ref
    gc.collect()
    assert not os.path.exists(path) and copies(tmp_path) == []


def test_an_unpickled_dataset_whose_copy_is_gone_runs_the_command_again(tmp_path: Path, shard: Path):
    stream = tmp_path / "stream.tar"
    shutil.copy(shard, stream)
    ds = rl.VideoShards([f"pipe:cat {stream}", f"pipe:cat {stream}"], clip=[0, 1], cache_dir=str(tmp_path))
    assert len(copies(tmp_path)) == 2 and len(ds) == 6  # one copy for the URL given twice, and its lock
    blob = pickle.dumps(ds)
    alive = pickle.loads(blob)  # the maker's copy still there: read in place, no command run
    assert alive.shard_paths == ds.shard_paths
    first = ds[4][0].decode()
    del ds, alive
    gc.collect()
    assert copies(tmp_path) == []
    again = pickle.loads(blob)  # gone: run again, and the same samples found
    assert os.path.isfile(again.shard_paths[0]) and again.shard_paths[0] == again.shard_paths[1]
    assert torch.equal(again[4][0].decode(), first)
    with tarfile.open(stream, "w") as tar:  # the stream now gives other bytes
        tar.add(shard, arcname="not-a-video.bin")
    del again
    gc.collect()
    with pytest.raises(rl.StaleIndexError, match=rf"VideoShards shard pipe:cat {stream}: its copy was gone"):
        pickle.loads(blob)


def test_a_dead_processs_copies_are_removed_by_the_next_construction_a_live_ones_never(
        tmp_path: Path, shard: Path):
    folder = tmp_path / SPOOL_FOLDER
    folder.mkdir()
    for group in ("spool-dead", "spool-live"):
        (folder / f"{group}.lock").write_bytes(b"")
        (folder / f"{group}-0.tar").write_bytes(b"x" * 10)
    (folder / "spool-orphan-0.tar").write_bytes(b"x" * 10)  # its group's lock file is gone
    (folder / "notes.txt").write_text("not a copy")
    # The live group's lock held by another process (of another PID namespace, say: only the
    # lock tells, never a process id).
    holder = subprocess.Popen(["flock", "-s", str(folder / "spool-live.lock"), "sleep", "30"])
    try:
        for _ in range(100):
            if subprocess.run(["flock", "-n", "-x", str(folder / "spool-live.lock"), "true"]).returncode:
                break  # held now
            time.sleep(0.05)
        ds = rl.VideoShards(f"pipe:cat {shard}", cache_dir=str(tmp_path))
        left = set(copies(tmp_path))
        assert {"spool-live.lock", "spool-live-0.tar", "notes.txt"} <= left
        assert not {"spool-dead.lock", "spool-dead-0.tar", "spool-orphan-0.tar"} & left
        assert len(ds) == 3 and len(left) == 5  # and this dataset's lock and copy
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("command, message", [
    ("cat /nonexistent/train-9.tar", r"exited with status 1: cat: /nonexistent/train-9.tar: No such file"),
    ("echo partial; echo boom >&2; exit 3", r"exited with status 3: boom"),
    ("kill -9 $$", r"was killed by signal 9 \(no stderr\)"),
])
def test_a_failing_command_names_itself_its_status_and_its_stderr(tmp_path: Path, command: str, message: str):
    with pytest.raises(RuntimeError, match=rf"VideoShards: the command of 'pipe:{re.escape(command)}' {message}"):
        rl.VideoShards(f"pipe:{command}", cache_dir=str(tmp_path))
    assert copies(tmp_path) == []  # nothing left behind


def test_a_command_with_no_samples_and_a_cut_stream(tmp_path: Path, shard: Path):
    with pytest.raises(ValueError, match=r"the shards hold no samples \('pipe:true'\)"):
        rl.VideoShards("pipe:true", cache_dir=str(tmp_path))
    with tarfile.open(shard) as tar:
        member = tar.getmember("v2.mp4")
    cut = member.offset_data + member.size // 2  # the stream ends inside v2.mp4's data
    ds = rl.VideoShards(f"pipe:head -c {cut} {shard}", cache_dir=str(tmp_path))
    assert [s[5] for s in ds.samples[:2]] == ["", ""] and len(ds) == 3
    with pytest.raises(ValueError, match=r"VideoShards\[2\]: .*truncated: member 'v2.mp4'"):
        ds[2]


def test_cache_limit_bounds_the_copies(tmp_path: Path, shard: Path):
    size = shard.stat().st_size
    ds = rl.VideoShards(f"pipe:cat {shard}", cache_dir=str(tmp_path), cache_limit=size)
    assert len(ds) == 3
    with pytest.raises(ValueError, match=rf"'pipe:cat {shard}' streams more than cache_limit allows "
                                         rf"\({int(1.5 * size)} bytes"):
        rl.VideoShards([f"pipe:cat < {shard}", f"pipe:cat {shard}"], cache_dir=str(tmp_path),
                       cache_limit=int(1.5 * size))  # each fits, both do not
    gc.collect()
    assert len(copies(tmp_path)) == 2  # the first dataset's copy and lock; the refused one's are gone
    with pytest.raises(ValueError, match="cache_limit"):
        rl.VideoShards(f"pipe:cat {shard}", cache_dir=str(tmp_path), cache_limit="lots")


def test_a_copy_that_cannot_be_written_names_the_shard_and_the_folder(tmp_path: Path, shard: Path):
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match=rf"VideoShards: cannot write the stream of 'pipe:cat "
                                                 rf"{shard}' under {tmp_path}/file/pipe-spools \(cache_dir\)"):
        rl.VideoShards(f"pipe:cat {shard}", cache_dir=str(tmp_path / "file"))
    with pytest.raises(FileNotFoundError, match="'missing.tar' does not exist"):  # before any command
        rl.VideoShards([f"pipe:cat {shard}", "missing.tar"], cache_dir=str(tmp_path / "c"))
    assert not (tmp_path / "c").exists()


def test_a_copy_changed_after_indexing_is_stale(tmp_path: Path, shard: Path):
    ds = rl.VideoShards(f"pipe:cat {shard}", clip=[0, 1], cache_dir=str(tmp_path))
    ref, _ = ds[0]
    with open(ds.shard_paths[0], "ab") as copy:
        copy.write(b"\0" * 512)
    with pytest.raises(rl.StaleIndexError, match=rf"VideoShards shard pipe:cat {shard} changed size"):
        ds[0]
    with pytest.raises(rl.StaleIndexError, match="pipe:cat"):
        ref.decode()


def test_a_path_named_like_a_command_is_never_run(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        rl.VideoShards(Path("pipe:touch ran"), cache_dir=str(tmp_path))
    assert not (tmp_path / "ran").exists() and copies(tmp_path) == []
