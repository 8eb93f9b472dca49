"""A user's own Dataset returning ImageFile references runs natively and batches exactly as
torch's DataLoader over the same Dataset decoding with PIL."""

from __future__ import annotations

import collections
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.utils.data as tud
import torchvision.transforms as v1
from PIL import Image

import ringloader as rl
from imagegen import write_tree

FIXED = v1.Compose([v1.Resize(40), v1.CenterCrop(32), v1.ToTensor(),
                    v1.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
GRAY = v1.Compose([v1.Resize(40), v1.CenterCrop(32), v1.ToTensor()])
RANDOM = v1.Compose([v1.RandomResizedCrop(24), v1.RandomHorizontalFlip(), v1.ToTensor()])

Pair = collections.namedtuple("Pair", "image label")


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> list:
    """(path, label, name, weight) rows, as a CSV would give them: 3 classes x 5 JPEGs."""
    root = write_tree(tmp_path_factory.mktemp("refs"), num_classes=3, per_class=5, seed=11)
    files = sorted(root.rglob("*.jpg"))
    return [(str(p), i % 3, p.name, 0.5 * i) for i, p in enumerate(files)]


class CsvDataset(tud.Dataset):
    """What users write: a row per sample, the image opened with PIL (``lazy=False``) or
    referenced for ringloader (``lazy=True``)."""

    def __init__(self, rows, transform, lazy: bool, shape: str = "dict"):
        self.rows, self.transform, self.lazy, self.shape = rows, transform, lazy, shape

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        path, label, name, weight = self.rows[i]
        if self.lazy:
            image = rl.ImageFile(path, self.transform)
        else:
            image = self.transform(Image.open(path).convert("RGB"))
        if self.shape == "tuple":
            return image, label
        if self.shape == "namedtuple":
            return Pair(image, label)
        return {"image": image, "label": label, "meta": {"name": name, "weight": weight,
                                                          "box": np.array([i, 2 * i], np.float32)}}


def assert_same(a, b):
    """Same structure, types, dtypes and values (max |diff| 0)."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b), (a.double() - b.double()).abs().max().item()
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


@pytest.mark.parametrize("shape", ["dict", "tuple", "namedtuple"])
def test_native_batches_equal_torch_default_collate(rows, shape):
    ours = rl.DataLoader(CsvDataset(rows, FIXED, lazy=True, shape=shape), batch_size=4,
                         num_workers=2)
    assert ours.native
    torchs = tud.DataLoader(CsvDataset(rows, FIXED, lazy=False, shape=shape), batch_size=4)
    got, want = list(ours), list(torchs)
    assert len(got) == len(want) == 4
    for a, b in zip(got, want):
        assert_same(a, b)


def test_materialize_is_what_torch_computes(rows):
    lazy, eager = CsvDataset(rows, FIXED, lazy=True), CsvDataset(rows, FIXED, lazy=False)
    assert isinstance(lazy[3]["image"], rl.ImageFile)
    assert_same(rl.materialize(lazy[3]), eager[3])
    # torch's own DataLoader over the same class, materialising in the Dataset's place.
    wrapped = [rl.materialize(lazy[i]) for i in range(len(lazy))]
    assert_same(tud.default_collate(wrapped[:4]), next(iter(tud.DataLoader(eager, batch_size=4))))


def test_random_transform_draws_as_image_folder(rows, tmp_path):
    """The draws are keyed by (base seed, index, position) as for ImageFolder: a Dataset of
    ImageFile references over the same files gives the very same batches."""
    folder = write_tree(tmp_path / "f", num_classes=2, per_class=4, seed=5)
    reference = rl.ImageFolder(str(folder), transform=RANDOM)

    class Refs(tud.Dataset):
        def __len__(self):
            return len(reference)

        def __getitem__(self, i):
            path, label = reference.samples[i]
            return rl.ImageFile(path, RANDOM), label

    torch.manual_seed(4)
    want = list(rl.DataLoader(reference, batch_size=3, shuffle=True))
    torch.manual_seed(4)
    got = list(rl.DataLoader(Refs(), batch_size=3, shuffle=True))
    for (gi, gl), (wi, wl) in zip(got, want):
        assert torch.equal(gi, wi) and torch.equal(gl, wl)


def test_deterministic_for_any_thread_count_and_on_resume(rows):
    ds = CsvDataset(rows, RANDOM, lazy=True, shape="tuple")

    def run(workers):
        torch.manual_seed(9)
        return list(rl.DataLoader(ds, batch_size=4, shuffle=True, num_workers=workers))

    one, three = run(1), run(3)
    for a, b in zip(one, three):
        assert_same(a, b)
    torch.manual_seed(9)
    loader = rl.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2)
    it = iter(loader)
    first = next(it)
    state = loader.state_dict()
    del it
    resumed = rl.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2)
    resumed.load_state_dict(state)
    assert_same(first, one[0])
    for a, b in zip(list(resumed), one[1:]):
        assert_same(a, b)


def test_collate_fn_gets_materialised_samples(rows):
    ds = CsvDataset(rows, FIXED, lazy=True)
    got = next(iter(rl.DataLoader(ds, batch_size=4, collate_fn=lambda b: tuple(zip(*[
        (s["image"], s["meta"]["name"]) for s in b])))))
    want = next(iter(tud.DataLoader(CsvDataset(rows, FIXED, lazy=False), batch_size=4,
                                    collate_fn=lambda b: tuple(zip(*[
                                        (s["image"], s["meta"]["name"]) for s in b])))))
    assert got[1] == want[1]
    for a, b in zip(got[0], want[0]):
        assert torch.equal(a, b)


def test_rank_world_size_subset_and_concat(rows):
    ds = CsvDataset(rows, FIXED, lazy=True, shape="tuple")
    eager = CsvDataset(rows, FIXED, lazy=False, shape="tuple")
    seen = []
    for rank in range(2):
        for images, labels in rl.DataLoader(ds, batch_size=4, rank=rank, world_size=2):
            seen.append(images)
    assert sum(len(b) for b in seen) == 16  # 15 samples padded to 2 x 8, as DistributedSampler
    indices = [1, 4, 7, 14]
    sub = next(iter(rl.DataLoader(tud.Subset(ds, indices), batch_size=4)))
    assert_same(sub, tud.default_collate([eager[i] for i in indices]))
    concat = rl.DataLoader(tud.ConcatDataset([ds, ds]), batch_size=10)
    assert concat.native
    batches = list(concat)
    assert_same(batches[1], tud.default_collate([eager[i] for i in range(10, 15)] +
                                                [eager[i] for i in range(5)]))


def test_on_error_names_the_sample(rows, tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    broken = list(rows)
    broken[5] = (str(bad),) + rows[5][1:]
    ds = CsvDataset(broken, FIXED, lazy=True, shape="tuple")
    it = iter(rl.DataLoader(ds, batch_size=4))
    next(it)
    with pytest.raises(rl.SampleError) as info:
        next(it)
    assert info.value.index == 5 and "bad.jpg" in str(info.value)
    skipped = list(rl.DataLoader(ds, batch_size=4, on_error="skip"))
    assert sum(len(labels) for _, labels in skipped) == 14
    # skip + drop_last refills batches from the following rows: each keeps its own values.
    eager = CsvDataset(rows, FIXED, lazy=False, shape="tuple")
    full = list(rl.DataLoader(ds, batch_size=4, on_error="skip", drop_last=True))
    assert [len(labels) for _, labels in full] == [4, 4]  # 12 planned rows, 11 left: 2 full
    kept = [i for i in range(12) if i != 5]
    assert_same(full[1], tud.default_collate([eager[i] for i in kept[4:8]]))
    # A replacement's ordinary leaves are its own: every label matches its image.
    by_image = {eager[i][0].numpy().tobytes(): eager[i][1] for i in range(len(rows)) if i != 5}
    for images, labels in rl.DataLoader(ds, batch_size=4, on_error="replace"):
        for image, label in zip(images, labels.tolist()):
            assert by_image[image.numpy().tobytes()] == label


def test_gray_views_equal_pillows_convert_l(rows):
    """mode='L' natively: every flavour of JPEG (colour, gray, CMYK...) gives Pillow's
    convert('L') values, alone or beside RGB views of the same file."""
    gray = v1.Compose([v1.Resize(40), v1.CenterCrop(32), v1.ToTensor(), v1.Normalize([0.5], [0.5])])

    class Gray(tud.Dataset):
        def __len__(self):
            return len(rows)

        def __getitem__(self, i):
            path = rows[i][0]
            return {"gray": rl.ImageFile(path, gray, mode="L"),
                    "both": [rl.ImageFile(path, FIXED), rl.ImageFile(path, GRAY, mode="L")]}

    for layout in ("NCHW", "NHWC"):
        loader = rl.DataLoader(Gray(), batch_size=5, num_workers=2, layout=layout)
        assert loader.native
        got = list(loader)
        want = list(tud.DataLoader([rl.materialize(Gray()[i]) for i in range(len(rows))],
                                   batch_size=5))
        for a, b in zip(got, want):
            if layout == "NHWC":
                b = {"gray": b["gray"].permute(0, 2, 3, 1),
                     "both": [t.permute(0, 2, 3, 1) for t in b["both"]]}
                a = {"gray": a["gray"].contiguous(), "both": [t.contiguous() for t in a["both"]]}
            assert_same(a, b)
    assert got[0]["gray"].shape == (5, 32, 32, 1)


def test_mask_references_run_natively(rows, tmp_path):
    Image.fromarray(np.arange(40 * 48, dtype=np.uint8).reshape(40, 48) % 4).save(tmp_path / "m.png")
    nearest = v1.Compose([v1.CenterCrop(32), v1.PILToTensor()])

    class Masks(CsvDataset):
        def __getitem__(self, i):
            return rl.ImageFile(tmp_path / "m.png", nearest, mode="mask"), self.rows[i][1]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(Masks(rows, FIXED, lazy=True), batch_size=4)
    assert loader.native
    images, labels = next(iter(loader))
    want = torch.stack([nearest(Image.open(tmp_path / "m.png"))] * 4)
    assert torch.equal(images, want)


def test_a_transform_built_per_call_is_one_chain_when_its_steps_are(rows):
    class PerCall(CsvDataset):
        def __getitem__(self, i):
            crop = 32 if i < 99 else 16
            return rl.ImageFile(self.rows[i][0], v1.Compose([v1.CenterCrop(crop), v1.ToTensor()])), 0

    assert rl.DataLoader(PerCall(rows, None, lazy=True), batch_size=4).native
    rows_plus = rows * 7  # index 99 and on: another chain
    with pytest.warns(UserWarning, match="reference 0 of sample 99 has another transform"):
        assert not rl.DataLoader(PerCall(rows_plus, None, lazy=True), batch_size=4).native


def test_bad_structures_are_named(rows):
    class Uneven(CsvDataset):
        def __getitem__(self, i):
            return (rl.ImageFile(self.rows[i][0], FIXED),) * (1 + (i == 2))

    with pytest.raises(ValueError, match="sample 2 holds 2 image references"):
        rl.DataLoader(Uneven(rows, FIXED, lazy=True), batch_size=4)
    with pytest.raises(ValueError, match="each view's dtype"):
        rl.DataLoader(MultiCrop(rows, [FIXED, FIXED]), batch_size=4, dtype="float16")
    with pytest.raises(ValueError, match="batch_transform needs"):
        from torchvision.transforms import v2

        rl.DataLoader(CsvDataset(rows, FIXED, lazy=True, shape="tuple"), batch_size=4,
                      batch_transform=v2.MixUp(num_classes=3))
    with pytest.raises(ValueError, match="mode must be"):
        rl.ImageFile("x.jpg", mode="CMYK")
    with pytest.raises(TypeError, match="bytes-like"):
        rl.ImageBytes(3)


def test_masks_decode_as_stored_and_refuse_blending_resamplers(rows, tmp_path):
    labels = np.arange(48 * 40, dtype=np.uint8).reshape(40, 48) % 5
    mask = Image.fromarray(labels, "L").convert("P")
    mask.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 0] + [0] * 753)
    path = tmp_path / "mask.png"
    mask.save(path)
    nearest = v1.Compose([v1.Resize(20, interpolation=v1.InterpolationMode.NEAREST),
                          v1.PILToTensor()])
    out = rl.ImageFile(path, nearest, mode="mask").materialize()
    assert out.dtype == torch.uint8 and out.shape == (1, 20, 24)
    assert set(out.unique().tolist()) <= set(range(5))  # palette indices, not colours
    assert torch.equal(out, nearest(Image.open(path)))
    with pytest.raises(ValueError, match="Resize resamples with bilinear"):
        rl.ImageFile(path, v1.Compose([v1.Resize(20), v1.PILToTensor()]), mode="mask")


def test_references_pickle(rows):
    ref = rl.ImageFile(rows[0][0], FIXED)
    back = pickle.loads(pickle.dumps(ref))
    assert back.path == ref.path and back.mode == "RGB"
    data = np.frombuffer(Path(rows[0][0]).read_bytes(), np.uint8)
    bytes_ref = rl.ImageBytes(memoryview(data), FIXED)
    assert torch.equal(pickle.loads(pickle.dumps(bytes_ref)).materialize(), ref.materialize())
    # The native table of a Dataset of ImageBytes pickles too (a spawned worker's copy).
    from ringloader.sources._user_source import source_for

    source = source_for(InMemory(rows[:3], bytes))
    copy = pickle.loads(pickle.dumps(source))
    assert copy.memory is None and torch.equal(copy[0][0], source[0][0])


def test_generic_datasets_are_not_probed_into_other_draws(rows, monkeypatch):
    """Looking for references calls dataset[0] once; torch's RNG is left as it was, so a
    Dataset of decoded values still batches exactly as torch's loader. It opens its images with
    Pillow itself: the one warning is the hint that returning rl.ImageFile would make it native."""
    from ringloader.sources import _torch_path

    monkeypatch.setattr(_torch_path, "_hinted", set())  # the hint is once per Dataset class
    ds = CsvDataset(rows, RANDOM, lazy=False, shape="tuple")
    torch.manual_seed(2)
    with pytest.warns(rl.FallbackWarning, match=r"CsvDataset\.__getitem__ opens the image .*"
                      r"Return ringloader\.ImageFile\(path, transform\)") as record:
        loader = rl.DataLoader(ds, batch_size=4, shuffle=True)
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = next(iter(loader))
    torch.manual_seed(2)
    want = next(iter(tud.DataLoader(ds, batch_size=4, shuffle=True)))
    assert_same(got, want)


# ---- several views of one image (multi-crop) ---------------------------------------------------

GLOBAL = v1.Compose([v1.RandomResizedCrop(224, scale=(0.4, 1.0)), v1.RandomHorizontalFlip(),
                     v1.ToTensor(), v1.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
LOCAL = v1.Compose([v1.RandomResizedCrop(96, scale=(0.05, 0.4)), v1.RandomHorizontalFlip(),
                    v1.ToTensor(), v1.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


class MultiCrop(tud.Dataset):
    """DINO's sample: 2 global and 6 local crops of one image, and its label."""

    def __init__(self, rows, views):
        self.rows, self.views = rows, views

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        path, label = self.rows[i][:2]
        return {"crops": [rl.ImageFile(path, t) for t in self.views], "label": label}


def test_multi_crop_decodes_each_file_once(rows):
    ds = MultiCrop(rows[:6], [GLOBAL] * 2 + [LOCAL] * 6)
    # persistent_workers=False: no next epoch read ahead, whose decodes would count too.
    loader = rl.DataLoader(ds, batch_size=3, num_workers=2, persistent_workers=False)
    assert loader.native
    batches = list(loader)
    crops = batches[0]["crops"]
    assert [tuple(c.shape) for c in crops] == [(3, 3, 224, 224)] * 2 + [(3, 3, 96, 96)] * 6
    assert all(c.dtype == torch.float32 for c in crops)
    assert torch.equal(batches[1]["label"], torch.tensor([r[1] for r in rows[3:6]]))
    # Each view draws its own crop: the two global views (same chain) differ.
    assert not torch.equal(crops[0], crops[1])
    stats = loader.stats()
    assert stats["decodes"] == 6 and stats["views_rendered"] == 48


def test_views_match_pil_for_fixed_transforms_and_are_deterministic(rows):
    small = v1.Compose([v1.Resize(20), v1.CenterCrop(16), v1.PILToTensor()])
    views = [FIXED, small, FIXED]
    got = list(rl.DataLoader(MultiCrop(rows, views), batch_size=5, num_workers=2))
    want = list(tud.DataLoader([rl.materialize(MultiCrop(rows, views)[i]) for i in range(len(rows))],
                               batch_size=5))
    for a, b in zip(got, want):
        assert_same(a, b)
    assert got[0]["crops"][1].dtype == torch.uint8

    ds = MultiCrop(rows, [GLOBAL, LOCAL, LOCAL])

    def run(workers):
        torch.manual_seed(1)
        return list(rl.DataLoader(ds, batch_size=4, shuffle=True, num_workers=workers))

    for a, b in zip(run(1), run(3)):
        assert_same(a, b)


def test_views_with_collate_fn_and_skip(rows, tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8 truncated")
    broken = list(rows)
    broken[2] = (str(bad),) + rows[2][1:]
    ds = MultiCrop(broken, [FIXED, FIXED])
    batches = list(rl.DataLoader(ds, batch_size=4, on_error="skip",
                                 collate_fn=lambda b: [s["crops"] for s in b]))
    assert sum(len(b) for b in batches) == 14
    eager = FIXED(Image.open(rows[0][0]).convert("RGB"))
    assert torch.equal(batches[0][0][0], eager) and torch.equal(batches[0][0][1], eager)


def test_references_to_different_files_in_one_sample_run_natively(rows):
    class Pairs(tud.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return rl.ImageFile(rows[i][0], FIXED), rl.ImageFile(rows[i + 1][0], FIXED)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = rl.DataLoader(Pairs(), batch_size=2)
    assert loader.native
    first, second = next(iter(loader))
    assert torch.equal(first[1], second[0])
    assert torch.equal(second[1], FIXED(Image.open(rows[2][0]).convert("RGB")))


# ---- images held in memory (ImageBytes) ----------------------------------------------------------


class InMemory(tud.Dataset):
    """Encoded images kept in memory, each sample's bytes in the given container type; every
    __getitem__ makes a new container object, which only the reference keeps alive."""

    def __init__(self, rows, wrap, transforms=(FIXED,)):
        self.blobs = [Path(r[0]).read_bytes() for r in rows]
        self.labels = [r[1] for r in rows]
        self.wrap, self.transforms = wrap, transforms

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, i):
        data = self.wrap(self.blobs[i])
        views = [rl.ImageBytes(data, t) for t in self.transforms]
        return (views[0] if len(views) == 1 else views), self.labels[i]


@pytest.mark.parametrize("wrap", [bytes, lambda b: memoryview(bytearray(b)),
                                  lambda b: np.frombuffer(b, np.uint8).copy(),
                                  lambda b: __import__("pyarrow").py_buffer(bytes(b))],
                         ids=["bytes", "memoryview", "numpy", "arrow"])
def test_image_bytes_run_natively_and_equal_pil(rows, wrap):
    import gc

    ds = InMemory(rows, wrap)
    loader = rl.DataLoader(ds, batch_size=4, num_workers=2)
    assert loader.native
    gc.collect()  # the containers live on in the references the loader keeps
    eager = CsvDataset(rows, FIXED, lazy=False, shape="tuple")
    want = list(tud.DataLoader(eager, batch_size=4))
    for a, b in zip(list(loader), want):
        assert_same(a, b)
    assert_same(rl.materialize(ds[1]), eager[1])


def test_image_bytes_are_held_unchanged_while_the_loader_lives(rows):
    buffer = bytearray(Path(rows[0][0]).read_bytes())

    class One(tud.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return rl.ImageBytes(buffer, FIXED), i

    loader = rl.DataLoader(One(), batch_size=2)
    with pytest.raises(BufferError):
        buffer.extend(b"moved")  # exported: the bytes cannot move under the decoders
    images, _ = next(iter(loader))
    assert torch.equal(images[1], FIXED(Image.open(rows[0][0]).convert("RGB")))


def test_image_bytes_keep_the_epoch_read_ahead_when_the_working_folder_changes(
        rows, tmp_path, monkeypatch):
    """Samples held in memory read no file, so a checkpoint written into the working folder
    between epochs does not drop the epoch read ahead as changed (their names are not paths)."""
    import time

    monkeypatch.chdir(tmp_path)
    ds = InMemory(rows[:8], bytes)
    loader = rl.DataLoader(ds, batch_size=2, shuffle=True, num_workers=1)
    for epoch in range(3):
        assert sorted(torch.cat([b[1] for b in loader]).tolist()) == sorted(ds.labels)
        time.sleep(0.01)  # a later modification time for the folder
        (tmp_path / f"checkpoint-{epoch}.pt").write_bytes(b"x")
    text = loader.describe()
    assert "dropped" not in text and "2 of" in text, text


def test_bad_image_bytes_name_their_sample_and_views_decode_once(rows):
    ds = InMemory(rows[:4], bytes, transforms=(FIXED, RANDOM))
    ds.blobs[2] = b"not an image at all"
    loader = rl.DataLoader(ds, batch_size=4, persistent_workers=False)
    with pytest.raises(rl.SampleError) as info:
        next(iter(loader))
    assert info.value.index == 2 and "ImageBytes(19 bytes)" in str(info.value)
    ds.blobs[2] = ds.blobs[1]
    loader = rl.DataLoader(ds, batch_size=4, persistent_workers=False)
    (fixed, random_views), labels = next(iter(loader))
    assert fixed.shape == (4, 3, 32, 32) and random_views.shape == (4, 3, 24, 24)
    assert loader.stats()["decodes"] == 4 and loader.stats()["views_rendered"] == 8


# ---- the manual page's examples run -------------------------------------------------------------

DOC = Path(__file__).resolve().parents[2] / "docs" / "custom-datasets.md"


def _doc_blocks():
    from test_readme_blocks import blocks

    return blocks(DOC)


@pytest.mark.parametrize("line,code,skip", _doc_blocks(),
                         ids=[f"custom-datasets.md:{line}" for line, _, _ in _doc_blocks()])
def test_manual_page_block_runs(tmp_path, line, code, skip):
    import subprocess
    import sys

    from test_readme_blocks import localise

    if skip:
        pytest.skip(skip)
    done = subprocess.run([sys.executable, "-c", localise(code, tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"custom-datasets.md:{line} failed:\n{done.stderr[-3000:]}"


def test_a_dataset_of_references_is_a_source(rows):
    from ringloader.core import _source
    from ringloader.sources import _user_source

    source = _user_source.source_for(CsvDataset(rows, v1.Compose([v1.Resize((24, 24)), v1.ToTensor()]),
                                                lazy=True))
    assert isinstance(source, _source.Source)
    assert len(source) == len(source.sample_table) == len(rows)
    assert source.samples[3][0] == rows[3][0]  # the referenced file is the native sample
    assert not source.streamed and source.byte_ranges() == {} and source.shard_sizes is None
    assert source.default_sampler(None, None, True, 0, False) is None  # torch's own samplers
    source.check_unchanged()
    assert source.describe() == (f"{__name__}.CsvDataset (image references): {len(rows)} samples, "
                                 "1 view(s) of 1 file(s) a sample, 0 in memory")
    # Not a Dataset of references (decoded values): no source, torch's generic path.
    assert _user_source.source_for(CsvDataset(rows, v1.ToTensor(), lazy=False)) is None


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["custom", "multicrop"])
def test_the_user_dataset_benchmark_reports_its_rates(image_tree, kind):
    """``python -m ringloader.bench --dataset custom|multicrop``: the report's shape (not its
    timings); ``custom`` also times the same files as a ringloader ImageFolder."""
    import re
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "ringloader.bench", "--dataset", kind, "--root", str(image_tree),
         "--batch-size", "4", "--rounds", "1", "--warmup-batches", "1", "--num-workers", "2",
         "--quiet"], capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(rf"ringloader {kind} benchmark: a user Dataset over 24 images", out), out
    assert re.search(r"torch DataLoader \+ PIL *: +\d+ samples/s", out), out
    assert re.search(r"ringloader \+ ImageFile *: +\d+ samples/s \([0-9.]+x\)", out), out
    folder = re.search(r"ringloader ImageFolder *: +\d+ samples/s \([0-9.]+x\)", out)
    assert bool(folder) == (kind == "custom"), out
