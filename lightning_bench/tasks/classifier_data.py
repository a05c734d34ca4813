"""The fine-tuning protocol's data pieces: held-out splits by group, text pair -> ids, batches."""

from __future__ import annotations

import random
from typing import Optional

import torch

from lightning_bench.data.tokenization import WordTokenizer


def encode_pair(tokenizer, a: str, b: Optional[str], max_length: int) -> list[int]:
    """text (pair) -> ids ending in an end token: the pooled last position is the same marker for every
    example (the word tokenizer ends each line with <eos>; HF tokenizers get their EOS appended).
    Longer inputs keep their first max_length - 1 tokens and the end token."""
    ids = tokenizer.encode(a if b is None else a + "\n" + b)
    if not isinstance(tokenizer, WordTokenizer):
        end = tokenizer.tok.eos_token_id
        ids = ids + ([end] if end is not None else [])
    return ids[:max_length - 1] + ids[-1:] if len(ids) > max_length else ids


def classification_collate(batch: list[tuple], pad_id: int, regression: bool) -> dict:
    """[(ids, target, row_index)] -> the batch models/sequence_head.py reads (right padding)."""
    width = max(len(ids) for ids, _, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for j, (ids, _, _) in enumerate(batch):
        input_ids[j, :len(ids)], mask[j, :len(ids)] = torch.tensor(ids), 1
    targets = torch.tensor([t for _, t, _ in batch], dtype=torch.float32 if regression else torch.long)
    return {"kind": "classification", "input_ids": input_ids, "attention_mask": mask, "targets": targets,
            "row_index": torch.tensor([i for _, _, i in batch])}


def passage(row: dict) -> Optional[str]:
    for key in ("context", "paragraph", "passage"):
        if key in row:
            return row[key]
    return None


def split_groups(rows: list[dict], fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(held-out part, rest): a seeded `fraction` of the rows, whole groups at a time (MultiRC's answer
    options of one question stay together, so no question is both trained on and tested)."""
    groups: dict = {}
    for row in rows:
        groups.setdefault(row.get("question_id", row["id"]), []).append(row)
    keys = list(groups)
    random.Random(seed).shuffle(keys)
    n = max(1, round(fraction * len(keys))) if fraction > 0 else 0
    held = {k for k in keys[:n]}
    return ([r for k in keys if k in held for r in groups[k]], [r for k in keys if k not in held for r in groups[k]])
