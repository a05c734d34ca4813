"""Bring-your-own long-context rows in kvpress's unified layout (context, question, answer_prefix, answer)."""

from pathlib import Path

from lightning_bench.tasks.definition import Suite
from lightning_bench.tasks.long_context_rows import definitions, reader, scorer

SUITE = Suite(definitions.TASKS, definitions.BENCHMARKS, readers=reader.READERS,
              layout=Path(__file__).with_name("layout.yaml"), scorers=scorer.SCORERS,
              expected_files=reader.FORMAT_FILES, long_context=True)
