"""Downstream tasks: one declarative TaskDefinition each (definitions/), the registry built from them,
and their rows in one (HF `datasets`) layout from local files or the hub (rows.py, formats/).
docs/tasks.md says how to add a task."""

from lightning_bench.data.tasks.definition import (Benchmark, Finetune, GenerationSettings, Source, Splits,
                                                   TaskDefinition, check_definition)
from lightning_bench.data.tasks.registry import (BENCHMARK_ORDER, BENCHMARKS, TASKS, default_max_length, expand_tasks,
                                                get_task)
from lightning_bench.data.tasks.rows import load_rows, local_layout

__all__ = ["BENCHMARKS", "BENCHMARK_ORDER", "Benchmark", "Finetune", "GenerationSettings", "Source", "Splits", "TASKS",
           "TaskDefinition", "check_definition", "default_max_length", "expand_tasks", "get_task", "load_rows", "local_layout"]
