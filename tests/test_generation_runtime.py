"""Generation for the generative tasks (evaluation/request_scoring.py, tasks/datamodules/request_scoring.py): seeded
sampling with nucleus filtering, multi-character stop strings, a document cut from its middle (never
the instruction or the question) and the chat template applied where a task asks for it."""

import pytest
import torch

from lightning_bench.tasks.datamodules.prompted import PromptedDataModule
from lightning_bench.errors import ConfigError
from lightning_bench.tasks.datamodules.encoding import encode_generation
from lightning_bench.tasks import get_task
from lightning_bench.tasks.prompts import Generation
from lightning_bench.evaluation import request_scoring
from lightning_bench.sparsity.sampling import sample_token
from tests.test_downstream import KeepEverything, gpt2, tiny_module  # noqa: F401 (fixtures)


def _batch(gpt2, text="Question: what is it?\n\nAnswer:", rid=0):
    return {"input_ids": torch.tensor([gpt2.encode(text)]), "request_id": torch.tensor([rid])}


def test_nucleus_sampling_draws_only_from_the_top_p_set_in_proportion():
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()
    gen = torch.Generator().manual_seed(0)
    draws = [sample_token(logits, 1.0, 0.7, gen) for _ in range(4000)]
    assert set(draws) == {0, 1}  # 0.5 < 0.7: the token that crosses top_p (index 1) is kept, no more
    assert draws.count(0) / len(draws) == pytest.approx(0.5 / 0.8, abs=0.03)
    # top_p reached exactly by {0, 1}: index 2 is not needed
    assert set(sample_token(logits, 1.0, 0.8, gen) for _ in range(500)) == {0, 1}
    # temperature -> 0 concentrates on the argmax; top_p 1 keeps every token
    assert {sample_token(logits, 0.01, 1.0, gen) for _ in range(200)} == {0}
    assert set(sample_token(logits, 1.0, 1.0, gen) for _ in range(2000)) == {0, 1, 2, 3}


@pytest.mark.parametrize("evicting", [False, True])
def test_sampled_completions_are_seeded_per_request_and_draw(tiny_module, gpt2, evicting):
    kv = KeepEverything() if evicting else None  # the KV engine / HF generate
    run = lambda rid, seed=0: request_scoring.generate(tiny_module, _batch(gpt2, rid=rid), tokenizer=gpt2,  # noqa: E731
                                                max_new_tokens=6, samples=4, temperature=1.0, top_p=0.95,
                                                seed=seed, kv=kv)
    first, again, other_seed = run(3), run(3), run(3, seed=1)
    assert first["samples"] == again["samples"] and len(first["samples"][0]) == 4
    assert len(set(first["samples"][0])) > 1  # four draws, not one repeated
    assert first["samples"] != other_seed["samples"]
    assert first["text"] == [first["samples"][0][0]]


def test_greedy_generation_has_no_samples_field(tiny_module, gpt2):
    out = request_scoring.generate(tiny_module, _batch(gpt2), tokenizer=gpt2, max_new_tokens=4)
    assert "samples" not in out and len(out["tokens"][0]) == 4


@pytest.mark.parametrize("evicting", [False, True])
def test_generation_stops_at_a_multi_character_stop_string(tiny_module, gpt2, evicting):
    batch = _batch(gpt2)
    free = request_scoring.generate(tiny_module, batch, tokenizer=gpt2, max_new_tokens=8)["tokens"][0]
    stop = gpt2.decode(free[1:3])  # text made by the 2nd and 3rd tokens
    assert len(stop) > 1
    out = request_scoring.generate(tiny_module, batch, tokenizer=gpt2, max_new_tokens=8, stop_strings=(stop,),
                            kv=KeepEverything() if evicting else None)
    assert out["tokens"][0] == free[:3]  # stopped as soon as the text held the stop string


def test_a_long_document_loses_its_middle_not_the_instruction_or_question(gpt2):
    document = " ".join(f"w{i}" for i in range(300))
    context = f"Summarize the article.\n\nArticle: {document}\n\nQuestion: who?\n\nSummary:"
    full = len(gpt2.encode(context))
    row = encode_generation(gpt2, 0, context, len(context), max_length=120, max_new_tokens=20, document=document)
    text = gpt2.decode(row.tokens)
    assert len(row.tokens) <= 100 and row.truncated >= full - 100
    assert text.startswith("Summarize the article.\n\nArticle: w0 w1 w2") and text.endswith(
        "w298 w299\n\nQuestion: who?\n\nSummary:")
    assert " w150 " not in text  # the middle went
    fits = encode_generation(gpt2, 0, context, len(context), max_length=full + 20, max_new_tokens=20, document=document)
    assert fits.truncated == 0 and fits.tokens == gpt2.encode(context)


def test_a_prompt_that_cannot_fit_is_a_one_line_error(gpt2):
    context = "Answer the question with a short answer. " * 10 + "Article: short\n\nQuestion: who?\n\nAnswer:"
    with pytest.raises(ConfigError, match="xsum sample 'a'.*without its document do not fit"):
        encode_generation(gpt2, 0, context, len(context), 40, 20, document="short", label="xsum sample 'a'")
    with pytest.raises(ConfigError, match="no document to shorten"):
        encode_generation(gpt2, 0, context, len(context), 40, 20, cut_left=False)
    assert encode_generation(gpt2, 0, context, len(context), 40, 20).truncated > 0  # code / k-shot: cut from the left


def test_chat_template_applies_to_instruction_tasks_only(smollm2_dir):
    dm = PromptedDataModule(tasks="xsum,squad", tokenizer=str(smollm2_dir))
    dm.tokenizer = dm.resolve_tokenizer()
    assert dm.uses_chat_template("xsum") and not dm.uses_chat_template("squad")

    def render(module, task, text, row=None):
        prefix, joiner = get_task(task).generation.answer_start(row or {})
        return module.render(task, Generation(text, (), answer_prefix=prefix, joiner=joiner))

    text, cue = render(dm, "xsum", "Summarize this.")
    assert "<|im_start|>user\nSummarize this.<|im_end|>" in text and text.endswith("<|im_start|>assistant\n")
    assert text[cue:] == "<|im_end|>\n<|im_start|>assistant\n"  # the cue: what follows the user's text
    assert render(dm, "squad", "Question: x") == ("Question: x", len("Question: x"))
    off = PromptedDataModule(tasks="xsum", tokenizer=str(smollm2_dir), chat_template="off")
    off.tokenizer = dm.tokenizer
    assert render(off, "xsum", "Summarize this.") == ("Summarize this.", 15)
    # a task's answer prefix follows the prompt, with or without the chat template; it is part of the cue
    text, cue = render(dm, "infinitebench/passkey", "What is the pass key?")
    assert text.endswith("What is the pass key?<|im_end|>\n<|im_start|>assistant\nThe pass key is")
    assert text[cue:] == "<|im_end|>\n<|im_start|>assistant\nThe pass key is"
    assert render(off, "infinitebench/passkey", "What is the pass key?") == \
        ("What is the pass key?\n\nThe pass key is", len("What is the pass key?"))
    # a row's own answer prefix (RULER, kvpress's rows) is written as it is after the question
    row = {"answer_prefix": " The number is"}
    assert render(off, "ruler/vt", "Find it.", row)[0] == "Find it. The number is"
    text, cue = render(dm, "ruler/vt", "Find it.", row)
    assert text.endswith("Find it.<|im_end|>\n<|im_start|>assistant\n The number is") and text[:cue].endswith("Find it.")
    record = dm.protocol_record()
    assert record["chat_template"] == {"xsum": True, "squad": False}
    assert record["sampling"]["xsum"] == {"samples": 1, "temperature": 0.0, "top_p": 1.0, "seed": 1234}


def test_chat_template_on_without_one_and_bad_sampling_are_errors(gpt2):
    dm = PromptedDataModule(tasks="xsum", tokenizer="gpt2", chat_template="on")
    dm.tokenizer = gpt2
    with pytest.raises(ConfigError, match="has no chat template; use auto or off"):
        dm.render("xsum", Generation("x", ()))
    with pytest.raises(ConfigError, match="need --data.temperature > 0"):
        PromptedDataModule(tasks="humaneval", samples=5).sampling("humaneval")
    with pytest.raises(ConfigError, match=r"--data.top_p: got 0.0; expected a float in \(0, 1\]"):
        PromptedDataModule(tasks="humaneval", top_p=0.0)
    with pytest.raises(ConfigError, match="valid: auto, on, off"):
        PromptedDataModule(tasks="xsum", chat_template="yes")
