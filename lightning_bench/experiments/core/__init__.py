"""The experiment core shared by every experiment command (docs/experiments.md):

config     one jsonargparse configuration for a typed dataclass: --config, --print_config, overrides,
           the argparse spellings and the deprecated options of the vocabulary
grid       cells (frozen dataclasses of coordinates with a stable file key) and the grid rules
store      the store of finished cells (one checksummed JSON per cell), the locks, group progress
runner     a grid of (cell, settings) works, run by an executor over the store; shards of a grid
execution  the executor options every command's config inherits (--shard, --executor, --ray.*)
ray_executor  the groups computed by Ray actors, the store written by the driver
aggregate  mean / sample std / min / max / n, and paired t-tests between arms
"""
