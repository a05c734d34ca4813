"""The first screen of a run: what runs on what data, the model's size and its measured FLOPs, with
nothing that contradicts them (Lightning's FLOPs column, `v_num`, its advertising, a deprecation notice
from its own code)."""

from __future__ import annotations

import logging
import sys
import warnings

from lightning.pytorch.callbacks import ModelSummary, ProgressBar, RichModelSummary, RichProgressBar, TQDMProgressBar
from lightning.pytorch.utilities.model_summary import get_human_readable_count

from lightning_bench.errors import PROG

try:
    import rich  # noqa: F401 - Lightning picks its rich progress bar and summary when rich is installed

    _Bar, _Summary = RichProgressBar, RichModelSummary
except ImportError:
    _Bar, _Summary = TQDMProgressBar, ModelSummary


class RunProgressBar(_Bar):
    """Lightning's bar without `v_num`: the logger's version, shown as `v_num: 0.000` in every fresh run."""

    def get_metrics(self, trainer, pl_module):
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items


class RunSummary(_Summary):
    """One line naming the run and its data, Lightning's module table without its FLOPs column, and the
    FLOPs of the first training step as the profiler measured them.

    Lightning's column counts only a forward of `example_input_array`, which no model here defines: it
    printed 0 for every module while the profiler measures the real step (forward + backward)."""

    def __init__(self, run_name: str):
        super().__init__(max_depth=1)
        self.run_name, self._flops_shown = run_name, False

    def on_fit_start(self, trainer, pl_module) -> None:
        dm = trainer.datamodule
        if dm is not None and getattr(dm, "tokenizer", None) is not None:
            data = (f"{getattr(dm, 'dataset_name', type(dm).__name__)} ({dm.tokenizer.describe()['kind']} tokens, "
                    f"vocab {dm.vocab_size:,}; {dm.seq_len}-token sequences, batch {dm.hparams.batch_size})")
        else:
            data = type(dm).__name__ if dm is not None else "given by the model"
        print(f"{PROG}: run {self.run_name}: data {data}", file=sys.stderr)
        super().on_fit_start(trainer, pl_module)

    @staticmethod
    def summarize(summary_data, total_parameters, trainable_parameters, model_size, total_training_modes,
                  total_flops, **summarize_kwargs) -> None:
        columns = [(name, values) for name, values in summary_data if name != "FLOPs"]
        if _Summary is ModelSummary:
            rows = zip(*(values for _, values in columns))
            lines = ["  ".join(name for name, _ in columns), *("  ".join(row) for row in rows)]
        else:
            from rich import get_console
            from rich.table import Table

            table = Table(header_style="bold magenta")
            for name, _ in columns:
                table.add_column(name, justify="right" if name == "Params" else "left")
            for row in zip(*(values for _, values in columns)):
                table.add_row(*row)
            get_console().print(table)
            lines = []
        lines.append(f"parameters: {get_human_readable_count(int(total_parameters))} "
                     f"({get_human_readable_count(int(trainable_parameters))} trainable), "
                     f"{model_size:.2f} MB of weights; FLOPs: measured on the first training step")
        print("\n".join(lines))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._flops_shown:
            return
        from lightning_bench.profiling import ProfilingCallback

        profiler = next((c for c in trainer.callbacks if isinstance(c, ProfilingCallback)), None)
        step = profiler.flops.train_flops if profiler is not None and profiler.flops is not None else None
        if step is None:
            return
        self._flops_shown = True
        count = get_human_readable_count
        print(f"{PROG}: measured FLOPs per training step: {count(step.total_flops)} (forward "
              f"{count(step.forward_flops)} + backward {count(step.backward_flops)}, {step.tokens:,} tokens)",
              file=sys.stderr)


def console_callbacks(trainer_config, callbacks, run_name: str) -> list:
    """The progress bar and summary above, unless switched off or replaced by the user's own."""
    out = []
    if trainer_config.enable_progress_bar is not False and not any(isinstance(c, ProgressBar) for c in callbacks):
        out.append(RunProgressBar())
    if trainer_config.enable_model_summary is not False and not any(isinstance(c, ModelSummary) for c in callbacks):
        out.append(RunSummary(run_name))
    return out


class _DropLightningTips(logging.Filter):
    # Lightning's advertising, its note that it uses our RunSummary, the accelerators that are absent (TPU/HPU
    # always here; a GPU that is neither there nor used: the --bits line says what runs), and how it counts
    # the steps of the schedule: nothing a user can act on, on every run
    DROPPED = ("💡 Tip:", "Trainer already configured with model summary", "TPU available:", "HPU available:",
               "GPU available: False, used: False", "Loading `train_dataloader` to estimate number of stepping")

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.DROPPED)


def quiet_lightning() -> None:
    """Lightning advertises its cloud products (litlogger, litmodels) on every run, and its own
    `_pytree.py` still builds a `LeafSpec`, which torch >= 2.9 deprecates: neither is the user's to act on."""
    from lightning_utilities.core import rank_zero

    if not any(isinstance(f, _DropLightningTips) for f in rank_zero.log.filters):
        rank_zero.log.addFilter(_DropLightningTips())
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                            category=FutureWarning, module=r"lightning\.pytorch\.utilities\._pytree")
