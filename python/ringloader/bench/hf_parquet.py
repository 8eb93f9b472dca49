"""Arrow-backed data (``--dataset hf``, ``parquet``): ``rl.HFDataset`` against
``with_transform`` under torch's DataLoader, ``rl.Parquet`` (its copy, and ``copy=False``)
against ``rl.ImageFolder`` over the same images."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Callable

from .harness import (Config, _import_ringloader, _import_torch, _warm_page_cache, alternating_rounds,
                      native_build_seconds, ringloader_factory)
from .pipelines import make_transform


def run_arrow_benchmark(cfg: Config, kind: str, log: Callable[[str], None]) -> dict[str, Any]:
    """``hf``: the images saved as a Hugging Face dataset (``save_to_disk``, an Image feature),
    ``rl.HFDataset`` vs ``with_transform`` under torch's DataLoader. ``parquet``: the same images
    in Parquet files of row groups, ``rl.Parquet`` vs ``rl.ImageFolder``. Train transform,
    shuffled, ``cfg.num_workers`` workers each, alternating rounds (medians)."""
    import tempfile

    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch.utils.data as tud

    torch, torchvision = _import_torch()
    rl = _import_ringloader()
    folder = rl.ImageFolder(str(cfg.root))
    rows = list(folder.samples)
    train = make_transform(torchvision.transforms, "train")
    work = Path(tempfile.mkdtemp(prefix=f"ringloader-bench-{kind}-"))
    try:
        log(f"writing the {len(rows)} images as {kind} under {work} ...")
        images = [{"bytes": Path(p).read_bytes(), "path": None} for p, _ in rows]
        labels = [int(c) for _, c in rows]
        if kind == "hf":
            datasets.Dataset.from_dict({"image": images, "label": labels}).cast_column(
                "image", datasets.Image()).save_to_disk(str(work / "saved"))
            hf = datasets.load_from_disk(str(work / "saved"))

            def decode(batch: dict) -> dict:
                return {"image": [train(im.convert("RGB")) for im in batch["image"]],
                        "label": batch["label"]}

            native = rl.HFDataset(hf, transform=train)
            baseline = ("torch", lambda: tud.DataLoader(
                hf.with_transform(decode), batch_size=cfg.batch_size, shuffle=True,
                num_workers=cfg.num_workers, drop_last=True))
            # The same files natively: rl.HFDataset's rate is to be read against it (the ratio
            # to torch is bounded by the native decode rate, not by the Arrow path).
            reference = ("ringloader ImageFolder", ringloader_factory(
                rl.ImageFolder(str(cfg.root), transform=train), cfg))
        else:
            table = pa.table({"image": images, "label": labels})
            for k in range(4):
                lo, hi = k * len(rows) // 4, (k + 1) * len(rows) // 4
                pq.write_table(table.slice(lo, hi - lo),
                               work / f"part-{k}.parquet", row_group_size=256)
            t0 = time.perf_counter()
            native = rl.Parquet(str(work / "*.parquet"), transform=train,
                                cache_dir=work / "arrow")
            convert_s = time.perf_counter() - t0  # the first pass: every row group into the copy
            t0 = time.perf_counter()
            on_demand = rl.Parquet(str(work / "*.parquet"), transform=train, copy=False)
            on_demand_s = time.perf_counter() - t0  # the label column only
            parquet_mb = sum(f.stat().st_size for f in work.glob("*.parquet")) / 1e6
            baseline = ("ringloader ImageFolder", ringloader_factory(
                rl.ImageFolder(str(cfg.root), transform=train), cfg))
        del images
        build_s = native_build_seconds(native, cfg, f"rl.{type(native).__name__}")
        factories = {baseline[0]: baseline[1]}
        if kind == "hf":
            factories[reference[0]] = reference[1]
        if kind == "parquet":
            # Row groups read on demand (the row groups permuted and a shuffle buffer), before
            # the copy (globally shuffled, torch's order), which the report ends with.
            factories["ringloader Parquet copy=False"] = ringloader_factory(on_demand, cfg)
        factories[f"ringloader {type(native).__name__}"] = ringloader_factory(native, cfg)
        _warm_page_cache(cfg.root)
        results, _ = alternating_rounds(factories, cfg, kind, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"kind": kind, "build_seconds": build_s,
            **({"convert_seconds": convert_s, "parquet_mb": parquet_mb,
                "on_demand_build_seconds": on_demand_s} if kind == "parquet" else {}),
            "results": {name: {"runs": res.runs, "median_samples_per_s": res.median}
                        for name, res in results.items()}}


def format_arrow_report(cfg: Config, data: dict[str, Any], report: dict[str, Any]) -> str:
    rates = [(k, v["median_samples_per_s"]) for k, v in report["results"].items()]
    (base, b), (mine, m) = rates[0], rates[-1]
    what = ("a Hugging Face dataset (save_to_disk)" if report["kind"] == "hf"
            else "Parquet files (shuffled across row groups)")
    base_what = "torch DataLoader + with_transform" if report["kind"] == "hf" else base
    lines = [
        f"ringloader {report['kind']} benchmark: {data['images']} images as {what}, train "
        f"transform, batch {cfg.batch_size}, {cfg.num_workers} workers each, median of "
        f"{cfg.rounds} rounds",
        f"  {base_what:34s}: {b:8.0f} samples/s"]
    # hf: the same files as a ringloader ImageFolder, the native rate the HFDataset can reach.
    lines += [f"  {name:34s}: {r:8.0f} samples/s ({r / b:.2f}x)" for name, r in rates[1:-1]]
    lines += [f"  {mine:34s}: {m:8.0f} samples/s ({m / b:.2f}x)",
              "  building the loader (the table's columns, no object a row): "
              f"{report['build_seconds']:.2f} s"]
    if "convert_seconds" in report:
        lines.append(f"  first rl.Parquet (its Arrow copy of {report['parquet_mb']:.1f} MB of "
                     f"Parquet): {report['convert_seconds']:.2f} s; rl.Parquet(copy=False) (the "
                     f"label column only): {report['on_demand_build_seconds']:.2f} s")
    return "\n".join(lines)
