"""SuperGLUE (Wang et al., 2019): eight tasks and the two diagnostics (AX-b, AX-g)."""

from pathlib import Path

from lightning_bench.tasks.superglue import definitions, reader
from lightning_bench.tasks.definition import Suite

SUITE = Suite(definitions.TASKS, definitions.BENCHMARKS, readers={"superglue_jsonl": reader},
              layout=Path(__file__).with_name("layout.yaml"),
              expected_files={"superglue_jsonl": "SuperGLUE's .jsonl"})
