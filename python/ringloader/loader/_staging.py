"""Device staging on the generic path: each batch copied to the GPU on a side stream while the
previous one is in use (the native path stages in its own native thread)."""

from __future__ import annotations

from typing import Any, Callable, Iterator


def _generic_device(device: str):
    """The torch.device batches of the generic path are staged to, or None for host batches."""
    if device == "cpu":
        return None
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"device={device!r} but no CUDA device is visible to torch")
    return torch.device(device)


def _device_prefetch(batches: Iterator[Any], device: Any) -> Iterator[Any]:
    """Generic-path staging: copies batch i+1 to `device` on a side stream while the consumer
    works on batch i; the consumer's stream waits on the copy's event, never the host."""
    import torch

    copy_stream = torch.cuda.Stream(device=device)

    def stage(batch):
        with torch.cuda.stream(copy_stream):
            moved = _map_tensors(batch, lambda t: t.to(device, non_blocking=True))
        event = torch.cuda.Event()
        event.record(copy_stream)
        return moved, event

    pending = None
    for batch in batches:
        staged = stage(batch)
        if pending is not None:
            yield _hand_over(*pending, device)
        pending = staged
    if pending is not None:
        yield _hand_over(*pending, device)


def _hand_over(batch: Any, event: Any, device: Any) -> Any:
    import torch

    current = torch.cuda.current_stream(device)
    current.wait_event(event)
    # The tensors were allocated on the copy stream: tell the caching allocator they are used
    # on the consumer's stream too, so their memory is not reused before that work finishes.
    _map_tensors(batch, lambda t: (t.record_stream(current), t)[1])
    return batch


def _map_tensors(obj: Any, fn: Callable) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (list, tuple)):
        mapped = [_map_tensors(o, fn) for o in obj]
        return type(obj)(*mapped) if hasattr(obj, "_fields") else type(obj)(mapped)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return obj
