"""Open-domain QA: Natural Questions (NQ-open; Lee et al., 2019) and TriviaQA (Joshi et al., 2017) in its
reading-comprehension setting (`rc`: the question with its evidence documents) and without context
(`unfiltered`, the closed-book setting).

Scored by exact match and token F1, the max over the gold answers (TriviaQA: every alias), after each
benchmark's official answer normalisation (tasks/metrics/open_qa.py). SQuAD v2 (tasks/squad/definitions.py) is the
extractive member of the `qa` group. Files: tasks/open_qa/reader.py; hub:
google-research-datasets/nq_open, mandarjoshi/trivia_qa (rc / unfiltered.nocontext).
"""

from __future__ import annotations

from lightning_bench.tasks.definition import Benchmark, GenerationSettings, Source, Splits, TaskDefinition

INSTRUCTION = "Answer the question with a short answer (a few words), and nothing else."


def closed_book(r: dict) -> tuple:
    question = r["question"].strip()
    question = question if question.endswith("?") else question + "?"  # NQ-open questions are lowercased, no "?"
    return f"{INSTRUCTION}\n\nQuestion: {question}\n\nAnswer:", tuple(r["answers"])


def with_evidence(r: dict) -> tuple:
    return (f"{INSTRUCTION} Use the evidence.\n\nEvidence: {r['context']}\n\nQuestion: {r['question'].strip()}"
            "\n\nAnswer:", tuple(r["answers"]))


def _task(name: str, benchmark: str, title: str, hub: str, config: str, fmt: str, template, metric: str,
          document=None) -> TaskDefinition:
    return TaskDefinition(
        name=name, benchmark=benchmark, title=title, source=Source(hub, config, fmt), output_type="generate_until",
        template=template, template_version=f"{benchmark}@1", scorer=metric, headline="f1",
        splits=Splits(eval="validation", train="train", fewshot="train"), answer_field="answers",
        generation=GenerationSettings(stop=("\n",), max_new_tokens=32, document=document, chat=True))


TASKS = (
    _task("natural_questions", "natural_questions", "Natural Questions (NQ-open)", "google-research-datasets/nq_open",
          "nq_open", "nq_open", closed_book, "open_qa_nq"),
    _task("triviaqa/rc", "triviaqa", "TriviaQA (rc)", "mandarjoshi/trivia_qa", "rc", "triviaqa", with_evidence,
          "open_qa_triviaqa", document="context"),
    _task("triviaqa/unfiltered", "triviaqa", "TriviaQA (unfiltered, no context)", "mandarjoshi/trivia_qa",
          "unfiltered.nocontext", "triviaqa", closed_book, "open_qa_triviaqa"),
)
BENCHMARKS = (
    Benchmark("natural_questions", "Natural Questions (NQ-open)", ("natural_questions",), "single_task"),
    Benchmark("triviaqa", "TriviaQA", ("triviaqa/rc", "triviaqa/unfiltered"), "per_task", member="TriviaQA setting"),
    Benchmark("qa", "open QA tasks", ("natural_questions", "triviaqa/rc", "triviaqa/unfiltered", "squad_v2"),
              "selection_only"),
)
