"""`lightning_bench generation` (docs/generation.md): config.py (options and the grid), data.py (the
test text, the sample windows, and one sample's timings, memory and cache), report.py
(aggregation and paired t-tests over the cell files), command.py (the driver loop)."""

from lightning_bench.experiments.generation.command import main  # noqa: F401
