"""SQuAD v1.1 and v2.0 (Rajpurkar et al., 2016 / 2018): extractive QA prompted as greedy generation.

Each is a benchmark of one task, scored by the official evaluation scripts' metrics (percent).
Files: the official JSON (tasks/squad/reader.py); hub: rajpurkar/squad(_v2).
"""

from __future__ import annotations

from lightning_bench.tasks.definition import Benchmark, GenerationSettings, Source, TaskDefinition

UNANSWERABLE = "unanswerable"
SQUAD_V2_LINE = f'Answer from the background; when it does not contain the answer, answer "{UNANSWERABLE}".'


def squad_prompt(r: dict) -> tuple:
    """(context, gold answers); () = unanswerable (v2)."""
    title = f"Title: {r['title']}\n\n" if r.get("title") else ""
    return f"{title}Background: {r['context']}\n\nQuestion: {r['question']}\n\nAnswer:", tuple(r["answers"])


TASKS = (
    TaskDefinition(
        name="squad", benchmark="squad", title="SQuAD v1.1", source=Source("rajpurkar/squad", None, "squad_json"),
        output_type="generate_until", template=squad_prompt, template_version="squad@1", scorer="squad_v1", headline="f1", answer_field="answers",
        generation=GenerationSettings(stop=("\n",), max_new_tokens=32, document="context")),
    TaskDefinition(
        name="squad_v2", benchmark="squad_v2", title="SQuAD v2.0",
        source=Source("rajpurkar/squad_v2", None, "squad_json"), output_type="generate_until",
        template=squad_prompt, template_version="squad_v2@1", scorer="squad_v2", headline="f1", description=SQUAD_V2_LINE,
        answer_field="answers",
        # the prompt asks for "unanswerable"; that answer is scored as the empty (no-answer) prediction
        generation=GenerationSettings(stop=("\n",), max_new_tokens=32, no_answer=UNANSWERABLE, document="context")),
)
BENCHMARKS = tuple(Benchmark(t.name, t.title, (t.name,), "single_task") for t in TASKS)
