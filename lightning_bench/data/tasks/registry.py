"""Where each downstream task's data lives: its HF hub id and its files in a local data folder.

Local paths are relative to a data folder laid out like ../shared/data (glue/, superglue/,
squad_v1.1/, squad_v2.0/, mmlu/). Split names are the hub's ("train", "validation", "test", and
MMLU's "dev"); MNLI's "validation" is matched + mismatched together (rows carry `subset`).
Train paths use each benchmark's own file names; ../shared/data holds no train files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lightning_bench.errors import ConfigError, unknown_name

GLUE_TASKS = ("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "wnli")
SUPERGLUE_TASKS = ("boolq", "cb", "copa", "multirc", "record", "rte", "wic", "wsc")
MMLU_SUBJECTS = (
    "abstract_algebra", "anatomy", "astronomy", "business_ethics", "clinical_knowledge",
    "college_biology", "college_chemistry", "college_computer_science", "college_mathematics",
    "college_medicine", "college_physics", "computer_security", "conceptual_physics", "econometrics",
    "electrical_engineering", "elementary_mathematics", "formal_logic", "global_facts",
    "high_school_biology", "high_school_chemistry", "high_school_computer_science",
    "high_school_european_history", "high_school_geography", "high_school_government_and_politics",
    "high_school_macroeconomics", "high_school_mathematics", "high_school_microeconomics",
    "high_school_physics", "high_school_psychology", "high_school_statistics",
    "high_school_us_history", "high_school_world_history", "human_aging", "human_sexuality",
    "international_law", "jurisprudence", "logical_fallacies", "machine_learning", "management",
    "marketing", "medical_genetics", "miscellaneous", "moral_disputes", "moral_scenarios", "nutrition",
    "philosophy", "prehistory", "professional_accounting", "professional_law", "professional_medicine",
    "professional_psychology", "public_relations", "security_studies", "sociology", "us_foreign_policy",
    "virology", "world_religions",
)
BENCHMARKS = ("glue", "superglue", "squad", "squad_v2", "mmlu")


@dataclass(frozen=True)
class TaskSource:
    name: str  # registry key, e.g. "glue/sst2"
    benchmark: str  # "glue" | "superglue" | "squad" | "squad_v2" | "mmlu"
    hub_id: str
    hub_config: str | None
    eval_split: str  # the split that is scored
    train_split: str | None  # None: the benchmark has no per-task train split (MMLU)
    fewshot_split: str  # where k-shot examples are drawn from
    local: dict[str, list[str]] = field(hash=False)  # split -> files under a data folder
    reader: str  # file format: "glue_tsv", "superglue_jsonl", "squad_json" or "mmlu_csv"
    local_note: str = ""  # how the ../shared/data files differ from the benchmark's own split
    hub_splits: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False)  # split -> hub splits


_DUMMY = "first rows only (an HF `datasets` dummy-data sample), not the full dev set"
# local eval file(s) of each GLUE task, and the train file under GLUE's own name
_GLUE_FILES = {
    "cola": (["glue/cola/in_domain_dev.tsv", "glue/cola/out_of_domain_dev.tsv"], "in_domain_train.tsv"),
    "sst2": (["glue/sst2/dev.tsv"], "train.tsv"),
    "mrpc": (["glue/mrpc/msr_paraphrase_test.txt"], "msr_paraphrase_train.txt"),
    "qqp": (["glue/qqp/dev.hf_dummy_sample.tsv"], "train.tsv"),
    "stsb": (["glue/stsb/dev.tsv"], "train.tsv"),
    "mnli": (["glue/mnli/dev_matched.hf_dummy_sample.tsv", "glue/mnli/dev_mismatched.hf_dummy_sample.tsv"],
             "train.tsv"),
    "qnli": (["glue/qnli/dev.tsv"], "train.tsv"),
    "rte": (["glue/rte/dev.hf_dummy_sample.tsv"], "train.tsv"),
    "wnli": (["glue/wnli/dev.hf_dummy_sample.tsv"], "train.tsv"),
}
_GLUE_NOTES = {
    "mrpc": "the official MRPC test file (msr_paraphrase_test.txt, with labels), not GLUE's MRPC dev split",
    **{t: _DUMMY for t in ("qqp", "mnli", "rte", "wnli")},
}
_SUPERGLUE_DIRS = {"boolq": "BoolQ", "cb": "CB", "copa": "COPA", "multirc": "MultiRC", "record": "ReCoRD",
                   "rte": "RTE", "wic": "WiC", "wsc": "WSC"}


def _glue(task: str) -> TaskSource:
    dev, train = _GLUE_FILES[task]
    local = {"validation": dev, "train": [f"glue/{task}/{train}"]}
    hub_splits = {}
    if task == "mnli":
        local |= {"validation_matched": dev[:1], "validation_mismatched": dev[1:]}
        hub_splits = {"validation": ("validation_matched", "validation_mismatched")}
    return TaskSource(f"glue/{task}", "glue", "nyu-mll/glue", task, "validation", "train", "train", local,
                      "glue_tsv", _GLUE_NOTES.get(task, ""), hub_splits)


def _superglue(task: str) -> TaskSource:
    folder = f"superglue/{_SUPERGLUE_DIRS[task]}"
    val, note = f"{folder}/val.jsonl", ""
    if task == "record":  # the full ReCoRD val file is too big for ../shared/data
        val, note = f"{folder}/val.hf_dummy_sample.jsonl", _DUMMY
    return TaskSource(f"superglue/{task}", "superglue", "aps/super_glue", task, "validation", "train", "train",
                      {"validation": [val], "train": [f"{folder}/train.jsonl"]}, "superglue_jsonl", note)


def _mmlu(subject: str) -> TaskSource:
    local = {split: [f"mmlu/{folder}/{subject}_{folder}.csv"]
             for split, folder in (("test", "test"), ("validation", "val"), ("dev", "dev"))}
    return TaskSource(f"mmlu/{subject}", "mmlu", "cais/mmlu", subject, "test", None, "dev", local, "mmlu_csv",
                      "test holds the first 100 questions of each subject (all of them for smaller subjects)")


TASKS: dict[str, TaskSource] = {
    **{f"glue/{t}": _glue(t) for t in GLUE_TASKS},
    **{f"superglue/{t}": _superglue(t) for t in SUPERGLUE_TASKS},
    "squad": TaskSource(
        "squad", "squad", "rajpurkar/squad", None, "validation", "train", "train",
        {"validation": ["squad_v1.1/xquad.en.json"], "train": ["squad_v1.1/train-v1.1.json"]}, "squad_json",
        "XQuAD English: 1190 of the SQuAD v1.1 dev questions, official ids, one gold answer each (dev has 3)"),
    "squad_v2": TaskSource(
        "squad_v2", "squad_v2", "rajpurkar/squad_v2", None, "validation", "train", "train",
        {"validation": ["squad_v2.0/dev-v2.0.cs224n_subset.json"], "train": ["squad_v2.0/train-v2.0.json"]},
        "squad_json", "CS224N subset of the SQuAD 2.0 dev set (6078 questions, question ids re-hashed)"),
    **{f"mmlu/{s}": _mmlu(s) for s in MMLU_SUBJECTS},
}
_GROUPS = {"glue": [f"glue/{t}" for t in GLUE_TASKS], "superglue": [f"superglue/{t}" for t in SUPERGLUE_TASKS],
           "mmlu": [f"mmlu/{s}" for s in MMLU_SUBJECTS]}


def get_task(name: str) -> TaskSource:
    """The one task `name` names; a benchmark or a list gets an error listing its tasks."""
    if name in TASKS:
        return TASKS[name]
    tasks = expand_tasks(name)  # raises the precise error for an unknown benchmark, task or subject
    raise ConfigError(f"{name!r} names {len(tasks)} tasks, not one; pick one of: {', '.join(tasks)}")


def expand_tasks(spec: str | list[str]) -> list[str]:
    """"glue" -> its 9 tasks, "mmlu" -> its 57 subjects, "glue/sst2,squad" -> both; order kept, no repeats."""
    parts = spec.split(",") if isinstance(spec, str) else [p for s in spec for p in s.split(",")]
    names = [p.strip() for p in parts if p.strip()]
    if not names:
        raise ConfigError("no task given; name a benchmark (" + ", ".join(BENCHMARKS) + ") or a task like glue/sst2")
    out: list[str] = []
    for name in names:
        for task in _GROUPS.get(name) or [_check(name)]:
            if task not in out:
                out.append(task)
    return out


def _check(name: str) -> str:
    if name in TASKS:
        return name
    bench, _, sub = name.partition("/")
    if bench == "mmlu":
        raise unknown_name("MMLU subject", sub, MMLU_SUBJECTS)
    if bench in ("glue", "superglue"):
        raise unknown_name(f"{bench} task", sub, GLUE_TASKS if bench == "glue" else SUPERGLUE_TASKS)
    raise unknown_name("benchmark or task", name,
                       {*BENCHMARKS, *(t for t in TASKS if not t.startswith("mmlu/")), "mmlu/<subject>"})
