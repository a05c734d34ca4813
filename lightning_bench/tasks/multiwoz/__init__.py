"""MultiWOZ 2.1 and 2.2 dialogue state tracking, joint goal accuracy (metrics.py, scorer.py)."""

from pathlib import Path

from lightning_bench.tasks.multiwoz import definitions, reader, scorer
from lightning_bench.tasks.definition import Suite

READERS = {
    "multiwoz": reader,
}
# what a missing file of each format should have been
EXPECTED_FILES = {
    "multiwoz": "MultiWOZ: ConvLab-2's <split>.json.zip (2.1) or MultiWOZ 2.2's dialogues_*.json",
}
SUITE = Suite(definitions.TASKS, definitions.BENCHMARKS, readers=READERS, layout=Path(__file__).with_name("layout.yaml"),
              scorers=scorer.SCORERS, expected_files=EXPECTED_FILES)
