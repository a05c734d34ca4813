"""Bring-your-own long-context data: the kvpress-style unified row (context, question, answer_prefix,
answer, max_new_tokens), one row per question, as JSON lines (`--data.paths '{"long_context_rows": FILE}'`)
or a hub dataset in that layout (default: simonjegou/ruler, config 4096: RULER 4k as kvpress publishes
it). The context is the document: cut from its middle when too long, and compressed before the question
under the query-agnostic protocol. Scored by substring match of the answer(s) and SQuAD token F1
(tasks/long_context_rows/scorer.py)."""

from lightning_bench.tasks.definition import Benchmark, GenerationSettings, Source, Splits, TaskDefinition


def unified_prompt(r: dict) -> tuple:
    """The user's text (context + question); the row's answer_prefix follows it (answer_prefix_field)."""
    return f"{r['context']}{r['question']}", tuple(r["answers"])


TASKS = (
    TaskDefinition(
        name="long_context_rows", benchmark="long_context_rows", title="long-context rows (kvpress layout)",
        source=Source("simonjegou/ruler", "4096", "long_context_rows"), output_type="generate_until",
        template=unified_prompt, template_version="long_context_rows@2", scorer="long_context_rows", headline="string_match",
        splits=Splits(eval="test", train=None, fewshot=None), answer_field="answers",
        # max_new_tokens: each row's own where it gives one (PromptedDataModule), else this
        generation=GenerationSettings(stop=(), max_new_tokens=64, document="context", chat=True,
                                      answer_prefix_field="answer_prefix")),
)
BENCHMARKS = (Benchmark("long_context_rows", "long-context rows", ("long_context_rows",), "single_task"),)
