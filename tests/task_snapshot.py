"""One rendered example of every registered task: its rows as the reader gives them, its requests (zero-shot
and one-shot), the prompt as the model reads it, and the scores of a right and a wrong answer through the
path `lightning_bench test` and `downstream` take. tests/snapshots/tasks.json holds a sha256 per task, taken
before the task layer moved into one folder per benchmark; `python -m tests.task_snapshot --write` retakes it
(only for a deliberate prompt or scorer change, which also bumps the task's template_version)."""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from dataclasses import asdict, is_dataclass
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent
SNAPSHOT = ROOT / "snapshots" / "tasks.json"
FIXTURES = ROOT / "fixtures"
# the first folder that holds a task's eval files (laid out like ../shared/data) gives its rows
DATA_DIRS = ("{shared}/data", f"{FIXTURES}/tasks", f"{FIXTURES}/generative", f"{FIXTURES}/long_context")
# formats whose tasks have no files of their own here: one file in the format stands in for each of them
STAND_INS = {"ruler": FIXTURES / "ruler" / "niah_single_1.300.jsonl",
             "longbench": FIXTURES / "long_context" / "longbench" / "data" / "trec.jsonl",
             "zeroscrolls": FIXTURES / "long_context" / "zeroscrolls" / "qasper" / "validation.jsonl",
             "long_context_rows": FIXTURES / "kvpress" / "rows.jsonl"}
# stand-in answers where a scorer reads a shape from the gold (LongBench's retrieval: a paragraph number)
# and ZeroSCROLLS' aggregation tasks (a percentage, an order of summary ids)
GOLD_SHAPES = {"passage_retrieval_en": {"answers": ["Paragraph 2"]}, "passage_retrieval_zh": {"answers": ["段落2"]},
               "passage_count": {"answers": ["3"]}, "space_digest": {"output": "40%"},
               "book_sum_sort": {"output": "2, 1, 3"}}


def _plain(value):
    if is_dataclass(value):
        return _plain(asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return round(value, 9)
    return value


def task_rows(name: str, shared: Path) -> tuple[list[dict], str]:
    """(the first two eval rows of `name`, where they came from)."""
    from lightning_bench.tasks import TASKS, load_rows
    from lightning_bench.errors import ConfigError

    for folder in DATA_DIRS:
        folder = folder.format(shared=shared)
        try:
            rows = load_rows(name, "eval", data_dir=folder, max_rows=2)
        except ConfigError:
            continue
        if rows:
            return rows, Path(folder).name
    stand_in = STAND_INS[TASKS[name].source.format]
    with tempfile.TemporaryDirectory() as tmp:  # a row naming its own task (RULER, LongBench) names none here
        rows = [json.loads(line) for line in stand_in.read_text().splitlines() if line.strip()]
        copy = Path(tmp) / stand_in.name
        shape = GOLD_SHAPES.get(TASKS[name].short_name, {})
        copy.write_text("".join(json.dumps({**{k: v for k, v in row.items() if k not in ("task", "dataset")},
                                            **shape}) + "\n" for row in rows))
        return load_rows(name, "eval", paths=str(copy), max_rows=2), stand_in.name


def _outputs(requests) -> list[dict]:
    """Model outputs that answer the first request right and the second wrong."""
    outputs = []
    for rid, req in enumerate(requests):
        r = req.request
        if hasattr(r, "answers"):
            text = (list(r.answers) or [r.no_answer or ""])[0] if rid == 0 else "a wrong answer"
            outputs.append({"kind": "generate", "request_id": [rid], "text": [text], "tokens": [[1, 2, 3]],
                            "no_answer_prob": [0.25]})
            continue
        gold = r.gold[0] if isinstance(r.gold, tuple) else r.gold
        pick = gold if rid == 0 else (gold + 1) % len(r.choices)
        for i in range(len(r.choices)):
            outputs.append({"kind": "choice", "request_id": [rid], "choice_index": [i],
                            "loglik": [-1.0 if i == pick else -3.0 - i], "greedy": [i == pick]})
    return outputs


def render(name: str, shared: Path) -> dict:
    from lightning_bench.tasks.datamodules.prompted import Request
    from lightning_bench.tasks import TASKS
    from lightning_bench.tasks.prompts import build_request, render_generation
    from lightning_bench.tasks.benchmark_scores import score_prompted

    definition = TASKS[name]
    rows, source = task_rows(name, shared)
    requests = [Request(name, row, build_request(name, row)) for row in rows]
    shot = build_request(name, rows[0], shots=rows[1:2])
    results, samples = score_prompted(requests, _outputs(requests))
    out = {"source": source, "rows": rows, "requests": [r.request for r in requests], "one_shot": shot,
           "template_version": definition.template_version, "results": results, "samples": samples}
    if definition.output_type == "generate_until":
        from lightning_bench.experiments.downstream.scoring import primary_metric

        out["prompt"] = render_generation(requests[0].request)
        out["primary_metric"] = primary_metric(name)
    return _plain(out)


def digests(shared: Path) -> dict[str, str]:
    from lightning_bench.tasks import TASKS

    return {name: hashlib.sha256(json.dumps(render(name, shared), sort_keys=True, ensure_ascii=False)
                                 .encode()).hexdigest() for name in TASKS}


if __name__ == "__main__":
    import os

    shared = Path(os.environ.get("LB_SHARED_DIR", ROOT.parent.parent / "shared"))
    if sys.argv[1:] == ["--write"]:
        SNAPSHOT.write_text(json.dumps(digests(shared), indent=1, sort_keys=True) + "\n")
    else:
        print(json.dumps(render(sys.argv[1], shared), indent=1, ensure_ascii=False)[:4000])
