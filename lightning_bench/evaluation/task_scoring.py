"""From scored requests (or fine-tuned predictions) to each benchmark's metrics and per-sample rows.

Prompted multiple choice: the prediction is the choice with the highest summed log-likelihood
(`acc`, what the task metrics use) and, reported beside it, the highest log-likelihood per character
of the continuation (lm-evaluation-harness's `acc_norm`). STS-B's prediction is the probability-weighted
score over the choices " 0".." 5" (the choices' probabilities renormalised among themselves).
SQuAD: the generated text cut at the stop string; under v2 the no-answer string maps to "" and the
no-answer probability is that of the whole no-answer string after the prompt (best-threshold metrics).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Optional

from lightning_bench.evaluation.glue_metrics import (benchmark_average, glue_task_metrics, superglue_task_metrics,
                                                     task_score)
from lightning_bench.evaluation.mmlu_metrics import mmlu_metrics
from lightning_bench.evaluation.squad_metrics import normalize_answer, squad_v1_metrics, squad_v2_metrics

BENCHMARK_ORDER = ("glue", "superglue", "squad", "squad_v2", "mmlu")


def collect(outputs: list[dict]) -> dict[int, dict]:
    """Step outputs -> {request_id: {"loglik": [per choice], "greedy": [...]} | generation fields}."""
    by_request: dict[int, dict] = defaultdict(lambda: {"loglik": {}, "greedy": {}})
    for out in outputs:
        for j, rid in enumerate(out["request_id"]):
            entry = by_request[rid]
            if out["kind"] == "generate":
                entry.update(text=out["text"][j], tokens=out["tokens"][j], no_answer_prob=out["no_answer_prob"][j])
            elif out["kind"] == "next_token":
                entry["loglik"] = dict(enumerate(out["loglik"][j]))
                entry["greedy"] = dict(enumerate(out["greedy"][j]))
            else:
                entry["loglik"][out["choice_index"][j]] = out["loglik"][j]
                entry["greedy"][out["choice_index"][j]] = out["greedy"][j]
    return by_request


def _argmax(values):
    return max(range(len(values)), key=values.__getitem__)


def choice_prediction(request, scored: dict) -> dict:
    n = len(request.choices)
    if len(scored["loglik"]) != n:
        raise RuntimeError(f"request scored {len(scored['loglik'])} of its {n} choices")
    ll = [scored["loglik"][i] for i in range(n)]
    per_char = [v / max(1, len(c)) for v, c in zip(ll, request.choices)]
    out = {"loglik": ll, "prediction": _argmax(ll), "prediction_norm": _argmax(per_char)}
    if request.choice_values is not None:
        top = max(ll)
        weights = [math.exp(v - top) for v in ll]
        out["value"] = sum(w * x for w, x in zip(weights, request.choice_values)) / sum(weights)
    return out


def _gold_set(request) -> set[int]:
    return set(request.gold) if isinstance(request.gold, (tuple, list)) else {request.gold}


def generation_prediction(request, scored: dict) -> dict:
    text = scored["text"].split(request.stop)[0].strip() if request.stop else scored["text"].strip()
    answer = text
    if request.no_answer and normalize_answer(text) == normalize_answer(request.no_answer):
        answer = ""
    return {"generated": scored["text"], "generated_tokens": len(scored["tokens"]), "prediction": answer,
            "no_answer_prob": scored.get("no_answer_prob")}


def score_prompted(requests, outputs: list[dict]) -> tuple[dict, list[dict]]:
    """(results by benchmark, per-sample rows) for the prompted protocol."""
    scored = collect(outputs)
    per_task: dict[str, list[tuple]] = defaultdict(list)
    samples = []
    for rid, req in enumerate(requests):
        if rid not in scored:
            raise RuntimeError(f"request {rid} ({req.task}) was never scored")
        r = req.request
        pred = (generation_prediction(r, scored[rid]) if hasattr(r, "answers") else choice_prediction(r, scored[rid]))
        per_task[req.task].append((req, pred))
        samples.append({"task": req.task, "id": req.row["id"], "truncated_tokens": req.truncated, **pred,
                        **({"gold": r.gold} if hasattr(r, "gold") else {"answers": list(r.answers)})})
    return aggregate({task: task_metrics(task, pairs) for task, pairs in per_task.items()},
                     {task: len(pairs) for task, pairs in per_task.items()}), samples


def task_metrics(task: str, pairs: list[tuple]) -> dict:
    """The task's official metrics from (request, prediction) pairs, plus acc / acc_norm for choices."""
    benchmark, _, name = task.partition("/")
    if benchmark in ("squad", "squad_v2"):
        preds = {req.row["id"]: p["prediction"] for req, p in pairs}
        refs = {req.row["id"]: list(req.row["answers"]) for req, p in pairs}
        if benchmark == "squad":
            return squad_v1_metrics(preds, refs)
        na = {req.row["id"]: p["no_answer_prob"] or 0.0 for req, p in pairs}
        return squad_v2_metrics(preds, refs, na_probs=na)
    correct = [p["prediction"] in _gold_set(req.request) for req, p in pairs]
    correct_norm = [p["prediction_norm"] in _gold_set(req.request) for req, p in pairs]
    extra = {"acc": sum(correct) / len(correct), "acc_norm": sum(correct_norm) / len(correct_norm)}
    if benchmark == "mmlu":
        return {**extra, "correct": correct, "correct_norm": correct_norm}
    if benchmark == "glue":
        if name == "stsb":
            return glue_task_metrics(name, [p["value"] for _, p in pairs], [float(req.row["label"]) for req, _ in pairs])
        subsets = [req.row["subset"] for req, _ in pairs] if name == "mnli" else None
        return {**glue_task_metrics(name, [p["prediction"] for _, p in pairs],
                                    [int(req.row["label"]) for req, _ in pairs], subsets=subsets), **extra}
    if name == "record":
        preds = [req.row["entities"][p["prediction"]] for req, p in pairs]
        return {**superglue_task_metrics(name, preds, [list(req.row["answers"]) for req, _ in pairs]), **extra}
    groups = [req.row["question_id"] for req, _ in pairs] if name == "multirc" else None
    return {**superglue_task_metrics(name, [p["prediction"] for _, p in pairs],
                                     [int(req.row["label"]) for req, _ in pairs], groups=groups), **extra}


def aggregate(metrics_by_task: dict[str, dict], counts: dict[str, int]) -> dict:
    """Per benchmark: the reference shape ({task: score, ..., "average"}) plus the full metrics."""
    results: dict[str, dict] = {}
    grouped: dict[str, dict[str, dict]] = defaultdict(dict)
    for task, metrics in metrics_by_task.items():
        benchmark, _, name = task.partition("/")
        grouped[benchmark][name or benchmark] = metrics
    for benchmark in sorted(grouped, key=BENCHMARK_ORDER.index):
        tasks = grouped[benchmark]
        if benchmark in ("glue", "superglue"):
            scores = {name: task_score(official_only(benchmark, name, m)) for name, m in tasks.items()}
            results[benchmark] = benchmark_entry({
                name: {"metrics": m, "score": scores[name], "num_samples": counts[f"{benchmark}/{name}"]}
                for name, m in tasks.items()})
        elif benchmark == "mmlu":
            results["mmlu"] = mmlu_entry({s: {"correct": sum(m["correct"]), "correct_norm": sum(m["correct_norm"]),
                                              "total": len(m["correct"])} for s, m in tasks.items()})
        else:
            metrics = tasks[benchmark]
            results[benchmark] = {**metrics, "dataset_size": counts[benchmark]}
    return results


def mmlu_entry(counts: dict[str, dict]) -> dict:
    """MMLU's figures from per-subject counts ({subject: {"correct", "correct_norm", "total"}}), which is
    also how runs over different subjects merge into one entry."""
    summary = mmlu_metrics({s: [True] * c["correct"] + [False] * (c["total"] - c["correct"]) for s, c in counts.items()})
    summary["accuracy_norm"] = sum(c["correct_norm"] for c in counts.values()) / sum(c["total"] for c in counts.values())
    summary["subject_counts"] = counts
    return summary


def official_only(benchmark: str, name: str, metrics: dict) -> dict:
    """The metrics the benchmark's task score averages (acc / acc_norm beside them are not part of it)."""
    from lightning_bench.evaluation.glue_metrics import GLUE_METRICS, SUPERGLUE_METRICS

    names = (GLUE_METRICS if benchmark == "glue" else SUPERGLUE_METRICS)[name]
    return {k: metrics[k] for k in names}


def score_finetuned(task: str, rows: list[dict], predictions: dict[int, float]) -> dict:
    """Official metrics of a fine-tuned head's predictions on `rows` (row_index -> prediction)."""
    if len(predictions) != len(rows):
        raise RuntimeError(f"{len(predictions)} predictions for {len(rows)} test rows")
    benchmark, _, name = task.partition("/")
    preds = [predictions[i] for i in range(len(rows))]
    if benchmark == "glue":
        refs = [float(r["label"]) if name == "stsb" else int(r["label"]) for r in rows]
        subsets = [r["subset"] for r in rows] if name == "mnli" else None
        metrics = glue_task_metrics(name, preds if name == "stsb" else [int(p) for p in preds], refs, subsets=subsets)
    else:
        groups = [r["question_id"] for r in rows] if name == "multirc" else None
        metrics = superglue_task_metrics(name, [int(p) for p in preds], [int(r["label"]) for r in rows], groups=groups)
    return {benchmark: benchmark_entry({name: {"metrics": metrics, "score": task_score(metrics),
                                               "num_samples": len(rows)}})}


def benchmark_entry(tasks: dict[str, dict]) -> dict:
    """{task: score, ..., "average", "average_over", "tasks": details}: the reference shape plus details.
    The official GLUE/SuperGLUE score averages every task; an average over fewer is named by its tasks."""
    scores = {name: t["score"] for name, t in tasks.items()}
    return {**scores, "average": benchmark_average(scores), "average_over": sorted(scores), "tasks": tasks}


def merge_results(old: Optional[dict], new: dict) -> dict:
    """A later run of some tasks (MMLU: subjects) updates those and recomputes the averages over what is there."""
    merged = {k: v for k, v in (old or {}).items()}
    for benchmark, result in new.items():
        if benchmark in ("glue", "superglue") and benchmark in merged:
            merged[benchmark] = benchmark_entry({**merged[benchmark].get("tasks", {}), **result["tasks"]})
        elif benchmark == "mmlu" and benchmark in merged:
            runs = {**merged["mmlu"].get("subject_runs", {}), **result.get("subject_runs", {})}
            merged["mmlu"] = {**mmlu_entry({**merged["mmlu"]["subject_counts"], **result["subject_counts"]}),
                              "subject_runs": runs, "run": sorted(set(runs.values()))}
        else:
            merged[benchmark] = result
    return merged
