"""MMLU (Hendrycks et al., 2021): 57 subjects of four-choice questions, micro-averaged (metrics.py)."""

from pathlib import Path

from lightning_bench.tasks.mmlu import definitions, reader
from lightning_bench.tasks.definition import Suite

SUITE = Suite(definitions.TASKS, definitions.BENCHMARKS, readers={"mmlu_csv": reader},
              layout=Path(__file__).with_name("layout.yaml"),
              expected_files={"mmlu_csv": "MMLU's per-subject .csv"})
