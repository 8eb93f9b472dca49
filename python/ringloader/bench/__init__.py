"""Side-by-side throughput comparison: torchvision + torch DataLoader vs ringloader.

Run as ``ringloader compare`` (the console script; ``ringloader-compare`` and
``python -m ringloader.bench`` are the same program), e.g.::

    python -m ringloader.bench                      # sample set, train + eval
    python -m ringloader.bench --root /data/imagenet/train --max-images 4096
    python -m ringloader.bench --transform train --json out.json --png out.png
    python -m ringloader.bench --verbose            # also print ringloader's stats() per transform
    python -m ringloader.bench --dataset shards     # ImageFolder vs WebDataset shards, pipe:
    python -m ringloader.bench --dataset scale      # 1.28M-image folder: memory, first batch
    python -m ringloader.bench --dataset remote     # http:// shards over a throttled link, cache
    python -m ringloader.bench --dataset custom     # a user's own Dataset: ImageFile vs PIL
    python -m ringloader.bench --dataset multicrop  # the same, DINO's 2x224 + 6x96 crops
    python -m ringloader.bench --dataset dino       # DINO's whole augmentation, 2x224 + 10x96
    python -m ringloader.bench --dataset segmentation  # the same, an image and its mask a sample
    python -m ringloader.bench --dataset detection  # the same with boxes: rl.Joint vs PIL + v2
    python -m ringloader.bench --dataset detection-hflip  # torchvision's detection hflip preset
    python -m ringloader.bench --dataset detection-lsj  # its lsj preset (ScaleJitter, padded crop)
    python -m ringloader.bench --dataset detection-ssd  # its ssd preset (distort, zoom-out, IoU crop)
    python -m ringloader.bench --dataset detection-ssd-tensor  # the same, its tensor backend
    python -m ringloader.bench --dataset segmentation-joint  # image + mask, random rl.Joint
    python -m ringloader.bench --dataset segmentation-reference  # torchvision's train preset
    python -m ringloader.bench --dataset hf         # rl.HFDataset vs with_transform + torch
    python -m ringloader.bench --dataset parquet    # rl.Parquet (copy, copy=False) vs rl.ImageFolder
    python -m ringloader.bench --dataset video      # Kinetics-style clips: rl.VideoFolder vs torchcodec
    python -m ringloader.bench --tune --root /data/imagenet/train --step-ms 40   # ringloader bench --tune

For every transform pipeline (``train``: RandomResizedCrop(224) +
RandomHorizontalFlip + ToTensor + Normalize; ``eval``: Resize(256) +
CenterCrop(224) + ToTensor + Normalize) it measures

(a) ``torch.utils.data.DataLoader(torchvision.datasets.ImageFolder(root, tv_transform),
    batch_size, shuffle=True, num_workers=N, drop_last=True)`` and
(b) ``ringloader.DataLoader(ringloader.ImageFolder(root, rl_transform), <same arguments>)``

with the same number of workers.  Each measurement builds a fresh loader,
discards ``--warmup-batches`` batches (worker start-up, first decodes) and
times whole batches after that.  The consumer only checks each batch's shape
and accumulates ``labels.sum()``, so the figure is the loader's own
throughput.  Measurements of the two loaders alternate (A B B A A B ...) for
``--rounds`` rounds and the median of each is reported, so drifting load on a
shared machine affects both alike.  All files are read once before the first
measurement so that both loaders see a warm OS page cache: this compares
decode + transform + batching throughput, not disk speed.

The report is the table of medians and, per transform, one verdict line: which of
ringloader's stages (reading, decoding, or the consumer) limited it over the last round's
timed batches (:func:`judge`, from ``DataLoader.stats()``). The full record (settings, every
round, verdicts and each loader's ``stats()``) goes to ``--json PATH`` or, by default, to
:func:`default_json_path`; ``--verbose`` prints the stats too.

Modules: one per comparison, on a common harness (each imports its siblings only, never this
package):

* ``harness``: the settings of a run, one timed measurement and its verdict, alternating rounds, what a report names.
* ``pipelines``: the transform pipelines (train, eval, train-uint8, train-v2, torchvision's and timm's recipes).
* ``folder``: the headline comparison on an image folder, its report, JSON record and chart.
* ``shards``: ``--dataset shards``: ImageFolder against WebDataset shards, and ``pipe:`` at a bandwidth.
* ``remote``: ``--dataset remote``: shards over a throttled loopback link, the cache, and the peers.
* ``custom``: a user's own Dataset (``custom``, ``multicrop``, ``dino``, ``segmentation``): PIL against ImageFile.
* ``joint``: ``rl.Joint`` samples (``detection``, ``detection-hflip``, ``detection-lsj``, ``detection-ssd``, ``detection-ssd-tensor``, ``segmentation-joint``, ``segmentation-reference``).
* ``hf_parquet``: ``--dataset hf`` and ``parquet``: ``rl.HFDataset`` and ``rl.Parquet``.
* ``scale``: ``--dataset scale``: an ImageNet-sized folder of hard links, in fresh processes.
* ``video``: ``--dataset video``: Kinetics-style clips, ``rl.VideoFolder`` against torchcodec's decoder and sampler.
* ``cli``: the arguments, the checks of a run's settings, ``--tune``, and :func:`main`.
* ``__main__``: ``python -m ringloader.bench``.
"""

from __future__ import annotations

# The names scripts, tests and bench/plots.py use, as they were when this was one module.
from .cli import main, tune_command
from .custom import (RowsDataset, SegmentationRows, _write_masks, format_custom_report,
                     run_custom_benchmark)
from .folder import (default_json_path, format_report, run_benchmark, run_comparison,
                     verdict_line, write_png)
from .harness import (CROP, IMAGENET_MEAN, IMAGENET_STD, LOADERS, BenchError, Config,
                      Measurement, Result, _import_ringloader, _import_torch, _sample_data,
                      _warm_page_cache, alternating_rounds, dataset_info, judge, machine_info,
                      measure_once)
from .hf_parquet import format_arrow_report, run_arrow_benchmark
from .joint import (SEG_BASE, SEG_CROP, BoxesDataset, JointSegmentationRows,
                    detection_hflip_preset, format_detection_report,
                    format_joint_segmentation_report, format_segmentation_reference_report,
                    run_detection_benchmark, run_joint_segmentation_benchmark,
                    run_segmentation_reference_benchmark, segmentation_reference_preset)
from .pipelines import RECIPES, make_recipe, make_transform
from .remote import _ThrottledFiles, format_remote_report, run_remote_benchmark
from .scale import (SCALE_CLASSES, SCALE_IMAGES, format_scale_report, make_link_tree,
                    run_scale_benchmark, scale_child)
from .shards import format_shards_report, run_shards_benchmark
