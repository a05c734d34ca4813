"""`lightning_bench generation` (docs/generation.md): config.py (options and the grid), data.py (the
test text and the sample windows), measure.py (one sample: timings, memory, cache), report.py
(aggregation and paired t-tests over the cell files), command.py (the driver loop)."""

from lightning_bench.experiments.generation.command import main
from lightning_bench.experiments.generation.measure import ForwardTimer

__all__ = ["main", "ForwardTimer"]
