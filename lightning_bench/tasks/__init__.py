"""Downstream tasks, one folder per benchmark (glue/, ruler/, ...: definitions, reader, scorer, layout.yaml,
generator), listed once in registry.py; their rows in one (HF `datasets`) layout from local files or the
hub (loading.py), their prompts (prompts.py), scores (benchmark_scores.py) and Lightning DataModules (datamodules/).
docs/tasks.md says how to add a task or a benchmark."""

from lightning_bench.tasks.definition import (Benchmark, Finetune, GenerationSettings, Source, Splits, Suite,
                                              TaskDefinition, check_definition)
from lightning_bench.tasks.registry import (BENCHMARK_ORDER, BENCHMARKS, TASKS, default_max_length, expand_tasks,
                                            get_task)
from lightning_bench.tasks.loading import load_rows, local_layout

__all__ = ["BENCHMARKS", "BENCHMARK_ORDER", "Benchmark", "Finetune", "GenerationSettings", "Source", "Splits", "Suite", "TASKS",
           "TaskDefinition", "check_definition", "default_max_length", "expand_tasks", "get_task", "load_rows", "local_layout"]
