"""`lightning_bench sweep` (docs/sparsity.md): config.py (the preset's dataclasses and the grid),
runner.py (one cell = one streaming evaluation), store.py (the one resumable JSON), report.py
(protocol description and the printed table), command.py (the driver loop)."""

from lightning_bench.experiments.sweep.command import main

__all__ = ["main"]
