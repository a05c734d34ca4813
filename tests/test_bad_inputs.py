"""Bad inputs across every command: each is exactly one `lightning_bench: error:` line naming what to
change, exit 2, no traceback, and no result file, before any expensive work.

`CASES` is also read by benchmarks/bad_inputs.py, which runs each case as its own process and counts
clean / traceback / silent / noisy outcomes (the figures quoted in docs/failures.md).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Callable, Optional

import pytest

from tests.conftest import FIXTURES, SHARED
from tests.test_cli import run  # (imports lightning now: its log handler must not bind to a test's captured stderr)

PRESET = FIXTURES.parent.parent / "configs" / "compare" / "transformer_small.yaml"
TINY = ["--model", "transformer", "--model.n_layer", "1", "--model.d_model", "32", "--model.n_head", "2",
        "--model.warmup_steps", "2", "--trainer.max_steps", "2", "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false"]
TRAINER_COMMANDS = ("fit", "validate", "test", "predict")
LONG_NAME = "x" * 300


@dataclasses.dataclass
class Place:
    """Where a case runs: the tiny corpus, its own empty folder, and files made on demand."""

    corpus: Path
    tmp: Path

    def file(self, name: str, text: str = "") -> str:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return str(path)

    def data(self, *extra: str) -> list[str]:
        return ["--data", "text", "--data.path", str(self.corpus), "--data.seq_len", "16", *extra]

    def fit(self, *extra: str) -> list[str]:
        return ["fit", *TINY, *self.data(), *extra]

    def hf_folder(self, damage: str) -> str:
        """A tiny random Llama folder, damaged: `empty`, `no_weights`, `garbage_weights`, `remote_code`."""
        folder = self.tmp / f"hf_{damage}"
        folder.mkdir()
        if damage == "empty":
            return str(folder)
        config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 16,
                  "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
        if damage == "remote_code":
            config["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"}
            (folder / "modeling_custom.py").write_text("raise SystemExit('custom code ran')\n")
        (folder / "config.json").write_text(json.dumps(config))
        if damage == "garbage_weights":
            (folder / "model.safetensors").write_bytes(b"\x00\x13not a safetensors file" * 64)
        return str(folder)

    def tiny_hf(self) -> str:
        """A working tiny Llama with the offline GPT-2 tokenizer (for commands that would load one)."""
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        from lightning_bench.data.tokenization import offline_gpt2_folder

        folder = self.tmp / "tiny_llama"
        torch.manual_seed(0)
        LlamaForCausalLM(LlamaConfig(vocab_size=50257, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, max_position_embeddings=512, bos_token_id=50256,
                                     eos_token_id=50256)).save_pretrained(folder)
        for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
            shutil.copyfile(Path(offline_gpt2_folder(self.tmp / "gpt2")) / name, folder / name)
        return str(folder)

    def downstream(self, *extra: str) -> list[str]:
        return ["downstream", "--model.pretrained", self.tiny_hf(), "--tasks", "[xsum]", "--methods", "[dense]",
                "--sparsity", "[0.5]", "--max_samples", "1", "--data_dir", str(SHARED / "data"),
                "--results_dir", "r", "--device", "cpu", *extra]

    def sweep(self, *extra: str) -> list[str]:
        config = self.file("sweep.yaml", f"""
name: bad
output: r/sweep.json
model:
  class_path: lightning_bench.models.HFLanguageModel
  init_args: {{pretrained: {self.tiny_hf()}}}
datasets:
  tiny: {{source: text, path: {self.corpus}, tokenizer: auto, max_tokens: 64}}
methods: [dense]
sparsity_sweep: {{context_length: 16, sparsity_levels: [0.0]}}
""")
        return ["sweep", "--config", config, *extra]

    def generation(self, *extra: str) -> list[str]:
        return ["generation", "--model.pretrained", self.tiny_hf(), "--data", f"tiny={self.corpus}", "--methods",
                "dense", "--sparsity", "0.5", "--context-length", "16", "--continuation-length", "2",
                "--num-samples", "1", "--seeds", "1", "--results_dir", "r", "--device", "cpu", *extra]


@dataclasses.dataclass
class Case:
    argv: Callable[[Place], list[str]]
    expect: str  # a part of the one error line (the option it names, mostly)
    env: Optional[dict] = None


def fit_value(flag: str, value: str, expect: Optional[str] = None) -> Case:
    """`fit FLAG VALUE` on the tiny setup; the error line must name `expect` (default: the flag)."""
    return Case(lambda p: p.fit(flag, value), expect or flag)


def _proc(p: Place) -> str:
    return "/proc/lightning_bench_results"


CASES: dict[str, Case] = {
    # --- fit / validate / test / predict: option values -------------------------------------------
    "eval_max_documents -1": fit_value("--data.eval_max_documents", "-1"),
    "eval_max_documents 0": fit_value("--data.eval_max_documents", "0"),
    "warmup_steps -10": fit_value("--model.warmup_steps", "-10"),
    "n_layer 0": fit_value("--model.n_layer", "0"),
    "eval_batch_size 0": fit_value("--data.eval_batch_size", "0"),
    "learning_rate negative": fit_value("--model.learning_rate", "-0.001"),
    "dropout 1.5": fit_value("--model.dropout", "1.5"),
    "val_check_interval 0": fit_value("--trainer.val_check_interval", "0", "val_check_interval"),
    "n_kv_head 3 with n_head 2": fit_value("--model.n_kv_head", "3"),
    "num_workers -1": fit_value("--data.num_workers", "-1"),
    "d_model 0": fit_value("--model.d_model", "0"),
    "data name 400 characters": fit_value("--data.name", "n" * 400),
    "seq_len 0": fit_value("--data.seq_len", "0"),
    "batch_size 0": fit_value("--data.batch_size", "0"),
    "max_steps negative": fit_value("--trainer.max_steps", "-5", "max_steps"),
    "eval_stride 0": fit_value("--data.eval_stride", "0"),
    "bits not a number": fit_value("--bits", "abc"),
    "bits 3": fit_value("--bits", "3"),
    "unknown eval protocol": fit_value("--data.eval_protocol", "bogus"),
    "unknown model alias": Case(lambda p: ["fit", "--model", "bq"], "unknown model 'bq'"),
    "unknown data alias": Case(lambda p: ["fit", "--data", "ptbb"], "unknown data 'ptbb'"),
    "unknown option": fit_value("--model.n_layers", "2"),
    "unknown task": Case(lambda p: ["test", "--task", "glue/nope"], "unknown glue task 'nope'"),
    "sparsity with fit": fit_value("--sparsity", "h2o"),
    "sparsity under ddp": Case(lambda p: ["test", *TINY[:8], *p.data(), "--sparsity", "h2o", "--trainer.strategy", "ddp",
                                          "--trainer.devices", "2", "--trainer.accelerator", "cpu"],
                               "run in one process"),
    "unknown sparsity method": Case(lambda p: ["test", *TINY[:8], *p.data(), "--sparsity", "nope"], "nope"),
    "sparsity ratio 1.5": Case(lambda p: ["test", *TINY[:8], *p.data(), "--sparsity", "h2o", "--sparsity.ratio", "1.5"],
                               "--sparsity.ratio"),
    "sparsity chunk_size 0": Case(lambda p: ["test", *TINY[:8], *p.data(), "--sparsity", "h2o", "--sparsity.ratio",
                                             "0.5", "--sparsity.chunk_size", "0"], "--sparsity.chunk_size"),
    "sparsity interval 0": Case(lambda p: ["test", *TINY[:8], *p.data(), "--sparsity", "h2o", "--sparsity.ratio",
                                           "0.5", "--sparsity.interval", "0"], "--sparsity.interval"),
    "sparsity budget_tokens -1": Case(lambda p: ["test", *TINY[:8], *p.data(), "--sparsity", "h2o",
                                                 "--sparsity.budget_tokens", "-1"], "--sparsity.budget_tokens"),
    "flop counter unknown": fit_value("--flop_counter", "bogus", "flop counter"),
    "precision contradicts bits": fit_value("--trainer.precision", "bf16-mixed", "--bits"),
    "missing checkpoint": Case(lambda p: ["validate", *TINY[:8], *p.data(), "--ckpt_path", str(p.tmp / "no.ckpt")],
                               "no.ckpt"),
    "validate last without checkpoint": Case(lambda p: ["validate", *TINY[:8], *p.data(), "--ckpt_path", "last"],
                                             "--ckpt_path last"),
    # --- configs ------------------------------------------------------------------------------
    "empty config file": Case(lambda p: ["fit", "--config", p.file("empty.yaml")], "empty.yaml"),
    "config is a YAML list": Case(lambda p: ["fit", "--config", p.file("list.yaml", "- 1\n- 2\n")], "list.yaml"),
    "malformed config": Case(lambda p: ["fit", "--config", p.file("bad.yaml", "model: [unclosed\n  x: {")],
                             "bad.yaml"),
    "missing config file": Case(lambda p: ["fit", "--config", str(p.tmp / "nope.yaml")], "nope.yaml"),
    # --- outputs --------------------------------------------------------------------------------
    "results_dir is a file": Case(lambda p: p.fit("--results_dir", p.file("taken")), "--results_dir"),
    "results_dir under /proc": Case(lambda p: p.fit("--results_dir", _proc(p)), "--results_dir"),
    "results_dir under a file": Case(lambda p: p.fit("--results_dir", p.file("taken") + "/sub"), "--results_dir"),
    "results_dir name too long": Case(lambda p: p.fit("--results_dir", LONG_NAME), "--results_dir"),
    "test results_dir under /proc": Case(lambda p: ["test", *TINY[:8], *p.data(), "--results_dir", _proc(p)],
                                         "--results_dir"),
    "predict results_dir is a file": Case(lambda p: ["predict", *TINY[:8], *p.data(), "--results_dir",
                                                     p.file("taken")], "--results_dir"),
    "default_root_dir is a file": Case(lambda p: p.fit("--trainer.default_root_dir", p.file("taken")),
                                       "--trainer.default_root_dir"),
    "wandb_dir under /proc": Case(lambda p: p.fit("--wandb", "true", "--wandb_dir", _proc(p)), "--wandb_dir"),
    "cache folder under /proc": Case(lambda p: p.fit(), "LB_CACHE_DIR", env={"LB_CACHE_DIR": "/proc/lb_cache"}),
    "cache folder is a file": Case(lambda p: p.fit(), "LB_CACHE_DIR", env={"LB_CACHE_DIR": "@taken"}),
    # --- pretrained folders and checkpoints -------------------------------------------------------
    "empty model folder": Case(lambda p: ["test", "--model", "hf", "--model.pretrained", p.hf_folder("empty"),
                                          *p.data()], "config.json"),
    "model folder without weights": Case(lambda p: ["test", "--model", "hf", "--model.pretrained",
                                                    p.hf_folder("no_weights"), *p.data()], "weights"),
    "garbage safetensors": Case(lambda p: ["test", "--model", "hf", "--model.pretrained",
                                           p.hf_folder("garbage_weights"), *p.data()], "model.safetensors"),
    "model folder with custom code": Case(lambda p: ["test", "--model", "hf", "--model.pretrained",
                                                     p.hf_folder("remote_code"), *p.data()],
                                          "--model.trust_remote_code"),
    "missing model folder": Case(lambda p: ["test", "--model", "hf", "--model.pretrained", str(p.tmp / "no/model"),
                                            *p.data()], "no/model"),
    # --- commands -------------------------------------------------------------------------------
    "unknown command": Case(lambda p: ["frobnicate"], "downstream"),
    "no command": Case(lambda p: [], "downstream"),
    # --- multi_dataset ----------------------------------------------------------------------------
    "multi_dataset empty seeds": Case(lambda p: ["multi_dataset", "--config", p.file(
        "md.yaml", f"preset: {PRESET}\ndatasets: [tiny={p.corpus}]\nseeds: []\n")], "seeds"),
    "multi_dataset results_dir under /proc": Case(lambda p: ["multi_dataset", "--config", str(PRESET),
                                                             "--datasets", f"tiny={p.corpus}",
                                                             "--seeds", "1", "--results_dir", _proc(p), "--", *TINY],
                                                  "--results_dir"),
    "multi_dataset unknown dataset": Case(lambda p: ["multi_dataset", "--datasets", "nope", "--seeds", "1"], "nope"),
    # --- sweep ---------------------------------------------------------------------------------
    "sweep malformed config": Case(lambda p: ["sweep", "--config", p.file("s.yaml", "name: x\n  methods: [a\n")],
                                   "s.yaml"),
    "sweep empty config": Case(lambda p: ["sweep", "--config", p.file("s.yaml")], "s.yaml"),
    "sweep output under /proc": Case(lambda p: p.sweep("--output", _proc(p) + "/s.json"), "--output"),
    "sweep output is a folder": Case(lambda p: p.sweep("--output", str(p.tmp)), "--output"),
    "sweep eval_batch_size 0": Case(lambda p: p.sweep("--eval_batch_size", "0"), "--eval_batch_size"),
    "sweep chunk_size 0": Case(lambda p: p.sweep("--streaming.chunk_size", "0"), "chunk_size"),
    # --- downstream -------------------------------------------------------------------------------
    "downstream results_dir is a file": Case(lambda p: p.downstream("--results_dir", p.file("taken")),
                                             "--results_dir"),
    "downstream results_dir under /proc": Case(lambda p: p.downstream("--results_dir", _proc(p)), "--results_dir"),
    "downstream results_dir too long": Case(lambda p: p.downstream("--results_dir", LONG_NAME), "--results_dir"),
    "downstream max_samples 0": Case(lambda p: p.downstream("--max_samples", "0"), "--max_samples"),
    "downstream interval 0": Case(lambda p: p.downstream("--interval", "0"), "--interval"),
    "downstream meter_every 0": Case(lambda p: p.downstream("--meter_every", "0"), "--meter_every"),
    "downstream max_new_tokens -1": Case(lambda p: p.downstream("--max_new_tokens", "-1"), "--max_new_tokens"),
    "downstream config is a list": Case(lambda p: ["downstream", "--config", p.file("d.yaml", "- a\n")], "d.yaml"),
    # --- tune ---------------------------------------------------------------------------------------
    "tune num_samples 0": Case(lambda p: ["tune", *p.downstream("--methods", "[h2o]", "--num_samples", "0")[1:]],
                               "--num_samples"),
    "tune space out of range": Case(lambda p: ["tune", *p.downstream("--methods", "[h2o]", "--space",
                                                                     "{h2o: {recent_ratio: {low: 0, high: 3}}}")[1:]],
                                    "--space.h2o.recent_ratio"),
    "tune show of a file": Case(lambda p: ["tune", "show", p.file("taken")], "tune show"),
    # --- generation ---------------------------------------------------------------------------------
    "generation results_dir under /proc": Case(lambda p: p.generation("--results_dir", _proc(p)), "--results_dir"),
    "generation continuation 0": Case(lambda p: p.generation("--continuation-length", "0"), "continuation_length"),
    "generation num_samples 0": Case(lambda p: p.generation("--num-samples", "0"), "num_samples"),
    # --- data generators and export ------------------------------------------------------------------
    "generate_ruler out is a file": Case(lambda p: ["generate_ruler", "--tokenizer", "gpt2", "--data_dir",
                                                    p.file("taken"), "--lengths", "512", "--tasks", "niah_single_1",
                                                    "--num_samples", "1"], "--data_dir"),
    "generate_ruler out under /proc": Case(lambda p: ["generate_ruler", "--tokenizer", "gpt2", "--data_dir", _proc(p),
                                                      "--lengths", "512", "--tasks", "niah_single_1",
                                                      "--num_samples", "1"], "--data_dir"),
    "generate_ruler missing out": Case(lambda p: ["generate_ruler", "--tokenizer", "gpt2"], "--data_dir"),
    "generate_ruler negative length": Case(lambda p: ["generate_ruler", "--tokenizer", "gpt2", "--data_dir", "d",
                                                      "--lengths", "-5"], "--lengths"),
    "infinitebench_generate missing task": Case(lambda p: ["infinitebench_generate", "--tokenizer", "gpt2"],
                                                "--task"),
    "infinitebench_generate out under /proc": Case(lambda p: ["infinitebench_generate", "--task", "passkey",
                                                              "--tokenizer", "gpt2", "--lengths", "256",
                                                              "--data_dir", _proc(p)], "--data_dir"),
    "counting_stars_generate missing haystack": Case(lambda p: ["counting_stars_generate", "--lengths", "100",
                                                                 "--data_dir", "d"], "--haystack"),
    "counting_stars_generate out under /proc": Case(lambda p: ["counting_stars_generate", "--haystack",
                                                               p.file("hay.txt", "a b c " * 100), "--lengths", "100",
                                                               "--data_dir", _proc(p)], "--data_dir"),
    "counting_stars_generate haystack too short": Case(lambda p: ["counting_stars_generate", "--haystack",
                                                                  p.file("hay.txt", "a b c"), "--lengths", "100",
                                                                  "--data_dir", str(p.tmp / "cs")], "--haystack"),
    "export_documents missing output": Case(lambda p: ["export_documents", *p.data()[:4]], "--output"),
    "export_documents output under /proc": Case(lambda p: ["export_documents", *p.data()[:4], "-o",
                                                           _proc(p) + "/d.jsonl"], "-o"),
    "export_documents output is a folder": Case(lambda p: ["export_documents", *p.data()[:4], "-o", str(p.tmp)],
                                                "-o"),
    # --- reports ---------------------------------------------------------------------------------------
    "results missing folder": Case(lambda p: ["results", str(p.tmp / "nowhere")], "no such folder"),
    "results unknown filter column": Case(lambda p: ["results", str(p.tmp), "--filter", "ppl=10"], "--filter"),
    "results csv exists": Case(lambda p: ["results", str(p.tmp), "--csv", p.file("table.csv", "kept")], "--csv"),
    "report folder not empty": Case(lambda p: ["report", str(p.tmp), "-o", str(Path(p.file("rep/kept.md", "x")).parent)],
                                    "-o"),
    "report missing path": Case(lambda p: ["report", str(p.tmp / "nowhere"), "-o", str(p.tmp / "rep")], "no such file"),
    "report no records": Case(lambda p: ["report", p.file("other.json", "{}"), "-o", str(p.tmp / "rep")], "no record"),
}


def prepare(name: str, corpus: Path, tmp: Path) -> tuple[list[str], dict]:
    """(argv, environment overrides) of case `name`, its files made under `tmp`. Trainer commands write
    their records to `tmp/r`, so a record left behind is seen."""
    case = CASES[name]
    place = Place(corpus, tmp)
    argv = case.argv(place)
    if argv and argv[0] in TRAINER_COMMANDS and "--results_dir" not in argv:
        argv += ["--results_dir", "r"]
    env = {k: (str(tmp / v[1:]) if v.startswith("@") else v) for k, v in (case.env or {}).items()}
    for value in env.values():
        if value.startswith(str(tmp)):
            Path(value).write_text("a file where a folder is expected")
    return argv, env


def results_left(tmp: Path) -> list[str]:
    """Records, predictions or summaries a failed run must not leave behind."""
    found = [p for p in tmp.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".pt", ".ckpt", ".txt")
             and not p.is_relative_to(tmp / "tiny_llama") and not p.is_relative_to(tmp / "gpt2")
             and "hf_" not in str(p.relative_to(tmp)) and "cache" not in p.relative_to(tmp).parts]
    return [str(p.relative_to(tmp)) for p in found]


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_and_leaves_nothing(name, tiny_corpus, tmp_path, capsys, monkeypatch):
    argv, env = prepare(name, tiny_corpus, tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    before = set(results_left(tmp_path))
    code, out, err = run(argv, capsys)
    assert code == 2, f"exit {code}\n{out}\n{err}"
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("lightning_bench: error: "), err
    assert [line for line in lines if "error" in line.lower()] == [lines[-1]], err
    assert CASES[name].expect in lines[-1], lines[-1]
    assert set(results_left(tmp_path)) == before, "a failed run left a result file"


class _DryPlace(Place):
    """Builds the argv only: no file, model or folder is made."""

    def file(self, name: str, text: str = "") -> str:
        return str(self.tmp / name)

    def hf_folder(self, damage: str) -> str:
        return str(self.tmp / damage)

    def tiny_hf(self) -> str:
        return str(self.tmp / "tiny_llama")


def test_the_cases_cover_every_command():
    from lightning_bench.cli import EXTRA_COMMANDS

    assert len(CASES) >= 60
    dry = _DryPlace(Path("corpus"), Path("tmp"))
    covered = {(case.argv(dry) or ["(none)"])[0] for case in CASES.values()}
    assert covered >= {*TRAINER_COMMANDS, "(none)", "frobnicate", *EXTRA_COMMANDS} - {"aliases"}


def test_help_lists_every_command(capsys):
    from lightning_bench.cli import EXTRA_COMMANDS

    code, out, _ = run(["--help"], capsys)
    assert code == 0 and all(command in out for command in [*TRAINER_COMMANDS, *EXTRA_COMMANDS])
