"""File-format readers: each turns a task's files (or its hub rows) into rows in the HF `datasets` layout.

A reader exposes `read(task, paths)` and `from_hub(task, split, rows)`, `task` being the TaskDefinition
(its `source` says which fields and labels the format holds). A new task in a known format needs no
reader; a new format is one module here plus its name in READERS.
"""

from lightning_bench.data.tasks.formats import glue_tsv, mmlu_csv, squad_json, superglue_jsonl

READERS = {"glue_tsv": glue_tsv, "superglue_jsonl": superglue_jsonl, "squad_json": squad_json, "mmlu_csv": mmlu_csv}
