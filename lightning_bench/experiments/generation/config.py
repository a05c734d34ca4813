"""`lightning_bench generation`'s configuration: a typed dataclass parsed like every experiment command
(`--config`, `--print_config`, dotted overrides), and the grid of cells (method, sparsity, C, seed)."""

from __future__ import annotations

import argparse
import copy
import itertools
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Optional

import yaml

from jsonargparse.typing import NonNegativeInt, PositiveInt

from lightning_bench.errors import ConfigError, deprecated
from lightning_bench.experiments.core.config import Fraction, Renamed, Seed, check_unique
from lightning_bench.experiments.core.grid import sparsity_key, sparsity_levels_for
from lightning_bench.experiments.core.execution import Execution

FIRST_SEED = 42  # --seeds' default, and where --num_runs N counted from: 42 .. 42+N-1


class LegacyMethodParam(argparse.Action):
    """deprecated: use --method_params.METHOD.KEY VALUE (repeatable)"""

    metavar = "METHOD.KEY=VALUE"

    def __call__(self, parser, namespace, item, option_string=None):
        key, sep, value = item.partition("=")
        method, dot, name = key.partition(".")
        if not (sep and dot and method and name):
            raise ConfigError(f"--method-param {item!r} must look like METHOD.KEY=VALUE (e.g. h2o.recent_ratio=0.2)")
        deprecated(option_string, f"--method_params.{method}.{name} {value}")
        params = copy.deepcopy(namespace.get("method_params") or {})
        params.setdefault(method, {})[name] = yaml.safe_load(value)
        target = next(action for action in parser._actions if action.dest == "method_params")
        target(parser, namespace, json.dumps(params), "--method_params")


@dataclass
class PretrainedModel:
    pretrained: str
    """hub id or local folder of a pretrained attention model (HFLanguageModel)"""
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    """weights' dtype"""
    revision: Optional[str] = None
    """hub revision"""


@dataclass
class GenerationConfig(Execution):
    """KV-cache eviction on generation: perplexity of a reference continuation under the pruned cache,
    throughput, memory, cache size; resumable, with paired t-tests."""

    model: PretrainedModel
    """the model (--model.pretrained DIR|HUB_ID)"""
    methods: list[str] = field(default_factory=lambda: ["dense", "h2o", "cab"])
    """sparsity methods (lightning_bench.sparsity.METHODS); dense runs at sparsity 0 only"""
    ratios: list[Fraction] = field(default_factory=lambda: [0.9])
    """fractions of the KV cache evicted, each in [0, 1)"""
    context_length: list[PositiveInt] = field(default_factory=lambda: [1024])
    """prefill lengths C (tokens)"""
    continuation_length: PositiveInt = 64
    """N: reference tokens teacher-forced after the prefill"""
    num_samples: PositiveInt = 10
    """windows of C + N tokens drawn per (C, seed)"""
    seeds: list[Seed] = field(default_factory=lambda: [FIRST_SEED])
    """sample-selection seeds: the i-th takes the i-th block of one permutation of the windows"""
    data: str = "wikitext2"
    """a corpus alias (ptb offline; wikitext2, ... from the hub) or NAME=DIR|FILE (a local test split)"""
    name: Optional[str] = None
    """the experiment folder's name under results_dir (default: {model}_{data})"""
    results_dir: str = "benchmark_results/generation"
    """where the experiment folder is made"""
    interval: NonNegativeInt = 1
    """re-compress every INTERVAL decoding steps (0: once, after the prefill)"""
    rounding: Literal["ceil", "floor"] = "ceil"
    """budget = ceil or floor((1 - ratio) * tokens in the cache); floor is int(), as kvpress rounds"""
    rerotate: bool = False
    """re-rotate kept keys to contiguous positions"""
    method_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    """{method: {parameter: value}}, e.g. --method_params.h2o.recent_ratio 0.2"""
    accelerator: str = "auto"
    """auto (cuda if available), cpu, cuda, cuda:N"""
    threads: Optional[PositiveInt] = None
    """torch intra-op threads (default: torch's); 1 on a shared CPU steadies the timings"""
    DEPRECATED: ClassVar[dict] = {
        "sparsity": Renamed("ratios"), "experiment_name": Renamed("name"), "device": Renamed("accelerator"),
        "seed": Renamed("seeds", lambda seed: [seed], type=Seed),
        "num_runs": Renamed("seeds", lambda n: list(range(FIRST_SEED, FIRST_SEED + n)), " (42 .. 42+N-1)",
                            PositiveInt), "dataset": Renamed("data")}
    LEGACY_OPTIONS: ClassVar[dict] = {("--method-param", "--method_param"): LegacyMethodParam}

    def __post_init__(self):
        from lightning_bench.sparsity import make_method

        super().__post_init__()
        for option, values in (("--methods", self.methods), ("--ratios", self.ratios),
                               ("--context_length", self.context_length), ("--seeds", self.seeds)):
            check_unique(option, values)
            if not values and (option != "--ratios" or set(self.methods) - {"dense"}):  # dense needs no level
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
                for method in self.methods for s in sparsity_levels_for(method, self.ratios)]


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
