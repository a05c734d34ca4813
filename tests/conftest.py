"""Shared fixtures. ../shared (data samples) and SmolLM2 are optional locally but required in CI:
.ci/run sets LB_REQUIRE_SHARED=1 so a missing resource fails instead of silently skipping."""

import multiprocessing
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHARED = Path(os.environ.get("LB_SHARED_DIR", ROOT.parent / "shared"))
SMOLLM2 = Path(os.environ.get("LB_SMOLLM2_DIR", Path.home() / ".cache/lightning_bench/smollm2-135m-instruct"))


def need_module(name: str):
    """`pytest.importorskip`, except in CI (LB_REQUIRE_SHARED=1), where .ci/run installs it: there a missing
    module fails the test instead of skipping it silently."""
    if os.environ.get("LB_REQUIRE_SHARED") == "1":
        import importlib

        return importlib.import_module(name)
    return pytest.importorskip(name)


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


# ---- `lightning_bench` in a process of its own, without a fresh interpreter's imports each time --------
# A run killed with -9, or two runs contending for a store's locks, must be processes of their own; a fresh
# `python -m lightning_bench.cli` spends most of its time importing lightning, torchmetrics and transformers
# (3-10 s on a 2-core machine). Such runs are forked from one server process that imported them once for
# the session: multiprocessing's forkserver, a clean interpreter (not this one, with its threads), started
# as soon as the collected tests show one needs it, so that its imports overlap with the tests before.
PRELOAD = ["tests.conftest", "lightning_bench.cli", "lightning_bench.trainer_cli",
           "lightning_bench.experiments.downstream.command", "lightning_bench.experiments.sweep.command",
           "transformers.models.llama.modeling_llama"]


def _cli_server():
    """The forkserver context, its server started (once) with this checkout first on its path."""
    from multiprocessing import forkserver

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *([path] if path else [])])  # this checkout's code
    try:
        forkserver.ensure_running()  # returns at once: the server imports PRELOAD in the background
    finally:
        if path is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = path
    return context


def pytest_collection_finish(session):
    """Work that depends on nothing of this process starts in the background once the selected tests need it:
    the server of `cli_process`, and a module's `start_early()` (test_quiet_screen: its fresh interpreter)."""
    if session.config.option.collectonly:
        return
    if any("cli_process" in getattr(item, "fixturenames", ()) for item in session.items):
        _cli_server()
    for module in dict.fromkeys(getattr(item, "module", None) for item in session.items):
        if hasattr(module, "start_early"):
            module.start_early()


def _cli_child(argv: list[str], cwd: str, env: dict, stdout: str, stderr: str, before) -> None:
    """`lightning_bench ARGV` as `python -m lightning_bench.cli ARGV` runs it, in the test's folder and
    environment, its output into files; `before` (a module-level function) runs first (e.g. to arm a kill)."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    with open(stdout, "a") as out:
        os.dup2(out.fileno(), 1)
    if stderr == stdout:
        os.dup2(1, 2)
    else:
        with open(stderr, "a") as err:
            os.dup2(err.fileno(), 2)
    import torch

    torch.set_num_threads(1)  # as in the tests' own process (one_thread): the same numbers as in-process runs
    if before is not None:
        before()
    from lightning_bench.cli import main

    sys.exit(main(argv))


@pytest.fixture(scope="session")
def cli_process():
    """start(argv, stdout, stderr=None, before=None) -> a started multiprocessing.Process (exitcode -9 once
    killed) running `lightning_bench ARGV` in the calling test's folder and environment."""
    context = _cli_server()

    def start(argv, stdout, stderr=None, before=None) -> multiprocessing.Process:
        for path in (stdout, stderr or stdout):
            open(path, "w").close()  # there (empty) once the call returns
        process = context.Process(target=_cli_child, args=(list(argv), os.getcwd(), dict(os.environ), str(stdout),
                                                           str(stderr or stdout), before))
        process.start()
        return process

    return start


@pytest.fixture(scope="session")
def tiny_hf(tmp_path_factory) -> Path:
    """A random 2-layer Llama with the (offline) GPT-2 tokenizer, saved like a hub folder."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from lightning_bench.data.tokenization import offline_gpt2_folder

    folder = tmp_path_factory.mktemp("tiny_llama")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50257, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=512, bos_token_id=50256, eos_token_id=50256)
    LlamaForCausalLM(config).save_pretrained(folder)
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copyfile(Path(offline_gpt2_folder(folder / "cache")) / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    """One local Ray instance (2 CPUs, no dashboard) for the module; the executor uses it and leaves it up.
    Its workers inherit this environment: this checkout on their path (they import the tests' commands) and
    a tokenizer cache of their own."""
    ray = need_module("ray")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
        env.setenv("LB_CACHE_DIR", str(tmp_path_factory.mktemp("ray_cache")))
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
