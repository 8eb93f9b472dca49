"""``rl.Parquet(copy=False)``: row groups read as the epoch needs them, a few ahead within a
byte budget, each once an epoch, without an Arrow copy; the order is the row groups permuted
and a shuffle buffer (the WebDataset order over row groups), sharded by rank, resumable."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.utils.data as tud
import torchvision.transforms as v1

import ringloader as rl
from imagegen import write_tree
from test_hf_parquet import PeakAnonymous, write_big_parquet, write_parquet

SMALL = v1.Compose([v1.Resize(20), v1.CenterCrop(16), v1.ToTensor()])
RANDOM = v1.Compose([v1.RandomResizedCrop(12), v1.RandomHorizontalFlip(), v1.ToTensor()])


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> list:
    root = write_tree(tmp_path_factory.mktemp("pq"), num_classes=2, per_class=11, seed=5)
    return [(p.read_bytes(), None) for p in sorted(root.rglob("*.jpg"))]


@pytest.fixture()
def two_files(rows, tmp_path) -> Path:
    """22 rows: a.parquet (12 rows, struct {bytes, path}, groups of 4) then b.parquet (10 rows,
    plain binary, groups of 3): 3 + 4 = 7 row groups."""
    write_parquet(tmp_path / "a.parquet", rows[:12], group=4, struct=True)
    write_parquet(tmp_path / "b.parquet", rows[12:], group=3, struct=False)
    return tmp_path


def on_demand(folder: Path, **kwargs) -> rl.Parquet:
    return rl.Parquet(str(folder / "*.parquet"), transform=kwargs.pop("transform", SMALL),
                      cache_dir=folder / "cache", copy=False, **kwargs)


def labels(loader) -> list:
    return [int(v) for batch in loader for v in batch[1]]


def row_groups_read(loader) -> int:
    return loader.stats()["row_groups_read"]


def test_pixels_equal_the_copy_and_no_copy_is_written(two_files):
    ds = on_demand(two_files, columns=["id"])
    copy = rl.Parquet(str(two_files / "*.parquet"), transform=SMALL, columns=["id"],
                      cache_dir=two_files / "copy-cache")
    assert len(ds) == len(copy) == 22 and ds.shard_sizes == [4, 4, 4, 3, 3, 3, 1]
    assert copy.shard_sizes is None
    assert not (two_files / "cache").exists()  # nothing converted
    loader = rl.DataLoader(ds, batch_size=5)
    got = {name: image for images, _, ids in loader for image, name in zip(images, ids)}
    want = {name: image for images, _, ids in rl.DataLoader(copy, batch_size=22)
            for image, name in zip(images, ids)}
    assert sorted(got) == sorted(want) and len(got) == 22
    for name in want:
        assert (got[name] - want[name]).abs().max().item() == 0, name  # bit-exact with the copy
    assert row_groups_read(loader) == 7
    assert loader.stats()["row_group_bytes_held"] == 0
    # Indexing reads the row's group (no loader needed) and gives the copy's reference; going
    # back to a group read before (random access) is warned about, once.
    image, label, name = ds[13]
    assert (label, name) == copy[13][1:]
    assert torch.equal(rl.materialize(image), rl.materialize(copy[13][0]))
    ds[14], ds[0]  # same group, then another one: nothing to say
    with pytest.warns(UserWarning, match=r"row group 3 read again for ds\[12\].*copy=True"):
        ds[12]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds[1], ds[13]  # said once


def test_shuffled_epochs_read_each_row_group_once_and_every_row_once(two_files):
    ds = on_demand(two_files, transform=RANDOM, shuffle_buffer=6)
    loader = rl.DataLoader(ds, batch_size=4, shuffle=True, seed=3)
    first = labels(loader)
    assert row_groups_read(loader) == 7
    second = labels(loader)
    assert row_groups_read(loader) == 14  # once an epoch, whatever the shuffle
    ids = lambda ls: sorted(ls)  # noqa: E731
    assert ids(first) == ids(second) == sorted(list(range(12)) + list(range(10)))
    assert first != second  # the epoch count reseeds the order
    # The same seed gives the same order (a fresh loader, epoch 0).
    assert labels(rl.DataLoader(on_demand(two_files, transform=RANDOM, shuffle_buffer=6),
                                batch_size=4, shuffle=True, seed=3)) == first


def test_a_set_larger_than_the_budget_holds_a_few_row_groups(tmp_path):
    """80 MB of rows in 1 MB row groups with a 3 MB read-ahead budget and a 32-row shuffle
    buffer: the bytes held never pass the budget, plus the group the readers wait for, plus the
    blocks of rows still in the shuffle buffer (at most twice their bytes: a group's rows left to
    decode move to a block of their own once they are under half of it); each group is read
    once, and the process grows by a fraction of the set (5 MB held at most and 16 MB of
    growth measured, most of it a first loader's fixed cost)."""
    group, count, size = 16, 1280, 64 * 1024
    path = write_big_parquet(tmp_path / "big.parquet", group, count, size)
    budget = 3 << 20
    pa.default_memory_pool().release_unused()
    with PeakAnonymous() as memory:
        ds = rl.Parquet(path, transform=v1.Compose([v1.RandomResizedCrop(8), v1.ToTensor()]),
                        copy=False, read_ahead_bytes=budget, shuffle_buffer=32)
        loader = rl.DataLoader(ds, batch_size=32, shuffle=True, num_workers=2)
        got = labels(loader)
    s = loader.stats()
    assert sorted(got) == list(range(count)) and got != sorted(got)
    assert s["row_groups_read"] == count // group
    buffered = 2 * 32 * size
    assert s["row_group_bytes_peak"] <= budget + group * size + buffered, s["row_group_bytes_peak"]
    assert s["row_group_compactions"] > 0
    assert s["row_group_bytes_held"] == 0
    assert memory.growth < count * size // 3, f"grew by {memory.growth >> 20} MB"
    assert not (tmp_path / "cache").exists()


def test_ranks_read_their_own_row_groups_and_every_row_once(two_files):
    ds = on_demand(two_files)
    seen, reads = [], []
    for rank in range(2):
        loader = rl.DataLoader(ds, batch_size=3, shuffle=True, seed=9, rank=rank, world_size=2)
        seen += labels(loader)
        reads.append(row_groups_read(loader))
    assert sorted(seen) == sorted(list(range(12)) + list(range(10)))
    assert sum(reads) <= 7 + 1  # a rank reads the groups of its part (one may straddle)


def test_resume_mid_epoch_reads_only_what_is_left(two_files):
    ds = on_demand(two_files, transform=RANDOM)
    loader = rl.DataLoader(ds, batch_size=4, shuffle=True, seed=1)
    it = iter(loader)
    head = [int(v) for _ in range(2) for v in next(it)[1]]
    state = loader.state_dict()
    del it
    again = rl.DataLoader(on_demand(two_files, transform=RANDOM), batch_size=4, shuffle=True,
                          seed=1)
    again.load_state_dict(state)
    tail = labels(again)
    whole = labels(rl.DataLoader(on_demand(two_files, transform=RANDOM), batch_size=4,
                                 shuffle=True, seed=1))
    assert head + tail == whole


@pytest.mark.parametrize("old_world,new_world", [(2, 3), (3, 1)])
def test_resume_onto_another_world_size_reads_the_rest_once(two_files, old_world, new_world):
    ds = on_demand(two_files, columns=["id"])
    seen, states = set(), []
    for rank in range(old_world):
        loader = rl.DataLoader(ds, batch_size=2, shuffle=True, rank=rank, world_size=old_world,
                               seed=5)
        it = iter(loader)
        seen.update(name for _ in range(2) for name in next(it)[2])
        states.append(loader.state_dict())
        del it
    remaining, counts = [], set()
    for rank in range(new_world):
        loader = rl.DataLoader(ds, batch_size=2, shuffle=True, rank=rank, world_size=new_world,
                               seed=5)
        loader.load_state_dict(states[0])
        got = [name for batch in loader for name in batch[2]]
        counts.add(len(got))
        remaining += got
    every = {f"a-{i}" for i in range(12)} | {f"b-{i}" for i in range(10)}
    assert len(counts) == 1 and set(remaining) | seen == every
    assert not set(remaining) & seen
    assert len(remaining) - len(set(remaining)) < new_world  # padding only


def test_abandoned_epochs_start_afresh_without_hanging(two_files):
    ds = on_demand(two_files)
    loader = rl.DataLoader(ds, batch_size=2, shuffle=True, timeout=30)
    for _ in range(3):
        it = iter(loader)
        next(it)  # then dropped: the next iter() plans again
    assert sorted(labels(loader)) == sorted(list(range(12)) + list(range(10)))
    assert loader.stats()["row_group_bytes_held"] == 0


def test_two_loaders_over_one_dataset_feed_apart(two_files):
    """A train and an eval loader over the same dataset, iterated in turn: each has its own
    feeding thread, so starting one's epoch does not starve the other's (a one-byte budget: a
    row group at a time, the next one only when the readers wait for it)."""
    ds = on_demand(two_files, read_ahead_bytes=1)
    train = iter(rl.DataLoader(ds, batch_size=2, shuffle=True, timeout=30))
    first = [int(v) for v in next(train)[1]]
    evaluated = labels(rl.DataLoader(ds, batch_size=4, timeout=30))
    rest = [int(v) for batch in train for v in batch[1]]
    want = sorted(list(range(12)) + list(range(10)))
    assert sorted(evaluated) == want and sorted(first + rest) == want


def test_other_orders_and_python_transforms_are_refused_by_name(two_files):
    ds = on_demand(two_files)
    with pytest.raises(ValueError, match="row groups read on demand.*copy=True"):
        rl.DataLoader(ds, sampler=tud.RandomSampler(ds), batch_size=2)
    with pytest.raises(ValueError, match="Subset.*copy=True"):
        rl.DataLoader(tud.Subset(ds, [0, 1]), batch_size=2)
    python_step = v1.Compose([v1.Resize(20), v1.CenterCrop(16), v1.Lambda(lambda x: x),
                              v1.ToTensor()])
    with pytest.raises(ValueError, match="per sample.*copy=True"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the warning that the Lambda runs in Python
        rl.DataLoader(on_demand(two_files, transform=python_step), batch_size=2)
    for bad in ({"copy": "no"}, {"shuffle_buffer": -1}, {"read_ahead_bytes": 0}):
        with pytest.raises((TypeError, ValueError), match=next(iter(bad))):
            on_demand(two_files, **bad)


def test_bad_rows_and_an_unreadable_row_group_are_sample_errors(rows, tmp_path):
    data = list(rows[:9])
    data[4] = (None, None)  # a null image
    data[5] = (b"not an image", None)
    path = tmp_path / "bad.parquet"
    write_parquet(path, data, group=3, struct=True)
    ds = rl.Parquet(path, transform=SMALL, copy=False)
    with pytest.raises(rl.SampleError, match=r"bad.parquet: row group 1, row 4.*no image bytes"):
        list(rl.DataLoader(ds, batch_size=3))
    skipping = rl.DataLoader(ds, batch_size=3, on_error="skip")
    assert sorted(labels(skipping)) == [0, 1, 2, 3, 6, 7, 8]
    # A substitute comes from the failing row's own row group (the others may not be in memory).
    replacing = rl.DataLoader(ds, batch_size=3, on_error="replace")
    got = labels(replacing)
    assert len(got) == 9 and got[4] == got[5] == 3

    # A row group whose pages are damaged: its rows fail, named with the reason; the rest load.
    meta = pq.ParquetFile(path).metadata.row_group(2)
    start = min(meta.column(k).data_page_offset for k in range(meta.num_columns)
                if meta.column(k).path_in_schema.startswith("image"))
    raw = bytearray(path.read_bytes())
    raw[start:start + 24] = b"\xff" * 24
    path.write_bytes(bytes(raw))
    damaged = rl.DataLoader(rl.Parquet(path, transform=SMALL, copy=False), batch_size=3,
                            on_error="skip", max_skipped_fraction=1)  # most rows fail
    assert sorted(labels(damaged)) == [0, 1, 2, 3]
    errors = damaged.stats()["recent_errors"]
    assert any("row group 2, row 6 (its row group could not be read" in e for e in errors), errors


def test_a_file_rewritten_after_the_build_is_refused_not_mixed(two_files, rows):
    """The labels, columns and row groups were read at the build: a file rewritten since (other
    rows, the same sizes) must not have its new images served under them."""
    ds = on_demand(two_files, columns=["id"])
    assert len(labels(rl.DataLoader(ds, batch_size=4))) == 22
    write_parquet(two_files / "b.parquet", rows[12:][::-1], group=3, struct=False)
    with pytest.raises(rl.StaleIndexError, match="b.parquet.*changed since the dataset was built"):
        list(rl.DataLoader(ds, batch_size=4))
    with pytest.raises(rl.StaleIndexError, match="b.parquet"):
        ds[20]
    again = on_demand(two_files, columns=["id"])  # built again: fine
    assert len(labels(rl.DataLoader(again, batch_size=4))) == 22


def test_describe_and_pickling(two_files):
    import pickle

    ds = on_demand(two_files, shuffle_buffer=7, read_ahead_bytes=1 << 20)
    loader = rl.DataLoader(ds, batch_size=4)
    labels(loader)
    text = loader.describe()
    assert "row groups: 7 read" in text, text
    copy = pickle.loads(pickle.dumps(ds))
    assert len(copy) == 22 and copy.copy is False and copy.shuffle_buffer == 7
    assert sorted(labels(rl.DataLoader(copy, batch_size=4))) == sorted(
        list(range(12)) + list(range(10)))
