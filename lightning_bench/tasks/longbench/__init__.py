"""LongBench v1 (and its length-balanced LongBench-E) and LongBench v2, scored as the official eval.py."""

from pathlib import Path

from lightning_bench.tasks.definition import Suite
from lightning_bench.tasks.longbench import definitions, reader, scorer

SUITE = Suite(definitions.TASKS, definitions.BENCHMARKS, readers=reader.READERS,
              layout=Path(__file__).with_name("layout.yaml"), scorers=scorer.SCORERS,
              expected_files=reader.FORMAT_FILES, long_context=True)
