"""MMLU (Hendrycks et al., 2021): 57 subjects, one definition each, all with the original MMLU prompt.

The prompt is the reference code's (hendrycks/test): a subject line, k dev questions with their answer
letters, then the question; fields unstripped as the original code used them. The subjects (below) and
their categories (tasks/mmlu/metrics.py) are the reference code's; the benchmark's figures are micro
averages over questions. Files: the original CSVs (tasks/mmlu/reader.py); hub: cais/mmlu.
"""

from __future__ import annotations

from lightning_bench.tasks.definition import Benchmark, Source, Splits, TaskDefinition

# The 57 subjects, named as the data files (`<subject>_test.csv`), sorted; the scoring's subject ->
# category table (tasks/mmlu/metrics.py) covers exactly these.
MMLU_SUBJECTS: tuple[str, ...] = (
    "abstract_algebra", "anatomy", "astronomy", "business_ethics", "clinical_knowledge", "college_biology",
    "college_chemistry", "college_computer_science", "college_mathematics", "college_medicine",
    "college_physics", "computer_security", "conceptual_physics", "econometrics", "electrical_engineering",
    "elementary_mathematics", "formal_logic", "global_facts", "high_school_biology", "high_school_chemistry",
    "high_school_computer_science", "high_school_european_history", "high_school_geography",
    "high_school_government_and_politics", "high_school_macroeconomics", "high_school_mathematics",
    "high_school_microeconomics", "high_school_physics", "high_school_psychology", "high_school_statistics",
    "high_school_us_history", "high_school_world_history", "human_aging", "human_sexuality",
    "international_law", "jurisprudence", "logical_fallacies", "machine_learning", "management", "marketing",
    "medical_genetics", "miscellaneous", "moral_disputes", "moral_scenarios", "nutrition", "philosophy",
    "prehistory", "professional_accounting", "professional_law", "professional_medicine",
    "professional_psychology", "public_relations", "security_studies", "sociology", "us_foreign_policy",
    "virology", "world_religions",
)

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
