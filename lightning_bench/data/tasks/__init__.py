"""Downstream-task data: GLUE, SuperGLUE, SQuAD v1.1/v2.0 and MMLU rows in one (HF `datasets`) layout."""

from lightning_bench.data.tasks.readers import load_rows
from lightning_bench.data.tasks.registry import (
    BENCHMARKS, GLUE_TASKS, MMLU_SUBJECTS, SUPERGLUE_TASKS, TASKS, TaskSource, expand_tasks, get_task,
)

__all__ = ["BENCHMARKS", "GLUE_TASKS", "MMLU_SUBJECTS", "SUPERGLUE_TASKS", "TASKS", "TaskSource", "expand_tasks",
           "get_task", "load_rows"]
