"""Every shipped YAML config parses against the current signatures (configs cannot rot)."""

from pathlib import Path

import pytest
import yaml

from tests.test_cli import run

ROOT = Path(__file__).resolve().parent.parent / "configs"
# configs/perplexity/ holds `lightning_bench sweep` presets, validated by the sweep's own parser
# (tests/test_streaming_sparsity.py), not fit/test configs
CONFIGS = sorted(p for p in ROOT.rglob("*.yaml") if "perplexity" not in p.relative_to(ROOT).parts)


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
