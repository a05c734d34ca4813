"""A trial's score: its cells computed by the downstream machinery (downstream/decode.run_group: one prefill per
example, the method's or the stack's continuation, the task's own metric, density and attention error metered
against the full cache) on the tuning rows, pooled over the rows evaluated so far, then one number to minimise.

    combined_score   attention_error + penalty * (1 - benchmark_score)     (the earlier system's formula)
    benchmark_score  1 - benchmark_score
    attention_error  attention_error
    each + density_penalty * max(0, density - density_target) when --density_target is given

benchmark_score is the mean of the task's primary metric per example over the rows (and tasks, and ratios)
evaluated, divided by 100 (the records hold it in percent); attention_error and density are pooled from the
rows' per-layer sums (masking.stack.attention_figures), as a downstream cell pools them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

OBJECTIVES = ("combined_score", "benchmark_score", "attention_error")
INVALID = 1e6  # the objective reported for a config its declarations or the density target refuse: never best


@dataclass
class Pooled:
    """What a trial has measured so far, over every task and row it evaluated."""

    scores: list = field(default_factory=list)  # primary metric per example (percent)
    sums: dict = field(default_factory=dict)  # {layer: [kept, visible, error^2, dense^2]}

    def add(self, record: dict) -> None:
        from lightning_bench.sparsity.masking.stack import add_sums

        self.scores.extend(v for v in record["primary_per_example"] if v is not None)
        for row in record["samples"]:
            add_sums(self.sums, row.get("attention_sums", {}))

    def figures(self) -> dict:
        from lightning_bench.sparsity.masking.stack import attention_figures

        attention = attention_figures(self.sums) if self.sums else {}
        return {"benchmark_score": sum(self.scores) / len(self.scores) / 100.0 if self.scores else None,
                "attention_error": attention.get("attention_error"), "density": attention.get("density"),
                "examples": len(self.scores)}


def objective(figures: dict, name: str, penalty: float = 1.0, density_target: Optional[float] = None,
              density_penalty: float = 10.0) -> float:
    """The number a search minimises (module docstring); a figure the objective needs and the cells did not
    record is an error, not a silent 0."""
    needs = {"combined_score": ("attention_error", "benchmark_score"), "benchmark_score": ("benchmark_score",),
             "attention_error": ("attention_error",)}[name]
    missing = [k for k in needs if figures.get(k) is None]
    if missing:
        raise ValueError(f"objective {name} needs {', '.join(missing)}, which the cells did not record")
    value = {"combined_score": lambda f: f["attention_error"] + penalty * (1.0 - f["benchmark_score"]),
             "benchmark_score": lambda f: 1.0 - f["benchmark_score"],
             "attention_error": lambda f: f["attention_error"]}[name](figures)
    if density_target is not None and figures.get("density") is not None:
        value += density_penalty * max(0.0, figures["density"] - density_target)
    return value
