"""`lightning_bench downstream`'s configuration (one typed dataclass, parsed like every experiment
command: `--config`, `--print_config`, dotted overrides) and its grid of cells: task x method x budget
(sparsity level or fixed token budget) x protocol x seed; `dense` once per task, protocol and seed."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Optional

from jsonargparse.typing import NonNegativeFloat, PositiveInt

from lightning_bench.errors import ConfigError
from lightning_bench.experiments.core.config import (ContextTokens, Fraction, OpenClosedUnitInterval, Renamed,
                                                     Seed, check_unique)
from lightning_bench.experiments.core.grid import DENSE, sparsity_key
from lightning_bench.experiments.core.execution import Execution
from lightning_bench.experiments.generation.config import PretrainedModel

PROTOCOLS = ("query_aware", "query_agnostic", "interval")


@dataclass
class DownstreamConfig(Execution):
    """Every KV-cache method on generative downstream tasks with one mechanism (prefill, score, keep
    the top of the cache, continue generation on it): task quality against the memory kept, resumable,
    with paired bootstrap CIs against dense and h2o."""

    model: PretrainedModel
    """the model (--model.pretrained DIR|HUB_ID): an attention model with a KV cache"""
    tasks: list[str] = field(default_factory=lambda: ["xsum"])
    """tasks or groups of `lightning_bench test --task` (summarization, qa, dialogue, code, xsum, ...)"""
    methods: list[str] = field(default_factory=lambda: ["dense", "h2o", "streaming_llm"])
    """KV-cache methods (lightning_bench.sparsity.METHODS); dense runs once per task, protocol and seed"""
    ratios: list[Fraction] = field(default_factory=lambda: [0.5])
    """fractions of the compressed part of the cache evicted, each in [0, 1)"""
    budget_tokens: list[PositiveInt] = field(default_factory=list)
    """fixed token budgets, run beside the sparsity levels (each <= the shortest compressed prompt)"""
    protocols: list[Literal["query_aware", "query_agnostic", "interval"]] = field(
        default_factory=lambda: ["query_aware"])
    """query_aware: the whole prompt is prefilled and compressed; query_agnostic: the context (up to the
    end of the task's document) is compressed before the question is seen; interval: query_aware plus
    re-compression every --interval decoding steps"""
    interval: PositiveInt = 8
    """decoding steps between re-compressions under the `interval` protocol"""
    rounding: Literal["ceil", "floor"] = "ceil"
    """budget = ceil or floor((1 - ratio) * compressed tokens); floor is int(), as kvpress rounds"""
    seeds: list[Seed] = field(default_factory=lambda: [1234])
    """seeds: of sampled decoding (--samples > 1 or --temperature > 0) and of the `random` method"""
    max_samples: Optional[PositiveInt] = 10
    """the first N examples of each task (None: all)"""
    data_dir: Optional[str] = None
    """local data folder laid out like ../shared/data (None: the hub)"""
    paths: Optional[dict[str, Any]] = None
    """per-task files, as `lightning_bench test --data.paths`"""
    max_length: Optional[ContextTokens] = None
    """prompt + answer tokens (None: the model's limit, at most 2048 unless a task is a long-context one);
    longer documents lose their middle"""
    max_context: Optional[ContextTokens] = None
    """context length in tokens, counted as RULER counts it (prompt + answer): suites generated per length
    read their set of this length (RULER: ruler/<N>/); every prompt is cut to it (--max_length's default);
    beyond the model's window it is an error unless --max_length asks for the cut"""
    max_new_tokens: Optional[PositiveInt] = None
    """generation limit (None: each task's own)"""
    chat_template: Literal["auto", "on", "off"] = "auto"
    """the model's chat template for instruction tasks, as `test --data.chat_template`"""
    samples: Optional[PositiveInt] = None
    """completions per prompt (None: the task's own; HumanEval's pass@k needs more than 1)"""
    temperature: Optional[NonNegativeFloat] = None
    """sampling temperature (None: the task's own, greedy)"""
    top_p: Optional[OpenClosedUnitInterval] = None
    """nucleus sampling mass (None: the task's own)"""
    method_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    """{method: {parameter: value}}, e.g. --method_params.h2o.recent_ratio 0.2"""
    attention_error: bool = False
    """also meter the evicting methods' attention against the full cache at every step (density, error per layer;
    one more attention per layer and step); masker stacks are always metered"""
    meter_every: PositiveInt = 1
    """meter every N-th decoding step (the fed part and the first step always): what --attention_error's full-cache
    reference costs falls by about N (docs/sparsity.md measures it); the masker stacks' meter follows the same steps"""
    attention_sparsity: dict[str, Any] = field(default_factory=dict)
    """{name: masker stack}: query-time sparse attention as methods of the grid, e.g.
    '{topk5: "sink:16,local:64,oracle_topk:0.05"}' (docs/sparsity.md): the context is prefilled densely, the
    question (query_agnostic) and the answer attend through the stack; the cache is never evicted"""
    bits: Literal[32, 16, 8, 4] = 32
    """weights, as `test --bits`: 32 = --model.dtype; 16 = bfloat16 weights and activations; 8 / 4 =
    bitsandbytes Linear8bitLt (int8, W8A8) / Linear4bit (nf4) loaded from the checkpoint, the layers the
    family keeps fp32 left so. The KV cache holds the activations' dtype (fp32 under 8 / 4)."""
    name: str = "downstream"
    """experiment name: {results_dir}/{name}/ holds the cells, {name}_results.json, {name}_summary.txt"""
    results_dir: str = "benchmark_results/downstream"
    """where the experiment folder is made"""
    accelerator: str = "auto"
    """auto (cuda if available), cpu, cuda, cuda:N"""
    threads: Optional[PositiveInt] = None
    """torch intra-op threads (default: torch's)"""
    max_batch_rows: PositiveInt = 16
    """most continuations (cells x draws of the examples of --batch_examples) decoded together as rows of one
    batch: bounds the decoding's memory"""
    batch_examples: PositiveInt = 1
    """examples whose continuations share batches: each is prefilled alone, then every cell and draw of them
    decodes together (more rows per step: faster on a GPU; their dense prefills are held at once)"""
    wandb: bool = False
    """log one W&B run per driver call (a table of the cells and each cell's figures); offline unless logged in"""
    wandb_dir: str = "wandb_logs"
    """where W&B writes its run"""
    tuned_configs: Optional[str] = None
    """a folder `lightning_bench tune` wrote: each method's and stack's tuned parameters for each task (its own,
    else the global ones; neither: the declared defaults, with a line), over --method_params and the stacks"""
    DEPRECATED: ClassVar[dict] = {"sparsity": Renamed("ratios"), "device": Renamed("accelerator"),
                                  "seed": Renamed("seeds", lambda seed: [seed], type=Seed)}

    def __post_init__(self):
        from lightning_bench.tasks.registry import expand_tasks
        from lightning_bench.sparsity import make_method

        super().__post_init__()
        self.tasks = expand_tasks(self.tasks)  # unknown task or group: one line listing the valid ones
        for option, values in (("--methods", self.methods), ("--ratios", self.ratios),
                               ("--budget_tokens", self.budget_tokens), ("--protocols", self.protocols),
                               ("--seeds", self.seeds)):
            check_unique(option, values)
        if not self.methods and not self.attention_sparsity:
            raise ConfigError("--methods is empty; name at least one (dense, h2o, ...)")
        self.check_stacks()
        for method in self.methods:
            make_method(method, **self.method_params.get(method, {}))  # unknown name / bad parameters: one line
        for method in self.method_params:
            if method not in self.methods:
                raise ConfigError(f"--method_params.{method} is for {method!r}, which is not in --methods")
        if any(m != DENSE for m in self.methods) and not (self.ratios or self.budget_tokens):
            raise ConfigError("give --ratios or --budget_tokens for the evicting methods")
        if not self.protocols:
            raise ConfigError(f"--protocols is empty; valid: {', '.join(PROTOCOLS)}")
        if not self.seeds:
            raise ConfigError("--seeds is empty; give at least one (e.g. --seeds 1234)")
        self.weights_dtype()  # --bits 16 against another --model.dtype: one line

    def check_stacks(self) -> None:
        from lightning_bench.sparsity.masking.stack import check_named_stacks

        check_named_stacks(self.attention_sparsity, self.methods)

    @property
    def grid_methods(self) -> list[str]:
        """The eviction methods, then the masker stacks' names."""
        return [*self.methods, *self.attention_sparsity]

    def weights_dtype(self) -> str:
        """The dtype the model is loaded in: --model.dtype, bfloat16 under --bits 16."""
        if self.bits != 16:
            return self.model.dtype
        if self.model.dtype not in ("float32", "bfloat16"):
            raise ConfigError(f"--bits 16 loads bfloat16 weights; --model.dtype {self.model.dtype} contradicts it: "
                              "drop one of them")
        return "bfloat16"

    def budgets(self, method: str) -> list[tuple[str, float]]:
        """("sparsity", s) and ("budget_tokens", n) levels of `method`; dense: only ("sparsity", 0.0)."""
        if method == DENSE or method in self.attention_sparsity:  # a stack keeps the whole cache
            return [("sparsity", 0.0)]
        return [("sparsity", float(s)) for s in self.ratios] + [("budget_tokens", int(b)) for b in self.budget_tokens]

    def cells(self) -> list["Cell"]:
        """Every cell: tasks outermost (a task's data is tokenized once), then protocol, seed, method, budget."""
        return [Cell(task, method, kind, level, protocol, int(seed))
                for task, protocol, seed in itertools.product(self.tasks, self.protocols, self.seeds)
                for method in self.grid_methods for kind, level in self.budgets(method)]


@dataclass(frozen=True)
class Cell:
    task: str
    method: str
    budget_kind: str  # "sparsity" or "budget_tokens"
    level: float  # the sparsity, or the token budget
    protocol: str
    seed: int

    @property
    def budget(self) -> str:
        return f"s{sparsity_key(self.level)}" if self.budget_kind == "sparsity" else f"b{int(self.level)}"

    @property
    def key(self) -> str:
        """File-safe: e.g. triviaqa-rc__h2o_s0.5_query_aware_seed1234."""
        return f"{self.task.replace('/', '-')}__{self.method}_{self.budget}_{self.protocol}_seed{self.seed}"

    @property
    def sparsity(self) -> Optional[float]:
        return float(self.level) if self.budget_kind == "sparsity" else None

    @property
    def budget_tokens(self) -> Optional[int]:
        return int(self.level) if self.budget_kind == "budget_tokens" else None
