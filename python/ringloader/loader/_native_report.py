"""What the native backend says of itself: ``describe()``'s lines (threads, CPUs, memory and
slots, prefetch, epochs read ahead, remote links, the JPEG scan memo, row groups, errors) and
each remote host's link estimate, which ``stats()`` reports too."""

from __future__ import annotations

from typing import Any

from .. import _C
from ..core import _source
from ..core._options import _format_bytes


def _read_ahead_counts(s: dict, waiting: bool) -> str:
    """describe()'s count of queued epochs: adopted, cancelled, and one waiting for iter()."""
    queued, adopted = s["epochs_queued"], s["epochs_adopted"]
    cancelled = queued - adopted - (1 if waiting else 0)
    text = f"{adopted} of {queued} epochs read ahead were used"
    if waiting:
        text += ", 1 is waiting for the next iter()"
    return text + (f", {cancelled} cancelled" if cancelled else "")


def _scan_memo_line(s: dict) -> str:
    """describe()'s line on the memo of JPEG scans read clean to their end (docs/bad-data.md)."""
    memo = s["scan_memo"]
    if memo == "unused":
        return ("no strict JPEG decode in this process yet (the memo is chosen at the first; "
                "RINGLOADER_SCAN_MEMO)")
    if memo == "off":
        return "every strict JPEG decode reads its scan to the end (RINGLOADER_SCAN_MEMO=off)"
    fill = (f"{s['scan_memo_entries']:,} of {s['scan_memo_slots']:,} slots filled "
            f"({100 * s['scan_memo_entries'] / max(s['scan_memo_slots'], 1):.1f}%)")
    if memo == "process":
        where = f"memo of this process only ({s['scan_memo_note']})" if s["scan_memo_note"] \
            else "memo of this process only (RINGLOADER_SCAN_MEMO=process)"
    else:
        where = f"memo shared by this machine's processes, {memo}"
    resume = (f"; resume points of {s['scan_index_scans']:,} of them in this process "
              f"({s['scan_index_bytes'] / 1e6:.1f} MB)" if s.get("scan_index_scans") else "")
    return f"JPEG files read clean to their end: {where}; {fill}{resume}"


def _outputs_line(s: dict) -> str:
    """What the variable-size outputs (samples whose size depends on the image) cost the budget."""
    return (f"{s['outputs_new'] + s['outputs_reused']} samples rendered at their own size, charged to "
            f"max_memory until you drop them: {s['outputs_reused']} into the buffer of an output "
            f"dropped earlier (no new pages), {s['outputs_new']} into a new one; "
            f"{_format_bytes(s['output_bytes_kept'])} kept for the next ones")


def _node_line(backend: Any) -> str:
    """How the machine was divided among its ranks (describe()'s 'node' line)."""
    r, plan = backend._ranks, backend._auto_threads
    node = plan["node"] if plan is not None else None
    cpus = (f"num_workers={backend.num_workers} given, CPUs not divided" if node is None
            else f"{node['usable']} usable CPUs, not divided (the affinity mask is already this rank's)"
            if node["pinned"] else f"{node['share']} of {node['usable']} usable CPUs")
    memory = (f"max_memory 1/{r.size} of the default" if backend._node_memory is not None
              else "max_memory given, not divided")
    share = backend._options.get("numa_share_count")
    pinned = (f", threads on CPUs {backend._native.stats()['numa_cpus']} (share {backend._options['numa_share_index']} "
              f"of {share}, disjoint from the other ranks')" if share else "")
    return f"rank {r.rank} of {r.size} on this machine ({r.source}): {cpus}{pinned}, {memory}"


def describe(backend: Any) -> str:
    """``NativeBackend.describe()``: where the pipeline runs: threads, CPUs, NUMA node, slot memory, device, I/O."""
    s = backend._native.stats()
    node = s["numa_node"]
    lines = [
        "ringloader.DataLoader (native)",
        f"  threads: {s['decode_threads']} decode, {s['reader_threads']} reader, "
        f"1 dispatcher" + (", 1 device stage thread" if s["device"] != "cpu" else ""),
        f"  numa:    {'node ' + str(node) if node >= 0 else 'not placed'} ({s['numa_note']})",
        f"  cpus:    {s['numa_cpus'] or 'not pinned'}"
        + (f"; {s['threads_pinned']} threads pinned, read back: {s['thread_cpus']}"
           if s["threads_pinned"] else ""),
        f"  memory:  {s['memory']}" + (f" ({s['memory_note']})" if s["memory_note"] else "")
        + f", {s['slots_allocated']} slots allocated",
        f"  device:  {s['device']}" + (f", {s['device_buffers']} device buffers allocated, "
                                        f"{s['device_buffers_held']} held"
                                        if s["device"] != "cpu" else ""),
        f"  io:      {s['io_backend']}" + (f" ({s['io_note']})" if s["io_note"] else ""),
        f"  chosen:  {s['threads_note']}" if backend._options.get("auto_threads")
        else f"  chosen:  {backend._auto_threads['note']}" if backend._auto_threads is not None
        else f"  chosen:  {s['threads_note']} (num_workers='auto' sizes them from the usable CPUs)",
        "  prefetch: " + (
            f"auto, {s['prefetch_batches']} batches deep now (starts at 2, grew {s['prefetch_grown']} "
            f"times, at most {s['prefetch_max']}: half the slots max_memory allows)"
            if backend._auto_prefetch else f"{s['prefetch_batches']} batches (prefetch_factor x num_workers"
            + (f" = {backend._options['prefetch_batches']}, cut to fit the memory budget: see 'cut')"
               if s["prefetch_batches"] < backend._options["prefetch_batches"] else ")")),
        f"  slots:   at most {s['max_slots']} of {_format_bytes(s['slot_bytes'])} "
        f"(max_memory {_format_bytes(s['max_memory'])}: {backend._node_memory or s['memory_budget_note']})"
        f"; the pipeline waited for a free slot {s['producer_waits']} times",
        "  budget:  covers the batch slots, batches you keep included, and decodes that need over 16 MiB "
        "(a large image waits its turn, or fails its sample when the slots leave too little); not the "
        f"{s['read_buffers']} file "
        "read buffers per epoch (each as large as the largest file it read; a second set while the next "
        "epoch is read ahead), nor device buffers",
    ] + ([f"  outputs: {_outputs_line(s)}"] if s["outputs_new"] + s["outputs_reused"] else []) + (
        [f"  node:    {_node_line(backend)}"] if backend._ranks is not None else []) + (
        [f"  cut:     {s['slots_note']}"] if s["slots_note"] else []) + (
        [f"  batch:   batch_transform={backend._mix_note}, applied in place in the slot by the iterating thread"]
        if backend._mix_note else []) + (
        ["  batch:   batch_size=None: each sample delivered alone (a one-row batch), collate_fn "
         f"({getattr(backend.collate_fn, '__name__', 'yours')}) applied to it in the iterating "
         "thread, its image a view of its slot's row"]
        if getattr(backend, "_unbatched", False) else
        ["  batch:   collate_fn receives the samples (views of the slot's rows) in the iterating thread"]
        if backend._collate is not None else []) + (
        ["  batch:   collate_fn is torch's default_collate: the batch stays in its slot, zero-copy"]
        if backend._default_collate else []) + (
        [f"  tail:    {backend._batcher.tail_note}"]
        if getattr(backend._batcher, "tail_note", None) else []) + [
        "  epochs:  " + ("the next epoch is read and decoded while this one is delivered "
                         f"({_read_ahead_counts(s, backend._native.has_queued_epoch())})"
                         if backend._overlap_off is None else f"drained between epochs ({backend._overlap_off})")
        + (f"; {backend._stale_drops} read ahead dropped because their files changed before "
           f"the epoch began, last: {backend._stale_why}" if backend._stale_drops else ""),
    ]
    for link in _remote_links(backend):
        measured = f"measured over {link['latency_samples']} responses" \
            if link["latency_samples"] else "not measured yet: the prior"
        lines.append(f"  remote:  {link['host']}: {link['latency_s'] * 1e3:.0f} ms to the first byte, "
                     f"{link['bytes_per_s'] / 1e6:.1f} MB/s per transfer ({measured}; "
                     f"{s['range_requests']} range requests in this process)")
    downloads = _C.downloads_in_flight()
    if downloads:
        lines.append(f"  remote:  {downloads}")
    lines.append(f"  scans:   {_scan_memo_line(s)}")
    budget = [f.feed_budget for f in backend._folders if f.feed_budget is not None]
    if budget:
        lines.append(
            f"  row groups: {s['row_groups_read']} read ({_format_bytes(s['row_group_bytes_read'])}) "
            f"as the epochs reached them, at most {_format_bytes(s['row_group_bytes_peak'])} held "
            f"(read_ahead_bytes {_format_bytes(budget[0])}; over it {s['row_groups_over_budget']} "
            f"times, for a group the readers waited for); the readers waited {s['row_group_waits']} "
            f"times, {s['row_group_wait_seconds']:.2f} s")
    if s["errors"]:
        lines.append(f"  errors:  {s['errors']} samples failed ({s['skipped']} skipped, {s['replaced']} "
                     f"replaced); last: {_source.name_rows(s['last_error'], backend._folders)}")
    if s["stalled"]:
        lines.append(f"  stalled: {s['pipeline_state']}")
    return "\n".join(lines)


def _remote_links(loader: Any) -> list:
    """Each remote host's link estimate (WebDataset.link_estimates), once per host."""
    out: dict = {}
    for f in loader._folders:
        for link in f.link_estimates():
            out.setdefault(link["host"], link)
    return list(out.values())
