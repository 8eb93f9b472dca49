"""Loader stress run, meant for a sanitizer build of the extension (see scripts/sanitize.sh).

Drives the public API through the paths where native memory and thread lifetimes are easiest
to get wrong, over a generated dataset with every corrupt-input case mixed in:

* full epochs (train float32 NCHW and eval uint8 NHWC; io_uring and pread; fast and reference
  decode), each batch checked for shape and finite values;
* early ``break`` then re-iteration, a superseded iterator, iterators abandoned mid-epoch and
  loaders deleted while their threads are busy;
* batches that outlive their iterator and loader (DLPack deleters run after the native loader
  is gone: a use-after-free there is an ASan report), and holding every slot until
  ``SlotsExhaustedError``, then releasing and continuing;
* single-sample access, a tiny pixel limit, files deleted/truncated/replaced after indexing;
* ``on_error="skip"/"replace"`` when the installed package has it;
* two Python threads iterating their own loaders at once (the GIL is released in ``next``).

Every ``SampleError`` must name a sample that is bad; a bad-by-construction sample must fail
when read alone. Exit status 0 means no unexpected result; the sanitizer aborts the process on
a memory error or UB by itself. Usage::

    python tests/stress/loader_stress.py [--rounds N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gc
import inspect
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "python"))  # imagegen: generated test data

import torch  # noqa: E402

import ringloader as rl  # noqa: E402
from imagegen import CORRUPT_CASES, corrupt_cases, make_image_tree  # noqa: E402
from ringloader import transforms as T  # noqa: E402

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def train_tf():
    return T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(MEAN, STD)])


def eval_tf():
    return T.Compose([T.Resize(56), T.CenterCrop(48)])


class Dataset:
    """A tree of good images (every flavour) plus a class holding every corrupt case."""

    def __init__(self, root: Path):
        flavours = [
            {}, {"subsampling": "4:4:4"}, {"subsampling": "4:2:2"}, {"progressive": True},
            {"mode": "L"}, {"mode": "CMYK"}, {"width": 300, "height": 40}, {"width": 9, "height": 7},
        ]
        spec = {
            "good_a": [dict(f, width=f.get("width", 90 + 11 * i), height=f.get("height", 70 + 7 * i))
                       for i, f in enumerate(flavours)],
            "good_b": 10,
        }
        make_image_tree(root, spec, size=(120, 90), seed=1)
        cases = corrupt_cases(root / "zbad")
        self.root = root
        ds = rl.ImageFolder(root)
        self.paths = [p for p, _ in ds.samples]
        by_path = {str(p): name for name, p in cases.items()}
        self.case_of = {i: by_path.get(p) for i, p in enumerate(self.paths)}
        # Must fail: everything not 'valid' or 'damaged' (damaged may decode with a warning).
        self.must_fail = {i for i, c in self.case_of.items()
                          if c is not None and CORRUPT_CASES[c][0] not in ("valid", "damaged")}
        self.may_fail = {i for i, c in self.case_of.items()
                         if c is not None and CORRUPT_CASES[c][0] == "damaged"} | self.must_fail

    def __len__(self) -> int:
        return len(self.paths)


class Tally:
    def __init__(self):
        self.batches = 0
        self.samples = 0
        self.sample_errors = 0
        self.lock = threading.Lock()

    def add(self, batches=0, samples=0, errors=0):
        with self.lock:
            self.batches += batches
            self.samples += samples
            self.sample_errors += errors


def check_batch(x: torch.Tensor, y: torch.Tensor, float_out: bool, nhwc: bool = False) -> None:
    assert x.shape[0] == y.shape[0] and x.shape[0] > 0, (x.shape, y.shape)
    if nhwc:
        assert tuple(x.shape[1:]) == (48, 48, 3), x.shape
    else:
        assert tuple(x.shape[1:]) == (3, 48, 48), x.shape
    if float_out:
        assert x.dtype == torch.float32 and bool(torch.isfinite(x).all())
    else:
        assert x.dtype == torch.uint8
    assert int(y.min()) >= 0


def run_epoch(loader, data: Dataset, tally: Tally, float_out=True, nhwc=False, stop_after=None,
              allowed_bad=None):
    """Iterates one epoch (or `stop_after` batches), checking batches and errors."""
    allowed = data.may_fail if allowed_bad is None else allowed_bad
    it = iter(loader)
    n = 0
    while stop_after is None or n < stop_after:
        try:
            x, y = next(it)
        except StopIteration:
            break
        except rl.SampleError as e:
            assert e.index in allowed, f"sample {e.index} ({data.paths[e.index]}) failed: {e}"
            tally.add(batches=1, errors=1)
        else:
            check_batch(x, y, float_out, nhwc)
            tally.add(batches=1, samples=int(y.shape[0]))
        n += 1
    return it


def scenario_full_epochs(ds_train, ds_eval, data, tally, rnd):
    io = "pread" if rnd % 2 else "auto"
    for kw in ({}, {"fast_decode": False}, {"reader_threads": 2, "io_depth": 2, "num_workers": 3}):
        kw = {"num_workers": 2, **kw}
        loader = rl.DataLoader(ds_train, batch_size=4, shuffle=True, io=io, **kw)
        for _ in range(2):
            run_epoch(loader, data, tally)
    loader = rl.DataLoader(ds_eval, batch_size=5, num_workers=2, layout="NHWC", io=io)
    run_epoch(loader, data, tally, float_out=False, nhwc=True)


def scenario_breaks_and_supersede(ds_train, data, tally):
    loader = rl.DataLoader(ds_train, batch_size=3, shuffle=True, num_workers=2, prefetch_factor=4)
    for k in (0, 1, 3):
        run_epoch(loader, data, tally, stop_after=k)  # abandoned: __del__ stops the epoch
    run_epoch(loader, data, tally)
    first = iter(loader)
    second = iter(loader)
    try:
        next(first)
        raise AssertionError("a superseded iterator kept yielding")
    except RuntimeError:
        pass
    for batch in _safe_iter(second, data, tally):
        del batch
    # Abandoned with reads and decodes in flight, then the loader itself dropped.
    it = run_epoch(loader, data, tally, stop_after=1)
    del loader, it
    gc.collect()


def scenario_batches_outlive_loader(ds_train, data, tally):
    loader = rl.DataLoader(ds_train, batch_size=4, num_workers=2)
    kept = []
    for i, item in enumerate(_safe_iter(loader, data, tally)):
        if i % 2 == 0:
            kept.append(item)
    del loader, item
    gc.collect()
    # The slots these tensors view were allocated by the (now destroyed) native loader.
    total = sum(float(x.sum()) for x, _ in kept)
    assert total == total  # not NaN
    kept.clear()
    gc.collect()


def scenario_slots_exhausted(ds_eval, data, tally):
    loader = rl.DataLoader(ds_eval, batch_size=4, num_workers=1, prefetch_factor=2, max_slots=3)
    held, exhausted = [], 0
    it = iter(loader)
    while True:
        try:
            held.append(next(it))
        except StopIteration:
            break
        except rl.SampleError as e:
            assert e.index in data.may_fail, e
        except rl.SlotsExhaustedError:
            exhausted += 1
            assert exhausted < 100, "SlotsExhaustedError did not clear after releasing batches"
            held.clear()  # frees the slots; the refused batch is delivered by the next call
            gc.collect()
    assert exhausted > 0, "holding every slot never reported SlotsExhaustedError"
    tally.add(batches=len(held))


def scenario_single_samples(ds_train, data, tally):
    for i in range(len(data)):
        try:
            x, y = ds_train[i]
        except rl.SampleError as e:
            assert i in data.may_fail and e.index == i, (i, e)
            tally.add(errors=1)
        else:
            assert i not in data.must_fail, f"{data.paths[i]} decoded but must fail"
            assert tuple(x.shape) == (3, 48, 48) and bool(torch.isfinite(x).all())
            tally.add(samples=1)


def scenario_pixel_limit(ds_eval, data, tally):
    loader = rl.DataLoader(ds_eval, batch_size=8, num_workers=2, max_image_pixels=8 * 8)
    everything = set(range(len(data)))
    run_epoch(loader, data, tally, float_out=False, allowed_bad=everything)


def scenario_files_change(data, tally, workdir: Path):
    root = workdir / "mutating"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(data.root, root)
    ds = rl.ImageFolder(root, transform=train_tf())
    paths = [p for p, _ in ds.samples]
    good = [i for i in range(len(paths)) if i not in data.may_fail and data.case_of[i] is None]
    deleted, truncated, replaced = good[0], good[3], good[6]
    os.remove(paths[deleted])
    data_t = Path(paths[truncated]).read_bytes()
    Path(paths[truncated]).write_bytes(data_t[: len(data_t) // 3])
    os.remove(paths[replaced])
    os.mkdir(paths[replaced])
    allowed = data.may_fail | {deleted, truncated, replaced}
    loader = rl.DataLoader(ds, batch_size=4, num_workers=2)
    run_epoch(loader, data, tally, allowed_bad=allowed)
    shutil.rmtree(root)


def scenario_error_policies(ds_train, data, tally):
    if "on_error" not in inspect.signature(rl.DataLoader.__init__).parameters:
        return
    for policy in ("skip", "replace"):
        loader = rl.DataLoader(ds_train, batch_size=4, shuffle=True, num_workers=2, on_error=policy)
        for _ in range(2):
            for x, y in loader:  # no SampleError may escape under these policies
                check_batch(x, y, float_out=True)
                tally.add(batches=1, samples=int(y.shape[0]))
        run_epoch(loader, data, tally, stop_after=2)


def scenario_threads(ds_train, ds_eval, data, tally):
    errors = []

    def work(ds, float_out):
        try:
            loader = rl.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2)
            for _ in range(2):
                run_epoch(loader, data, tally, float_out=float_out)
        except BaseException as e:  # surfaced in the main thread below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(ds_train, True)),
               threading.Thread(target=work, args=(ds_eval, False))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _safe_iter(loader_or_iter, data, tally):
    """Yields the good batches; bad ones must be bad samples."""
    it = iter(loader_or_iter)
    while True:
        try:
            x, y = next(it)
        except StopIteration:
            return
        except rl.SampleError as e:
            assert e.index in data.may_fail, e
            tally.add(batches=1, errors=1)
            continue
        tally.add(batches=1, samples=int(y.shape[0]))
        yield x, y


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--keep", type=Path, default=None, help="generate data here and keep it")
    args = parser.parse_args()

    workdir = args.keep or Path(tempfile.mkdtemp(prefix="ringloader_stress_"))
    t0 = time.monotonic()
    try:
        data = Dataset(workdir / "tree")
        ds_train = rl.ImageFolder(data.root, transform=train_tf())
        ds_eval = rl.ImageFolder(data.root, transform=eval_tf())
        backend = rl.DataLoader(ds_eval, batch_size=4).stats()["io_backend"]
        print(f"stress: extension {rl._C.__file__}, io backend for io='auto': {backend}")
        print(f"stress: {len(data)} samples, {len(data.must_fail)} must fail, "
              f"{len(data.may_fail) - len(data.must_fail)} damaged, rounds={args.rounds}")
        tally = Tally()
        scenarios = [
            ("full_epochs", lambda r: scenario_full_epochs(ds_train, ds_eval, data, tally, r)),
            ("breaks_and_supersede", lambda r: scenario_breaks_and_supersede(ds_train, data, tally)),
            ("batches_outlive_loader", lambda r: scenario_batches_outlive_loader(ds_train, data, tally)),
            ("slots_exhausted", lambda r: scenario_slots_exhausted(ds_eval, data, tally)),
            ("single_samples", lambda r: scenario_single_samples(ds_train, data, tally)),
            ("pixel_limit", lambda r: scenario_pixel_limit(ds_eval, data, tally)),
            ("files_change", lambda r: scenario_files_change(data, tally, workdir)),
            ("error_policies", lambda r: scenario_error_policies(ds_train, data, tally)),
            ("threads", lambda r: scenario_threads(ds_train, ds_eval, data, tally)),
        ]
        for rnd in range(args.rounds):
            for name, fn in scenarios:
                ts = time.monotonic()
                fn(rnd)
                gc.collect()
                print(f"stress: round {rnd} {name:<24s} {time.monotonic() - ts:6.2f} s", flush=True)
        print(f"stress: OK in {time.monotonic() - t0:.1f} s: {tally.batches} batches, "
              f"{tally.samples} samples delivered, {tally.sample_errors} sample errors (expected)")
        return 0
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
