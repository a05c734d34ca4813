"""How evaluation batches are scored (`Evaluation`) and the TaskEvaluator that collects a task's scores.

The training recipe (LanguageModule), the scoring of requests and the KV engine are separate things: a
module's evaluation steps ask its `evaluation` attribute (None = its own forward), which callbacks set for
a stage: the SparsityCallback its KV eviction (sparsity StreamingEviction: the streaming logits of LM
windows), the TaskEvaluator an `Evaluation` of the prompted requests (the PromptedDataModule, whose
batches `evaluation/request_scoring.score_batch` scores) that keeps the eviction, if any, as its `kv`
(streaming logits of request rows, generation on the KV engine). Fine-tuned heads return their
predictions from the model's own step. At the end of the test loop `TaskEvaluator.evaluate` turns what
was collected into {benchmark: results} and per-sample rows, which results/downstream.py writes. The
protocol is the DataModule's (`PromptedDataModule` or `FinetuneDataModule`, tasks/datamodules/protocol.py).
"""

from __future__ import annotations

from typing import Optional

import lightning as L

from lightning_bench.tasks.datamodules.encoding import REQUEST_KINDS
from lightning_bench.evaluation.request_scoring import module_logits, score_batch
from lightning_bench.tasks.benchmark_scores import score_finetuned, score_prompted

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


class Evaluation:
    """What a LanguageModule's test steps delegate to while a task is scored (module docstring): the
    prompted `requests` (the PromptedDataModule) and, under --sparsity, the applied eviction `kv` (a
    sparsity StreamingEviction, which alone is the module's evaluation for LM windows)."""

    def __init__(self, kv=None, requests=None):
        self.kv, self.requests = kv, requests

    @classmethod
    def attach(cls, module, requests) -> "Evaluation":
        """Become `module`'s evaluation, keeping an eviction already applied to it as `kv`."""
        module.evaluation = cls(module.evaluation, requests)
        return module.evaluation

    def detach(self, module) -> None:
        """Hand `module` back its eviction if one is still applied, else its own forward."""
        if getattr(module, "evaluation", None) is self:
            module.evaluation = self.kv

    def logits(self, module, input_ids, logits_to_keep=None):
        """Logits of request rows: the eviction's streaming logits, or the module's own."""
        if self.kv is not None:
            return self.kv.logits(module, input_ids, logits_to_keep)
        return module_logits(module, input_ids, logits_to_keep)

    def scores(self, batch) -> bool:
        """Whether `batch` is a prompted request batch (else an LM window batch, the module's own step)."""
        return self.requests is not None and isinstance(batch, dict) and batch.get("kind") in REQUEST_KINDS

    def score(self, module, batch: dict) -> dict:
        """A prompted request batch scored by `module` (its test step's return value)."""
        generation = self.requests.generation_settings(batch) if batch["kind"] == "generate" else None
        return score_batch(module, batch, generation, self.logits, self.kv)


class TaskEvaluator(L.Callback):
    """Collects every test step's output of a task DataModule; `evaluate` scores them."""

    def __init__(self):
        self.outputs: list[dict] = []

    def on_test_start(self, trainer, pl_module):
        self.outputs = []
        Evaluation.attach(pl_module, trainer.datamodule)

    def _leave(self, pl_module) -> None:
        evaluation = getattr(pl_module, "evaluation", None)
        if isinstance(evaluation, Evaluation):
            evaluation.detach(pl_module)

    def on_test_end(self, trainer, pl_module):
        self._leave(pl_module)

    def on_exception(self, trainer, pl_module, exception):
        self._leave(pl_module)

    def teardown(self, trainer, pl_module, stage):
        self._leave(pl_module)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if outputs is not None:
            self.outputs.append(outputs)

    def on_test_epoch_end(self, trainer, pl_module):
        """Under several processes each rank scored some batches (data/sharding.py, none twice): every rank
        gets every rank's outputs, in rank order, so that any rank scores the whole task."""
        if trainer.world_size > 1:
            import torch.distributed as dist
            from lightning.fabric.utilities.apply_func import move_data_to_device

            gathered = [None] * trainer.world_size
            dist.all_gather_object(gathered, move_data_to_device(self.outputs, "cpu"))
            self.outputs = [out for rank_outputs in gathered for out in rank_outputs]

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
