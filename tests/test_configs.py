"""Every shipped YAML config parses against the current signatures (configs cannot rot)."""

from pathlib import Path

import pytest
import yaml

from tests.test_cli import run

ROOT = Path(__file__).resolve().parent.parent / "configs"
# configs/perplexity/ holds `lightning_bench sweep` presets, validated under `sweep` at the end of this file
# (they are not fit/test configs)
CONFIGS = sorted(p for p in ROOT.rglob("*.yaml")
                 if not {"perplexity", "downstream", "tune", "scaling"} & set(p.relative_to(ROOT).parts))
# configs/scaling/ holds trainer-only presets (DDP, FSDP on GPUs), given after a fit/test config
SCALING = sorted((ROOT / "scaling").glob("*.yaml"))


def test_there_are_configs():
    assert CONFIGS


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_config_parses(path, capsys):
    stage = "test" if "test" in path.parts else "fit"
    code, out, err = run([stage, "--config", str(path), "--print_config"], capsys)
    assert code in (0, None), err
    resolved = yaml.safe_load(out)
    written = yaml.safe_load(path.read_text())
    for section in ("model", "data"):
        for key, value in written[section]["init_args"].items():
            assert resolved[section]["init_args"][key] == value, (section, key)


@pytest.mark.parametrize("path", SCALING, ids=lambda p: p.name)
def test_scaling_preset_parses_and_builds_its_strategy(path, capsys):
    """On top of a fit config; the strategy is built as the Trainer will build it (a class path named in
    auto_wrap_policy that does not import fails here, not on the cluster)."""
    from jsonargparse import ArgumentParser
    from lightning.pytorch import strategies

    code, out, err = run(["fit", "--config", str(ROOT / "fit" / "transformer_wikitext2.yaml"), "--config", str(path),
                          "--print_config"], capsys)
    assert code in (0, None), err
    trainer = yaml.safe_load(out)["trainer"]
    written = yaml.safe_load(path.read_text())["trainer"]
    assert {k: trainer[k] for k in written if k != "strategy"} == {k: v for k, v in written.items() if k != "strategy"}
    strategy = written["strategy"]
    if isinstance(strategy, str):
        assert trainer["strategy"] == strategy and strategy in strategies.StrategyRegistry
        return
    parser = ArgumentParser()
    parser.add_subclass_arguments(strategies.Strategy, "strategy")
    built = parser.instantiate(parser.parse_object({"strategy": strategy})).strategy
    assert type(built).__name__ == strategy["class_path"].rsplit(".", 1)[1]
    if "auto_wrap_policy" in strategy["init_args"]:
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        assert isinstance(built.kwargs["auto_wrap_policy"], ModuleWrapPolicy)


# ---- experiment presets: each loads under its experiment command -------------------------------
# configs/perplexity/ holds `sweep` presets; configs/compare/ holds the fit presets `multi_dataset` runs;
# configs/downstream/ holds `downstream` presets; configs/tune/ `tune` presets
EXPERIMENT_DIRS = {"perplexity": "sweep", "compare": "multi_dataset", "downstream": "downstream", "tune": "tune"}
EXPERIMENT_CONFIGS = sorted(p for p in ROOT.rglob("*.yaml") if p.parent.name in EXPERIMENT_DIRS)


def test_every_config_folder_has_a_command():
    assert {p.parent.name for p in ROOT.rglob("*.yaml")} <= {"fit", "test", "finetune", "scaling", *EXPERIMENT_DIRS}
    assert EXPERIMENT_CONFIGS


@pytest.mark.parametrize("path", EXPERIMENT_CONFIGS, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_experiment_preset_loads_under_its_command(path, capsys):
    from lightning_bench.experiments.core.config import parse_command
    from lightning_bench.experiments.multi_dataset import MultiDatasetConfig, preset_as_config
    from lightning_bench.experiments.sweep.config import SweepConfig

    command = EXPERIMENT_DIRS[path.parent.name]
    if command == "downstream":  # types, tasks and groups, methods, protocols; every cell of the grid
        from lightning_bench.experiments.downstream.config import DownstreamConfig

        parsed = parse_command(command, DownstreamConfig, ["--config", str(path)], "")
        written = yaml.safe_load(path.read_text())
        assert parsed.resolved["methods"] == written["methods"] and parsed.config.cells()
        assert set(parsed.config.tasks) >= {t for t in written["tasks"] if "/" in t}
    elif command == "tune":  # downstream's checks, the search's options and every --space range
        from lightning_bench.experiments.tuning.command import TuneConfig

        parsed = parse_command(command, TuneConfig, ["--config", str(path)], "")
        assert parsed.resolved["methods"] == yaml.safe_load(path.read_text())["methods"] and parsed.config.cells()
    elif command == "sweep":  # the whole check: types, methods, every dataset's LMDataModule at every length
        parsed = parse_command(command, SweepConfig, ["--config", str(path)], "")
        written = yaml.safe_load(path.read_text())
        assert parsed.resolved["methods"] == written["methods"] and parsed.resolved["datasets"] == written["datasets"]
        assert parsed.config.cells()
        code, out, err = run([command, "--config", str(path), "--print_config"], capsys)
        assert code in (0, None), err
        assert yaml.safe_load(out)["streaming"] == {**{"interval": 1, "rerotate": False, "rounding": "ceil"}, **written["streaming"]}
    else:  # `--config FIT.yaml` names the preset every cell is fit from
        parsed = parse_command(command, MultiDatasetConfig,
                               preset_as_config(["--config", str(path), "--datasets", "ptb", "--seeds", "1"]), "")
        assert parsed.config.preset == str(path) and parsed.config.data[0].name == "ptb"
