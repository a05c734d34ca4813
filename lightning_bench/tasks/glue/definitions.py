"""GLUE (Wang et al., 2019, ICLR): the 9 tasks, each one definition; the benchmark score averages them.

Metrics are the GLUE paper's (Table 4, Sec. 3.4). Files: GLUE's TSVs (tasks/glue/reader.py);
hub: nyu-mll/glue. Changing a template means bumping its `@n` version.
"""

from __future__ import annotations

from lightning_bench.tasks.definition import Benchmark, Finetune, Source, TaskDefinition
from lightning_bench.tasks.choice_prompts import BINARY, ENTAILMENT, TRUE_FALSE, YES_NO, nli, pair

HUB_ID = "nyu-mll/glue"


def glue_task(short: str, title: str, columns: dict, label_column, label_names, template, metrics: tuple,
              finetune: Finetune, **extra) -> TaskDefinition:
    return TaskDefinition(
        name=f"glue/{short}", benchmark="glue", title=title,
        source=Source(HUB_ID, short, "glue_tsv", columns, label_column, label_names,
                      hub_splits=extra.pop("hub_splits", {})),
        output_type="multiple_choice", template=template, template_version=f"glue/{short}@1", metrics=metrics,
        finetune=finetune, **extra)


TASKS = (
    glue_task("cola", "CoLA", {"sentence": 3}, 1, BINARY,  # no header: columns by position
              lambda r: (f"{r['sentence']}\nQuestion: Does this sentence make sense?\nAnswer:", YES_NO, r["label"]),
              ("mcc",), Finetune(2, ("sentence", None))),
    glue_task("sst2", "SST-2", {"sentence": "sentence"}, "label", BINARY,
              lambda r: (f"{r['sentence']}\nQuestion: Is this sentence positive or negative?\nAnswer:",
                         (" negative", " positive"), r["label"]),
              ("accuracy",), Finetune(2, ("sentence", None))),
    glue_task("mrpc", "MRPC", {"sentence1": "#1 String", "sentence2": "#2 String"}, "Quality", BINARY,
              lambda r: (pair(r["sentence1"], r["sentence2"], "Do both sentences mean the same thing?"), YES_NO,
                         r["label"]),
              ("accuracy", "f1"), Finetune(2, ("sentence1", "sentence2"))),
    glue_task("qqp", "QQP", {"question1": "question1", "question2": "question2"}, "is_duplicate", BINARY,
              lambda r: (pair(r["question1"], r["question2"], "Do both questions ask the same thing?", "Question"),
                         YES_NO, r["label"]),
              ("accuracy", "f1"), Finetune(2, ("question1", "question2"))),
    glue_task("stsb", "STS-B", {"sentence1": "sentence1", "sentence2": "sentence2"}, "score", None,
              lambda r: (pair(r["sentence1"], r["sentence2"],
                              "On a scale of 0 to 5, how similar are the two sentences in meaning?"),
                         tuple(f" {i}" for i in range(6)), min(5, int(r["label"] + 0.5))),  # gold: score rounded half up
              ("pearson", "spearman"), Finetune(1, ("sentence1", "sentence2")),  # 1 label: regression
              choice_values=(0.0, 1.0, 2.0, 3.0, 4.0, 5.0)),
    glue_task("mnli", "MNLI", {"premise": "sentence1", "hypothesis": "sentence2"}, "gold_label",
              ("entailment", "neutral", "contradiction"),
              lambda r: (nli(r["premise"], r["hypothesis"], "True, False or Neither"),
                         (" True", " Neither", " False"), r["label"]),
              ("accuracy_matched", "accuracy_mismatched"), Finetune(3, ("premise", "hypothesis")),
              hub_splits={"validation": ("validation_matched", "validation_mismatched")}),
    glue_task("qnli", "QNLI", {"question": "question", "sentence": "sentence"}, "label", ENTAILMENT,
              lambda r: (f"{r['question']}\n{r['sentence']}\nQuestion: Does this response answer the question?"
                         "\nAnswer:", (" yes", " no"), r["label"]),
              ("accuracy",), Finetune(2, ("question", "sentence"))),
    glue_task("rte", "RTE", {"sentence1": "sentence1", "sentence2": "sentence2"}, "label", ENTAILMENT,
              lambda r: (nli(r["sentence1"], r["sentence2"], "True or False"), TRUE_FALSE, r["label"]),
              ("accuracy",), Finetune(2, ("sentence1", "sentence2"))),
    glue_task("wnli", "WNLI", {"sentence1": "sentence1", "sentence2": "sentence2"}, "label", BINARY,
              lambda r: (nli(r["sentence1"], r["sentence2"], "True or False"), (" False", " True"), r["label"]),
              ("accuracy",), Finetune(2, ("sentence1", "sentence2"))),
)

# the official score: the unweighted mean of the 9 task scores (MNLI one task); the AX diagnostic is not in it
BENCHMARKS = (Benchmark("glue", "GLUE", tuple(t.name for t in TASKS), "mean_task_score"),)
