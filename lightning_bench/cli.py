"""`lightning_bench`: the entry point. Trainer subcommands (fit/validate/test/predict) go to
LightningCLI (lightning_bench/trainer_cli.py); the others are looked up in EXTRA_COMMANDS.

Every user error (ConfigError, possibly wrapped by jsonargparse) ends as one
`lightning_bench: error: ...` line and exit code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Optional

from lightning_bench.errors import ConfigError, fail, find_config_error, find_write_error
from lightning_bench.results.meta import git_revision


def list_aliases(argv: list[str]) -> int:
    """`lightning_bench aliases`: what --model, --data and --task accept."""
    from lightning_bench.data import DATA_ALIASES
    from lightning_bench.models import MODEL_ALIASES

    print("models: " + ", ".join(f"{k} ({v})" for k, v in sorted(MODEL_ALIASES.items())))
    print("data:   " + ", ".join(DATA_ALIASES))
    from lightning_bench.tasks import BENCHMARKS

    print("task:   " + ", ".join(BENCHMARKS) + ", or one task: glue/sst2, superglue/boolq, mmlu/anatomy, ...")
    return 0


def downstream(argv: list[str]) -> int:
    """`lightning_bench downstream` (experiments/downstream); its --wandb run also gets the figures and tables
    `lightning_bench report` makes of the grid (reports/wandb_log.py), handed in here: experiments sit below
    reports and do not import them."""
    from lightning_bench.experiments.downstream import main as run_downstream
    from lightning_bench.reports.wandb_log import log_downstream

    return run_downstream(argv, wandb_extras=log_downstream)


# Subcommands that are not Lightning trainer entry points: name -> "module:function(argv) -> exit code".
# Imported when called, so `lightning_bench fit` does not pay for them at start-up.
EXTRA_COMMANDS: dict[str, str] = {
    "aliases": "lightning_bench.cli:list_aliases",
    "multi_dataset": "lightning_bench.experiments.multi_dataset:main",
    "generation": "lightning_bench.experiments.generation:main",
    "sweep": "lightning_bench.experiments.sweep:main",
    "downstream": "lightning_bench.cli:downstream",
    "tune": "lightning_bench.experiments.tuning.command:main",
    "infinitebench_generate": "lightning_bench.tasks.infinitebench.generate:main",
    "generate_ruler": "lightning_bench.tasks.ruler.generate:main",
    "counting_stars_generate": "lightning_bench.tasks.counting_stars.generate:main",
    "export_documents": "lightning_bench.data.export_documents:main",
    "results": "lightning_bench.reports.results_table:main",
    "report": "lightning_bench.reports.report:main",
}


def _command(name: str):
    module, _, function = EXTRA_COMMANDS[name].partition(":")
    return getattr(importlib.import_module(module), function)


TRAINER_COMMANDS = ("fit", "validate", "test", "predict")


def print_usage() -> int:
    """`lightning_bench --help`: every command (LightningCLI's own help knows only its four)."""
    print(f"usage: lightning_bench COMMAND [options]\ncommands: {', '.join([*TRAINER_COMMANDS, *EXTRA_COMMANDS])}\n"
          "`lightning_bench COMMAND --help` lists a command's options; README.md has a short tour")
    return 0


def check_command(argv: list[str]) -> None:
    """The command word, checked before anything loads: LightningCLI's own message lists only its four."""
    commands = ", ".join([*TRAINER_COMMANDS, *EXTRA_COMMANDS])
    if not argv:
        raise ConfigError(f"give a command: {commands} (`lightning_bench COMMAND --help` for its options)")
    if not argv[0].startswith("-") and argv[0] not in TRAINER_COMMANDS and argv[0] not in EXTRA_COMMANDS:
        raise ConfigError(f"unknown command {argv[0]!r}; valid: {commands}")


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    git_revision()  # the revision of the code this run loads, read now: a long run's results name it, not a later one
    try:
        if argv and argv[0] in ("-h", "--help"):
            return print_usage()
        check_command(argv)
        if argv and argv[0] in EXTRA_COMMANDS:
            return _command(argv[0])(argv[1:])
        from lightning_bench.trainer_cli import finish_loggers, run_cli

        cli = run_cli(argv)
        if getattr(cli, "trainer", None) is not None and cli.config.get(cli.subcommand, {}).get("wandb"):
            from lightning_bench.reports.wandb_log import log_records

            log_records(cli.trainer)  # the report's figures and tables of the records, into the same W&B run
        finish_loggers(cli.trainer)
    except Exception as err:  # noqa: BLE001 - user errors may arrive wrapped by jsonargparse
        user_error = find_config_error(err)
        if user_error is not None:
            fail(str(user_error))
        full = find_write_error(err)
        if full is None:
            raise
        # every result file is written to a temporary file and renamed: a failed write leaves no partial file
        where = f"writing {full.filename}" if full.filename else "a write"
        fail(f"{where} failed: {full.strerror}; free space (or raise `ulimit -f`) and run the same command again",
             code=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
