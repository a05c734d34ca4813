"""Prompts token for token as kvpress builds them: the unified rows of tests/fixtures/kvpress/rows.jsonl through
`lightning_bench downstream`'s prompt builder (chat template auto, SmolLM2's tokenizer) give, per protocol,
the span kvpress 0.5.5's pipeline compresses and the tokens it feeds after, as recorded from its own
`preprocess` by benchmarks/kvpress_prompts.py (tests/fixtures/kvpress/prompts.json)."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from lightning_bench.sparsity.task_decode import span_length

pytestmark = pytest.mark.smollm2
FIXTURES = Path(__file__).parent / "fixtures" / "kvpress"


def test_spans_and_fed_tokens_equal_kvpresss(smollm2_dir):
    from lightning_bench.data.tokenization import HFTokenizer
    from lightning_bench.experiments.downstream.setup import build_prompts

    smollm2_tokenizer = HFTokenizer(str(smollm2_dir))
    reference = json.loads((FIXTURES / "prompts.json").read_text())
    cfg = SimpleNamespace(tasks=["long_context_rows"], data_dir=None,
                          paths={"long_context_rows": str(FIXTURES / "rows.jsonl")}, max_samples=None,
                          max_new_tokens=None, chat_template="auto", samples=None, temperature=None, top_p=None,
                          max_context=None)
    prompts = build_prompts(cfg, smollm2_tokenizer, 4096)[0]["long_context_rows"]
    assert prompts.chat_template and len(reference["prompts"]) == 2 * len(prompts.samples) == 8
    for want in reference["prompts"]:
        parts = prompts.samples[want["row"]].parts[want["protocol"]]
        whole = [token for part in parts for token in part]
        span = span_length(*map(len, parts), want["protocol"])
        assert whole[:span] == want["context_ids"], (want["row"], want["protocol"])
        assert whole[span:] == want["question_ids"], (want["row"], want["protocol"])
    # the cue is the chat template's closing turn and assistant header, then the row's answer prefix
    cue = prompts.samples[0].parts["query_aware"][2]
    assert smollm2_tokenizer.decode(cue).startswith("<|im_end|>\n<|im_start|>assistant\n")
