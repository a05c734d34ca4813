"""No line a user cannot act on: the first screen of a run holds no third-party notice about an optional
package, a deprecated argument of ours or a setting we never chose (issue 26, point 7)."""

import atexit
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
import torch

from lightning_bench.sparsity.decode import generate_with_eviction
from lightning_bench.sparsity.streaming import streaming_logits
from lightning_bench.sparsity.task_decode import continue_prompt, prefill_prompt
from tests.conftest import FIXTURES, ROOT
from tests.test_cli import QUIET, TINY_MODEL
from tests.test_quantization_cli import MODEL as LOWBIT_MODEL
from tests.test_sparsity import tiny_llama

# Runs `lightning_bench` as on a CPU with AVX512-BF16 and without the optional `kernels` package, the
# machines where bitsandbytes' import logs "Failed to load CPU gemm_4bit_forward from kernels-community"
# (elsewhere it is silent, so the test would prove nothing): bitsandbytes.functional.has_avx512bf16 is
# made to answer True before bitsandbytes' CPU backend reads it at import. Then two commands: an fp32
# fit with W&B (offline), and a low-bit test, which does import bitsandbytes.
SCRIPT = r"""
import importlib.abc, importlib.machinery, sys

class AVX512BF16(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "bitsandbytes.functional":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            module.has_avx512bf16 = lambda: True
        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, AVX512BF16())
from lightning_bench.cli import main

def command(argv):
    try:
        main(argv)
    except SystemExit as exit_:
        assert exit_.code in (0, None), exit_.code
    sys.stdout.flush()
    print(f"=== end of command; bitsandbytes imported: {'bitsandbytes' in sys.modules}", file=sys.stderr, flush=True)

n = sys.argv.index("--")
fit, test = sys.argv[1:n], sys.argv[n + 1:]  # read before the CLI rewrites sys.argv
command(fit)
command(test)
"""
END = re.compile(r"=== end of command; bitsandbytes imported: (True|False)\n")


_SCREENS: dict = {}  # "run": (folder, the started process, its output file)


def start_early() -> None:
    """Starts the fresh process of `first_screens` (conftest calls this once the collected tests include this
    module's): it depends on nothing of the tests' process, so it runs beside the tests before, not after."""
    if "run" in _SCREENS:
        return
    folder = Path(tempfile.mkdtemp(prefix="lb_first_screens_"))
    data = ["--data", "text", "--data.path", str(FIXTURES / "tiny_corpus"), "--data.seq_len", "16",
            "--data.batch_size", "8"]
    fit = ["fit", *TINY_MODEL, *data, *QUIET, "--trainer.max_steps", "2", "--wandb", "true", "--results_dir", "r"]
    test = ["test", *LOWBIT_MODEL, *data, *QUIET, "--bits", "8", "--results_dir", "r"]
    env = {**os.environ, "LB_CACHE_DIR": str(folder / "cache"), "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}  # this checkout's code
    output = open(folder / "screens.txt", "w")
    process = subprocess.Popen([sys.executable, "-c", SCRIPT, *fit, "--", *test], cwd=folder, env=env, text=True,
                               stdout=output, stderr=subprocess.STDOUT)
    _SCREENS["run"] = folder, process, output

    @atexit.register
    def _cleanup():  # a session ended before the fixture waited for it
        if process.poll() is None:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def first_screens():
    """{"fit": screen, "test": screen, "bitsandbytes": [imported after fit, after test]}: stdout and stderr
    of `fit --wandb true` at fp32 and of `test --bits 8`, in that order, from one fresh process."""
    start_early()  # (already started unless conftest's hook did not run)
    folder, process, output = _SCREENS["run"]
    process.wait(timeout=600)
    output.close()
    screens = (folder / "screens.txt").read_text()
    assert process.returncode == 0, screens[-3000:]
    fit_screen, after_fit, test_screen, after_test, _ = END.split(screens)
    return {"fit": fit_screen, "test": test_screen, "bitsandbytes": [after_fit == "True", after_test == "True"]}


def test_fp32_fit_does_not_import_bitsandbytes(first_screens):
    assert first_screens["bitsandbytes"] == [False, True]  # the 8-bit test does need it


def test_first_screens_name_no_optional_kernel_package(first_screens):
    for command in ("fit", "test"):
        screen = first_screens[command]
        assert "kernels-community" not in screen and "gemm_4bit_forward" not in screen, screen


def test_wandb_prints_no_anonymous_setting_warning(first_screens):
    screen = first_screens["fit"]
    assert "wandb: Tracking run" in screen  # W&B did start (offline)
    assert "anonymous" not in screen.lower(), screen


@pytest.fixture
def transformers_log(caplog):
    """Records of transformers' loggers (they do not propagate to the root logger), once-only ones included."""
    import transformers  # noqa: F401  (defines Logger.warning_once)

    logger = logging.getLogger("transformers")
    logging.Logger.warning_once.cache_clear()  # transformers' warning_once: a message already shown is shown again
    logger.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)


def test_kv_cache_evaluation_passes_no_deprecated_cache_argument(transformers_log):
    """Every sparsity cell (sweep: streaming_logits; downstream: prefill_prompt + continue_prompt; generation:
    generate_with_eviction) hands its cache to the model in the model's own argument name."""
    net = tiny_llama()
    ids = torch.randint(0, 128, (1, 12), generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        streaming_logits(net, ids, None, "h2o", sparsity=0.5, chunk_size=4)
        generate_with_eviction(net, ids, method="snapkv", sparsity=0.5, max_new_tokens=3)
        prompt = prefill_prompt(net, ids[:, :8], ids[:, 8:], methods=("dense", "h2o"))
        continue_prompt(prompt, "h2o", sparsity=0.5, max_new_tokens=3)
    lines = [str(w.message) for w in caught] + [r.getMessage() for r in transformers_log.records]
    assert not [line for line in lines if "past_key_values" in line or "cache_params" in line], lines
