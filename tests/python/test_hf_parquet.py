"""Hugging Face datasets and Parquet files of encoded images run natively and batch exactly as
PIL + the same transform would, every row once per epoch."""

from __future__ import annotations

import io
import os
import pickle
import threading
import time
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.utils.data as tud
import torchvision.transforms as v1
from PIL import Image

import ringloader as rl
from imagegen import jpeg_bytes, write_tree

FIXED = v1.Compose([v1.Resize(40), v1.CenterCrop(32), v1.ToTensor(),
                    v1.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
RANDOM = v1.Compose([v1.RandomResizedCrop(24), v1.RandomHorizontalFlip(), v1.ToTensor()])


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list:
    """14 JPEGs of every flavour; row i has label i % 3."""
    root = write_tree(tmp_path_factory.mktemp("hf"), num_classes=2, per_class=7, seed=21)
    return sorted(root.rglob("*.jpg"))


def labels_of(files) -> list:
    return [i % 3 for i in range(len(files))]


def pil(path: Path, transform=FIXED) -> torch.Tensor:
    return transform(Image.open(path).convert("RGB"))


def embedded(files) -> datasets.Dataset:
    return datasets.Dataset.from_dict(
        {"image": [{"bytes": p.read_bytes(), "path": None} for p in files],
         "label": labels_of(files), "name": [p.name for p in files],
         "weight": [0.5 * i for i in range(len(files))]}).cast_column("image", datasets.Image())


def assert_epoch_is_pil(loader, files, order=None) -> None:
    order = list(range(len(files))) if order is None else order
    images = torch.cat([b[0] for b in loader])
    want = torch.stack([pil(files[i]) for i in order])
    assert images.shape == want.shape and (images - want).abs().max().item() == 0


def test_embedded_image_feature_runs_natively_and_equals_pil(files):
    ds = rl.HFDataset(embedded(files), transform=FIXED, columns=["name", "weight"])
    loader = rl.DataLoader(ds, batch_size=4, num_workers=2)
    assert loader.native and len(ds) == len(files)
    batches = list(loader)
    assert_epoch_is_pil(batches, files)
    got = [b[1] for b in batches]
    assert torch.cat(got).tolist() == labels_of(files)
    # Other columns collate as torch's default_collate does (str: a list, float: a tensor).
    want = tud.default_collate([(f.name, 0.5 * i) for i, f in enumerate(files[:4])])
    assert batches[0][2] == want[0] and torch.equal(batches[0][3], want[1])
    # Outside the loader: references, which materialize decodes with Pillow.
    image, label, name, weight = rl.materialize(ds[5])
    assert torch.equal(image, pil(files[5])) and (label, name, weight) == (2, files[5].name, 2.5)


def test_image_bytes_are_views_of_the_arrow_buffer(files):
    hf = embedded(files)
    ds = rl.HFDataset(hf, transform=FIXED)
    buffer = hf.data.table.column("image").chunk(0).field("bytes").buffers()[2]
    lo, hi = buffer.address, buffer.address + buffer.size
    for i in (0, 7, len(files) - 1):
        ref = ds[i][0]
        address = ref.data.__array_interface__["data"][0]
        assert lo <= address and address + ref.nbytes <= hi  # no copy: inside the Arrow buffer
        assert bytes(ref.data) == files[i].read_bytes()
    copy = pickle.loads(pickle.dumps(ds[7]))  # torch's spawned workers: the bytes travel
    assert bytes(copy[0].data) == files[7].read_bytes() and copy[0].describe() == ds[7][0].describe()
    assert torch.equal(rl.materialize(copy)[0], pil(files[7]))


def test_save_to_disk_and_from_parquet_round_trip(files, tmp_path):
    embedded(files).save_to_disk(str(tmp_path / "saved"), num_shards=3)
    reloaded = datasets.load_from_disk(str(tmp_path / "saved"))
    assert reloaded.data.table.column("image").num_chunks == 3  # one Arrow chunk a shard
    assert_epoch_is_pil(rl.DataLoader(rl.HFDataset(reloaded, transform=FIXED), batch_size=5),
                        files)
    embedded(files).to_parquet(str(tmp_path / "train.parquet"))
    from_parquet = datasets.Dataset.from_parquet(str(tmp_path / "train.parquet"))
    assert_epoch_is_pil(rl.DataLoader(rl.HFDataset(from_parquet, transform=FIXED), batch_size=5),
                        files)
    # The same file read by rl.Parquet directly.
    assert_epoch_is_pil(rl.DataLoader(rl.Parquet(tmp_path / "train.parquet", transform=FIXED,
                                                 cache_dir=tmp_path / "cache"),
                                      batch_size=5), files)


def test_paths_instead_of_bytes_become_image_files(files):
    hf = datasets.Dataset.from_dict({"image": [str(p) for p in files],
                                     "label": labels_of(files)}).cast_column("image",
                                                                            datasets.Image())
    ds = rl.HFDataset(hf, transform=FIXED)
    assert isinstance(ds[3][0], rl.ImageFile) and ds[3][0].path == str(files[3])
    assert_epoch_is_pil(rl.DataLoader(ds, batch_size=4), files)
    # Rows with bytes and rows with paths (the paths stay one byte arena, never a str a row),
    # through a shuffled indices mapping.
    mixed = datasets.Dataset.from_dict(
        {"image": [{"bytes": None, "path": str(p)} if i % 3 else {"bytes": p.read_bytes(),
                                                                  "path": None}
                   for i, p in enumerate(files)],
         "label": labels_of(files)}).cast_column("image", datasets.Image()).shuffle(seed=5)
    order = mixed._indices.column(0).to_pylist()
    ds = rl.HFDataset(mixed, transform=FIXED)
    assert [type(ds[k][0]) is rl.ImageFile for k in range(len(files))] == [
        order[k] % 3 != 0 for k in range(len(files))]
    k = next(k for k in range(len(files)) if order[k] % 3)
    assert ds[k][0].path == str(files[order[k]])
    assert_epoch_is_pil(rl.DataLoader(ds, batch_size=4, num_workers=2), files, order)


def test_plain_binary_column_and_select_shuffle_indices(files):
    hf = datasets.Dataset.from_dict({"jpeg": [p.read_bytes() for p in files],
                                     "cls": labels_of(files), "name": [p.name for p in files]})
    picked = hf.shuffle(seed=3).select(range(6))  # an indices mapping, not a new table
    order = picked._indices.column(0).to_pylist()
    ds = rl.HFDataset(picked, transform=FIXED, image_column="jpeg", label_column="cls",
                      columns=["name"])
    batches = list(rl.DataLoader(ds, batch_size=4))
    assert_epoch_is_pil(batches, files, order)
    assert torch.cat([b[1] for b in batches]).tolist() == [labels_of(files)[i] for i in order]
    assert [n for b in batches for n in b[2]] == [files[i].name for i in order]
    assert ds[2][2] == files[order[2]].name
    window = hf.select(range(5, 11))  # contiguous: a sliced table (offsets), no indices
    batches = list(rl.DataLoader(rl.HFDataset(window, transform=FIXED, image_column="jpeg",
                                              label_column="cls"), batch_size=4))
    assert_epoch_is_pil(batches, files, list(range(5, 11)))


def test_shuffle_is_torchs_order_resumes_and_shards(files):
    hf = datasets.Dataset.from_dict({"image": [p.read_bytes() for p in files],
                                     "label": list(range(len(files)))})
    ds = rl.HFDataset(hf, transform=RANDOM)
    torch.manual_seed(4)
    one = list(rl.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2))
    torch.manual_seed(4)
    torchs = torch.cat(list(tud.DataLoader(range(len(files)), batch_size=4, shuffle=True)))
    assert torch.cat([b[1] for b in one]).tolist() == torchs.tolist()
    torch.manual_seed(4)
    loader = rl.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    del it
    resumed = rl.DataLoader(ds, batch_size=4, shuffle=True, num_workers=1)
    resumed.load_state_dict(state)
    for (ai, al), (bi, bl) in zip(list(resumed), one[1:]):
        assert torch.equal(ai, bi) and torch.equal(al, bl)
    seen = []
    for rank in range(3):
        for _, labels in rl.DataLoader(ds, batch_size=4, shuffle=True, rank=rank, world_size=3):
            seen += labels.tolist()
    assert sorted(set(seen)) == list(range(len(files))) and len(seen) == 15  # padded to 3 x 5
    sub = next(iter(rl.DataLoader(tud.Subset(ds, [9, 2]), batch_size=2)))
    assert sub[1].tolist() == [9, 2]


def write_parquet(path: Path, rows: list, group: int, struct: bool) -> None:
    images = [{"bytes": b, "path": p} for b, p in rows] if struct else [b for b, _ in rows]
    n = len(rows)
    table = pa.table({"image": images, "label": list(range(n)), "id": [f"{path.stem}-{i}"
                                                                       for i in range(n)]})
    pq.write_table(table, path, row_group_size=group)


def test_parquet_files_with_row_groups_every_row_once_across_ranks(files, tmp_path):
    data = [(p.read_bytes(), None) for p in files]
    write_parquet(tmp_path / "a.parquet", data[:8], group=3, struct=True)
    write_parquet(tmp_path / "b.parquet", data[8:], group=4, struct=False)
    assert pq.ParquetFile(tmp_path / "a.parquet").num_row_groups == 3
    ds = rl.Parquet(str(tmp_path / "*.parquet"), transform=FIXED, columns=["id"],
                    cache_dir=tmp_path / "cache")
    assert len(ds) == len(files)
    batches = list(rl.DataLoader(ds, batch_size=4))
    assert_epoch_is_pil(batches, files)
    ids = [i for b in batches for i in b[2]]
    assert ids == [f"a-{i}" for i in range(8)] + [f"b-{i}" for i in range(6)]
    seen = []
    for rank in range(2):
        loader = rl.DataLoader(ds, batch_size=3, shuffle=True, rank=rank, world_size=2)
        for images, _, ids in loader:
            seen += ids
            for image, key in zip(images, ids):
                k = int(key[2:]) + (8 if key[0] == "b" else 0)
                assert torch.equal(image, pil(files[k]))
    assert sorted(seen) == sorted(f"a-{i}" for i in range(8)) + sorted(f"b-{i}" for i in range(6))


def test_parquet_memory_stays_within_a_row_group_and_rows_are_read_once(files, tmp_path,
                                                                        monkeypatch):
    """A set several times a small budget: building holds no row group in process memory (the
    rows are mapped from the Arrow copy), a global shuffle reads each row group once, not once
    per sample, and a second build reuses the copy (reads none)."""
    reads: list = []
    read_row_group = pq.ParquetFile.read_row_group

    def counted(self, i, *args, **kwargs):
        reads.append(i)
        return read_row_group(self, i, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counted)
    monkeypatch.setattr(pq.ParquetFile, "read", lambda *a, **k: pytest.fail("whole-file read"))
    data = [(p.read_bytes(), None) for p in files] * 6  # 84 rows
    total = sum(len(b) for b, _ in data)
    group = 7
    budget = 2 * max(sum(len(b) for b, _ in data[i:i + group]) for i in range(0, 84, group))
    assert total > 3 * budget
    write_parquet(tmp_path / "big.parquet", data, group=group, struct=True)
    before = pa.total_allocated_bytes()
    ds = rl.Parquet(tmp_path / "big.parquet", transform=FIXED, cache_dir=tmp_path / "cache")
    assert pa.total_allocated_bytes() - before < budget
    copies = list((tmp_path / "cache").glob("*.arrow"))
    assert len(copies) == 1
    stamp = copies[0].stat().st_mtime_ns
    torch.manual_seed(1)
    order = torch.cat(list(tud.DataLoader(range(84), batch_size=12, shuffle=True))).tolist()
    torch.manual_seed(1)
    batches = list(rl.DataLoader(ds, batch_size=12, shuffle=True))
    assert torch.cat([b[1] for b in batches]).tolist() == order  # label = row in the file
    assert_epoch_is_pil(batches, files, [i % len(files) for i in order])
    assert pa.total_allocated_bytes() - before < budget
    assert reads == list(range(12))  # the shuffled epoch included: every row group once
    rl.Parquet(tmp_path / "big.parquet", transform=FIXED, cache_dir=tmp_path / "cache")
    assert copies[0].stat().st_mtime_ns == stamp  # unchanged file: its copy is reused
    assert reads == list(range(12))


def test_parquet_copy_follows_a_rewrite_that_keeps_size_and_mtime(files, tmp_path):
    """A file rewritten in place with other rows, its size and modification time restored, is
    converted again (not served from the stale copy); the old copy is removed, and a dataset
    built before the rewrite still reads the rows it mapped."""
    path, cache = tmp_path / "same.parquet", tmp_path / "cache"
    images = [p.read_bytes() for p in files[:6]]

    def version(order: list) -> bytes:
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table({"image": [images[i] for i in order], "label": order}), sink,
                       compression="none", use_dictionary=False)
        return sink.getvalue().to_pybytes()

    path.write_bytes(version(list(range(6))))
    before = path.stat()
    old = rl.Parquet(path, transform=FIXED, cache_dir=cache)
    reversed_rows = version(list(range(5, -1, -1)))
    assert len(reversed_rows) == before.st_size
    with open(path, "r+b") as f:  # the same inode, the same size
        f.write(reversed_rows)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    new = rl.Parquet(path, transform=FIXED, cache_dir=cache)
    assert [new[i][1] for i in range(6)] == [5, 4, 3, 2, 1, 0]
    assert_epoch_is_pil(rl.DataLoader(new, batch_size=4), files, [5, 4, 3, 2, 1, 0])
    assert len(list(cache.glob("*.arrow"))) == 1  # the stale copy is gone from the disk
    assert_epoch_is_pil(rl.DataLoader(old, batch_size=4), files, list(range(6)))


def test_parquet_file_changing_during_its_conversion_is_an_error(files, tmp_path, monkeypatch):
    """A file written to while its copy is made would give rows of no single version: the
    build fails naming it, and leaves no copy to be reused."""
    path = tmp_path / "moving.parquet"
    write_parquet(path, [(p.read_bytes(), None) for p in files[:6]], group=2, struct=False)
    read_row_group = pq.ParquetFile.read_row_group

    def writer_touches(self, i, *args, **kwargs):
        if i == 1:  # another process appends, or a tool rewrites the file
            st = path.stat()
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        return read_row_group(self, i, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", writer_touches)
    with pytest.raises(RuntimeError, match="moving.parquet' changed while it was being read"):
        rl.Parquet(path, cache_dir=tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*.arrow"))
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", read_row_group)
    assert len(rl.Parquet(path, cache_dir=tmp_path / "cache")) == 6  # once it is still


def test_parquet_builds_started_together_convert_once(files, tmp_path, monkeypatch):
    """Two builds of one file at once (ranks on a machine): one converts, the other waits for
    its copy; each row group is read once and both see the same rows."""
    write_parquet(tmp_path / "shared.parquet", [(p.read_bytes(), None) for p in files],
                  group=2, struct=False)
    reads: list = []
    read_row_group = pq.ParquetFile.read_row_group

    def slow(self, i, *args, **kwargs):  # long enough for the second build to arrive
        reads.append(i)
        time.sleep(0.02)
        return read_row_group(self, i, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", slow)
    start, built = threading.Barrier(2), []

    def build() -> None:
        start.wait()
        built.append(rl.Parquet(tmp_path / "shared.parquet", transform=FIXED,
                                cache_dir=tmp_path / "cache"))

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 2 and sorted(reads) == list(range(7))
    assert [b[1] for b in built[0]] == [b[1] for b in built[1]] == list(range(len(files)))
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.suffix == ".arrow"] and \
        not list((tmp_path / "cache").glob(".*.tmp"))


def padded_jpeg(seed: int, size: int) -> bytes:
    """A 16x16 JPEG grown to ``size`` bytes with comment (COM) segments: a row of a large set
    that costs next to nothing to decode."""
    jpeg = jpeg_bytes(16, 16, seed=seed)
    pad, left = b"", size - len(jpeg)
    while left > 4:
        n = min(65533, left - 4)
        pad += b"\xff\xfe" + (n + 2).to_bytes(2, "big") + bytes(n)
        left -= n + 4
    return jpeg[:2] + pad + jpeg[2:]


def write_big_parquet(path: Path, group: int, rows: int, size: int) -> Path:
    """``rows`` uncompressed rows of ``size``-byte JPEGs (labels 0, 1, ...) in row groups of
    ``group`` rows: a set whose bytes are its images."""
    images = [padded_jpeg(k, size) for k in range(8)]
    schema = pa.schema([("image", pa.binary()), ("label", pa.int64())])
    with pq.ParquetWriter(path, schema, compression="none", use_dictionary=False) as writer:
        for g in range(rows // group):
            writer.write_table(pa.table({"image": [images[(g * group + r) % 8]
                                                   for r in range(group)],
                                         "label": list(range(g * group, (g + 1) * group))},
                                        schema=schema))
    return path


def anonymous_rss() -> int:
    """The process's resident anonymous memory (heap, arenas, pools), not the page cache that
    mapped files bring in."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


class PeakAnonymous:
    """The peak of ``anonymous_rss()`` while the block runs, sampled every 2 ms."""

    def __enter__(self) -> "PeakAnonymous":
        self.start = self.peak = anonymous_rss()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(0.002):
            self.peak = max(self.peak, anonymous_rss())

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, anonymous_rss())

    @property
    def growth(self) -> int:
        return self.peak - self.start


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc/self/status")
def test_parquet_set_larger_than_the_budget_keeps_process_memory_bounded(tmp_path):
    """48 MB of rows in 2 MB row groups, a 4 MB loader budget: converting the set and a globally
    shuffled epoch over it grow the process's anonymous memory by a few row groups (4 to 7 MB
    measured); the rows' bytes stay in the page cache of the mapped copy. Reading the table
    whole grows it by more than the set's size (166 MB measured)."""
    group, rows, size = 32, 768, 64 * 1024
    path = write_big_parquet(tmp_path / "big.parquet", group, rows, size)
    total, budget = rows * size, 4 << 20
    assert path.stat().st_size > total and total > 10 * budget
    pa.default_memory_pool().release_unused()  # the writer's buffers: not the reader's to reuse
    transform = v1.Compose([v1.RandomResizedCrop(8), v1.ToTensor()])
    labels = []
    with PeakAnonymous() as memory:
        ds = rl.Parquet(path, transform=transform, cache_dir=tmp_path / "cache")
        loader = rl.DataLoader(ds, batch_size=32, shuffle=True, num_workers=2, max_memory=budget)
        for batch, label in loader:
            assert batch.shape[1:] == (3, 8, 8)
            labels += label.tolist()
    assert sorted(labels) == list(range(rows)) and labels != sorted(labels)
    bound = 8 * group * size  # a few row groups and one-time pools; the set is 24
    assert memory.growth < bound, f"anonymous memory grew by {memory.growth >> 20} MB"


def test_bad_rows_are_sample_errors_named_by_file_row_group_and_row(files, tmp_path):
    rows = [(p.read_bytes(), None) for p in files[:8]]
    rows[4] = (b"not an image", None)
    rows[6] = (None, None)  # a null image
    rows[7] = (None, str(tmp_path / "missing.jpg"))
    write_parquet(tmp_path / "bad.parquet", rows, group=3, struct=True)
    ds = rl.Parquet(tmp_path / "bad.parquet", transform=FIXED, cache_dir=tmp_path / "cache")
    it = iter(rl.DataLoader(ds, batch_size=4))
    next(it)
    with pytest.raises(rl.SampleError) as info:
        next(it)
    assert info.value.index == 4 and "bad.parquet: row group 1, row 4" in str(info.value)
    skipping = rl.DataLoader(ds, batch_size=4, on_error="skip")
    kept = list(skipping)
    assert torch.cat([b[1] for b in kept]).tolist() == [0, 1, 2, 3, 5]
    # The count of skipped samples names the last one as its error would (a row in memory has
    # no path of its own).
    assert "last: sample 7 (" in skipping.describe() and "missing.jpg" in skipping.describe()
    null = rl.DataLoader(tud.Subset(ds, [0, 6]), batch_size=2, on_error="skip")
    assert [b[1].tolist() for b in null] == [[0]]
    assert "last: sample 6 (" in null.describe(), null.describe()
    assert "bad.parquet: row group 2, row 6: null image" in null.describe()
    # stats() names the rows too: no error reads "sample N ()".
    errors = skipping.stats()["recent_errors"] + null.stats()["recent_errors"]
    assert errors and not any("()" in e for e in errors), errors
    assert any("bad.parquet: row group 1, row 4" in e for e in errors), errors
    with pytest.raises(rl.SampleError, match="row group 2, row 6: null image"):
        list(rl.DataLoader(tud.Subset(ds, [6]), batch_size=1))
    with pytest.raises(rl.SampleError, match="missing.jpg"):
        list(rl.DataLoader(tud.Subset(ds, [7]), batch_size=1))


def test_bad_arguments_are_named(files, tmp_path):
    hf = embedded(files[:2])
    with pytest.raises(KeyError, match="no image column 'img'"):
        rl.HFDataset(hf, image_column="img")
    with pytest.raises(KeyError, match="no label column 'target'"):
        rl.HFDataset(hf, label_column="target")
    with pytest.raises(KeyError, match="'caption' named in columns="):
        rl.HFDataset(hf, columns=["caption"])
    with pytest.raises(TypeError, match="pick a split"):
        rl.HFDataset(datasets.DatasetDict({"train": hf}))
    with pytest.raises(TypeError, match="image column 'label'"):
        rl.HFDataset(hf, image_column="label")
    with pytest.raises(FileNotFoundError, match="no file matches"):
        rl.Parquet(str(tmp_path / "*.parquet"))
    (tmp_path / "junk.parquet").write_bytes(b"junk")
    with pytest.raises(ValueError, match="junk.parquet.*not a readable Parquet"):
        rl.Parquet(tmp_path / "junk.parquet")
    assert rl.HFDataset(hf, label_column=None)[0][0].nbytes == files[0].stat().st_size


def many_rows(n: int) -> datasets.Dataset:
    """``n`` rows of 3 tiny JPEGs repeated (row r: JPEG r % 3, label r), built from Arrow
    arrays (no Python object per row), in 100-row chunks as ``save_to_disk`` writes images."""
    jpegs = [jpeg_bytes(8, 8, seed=k) for k in range(3)]
    chunks = []
    for lo in range(0, n, 100):
        rows = range(lo, min(lo + 100, n))
        chunks.append(pa.StructArray.from_arrays(
            [pa.array([jpegs[r % 3] for r in rows], pa.binary()),
             pa.nulls(len(rows), pa.string())], ["bytes", "path"]))
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    table = pa.table({"image": pa.chunked_array(chunks), "label": np.arange(n)})
    return datasets.Dataset(table.cast(features.arrow_schema), info=datasets.DatasetInfo(
        features=features))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc/self/status")
def test_a_hundred_thousand_rows_take_no_object_a_row():
    """The table is handed over as columns: building the dataset and its loader for 100 000 rows
    takes well under a second (0.05 s measured; a reference a row took 2 s) and under 200 bytes
    a row of process memory (the native sample table's; 1.5 KB a row before)."""
    import tracemalloc

    n = 100_000
    hf = many_rows(n)
    jpegs = [hf.data.table.column("image").chunk(0).field("bytes")[k].as_py() for k in range(3)]
    started = time.perf_counter()
    before = anonymous_rss()
    tracemalloc.start()
    try:
        ds = rl.HFDataset(hf, transform=FIXED)
        loader = rl.DataLoader(ds, batch_size=6, num_workers=1)
        python_bytes = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    took = time.perf_counter() - started
    grown = anonymous_rss() - before
    assert loader.native and len(ds) == n
    assert took < 1.5, f"building took {took:.2f} s"
    assert python_bytes < 48 * n, f"{python_bytes / n:.0f} bytes a row of Python memory"
    assert grown < 400 * n, f"{grown / n:.0f} bytes a row of process memory"
    images, labels = next(iter(rl.DataLoader(tud.Subset(ds, [99_999, 4, 50_000]), batch_size=3)))
    assert labels.tolist() == [99_999, 4, 50_000]
    want = torch.stack([FIXED(Image.open(io.BytesIO(jpegs[r % 3])).convert("RGB"))
                        for r in (99_999, 4, 50_000)])
    assert (images - want).abs().max().item() == 0
    ref = ds[50_000][0]
    assert isinstance(ref, rl.ImageBytes) and bytes(ref.data) == jpegs[50_000 % 3]


def plus_ten(label: int) -> int:
    return label + 10


def test_pickling_rebuilds_from_the_source_not_row_by_row(files, tmp_path):
    """A copy (torch's spawned workers, a checkpoint) pickles the datasets.Dataset or the
    Parquet files, not the rows: as small for 20 rows as for 20 000, and it reads the same."""
    embedded(files).save_to_disk(str(tmp_path / "saved"))
    ds = rl.HFDataset(datasets.load_from_disk(str(tmp_path / "saved")), transform=FIXED,
                      columns=["name"], target_transform=plus_ten)
    copy = pickle.loads(pickle.dumps(ds))
    assert len(copy) == len(files)
    for i in (0, 6, 13):
        image, label, name = rl.materialize(copy[i])
        assert torch.equal(image, pil(files[i])) and (label, name) == (i % 3 + 10, files[i].name)
    sizes = []
    for n in (20, 20_000):
        many_rows(n).save_to_disk(str(tmp_path / str(n)))
        ds = rl.HFDataset(datasets.load_from_disk(str(tmp_path / str(n))))
        sizes.append(len(pickle.dumps(ds)))
        assert len(pickle.loads(pickle.dumps(ds))) == n
    assert sizes[1] < sizes[0] + 1024, sizes
    write_parquet(tmp_path / "a.parquet", [(p.read_bytes(), None) for p in files], group=4,
                  struct=True)
    ds = rl.Parquet(tmp_path / "a.parquet", transform=FIXED, columns=["id"],
                    cache_dir=tmp_path / "cache")
    copy = pickle.loads(pickle.dumps(ds))
    assert len(pickle.dumps(ds)) < 4096
    assert_epoch_is_pil(rl.DataLoader(copy, batch_size=5), files)
    assert copy[9][2] == "a-9"


class _Listed(tud.Dataset):
    """A user's Dataset of ImageBytes, listed row by row (not columnar)."""

    def __init__(self, files):
        self.data = [p.read_bytes() for p in files]

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        return rl.ImageBytes(self.data[i], FIXED), 100 + i, f"listed-{i}"


def test_columnar_and_listed_datasets_concatenate(files):
    """A ConcatDataset of an HFDataset (columns), a Subset of it and a Dataset listed row by
    row is one native table: every row's pixels are PIL's, its label and column its own."""
    ds = rl.HFDataset(embedded(files[:6]), transform=FIXED, columns=["name"])
    both = tud.ConcatDataset([ds, tud.Subset(ds, [5, 0]), _Listed(files[6:9])])
    loader = rl.DataLoader(both, batch_size=4, num_workers=2)
    assert loader.native
    batches = list(loader)
    assert_epoch_is_pil(batches, files, [0, 1, 2, 3, 4, 5, 5, 0, 6, 7, 8])
    assert torch.cat([b[1] for b in batches]).tolist() == [0, 1, 2, 0, 1, 2, 2, 0, 100, 101, 102]
    assert [n for b in batches for n in b[2]] == [files[i].name for i in (
        0, 1, 2, 3, 4, 5, 5, 0)] + ["listed-0", "listed-1", "listed-2"]


def test_rows_in_memory_keep_the_epoch_read_ahead_when_the_working_folder_changes(
        files, tmp_path, monkeypatch):
    """Rows held in memory read no file, so a checkpoint written into the working folder
    between epochs does not drop the epoch read ahead as changed."""
    monkeypatch.chdir(tmp_path)
    ds = rl.HFDataset(embedded(files[:8]), transform=FIXED)
    loader = rl.DataLoader(ds, batch_size=2, shuffle=True, num_workers=1)
    for epoch in range(3):
        assert sorted(torch.cat([b[1] for b in loader]).tolist()) == sorted(labels_of(files[:8]))
        time.sleep(0.01)  # a later modification time for the folder
        (tmp_path / f"checkpoint-{epoch}.pt").write_bytes(b"x")
    text = loader.describe()
    assert "dropped" not in text and "2 of" in text, text


def test_columnar_memory_rows_are_checked_against_their_buffers():
    """The native loader's columnar ``memory``: a row outside its buffer, or naming a buffer
    that is not there, is refused at construction, naming the row."""
    from ringloader import _C

    data = np.frombuffer(jpeg_bytes(8, 8), dtype=np.uint8)
    options = {"batch_size": 1, "transform": [], "variable_size": True}
    good = ([data], np.array([0, -1]), np.array([0, 0]), np.array([len(data), 0]))
    _C.Loader((np.zeros(3, np.uint8), np.array([0, 3])), [0, 1], options, memory=good)
    with pytest.raises(ValueError, match="memory row 0 .* outside buffer 0"):
        _C.Loader((np.zeros(0, np.uint8), np.array([0])), [0], options,
                  memory=([data], [0], [1], [len(data)]))
    with pytest.raises(ValueError, match="memory which\\[0\\] is 2"):
        _C.Loader((np.zeros(0, np.uint8), np.array([0])), [0], options,
                  memory=([data], [2], [0], [1]))
    with pytest.raises(ValueError, match="memory starts must be integers, one per path"):
        _C.Loader((np.zeros(0, np.uint8), np.array([0])), [0], options,
                  memory=([data], [0], [0, 0], [1]))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind,baseline", [("hf", "torch DataLoader \\+ with_transform"),
                                           ("parquet", "ringloader ImageFolder")])
def test_benchmark_reports_both_rates_and_cleans_up(image_tree, tmp_path, kind, baseline):
    """``python -m ringloader.bench --dataset hf|parquet``: the report's shape (not its timings);
    the dataset it wrote into a temporary folder is removed afterwards."""
    import os
    import re
    import subprocess
    import sys

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "ringloader.bench", "--dataset", kind, "--root", str(image_tree),
         "--batch-size", "4", "--rounds", "1", "--warmup-batches", "1", "--num-workers", "2",
         "--quiet"],
        capture_output=True, text=True, env=dict(os.environ, TMPDIR=str(scratch)), timeout=200)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(rf"ringloader {kind} benchmark: 24 images", out), out
    assert re.search(rf"{baseline} *: +\d+ samples/s", out), out
    assert re.search(r"ringloader (HFDataset|Parquet) *: +\d+ samples/s \([0-9.]+x\)", out), out
    if kind == "hf":  # the native rate of the same files, what HFDataset's ratio is read against
        assert re.search(r"ringloader ImageFolder *: +\d+ samples/s \([0-9.]+x\)", out), out
    else:  # row groups read on demand, and what the first pass into the Arrow copy took
        assert re.search(r"ringloader Parquet copy=False *: +\d+ samples/s \([0-9.]+x\)", out), out
        assert re.search(r"first rl.Parquet \(its Arrow copy of [0-9.]+ MB of Parquet\): [0-9.]+ s; "
                         r"rl.Parquet\(copy=False\) \(the label column only\): [0-9.]+ s", out), out
    assert not list(scratch.glob("ringloader-bench-*"))


DOC = Path(__file__).resolve().parents[2] / "docs" / "huggingface.md"


def _doc_blocks():
    from test_readme_blocks import blocks

    return blocks(DOC)


@pytest.mark.parametrize("line,code,skip", _doc_blocks(),
                         ids=[f"huggingface.md:{line}" for line, _, _ in _doc_blocks()])
def test_manual_page_block_runs(tmp_path, line, code, skip):
    import subprocess
    import sys

    from test_readme_blocks import localise

    if skip:
        pytest.skip(skip)
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))  # rl.Parquet's Arrow copies
    done = subprocess.run([sys.executable, "-c", localise(code, tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, f"huggingface.md:{line} failed:\n{done.stderr[-3000:]}"


def test_a_column_of_label_images_runs_natively_as_stored():
    """``mode="mask"`` over palette PNGs in an Image column: native (no warning), palette indices
    kept, equal to Pillow's image as stored under the same fixed transform."""
    import warnings

    from torchvision.transforms import v2

    rng = np.random.default_rng(3)
    blobs, want = [], []
    for _ in range(5):
        labels = rng.integers(0, 7, (24, 30), dtype=np.uint8)
        image = Image.fromarray(labels, "P")
        image.putpalette(rng.integers(0, 256, 768).astype(np.uint8).tobytes())  # not the labels
        out = io.BytesIO()
        image.save(out, "PNG")
        blobs.append({"bytes": out.getvalue(), "path": None})
        want.append(labels)
    hf = datasets.Dataset.from_dict({"image": blobs, "label": list(range(5))}).cast_column(
        "image", datasets.Image())
    t = v2.Compose([v2.CenterCrop(16), v2.PILToTensor()])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(rl.HFDataset(hf, transform=t, mode="mask"), batch_size=5)
    assert loader.native
    masks, labels = next(iter(loader))
    assert masks.dtype == torch.uint8 and masks.shape == (5, 1, 16, 16)
    for mask, stored in zip(masks, want):
        expect = t(Image.fromarray(stored, "L"))
        assert torch.equal(mask, expect)
