"""The native loader's byte-range samples and known-bad samples (``_C.Loader(..., offsets=,
lengths=, errors=)``), the building blocks of WebDataset shards."""

from __future__ import annotations

import numpy as np
import pytest

from imagegen import jpeg_bytes
from ringloader import SampleError, _C

STEPS = [{"kind": "resize", "size_h": 24, "size_w": 32}]


def _options(**extra):
    options = {"batch_size": 4, "num_workers": 2, "prefetch_batches": 2, "transform": STEPS}
    options.update(extra)
    return options


def _images(loader, n, order=None):
    order = list(range(n)) if order is None else order
    offsets = list(range(0, n, 4)) + [n]
    loader.start_epoch(0, 7, np.asarray(order, dtype=np.int64), np.asarray(offsets, dtype=np.int64))
    out = []
    while (batch := loader.next()) is not None:
        images, labels, indices, _ = batch
        out.append((np.from_dlpack(images).copy(), np.from_dlpack(labels).copy(), np.from_dlpack(indices).copy()))
    return out


@pytest.fixture()
def packed(tmp_path):
    """Ten JPEGs as files, and the same bytes packed into one blob with junk between them."""
    files, offsets, lengths = [], [], []
    blob = bytearray(b"\xab" * 100)
    for i in range(10):
        data = jpeg_bytes(40 + 3 * i, 30 + 2 * i, seed=i)
        path = tmp_path / f"img_{i}.jpg"
        path.write_bytes(data)
        files.append(str(path))
        offsets.append(len(blob))
        lengths.append(len(data))
        blob += data + b"\xcd" * (17 * i + 5)
    shard = tmp_path / "shard.bin"
    shard.write_bytes(bytes(blob))
    return files, str(shard), offsets, lengths


def test_byte_ranges_decode_like_their_files(packed):
    files, shard, offsets, lengths = packed
    labels = [i % 3 for i in range(10)]
    whole = _C.Loader(files, labels, _options())
    ranged = _C.Loader([shard] * 10, labels, _options(),
                       offsets=np.asarray(offsets, dtype=np.int64), lengths=lengths)
    order = [3, 1, 4, 0, 5, 9, 2, 6, 8, 7]
    for (a_img, a_lab, a_idx), (b_img, b_lab, b_idx) in zip(_images(whole, 10, order), _images(ranged, 10, order)):
        np.testing.assert_array_equal(a_img, b_img)
        np.testing.assert_array_equal(a_lab, b_lab)
        np.testing.assert_array_equal(a_idx, b_idx)
    assert ranged.stats()["bytes_read"] == sum(lengths)
    # The single-sample path reads the range too.
    np.testing.assert_array_equal(np.from_dlpack(ranged.decode_sample(4, seed=1, epoch=0)),
                                  np.from_dlpack(whole.decode_sample(4, seed=1, epoch=0)))


def test_range_past_the_end_is_a_sample_error_naming_index_and_shard(packed):
    _, shard, offsets, lengths = packed
    offsets = list(offsets)
    offsets[6] = 10 ** 9
    loader = _C.Loader([shard] * 10, [0] * 10, _options(), offsets=offsets, lengths=lengths)
    loader.start_epoch(0, 0, np.arange(10, dtype=np.int64), np.asarray([0, 4, 8, 10], dtype=np.int64))
    assert loader.next() is not None
    with pytest.raises(SampleError) as info:
        loader.next()
    assert info.value.index == 6
    assert info.value.path == shard
    assert info.value.reason.startswith(f"truncated: {shard} has ")
    assert info.value.code == "DATA_LOSS"


@pytest.mark.parametrize("policy", ["raise", "skip", "replace"])
def test_known_bad_samples_follow_the_error_policy(packed, policy):
    _, shard, offsets, lengths = packed
    errors = [""] * 9 + [None]  # None reads as ''
    errors[5] = "shard.tar: sample 'k5' has no image member (.jpg/.jpeg/.png/.webp)"
    loader = _C.Loader([shard] * 10, list(range(10)), _options(on_error=policy),
                       offsets=offsets, lengths=lengths, errors=errors)
    loader.start_epoch(0, 0, np.arange(10, dtype=np.int64), np.asarray([0, 4, 8, 10], dtype=np.int64))
    seen = []
    while True:
        try:
            batch = loader.next()
        except SampleError as e:
            assert policy == "raise"
            assert (e.index, e.path, e.reason) == (5, shard, errors[5])
            seen.append("error")
            continue
        if batch is None:
            break
        seen.extend(int(i) for i in np.from_dlpack(batch[2]))
    if policy == "raise":
        assert seen == [0, 1, 2, 3, "error", 8, 9]
    elif policy == "skip":
        assert seen == [0, 1, 2, 3, 4, 6, 7, 8, 9]
        assert loader.stats()["skipped"] == 1
    else:
        assert len(seen) == 10 and 5 not in seen
        assert loader.stats()["replaced"] == 1


def test_bad_range_arguments_are_named(packed):
    _, shard, offsets, lengths = packed
    with pytest.raises(ValueError, match="offsets has 3 entries; expected one per path"):
        _C.Loader([shard] * 10, [0] * 10, _options(), offsets=[0, 1, 2])
    with pytest.raises(ValueError, match="lengths has 9 entries"):
        _C.Loader([shard] * 10, [0] * 10, _options(), lengths=lengths[:9])
    with pytest.raises(ValueError, match=r"lengths\[2\] must be >= 0 or -1"):
        _C.Loader([shard] * 10, [0] * 10, _options(), lengths=[5, 5, -2] + [5] * 7)
    with pytest.raises(ValueError, match=r"offsets\[0\] is negative"):
        _C.Loader([shard] * 10, [0] * 10, _options(), offsets=[-1] + [0] * 9)
    with pytest.raises(ValueError, match="errors has 1 entries"):
        _C.Loader([shard] * 10, [0] * 10, _options(), errors=[""])
    with pytest.raises(TypeError, match=r"errors\[1\] must be a str"):
        _C.Loader([shard] * 10, [0] * 10, _options(), errors=["", 3] + [""] * 8)
    with pytest.raises(TypeError, match="errors must be a list of str"):
        _C.Loader([shard] * 10, [0] * 10, _options(), errors="bad")
    with pytest.raises(TypeError, match="offsets must be a sequence of integers"):
        _C.Loader([shard] * 10, [0] * 10, _options(), offsets=["a"] * 10)


def test_pipe_stream_members_decode_like_their_files(packed):
    files, shard, offsets, lengths = packed
    labels = [i % 3 for i in range(10)]
    whole = _C.Loader(files, labels, _options())
    piped = _C.Loader([f"pipe:cat '{shard}'"] * 10, labels, _options(reader_threads=2),
                      offsets=offsets, lengths=lengths, pipes=[True] * 10)
    order = [2, 0, 1, 3, 6, 4, 5, 7, 9, 8]  # roughly sequential, shuffled in a small window
    for (a_img, a_lab, _), (b_img, b_lab, _) in zip(_images(whole, 10, order), _images(piped, 10, order)):
        np.testing.assert_array_equal(a_img, b_img)
        np.testing.assert_array_equal(a_lab, b_lab)
    stats = piped.stats()
    assert stats["stream_restarts"] == 0
    assert stats["bytes_read"] >= sum(lengths)


def test_pipe_stream_that_ends_early_fails_its_samples(packed):
    _, shard, offsets, lengths = packed
    path = f"pipe:head -c {offsets[7] + 5} '{shard}'"
    loader = _C.Loader([path] * 10, [0] * 10, _options(), offsets=offsets, lengths=lengths,
                       pipes=np.ones(10, dtype=bool))
    loader.start_epoch(0, 0, np.arange(10, dtype=np.int64), np.asarray([0, 4, 8, 10], dtype=np.int64))
    assert loader.next() is not None
    with pytest.raises(SampleError) as info:
        loader.next()
    assert (info.value.index, info.value.path) == (7, path)
    assert info.value.reason.startswith(f"{path}: stream ended at byte {offsets[7] + 5} before member at offset")
    loader.stop()
