"""the loader layer: ``DataLoader``, the facade, over its two backends (native and generic),
epoch planning, checkpoints of a running epoch, video clip batches. It asks a Source
(core._source) what it needs and never imports the tools.

* ``dataloader``: ``DataLoader``, the facade: checks the arguments, picks a backend, delegates.
* ``video_batches``: video clips batched natively (``_C.ClipPool``: native decode threads, v2's video transforms with one draw per clip), ``native_chain``.
* ``_backend``: the backend protocol behind ``DataLoader`` and its shared checkpoint surface.
* ``_native``: the native backend (``_C.Loader``) and its epoch iterator.
* ``_native_sources``: which datasets the native backend serves (its view of their sources) and why others run on torch's path.
* ``_native_epoch``: one epoch of the native backend: its plan drawn, adopted or resumed, the next queued, batches delivered.
* ``_native_report``: the native backend's ``describe()`` lines and its remote links' estimates.
* ``_generic``: the generic backend (torch's DataLoader over any Dataset).
* ``_planning``: epoch plans, the next epoch predicted and read ahead, the generic batch plan.
* ``_staging``: device staging on the generic path (side CUDA stream).
* ``_clip_samples``: where a sample holds its clip (any structure), the rest collated, the clips put back or handed to a ``collate_fn``.
* ``_video_chain``: what of a v2 transform runs natively on a clip, step by step (``native_chain`` puts them together).
* ``_video_loader``: what the generic backend iterates for natively batched clips: their batches made ahead or when asked, within ``max_memory`` (``ClipSlots``).
* ``_video_refill``: clip batches kept full under ``on_error="skip"`` with ``drop_last=True`` (refilled from the following clips, resumed exactly).
* ``_mixing``: CutMix/MixUp applied in place to a batch in its slot.
"""
