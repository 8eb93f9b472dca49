"""Bad input in Parquet files, Hugging Face datasets and Datasets of image references: string
labels batch as torch batches them; everything else fails with an error that names the file,
row or sample and says what to change."""

from __future__ import annotations

import gc
import io
import warnings

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
from imagegen import jpeg_bytes

N = 8
NAMES = ["cat", "dog", "cat", "bird", "dog", "cat", "bird", "dog"]
NATIVE = v1.Compose([v1.Resize(16), v1.CenterCrop(16), v1.ToTensor()])
# A Python step: the same images, on torch's path (each sample made by __getitem__).
PYTHON = v1.Compose([v1.Resize(16), v1.CenterCrop(16), v1.ToTensor(), v1.Lambda(lambda t: t + 0)])


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "runs on torch's generic path" is meant here
        yield


@pytest.fixture(scope="module")
def images() -> list:
    return [jpeg_bytes(24, 20, seed=i) for i in range(N)]


@pytest.fixture(scope="module")
def image_files(tmp_path_factory, images) -> list:
    root = tmp_path_factory.mktemp("refs")
    paths = []
    for i, data in enumerate(images):
        path = root / f"{i}.jpg"
        path.write_bytes(data)
        paths.append(str(path))
    return paths


def write(path, images, **columns) -> str:
    """A Parquet file of ``images`` as the datasets Image struct, two row groups."""
    table = pa.table({"image": [{"bytes": b, "path": None} for b in images], **columns})
    pq.write_table(table, path, row_group_size=len(images) // 2)
    return str(path)


def decoded(data: bytes, transform=NATIVE) -> torch.Tensor:
    return transform(Image.open(io.BytesIO(data)).convert("RGB"))


class Decoded(tud.Dataset):
    """What torch's own DataLoader is given for the same data: decoded images."""

    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return decoded(self.images[i]), self.labels[i]


def torch_batches(images, labels, batch_size=4) -> list:
    return list(tud.DataLoader(Decoded(images, labels), batch_size=batch_size))


def assert_same_batches(got, want) -> None:
    assert len(got) == len(want)
    for (g_image, g_label), (w_image, w_label) in zip(got, want):
        assert type(g_label) is type(w_label)
        assert torch.equal(g_label, w_label) if torch.is_tensor(w_label) else g_label == w_label
        assert torch.equal(g_image, w_image)


# --- string labels: batched as torch batches them --------------------------------------------

@pytest.mark.parametrize("copy", [True, False])
def test_parquet_string_labels_batch_as_torch_does_natively(tmp_path, images, copy):
    path = write(tmp_path / "names.parquet", images, label=NAMES)
    ds = rl.Parquet(path, transform=NATIVE, copy=copy, cache_dir=str(tmp_path / "cache"))
    assert ds.targets == NAMES
    loader = rl.DataLoader(ds, batch_size=4)
    assert loader.native
    got = list(loader)
    if copy:
        # torch's collate keeps a batch's str labels as they come out of its samples (a tuple).
        assert_same_batches(got, torch_batches(images, NAMES))
    else:  # read in row-group order: the same rows, str labels a tuple per batch
        assert sorted(label for _, labels in got for label in labels) == sorted(NAMES)
        assert all(isinstance(labels, tuple) for _, labels in got)
    image, label = rl.materialize(ds[3])
    assert label == "bird" and torch.equal(image, decoded(images[3]))


def test_parquet_string_labels_on_torch_path_and_target_transform(tmp_path, images):
    path = write(tmp_path / "names.parquet", images, label=NAMES)
    ds = rl.Parquet(path, transform=PYTHON, cache_dir=str(tmp_path / "cache"))
    loader = rl.DataLoader(ds, batch_size=4, num_workers=0)
    assert not loader.native
    assert_same_batches(list(loader), torch_batches(images, NAMES))
    classes = {"bird": 0, "cat": 1, "dog": 2}
    mapped = rl.Parquet(path, transform=NATIVE, target_transform=classes.__getitem__,
                        cache_dir=str(tmp_path / "cache"))
    assert_same_batches(list(rl.DataLoader(mapped, batch_size=4)),
                        torch_batches(images, [classes[n] for n in NAMES]))


def test_hf_dataset_string_labels_batch_as_torch_does(images):
    hf = datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in images],
                                     "label": NAMES}).cast_column("image", datasets.Image())
    ds = rl.HFDataset(hf, transform=NATIVE)
    assert_same_batches(list(rl.DataLoader(ds, batch_size=4)), torch_batches(images, NAMES))
    picked = rl.HFDataset(hf.select([6, 1, 3]), transform=NATIVE)
    assert picked.targets == [NAMES[6], NAMES[1], NAMES[3]]
    assert [label for _, labels in rl.DataLoader(picked, batch_size=2) for label in labels] \
        == picked.targets


def test_parquet_list_labels_batch_as_torch_does(tmp_path, images):
    labels = [[i, 2 * i] for i in range(N)]
    path = write(tmp_path / "lists.parquet", images, label=labels)
    ds = rl.Parquet(path, transform=NATIVE, cache_dir=str(tmp_path / "cache"))
    got = list(rl.DataLoader(ds, batch_size=4))
    want = torch_batches(images, labels)
    for (_, g), (_, w) in zip(got, want):
        assert len(g) == len(w) and all(torch.equal(a, b) for a, b in zip(g, w))


# --- Parquet and datasets: errors that name the file and the argument ---------------------------

@pytest.mark.parametrize("copy", [True, False])
def test_wrong_label_column_names_the_file_and_columns(tmp_path, images, copy):
    path = write(tmp_path / "a.parquet", images, label=NAMES)
    with pytest.raises(KeyError) as info:
        rl.Parquet(path, label_column="class", copy=copy, cache_dir=str(tmp_path / "cache"))
    text = str(info.value)
    assert "a.parquet" in text and "'class'" in text and "['image', 'label']" in text
    assert "label_column=None" in text


def test_label_types_that_differ_between_files_name_both(tmp_path, images):
    ints = write(tmp_path / "a-ints.parquet", images, label=list(range(N)))
    names = write(tmp_path / "b-names.parquet", images, label=NAMES)
    with pytest.raises(TypeError) as info:
        rl.Parquet([ints, names], cache_dir=str(tmp_path / "cache"))
    text = str(info.value)
    assert "label column 'label' is string in" in text and "b-names.parquet" in text
    assert "but int64 in" in text and "a-ints.parquet" in text
    # Widths that differ are one type: int32 in one file, int64 in another.
    narrow = tmp_path / "c-int32.parquet"
    pq.write_table(pa.table({"image": [{"bytes": b, "path": None} for b in images],
                             "label": pa.array(range(N), pa.int32())}), narrow)
    both = rl.Parquet([ints, str(narrow)], cache_dir=str(tmp_path / "cache"))
    assert both.targets == list(range(N)) * 2


def test_null_labels_name_the_file_and_row(tmp_path, images):
    labels = [0, 1, 2, None, 4, None, 6, 7]
    path = write(tmp_path / "nulls.parquet", images, label=labels)
    with pytest.raises(ValueError, match=r"nulls\.parquet.*'label'.*2 row\(s\), the first row 3"):
        rl.Parquet(path, cache_dir=str(tmp_path / "cache"))
    loaded = rl.Parquet(path, label_column=None, cache_dir=str(tmp_path / "cache"))
    assert len(loaded) == N


@pytest.mark.parametrize("copy", [True, False])
@pytest.mark.parametrize("column,says", [
    (pa.array(list(range(N))), "int64 values, not image bytes"),
    (pa.array([f"/data/{i}.jpg" for i in range(N)]), "datasets.Image()"),
    (pa.array([{"path": "x.jpg", "size": 3}] * N), "without a 'bytes' field"),
])
def test_image_column_of_the_wrong_type_names_the_file(tmp_path, copy, column, says):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"image": column, "label": list(range(N))}), path)
    with pytest.raises(TypeError) as info:
        rl.Parquet(str(path), copy=copy, cache_dir=str(tmp_path / "cache"))
    text = str(info.value)
    assert "bad.parquet" in text and "'image'" in text and says in text
    assert "image_column=" in text


def test_missing_parquet_file_and_columns_are_named(tmp_path, images):
    with pytest.raises(FileNotFoundError, match="nowhere.parquet"):
        rl.Parquet(str(tmp_path / "nowhere.parquet"))
    path = write(tmp_path / "a.parquet", images, label=NAMES)
    with pytest.raises(KeyError, match=r"a\.parquet.*no image column 'img'.*image_column="):
        rl.Parquet(path, image_column="img", cache_dir=str(tmp_path / "cache"))


def test_hf_dataset_without_the_image_column_says_which_to_pass(images):
    hf = datasets.Dataset.from_dict({"picture": images, "label": list(range(N))})
    with pytest.raises(KeyError, match=r"no image column 'image'.*'picture'.*image_column="):
        rl.HFDataset(hf)
    with pytest.raises(KeyError, match=r"no label column 'y'.*label_column=None"):
        rl.HFDataset(hf, image_column="picture", label_column="y")
    strings = datasets.Dataset.from_dict({"image": [str(i) for i in range(N)]})
    with pytest.raises(TypeError, match=r"image column 'image' holds string values"):
        rl.HFDataset(strings, label_column=None)


# --- a Dataset of image references whose samples differ ----------------------------------------

class Mixed(tud.Dataset):
    """(rl.ImageFile, int) samples, sample 5 made by ``odd``."""

    def __init__(self, files, odd, transform=NATIVE):
        self.files, self.odd, self.transform = files, odd, transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        image = rl.ImageFile(self.files[i], self.transform)
        return self.odd(image, i) if i == 5 else (image, i)


class MixedDecoded(Mixed):
    """The same samples, decoded: what torch's own DataLoader would be given."""

    def __getitem__(self, i):
        return rl.materialize(super().__getitem__(i))


ODD = {
    "str label": lambda image, i: (image, "cat"),
    "dict": lambda image, i: {"image": image, "label": i},
    "longer tuple": lambda image, i: (image, i, 0),
}
SHAPE = {"str label": "(image reference, str)",
         "dict": "{'image': image reference, 'label': int}",
         "longer tuple": "(image reference, int, int)"}


def torch_error(files, odd, transform=NATIVE) -> BaseException:
    with pytest.raises(Exception) as info:
        list(tud.DataLoader(MixedDecoded(files, odd, transform), batch_size=4))
    return info.value


@pytest.mark.parametrize("kind", list(ODD))
def test_unlike_sample_is_named_natively(image_files, kind):
    loader = rl.DataLoader(Mixed(image_files, ODD[kind]), batch_size=4)
    assert loader.native
    batches = iter(loader)
    first = next(batches)  # samples 0-3 are alike
    assert first[1].tolist() == [0, 1, 2, 3]
    with pytest.raises(Exception) as info:
        next(batches)
    want = torch_error(image_files, ODD[kind])
    assert type(info.value) is type(want)  # as torch raises for the same samples
    text = str(info.value)
    assert f"sample 5 of {__name__}.Mixed is {SHAPE[kind]}" in text
    assert "sample 4 in the same batch is (image reference, int)" in text
    assert "return the same structure" in text
    if kind != "dict":  # (natively the images are batched already: torch stops elsewhere)
        assert str(want) in text  # with torch's own words


@pytest.mark.parametrize("workers", [0, 1])
def test_unlike_sample_is_named_on_torch_path(image_files, workers):
    loader = rl.DataLoader(Mixed(image_files, ODD["str label"], PYTHON), batch_size=4,
                           num_workers=workers)
    assert not loader.native
    with pytest.raises(TypeError) as info:
        list(loader)
    text = str(info.value)
    # torch's re-raised worker error is in a reference cycle with its iterator: collected here,
    # not in a later test (a torch worker then takes its 5 s join timeout to stop).
    del info
    gc.collect()
    assert f"sample 5 of {__name__}.Mixed is (Tensor[3, 16, 16], str)" in text
    assert "sample 4 in the same batch is (Tensor[3, 16, 16], int)" in text
    assert "new(): invalid data type 'str'" in text


def test_unlike_sample_is_named_with_a_collate_fn(image_files):
    loader = rl.DataLoader(Mixed(image_files, ODD["str label"]), batch_size=4,
                           collate_fn=lambda batch: tud.default_collate(batch))
    assert loader.native
    with pytest.raises(TypeError, match=r"sample 5 of .*Mixed is \(image reference, str\).*"
                                        r"collate_fn cannot batch"):
        list(loader)
    # torch's default_collate itself is the default: torch's collate is named.
    loader = rl.DataLoader(Mixed(image_files, ODD["str label"]), batch_size=4,
                           collate_fn=tud.default_collate)
    with pytest.raises(TypeError, match=r"sample 5 of .*Mixed is \(image reference, str\).*"
                                        r"torch's collate cannot batch"):
        list(loader)


def test_unlike_samples_in_batches_of_one_load_as_with_torch(image_files):
    # Nothing is refused up front: torch batches any samples that are never batched together.
    got = list(rl.DataLoader(Mixed(image_files, ODD["str label"]), batch_size=1))
    want = list(tud.DataLoader(MixedDecoded(image_files, ODD["str label"]), batch_size=1))
    assert [b[1] for b in got][5] == ("cat",) == want[5][1]
    assert all(torch.equal(g[0], w[0]) for g, w in zip(got, want))


def test_string_labels_from_a_dataset_of_references_batch_as_torch_does(image_files):
    names = lambda image, i: (image, NAMES[i])  # noqa: E731

    class Named(Mixed):
        def __getitem__(self, i):
            return names(rl.ImageFile(self.files[i], self.transform), i)

    class NamedDecoded(Named):
        def __getitem__(self, i):
            return rl.materialize(super().__getitem__(i))

    got = list(rl.DataLoader(Named(image_files, None), batch_size=4))
    want = list(tud.DataLoader(NamedDecoded(image_files, None), batch_size=4))
    assert_same_batches(got, want)


@pytest.mark.parametrize("odd,says", [
    (lambda image, i: None, "sample 5 holds 0 image references, as None,"),
    (lambda image, i: (Image.open(image.path).convert("RGB"), i),
     "sample 5 holds 0 image references, as (PIL.Image.Image, int),"),
])
def test_sample_without_references_is_named_when_the_loader_is_built(image_files, odd, says):
    with pytest.raises(ValueError) as info:
        rl.DataLoader(Mixed(image_files, odd), batch_size=4)
    text = str(info.value)
    assert says in text and "sample 0 holds 1, as (image reference, int);" in text
    assert "image references (rl.ImageFile, rl.ImageBytes) in the same places" in text


def test_a_reference_without_a_transform_among_others_is_named(image_files):
    odd = lambda image, i: (rl.ImageFile(image.path), i)  # noqa: E731  (decodes to PIL)
    with pytest.raises(TypeError) as info:
        list(rl.DataLoader(Mixed(image_files, odd), batch_size=4))
    text = str(info.value)
    assert "sample 5 of" in text and "is (PIL.Image.Image, int)" in text
    assert "is (Tensor[3, 16, 16], int)" in text and "ToTensor()" in text


def test_pil_samples_on_torch_path_say_to_add_a_transform(tmp_path, images):
    path = write(tmp_path / "a.parquet", images, label=list(range(N)))
    loader = rl.DataLoader(rl.Parquet(path, cache_dir=str(tmp_path / "cache")), batch_size=4)
    with pytest.raises(TypeError) as info:
        list(loader)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "while collating sample 0 (" in notes and "a.parquet: row group 0, row 0 (" in notes
    assert "sample 3 (" in notes
    assert "of ringloader.hf.Parquet, each (PIL.Image.Image, int)" in notes
    assert "ToTensor()" in notes


def test_rows_read_on_demand_without_a_transform_say_so(tmp_path, images):
    path = write(tmp_path / "a.parquet", images, label=list(range(N)))
    with pytest.raises(ValueError, match=r"it has none: its samples are PIL images.*copy=True"):
        rl.DataLoader(rl.Parquet(path, copy=False), batch_size=4)
