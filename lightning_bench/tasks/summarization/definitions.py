"""Summarization: CNN/DailyMail 3.0.0 (Hermann et al., 2015; See et al., 2017), XSum (Narayan et al., 2018),
Multi-News (Fabbri et al., 2019), prompted zero-shot as instructions.

Scored with ROUGE-1/2/L/Lsum F1 (the `rouge-score` package, stemming on; Lsum over newline-split
sentences, as CNN/DM is scored), mean and bootstrap 95% CI (tasks/metrics/rouge.py).
Files: tasks/summarization/reader.py (CNN/DM `.story` or the hub layout, XSum, Multi-News);
hub: abisee/cnn_dailymail 3.0.0, EdinburghNLP/xsum, alexfabbri/multi_news. An article too long for the
model loses its middle (never the instruction).
"""

from __future__ import annotations

from lightning_bench.tasks.definition import Benchmark, GenerationSettings, Source, Splits, TaskDefinition


def _prompt(instruction: str, label: str):
    def template(r: dict) -> tuple:
        return f"{instruction}\n\n{label}: {r['document']}\n\nSummary:", (r["summary"],)

    return template


def _task(name: str, title: str, hub: str, config, fmt: str, instruction: str, label: str, max_new_tokens: int,
          stop: tuple) -> TaskDefinition:
    return TaskDefinition(
        name=name, benchmark=name, title=title, source=Source(hub, config, fmt), output_type="generate_until",
        template=_prompt(instruction, label), template_version=f"{name}@1", scorer="rouge", headline="rougeL",
        splits=Splits(eval="test", train="train", fewshot="train"), answer_field="summary",
        generation=GenerationSettings(stop=stop, max_new_tokens=max_new_tokens, document="document", chat=True))


TASKS = (
    _task("cnn_dailymail", "CNN/DailyMail 3.0.0", "abisee/cnn_dailymail", "3.0.0", "cnn_dailymail",
          "Summarize the news article below in three or four sentences.", "Article", 128, ("\n\n",)),
    _task("xsum", "XSum", "EdinburghNLP/xsum", None, "xsum",
          "Summarize the article below in one sentence.", "Article", 64, ("\n",)),
    _task("multi_news", "Multi-News", "alexfabbri/multi_news", None, "multi_news",
          "Summarize the news articles below in one paragraph.", "Articles", 256, ("\n\n",)),
)
BENCHMARKS = tuple(Benchmark(t.name, t.title, (t.name,), "single_task") for t in TASKS) + (
    Benchmark("summarization", "summarization tasks", tuple(t.name for t in TASKS), "selection_only"),)
