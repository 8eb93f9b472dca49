"""the foundation layer: what every other layer builds on (the Source protocol and the sample
table it hands the loader, argument checks and the node, orders, checkpoints and ranks, URL
schemes, the shard index and remote downloads). It imports nothing above it.

* ``_source``: the Source protocol every sample source implements (length, table, shards, columns...), ``StaleIndexError``, the native loader's per-sample columns over all sources.
* ``_sample_table``: ``_SampleTable``, a native dataset's paths and labels in one arena, and its list-like views (``samples``, ``targets``).
* ``_sample_keys``: ``SampleKey``, a sample and its augmentation seed on the generic path, and the seeds drawn from it.
* ``_shard_index``: a WebDataset's shard URLs expanded, tar member keys, shard indexes (scan, sidecar, index cache).
* ``_remote``: http(s) and s3 shards fetched natively into the node-local shard cache.
* ``_schemes``: the table of URL schemes (``file``, ``pipe:``, ``http(s)``, ``s3``) every path is classified by.
* ``_options``: argument checks and what ``num_workers="auto"`` chooses.
* ``_checkpoint``: ``state_dict``/``load_state_dict``: the epoch record and its resumption.
* ``_order``: samplers' epoch orders as a few integers (replay, resharding, WebDataset order).
* ``_distributed``: rank/world-size layout and the default sampler of a sharded run.
* ``_node``: the ranks sharing this machine (torchrun, SLURM, MPI variables), each one's share of its CPUs and memory, its GPU's NUMA node and its disjoint CPUs.
* ``_atomic``: files written whole or not at all (pack outputs, index caches).
* ``_sizes``: byte sizes written as text (``"2GB"``).
"""
