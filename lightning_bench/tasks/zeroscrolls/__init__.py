"""ZeroSCROLLS (Shaham et al., 2023): ten long-text tasks, scored as its official metrics."""

from pathlib import Path

from lightning_bench.tasks.definition import Suite
from lightning_bench.tasks.zeroscrolls import definitions, reader, scorer

SUITE = Suite(definitions.TASKS, definitions.BENCHMARKS, readers=reader.READERS,
              layout=Path(__file__).with_name("layout.yaml"), scorers=scorer.SCORERS,
              expected_files=reader.FORMAT_FILES, long_context=True)
