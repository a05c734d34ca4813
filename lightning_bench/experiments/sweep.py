"""`lightning_bench sweep`: streaming perplexity under KV-cache eviction, datasets x methods x sparsity x context.

    lightning_bench sweep --config configs/perplexity/quick_test.yaml [--output FILE] [--model.pretrained DIR]
                          [--KEY.PATH VALUE ...]

Two sweeps per (dataset, method), as the earlier perplexity benchmark laid them out:
  sparsity_sweep        perplexity at each sparsity level, at one context length;
  context_length_sweep  perplexity at each context length, at one sparsity.
A cell is one evaluation of the dataset's test (or validation) split with windows of the cell's
context length, each window read as a stream on a KV cache compressed by the method
(`SparsityCallback` -> `streaming_logits`), through the ordinary LMDataModule protocols: PPL, bits per
token and CE from the summed NLL of the scored tokens, the mean cache size those tokens attended (and
the dense figure), peak KV bytes, tokens and seconds. `dense` runs at sparsity 0 only (it never
evicts, so other levels would repeat it); an evicting method at sparsity 0 never compresses either,
so its cells reproduce dense (a check, not a result).

Subset: `max_tokens` scores the first windows of the token stream (token_windows protocol) until
max_tokens targets are covered, rounded up to whole batches of `eval_batch_size` windows (the cell's
`tokens` says how many were scored); `eval_max_documents` keeps the first N documents (any protocol).

ONE JSON (atomic, rewritten after every cell): {"results": {dataset: {method: {"context_length_sweep":
{L: cell}, "sparsity_sweep": {s: cell}}}}, "config", "meta", "fingerprint", "cells_done", "cells_total",
"complete"}. Re-running the command skips every cell already in the file, so a killed sweep resumes
where it stopped and a deleted cell is recomputed; the grid (methods, levels, lengths, datasets) may
grow between runs. A file written with other settings that change a cell's value (model, streaming,
seed, batch size; a dataset's spec; a method's parameters) is refused, as is one whose data changed
(sha256).

Config (YAML; every key can be overridden on the command line, `--a.b VALUE` with VALUE read as YAML,
`--model.X` meaning `model.init_args.X`; `${VAR}` / `${VAR:-default}` in strings read the environment):
  name, output, seed, accelerator, eval_batch_size,
  model: {class_path: hf | transformer | a.dotted.Path, init_args: {...}},
  datasets: {NAME: {LMDataModule arguments except seq_len/batch sizes, + split: test|validation, max_tokens}},
  methods: [...], method_params: {method: {param: value}},
  sparsity_sweep: {context_length: L, sparsity_levels: [...]},
  context_length_sweep: {sparsity: s, context_lengths: [...]},
  streaming: {chunk_size, interval, rerotate}.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import importlib
import inspect
import json
import logging
import math
import os
import re
import shlex
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from lightning_bench.errors import ConfigError, unknown_name
from lightning_bench.results.io import read_json, write_json_atomic
from lightning_bench.results.meta import run_meta

COMMAND = "sweep"
TOP_KEYS = ("name", "output", "seed", "accelerator", "eval_batch_size", "model", "datasets", "methods",
            "method_params", "sparsity_sweep", "context_length_sweep", "streaming")
SWEEPS = ("context_length_sweep", "sparsity_sweep")
DATA_SWEEP_KEYS = ("split", "max_tokens")  # the sweep's own per-dataset keys (the rest go to LMDataModule)
DATA_SET_PER_CELL = ("seq_len", "batch_size", "eval_batch_size", "name")
SPLIT_STAGE = {"test": "test", "validation": "val"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


# ---- the config ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    dataset: str
    method: str
    sweep: str  # "sparsity_sweep" | "context_length_sweep"
    key: str  # the sweep's key: the sparsity ("0.9") or the context length ("512")
    context_length: int
    sparsity: float

    @property
    def label(self) -> str:
        return f"{self.dataset} {self.method} L={self.context_length} sparsity={self.sparsity:g}"


@dataclass
class SweepConfig:
    raw: dict  # the resolved config, as the JSON records it
    name: str
    output: Path
    seed: int
    accelerator: str
    eval_batch_size: int
    model_class: type
    model_args: dict
    datasets: dict  # name -> {"data": LMDataModule kwargs, "split": str, "max_tokens": int | None}
    methods: list
    method_params: dict
    sparsity_sweep: Optional[dict]  # {"context_length": L, "sparsity_levels": [...]}
    context_length_sweep: Optional[dict]  # {"sparsity": s, "context_lengths": [...]}
    chunk_size: int
    interval: int
    rerotate: bool

    def cells(self) -> list[Cell]:
        """Every cell, dataset-major, in run order."""
        out = []
        for data in self.datasets:
            for method in self.methods:
                if self.sparsity_sweep:
                    L = self.sparsity_sweep["context_length"]
                    levels = [0.0] if method == "dense" else self.sparsity_sweep["sparsity_levels"]
                    out += [Cell(data, method, "sparsity_sweep", sparsity_key(s), L, s) for s in levels]
                if self.context_length_sweep:
                    s = 0.0 if method == "dense" else self.context_length_sweep["sparsity"]
                    out += [Cell(data, method, "context_length_sweep", str(L), L, s)
                            for L in self.context_length_sweep["context_lengths"]]
        return out

    def fingerprint(self) -> str:
        """The settings every cell depends on. Per-dataset specs and per-method parameters are checked
        one by one (`check_resumable`), so datasets and methods can be added to a finished sweep."""
        raw = self.raw
        keyed = {"model": raw["model"], "streaming": raw["streaming"], "seed": raw["seed"],
                 "eval_batch_size": raw["eval_batch_size"]}
        return hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()

    def resolved_params(self, method: str) -> dict:
        """The method's parameters, defaults included, as a cell records them."""
        from lightning_bench.sparsity.methods import make_method

        described = make_method(method, **self.method_params.get(method, {})).describe()
        return {k: v for k, v in described.items() if k != "method"}


def sparsity_key(s: float) -> str:
    return str(float(s))


def _expand(value, environ):
    """${VAR} / ${VAR:-default} from `environ` in every string; an unset VAR without default stays as is."""
    if isinstance(value, dict):
        return {k: _expand(v, environ) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, environ) for v in value]
    if isinstance(value, str):
        def sub(match):
            name, default = match.group(1), match.group(2)
            if environ.get(name):
                return environ[name]
            return default if default is not None else match.group(0)

        value = _ENV.sub(sub, value)
        return os.path.expanduser(value) if value.startswith("~") else value
    return value


def apply_override(raw: dict, dotted: str, value) -> None:
    """`model.pretrained` -> model.init_args.pretrained; any other dotted path is set as written."""
    parts = dotted.split(".")
    if not all(parts):
        raise ConfigError(f"bad option --{dotted}")
    if parts[0] not in TOP_KEYS:
        raise unknown_name(f"{COMMAND} option", f"--{parts[0]}", [f"--{k}" for k in TOP_KEYS])
    if parts[0] == "model" and len(parts) > 1 and parts[1] not in ("class_path", "init_args"):
        parts.insert(1, "init_args")
    node = raw
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"--{dotted}: {'.'.join(parts[:i + 1])} is not a mapping in the config")
        node = child
    node[parts[-1]] = value


def load_config(path: str | Path, overrides: Optional[list[tuple[str, object]]] = None,
                environ: Optional[dict] = None) -> dict:
    """The YAML file with the command-line overrides applied and ${VAR} placeholders expanded."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config {str(path)!r} does not exist")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"config {str(path)!r} is not valid YAML ({type(err).__name__})") from err
    if not isinstance(raw, dict):
        raise ConfigError(f"config {str(path)!r} must be a mapping of sweep options")
    for key in raw:
        if key not in TOP_KEYS:
            raise unknown_name(f"key in {path.name}:", key, TOP_KEYS)
    raw = copy.deepcopy(raw)
    for dotted, value in overrides or []:
        apply_override(raw, dotted, value)
    raw.setdefault("name", path.stem)
    return _expand(raw, os.environ if environ is None else environ)


def _int(where: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where} must be an integer >= {minimum}, got {value!r}")
    return value


def _mapping(where: str, value, required: bool = True) -> dict:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping, got {value!r}")
    return value


def _check_keys(where: str, given, valid) -> None:
    for key in given:
        if key not in valid:
            raise unknown_name(f"key in {where}:", key, valid)


def _model_class(spec: str) -> type:
    from lightning_bench.models import MODEL_ALIASES, LanguageModule

    path = MODEL_ALIASES.get(spec, spec)
    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name) if module else None
    except (ImportError, AttributeError):
        cls = None
    if cls is None:
        raise unknown_name("model", spec, MODEL_ALIASES)
    if not (isinstance(cls, type) and issubclass(cls, LanguageModule)):
        raise ConfigError(f"model {spec!r} is not a LanguageModule")
    if getattr(cls, "alias", None) in ("bk", "mamba"):
        raise ConfigError(f"model {spec!r} ({cls.alias}) has no KV cache to evict from; KV-cache sparsity needs "
                          "an attention model (transformer or hf)")
    return cls


def _parameters(cls) -> list[str]:
    return [p for p in inspect.signature(cls.__init__).parameters if p != "self"]


def parse_config(raw: dict) -> SweepConfig:
    """Validate everything that can be checked without the model or the data; one-line ConfigErrors."""
    from lightning_bench.data import LMDataModule
    from lightning_bench.sparsity.cache import check_sparsity
    from lightning_bench.sparsity.methods import METHODS
    from lightning_bench.sparsity.streaming import check_streaming_args

    raw = copy.deepcopy(raw)
    name = str(raw.get("name") or "sweep")
    seed = _int("seed", raw.setdefault("seed", 1234), 0)
    batch = _int("eval_batch_size", raw.setdefault("eval_batch_size", 1))
    accelerator = str(raw.setdefault("accelerator", "auto"))
    output = Path(raw.setdefault("output", f"benchmark_results/perplexity/{name}.json"))

    model = _mapping("model", raw.get("model"))
    _check_keys("model", model, ("class_path", "init_args"))
    model.setdefault("class_path", "hf")
    cls = _model_class(str(model["class_path"]))
    model_args = _mapping("model.init_args", model.setdefault("init_args", {}), required=False)
    _check_keys(f"model.init_args ({cls.__name__})", model_args, _parameters(cls))
    raw["model"] = model

    streaming = _mapping("streaming", raw.setdefault("streaming", {}), required=False)
    _check_keys("streaming", streaming, ("chunk_size", "interval", "rerotate"))
    streaming.setdefault("chunk_size", 1)
    streaming.setdefault("interval", 1)
    streaming.setdefault("rerotate", False)
    if not isinstance(streaming["rerotate"], bool):
        raise ConfigError(f"streaming.rerotate must be true or false, got {streaming['rerotate']!r}")
    raw["streaming"] = streaming

    methods = raw.get("methods")
    if not isinstance(methods, list) or not methods:
        raise ConfigError(f"methods must be a non-empty list of sparsity methods; valid: {', '.join(sorted(METHODS))}")
    if len(set(map(str, methods))) != len(methods):
        raise ConfigError(f"methods lists a method twice: {' '.join(map(str, methods))}")
    params = _mapping("method_params", raw.setdefault("method_params", {}), required=False)
    raw["method_params"] = params
    for method_name in params:  # parameters of a method left out of this run (e.g. --methods) are kept
        if method_name not in METHODS:
            raise unknown_name("sparsity method in method_params:", method_name, METHODS)
    for method_name in methods:
        given = _mapping(f"method_params.{method_name}", params.get(method_name), required=False)
        check_streaming_args(method_name, None if method_name == "dense" else 0.5, None, streaming["chunk_size"],
                             streaming["interval"], given)

    sparsity_sweep = raw.get("sparsity_sweep")
    if sparsity_sweep is not None:
        sparsity_sweep = _mapping("sparsity_sweep", sparsity_sweep)
        _check_keys("sparsity_sweep", sparsity_sweep, ("context_length", "sparsity_levels"))
        _int("sparsity_sweep.context_length", sparsity_sweep.get("context_length"))
        levels = sparsity_sweep.get("sparsity_levels")
        if not isinstance(levels, list) or not levels:
            raise ConfigError("sparsity_sweep.sparsity_levels must be a non-empty list of ratios in [0, 1)")
        levels = [check_sparsity(s) for s in levels]
        if len(set(levels)) != len(levels):
            raise ConfigError(f"sparsity_sweep.sparsity_levels lists a level twice: {levels}")
        sparsity_sweep["sparsity_levels"] = levels
    context_sweep = raw.get("context_length_sweep")
    if context_sweep is not None:
        context_sweep = _mapping("context_length_sweep", context_sweep)
        _check_keys("context_length_sweep", context_sweep, ("sparsity", "context_lengths"))
        context_sweep["sparsity"] = check_sparsity(context_sweep.get("sparsity"))
        lengths = context_sweep.get("context_lengths")
        if not isinstance(lengths, list) or not lengths:
            raise ConfigError("context_length_sweep.context_lengths must be a non-empty list of token counts")
        for L in lengths:
            _int("context_length_sweep.context_lengths", L)
        if len(set(lengths)) != len(lengths):
            raise ConfigError(f"context_length_sweep.context_lengths lists a length twice: {lengths}")
    if sparsity_sweep is None and context_sweep is None:
        raise ConfigError("nothing to run: give sparsity_sweep and/or context_length_sweep")
    lengths = sorted({*(context_sweep or {}).get("context_lengths", []),
                      *([sparsity_sweep["context_length"]] if sparsity_sweep else [])})

    datasets = _mapping("datasets", raw.get("datasets"))
    if not datasets:
        raise ConfigError("datasets must name at least one dataset")
    dm_keys = [p for p in _parameters(LMDataModule) if p not in DATA_SET_PER_CELL]
    parsed = {}
    for data_name, spec in datasets.items():
        if not _NAME.match(str(data_name)):
            raise ConfigError(f"dataset name {data_name!r} must be letters, digits, '_', '-' or '.'")
        spec = _mapping(f"datasets.{data_name}", spec)
        _check_keys(f"datasets.{data_name}", spec, [*dm_keys, *DATA_SWEEP_KEYS])
        split = spec.get("split", "test")
        if split not in SPLIT_STAGE:
            raise unknown_name(f"split for dataset {data_name!r}:", split, SPLIT_STAGE)
        max_tokens = spec.get("max_tokens")
        if max_tokens is not None:
            _int(f"datasets.{data_name}.max_tokens", max_tokens)
            if spec.get("eval_protocol", "token_windows") != "token_windows":
                raise ConfigError(f"datasets.{data_name}.max_tokens needs eval_protocol token_windows; with "
                                  "document_rolling take the first documents with eval_max_documents")
        data_args = {k: v for k, v in spec.items() if k not in DATA_SWEEP_KEYS}
        data_args.setdefault("tokenizer", "auto")
        for L in lengths:  # the DataModule's own checks (source, protocol, stride <= window, ...)
            LMDataModule(**data_args, name=str(data_name), seq_len=L, batch_size=batch, eval_batch_size=batch)
        parsed[str(data_name)] = {"data": data_args, "split": split, "max_tokens": max_tokens}

    return SweepConfig(raw=raw, name=name, output=output, seed=seed, accelerator=accelerator, eval_batch_size=batch,
                       model_class=cls, model_args=model_args, datasets=parsed, methods=[str(m) for m in methods],
                       method_params={m: dict(params.get(m) or {}) for m in methods},
                       sparsity_sweep=sparsity_sweep, context_length_sweep=context_sweep,
                       chunk_size=streaming["chunk_size"], interval=streaming["interval"],
                       rerotate=streaming["rerotate"])


def _unresolved(where: str, values: dict) -> None:
    for key, value in values.items():
        match = _ENV.search(value) if isinstance(value, str) else None
        if match:
            raise ConfigError(f"{where}.{key} is the placeholder {value!r}: set the environment variable "
                              f"{match.group(1)} or pass --{where.split('.')[0]}.{key} VALUE")


# ---- running cells --------------------------------------------------------------------------------
@contextlib.contextmanager
def _quiet_lightning():
    """One Trainer per cell: keep Lightning's per-trainer banners and data-loader hints out of the log."""
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            warnings.filterwarnings("ignore", message=".*litlogger.*")
            warnings.filterwarnings("ignore", message=".*LeafSpec.*")  # lightning's _pytree, once per trainer
            yield
    finally:
        logger.setLevel(level)


def windows_for(max_tokens: Optional[int], window: int, stride: int) -> Optional[int]:
    """Token windows needed to score the first `max_tokens` targets: the first window scores `window`
    targets, each later one `stride` more (evaluation/windows.token_windows)."""
    if max_tokens is None:
        return None
    return 1 + max(0, math.ceil((max_tokens - window) / stride))


class SweepStopped(Exception):
    """SIGTERM arrived in the middle of a cell (Lightning stops its evaluation loop)."""


class CellRunner:
    """Loads the model once (on the first cell that needs it) and one DataModule per (dataset, length)."""

    def __init__(self, cfg: SweepConfig):
        self.cfg = cfg
        self.module = None
        self.datamodules: dict = {}
        self.sigterm = False  # Lightning catches SIGTERM during a cell; the sweep stops after it

    def model(self):
        if self.module is None:
            import torch

            _unresolved("model.init_args", self.cfg.model_args)
            torch.manual_seed(self.cfg.seed)  # models built from a config start from seeded random weights
            self.module = self.cfg.model_class(**self.cfg.model_args)
        return self.module

    def datamodule(self, dataset: str, length: int):
        from lightning_bench.data import LMDataModule

        key = (dataset, length)
        if key not in self.datamodules:
            spec = self.cfg.datasets[dataset]
            _unresolved(f"datasets.{dataset}", spec["data"])
            batch = self.cfg.eval_batch_size
            self.datamodules[key] = LMDataModule(**spec["data"], name=dataset, seq_len=length, batch_size=batch,
                                                 eval_batch_size=batch)
        return self.datamodules[key]

    def run(self, cell: Cell) -> tuple[dict, object]:
        """(the cell's figures, its DataModule) from one streaming evaluation."""
        import lightning as L

        from lightning_bench.sparsity.callback import SparsityCallback

        cfg, spec = self.cfg, self.cfg.datasets[cell.dataset]
        module, dm = self.model(), self.datamodule(cell.dataset, cell.context_length)
        evicts = cell.method != "dense"
        callback = SparsityCallback(cell.method, ratio=cell.sparsity if evicts else None,
                                    chunk_size=cfg.chunk_size, interval=cfg.interval, rerotate=cfg.rerotate,
                                    method_params=cfg.method_params.get(cell.method))
        windows = windows_for(spec["max_tokens"], cell.context_length, dm.eval_stride)
        batches = math.ceil(windows / cfg.eval_batch_size) if windows else 1.0
        split, stage = spec["split"], SPLIT_STAGE[spec["split"]]
        with _quiet_lightning():
            trainer = L.Trainer(accelerator=cfg.accelerator, devices=1, logger=False, enable_progress_bar=False,
                                enable_model_summary=False, enable_checkpointing=False, callbacks=[callback],
                                limit_test_batches=batches, limit_val_batches=batches, num_sanity_val_steps=0)
            module.last_eval.pop(stage, None)
            start = time.perf_counter()
            try:
                (trainer.test if split == "test" else trainer.validate)(module, datamodule=dm, verbose=False)
            except SystemExit as stop:  # Lightning's SIGTERMException (a SystemExit) between two batches
                if not trainer.received_sigterm:
                    raise
                raise SweepStopped(f"received SIGTERM during {cell.label}; that cell is not recorded") from stop
            seconds = time.perf_counter() - start
        self.sigterm = self.sigterm or trainer.received_sigterm
        metrics = module.last_eval.get(stage)
        if not metrics:
            raise ConfigError(f"{cell.label}: no token was scored (is the {split} split empty?)")
        sparsity = callback.summary()
        figures = {
            "perplexity": metrics["ppl"], "bits_per_token": metrics["bits_per_token"], "cross_entropy": metrics["loss"],
            "tokens": metrics["scored_tokens"],
            "mean_cache_size": sparsity["mean_cache_length"],
            "dense_mean_cache_size": sparsity["dense_mean_cache_length"],
            "cache_fraction": sparsity["cache_fraction"],
            "peak_kv_bytes": sparsity["peak_kv_bytes"], "dense_peak_kv_bytes": sparsity["dense_peak_kv_bytes"],
            "compressions": sparsity["compressions"], "forwards": sparsity["forwards"],
            "seconds": seconds, "tokens_per_second": metrics["scored_tokens"] / seconds if seconds > 0 else None,
            # word/byte units exist only when the whole evaluated text was scored (no max_tokens cut)
            "word_perplexity": metrics.get("word_ppl"), "byte_perplexity": metrics.get("byte_ppl"),
            "context_length": cell.context_length, "sparsity": cell.sparsity if evicts else 0.0,
            "method_params": {k: v for k, v in callback.method.describe().items() if k != "method"},
        }
        return figures, dm


# ---- the results file --------------------------------------------------------------------------
def _cell_of(doc: dict, cell: Cell) -> Optional[dict]:
    found = doc["results"].get(cell.dataset, {}).get(cell.method, {}).get(cell.sweep, {}).get(cell.key)
    return found if isinstance(found, dict) and "perplexity" in found else None


def _twin(doc: dict, cell: Cell) -> Optional[tuple[str, dict]]:
    """The same (context length, sparsity) already measured in the other sweep of this dataset/method."""
    sweeps = doc["results"].get(cell.dataset, {}).get(cell.method, {})
    for sweep in SWEEPS:
        if sweep == cell.sweep:
            continue
        for key, found in sweeps.get(sweep, {}).items():
            if (isinstance(found, dict) and found.get("context_length") == cell.context_length
                    and found.get("sparsity") == (cell.sparsity if cell.method != "dense" else 0.0)):
                return f"{sweep}/{key}", found
    return None


def _put(doc: dict, cell: Cell, figures: dict) -> None:
    method = doc["results"].setdefault(cell.dataset, {}).setdefault(cell.method, {})
    for sweep in SWEEPS:
        method.setdefault(sweep, {})
    method[cell.sweep][cell.key] = figures


def _check_data(doc: dict, dataset: str, provenance: dict, output: Path) -> None:
    before = doc.get("meta", {}).get("data", {}).get(dataset)
    if not before:
        return

    def shas(p):
        return {s: (v.get("evaluated_sha256") or v.get("sha256")) for s, v in p.get("splits", {}).items()}

    old, new = shas(before), shas(provenance)
    for split, sha in new.items():
        if split in old and old[split] != sha:
            raise ConfigError(f"dataset {dataset!r}: its {split} text changed since {output} was written "
                              f"(sha256 {old[split][:12]}... -> {sha[:12]}...); use another --output")


def _grid(cfg: SweepConfig) -> dict:
    return {"datasets": list(cfg.datasets), "methods": cfg.methods,
            "sparsity_levels": (cfg.sparsity_sweep or {}).get("sparsity_levels"),
            "context_lengths": (cfg.context_length_sweep or {}).get("context_lengths")}


def describe_protocol(dm, cfg: SweepConfig, dataset: str) -> dict:
    """The DataModule's protocol with what the sweep adds: per-cell windows, the subset, the streaming."""
    spec = cfg.datasets[dataset]
    # window and stride follow each cell's context length; `units` would describe the whole evaluated text
    described = {k: v for k, v in dm.protocol(spec["split"]).items() if k not in ("window", "stride", "units")}
    described["window"] = "the cell's context_length"
    if dm.hparams.eval_protocol == "token_windows":
        described["stride"] = dm.hparams.eval_stride or "the cell's context_length (disjoint windows)"
    described["subset"] = (f"the first windows covering max_tokens={spec['max_tokens']} targets, in whole "
                           f"batches of {cfg.eval_batch_size}") if spec["max_tokens"] else \
        "every window of the evaluated text"
    described["streaming"] = {
        "chunk_size": cfg.chunk_size, "interval": cfg.interval, "rerotate": cfg.rerotate,
        "definition": "each window read as a stream from its start: chunks of chunk_size tokens attend to the "
                      "compressed cache of the chunks before and causally to each other; the cache is compressed "
                      "to ceil((1 - sparsity) * tokens seen) after every interval-th chunk"}
    return described


def markdown_table(doc: dict, dataset: str) -> str:
    """Sparsity sweep of one dataset: PPL (mean cache size) per method and level."""
    methods = doc["results"].get(dataset, {})
    levels = doc["config"].get("sparsity_sweep", {}).get("sparsity_levels") or []
    L = doc["config"].get("sparsity_sweep", {}).get("context_length")
    dense = methods.get("dense", {}).get("sparsity_sweep", {}).get("0.0")
    head = "| method | " + " | ".join(f"sparsity {s:g}: PPL (mean cache)" for s in levels) + " |"
    lines = [f"{dataset}, context length {L}" + (f", dense mean cache {dense['dense_mean_cache_size']:.1f}"
                                                if dense else ""), "", head, "|---" * (len(levels) + 1) + "|"]
    for method, sweeps in methods.items():
        row = []
        for s in levels:
            found = sweeps.get("sparsity_sweep", {}).get(sparsity_key(s))
            if found is None and method == "dense" and dense is not None:
                row.append("= sparsity 0")
            else:
                row.append("-" if found is None else f"{found['perplexity']:.2f} ({found['mean_cache_size']:.1f})")
        lines.append(f"| {method} | " + " | ".join(row) + " |")
    return "\n".join(lines)


# ---- the command ---------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one `lightning_bench: error:` line (cli.main), not argparse's usage block
        raise ConfigError(f"{COMMAND}: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=f"lightning_bench {COMMAND}",
                description="Streaming perplexity under KV-cache eviction: datasets x methods x sparsity x context "
                            "length; one resumable JSON.",
                epilog="Any config key can be overridden: --KEY.PATH VALUE (VALUE read as YAML), e.g. "
                       "--model.pretrained DIR, --methods '[dense, h2o]', --streaming.chunk_size 8.")
    p.add_argument("--config", required=True, help="a sweep preset (configs/perplexity/*.yaml)")
    p.add_argument("--output", default=None, help="the JSON to write (default: the preset's `output`)")
    return p


def parse_overrides(rest: list[str]) -> list[tuple[str, object]]:
    out, i = [], 0
    while i < len(rest):
        arg = rest[i]
        if not arg.startswith("--") or arg == "--":
            raise ConfigError(f"{COMMAND}: unexpected argument {arg!r} (options are --KEY.PATH VALUE)")
        if "=" in arg:
            key, value = arg[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(rest):
                raise ConfigError(f"{COMMAND}: option {arg} needs a value")
            key, value = arg[2:], rest[i + 1]
            i += 2
        try:
            out.append((key, yaml.safe_load(value)))
        except yaml.YAMLError as err:
            raise ConfigError(f"{COMMAND}: the value of {arg} is not valid YAML ({type(err).__name__})") from err
    return out


def sweep(argv: list[str]) -> int:
    args, rest = _parser().parse_known_args(list(argv))
    overrides = parse_overrides(rest)
    raw = load_config(args.config, overrides)
    cfg = parse_config(raw)
    output = Path(args.output) if args.output else cfg.output
    preset = Path(args.config)
    command = shlex.join(["lightning_bench", COMMAND, *argv])
    config = {**cfg.raw, "output": str(output), "preset": str(preset),
              "preset_sha256": hashlib.sha256(preset.read_bytes()).hexdigest(),
              "overrides": [f"--{k} {json.dumps(v)}" for k, v in overrides]}
    fingerprint = cfg.fingerprint()
    specs = {name: spec for name, spec in cfg.raw["datasets"].items()}

    doc = {"results": {}}
    if output.exists():
        try:
            doc = read_json(output)
        except (OSError, ValueError) as err:
            raise ConfigError(f"{output} exists but is not a sweep JSON ({type(err).__name__}); use another --output")
        if doc.get("fingerprint") != fingerprint:
            raise ConfigError(f"{output} holds a sweep with other settings (model, streaming, seed or batch "
                              "size); use another --output or delete it")
        doc.setdefault("results", {})
        for name, spec in specs.items():
            before = doc.get("dataset_specs", {}).get(name)
            if name in doc["results"] and before is not None and before != spec:
                raise ConfigError(f"dataset {name!r} in {output} was {json.dumps(before)}, now {json.dumps(spec)}; "
                                  "rename it or use another --output")
        specs = {**doc.get("dataset_specs", {}), **specs}
    meta_data = dict(doc.get("meta", {}).get("data", {}))
    protocols = dict(doc.get("meta", {}).get("evaluation_protocol", {}))
    checked = set()

    cells = cfg.cells()
    runner = CellRunner(cfg)
    ran = 0
    for i, cell in enumerate(cells, 1):
        label = f"[{i}/{len(cells)}] {cell.label}"
        found = _cell_of(doc, cell)
        if found is not None:
            if found.get("method_params") != cfg.resolved_params(cell.method):
                raise ConfigError(f"{output} measured {cell.method} with parameters {found.get('method_params')}, "
                                  f"the config now gives {cfg.resolved_params(cell.method)}; use another --output")
            print(f"lightning_bench {COMMAND}: {label}: skipped (in {output})", flush=True)
            continue
        twin = _twin(doc, cell)
        if twin is not None and twin[1].get("method_params") == cfg.resolved_params(cell.method):
            _put(doc, cell, copy.deepcopy(twin[1]))
            print(f"lightning_bench {COMMAND}: {label}: the same cell as {twin[0]}", flush=True)
        else:
            try:
                figures, dm = runner.run(cell)
            except SweepStopped as stop:
                print(f"lightning_bench {COMMAND}: {stop}; the same command resumes", flush=True)
                return 143
            provenance = dm.provenance()
            if cell.dataset not in checked:
                _check_data(doc, cell.dataset, provenance, output)
                checked.add(cell.dataset)
            meta_data[cell.dataset] = provenance
            protocols[cell.dataset] = describe_protocol(dm, cfg, cell.dataset)
            _put(doc, cell, figures)
            ran += 1
            print(f"lightning_bench {COMMAND}: {label}: ppl {figures['perplexity']:.3f}, mean cache "
                  f"{figures['mean_cache_size']:.1f} of {figures['dense_mean_cache_size']:.1f}, "
                  f"{figures['tokens']} tokens, {figures['seconds']:.1f} s", flush=True)
        done = sum(_cell_of(doc, c) is not None for c in cells)
        doc.update(config=config, grid=_grid(cfg), fingerprint=fingerprint, dataset_specs=specs,
                   cells_done=done, cells_total=len(cells), complete=done == len(cells),
                   meta=run_meta(seed=cfg.seed, extra={
                       "command": command, "data": meta_data, "evaluation_protocol": protocols,
                       "metric": "token perplexity exp(CE) of the scored tokens; bits_per_token = CE / ln 2; "
                                 "mean_cache_size = KV slots attended per scored token (itself included)"}))
        write_json_atomic(output, doc)
        if runner.sigterm:
            print(f"lightning_bench {COMMAND}: received SIGTERM: stopped after {label}; the same command resumes",
                  flush=True)
            return 143
    done = sum(_cell_of(doc, c) is not None for c in cells)
    print(f"lightning_bench {COMMAND}: {output}: {ran} cells run now, {done}/{len(cells)} of this grid done")
    if cfg.sparsity_sweep:
        for dataset in cfg.datasets:
            print(markdown_table(doc, dataset))
    return 0
