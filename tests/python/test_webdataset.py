"""ringloader.WebDataset: shards written by the webdataset package, GNU tar and ringloader.pack,
read natively; epoch order across ranks; resume; pipe: streams; bad shards."""

from __future__ import annotations

import functools
import http.server
import io
import json
import os
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import ringloader as rl
from ringloader.core import _order
from ringloader import transforms as T
from ringloader.sources.webdataset import WebDatasetSampler, expand_urls, split_name

wds = pytest.importorskip("webdataset")


TRANSFORM = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])


def _tree_samples(root: Path):
    """(path, label) of an ImageFolder tree in torchvision's order."""
    return rl.ImageFolder(str(root)).samples


def _write_wds(root: Path, out: Path, per_shard: int, label_of=None, ext_of=None) -> str:
    """Shards by webdataset.ShardWriter; returns the brace pattern naming them."""
    out.mkdir(parents=True, exist_ok=True)
    samples = _tree_samples(root)
    with wds.ShardWriter(str(out / "part-%04d.tar"), maxcount=per_shard, verbose=0) as sink:
        for i, (path, label) in enumerate(samples):
            record = {"__key__": f"sample{i:05d}", "jpg": Path(path).read_bytes()}
            record.update(label_of(i, label) if label_of else {"cls": label})
            sink.write(record)
    count = -(-len(samples) // per_shard)
    return str(out / f"part-{{0000..{count - 1:04d}}}.tar")


def _write_gnu(root: Path, out: Path, fmt: str) -> str:
    """One shard by GNU tar with member names longer than 100 characters."""
    stage = out / f"stage-{fmt}"
    deep = stage / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    names = []
    for i, (path, label) in enumerate(_tree_samples(root)):
        key = f"{'k' * 50}_{i:04d}"
        (deep / f"{key}.jpg").write_bytes(Path(path).read_bytes())
        (deep / f"{key}.cls").write_text(str(label))
        names += [str((deep / f"{key}.jpg").relative_to(stage)),
                  str((deep / f"{key}.cls").relative_to(stage))]
    shard = out / f"gnu-{fmt}.tar"
    subprocess.run(["tar", f"--format={fmt}", "-cf", str(shard), "-C", str(stage), *names],
                   check=True)
    return str(shard)


def _batches(loader):
    return [(images.clone(), labels.clone()) for images, labels in loader]


def _labels(loader):
    return [int(v) for _, labels in loader for v in labels]


# ---- URLs and grouping ------------------------------------------------------------------------

def test_expand_urls_braces_globs_and_streams(tmp_path):
    assert expand_urls("a-{000..002}.tar") == ["a-000.tar", "a-001.tar", "a-002.tar"]
    assert expand_urls("a-{8..10}.tar") == ["a-8.tar", "a-9.tar", "a-10.tar"]
    assert expand_urls(["{x,y}-{0..1}"]) == ["x-0", "x-1", "y-0", "y-1"]
    # What the shell reads as it is stays: ${VAR}, a group without a comma or a range.
    assert expand_urls("pipe:cat ${P}{0..1}.tar") == ["pipe:cat ${P}0.tar", "pipe:cat ${P}1.tar"]
    assert expand_urls("pipe:cat ${D:-/data}/s-{a,b}.tar | awk '{print}' | xargs -I{} cat {}") == [
        "pipe:cat ${D:-/data}/s-a.tar | awk '{print}' | xargs -I{} cat {}",
        "pipe:cat ${D:-/data}/s-b.tar | awk '{print}' | xargs -I{} cat {}"]
    assert expand_urls("file:///data/s.tar") == ["/data/s.tar"]
    assert expand_urls("pipe:curl -s http://h/s-{0..1}.tar") == [
        "pipe:curl -s http://h/s-0.tar", "pipe:curl -s http://h/s-1.tar"]
    for name in ("b.tar", "a.tar"):
        (tmp_path / name).write_bytes(b"")
    assert expand_urls(str(tmp_path / "*.tar")) == [str(tmp_path / "a.tar"),
                                                     str(tmp_path / "b.tar")]
    with pytest.raises(FileNotFoundError, match="matches no file"):
        expand_urls(str(tmp_path / "*.zip"))
    assert expand_urls("http://host/a-{0..1}.tar") == ["http://host/a-0.tar", "http://host/a-1.tar"]
    with pytest.raises(ValueError, match="only local paths"):
        expand_urls("ftp://host/a.tar")
    with pytest.raises(ValueError, match="no shard"):
        expand_urls([])
    with pytest.raises(TypeError, match="strings"):
        expand_urls([3])


def test_member_grouping_follows_webdataset():
    assert split_name("dir/a.b/n01_10026.seg.png") == ("dir/a.b/n01_10026", "seg.png")
    assert split_name("x.jpg") == ("x", "jpg")
    assert split_name("dir/noext") is None
    assert split_name(".hidden") is None
    # One rule with the native grouping: top-level metadata entries are no sample, extensions
    # compare lower-case.
    assert split_name("__meta.v1__") is None
    assert split_name("sub/__meta.v1__") == ("sub/__meta", "v1__")
    assert split_name("A.JPG") == ("A", "jpg")


# ---- reading shards ---------------------------------------------------------------------------

@pytest.mark.parametrize("writer", ["webdataset", "gnu", "pax"])
def test_index_matches_image_folder(image_tree, tmp_path, writer):
    if writer == "webdataset":
        urls = _write_wds(image_tree, tmp_path / "wds", per_shard=7)
    else:
        urls = _write_gnu(image_tree, tmp_path, writer)
    ds = rl.WebDataset(urls, index_cache=None)
    folder = rl.ImageFolder(str(image_tree))
    assert len(ds) == len(folder)
    assert ds.targets == folder.targets
    assert all(e == "" for e in ds.sample_errors)
    # Each sample's byte range is exactly its image file.
    for i, (path, _) in enumerate(folder.samples):
        with open(ds.samples[i][0], "rb") as f:
            f.seek(int(ds.offsets[i]))
            assert f.read(int(ds.lengths[i])) == Path(path).read_bytes()
    if writer != "webdataset":
        assert len(ds.members[0]) > 100  # a GNU/pax long name, read back whole


@pytest.mark.timeout(120)
@pytest.mark.parametrize("writer", ["webdataset", "gnu", "pax"])
def test_pixels_equal_image_folder(image_tree, tmp_path, writer):
    if writer == "webdataset":
        urls = _write_wds(image_tree, tmp_path / "wds", per_shard=7)
    else:
        urls = _write_gnu(image_tree, tmp_path, writer)
    ds = rl.WebDataset(urls, transform=TRANSFORM, index_cache=None)
    folder = rl.ImageFolder(str(image_tree), transform=TRANSFORM)
    got = _batches(rl.DataLoader(ds, batch_size=5, num_workers=2))
    want = _batches(rl.DataLoader(folder, batch_size=5, num_workers=2))
    assert len(got) == len(want)
    for (gi, gl), (wi, wl) in zip(got, want):
        assert (gi - wi).abs().max().item() == 0  # exact: the same bytes, the same decoder
        assert gl.tolist() == wl.tolist()
    # ds[i] (random access into the tar) equals the ImageFolder's too.
    plain = rl.WebDataset(urls, index_cache=None)
    reference = rl.ImageFolder(str(image_tree))
    for i in (0, len(plain) - 1):
        assert np.array_equal(np.asarray(plain[i][0]), np.asarray(reference[i][0]))
        assert plain[i][1] == reference[i][1]


@pytest.mark.parametrize("label_key", ["cls", "txt", "json"])
def test_labels_from_cls_txt_json(image_tree, tmp_path, label_key):
    def label_of(i, label):
        if label_key == "json":
            return {"json": json.dumps({"name": f"n{i}", "target": label + 10}).encode()}
        return {label_key: str(label + 10).encode()}

    urls = _write_wds(image_tree, tmp_path / label_key, per_shard=10, label_of=label_of)
    ds = rl.WebDataset(urls, label_key=label_key, label_field="target", index_cache=None)
    assert ds.targets == [t + 10 for t in rl.ImageFolder(str(image_tree)).targets]
    assert len(ds.classes) == max(ds.targets) + 1
    with pytest.raises(ValueError, match="label_key"):
        rl.WebDataset(urls, label_key="npy")


def test_bad_samples_are_recorded_with_shard_and_member(tmp_path):
    shard = tmp_path / "bad.tar"
    jpg = Path(__file__).parent  # any bytes: the scan does not decode
    del jpg
    with open(shard, "wb") as f:
        with wds.TarWriter(f) as sink:
            sink.write({"__key__": "good", "jpg": b"\xff\xd8data", "cls": b"1"})
            sink.write({"__key__": "noimage", "txt": b"hello", "cls": b"2"})
            sink.write({"__key__": "badlabel", "jpg": b"\xff\xd8data", "cls": b"cat"})
            sink.write({"__key__": "nolabel", "jpg": b"\xff\xd8data"})
    ds = rl.WebDataset(str(shard), index_cache=None)
    assert ds.keys == ["good", "noimage", "badlabel", "nolabel"]
    errors = ds.sample_errors
    assert errors[0] == ""
    assert str(shard) in errors[1] and "noimage" in errors[1] and "no image" in errors[1]
    assert str(shard) in errors[2] and "badlabel" in errors[2] and "cat" in errors[2]
    assert str(shard) in errors[3] and "nolabel" in errors[3] and ".cls" in errors[3]


def test_truncated_shard_keeps_the_samples_before(image_tree, tmp_path):
    urls = _write_wds(image_tree, tmp_path / "t", per_shard=100)
    shard = expand_urls(urls)[0]
    full = rl.WebDataset(shard, index_cache=None)
    cut = int(full.offsets[10]) + 100  # inside the image of sample 10
    with open(shard, "r+b") as f:
        f.truncate(cut)
    ds = rl.WebDataset(shard, index_cache=None)
    assert ds.keys[:10] == full.keys[:10]
    assert all(e == "" for e in ds.sample_errors[:10])
    assert len(ds) == 11
    assert shard in ds.sample_errors[10] and "truncated" in ds.sample_errors[10]
    assert "sample00010" in ds.sample_errors[10]


def test_missing_shard_and_empty_shards(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.tar"):
        rl.WebDataset(str(tmp_path / "nope.tar"), index_cache=None)
    empty = tmp_path / "empty.tar"
    with tarfile.open(empty, "w"):
        pass
    with pytest.raises(ValueError, match="no samples"):
        rl.WebDataset(str(empty), index_cache=None)


def test_pack_sidecar_is_used_when_its_size_matches(image_tree, tmp_path):
    from ringloader.pack import pack

    pack(str(image_tree), str(tmp_path / "p"), shard_size=10**9, progress_stream=io.StringIO())
    shard = str(tmp_path / "p" / "shard-000000.tar")
    sidecar = Path(shard + ".idx.json")
    data = json.loads(sidecar.read_text())
    data["samples"][0][4] = 3  # a label only the sidecar says: proves the sidecar was read
    sidecar.write_text(json.dumps(data))
    assert rl.WebDataset(shard, index_cache=None).targets[0] == 3
    data["bytes"] += 1  # stale: the shard is scanned instead
    sidecar.write_text(json.dumps(data))
    assert rl.WebDataset(shard, index_cache=None).targets[0] == 0
    assert rl.WebDataset(shard, index_cache=None).classes == sorted(
        p.name for p in image_tree.iterdir())


def test_pickle_and_repr(image_tree, tmp_path):
    import pickle

    urls = _write_wds(image_tree, tmp_path / "w", per_shard=10)
    ds = rl.WebDataset(urls, transform=TRANSFORM, index_cache=None)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.targets == ds.targets and copy.urls == ds.urls
    assert np.array_equal(copy.offsets, ds.offsets)
    assert "shards=3" in repr(ds)


# ---- epoch order ------------------------------------------------------------------------------

class _FakeShards:
    shuffle_buffer = 5

    def __init__(self, sizes):
        self.shard_sizes = np.asarray(sizes)


def _rank_orders(sizes, world, **kw):
    return [WebDatasetSampler(_FakeShards(sizes), world, r, **kw).indices() for r in range(world)]


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_every_sample_once_per_epoch_across_ranks(world, drop_last):
    sizes = [7, 3, 9, 1, 6]
    n = sum(sizes)
    orders = _rank_orders(sizes, world, shuffle=True, seed=5, drop_last=drop_last)
    lengths = {len(o) for o in orders}
    assert lengths == {n // world if drop_last else -(-n // world)}  # same count on every rank
    seen = [i for o in orders for i in o]
    if drop_last:
        assert len(set(seen)) == len(seen) == (n // world) * world
    else:
        assert set(seen) == set(range(n))
        assert len(seen) - n == -(-n // world) * world - n  # only the documented padding


def test_order_is_seeded_by_seed_and_epoch_and_shuffles_shards_and_buffer():
    sizes = [20, 20, 20, 20]
    a = WebDatasetSampler(_FakeShards(sizes), shuffle=True, seed=1)
    first = a.indices()
    assert first == WebDatasetSampler(_FakeShards(sizes), shuffle=True, seed=1).indices()
    a.set_epoch(1)
    assert a.indices() != first
    assert WebDatasetSampler(_FakeShards(sizes), shuffle=True, seed=2).indices() != first
    assert sorted(first) == list(range(80)) and first != list(range(80))
    # The buffer moves a sample at most shuffle_buffer places ahead of its turn; shards stay
    # nearly contiguous.
    position = {s: p for p, s in enumerate(first)}
    shard_order = [first[0] // 20]
    for s in first:
        if s // 20 not in shard_order:
            shard_order.append(s // 20)
    sequence = [i for sh in shard_order for i in range(sh * 20, sh * 20 + 20)]
    assert all(position[s] >= q - 5 for q, s in enumerate(sequence))
    assert WebDatasetSampler(_FakeShards(sizes)).indices() == list(range(80))


def _plan(sizes, world, rank, batch_size, **kw):
    import torch.utils.data as tud

    sampler = WebDatasetSampler(_FakeShards(sizes), world, rank, **kw)
    return tud.BatchSampler(sampler, batch_size, False)


@pytest.mark.parametrize("old_world,new_world", [(2, 3), (3, 1), (1, 4), (4, 2)])
def test_resharded_epoch_delivers_the_rest_once(old_world, new_world):
    sizes, bs, delivered = [11, 5, 8, 13], 3, 2
    n = sum(sizes)
    seen = []
    states = []
    for r in range(old_world):
        plan = _order.plan_epoch(_plan(sizes, old_world, r, bs, shuffle=True, seed=9), n)
        seen += [i for b in plan.batches[:delivered] for i in b]
        states.append(plan.sampler_state)
    rest = []
    for r in range(new_world):
        new = _order.reshard(states[r % old_world], delivered, r, new_world, bs, False)
        batches = _order.replay_epoch(new, _plan(sizes, new_world, r, bs), n)
        rest.append([i for b in batches for i in b])
    assert len({len(x) for x in rest}) == 1  # every new rank: the same count
    flat = [i for x in rest for i in x]
    assert set(seen) | set(flat) == set(range(n))
    # Exactly once, up to the padding of each layout (fewer than its world size).
    assert len(seen) + len(flat) - n < old_world + new_world
    assert not set(flat) & (set(seen) - set(flat[len(flat) - new_world:]))


def test_resharded_twice_and_checkpoint_is_integers():
    sizes, bs = [9, 9, 9], 2
    n = sum(sizes)
    state = _order.plan_epoch(_plan(sizes, 2, 0, bs, shuffle=True, seed=1), n).sampler_state
    json.dumps(state)  # integers and flags only
    once = _order.reshard(state, 3, 0, 3, bs, False)
    twice = _order.reshard(once, 1, 0, 2, bs, False)
    json.dumps(twice)
    first_seen = [i for r in range(2) for b in _order.replay_epoch(
        dict(state, rank=r), _plan(sizes, 2, r, bs), n)[:3] for i in b]
    second_seen = [i for r in range(3) for b in _order.replay_epoch(
        dict(once, rank=r), _plan(sizes, 3, r, bs), n)[:1] for i in b]
    last = [i for r in range(2) for b in _order.replay_epoch(
        dict(twice, rank=r), _plan(sizes, 2, r, bs), n) for i in b]
    assert set(first_seen) | set(second_seen) | set(last) == set(range(n))
    assert len(first_seen) + len(second_seen) + len(last) - n < 2 + 3 + 2


# ---- through the DataLoader -------------------------------------------------------------------

@pytest.fixture()
def unique_shards(unique_tree, tmp_path):
    """24 samples in 5 shards, label = sample number."""
    return _write_wds(unique_tree, tmp_path / "u", per_shard=5)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_loader_ranks_exactly_once_and_equal_batches(unique_shards, world, drop_last):
    # Shards 1-4: 19 samples (labels 5..23), uneven for every world size > 1.
    ds = rl.WebDataset(expand_urls(unique_shards)[1:], transform=TRANSFORM, shuffle_buffer=4,
                       index_cache=None)
    n = len(ds)
    assert n == 19
    per_rank = []
    for r in range(world):
        loader = rl.DataLoader(ds, batch_size=2, shuffle=True, rank=r, world_size=world, seed=3,
                               drop_last=drop_last)
        per_rank.append([labels.tolist() for _, labels in loader])
        assert len(per_rank[-1]) == len(loader)
    assert len({len(b) for b in per_rank}) == 1  # every rank: the same number of batches
    seen = [v for batches in per_rank for b in batches for v in b]
    if drop_last:
        assert len(set(seen)) == len(seen)  # nothing twice
        assert len(seen) == (n // world) // 2 * 2 * world
    else:
        assert set(seen) == set(range(5, 24)) and len(seen) == -(-n // world) * world


@pytest.mark.timeout(120)
def test_loader_order_independent_of_num_workers(unique_shards):
    ds = rl.WebDataset(unique_shards, transform=T.Compose([T.RandomResizedCrop(24), T.ToTensor()]),
                       index_cache=None)
    runs = []
    for workers in (1, 3):
        loader = rl.DataLoader(ds, batch_size=4, shuffle=True, num_workers=workers,
                               generator=__import__("torch").Generator().manual_seed(7))
        runs.append(_batches(loader) + _batches(loader))  # two epochs
    for (ai, al), (bi, bl) in zip(*runs):
        assert al.tolist() == bl.tolist()
        assert (ai - bi).abs().max().item() == 0
    assert [b[1].tolist() for b in runs[0][:6]] != [b[1].tolist() for b in runs[0][6:]]


@pytest.mark.timeout(120)
def test_next_epoch_read_ahead_for_local_shards_only(unique_shards, tmp_path):
    """Local shards: the loader's next epoch (its own order, epoch + 1) is queued and adopted, and
    equals a loader that drains between epochs. pipe: shards are never read ahead."""
    import torch

    transform = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor()])
    ds = rl.WebDataset(unique_shards, transform=transform, shuffle_buffer=4, index_cache=None)
    runs = {}
    for overlap in (None, False):
        loader = rl.DataLoader(ds, batch_size=4, shuffle=True, seed=5, persistent_workers=overlap,
                               generator=torch.Generator().manual_seed(5))
        runs[overlap] = [_batches(loader) for _ in range(3)]
        if overlap is None:
            assert loader.stats()["epochs_adopted"] == 2
    for ahead, drained in zip(runs[None], runs[False]):
        assert [l.tolist() for _, l in ahead] == [l.tolist() for _, l in drained]
        assert all((a - b).abs().max().item() == 0 for (a, _), (b, _) in zip(ahead, drained))
    assert [l.tolist() for _, l in runs[None][0]] != [l.tolist() for _, l in runs[None][1]]

    piped = [f"pipe:cat {u}" for u in expand_urls(unique_shards)]
    stream = rl.WebDataset(piped, transform=transform, shuffle_buffer=4,
                           index_cache=str(tmp_path / "cache"))
    loader = rl.DataLoader(stream, batch_size=4, shuffle=True, seed=5,
                           generator=torch.Generator().manual_seed(5))
    first, second = _batches(loader), _batches(loader)
    assert loader.stats()["epochs_adopted"] == 0
    assert [l.tolist() for _, l in first] == [l.tolist() for _, l in runs[False][0]]
    assert [l.tolist() for _, l in second] == [l.tolist() for _, l in runs[False][1]]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stream", [False, True])
def test_loader_resume_bit_identical(unique_shards, tmp_path, stream):
    import torch

    urls = [f"pipe:cat {u}" if stream else u for u in expand_urls(unique_shards)]
    ds = rl.WebDataset(urls, transform=T.Compose([T.RandomResizedCrop(24), T.ToTensor()]),
                       index_cache=str(tmp_path / "cache"))

    def make():
        return rl.DataLoader(ds, batch_size=3, shuffle=True, rank=1, world_size=2, seed=4)

    torch.manual_seed(0)
    full = _batches(make())
    torch.manual_seed(0)
    loader = make()
    it = iter(loader)
    head = [(i.clone(), l.clone()) for i, l in (next(it), next(it))]
    state = loader.state_dict()
    json.dumps({k: v for k, v in state.items()})
    resumed = make()
    resumed.load_state_dict(state)
    tail = _batches(resumed)
    assert len(head) + len(tail) == len(full)
    for (ai, al), (bi, bl) in zip(head + tail, full):
        assert al.tolist() == bl.tolist() and (ai - bi).abs().max().item() == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("old_world,new_world", [(2, 3), (3, 1)])
def test_loader_resume_onto_another_world_size(unique_shards, old_world, new_world):
    ds = rl.WebDataset(unique_shards, transform=TRANSFORM, shuffle_buffer=3, index_cache=None)
    seen, state = [], None
    for r in range(old_world):
        loader = rl.DataLoader(ds, batch_size=2, shuffle=True, rank=r, world_size=old_world)
        it = iter(loader)
        for _ in range(2):
            seen += next(it)[1].tolist()
        state = loader.state_dict()
    rest = []
    for r in range(new_world):
        loader = rl.DataLoader(ds, batch_size=2, shuffle=True, rank=r, world_size=new_world)
        loader.load_state_dict(state)
        rest.append(_labels(loader))
    assert len({len(x) for x in rest}) == 1
    flat = [v for x in rest for v in x]
    assert set(seen) | set(flat) == set(range(24))
    assert len(seen) + len(flat) - 24 < old_world + new_world


def _halve(image):
    return image / 2


@pytest.mark.timeout(120)
def test_per_sample_transform_takes_the_same_order(unique_shards):
    """A transform with a Python step runs on torch's generic path, in the WebDataset order."""
    import torch.utils.data as tud

    native = rl.WebDataset(unique_shards, transform=TRANSFORM, shuffle_buffer=3, index_cache=None)
    with pytest.warns(UserWarning, match="run per sample"):
        generic = rl.WebDataset(unique_shards, transform=T.Compose([*TRANSFORM.transforms, _halve]),
                                shuffle_buffer=3, index_cache=None)
    kw = dict(batch_size=4, shuffle=True, rank=1, world_size=2, seed=2)
    fast, slow = rl.DataLoader(native, **kw), rl.DataLoader(generic, **kw)
    assert fast.native and not slow.native
    want, got = _batches(fast), _batches(slow)
    assert [l.tolist() for _, l in got] == [l.tolist() for _, l in want]
    for (gi, _), (wi, _) in zip(got, want):
        assert (gi * 2 - wi).abs().max().item() == 0
    # An explicit sampler over local shards: random access works.
    sampler = tud.SequentialSampler(native)
    assert _labels(rl.DataLoader(native, batch_size=5, sampler=sampler)) == list(range(24))


# ---- errors through the loader ----------------------------------------------------------------

@pytest.fixture()
def damaged_shards(unique_tree, tmp_path):
    """Shard 0: a sample without an image and one with a bad label; shard 1 truncated after its
    third sample."""
    samples = _tree_samples(unique_tree)
    first = tmp_path / "d-0.tar"
    with open(first, "wb") as f, wds.TarWriter(f) as sink:
        for i in range(6):
            record = {"__key__": f"s{i:03d}", "jpg": Path(samples[i][0]).read_bytes(), "cls": i}
            if i == 2:
                del record["jpg"]
                record["txt"] = b"caption"
            if i == 4:
                record["cls"] = b"four"
            sink.write(record)
    second = tmp_path / "d-1.tar"
    with open(second, "wb") as f, wds.TarWriter(f) as sink:
        for i in range(6, 12):
            sink.write({"__key__": f"s{i:03d}", "jpg": Path(samples[i][0]).read_bytes(), "cls": i})
    ds = rl.WebDataset(str(second), index_cache=None)
    with open(second, "r+b") as f:
        f.truncate(int(ds.offsets[3]) + 50)
    return str(tmp_path / "d-{0..1}.tar")


@pytest.mark.timeout(60)
def test_errors_skip_replace_raise_name_shard_and_member(damaged_shards):
    ds = rl.WebDataset(damaged_shards, transform=TRANSFORM, index_cache=None)
    assert len(ds) == 6 + 4  # shard 1: three samples, then the truncated one
    good = [0, 1, 3, 5, 6, 7, 8]
    skipped = _labels(rl.DataLoader(ds, batch_size=4, on_error="skip"))
    assert skipped == good
    replaced = rl.DataLoader(ds, batch_size=4, on_error="replace")
    assert [len(l) for _, l in replaced] == [4, 4, 2]
    messages = []
    loader = rl.DataLoader(ds, batch_size=1, on_error="raise")
    it = iter(loader)
    while True:
        try:
            next(it)
        except rl.SampleError as exc:
            messages.append(str(exc))
        except StopIteration:
            break
    assert len(messages) == 3
    assert "d-0.tar" in messages[0] and "s002" in messages[0]
    assert "d-0.tar" in messages[1] and "s004.cls" in messages[1]
    assert "d-1.tar" in messages[2] and "truncated" in messages[2]


@pytest.mark.timeout(60)
def test_vanished_shard_fails_its_samples_only(unique_tree, tmp_path):
    urls = _write_wds(unique_tree, tmp_path / "v", per_shard=12)
    ds = rl.WebDataset(urls, transform=TRANSFORM, index_cache=None)
    os.remove(expand_urls(urls)[1])
    assert _labels(rl.DataLoader(ds, batch_size=5, on_error="skip")) == list(range(12))
    with pytest.raises(rl.SampleError, match=r"part-0001\.tar.*sample00012|sample00012.*part-0001"):
        _labels(rl.DataLoader(ds, batch_size=5))


# ---- pipe: streams ----------------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_pipe_cat_equals_local(image_tree, tmp_path):
    urls = _write_wds(image_tree, tmp_path / "p", per_shard=7)
    local = rl.WebDataset(urls, transform=TRANSFORM, index_cache=None)
    piped = rl.WebDataset([f"pipe:cat {u}" for u in expand_urls(urls)], transform=TRANSFORM,
                          index_cache=str(tmp_path / "cache"))
    assert len(os.listdir(tmp_path / "cache")) == 4  # one index per shard
    assert piped.targets == local.targets
    for shuffle in (False, True):
        loader = rl.DataLoader(piped, batch_size=4, shuffle=shuffle, seed=1)
        got = _batches(loader)
        want = _batches(rl.DataLoader(local, batch_size=4, shuffle=shuffle, seed=1))
        for (gi, gl), (wi, wl) in zip(got, want):
            assert gl.tolist() == wl.tolist() and (gi - wi).abs().max().item() == 0
        assert loader.stats()["stream_restarts"] == 0  # each stream read once, front to back
    with pytest.raises(TypeError, match="pipe: shards cannot be read one at a time"):
        piped[0]
    import torch.utils.data as tud

    with pytest.raises(ValueError, match="front to back"):
        rl.DataLoader(piped, sampler=tud.RandomSampler(piped))


@pytest.mark.timeout(120)
def test_pipe_curl_from_loopback_http(image_tree, tmp_path):
    urls = _write_wds(image_tree, tmp_path / "h", per_shard=12)
    handler = functools.partial(_QuietHandler, directory=str(tmp_path / "h"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        ds = rl.WebDataset(f"pipe:curl -s -f http://127.0.0.1:{port}/part-{{0000..0001}}.tar",
                           transform=TRANSFORM, index_cache=str(tmp_path / "cache"))
        local = rl.WebDataset(urls, transform=TRANSFORM, index_cache=None)
        got = _batches(rl.DataLoader(ds, batch_size=6, shuffle=True))
        want = _batches(rl.DataLoader(local, batch_size=6, shuffle=True))
        for (gi, gl), (wi, wl) in zip(got, want):
            assert gl.tolist() == wl.tolist() and (gi - wi).abs().max().item() == 0
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_pipe_index_cache_and_refusals(image_tree, tmp_path):
    import torch.utils.data as tud

    urls = expand_urls(_write_wds(image_tree, tmp_path / "c", per_shard=12))
    piped_urls = [f"pipe:cat {u}" for u in urls]
    cache = tmp_path / "cache"
    piped = rl.WebDataset(piped_urls, transform=TRANSFORM, index_cache=str(cache))
    local = rl.WebDataset(urls, index_cache=None)
    assert piped.targets == local.targets and piped.keys == local.keys
    assert np.array_equal(piped.offsets, local.offsets)
    assert len(list(cache.iterdir())) == 2
    for u in urls:
        os.rename(u, u + ".moved")  # the cached index is used: the streams are not read
    again = rl.WebDataset(piped_urls, transform=TRANSFORM, index_cache=str(cache))
    assert again.targets == local.targets
    with pytest.raises(TypeError, match="pipe: shards cannot be read one at a time"):
        piped[0]
    with pytest.raises(ValueError, match="front to back"):
        rl.DataLoader(piped, sampler=tud.RandomSampler(piped))
    with pytest.raises(ValueError, match="only the WebDataset itself"):
        rl.DataLoader(tud.Subset(piped, [0, 1]))
    with pytest.warns(UserWarning, match="run per sample"):
        per_sample = rl.WebDataset(piped_urls, transform=T.Compose([T.ToTensor(), lambda x: x]),
                                   index_cache=str(cache))
    with pytest.raises(ValueError, match="runs per sample"):
        rl.DataLoader(per_sample, batch_size=2)
    # A damaged cache file is not an index: the shard is read again and the cache rewritten.
    for u in urls:
        os.rename(u + ".moved", u)
    for f in cache.iterdir():
        f.write_text("{not json")
    rebuilt = rl.WebDataset(piped_urls, transform=TRANSFORM, index_cache=str(cache))
    assert rebuilt.targets == local.targets and np.array_equal(rebuilt.offsets, local.offsets)
    assert all(json.loads(f.read_text())["samples"] for f in cache.iterdir())


def test_pipe_command_failing_at_index_time_names_it(tmp_path):
    with pytest.raises(RuntimeError, match=r"pipe:false"):
        rl.WebDataset("pipe:false", index_cache=str(tmp_path / "c"))


@pytest.mark.timeout(60)
def test_pipe_command_failing_at_load_time_is_a_sample_error(unique_tree, tmp_path):
    urls = _write_wds(unique_tree, tmp_path / "f", per_shard=12)
    shards = expand_urls(urls)
    ds = rl.WebDataset([f"pipe:cat {s}" for s in shards], transform=TRANSFORM,
                       index_cache=str(tmp_path / "cache"))
    os.remove(shards[0])  # cat now exits 1 for shard 0
    assert _labels(rl.DataLoader(ds, batch_size=5, on_error="skip")) == list(range(12, 24))
    with pytest.raises(rl.SampleError, match="part-0000"):
        _labels(rl.DataLoader(ds, batch_size=5))


@pytest.mark.timeout(60)
def test_pipe_shards_index_concurrently_like_one_at_a_time(image_tree, tmp_path, capsys,
                                                           monkeypatch):
    from ringloader.sources import webdataset as wd

    monkeypatch.delenv(wd.PROGRESS_ENV, raising=False)
    shards = expand_urls(_write_wds(image_tree, tmp_path / "s", per_shard=3))  # 8 shards
    slow = [f"pipe:sleep 0.3; cat {s}" for s in shards]
    fields = ("keys", "members", "offsets", "lengths", "targets", "sample_errors", "shard_sizes")

    monkeypatch.setattr(wd, "INDEX_THREADS", 1)  # one at a time: the reference
    start = time.monotonic()
    one = rl.WebDataset(slow, index_cache=None, progress=False)
    sequential = time.monotonic() - start
    assert sequential >= 0.3 * len(shards)
    monkeypatch.setattr(wd, "INDEX_THREADS", 8)
    start = time.monotonic()
    many = rl.WebDataset(slow, index_cache=None, progress=False)
    assert time.monotonic() - start < sequential / 2
    for field in fields:
        assert np.array_equal(np.asarray(getattr(one, field), dtype=object),
                              np.asarray(getattr(many, field), dtype=object)), field
    assert many.targets == one.targets and many.urls == one.urls
    assert capsys.readouterr().err == ""  # progress=False: silent

    # Default: nothing for a quick construction; past PROGRESS_AFTER_S a line per second at most
    # off a terminal and one at the end; RINGLOADER_PROGRESS=0 silences it.
    rl.WebDataset(shards, index_cache=None)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(wd, "PROGRESS_AFTER_S", 0.2)
    rl.WebDataset(slow, index_cache=None)
    err = capsys.readouterr().err.splitlines()
    assert err and err[-1].startswith(
        f"ringloader.WebDataset: indexed {len(shards)}/{len(shards)} shards "
        f"({len(shards)} streamed from pipe:)")
    monkeypatch.setenv(wd.PROGRESS_ENV, "0")
    rl.WebDataset(slow, index_cache=None)
    assert capsys.readouterr().err == ""
    rl.WebDataset(shards, index_cache=None, progress=True)  # asked for: shown even when quick
    assert f"indexed {len(shards)}/{len(shards)} shards (0 streamed" in capsys.readouterr().err
    with pytest.raises(ValueError, match="progress must be None, True or False"):
        rl.WebDataset(shards, index_cache=None, progress="yes")


def test_concurrent_indexing_raises_the_first_failing_shard_in_order(image_tree, tmp_path):
    shards = expand_urls(_write_wds(image_tree, tmp_path / "s", per_shard=6))
    urls = [f"pipe:cat {s}" for s in shards]
    urls[1] = "pipe:sleep 0.3; false"  # fails last in time, first in order
    urls[3] = "pipe:false"
    with pytest.raises(RuntimeError, match=r"pipe:sleep 0\.3; false"):
        rl.WebDataset(urls, index_cache=None, progress=False)
