"""Kinetics-style video clips (``--dataset video``): ``rl.VideoFolder`` under ringloader's
DataLoader against torchcodec's ``VideoDecoder`` and ``clips_at_random_indices`` in a Dataset
under torch's DataLoader, the same workers, batches and transform, side by side.

Each sample is one clip of 16 frames, 4 frames apart (``num_indices_between_frames=4``), drawn at
random from a short 360p H.264 clip that the ffmpeg CLI makes in a temporary folder (removed
afterwards), then torchvision v2 on the decoded ``[T, C, H, W]`` clip as a ``tv_tensors.Video``:
RandomResizedCrop(224), RandomHorizontalFlip, ToDtype(float32, scale=True), Normalize. Batches
of 8 clips, shuffled; each measurement builds a fresh loader, discards one batch (worker start,
first opens) and times the next ones; the loaders alternate (A B C C B A ...) for ``--rounds``
rounds and the median clips/s of each is reported, with the load average of the machine.

ringloader runs twice: with the transform as a Python callable (``KineticsTransform``), which
keeps the clips in torch's worker processes (decoded there by ringloader's FFmpeg decoder: the
path before native clip batches), and with the v2 ``Compose`` itself, which ``rl.DataLoader``
batches natively (``ringloader.video_batches``: ``num_workers`` native decode threads, the
transform native with one draw per clip). The native loader's ``stats()`` gives the frames
decoded per frame kept.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

from .harness import IMAGENET_MEAN, IMAGENET_STD, BenchError, _import_ringloader

FRAMES, STRIDE, CROP = 16, 4, 224
BATCH, TIMED_BATCHES = 8, 8
#: (videos, seconds each, size, rate, GOP): small, 360p, a keyframe every 2 s as on YouTube.
VIDEOS, SECONDS, SIZE, RATE, GOP = 8, 6, "640x360", 30, 60


def make_videos(root: Path, log: Callable[[str], None]) -> Path:
    """``VIDEOS`` H.264 clips (yuv420p, B-frames, x264's defaults) in two class folders."""
    if shutil.which("ffmpeg") is None:
        raise BenchError("--dataset video needs the ffmpeg CLI to make its clips (apt install ffmpeg)")
    log(f"making {VIDEOS} {SIZE} H.264 clips of {SECONDS} s with ffmpeg ...")
    for k in range(VIDEOS):
        folder = root / f"class_{k % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        source = f"testsrc2=size={SIZE}:rate={RATE}:duration={SECONDS},hue=h={k * 40}"
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi",
                        "-i", source, "-c:v", "libx264", "-preset", "fast", "-g", str(GOP),
                        "-pix_fmt", "yuv420p", str(folder / f"clip_{k:02d}.mp4")], check=True)
    return root


class KineticsTransform:
    """RandomResizedCrop(224), flip, float, Normalize on one clip's frames (one draw for all of
    them, v2 on a ``tv_tensors.Video``); a clip sampler's ``[1, T, C, H, W]`` is taken as its
    one clip."""

    def __init__(self) -> None:
        self.steps = kinetics_v2()

    def __call__(self, clip: Any) -> Any:
        from torchvision import tv_tensors

        if clip.dim() == 5:
            clip = clip[0]
        return self.steps(tv_tensors.Video(clip)).as_subclass(type(clip))


def kinetics_v2() -> Any:
    """The v2 chain itself (what ``rl.DataLoader`` runs natively on a clip)."""
    import torch
    from torchvision.transforms import v2

    return v2.Compose([v2.RandomResizedCrop(CROP, antialias=True), v2.RandomHorizontalFlip(),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


class TorchcodecClips:
    """The Dataset a torchcodec user writes: open the file, sample one clip, transform it."""

    def __init__(self, samples: list, transform: Any):
        self.samples, self.transform = samples, transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Any:
        from torchcodec.decoders import VideoDecoder
        from torchcodec.samplers import clips_at_random_indices

        path, label = self.samples[i]
        frames = clips_at_random_indices(VideoDecoder(path), num_clips=1, num_frames_per_clip=FRAMES,
                                         num_indices_between_frames=STRIDE).data
        return self.transform(frames[0]), label


def _measure(make: Callable[[], Any], batches: int, work: list) -> float:
    """Clips per second of ``batches`` batches after one untimed batch, from a fresh loader;
    a native video loader's frames decoded per frame kept are appended to ``work``."""
    loader = make()
    it = iter(loader)
    clip, _ = next(it)
    if tuple(clip.shape[-4:]) != (FRAMES, 3, CROP, CROP) or clip[0].numel() != FRAMES * 3 * CROP * CROP:
        raise BenchError(f"unexpected clip batch shape {tuple(clip.shape)}")
    count, start = 0, time.perf_counter()
    for _ in range(batches):
        clip, _ = next(it)
        count += clip.shape[0]
    seconds = time.perf_counter() - start
    video = loader.stats().get("video") if hasattr(loader, "stats") else None
    if video:
        work.append(video["frames_decoded_per_kept"])
    del it, loader
    return count / seconds


def _load() -> str:
    try:
        return "load average " + ", ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "load average unknown"


def run_video_benchmark(args: Any, log: Callable[[str], None]) -> dict:
    """Both loaders over the same clips, alternating; returns the report."""
    rl = _import_ringloader()
    import torch

    try:
        import torchcodec  # noqa: F401
    except ImportError as e:
        raise BenchError(f"--dataset video compares with torchcodec: pip install torchcodec ({e})")
    workers, rounds = args.num_workers, max(1, args.rounds)
    torch.manual_seed(args.seed)
    temp = Path(tempfile.mkdtemp(prefix="ringloader-video-bench-"))
    try:
        root = make_videos(temp / "clips", log)
        transform = KineticsTransform()
        sampler = rl.clips.random_indices(num_clips=1, num_frames_per_clip=FRAMES,
                                          num_indices_between_frames=STRIDE)
        folder = rl.VideoFolder(root, clip=sampler, transform=transform)
        native = rl.VideoFolder(root, clip=sampler, transform=kinetics_v2())
        total = BATCH * (TIMED_BATCHES + 1)
        order = [i % len(folder) for i in range(total)]
        ours = torch.utils.data.Subset(folder, order)
        ours_native = torch.utils.data.Subset(native, order)
        theirs = TorchcodecClips([folder.samples[i] for i in order], transform)
        common = dict(batch_size=BATCH, shuffle=True, num_workers=workers, drop_last=True)

        def make_ringloader() -> Any:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", rl.FallbackWarning)
                return rl.DataLoader(ours, **common)

        def make_native() -> Any:
            with warnings.catch_warnings():
                warnings.simplefilter("error", rl.FallbackWarning)  # it must batch natively
                return rl.DataLoader(ours_native, **common)

        def make_torch() -> Any:
            return torch.utils.data.DataLoader(theirs, **common)

        makers = {"torchcodec": make_torch, "ringloader": make_ringloader, "native": make_native}
        rates: dict = {name: [] for name in makers}
        work: list = []
        loads = [_load()]
        for r in range(rounds):
            names = list(makers) if r % 2 == 0 else list(reversed(makers))
            for name in names:
                rate = _measure(makers[name], TIMED_BATCHES, work)
                rates[name].append(rate)
                log(f"round {r + 1}/{rounds} {name}: {rate:.1f} clips/s")
        loads.append(_load())
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    medians = {name: statistics.median(v) for name, v in rates.items()}
    return {"workers": workers, "rounds": rounds, "batch_size": BATCH,
            "timed_clips": BATCH * TIMED_BATCHES, "rates": rates, "median": medians,
            "ratio": medians["ringloader"] / medians["torchcodec"],
            "native_ratio": medians["native"] / medians["torchcodec"], "load": loads,
            "decoded_per_kept": statistics.median(work) if work else 0.0,
            "videos": f"{VIDEOS} x {SECONDS} s {SIZE} {RATE} fps H.264 (libx264 fast, GOP {GOP})"}


def format_video_report(report: dict) -> str:
    m = report["median"]
    lines = [
        f"Kinetics-style clips: {FRAMES} frames, stride {STRIDE}, RandomResizedCrop({CROP}) + flip "
        f"+ normalize (v2 on the clip), batches of {report['batch_size']}, "
        f"{report['workers']} workers each",
        f"videos: {report['videos']}; {report['timed_clips']} clips timed per measurement, "
        f"median of {report['rounds']} alternating rounds",
        f"  torchcodec VideoDecoder + clips_at_random_indices, torch DataLoader: "
        f"{m['torchcodec']:8.1f} clips/s",
        f"  ringloader VideoFolder + rl.DataLoader, Python transform (worker processes): "
        f"{m['ringloader']:8.1f} clips/s",
        f"  ringloader VideoFolder + rl.DataLoader, v2 transform (native clip batches): "
        f"{m['native']:8.1f} clips/s",
        f"  ratio ringloader / torchcodec: {report['ratio']:.2f}x (worker processes), "
        f"{report['native_ratio']:.2f}x (native)",
        f"  native decode work: {report['decoded_per_kept']:.2f} frames decoded per frame kept",
        f"  {report['load'][0]} (start), {report['load'][-1]} (end)",
    ]
    return "\n".join(lines)
