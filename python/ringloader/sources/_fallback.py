"""Why a dataset runs on torch's path instead of natively, said in one place: the warning
(:class:`FallbackWarning`; :func:`warn_refused` for a Dataset of image references that stays
there) and its reasons, each naming the step or reference that forces it and what to change: a
transform's steps by class and position (:func:`chain_reasons`, :func:`step_label`), a
``Joint`` that is not native (``_joint_refusal_at``), a sample's references unlike sample 0's
(``_refusal``).
"""

from __future__ import annotations

import warnings
from typing import Any, List, Optional, Sequence

from .. import _C
from . import _joint
from .. import transforms as T
from .references import ImageReference, Joint

__all__ = ["FallbackWarning", "VIDEO_REASON", "chain_reasons", "joint_reasons", "step_label",
           "warn_refused", "warn_video"]


class FallbackWarning(UserWarning):
    """``ringloader.DataLoader`` runs a dataset on torch's path instead of natively: the warning
    names the first step or leaf that forces it and what to change (``loader.describe()`` lists
    every reason), or hints that a Dataset opening images itself could return
    :class:`ringloader.ImageFile` instead; or a ringloader dataset (``rl.ImageFolder``...) is
    given a transform whose steps from one on run per sample in Python (the hybrid path: the
    warning, when the transform is set, names them). A ``UserWarning``. Silence it with
    ``warnings.filterwarnings("ignore", category=ringloader.FallbackWarning)``.

    Examples:
        >>> import warnings
        >>> import torch
        >>> from PIL import Image
        >>> import ringloader as rl
        >>> from ringloader.sample_data import make_sample_dataset
        >>> root = make_sample_dataset("photos", num_images=8, num_classes=2)
        >>> class Opened(torch.utils.data.Dataset):  # opens images itself: runs on torch's path
        ...     def __len__(self):
        ...         return 2
        ...     def __getitem__(self, i):
        ...         return Image.open(root / "class_00" / f"img_0000{2 * i}.jpg").convert("RGB"), i
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     loader = rl.DataLoader(Opened(), batch_size=2, collate_fn=lambda batch: batch)
        ...     _ = next(iter(loader))
        >>> any(issubclass(w.category, rl.FallbackWarning) for w in caught)
        True
    """


def _describe(dataset: Any) -> str:
    return f"{type(dataset).__module__}.{type(dataset).__name__}"


def warn_refused(dataset: Any, reasons: Sequence[str], stacklevel: int = 3) -> None:
    """The one warning of a loader over a Dataset of image references that runs on torch's
    path: the first of ``reasons`` (``_native_sources._fallback_reasons``), and how many more
    ``describe()`` lists."""
    more = (f" loader.describe() lists all {len(reasons)} reasons." if len(reasons) > 1 else "")
    warnings.warn(
        f"ringloader.DataLoader: {_describe(dataset)} returns image references but "
        f"{reasons[0]}, so it runs on torch's generic path: each sample is materialised with "
        "Pillow and transformed in worker processes (ringloader.materialize), at torch's "
        f"speed.{more}", FallbackWarning, stacklevel=stacklevel)


#: Why a Dataset whose samples hold video references runs on torch's path (``describe()``).
VIDEO_REASON = ("its samples hold video references (ringloader.VideoFile/VideoBytes) whose clips do "
                "not batch natively, so they are decoded by ringloader's native decoder in worker "
                "processes")


def warn_video(dataset: Any, why: str = "", stacklevel: int = 3) -> None:
    """The one warning of a loader over a Dataset whose samples hold video references and whose
    clips do not batch natively (``why``: the native clip batches' reason)."""
    because = f" ({why})" if why else ""
    warnings.warn(
        f"ringloader.DataLoader: {_describe(dataset)} returns video references "
        f"(ringloader.VideoFile/VideoBytes) whose clips cannot batch natively{because}, so it "
        "runs on torch's generic path: video clips are decoded by ringloader's native FFmpeg "
        "decoder in worker processes (ringloader.materialize), each clip drawn from "
        "clips.generator_for(seed, epoch, index, position) of its sample and any transform "
        "applied in Python (ringloader.video_batches.native_chain(transform) says which steps run "
        "natively).", FallbackWarning, stacklevel=stacklevel)


def step_label(step: Any) -> str:
    """A transform step as fallback reasons name it: ``v2.Resize(200)``,
    ``transforms.RandomApply``, ``mymodule.Jitter``."""
    kind = type(step)
    module = kind.__module__
    if module.startswith("torchvision.transforms.v2"):
        name = f"v2.{kind.__name__}"
    elif module.startswith("torchvision.transforms"):
        name = f"transforms.{kind.__name__}"
    elif module.startswith("ringloader.transforms"):
        name = f"ringloader.transforms.{kind.__name__}"
    else:
        name = f"{module}.{kind.__qualname__}"
    if kind.__name__ == "Resize":
        size = getattr(step, "size", None)
        if isinstance(size, (list, tuple)):
            size = size[0] if len(size) == 1 else tuple(size)
        max_size = getattr(step, "max_size", None)
        name += f"({size}" + (f", max_size={max_size}" if max_size is not None else "") + ")"
    return name


def _refusal_text(step: Any, reason: str) -> str:
    """``reason`` (``transforms.split``'s, which names the step by its full class name) without
    the step's name."""
    full = T._step_name(step)
    for head in (f"transform {full} ", f"{full}: "):
        if reason.startswith(head):
            return reason[len(head):]
    return reason


def chain_reasons(chain: Any, where: str, origin: Any = None) -> List[str]:
    """Why the transform ``chain`` keeps its dataset off the native batches, naming each step
    by class and position ([] when it runs natively to a fixed size): the first step that runs
    in Python and every later one with no native equivalent, or the step whose output size
    depends on the image. ``where`` names the transform; positions count in ``origin`` (the
    transform the user wrote, of which ``chain`` holds steps: a Joint's), by default ``chain``."""
    parts = T._flatten(chain)
    origin_parts = T._flatten(origin) if origin is not None else parts

    def at(j: int) -> str:
        step = parts[j]
        position = next((o for o, p in enumerate(origin_parts) if p is step), j)
        return f"{step_label(step)} at position {position} of {where}"

    if not parts:
        return [f"{where} is None: each sample is a PIL image of its own size (give it a "
                "transform that ends in a crop or Resize((height, width)) and a tensor "
                "conversion to batch natively)"]
    split = T.split(chain)
    if split.tail is not None:
        i = len(parts) - len(split.tail.transforms)
        why = _refusal_text(parts[i], split.reason)
        advice = "" if "move it" in why else (
            ": replace it with a step that runs natively (the manual's transforms page lists "
            "them) or leave it out")
        out = [f"{at(i)} runs in Python ({why}){advice}"]
        for j in range(i + 1, len(parts)):
            try:
                T.to_steps(parts[j])
            except Exception:
                out.append(f"{at(j)} has no native equivalent either")
        return out
    if _C.fixed_size(split.steps):
        return []
    for j in reversed(range(len(parts))):
        try:
            steps = T.to_steps(parts[j])
        except Exception:
            continue
        if any(s["kind"] == "resize" and not s.get("size_w") for s in steps):
            return [f"{at(j)}: an output size that depends on the image (give it a (height, "
                    f"width) size, or end {where} with a crop, to batch natively)"]
    return [f"{where} leaves each image its own size (no crop or Resize((height, width))): an "
            "output size that depends on the image (end it with one to batch natively)"]


def _refused_step(joint: Any) -> tuple:
    """``_joint.refusal(joint)`` and the index of the step it names in the Joint's transform
    (the first step whose prefix of the transform is refused, or the last step of that class
    before it: a step refused for what follows it), or None: a leaf of the structure."""
    why = _joint.refusal(joint)
    parts = T._flatten(joint.transform)
    named = [j for j, p in enumerate(parts) if T._step_name(p) in why]
    if not named:
        return why, None
    j = named[0]
    if len(named) > 1:
        from torchvision.transforms import v2

        first = next((k for k in range(len(parts))
                      if isinstance(_joint.plan(v2.Compose(parts[:k + 1])), str)), None)
        if first is not None:
            j = max((k for k in named if k <= first), default=named[0])
    return why, j


def _label_step(why: str, parts: List[Any], j: int, position: int) -> str:
    """``why`` with the step ``parts[j]`` named by class and ``position``, the others it names
    by class, as the warning names steps."""
    full, label = T._step_name(parts[j]), step_label(parts[j])
    why = why.replace(full, f"{label} at position {position}", 1).replace(full, label)
    for part in parts:
        why = why.replace(T._step_name(part), step_label(part))
    return why


def _joint_refusal_at(joint: Joint) -> str:
    """``_joint.refusal(joint)`` with the step it names given its position in the Joint's
    transform (``_refused_step``)."""
    why, j = _refused_step(joint)
    return why if j is None else _label_step(why, T._flatten(joint.transform), j, j)


class _Probe:
    """A Joint's structure under a transform of some of its steps (``joint_reasons``)."""

    __slots__ = ("transform", "structure")

    def __init__(self, transform: Any, structure: Any):
        self.transform, self.structure = transform, structure


def joint_reasons(joint: Joint) -> List[str]:
    """Every reason ``joint`` is not native, each naming its step by class and position in the
    transform the user wrote: the first as :func:`_joint_refusal_at` says it, then the step
    refused once the steps named before are left out, until the rest would run natively or a
    leaf of the structure is the reason."""
    from torchvision.transforms import v2

    parts = T._flatten(joint.transform)
    kept = list(range(len(parts)))  # positions in ``parts`` of the steps still probed
    probe: Any = joint
    out: List[str] = []
    while len(out) <= len(parts):
        why, j = _refused_step(probe)
        if j is None:
            out.append(why)
            break
        out.append(_label_step(why, [parts[k] for k in kept], j, kept[j]))
        del kept[j]
        if not kept:
            break
        probe = _Probe(v2.Compose([parts[k] for k in kept]), joint.structure)
        if _joint.refusal(probe) is None:
            break
    return out


def _same_native_chain(a: Any, b: Any) -> bool:
    """True when two transform objects are the same native chain (a Dataset that builds its
    Compose in ``__getitem__``); chains with Python steps are only the same object."""
    split_a, split_b = T.split(a), T.split(b)
    return split_a.tail is None and split_b.tail is None and split_a.steps == split_b.steps


def _refusal(refs: List[ImageReference], model: List[ImageReference], i: int) -> Optional[str]:
    """Why sample i's references keep the Dataset off the native path, or None."""
    for k, (ref, first) in enumerate(zip(refs, model)):
        if ref.mode != first.mode:
            return (f"reference {k} of sample {i} has mode {ref.mode!r}, reference {k} of sample 0 "
                    f"{first.mode!r} (each position has one mode)")
        if ref.transform is not first.transform and not _same_native_chain(ref.transform,
                                                                           first.transform):
            return (f"reference {k} of sample {i} has another transform than reference {k} of "
                    "sample 0 (the native path applies one transform to each position)")
    return None
