"""The two perplexity protocols: windows worked by hand, every token scored exactly once, and the
batched Lightning evaluation equal to a per-token loop that recomputes each token's context itself."""

import math
import re
from collections import Counter

import pytest
import torch

from lightning_bench.data.windows import IGNORE_INDEX, rolling_windows, token_windows
from lightning_bench.models.base import perplexity_metrics
from tests.helpers import quiet_trainer, tiny_data, tiny_model


def _targets(windows):
    return [label for w in windows for label in w.labels if label != IGNORE_INDEX]


def test_token_windows_worked_by_hand():
    tokens = list(range(10, 20))
    got = [(w.input_ids, w.labels) for w in token_windows(tokens, prefix_token=0, window=4, stride=2)]
    x = IGNORE_INDEX
    assert got == [
        ([0, 10, 11, 12], [10, 11, 12, 13]),
        ([11, 12, 13, 14], [x, x, 14, 15]),
        ([13, 14, 15, 16], [x, x, 16, 17]),
        ([15, 16, 17, 18], [x, x, 18, 19]),
    ]


def test_rolling_windows_worked_by_hand():
    # lm-evaluation-harness get_rolling_token_windows(range(10), prefix, max_seq_len=4, context_len=1)
    # followed by make_disjoint_window gives these three requests
    x = IGNORE_INDEX
    got = [(w.input_ids, w.labels) for w in rolling_windows(list(range(10)), prefix_token=-1, window=4)]
    assert got == [
        ([-1, 0, 1, 2], [0, 1, 2, 3]),
        ([3, 4, 5, 6], [4, 5, 6, 7]),
        ([5, 6, 7, 8], [x, x, 8, 9]),
    ]


@pytest.mark.parametrize("n", [1, 5, 16, 17, 100])
@pytest.mark.parametrize("window,stride", [(16, 16), (16, 1), (16, 5), (7, 3)])
def test_token_windows_score_every_token_once(n, window, stride):
    tokens = list(range(1000, 1000 + n))
    windows = list(token_windows(tokens, 0, window, stride))
    assert _targets(windows) == tokens  # each once, in order
    for w in windows:
        assert len(w.input_ids) == len(w.labels) <= window
        # label t is the token right after input t in the stream
        stream = [0, *tokens]
        for t, label in enumerate(w.labels):
            if label != IGNORE_INDEX:
                assert stream[stream.index(w.input_ids[t]) + 1] == label


@pytest.mark.parametrize("n", [1, 4, 5, 33])
@pytest.mark.parametrize("window,context", [(4, 1), (4, 4), (8, 3)])
def test_rolling_windows_score_every_token_once(n, window, context):
    tokens = list(range(500, 500 + n))
    windows = list(rolling_windows(tokens, -1, window, context))
    assert Counter(_targets(windows)) == Counter(tokens) and _targets(windows) == tokens
    assert all(len(w.input_ids) <= window for w in windows)
    # maximal context: after the first window every window is full length
    assert all(len(w.input_ids) == window for w in windows[1:])


def test_perplexity_units_from_one_sum():
    m = perplexity_metrics(nll_sum=100.0, n_tokens=50, units={"tokens": 50, "words": 40, "bytes": 200})
    assert m["ppl"] == pytest.approx(math.exp(2.0))
    assert m["bits_per_token"] == pytest.approx(2.0 / math.log(2))
    assert m["word_ppl"] == pytest.approx(math.exp(100 / 40))
    assert m["byte_ppl"] == pytest.approx(math.exp(0.5))
    assert m["bits_per_byte"] == pytest.approx(0.5 / math.log(2))
    partial = perplexity_metrics(nll_sum=100.0, n_tokens=49, units={"tokens": 50, "words": 40, "bytes": 200})
    assert partial["word_ppl"] is None  # units of a text that was not fully scored are not reported


def _token_logprob(model, context, target):
    with torch.no_grad():
        logits = model(torch.tensor([context]))[0, -1]
    return torch.log_softmax(logits.double(), -1)[target].item()


def _evaluate(dm, model):
    quiet_trainer().test(model, datamodule=dm, verbose=False)
    return model.last_eval["test"]


@pytest.mark.parametrize("stride", [16, 6])
def test_token_protocol_matches_per_token_loop(tiny_corpus, stride):
    torch.manual_seed(0)
    dm = tiny_data(tiny_corpus, eval_stride=stride, batch_size=3)
    dm.setup("test")
    model = tiny_model(dm.vocab_size).eval()
    result = _evaluate(dm, model)

    tok = dm.tokenizer
    tokens = tok.encode((tiny_corpus / "test.txt").read_text())
    stream = [tok.prefix_id, *tokens]
    window, nll = 16, 0.0
    for i, target in enumerate(tokens):
        # target i is scored by the first window (starting at k * stride) whose end passes i
        k = 0
        while k * stride + window <= i:
            k += 1
        nll -= _token_logprob(model, stream[k * stride: i + 1], target)
    assert result["scored_tokens"] == len(tokens)
    assert result["loss"] == pytest.approx(nll / len(tokens), rel=1e-5)
    text = (tiny_corpus / "test.txt").read_text()
    assert result["word_ppl"] == pytest.approx(math.exp(nll / len(re.split(r"\s+", text))), rel=1e-5)


def test_document_protocol_matches_per_token_loop(tiny_corpus):
    torch.manual_seed(0)
    window = 16
    dm = tiny_data(tiny_corpus, eval_protocol="document_rolling", seq_len=window, batch_size=5)
    dm.setup("test")
    model = tiny_model(dm.vocab_size).eval()
    result = _evaluate(dm, model)

    tok = dm.tokenizer
    docs = dm.splits["test"].documents
    assert len(docs) == 2  # two articles in the fixture
    nll, n_tokens, n_bytes = 0.0, 0, 0
    for doc in docs:
        tokens = tok.encode(doc)
        padded = [tok.prefix_id, *tokens]  # padded[j] is the token before tokens[j]
        for j, target in enumerate(tokens):
            if j < window:  # the first window: the document start (with the prefix token) is in view
                context = padded[: j + 1]
            else:  # later windows are blocks of `window` targets ending at e, reading from e - window - 1
                e = min(len(tokens), window * math.ceil((j + 1) / window))
                context = tokens[e - window - 1: j]
            nll -= _token_logprob(model, context, target)
        n_tokens += len(tokens)
        n_bytes += len(doc.encode())
    assert result["scored_tokens"] == n_tokens
    assert result["loss"] == pytest.approx(nll / n_tokens, rel=1e-5)
    assert result["bits_per_byte"] == pytest.approx(nll / n_bytes / math.log(2), rel=1e-5)
