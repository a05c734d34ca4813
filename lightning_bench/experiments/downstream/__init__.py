"""`lightning_bench downstream` (docs/downstream.md): config.py (options and the grid of cells),
setup.py (the model, and each task's examples split into compressible context and question), decode.py
(one group's decoding), scoring.py (the task figures of a cell and paired differences), report.py
(results JSON, summary table, W&B), command.py (the driver loop); the generation is sparsity/task_decode.py."""

from lightning_bench.experiments.downstream.command import main  # noqa: F401
