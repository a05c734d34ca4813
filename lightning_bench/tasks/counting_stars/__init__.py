"""Counting-Stars (Song et al., 2024): multi-evidence searching and reasoning over M evidence sentences
spread evenly through a long text; generated over a local haystack (generate.py)."""

from pathlib import Path

from lightning_bench.tasks.counting_stars import definitions, reader, scorer
from lightning_bench.tasks.definition import Suite

SUITE = Suite(definitions.TASKS, definitions.BENCHMARKS, readers=reader.READERS,
              layout=Path(__file__).with_name("layout.yaml"), scorers=scorer.SCORERS,
              expected_files=reader.FORMAT_FILES, long_context=True)
