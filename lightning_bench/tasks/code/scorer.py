"""Scores of the code tasks: CodeXGLUE's smoothed BLEU-4 and line-completion exact match / edit similarity,
HumanEval's pass@k over completions run in the sandbox of sandbox.py (never in this process)."""

from __future__ import annotations

from lightning_bench.tasks.metrics.bootstrap import figures


def _smoothed_bleu(task, rows, preds, pairs):
    from lightning_bench.tasks.code.metrics import smoothed_bleu4

    corpus, per_values = smoothed_bleu4(preds, [row[task.answer_field] for row in rows])
    per = [{"smoothed_bleu4": v} for v in per_values]
    return {**figures(per, ("smoothed_bleu4",)), "smoothed_bleu4": corpus}, per


def _line_completion(task, rows, preds, pairs):
    from lightning_bench.tasks.code.metrics import line_completion_per_sample

    per = line_completion_per_sample(preds, [row["gt"] for row in rows])
    return figures(per, ("exact_match", "edit_similarity")), per


def _pass_at_k(task, rows, preds, pairs):
    from lightning_bench.tasks.code.sandbox import check_completions, protections
    from lightning_bench.tasks.code.metrics import pass_at_k_metrics

    completions = [p.get("predictions") or [p["prediction"]] for _, p in pairs]
    items = [(row, c) for row, cs in zip(rows, completions) for c in cs]
    results = iter(check_completions(items))
    per = []
    for row, cs in zip(rows, completions):
        statuses = [next(results) for _ in cs]
        per.append({"n": len(cs), "passed": sum(r.status == "passed" for r in statuses),
                    "status": [r.status for r in statuses], "detail": [r.detail for r in statuses]})
    summary = pass_at_k_metrics([(s["n"], s["passed"]) for s in per])
    flat = {}
    for key, value in summary.items():  # {"pass@k": mean_ci dict} -> pass@k, pass@k_ci95 as the other figures
        if key == "skipped_ks":
            flat[key] = value
        else:
            flat[key] = value["mean"]
            flat[f"{key}_ci95"] = None if value["ci_low"] is None else [value["ci_low"], value["ci_high"]]
            flat["ci95_method"] = value["method"]
    return {**flat, "samples_per_problem": min(s["n"] for s in per), "sandbox": protections()}, per


SCORERS = {"smoothed_bleu4": _smoothed_bleu, "line_completion": _line_completion, "pass_at_k": _pass_at_k}
