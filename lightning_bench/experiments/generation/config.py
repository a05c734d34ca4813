"""`lightning_bench generation`'s configuration: a typed dataclass parsed like every experiment command
(`--config`, `--print_config`, dotted overrides), and the grid of cells (method, sparsity, C, seed)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from jsonargparse.typing import NonNegativeInt, PositiveInt

from lightning_bench.errors import ConfigError
from lightning_bench.experiments.core.config import Fraction, Seed, check_unique
from lightning_bench.experiments.core.grid import sparsity_key, sparsity_levels_for

# the earlier argparse spellings (cli: `--dataset wikitext`, `--method-param h2o.recent_ratio=0.2`)
RENAMES = {"dataset": "data", "results-dir": "results_dir"}


@dataclass
class PretrainedModel:
    pretrained: str
    """hub id or local folder of a pretrained attention model (HFLanguageModel)"""
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    """weights' dtype"""
    revision: Optional[str] = None
    """hub revision"""


@dataclass
class GenerationConfig:
    """KV-cache eviction on generation: perplexity of a reference continuation under the pruned cache,
    throughput, memory, cache size; resumable, with paired t-tests."""

    model: PretrainedModel
    """the model (--model.pretrained DIR|HUB_ID)"""
    methods: list[str] = field(default_factory=lambda: ["dense", "h2o", "cab"])
    """sparsity methods (lightning_bench.sparsity.METHODS); dense runs at sparsity 0 only"""
    sparsity: list[Fraction] = field(default_factory=lambda: [0.9])
    """fractions of the KV cache evicted, each in [0, 1)"""
    context_length: list[PositiveInt] = field(default_factory=lambda: [1024])
    """prefill lengths C (tokens)"""
    continuation_length: PositiveInt = 64
    """N: reference tokens teacher-forced after the prefill"""
    num_samples: PositiveInt = 10
    """windows of C + N tokens drawn per (C, seed)"""
    seeds: Optional[list[Seed]] = None
    """sample-selection seeds (default 42; or num_runs N: 42 .. 42+N-1)"""
    num_runs: Optional[PositiveInt] = None
    """number of seeds from 42 on (instead of seeds)"""
    data: str = "wikitext2"
    """a corpus alias (ptb offline; wikitext2, ... from the hub) or NAME=DIR|FILE (a local test split)"""
    experiment_name: Optional[str] = None
    """results folder name (default: {model}_{data})"""
    results_dir: str = "benchmark_results/generation"
    """where the experiment folder is made"""
    interval: NonNegativeInt = 1
    """re-compress every INTERVAL decoding steps (0: once, after the prefill)"""
    rerotate: bool = False
    """re-rotate kept keys to contiguous positions"""
    method_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    """{method: {parameter: value}}, e.g. --method_params.h2o.recent_ratio 0.2"""
    device: str = "auto"
    """auto (cuda if available), cpu, cuda, cuda:N"""
    threads: Optional[PositiveInt] = None
    """torch intra-op threads (default: torch's); 1 on a shared CPU steadies the timings"""

    def __post_init__(self):
        from lightning_bench.sparsity import make_method

        if self.seeds is not None and self.num_runs is not None:
            raise ConfigError("give --seeds or --num_runs, not both")
        if self.seeds is None:
            self.seeds = list(range(42, 42 + (self.num_runs or 1)))
        for option, values in (("--methods", self.methods), ("--sparsity", self.sparsity),
                               ("--context_length", self.context_length), ("--seeds", self.seeds)):
            check_unique(option, values)
            if not values and (option != "--sparsity" or set(self.methods) - {"dense"}):  # dense needs no level
                raise ConfigError(f"{option} is empty; give at least one value")
        for method, params in self.method_params.items():
            if method not in self.methods:
                raise ConfigError(f"--method_params.{method} is for {method!r}, which is not in --methods")
        for method in self.methods:
            make_method(method, **self.method_params.get(method, {}))  # unknown name / bad parameters: one line

    def cells(self) -> list["Cell"]:
        """Every cell, contexts and seeds outermost; dense once per (context, seed) at sparsity 0.0."""
        return [Cell(method, s, int(ctx), int(seed))
                for ctx, seed in itertools.product(self.context_length, self.seeds)
                for method in self.methods for s in sparsity_levels_for(method, self.sparsity)]


@dataclass(frozen=True)
class Cell:
    method: str
    sparsity: float
    context_length: int
    seed: int

    @property
    def key(self) -> str:
        """The cell's file name without .json, e.g. h2o_s0.9_ctx1024_seed42."""
        return f"{self.group}_seed{self.seed}"

    @property
    def group(self) -> str:
        """The cell without its seed: what aggregated_results.json pools over seeds."""
        return f"{self.method}_s{sparsity_key(self.sparsity)}_ctx{self.context_length}"


def legacy_method_params(argv: list[str]) -> list[str]:
    """`--method-param h2o.recent_ratio=0.2` (the earlier, repeatable flag) -> `--method_params.h2o.recent_ratio 0.2`."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in ("--method-param", "--method_param") and i + 1 < len(argv):
            item = argv[i + 1]
            key, sep, value = item.partition("=")
            method, dot, name = key.partition(".")
            if not (sep and dot and method and name):
                raise ConfigError(f"--method-param {item!r} must look like METHOD.KEY=VALUE (e.g. h2o.recent_ratio=0.2)")
            out += [f"--method_params.{method}.{name}", value]
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out
