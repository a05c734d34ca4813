"""TaskEvaluator: scores a task DataModule's test batches, collects the step outputs, computes task metrics.

The protocol is the DataModule's (`PromptedDataModule` or `FinetuneDataModule`, chosen once in
data/downstream/protocol.py). Prompted batches are scored by `score_test_batch`, which the model's test
step calls; fine-tuned heads return their predictions from the model's own step. At the end of the
test loop `evaluate` turns what was collected into {benchmark: results} and per-sample rows, which
results/downstream.py writes.
"""

from __future__ import annotations

from typing import Optional

import lightning as L

from lightning_bench.evaluation.prompted import score_batch
from lightning_bench.evaluation.task_scoring import score_finetuned, score_prompted

# how a prompted score was obtained, written beside it (records' protocol.scoring)
SCORING_RULES = {
    "multiple_choice": "prediction = argmax of the summed log-likelihood of each choice (acc); acc_norm divides "
                       "by the choice's length in characters without the separator before it "
                       "(lm-evaluation-harness)",
    "stsb": "probability-weighted score over the choices ' 0'..' 5'",
    "generation": "greedy (a clean generation config), cut at the stop string or EOS; SQuAD v2: the no-answer "
                  "string -> '', no-answer probability = P(no-answer string | prompt)",
    "tokenization": "continuation = encode(context + choice) after its common prefix with encode(context); "
                    "no BOS added; prompts longer than max_length lose tokens from the left",
}


def score_test_batch(module, batch: dict, datamodule) -> dict:
    """A prompted request batch scored by `module` (its test step's return value)."""
    generation = datamodule.generation_settings(batch) if batch["kind"] == "generate" else None
    return score_batch(module, batch, generation)


class TaskEvaluator(L.Callback):
    """Collects every test step's output of a task DataModule; `evaluate` scores them."""

    def __init__(self):
        self.outputs: list[dict] = []

    def on_test_start(self, trainer, pl_module):
        self.outputs = []

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if outputs is not None:
            self.outputs.append(outputs)

    def evaluate(self, datamodule) -> tuple[dict, list[dict]]:
        """({benchmark: results in the reference shape}, per-sample rows) of the finished test loop."""
        if datamodule.protocol == "finetune":
            return self._finetuned(datamodule)
        return score_prompted(datamodule.requests, self.outputs)

    def _finetuned(self, datamodule) -> tuple[dict, list[dict]]:
        task, rows = datamodule.task.name, datamodule.finetune["test"]
        predictions: dict[int, float] = {}
        for out in self.outputs:
            predictions.update(zip(out["row_index"].tolist(), out["predictions"].tolist()))
        samples = [{"task": task, "id": r["id"], "prediction": predictions[i], "label": r["label"]}
                   for i, r in enumerate(rows)]
        return score_finetuned(task, rows, predictions), samples

    @staticmethod
    def protocol_record(datamodule) -> Optional[dict]:
        """How the scores were computed, for the record (prompted only: a fine-tuned head is its own rule)."""
        return {"scoring": SCORING_RULES} if datamodule.protocol == "prompted" else None
