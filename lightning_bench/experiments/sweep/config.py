"""`lightning_bench sweep`'s configuration (configs/perplexity/*.yaml): a typed dataclass, parsed by
`experiments.core.config` like every experiment command, and the grid of cells it describes."""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Literal, Optional

from jsonargparse.typing import PositiveInt

from lightning_bench.errors import ConfigError, deprecated, unknown_name
from lightning_bench.experiments.core.config import Fraction, Renamed, Seed, check_name, check_unique
from lightning_bench.experiments.core.grid import DENSE, sparsity_key, sparsity_levels_for
from lightning_bench.experiments.core.execution import Execution
from lightning_bench.experiments.core.store import fingerprint
from lightning_bench.models import LanguageModule

SWEEPS = ("context_length_sweep", "sparsity_sweep")
SPLIT_STAGE = {"test": "test", "validation": "val"}
DATA_SWEEP_KEYS = ("split", "max_tokens")  # the sweep's own per-dataset keys (the rest go to LMDataModule)
DATA_SET_PER_CELL = ("seq_len", "batch_size", "eval_batch_size", "name")


def _renamed(group: str, old: str, new: str, old_value, new_value):
    """A nested group's deprecated field (the top-level ones are core.config's DEPRECATED): the new one's value."""
    if old_value is None:
        return new_value
    if new_value is not None:
        raise ConfigError(f"give {group}.{new} or {group}.{old}, not both")
    deprecated(f"{group}.{old}", f"{group}.{new}")
    return old_value


@dataclass
class SparsitySweep:
    """Both spellings stay filled after the check: records and reports read `sparsity_levels` too."""

    context_length: PositiveInt
    """the context length (tokens per window) every ratio is measured at"""
    ratios: Optional[list[Fraction]] = None
    """fractions of the KV cache evicted, each in [0, 1)"""
    sparsity_levels: Optional[list[Fraction]] = None
    """deprecated: use ratios"""

    def __post_init__(self):
        ratios = _renamed("sparsity_sweep", "sparsity_levels", "ratios", self.sparsity_levels, self.ratios)
        if not ratios:
            raise ConfigError("sparsity_sweep.ratios must be a non-empty list of ratios in [0, 1)")
        self.ratios = self.sparsity_levels = [float(s) for s in ratios]
        check_unique("sparsity_sweep.ratios", self.ratios, "ratio")


@dataclass
class ContextLengthSweep:
    """Both spellings stay filled after the check: records and reports read `sparsity` too."""

    context_lengths: list[PositiveInt]
    """context lengths (tokens per window)"""
    ratio: Optional[Fraction] = None
    """the fraction of the KV cache evicted at every context length (dense: 0)"""
    sparsity: Optional[Fraction] = None
    """deprecated: use ratio"""

    def __post_init__(self):
        ratio = _renamed("context_length_sweep", "sparsity", "ratio", self.sparsity, self.ratio)
        if ratio is None:
            raise ConfigError("context_length_sweep.ratio is missing: the fraction of the cache evicted")
        self.ratio = self.sparsity = float(ratio)
        if not self.context_lengths:
            raise ConfigError("context_length_sweep.context_lengths must be a non-empty list of token counts")
        check_unique("context_length_sweep.context_lengths", self.context_lengths, "length")


@dataclass
class Streaming:
    chunk_size: PositiveInt = 1
    """tokens per forward: chunks attend to the compressed cache of the chunks before (1 = exact per token)"""
    interval: PositiveInt = 1
    """compress the cache after every interval-th chunk"""
    rerotate: bool = False
    """re-rotate kept keys to contiguous positions (default: they keep their original RoPE positions)"""
    rounding: Literal["ceil", "floor"] = "ceil"
    """budget = ceil or floor((1 - sparsity) * tokens seen); floor is int(), as kvpress rounds"""


@dataclass(frozen=True)
class DatasetSpec:
    data: dict  # LMDataModule arguments; the window and batch sizes are set per cell
    split: str  # test | validation
    max_tokens: Optional[int]  # score the first windows covering this many targets (None: all)


@dataclass(frozen=True)
class Cell:
    dataset: str
    method: str
    sweep: str  # "sparsity_sweep" | "context_length_sweep"
    point: str  # the cell's key in its sweep: the ratio ("0.9") or the context length ("512")
    context_length: int
    sparsity: float

    @property
    def key(self) -> str:
        """Unique in the grid (a point is unique within its sweep only)."""
        return f"{self.dataset}/{self.method}/{self.sweep}/{self.point}"

    @property
    def label(self) -> str:
        return f"{self.dataset} {self.method} L={self.context_length} sparsity={self.sparsity:g}"

    @property
    def group(self) -> str:
        """The cells of one measurement: a (length, ratio) on both axes is one evaluation for both cells."""
        return f"{self.dataset}__{self.method}_L{self.context_length}_s{sparsity_key(self.sparsity)}"


@dataclass
class SweepConfig(Execution):
    """Streaming perplexity under KV-cache eviction: datasets x methods x (sparsity levels at one context
    length + context lengths at one sparsity); one resumable JSON."""

    model: Callable[[], LanguageModule]
    """a LanguageModule with a KV cache: class_path (e.g. lightning_bench.models.HFLanguageModel) + init_args"""
    datasets: dict[str, dict[str, Any]]
    """NAME: LMDataModule arguments except the window and batch sizes, plus split (test|validation) and max_tokens"""
    methods: list[str]
    """sparsity methods (lightning_bench.sparsity.METHODS); dense runs at sparsity 0 only"""
    name: Optional[str] = None
    """the sweep's name (default: the config file's name)"""
    results_dir: str = "benchmark_results/perplexity"
    """where the sweep's JSON ({name}.json) is written"""
    output: Optional[str] = None
    """the JSON to write, when not {results_dir}/{name}.json"""
    seeds: list[Seed] = field(default_factory=lambda: [1234])
    """ONE torch seed, set before the model is built (models from a config start from seeded random weights)"""
    accelerator: str = "auto"
    """Lightning accelerator of every cell's Trainer"""
    eval_batch_size: PositiveInt = 1
    """windows per evaluation batch"""
    method_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    """{method: {parameter: value}}; unset parameters take the method's defaults"""
    attention_sparsity: dict[str, Any] = field(default_factory=dict)
    """{name: masker stack}: query-time sparse attention as methods of the sweep (every query of a window through
    the stack, the cache whole: one cell per dataset and context length), e.g. '{topk5: "oracle_topk:0.05"}'"""
    sparsity_sweep: Optional[SparsitySweep] = None
    """perplexity at each sparsity level, at one context length"""
    context_length_sweep: Optional[ContextLengthSweep] = None
    """perplexity at each context length, at one sparsity"""
    streaming: Streaming = field(default_factory=Streaming)
    """how each window is read on the compressed cache"""
    DEPRECATED: ClassVar[dict] = {"seed": Renamed("seeds", lambda seed: [seed], type=Seed)}

    def __post_init__(self):
        from lightning_bench.sparsity.methods import METHODS
        from lightning_bench.sparsity.streaming import check_streaming_args

        from lightning_bench.sparsity.masking.stack import check_named_stacks

        super().__post_init__()
        if not self.methods and not self.attention_sparsity:
            raise ConfigError(f"methods must be a non-empty list of sparsity methods; valid: {', '.join(sorted(METHODS))}")
        check_named_stacks(self.attention_sparsity, self.methods)
        check_unique("methods", self.methods, "method")
        for method in self.method_params:  # parameters of a method left out of this run (e.g. --methods) are kept
            if method not in METHODS:
                raise unknown_name("sparsity method in method_params:", method, METHODS)
        for method in self.methods:
            check_streaming_args(method, None if method == "dense" else 0.5, None, self.streaming.chunk_size,
                                 self.streaming.interval, self.method_params.get(method) or {})
        if len(self.seeds) != 1:
            raise ConfigError(f"seeds: a sweep file is measured under one seed, got {len(self.seeds)}; run one "
                              "sweep per seed (--seeds [S] --name NAME_S)")
        if self.sparsity_sweep is None and self.context_length_sweep is None:
            raise ConfigError("nothing to run: give sparsity_sweep and/or context_length_sweep")
        self.data = {name: self._dataset(name, spec) for name, spec in self.datasets.items()}
        if not self.data:
            raise ConfigError("datasets must name at least one dataset")

    def _dataset(self, name: str, spec: dict) -> DatasetSpec:
        """Check one dataset entry, with LMDataModule's own checks at every context length of the grid."""
        from lightning_bench.data import LMDataModule

        check_name("dataset name", name)
        allowed = [p for p in inspect.signature(LMDataModule.__init__).parameters
                   if p not in ("self", *DATA_SET_PER_CELL)] + list(DATA_SWEEP_KEYS)
        for key in spec:
            if key not in allowed:
                raise unknown_name(f"key in datasets.{name}:", key, allowed)
        split, max_tokens = spec.get("split", "test"), spec.get("max_tokens")
        if split not in SPLIT_STAGE:
            raise unknown_name(f"split for dataset {name!r}:", split, SPLIT_STAGE)
        if max_tokens is not None:
            if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
                raise ConfigError(f"datasets.{name}.max_tokens must be an integer >= 1, got {max_tokens!r}")
            if spec.get("eval_protocol", "token_windows") != "token_windows":
                raise ConfigError(f"datasets.{name}.max_tokens needs eval_protocol token_windows; with "
                                  "document_rolling take the first documents with eval_max_documents")
        data = {"tokenizer": "auto", **{k: v for k, v in spec.items() if k not in DATA_SWEEP_KEYS}}
        batch = self.eval_batch_size
        for length in self.context_lengths():  # source, protocol, stride <= window, ...
            LMDataModule(**data, name=name, seq_len=length, batch_size=batch, eval_batch_size=batch)
        return DatasetSpec(data, split, max_tokens)

    def context_lengths(self) -> list[int]:
        lengths = set(self.context_length_sweep.context_lengths if self.context_length_sweep else [])
        return sorted(lengths | ({self.sparsity_sweep.context_length} if self.sparsity_sweep else set()))

    def cells(self) -> list[Cell]:
        """Every cell, dataset-major, in run order."""
        out = []
        for data in self.data:
            for method in [*self.methods, *self.attention_sparsity]:
                whole = DENSE if method in self.attention_sparsity else method  # a stack evicts nothing: level 0
                if self.sparsity_sweep:
                    length = self.sparsity_sweep.context_length
                    out += [Cell(data, method, "sparsity_sweep", sparsity_key(s), length, s)
                            for s in sparsity_levels_for(whole, self.sparsity_sweep.ratios)]
                if self.context_length_sweep:
                    s = sparsity_levels_for(whole, [self.context_length_sweep.ratio])[0]
                    out += [Cell(data, method, "context_length_sweep", str(length), length, s)
                            for length in self.context_length_sweep.context_lengths]
        return out

    def grid(self) -> dict:
        return {"datasets": list(self.data), "methods": [*self.methods, *self.attention_sparsity],
                "sparsity_levels": self.sparsity_sweep.ratios if self.sparsity_sweep else None,
                "context_lengths": self.context_length_sweep.context_lengths if self.context_length_sweep else None}

    def resolved_params(self, method: str) -> dict:
        """The method's parameters, defaults included, as a cell records them."""
        from lightning_bench.sparsity.masking import MaskerStack
        from lightning_bench.sparsity.methods import make_method

        if method in self.attention_sparsity:
            return MaskerStack.parse(self.attention_sparsity[method]).describe()
        described = make_method(method, **self.method_params.get(method, {})).describe()
        return {k: v for k, v in described.items() if k != "method"}


def settings_fingerprint(resolved: dict) -> str:
    """The settings every cell depends on. Per-dataset specs and per-method parameters are checked one
    by one (sweep.store), so datasets and methods can be added to a finished sweep."""
    return fingerprint({"model": resolved["model"], "streaming": resolved["streaming"], "seed": resolved["seeds"][0],
                        "eval_batch_size": resolved["eval_batch_size"]})


def check_has_kv_cache(model: dict) -> None:
    """Refuse a model family that declares it has no KV cache to evict from (bk, mamba)."""
    module, _, name = model["class_path"].rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    # `supports_kv_cache` is declared by each LanguageModule family; a class that does not say is tried
    if not getattr(cls, "supports_kv_cache", True):
        raise ConfigError(f"model {model['class_path']} has no KV cache to evict from; KV-cache sparsity needs "
                          "an attention model (transformer or hf)")
