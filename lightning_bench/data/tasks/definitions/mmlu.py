"""MMLU (Hendrycks et al., 2021): 57 subjects, one definition each, all with the original MMLU prompt.

The prompt is the reference code's (hendrycks/test): a subject line, k dev questions with their answer
letters, then the question; fields unstripped as the original code used them. The subjects and their
categories are the reference code's (evaluation/mmlu_metrics.py); the benchmark's figures are micro
averages over questions. Files: the original CSVs (data/tasks/formats/mmlu_csv.py); hub: cais/mmlu.
"""

from __future__ import annotations

from lightning_bench.data.tasks.definition import Benchmark, Source, Splits, TaskDefinition
from lightning_bench.evaluation.mmlu_metrics import MMLU_SUBJECTS

LETTERS = ("A", "B", "C", "D")
CHOICES = tuple(f" {letter}" for letter in LETTERS)


def mmlu_prompt(r: dict) -> tuple:
    options = "".join(f"\n{letter}. {choice}" for letter, choice in zip(LETTERS, r["choices"]))
    return f"{r['question']}{options}\nAnswer:", CHOICES, r["label"]


def mmlu_subject(subject: str) -> TaskDefinition:
    return TaskDefinition(
        name=f"mmlu/{subject}", benchmark="mmlu", title=f"MMLU {subject}",
        source=Source("cais/mmlu", subject, "mmlu_csv", label_names=LETTERS),
        # the first k dev questions, in order, are the shots (the original protocol); test is scored
        splits=Splits(eval="test", train=None, fewshot="dev"), fewshot_sampling="first",
        output_type="multiple_choice", template=mmlu_prompt, template_version="mmlu@1", metrics=("accuracy",),
        description=f"The following are multiple choice questions (with answers) about {subject.replace('_', ' ')}.")


TASKS = tuple(mmlu_subject(s) for s in MMLU_SUBJECTS)
BENCHMARKS = (Benchmark("mmlu", "MMLU", tuple(t.name for t in TASKS), "mmlu_questions", member="MMLU subject"),)
