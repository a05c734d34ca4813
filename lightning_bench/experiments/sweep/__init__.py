"""`lightning_bench sweep` (docs/sparsity.md): config.py (the preset's dataclasses and the grid),
streaming_eval.py (one cell = one streaming evaluation; the protocol description and the printed table),
store.py (the one resumable JSON), command.py (the driver loop)."""

from lightning_bench.experiments.sweep.command import main  # noqa: F401
