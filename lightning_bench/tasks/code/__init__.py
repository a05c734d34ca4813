"""Code: CodeXGLUE code-to-text (six languages) and line completion, and HumanEval's pass@k, its
completions run in a sandbox (sandbox.py, sandbox_guard.py)."""

from pathlib import Path

from lightning_bench.tasks.code import codexglue_reader, definitions, humaneval_reader, scorer
from lightning_bench.tasks.definition import Suite

READERS = {
    "codexglue_code_to_text": codexglue_reader.CODE_TO_TEXT,
    "codexglue_line_completion": codexglue_reader.LINE_COMPLETION,
    "humaneval": humaneval_reader,
}
# what a missing file of each format should have been
EXPECTED_FILES = {
    "codexglue_code_to_text": "CodeXGLUE code-to-text's <language>_<split>_0.jsonl.gz (CodeSearchNet rows)",
    "codexglue_line_completion": "CodeXGLUE line completion's test.json (input, gt per line)",
    "humaneval": "HumanEval.jsonl.gz",
}
SUITE = Suite(definitions.TASKS, definitions.BENCHMARKS, readers=READERS, layout=Path(__file__).with_name("layout.yaml"),
              scorers=scorer.SCORERS, expected_files=EXPECTED_FILES)
