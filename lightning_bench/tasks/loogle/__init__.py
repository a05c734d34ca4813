"""LooGLE (Li et al., 2023): long-dependency and short-dependency QA, cloze and summarization."""

from pathlib import Path

from lightning_bench.tasks.definition import Suite
from lightning_bench.tasks.loogle import definitions, reader, scorer

SUITE = Suite(definitions.TASKS, definitions.BENCHMARKS, readers=reader.READERS,
              layout=Path(__file__).with_name("layout.yaml"), scorers=scorer.SCORERS,
              expected_files=reader.FORMAT_FILES, long_context=True)
