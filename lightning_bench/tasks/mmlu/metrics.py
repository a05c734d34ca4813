"""MMLU scoring: per-subject, per-category and overall accuracy from per-question correctness.

Follows the MMLU reference code (hendrycks/test): `categories.py` maps each of the 57 subjects to a
subcategory and each subcategory to one of 4 categories, and `evaluate.py` reports accuracy per
subject, per category (all questions of the category pooled) and the "weighted" average over all
questions, which is the benchmark's headline MMLU number. The mapping below is that file's
`subcategories` and `categories`, read from public copies of it.
"""

from __future__ import annotations

import difflib
from typing import Mapping, Sequence

from lightning_bench.tasks.mmlu.definitions import MMLU_SUBJECTS  # the task definitions own them
from lightning_bench.errors import ConfigError

# hendrycks/test categories.py `subcategories` (each subject has exactly one subcategory there).
_SUBCATEGORY: dict[str, str] = {
    "abstract_algebra": "math",
    "anatomy": "health",
    "astronomy": "physics",
    "business_ethics": "business",
    "clinical_knowledge": "health",
    "college_biology": "biology",
    "college_chemistry": "chemistry",
    "college_computer_science": "computer science",
    "college_mathematics": "math",
    "college_medicine": "health",
    "college_physics": "physics",
    "computer_security": "computer science",
    "conceptual_physics": "physics",
    "econometrics": "economics",
    "electrical_engineering": "engineering",
    "elementary_mathematics": "math",
    "formal_logic": "philosophy",
    "global_facts": "other",
    "high_school_biology": "biology",
    "high_school_chemistry": "chemistry",
    "high_school_computer_science": "computer science",
    "high_school_european_history": "history",
    "high_school_geography": "geography",
    "high_school_government_and_politics": "politics",
    "high_school_macroeconomics": "economics",
    "high_school_mathematics": "math",
    "high_school_microeconomics": "economics",
    "high_school_physics": "physics",
    "high_school_psychology": "psychology",
    "high_school_statistics": "math",
    "high_school_us_history": "history",
    "high_school_world_history": "history",
    "human_aging": "health",
    "human_sexuality": "culture",
    "international_law": "law",
    "jurisprudence": "law",
    "logical_fallacies": "philosophy",
    "machine_learning": "computer science",
    "management": "business",
    "marketing": "business",
    "medical_genetics": "health",
    "miscellaneous": "other",
    "moral_disputes": "philosophy",
    "moral_scenarios": "philosophy",
    "nutrition": "health",
    "philosophy": "philosophy",
    "prehistory": "history",
    "professional_accounting": "other",
    "professional_law": "law",
    "professional_medicine": "health",
    "professional_psychology": "psychology",
    "public_relations": "politics",
    "security_studies": "politics",
    "sociology": "culture",
    "us_foreign_policy": "politics",
    "virology": "health",
    "world_religions": "philosophy",
}

# hendrycks/test categories.py `categories`: category -> its subcategories.
_CATEGORY_SUBCATEGORIES: dict[str, tuple[str, ...]] = {
    "STEM": ("physics", "chemistry", "biology", "computer science", "math", "engineering"),
    "humanities": ("history", "philosophy", "law"),
    "social sciences": ("politics", "culture", "economics", "geography", "psychology"),
    "other (business, health, misc.)": ("other", "business", "health"),
}

# Short names used as keys of `mmlu_metrics(...)["category_scores"]`.
CATEGORY_KEY: dict[str, str] = {
    "STEM": "STEM",
    "humanities": "humanities",
    "social sciences": "social_sciences",
    "other (business, health, misc.)": "other",
}


def _subject_categories() -> dict[str, str]:
    if set(_SUBCATEGORY) != set(MMLU_SUBJECTS):  # would mean the table above or the task list was mis-copied
        raise AssertionError(f"MMLU subjects differ: {sorted(set(MMLU_SUBJECTS) ^ set(_SUBCATEGORY))}")
    out = {}
    for subject, sub in _SUBCATEGORY.items():
        cats = [cat for cat, subs in _CATEGORY_SUBCATEGORIES.items() if sub in subs]
        if len(cats) != 1:  # would mean the table above was mis-copied
            raise AssertionError(f"MMLU subject {subject!r} (subcategory {sub!r}) is in {len(cats)} categories")
        out[subject] = cats[0]
    return out


# subject -> category, with the reference code's category names.
SUBJECT_CATEGORY: dict[str, str] = _subject_categories()


def _unknown_subject(subject: str) -> ConfigError:
    close = difflib.get_close_matches(subject, MMLU_SUBJECTS, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return ConfigError(f"unknown MMLU subject {subject!r}{hint}; the 57 valid names are "
                      "lightning_bench.tasks.mmlu.definitions.MMLU_SUBJECTS, i.e. the data file names "
                      "without '_test.csv'")


def mmlu_metrics(correct_by_subject: Mapping[str, Sequence[bool]]) -> dict:
    """Score MMLU from whether each question was answered correctly, grouped by subject.

    Returns {"accuracy": correct / questions over everything given (the reference code's weighted
    average, the headline MMLU number), "macro_accuracy": mean of the subject accuracies (every subject
    weighted equally), "subject_scores": {subject: accuracy}, "category_scores": {"STEM" | "humanities" |
    "social_sciences" | "other": accuracy over all questions of that category's subjects} (only
    categories with a subject given), "num_subjects_evaluated", "num_questions"}.
    The overall number equals the published one only when all 57 subjects are scored.
    """
    if not correct_by_subject:
        raise ConfigError("no MMLU subjects given: pass {subject: [correct, ...]} for at least one subject")
    correct_total = questions_total = 0
    subject_scores: dict[str, float] = {}
    per_category: dict[str, list[int]] = {}  # category key -> [correct, questions]
    for subject, outcomes in correct_by_subject.items():
        if subject not in SUBJECT_CATEGORY:
            raise _unknown_subject(subject)
        if len(outcomes) == 0:
            raise ConfigError(f"MMLU subject {subject!r} has no questions")
        for v in outcomes:
            if v not in (True, False):  # also admits 0/1, which compare equal to the bools
                raise ConfigError(f"MMLU subject {subject!r}: outcomes must be booleans, got {v!r}")
        n_correct = sum(bool(v) for v in outcomes)
        subject_scores[subject] = n_correct / len(outcomes)
        counts = per_category.setdefault(CATEGORY_KEY[SUBJECT_CATEGORY[subject]], [0, 0])
        counts[0] += n_correct
        counts[1] += len(outcomes)
        correct_total += n_correct
        questions_total += len(outcomes)
    return {
        "accuracy": correct_total / questions_total,
        "macro_accuracy": sum(subject_scores.values()) / len(subject_scores),
        "subject_scores": subject_scores,
        "category_scores": {cat: c / n for cat, (c, n) in per_category.items()},
        "num_subjects_evaluated": len(subject_scores),
        "num_questions": questions_total,
    }
