"""`lightning_bench multi_dataset`'s options (MultiDatasetConfig), its datasets and its cells."""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from lightning_bench.errors import ConfigError, unknown_name
from lightning_bench.experiments.core.config import Seed, check_name, check_unique

COMMAND = "multi_dataset"
# set per cell by this command: an extra argument that set them would silently break the sweep's layout
RESERVED = ("--seed_everything", "--results_dir", "--trainer.default_root_dir", "--ckpt_path", "--data",
            "--data.source", "--data.name", "--data.path", "--data.train_path", "--data.val_path", "--data.test_path")


@dataclass(frozen=True)
class DatasetSpec:
    name: str  # how the summary and the cell folder call it
    source: str  # a data alias, or the local folder
    cli_args: tuple[str, ...]  # what selects it on the fit/test command line


def parse_dataset(spec: str) -> DatasetSpec:
    from lightning_bench.data import DATA_ALIASES

    if "=" in spec:
        name, folder = spec.split("=", 1)
        check_name(f"dataset name in {spec!r}:", name)
        if not Path(folder).is_dir():
            raise ConfigError(f"dataset {name!r}: folder {folder!r} does not exist")
        return DatasetSpec(name, folder, ("--data", "text", "--data.path", folder, "--data.name", name))
    if spec == "text":
        raise ConfigError("a local text folder is given as NAME=DIR (e.g. mine=data/mine), not `text`")
    if spec not in DATA_ALIASES:
        raise unknown_name("dataset", spec, [*(a for a in DATA_ALIASES if a != "text"), "NAME=DIR"])
    return DatasetSpec(spec, spec, ("--data", spec))


@dataclass(frozen=True)
class Cell:
    data: DatasetSpec
    seed: int

    @property
    def key(self) -> str:
        return f"{self.data.name}_seed{self.seed}"

    @property
    def label(self) -> str:
        return f"{self.data.name} seed {self.seed}"


@dataclass
class MultiDatasetConfig:
    """Train and test one fit preset on several datasets x seeds; write one summary JSON."""

    preset: Optional[str] = None
    """the fit config every cell starts from (e.g. configs/compare/bk_small.yaml)"""
    datasets: list[str] = field(default_factory=list)
    """data aliases (ptb, wikitext2, ...) or NAME=DIR for a local text folder"""
    seeds: list[Seed] = field(default_factory=lambda: [1, 2, 3])
    """seed_everything of each run (default: the comparison recipe's 1 2 3)"""
    results_dir: str = "benchmark_results"
    """where the cells' folders and the summary are written"""
    fit_args: list[str] = field(default_factory=list)
    """arguments for every fit and test run (on the command line: everything after `--`)"""

    def __post_init__(self):
        if not self.datasets:
            raise ConfigError(f"{COMMAND} needs --datasets NAME [NAME ...] (data aliases, or NAME=DIR for a "
                              "local text folder)")
        self.data = [parse_dataset(spec) for spec in self.datasets]
        check_unique("--datasets", [d.name for d in self.data], "dataset")
        if not self.seeds:
            raise ConfigError("--seeds is empty; give at least one seed (e.g. --seeds 1 2 3)")
        check_unique("--seeds", self.seeds, "seed")
        for arg in self.fit_args:
            if arg.split("=", 1)[0] in RESERVED:
                raise ConfigError(f"{arg.split('=', 1)[0]} is set per cell by {COMMAND} (--datasets, --seeds, "
                                  "--results_dir); leave it out of the arguments after `--`")
        if self.preset is None:
            raise ConfigError(f"{COMMAND} needs the fit preset: --config FIT.yaml")
        if not Path(self.preset).is_file():
            raise ConfigError(f"config {self.preset!r} does not exist")
        try:
            self.preset_yaml = yaml.safe_load(Path(self.preset).read_text()) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"config {self.preset!r} is not valid YAML ({type(err).__name__})") from err


def preset_as_config(argv: list[str]) -> list[str]:
    """`--config FIT.yaml` names the fit preset (the command's documented form) unless the file is a
    multi_dataset config (only MultiDatasetConfig's keys): then jsonargparse reads it as usual."""
    fields = {f.name for f in dataclasses.fields(MultiDatasetConfig)}
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg == "--config":
            try:
                loaded = yaml.safe_load(Path(out[i + 1]).read_text())
            except (OSError, yaml.YAMLError):
                loaded = None
            if not (isinstance(loaded, dict) and loaded and set(loaded) <= fields):
                out[i] = "--preset"
    return out


def model_name_of(preset: dict, extra: list[str]) -> str:
    """The `--model` alias the runs will report (their records' `model_name`), known before any run."""
    from lightning_bench.models import MODEL_ALIASES

    model = preset.get("model")
    spec = model.get("class_path") if isinstance(model, dict) else model
    for i, arg in enumerate(extra):  # the command line wins over the file, as in LightningCLI
        if arg == "--model" and i + 1 < len(extra):
            spec = extra[i + 1]
        elif arg.startswith("--model="):
            spec = arg.split("=", 1)[1]
    spec = MODEL_ALIASES.get(spec, spec) if spec else MODEL_ALIASES["transformer"]
    module, _, name = spec.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module or "lightning_bench.models"), name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"cannot find model class {spec!r}") from err
    return getattr(cls, "alias", name)
