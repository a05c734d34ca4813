"""Downstream-task DataModules: prompted evaluation and fine-tuning over one shared base, and the one
function that decides which of them a command runs (protocol.py)."""

from lightning_bench.tasks.datamodules.base import TaskDataModule
from lightning_bench.tasks.datamodules.finetune import FinetuneDataModule
from lightning_bench.tasks.datamodules.prompted import PromptedDataModule, Request
from lightning_bench.tasks.datamodules.protocol import PROTOCOL_CLASSES, choose_protocol

__all__ = ["FinetuneDataModule", "PROTOCOL_CLASSES", "PromptedDataModule", "Request", "TaskDataModule",
           "choose_protocol"]
