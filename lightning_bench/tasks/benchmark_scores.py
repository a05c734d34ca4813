"""From scored requests (or fine-tuned predictions) to each benchmark's metrics and per-sample rows.

Prompted multiple choice: the prediction is the choice with the highest summed log-likelihood
(`acc`, what the task metrics use) and, reported beside it, the highest log-likelihood per character
of the choice text (lm-evaluation-harness's `acc_norm`: `completion_len` counts the choice without the
separator that joins it to the context). STS-B's prediction is the probability-weighted
score over the choices " 0".." 5" (the choices' probabilities renormalised among themselves).
SQuAD: the generated text cut at the stop string; under v2 the no-answer string maps to "" and the
no-answer probability is that of the whole no-answer string after the prompt (best-threshold metrics).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Optional

from lightning_bench.tasks import BENCHMARK_ORDER, BENCHMARKS, TASKS, TaskDefinition, get_task
from lightning_bench.tasks.metrics.classification import benchmark_average, task_score
from lightning_bench.tasks.mmlu.metrics import mmlu_metrics
from lightning_bench.tasks.metrics.squad import normalize_answer
from lightning_bench.tasks.generative_scoring import is_generative, score_generative, task_means_entry
from lightning_bench.tasks.official_metrics import compute_metrics, needs_groups, needs_subsets


def collect(outputs: list[dict]) -> dict[int, dict]:
    """Step outputs -> {request_id: {"loglik": [per choice], "greedy": [...]} | generation fields}."""
    by_request: dict[int, dict] = defaultdict(lambda: {"loglik": {}, "greedy": {}})
    for out in outputs:
        for j, rid in enumerate(out["request_id"]):
            entry = by_request[rid]
            if out["kind"] == "generate":
                entry.update(text=out["text"][j], tokens=out["tokens"][j], no_answer_prob=out["no_answer_prob"][j],
                             samples=out["samples"][j] if "samples" in out else None)
            elif out["kind"] == "next_token":
                entry["loglik"] = dict(enumerate(out["loglik"][j]))
                entry["greedy"] = dict(enumerate(out["greedy"][j]))
            else:
                entry["loglik"][out["choice_index"][j]] = out["loglik"][j]
                entry["greedy"][out["choice_index"][j]] = out["greedy"][j]
    return by_request


def _argmax(values):
    return max(range(len(values)), key=values.__getitem__)


# What joins a choice to its context: the leading space of every template's choices (tasks/
# choice_prompts.py), which acc_norm does not count; ReCoRD's choices are bullets ("  - ...") joined
# with nothing, as in the harness's record task (target_delimiter "").
SEPARATOR = " "
SEPARATORS = {"superglue/record": ""}


def choice_prediction(request, scored: dict, separator: str = SEPARATOR) -> dict:
    n = len(request.choices)
    if len(scored["loglik"]) != n:
        raise RuntimeError(f"request scored {len(scored['loglik'])} of its {n} choices")
    ll = [scored["loglik"][i] for i in range(n)]
    lengths = [len(c[len(separator):] if c.startswith(separator) else c) for c in request.choices]
    per_char = [v / max(1, length) for v, length in zip(ll, lengths)]
    out = {"loglik": ll, "prediction": _argmax(ll), "prediction_norm": _argmax(per_char)}
    if request.choice_values is not None:
        top = max(ll)
        weights = [math.exp(v - top) for v in ll]
        out["value"] = sum(w * x for w, x in zip(weights, request.choice_values)) / sum(weights)
    return out


def _gold_set(request) -> set[int]:
    return set(request.gold) if isinstance(request.gold, (tuple, list)) else {request.gold}


def cut_at_stop(text: str, stop, keep_whitespace: bool = False) -> str:
    """The answer in a generated text: up to the first stop string, stripped (code keeps its leading
    indentation: it is part of the completion; trailing space is dropped)."""
    for s in stop:
        text = text.split(s)[0]
    return text.rstrip() if keep_whitespace else text.strip()


def generation_prediction(request, scored: dict, keep_whitespace: bool = False) -> dict:
    answer = cut_at_stop(scored["text"], request.stop, keep_whitespace)
    if request.no_answer and normalize_answer(answer) == normalize_answer(request.no_answer):
        answer = ""
    out = {"generated": scored["text"], "generated_tokens": len(scored["tokens"]), "prediction": answer,
           "no_answer_prob": scored.get("no_answer_prob")}
    if scored.get("samples"):  # several completions per prompt (pass@k): each cut the same way
        out["predictions"] = [cut_at_stop(t, request.stop, keep_whitespace) for t in scored["samples"]]
    return out


def score_prompted(requests, outputs: list[dict]) -> tuple[dict, list[dict]]:
    """(results by benchmark, per-sample rows) for the prompted protocol."""
    scored = collect(outputs)
    per_task: dict[str, list[tuple]] = defaultdict(list)
    samples = []
    for rid, req in enumerate(requests):
        if rid not in scored:
            raise RuntimeError(f"request {rid} ({req.task}) was never scored")
        r = req.request
        definition = get_task(req.task)
        pred = (generation_prediction(r, scored[rid], definition.generation.keep_whitespace) if hasattr(r, "answers")
                else choice_prediction(r, scored[rid], SEPARATORS.get(req.task, SEPARATOR)))
        per_task[req.task].append((req, pred))
        # lengths per sample, so that scores can be plotted against length: as fed, and before truncation
        samples.append({"task": req.task, "id": req.row["id"], "prompt_tokens": req.prompt_tokens,
                        "original_prompt_tokens": req.prompt_tokens + req.truncated,
                        "truncated_tokens": req.truncated, **pred,
                        **({"gold": r.gold} if hasattr(r, "gold") else {"answers": list(r.answers)})})
    metrics = {}
    for task, pairs in per_task.items():
        if is_generative(get_task(task)):  # per-sample scores go beside each prediction
            metrics[task], per_sample = score_generative(get_task(task), pairs)
            for row, scores in zip((row for row in samples if row["task"] == task), per_sample):
                row["scores"] = scores
        else:
            metrics[task] = task_metrics(task, pairs)
    return aggregate(metrics, {task: len(pairs) for task, pairs in per_task.items()}), samples


def task_metrics(task: str, pairs: list[tuple]) -> dict:
    """The task's official metrics from (request, prediction) pairs, plus acc / acc_norm for choices."""
    definition = get_task(task)
    rows = [req.row for req, _ in pairs]
    gold = definition.answer_field
    if definition.output_type == "generate_until":
        preds = {req.row["id"]: p["prediction"] for req, p in pairs}
        refs = {r["id"]: list(r[gold]) for r in rows}
        na = ({req.row["id"]: p["no_answer_prob"] or 0.0 for req, p in pairs}
              if definition.generation.no_answer else None)
        return compute_metrics(definition, preds, refs, no_answer_probs=na)
    if definition.choice_values is not None:  # STS-B: the probability-weighted score
        return compute_metrics(definition, [p["value"] for _, p in pairs], [float(r[gold]) for r in rows])
    correct = [p["prediction"] in _gold_set(req.request) for req, p in pairs]
    correct_norm = [p["prediction_norm"] in _gold_set(req.request) for req, p in pairs]
    extra = {"acc": sum(correct) / len(correct), "acc_norm": sum(correct_norm) / len(correct_norm)}
    if BENCHMARKS[definition.benchmark].aggregation == "mmlu_questions":  # aggregated over questions
        return {**extra, "correct": correct, "correct_norm": correct_norm}
    if definition.choices_field:  # ReCoRD: the prediction is the entity the chosen continuation fills in
        preds = [req.row[definition.choices_field][p["prediction"]] for req, p in pairs]
        refs = [list(r[gold]) for r in rows]
    else:
        preds, refs = [p["prediction"] for _, p in pairs], [int(r[gold]) for r in rows]
    return {**compute_metrics(definition, preds, refs, **_row_inputs(definition, rows)), **extra}


def _row_inputs(definition: TaskDefinition, rows: list[dict]) -> dict:
    """What some metrics read from the rows: MNLI's subsets, MultiRC's questions, AX-g's pair ids."""
    out = {}
    if needs_subsets(definition):
        out["subsets"] = [r["subset"] for r in rows]
    if needs_groups(definition):
        out["groups"] = [r["question_id"] for r in rows]
    if "gender_parity" in definition.metrics:
        out["ids"] = [int(r["id"]) for r in rows]
    return out


def aggregate(metrics_by_task: dict[str, dict], counts: dict[str, int]) -> dict:
    """Per benchmark: the reference shape ({task: score, ..., "average"}) plus the full metrics."""
    results: dict[str, dict] = {}
    grouped: dict[str, dict[str, dict]] = defaultdict(dict)
    for task, metrics in metrics_by_task.items():
        grouped[TASKS[task].benchmark][task] = metrics
    for benchmark in sorted(grouped, key=BENCHMARK_ORDER.index):
        tasks = grouped[benchmark]
        aggregation = BENCHMARKS[benchmark].aggregation
        if aggregation == "mean_task_score":
            results[benchmark] = benchmark_entry(benchmark, {
                TASKS[t].short_name: {"metrics": m, "score": task_score(official_only(t, m)), "num_samples": counts[t]}
                for t, m in tasks.items()})
        elif aggregation == "mmlu_questions":
            results[benchmark] = mmlu_entry({TASKS[t].short_name: {
                "correct": sum(m["correct"]), "correct_norm": sum(m["correct_norm"]), "total": len(m["correct"])}
                for t, m in tasks.items()})
        elif aggregation in ("task_means", "per_task"):
            results[benchmark] = task_means_entry({TASKS[t].short_name: {"metrics": m, "num_samples": counts[t]}
                                                   for t, m in tasks.items()}, average=aggregation == "task_means")
        else:  # single_task: the task's own figures
            (task, metrics), = tasks.items()
            results[benchmark] = {**metrics, "dataset_size": counts[task]}
    return results


def mmlu_entry(counts: dict[str, dict]) -> dict:
    """MMLU's figures from per-subject counts ({subject: {"correct", "correct_norm", "total"}}), which is
    also how runs over different subjects merge into one entry."""
    summary = mmlu_metrics({s: [True] * c["correct"] + [False] * (c["total"] - c["correct"]) for s, c in counts.items()})
    summary["accuracy_norm"] = sum(c["correct_norm"] for c in counts.values()) / sum(c["total"] for c in counts.values())
    summary["subject_counts"] = counts
    return summary


def official_only(task: str, metrics: dict) -> dict:
    """The metrics the task score averages (its definition's; acc / acc_norm beside them are not part of it)."""
    return {k: metrics[k] for k in get_task(task).metrics}


def score_finetuned(task: str, rows: list[dict], predictions: dict[int, float]) -> dict:
    """Official metrics of a fine-tuned head's predictions on `rows` (row_index -> prediction)."""
    if len(predictions) != len(rows):
        raise RuntimeError(f"{len(predictions)} predictions for {len(rows)} test rows")
    definition = get_task(task)
    regression = definition.finetune.num_labels == 1
    preds = [predictions[i] if regression else int(predictions[i]) for i in range(len(rows))]
    refs = [float(r["label"]) if regression else int(r["label"]) for r in rows]
    metrics = compute_metrics(definition, preds, refs, **_row_inputs(definition, rows))
    return {definition.benchmark: benchmark_entry(definition.benchmark, {definition.short_name: {
        "metrics": metrics, "score": task_score(metrics), "num_samples": len(rows)}})}


def benchmark_entry(benchmark: str, tasks: dict[str, dict]) -> dict:
    """{task: score, ..., "average", "average_over", "tasks": details}: the reference shape plus details.
    The official GLUE/SuperGLUE score averages every task; an average over fewer is named by its tasks.
    Diagnostics (SuperGLUE AX-b/AX-g) are scored beside the tasks, never averaged in."""
    scores = {name: t["score"] for name, t in tasks.items()}
    averaged = {name: v for name, v in scores.items() if not get_task(f"{benchmark}/{name}").diagnostic}
    return {**scores, "average": benchmark_average(averaged), "average_over": sorted(averaged), "tasks": tasks}


def merge_results(old: Optional[dict], new: dict) -> dict:
    """A later run of some tasks (MMLU: subjects) updates those and recomputes the averages over what is there."""
    merged = {k: v for k, v in (old or {}).items()}
    for benchmark, result in new.items():
        aggregation = BENCHMARKS[benchmark].aggregation
        if aggregation == "mean_task_score" and benchmark in merged:
            merged[benchmark] = benchmark_entry(benchmark, {**merged[benchmark].get("tasks", {}), **result["tasks"]})
        elif aggregation in ("task_means", "per_task") and benchmark in merged:
            merged[benchmark] = task_means_entry({**merged[benchmark].get("tasks", {}), **result["tasks"]},
                                                 average=aggregation == "task_means")
        elif aggregation == "mmlu_questions" and benchmark in merged:
            runs = {**merged["mmlu"].get("subject_runs", {}), **result.get("subject_runs", {})}
            merged["mmlu"] = {**mmlu_entry({**merged["mmlu"]["subject_counts"], **result["subject_counts"]}),
                              "subject_runs": runs, "run": sorted(set(runs.values()))}
        else:
            merged[benchmark] = result
    return merged
