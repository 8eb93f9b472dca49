"""the sources layer: the datasets and the references a user's Dataset returns, each one a
Source (core._source) read natively or on torch's path. It imports from ``core`` and
``transforms`` only.

* ``datasets``: ``ImageFolder``, ``DatasetFolder``, ``FileList`` (``NativeDataset``), sample tables.
* ``references``: ``ImageFile``/``ImageBytes`` image references a user's Dataset returns, ``Joint``, ``materialize``.
* ``hf``: ``HFDataset`` and ``Parquet``: image bytes read from Arrow buffers into references.
* ``webdataset``: ``WebDataset`` (tar shards, local, ``pipe:`` or remote) and its order, ``WebDatasetSampler``.
* ``video``: ``VideoFile``/``VideoBytes`` video references decoded frame-exactly by the system's FFmpeg (loaded at run time), ``VideoMetadata``.
* ``frame_leaves``: ``ClipIndices``, ``ClipTimes``, ``PerFrame``: leaves the frames a video reference draws decide; ``DrawnClips``, one draw per reference a sample.
* ``video_folder``: ``VideoFolder``, class folders of video files (Kinetics/UCF101 layout), ``VIDEO_EXTENSIONS``; ``VideoShards``, tar shards of video members read in place.
* ``_user_source``: ``UserSource``, a user's Dataset of image references as a native source (``source_for`` finds it); ``find_source``, the source standing for a Dataset the loader is given.
* ``_folder_scan``: torchvision's folder scan (``find_classes``, the files of each class folder).
* ``_arrow_columns``: Arrow columns as arrays for ``hf``: the image column's buffers, offsets and lengths, passed-through values, column checks.
* ``_parquet_files``: ``Parquet``'s files: globs and URLs found, remote files downloaded, the memory-mapped Arrow copy.
* ``_row_groups``: ``Parquet(copy=False)``'s row groups, read as an epoch needs them and fed to the native loader.
* ``_structures``: a user's samples' structures, their references replaced by placeholder leaves that a batch fills.
* ``_columns``: a columnar source's table (``Columns``), handed over whole.
* ``_batcher``: ``Batcher``, a user's batch rebuilt in its samples' structure from a native batch.
* ``_torch_path``: ``TorchPath``, a Dataset on torch's generic path as the generic backend asks it: why, its one warning or hint, its samples keyed or named.
* ``_fallback``: ``FallbackWarning`` and why a dataset runs on torch's path, naming the step or reference.
* ``_torchvision_folder``: a torchvision ``ImageFolder``/``DatasetFolder`` served natively (``TorchvisionFolder``).
* ``_joint``: a ``Joint`` natively: its v2 transform split, boxes and keypoints moved by the recorded geometry.
* ``_integer_boxes``: a ``Joint``'s integer boxes natively: v2's box kernels replayed step by step with the row's draws.
* ``_joint_tail``: a ``Joint``'s per-pixel steps after its tensor conversion, run by v2 on the natively rendered image.
* ``_sanitize``: a ``Joint`` row's ``SanitizeBoundingBoxes``: v2's forward, the boxes to keep found in numpy by torch's rules.
* ``_tail_pool``: the threads a batch's ``Joint`` tails run on, their draws made ahead under the seeded generators.
* ``_remote_shards``: ``RemoteShards``, a WebDataset's remote shards: kept indexes, epoch downloads, range reads, ETags.
* ``_pipe_spool``: ``PipeSpools``, a ``VideoShards``'s ``pipe:`` shards run once and written to files of its own, read in place.
"""
