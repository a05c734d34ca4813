"""SQuAD v1.1 and v2.0: extractive QA generated k-shot, scored by the official scripts' EM/F1 (metrics.py)."""

from pathlib import Path

from lightning_bench.tasks.squad import definitions, reader
from lightning_bench.tasks.definition import Suite

SUITE = Suite(definitions.TASKS, definitions.BENCHMARKS, readers={"squad_json": reader},
              layout=Path(__file__).with_name("layout.yaml"),
              expected_files={"squad_json": "a SQuAD .json (the official dev file's layout)"})
