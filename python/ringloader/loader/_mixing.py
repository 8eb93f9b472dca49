"""The native path's batch stage: CutMix and MixUp applied to a batch where it lies in its slot.

``DataLoader(batch_transform=...)`` takes torchvision's ``v2.CutMix``, ``v2.MixUp``, a
``v2.RandomChoice`` of them, or timm's ``timm.data.Mixup`` (``mode="batch"``). The object is read
for its parameters at every batch (so ``mixup.mixup_enabled = False``, as timm's training script
sets after ``mixup_off_epoch``, takes effect at the next batch) and never called: its sampling
is redone here from a generator seeded by (the epoch's base seed, the batch's number in the
epoch), so the mixing of a batch is the same for any ``num_workers`` and after a resume.

The draws follow each library's own rules (Beta(alpha, alpha) lambda; the CutMix box from
lambda, clipped, lambda then set from the box area; torchvision pairs row i with row i-1 (the
batch rolled by one), timm with row B-1-i (the batch flipped)), and the arithmetic is the same
sequence of tensor operations, so given the same parameters the result equals theirs bit for
bit. The images are changed in place (their slot), with temporaries of at most an eighth of
the batch; labels become float32 [B, num_classes] tensors.
"""

from __future__ import annotations

import math
from typing import Any, List, NamedTuple, Optional, Tuple

import numpy as np

# Mixed into the seed so that the batch stage's stream differs from every per-sample one.
_STREAM = 0x6D69786D  # "mixm"


class MixParams(NamedTuple):
    """What is done to one batch.

    ``kind``: "none", "mixup" or "cutmix". ``lam``: the weight of a row's own label (for CutMix,
    after the area correction). ``box``: (y1, y2, x1, x2) for CutMix. ``pairing``: "roll" (row
    i takes from row i-1: torchvision) or "flip" (from row B-1-i: timm). ``on``/``off``: the
    label values of the own class and the others before mixing (timm's label smoothing).
    """

    kind: str
    lam: float
    box: Optional[Tuple[int, int, int, int]]
    pairing: str
    num_classes: int
    on: float = 1.0
    off: float = 0.0


def _torchvision_kinds(obj: Any) -> Optional[List[Tuple[float, Any]]]:
    """[(probability, CutMix or MixUp)] for a torchvision v2 CutMix/MixUp/RandomChoice of them,
    or None when ``obj`` is none of these."""
    try:
        from torchvision.transforms import v2
    except ImportError:
        return None
    if isinstance(obj, (v2.CutMix, v2.MixUp)):
        return [(1.0, obj)]
    if isinstance(obj, v2.RandomChoice):
        members = list(obj.transforms)
        bad = [type(t).__name__ for t in members if not isinstance(t, (v2.CutMix, v2.MixUp))]
        if bad or not members:
            raise TypeError(
                "batch_transform=v2.RandomChoice(...) must choose among v2.CutMix and v2.MixUp "
                f"only, got {', '.join(bad) or 'no transforms'}")
        return list(zip((float(p) for p in obj.p), members))
    return None


def _is_timm_mixup(obj: Any) -> bool:
    """timm's Mixup or a subclass of it (FastCollateMixup), without importing timm."""
    return any(c.__name__ == "Mixup" and c.__module__.startswith("timm.") for c in type(obj).__mro__)


def check(obj: Any, dtype: str, batch_size: Optional[int]) -> str:
    """Validates ``batch_transform`` for a loader yielding ``dtype`` batches of ``batch_size``
    rows (None: a batch_sampler's); returns a description for ``describe()``."""
    kinds = _torchvision_kinds(obj)
    if kinds is not None:
        names = []
        for _, t in kinds:
            if t.num_classes is None:
                raise ValueError(f"batch_transform={type(t).__name__}(num_classes=None): the native "
                                 "path's labels are class indices, pass num_classes")
            names.append(f"{type(t).__name__}(alpha={t.alpha}, num_classes={t.num_classes})")
            if isinstance(t, _mixup_class()) and dtype == "uint8":
                raise ValueError(_uint8_message(type(t).__name__))
        if len({t.num_classes for _, t in kinds}) > 1:
            raise ValueError("batch_transform=v2.RandomChoice(...): its CutMix/MixUp disagree on "
                             "num_classes")
        text = names[0] if len(names) == 1 else "RandomChoice(" + ", ".join(
            f"{n} p={p:g}" for (p, _), n in zip(kinds, names)) + ")"
        return f"torchvision {text}"
    if _is_timm_mixup(obj):
        if type(obj).__name__ != "Mixup":
            raise TypeError(f"batch_transform: timm's {type(obj).__name__} mixes while collating "
                            "samples; pass timm.data.Mixup")
        _timm_settings(obj)
        if obj.mixup_alpha > 0 and dtype == "uint8":
            raise ValueError(_uint8_message("timm Mixup(mixup_alpha > 0)"))
        if batch_size is not None and batch_size % 2:
            raise ValueError(f"batch_transform=timm Mixup needs an even batch size (it pairs row i "
                             f"with row B-1-i), got batch_size={batch_size}")
        return (f"timm Mixup(mixup_alpha={obj.mixup_alpha}, cutmix_alpha={obj.cutmix_alpha}, "
                f"cutmix_minmax={obj.cutmix_minmax}, prob={obj.mix_prob}, switch_prob={obj.switch_prob}, "
                f"label_smoothing={obj.label_smoothing}, num_classes={obj.num_classes})")
    raise TypeError(
        f"batch_transform must be torchvision's v2.CutMix, v2.MixUp, a v2.RandomChoice of them, or "
        f"timm.data.Mixup, got {type(obj).__module__}.{type(obj).__name__}; for anything else use "
        "collate_fn (it receives the list of samples) or transform the batch in the loop")


def _mixup_class():
    from torchvision.transforms import v2

    return v2.MixUp


def _uint8_message(what: str) -> str:
    return (f"batch_transform={what} blends pixels, which needs floating images, but this loader "
            "yields uint8 batches: end the transform with ToTensor()/ToDtype(torch.float32, "
            "scale=True) or pass dtype=torch.float32 (CutMix alone works on uint8)")


def _timm_settings(obj: Any) -> None:
    if getattr(obj, "mode", "batch") != "batch":
        raise ValueError(f"batch_transform=timm Mixup(mode={obj.mode!r}): only mode='batch' (one "
                         "lambda per batch) is supported")
    if getattr(obj, "multi_label", False):
        raise ValueError("batch_transform=timm Mixup(multi_label=True): the native path's labels "
                         "are class indices")
    if not (obj.mixup_alpha > 0 or obj.cutmix_alpha > 0):
        raise ValueError("batch_transform=timm Mixup: one of mixup_alpha > 0, cutmix_alpha > 0 or "
                         "cutmix_minmax should be set")


def rng(base_seed: int, number: int) -> np.random.Generator:
    """The generator of batch ``number`` (its position in the epoch) of the epoch ``base_seed``."""
    return np.random.Generator(np.random.PCG64(
        np.random.SeedSequence([base_seed & (2**64 - 1), int(number), _STREAM])))


def sample(obj: Any, gen: np.random.Generator, batch: int, height: int, width: int) -> MixParams:
    """Draws one batch's parameters as ``obj`` would draw them."""
    kinds = _torchvision_kinds(obj)
    if kinds is not None:
        t = kinds[0][1]
        if len(kinds) > 1:
            # RandomChoice: one member by its probabilities (torch.multinomial over p).
            cumulative = np.cumsum([p for p, _ in kinds])
            pick = int(np.searchsorted(cumulative, gen.random() * cumulative[-1], side="right"))
            t = kinds[min(pick, len(kinds) - 1)][1]
        lam = float(gen.beta(t.alpha, t.alpha))
        if isinstance(t, _mixup_class()):
            return MixParams("mixup", lam, None, "roll", int(t.num_classes))
        # CutMix: a box centred on a uniform pixel, half-sides 0.5 * sqrt(1 - lam) of the image,
        # clipped to it; lambda from the area actually cut.
        r_x, r_y = int(gen.integers(width)), int(gen.integers(height))
        r = 0.5 * math.sqrt(1.0 - lam)
        r_w_half, r_h_half = int(r * width), int(r * height)
        x1, y1 = max(r_x - r_w_half, 0), max(r_y - r_h_half, 0)
        x2, y2 = min(r_x + r_w_half, width), min(r_y + r_h_half, height)
        lam = float(1.0 - (x2 - x1) * (y2 - y1) / (width * height))
        return MixParams("cutmix", lam, (y1, y2, x1, x2), "roll", int(t.num_classes))
    # timm Mixup, mode="batch".
    _timm_settings(obj)
    smoothing, classes = float(obj.label_smoothing), int(obj.num_classes)
    off = smoothing / classes
    on = 1.0 - smoothing + off
    none = MixParams("none", 1.0, None, "flip", classes, on, off)
    if not (obj.mixup_enabled and gen.random() < obj.mix_prob):
        return none
    use_cutmix = False
    if obj.mixup_alpha > 0 and obj.cutmix_alpha > 0:
        use_cutmix = bool(gen.random() < obj.switch_prob)
        alpha = obj.cutmix_alpha if use_cutmix else obj.mixup_alpha
    elif obj.mixup_alpha > 0:
        alpha = obj.mixup_alpha
    else:
        use_cutmix, alpha = True, obj.cutmix_alpha
    lam = float(gen.beta(alpha, alpha))
    if lam == 1.0:
        return none
    if not use_cutmix:
        return MixParams("mixup", lam, None, "flip", classes, on, off)
    if obj.cutmix_minmax is not None:
        low, high = obj.cutmix_minmax
        cut_h = int(gen.integers(int(height * low), int(height * high)))
        cut_w = int(gen.integers(int(width * low), int(width * high)))
        y1, x1 = int(gen.integers(0, height - cut_h + 1)), int(gen.integers(0, width - cut_w + 1))
        y2, x2 = y1 + cut_h, x1 + cut_w
    else:
        # A box of sides sqrt(1 - lam) of the image's around a uniform centre, clipped.
        ratio = math.sqrt(1 - lam)
        cut_h, cut_w = int(height * ratio), int(width * ratio)
        cy, cx = int(gen.integers(0, height)), int(gen.integers(0, width))
        y1, y2 = min(max(cy - cut_h // 2, 0), height), min(max(cy + (cut_h + 1) // 2, 0), height)
        x1, x2 = min(max(cx - cut_w // 2, 0), width), min(max(cx + (cut_w + 1) // 2, 0), width)
    if obj.correct_lam or obj.cutmix_minmax is not None:
        lam = 1.0 - (y2 - y1) * (x2 - x1) / float(height * width)
    return MixParams("cutmix", lam, (y1, y2, x1, x2), "flip", classes, on, off)


def apply(images: Any, labels: Any, p: MixParams) -> Any:
    """Mixes ``images`` (an NCHW-shaped view of the slot, any strides) in place by ``p``;
    returns the soft labels, float32 [B, num_classes], on the labels' device."""
    import torch

    batch = images.shape[0]
    if p.pairing == "flip" and batch % 2:
        raise ValueError(f"batch_transform=timm Mixup needs an even batch size (it pairs row i with "
                         f"row B-1-i), got a batch of {batch} rows: pass drop_last=True")
    if p.kind == "mixup":
        (_mix_rolled if p.pairing == "roll" else _mix_flipped)(images, p.lam)
    elif p.kind == "cutmix":
        y1, y2, x1, x2 = p.box
        region = images[:, :, y1:y2, x1:x2]
        # roll/flip return copies (only the box): the source is read before it is overwritten.
        region.copy_(region.roll(1, 0) if p.pairing == "roll" else region.flip(0))
    labels = labels.long()
    if p.pairing == "roll":
        # As torchvision's _mixup_label: one-hot, float, rolled * (1 - lam) + own * lam.
        soft = torch.nn.functional.one_hot(labels, num_classes=p.num_classes).float()
        return soft.roll(1, 0).mul_(1.0 - p.lam).add_(soft.mul(p.lam))
    # As timm's mixup_target: smoothed one-hot, own * lam + flipped * (1 - lam).
    own = torch.full((batch, p.num_classes), p.off, device=labels.device).scatter_(
        1, labels.view(-1, 1), p.on)
    return own * p.lam + own.flip(0) * (1.0 - p.lam)


def _chunk(batch: int) -> int:
    return max(1, (batch + 7) // 8)


def _mix_rolled(x: Any, lam: float) -> None:
    """x[i] = x[i-1] * (1 - lam) + x[i] * lam for every row (x[-1] for row 0), in place.

    Rows are rewritten from the last down, so the rows a chunk reads (just below it) still hold
    their original values; row 0 takes the saved last row."""
    batch = x.shape[0]
    last = x[batch - 1].clone()
    step, end = _chunk(batch), batch
    while end > 1:
        start = max(1, end - step)
        partner = x[start - 1:end - 1].mul(1.0 - lam)
        x[start:end].mul_(lam).add_(partner)
        end = start
    x[0].mul_(lam).add_(last.mul_(1.0 - lam))


def _mix_flipped(x: Any, lam: float) -> None:
    """x[i] = x[i] * lam + x[B-1-i] * (1 - lam) for every row, in place (B even): each pair of
    rows is rewritten together from a copy of one side."""
    batch = x.shape[0]
    half, step = batch // 2, _chunk(batch)
    for start in range(0, half, step):
        end = min(half, start + step)
        top, bottom = x[start:end], x[batch - end:batch - start]
        saved = top.clone()
        top.mul_(lam).add_(bottom.flip(0).mul_(1.0 - lam))
        bottom.mul_(lam).add_(saved.flip(0).mul_(1.0 - lam))


# ---- a collate_fn that only mixes after torch's default_collate --------------------------------

# The shapes of ``collate_fn`` torchvision's classification reference and scripts like it write:
# ``lambda batch: mixup_cutmix(*default_collate(batch))`` (or the same nested ``def``), the
# mixing object and default_collate each a closure variable or a module global. Compiled here by
# the running interpreter, so their instructions compare with the user's function.
_COLLATE_SHAPES = """
def free_global():
    mix = None
    return lambda batch: mix(*default_collate(batch))
def free_free():
    mix = default_collate = None
    return lambda batch: mix(*default_collate(batch))
def global_global():
    return lambda batch: mix(*default_collate(batch))
def global_free():
    default_collate = None
    return lambda batch: mix(*default_collate(batch))
"""
_LOADS = {"LOAD_DEREF", "LOAD_GLOBAL", "LOAD_FAST", "LOAD_CLOSURE", "LOAD_NAME"}
_IGNORED = {"RESUME", "COPY_FREE_VARS", "CACHE", "NOP", "EXTENDED_ARG", "MAKE_CELL"}
_shapes: Optional[List[List[str]]] = None


def _instructions(code: Any) -> List[Any]:
    import dis

    return [i for i in dis.get_instructions(code) if i.opname not in _IGNORED]


def _collate_shapes() -> List[List[str]]:
    global _shapes
    if _shapes is None:
        scope: dict = {}
        exec(compile(_COLLATE_SHAPES, "<ringloader collate shapes>", "exec"), scope)  # noqa: S102
        _shapes = [[i.opname for i in _instructions(scope[name]().__code__)]
                   for name in ("free_global", "free_free", "global_global", "global_free")]
    return _shapes


def after_default_collate(collate_fn: Any) -> Optional[Any]:
    """The mixing object (what ``batch_transform`` takes) that ``collate_fn`` only applies to
    torch's ``default_collate`` of the samples, or None.

    Recognised: a plain function of one argument whose body is ``return M(*D(batch))``, D torch's
    ``default_collate`` and M a closure variable or module global holding torchvision's
    ``v2.CutMix``/``v2.MixUp``/``v2.RandomChoice`` of them or timm's ``Mixup`` (torchvision's
    classification reference: ``lambda batch: mixup_cutmix(*default_collate(batch))``). Calling
    such a function is mixing the default batch, which the native batch stage does in the slot.
    """
    import types

    if not isinstance(collate_fn, types.FunctionType) or collate_fn.__defaults__ or collate_fn.__kwdefaults__:
        return None
    code = collate_fn.__code__
    if code.co_argcount != 1 or code.co_kwonlyargcount or code.co_posonlyargcount or code.co_flags & 0x0C:
        return None
    instructions = _instructions(code)
    if [i.opname for i in instructions] not in _collate_shapes():
        return None
    loads = [i for i in instructions if i.opname in _LOADS]
    if len(loads) != 3 or loads[2].opname != "LOAD_FAST" or loads[2].argval != code.co_varnames[0]:
        return None

    def value(load: Any) -> Any:
        if load.opname == "LOAD_DEREF":
            cell = (collate_fn.__closure__ or ())[code.co_freevars.index(load.argval)]
            return cell.cell_contents
        import builtins

        return collate_fn.__globals__.get(load.argval, getattr(builtins, load.argval, None))

    try:
        mix, collate = value(loads[0]), value(loads[1])
    except (ValueError, IndexError):  # an empty cell
        return None
    import torch.utils.data as tud

    if collate is not tud.default_collate:
        return None
    if _torchvision_kinds_quiet(mix) is None and not _is_timm_mixup(mix):
        return None
    return mix


def _torchvision_kinds_quiet(obj: Any) -> Optional[List[Tuple[float, Any]]]:
    try:
        return _torchvision_kinds(obj)
    except TypeError:
        return None
