"""InfiniteBench (Zhang et al., 2024): the English tasks; passkey and kv_retrieval generated (generate.py)."""

from pathlib import Path

from lightning_bench.tasks.definition import Suite
from lightning_bench.tasks.infinitebench import definitions, reader, scorer

SUITE = Suite(definitions.TASKS, definitions.BENCHMARKS, readers=reader.READERS,
              layout=Path(__file__).with_name("layout.yaml"), scorers=scorer.SCORERS,
              expected_files=reader.FORMAT_FILES, long_context=True)
