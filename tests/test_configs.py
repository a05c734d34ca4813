"""Every shipped YAML config parses against the current signatures (configs cannot rot)."""

from pathlib import Path

import pytest
import yaml

from tests.test_cli import run

CONFIGS = sorted((Path(__file__).resolve().parent.parent / "configs").rglob("*.yaml"))


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
