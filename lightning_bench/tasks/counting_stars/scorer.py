"""Counting-Stars' scores, implemented from the benchmark's definitions (its viz.ipynb, English version).

A prediction is read as JSON: fenced (```json ... ```) answers are repaired with `json_repair`, as the
benchmark does, others parsed with `json.loads`; the list under "little_penguin" is cut to its first M
items and its repeats dropped. An answer that does not parse, or holds no such list, scores 0 on every
star (the benchmark's script stops there instead) and is counted in `unparsable`. Per star (a count a_i,
and for reasoning the wrong count r_i stated before it):

    searching   1 if a_i is in the list, else 0
    reasoning   1 if a_i is in it and r_i is not; 0.5 if both; 0.25 if only r_i; 0 if neither

Matching is Python's `in`, as the benchmark's: the string "15" is not the count 15. A row's
`score` is 100 x the mean over its M stars (the benchmark's accuracy over its stars x lengths grid, in
percent); figures: `score` (mean over rows, bootstrap 95% CI), `by_star` (mean per star, 1 = the first in
the context: the benchmark's position axis), `by_length` (mean per nominal length) and `unparsable`.
"""

from __future__ import annotations

import json

from lightning_bench.tasks.metrics.bootstrap import figures


def parse_counts(prediction: str) -> list | None:
    """The list the answer gives under "little_penguin", or None when it gives none."""
    text = prediction.strip()
    try:
        if "```" in text:
            import json_repair  # the benchmark's own repair of fenced, possibly malformed JSON

            value = json_repair.loads(text.replace("```", "").replace("json", "").strip())
        else:
            value = json.loads(text)
    except (ValueError, RecursionError):  # a degenerate answer ("[[[[...") nests past Python's recursion limit
        return None
    counts = value.get("little_penguin") if isinstance(value, dict) else None
    return counts if isinstance(counts, list) else None


def star_scores(predicted: list, counts: list[int], distractors: list[int] | None = None) -> list[float]:
    """Each star's score for the parsed list (cut to len(counts) items, repeats dropped)."""
    kept = []
    for value in predicted[:len(counts)]:
        if not isinstance(value, (dict, list)) and value not in kept:  # an unhashable item cannot be a count
            kept.append(value)

    def found(count) -> bool:
        return count in kept  # Python's ==, as the benchmark's `in`: "15" is not 15; 15.0 is

    if distractors is None:
        return [float(found(a)) for a in counts]
    return [0.5 if found(a) and found(r) else 1.0 if found(a) else 0.25 if found(r) else 0.0
            for a, r in zip(counts, distractors)]


def _score(task, rows, preds, pairs):
    per = []
    for row, pred in zip(rows, preds):
        predicted = parse_counts(pred or "")
        stars = star_scores(predicted or [], row["counts"],
                            row.get("distractors") if task.short_name == "reasoning" else None)
        per.append({"score": 100.0 * sum(stars) / len(stars), "stars": stars, "unparsable": predicted is None})
    out = {**figures(per, ("score",)), "unparsable": sum(s["unparsable"] for s in per)}
    by_star: dict[int, list[float]] = {}
    by_length: dict[str, list[float]] = {}
    for row, s in zip(rows, per):
        for i, value in enumerate(s["stars"], 1):
            by_star.setdefault(i, []).append(100.0 * value)
        if row.get("length") is not None:
            by_length.setdefault(str(row["length"]), []).append(s["score"])
    out["by_star"] = {str(i): sum(v) / len(v) for i, v in sorted(by_star.items())}
    if by_length:
        out["by_length"] = {k: sum(v) / len(v) for k, v in sorted(by_length.items(), key=lambda kv: int(kv[0]))}
    return out, per


SCORERS = {"counting_stars": _score}
