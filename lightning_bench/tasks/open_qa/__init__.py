"""Open-domain QA: Natural Questions (NQ-open) and TriviaQA (rc, unfiltered), EM/F1 over the aliases."""

from pathlib import Path

from lightning_bench.tasks.open_qa import definitions, reader, scorer
from lightning_bench.tasks.definition import Suite

READERS = {
    "nq_open": reader.NQ_OPEN,
    "triviaqa": reader.TRIVIAQA,
}
# what a missing file of each format should have been
EXPECTED_FILES = {
    "nq_open": "NQ-open's .jsonl (question, answer list)",
    "triviaqa": "TriviaQA's qa/*.json (with evidence/ for rc)",
}
SUITE = Suite(definitions.TASKS, definitions.BENCHMARKS, readers=READERS, layout=Path(__file__).with_name("layout.yaml"),
              scorers=scorer.SCORERS, expected_files=EXPECTED_FILES)
