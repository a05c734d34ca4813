"""RULER (Hsieh et al., 2024): 13 synthetic tasks generated at any length for any tokenizer (generate.py)."""

from pathlib import Path

from lightning_bench.tasks.definition import Suite
from lightning_bench.tasks.ruler import definitions, reader, scorer

SUITE = Suite(definitions.TASKS, definitions.BENCHMARKS, readers=reader.READERS,
              layout=Path(__file__).with_name("layout.yaml"), scorers=scorer.SCORERS,
              expected_files=reader.FORMAT_FILES, long_context=True)
