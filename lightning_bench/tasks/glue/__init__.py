"""GLUE (Wang et al., 2018): nine sentence(-pair) classification tasks, prompted or fine-tuned."""

from pathlib import Path

from lightning_bench.tasks.glue import definitions, reader
from lightning_bench.tasks.definition import Suite

SUITE = Suite(definitions.TASKS, definitions.BENCHMARKS, readers={"glue_tsv": reader},
              layout=Path(__file__).with_name("layout.yaml"),
              expected_files={"glue_tsv": "the GLUE distribution's .tsv (.txt for MRPC)"})
