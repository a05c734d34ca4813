"""Counting-Stars (Song, Zheng and Luo, 2024, "Counting-Stars: A Multi-evidence, Position-aware, and Scalable
Benchmark for Evaluating Long-Context Large Language Models", arXiv 2403.11802; github nick7nlp/Counting-Stars):
M sentences "The little penguin counted N ★" spread evenly through a long text, and the model asked to list
every N. A multi-evidence test: an eviction method must keep all M, wherever they sit.

    counting_stars/searching   the M counts, each stated once ("Me-Acquisition" in the paper's first version)
    counting_stars/reasoning   each count stated wrong, then corrected; only the corrected ones are asked for

English version (its gen_test_data.ipynb): the question follows the context after four newlines and asks
for JSON {"little_penguin": [x, x, ...]}. Rows come from `lightning_bench counting_stars_generate`
(generate.py) or the release files (reader.py); scored by scorer.py, as the benchmark's viz.ipynb scores.
"""

from __future__ import annotations

from lightning_bench.tasks.definition import Benchmark, GenerationSettings, Source, Splits, TaskDefinition

QUESTION = ("On this moonlit and misty night, the little penguin is looking up at the sky and concentrating on "
            "counting ★. Please help the little penguin collect the {what} of ★, for example: "
            '{{"little_penguin": [x, x, x,...]}}. The summation is not required, and the numbers in [x, x, x,...] '
            "represent the {counted} ★ by the little penguin. Only output the results in JSON format without "
            "any explanation.")
QUESTIONS = {"searching": QUESTION.format(what="number", counted="counted number of"),
             "reasoning": QUESTION.format(what="correct number", counted="correctly counted number of")}
SEPARATOR = "\n\n\n\n"  # between the context and the question, as the benchmark writes its prompts
PIECES_PER_TOKEN = 0.8  # the English sets' haystack pieces per nominal token (a length of 4000 = 3200 pieces)
TITLES = {"searching": "multi-evidence searching", "reasoning": "multi-evidence reasoning"}
FIELDS = ("the release files' question, retrieval_question, reference_counting_results, context_size; "
          "generated rows: context, question, counts, distractors, star_depths, length, context_size")


def prompt(r: dict) -> tuple:
    """The benchmark's prompt (context, four newlines, the question) and the gold answer as JSON."""
    return f"{r['context']}{SEPARATOR}{r['question']}", tuple(r["answers"])


def _task(short: str) -> TaskDefinition:
    name = f"counting_stars/{short}"
    return TaskDefinition(
        name=name, benchmark="counting_stars", title=f"Counting-Stars {short} ({TITLES[short]})",
        # no hub copy: the benchmark publishes its files on GitHub only (generate them, or pass them)
        source=Source("", None, "counting_stars", file_fields=FIELDS), output_type="generate_until",
        template=prompt, template_version=f"{name}@1", scorer="counting_stars", headline="score",
        splits=Splits(eval="test", train=None, fewshot=None), answer_field="answers",
        # 32 counts of up to 3 digits as JSON: 138-143 SmolLM2 tokens; a generated row gives its own limit (8 a
        # count); no stop string (the JSON is the answer)
        generation=GenerationSettings(stop=(), max_new_tokens=256, document="context", chat=True))


TASKS = tuple(_task(short) for short in ("searching", "reasoning"))
BENCHMARKS = (Benchmark("counting_stars", "Counting-Stars (English)", tuple(t.name for t in TASKS), "task_means",
                        member="Counting-Stars task"),)
