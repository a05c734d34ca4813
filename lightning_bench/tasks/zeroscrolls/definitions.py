"""ZeroSCROLLS (Shaham et al., 2023): ten zero-shot long-text tasks, `zeroscrolls/<task>`: summarization
(gov_report, summ_screen_fd), query-based summarization (qmsum, squality), question answering (qasper,
narrative_qa, musique), multiple choice (quality) and aggregation (space_digest: the percentage of positive
reviews; book_sum_sort: the order of shuffled chapter summaries).

The prompt is the row's own `input`: ZeroSCROLLS ships every example as its canonical prompt (instruction,
document, query, response header such as "Answer:"), used verbatim. The document inside it is located by
the row's index fields; a prompt too long for the model loses the middle of the document, so the query is
never cut and the downstream driver can compress the document before the question. (The official runners
instead keep the document's beginning and write the row's `truncation_seperator`, "[The rest of the ... is
omitted]", before the query; and for chat APIs they add "Do not provide any explanation." to the instruction
of the non-summarization tasks and drop the response header. Neither is done here: the canonical prompt is
what every model is given, wrapped in the chat template where --data.chat_template asks for it.) New tokens
per answer are the official API runners' budgets (experiments/api/api.py). Greedy, no stop string.

Only the small validation split (about 20 examples per task) has references; the test set's are hidden
behind the leaderboard, so `eval` is the validation split. Scored by the official metrics
(tasks/zeroscrolls/scorer.py); every task reports "score", whose mean over the ten tasks is the
ZeroSCROLLS score. Files: tasks/zeroscrolls/reader.py; hub: tau/zero_scrolls, one
config per task.
"""

from __future__ import annotations

from lightning_bench.tasks.definition import Benchmark, GenerationSettings, Source, Splits, TaskDefinition

# experiments/api/api.py: dataset_to_leave_tokens_for_generations
MAX_NEW_TOKENS = {
    "gov_report": 1024, "summ_screen_fd": 512, "qmsum": 512, "squality": 512, "qasper": 128, "narrative_qa": 64,
    "quality": 10, "musique": 32, "space_digest": 36, "book_sum_sort": 256,
}
TITLES = {
    "gov_report": "GovReport", "summ_screen_fd": "SummScreenFD", "qmsum": "QMSum", "squality": "SQuALITY",
    "qasper": "Qasper", "narrative_qa": "NarrativeQA", "quality": "QuALITY", "musique": "MuSiQue",
    "space_digest": "SpaceDigest", "book_sum_sort": "BookSumSort",
}
TASK_ORDER = tuple(TITLES)


def canonical_prompt(r: dict) -> tuple:
    return r["input"], tuple(r["outputs"])


def _task(name: str) -> TaskDefinition:
    return TaskDefinition(
        name=f"zeroscrolls/{name}", benchmark="zeroscrolls", title=f"ZeroSCROLLS {TITLES[name]}",
        source=Source("tau/zero_scrolls", name, "zeroscrolls"), output_type="generate_until",
        template=canonical_prompt, template_version="zeroscrolls@1", scorer="zeroscrolls", headline="score",
        splits=Splits(eval="validation", train=None, fewshot=None), answer_field="outputs",
        generation=GenerationSettings(stop=(), max_new_tokens=MAX_NEW_TOKENS[name], document="document", chat=True))


TASKS = tuple(_task(name) for name in TASK_ORDER)
BENCHMARKS = (Benchmark("zeroscrolls", "ZeroSCROLLS", tuple(t.name for t in TASKS), "task_means",
                        member="ZeroSCROLLS task"),)
