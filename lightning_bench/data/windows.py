"""Scoring windows for the two perplexity protocols (data preparation: data/lm.py builds its evaluation
batches from them).

A window is (input_ids, labels): `labels[t]` is the token the model must predict after reading
`input_ids[: t + 1]`, or -100 where position t is context only. Every protocol here scores every
token of the text exactly once; `tests/test_perplexity_protocols.py` checks it.

Token-level ("token_windows"): the split is one token stream, prefixed with one separator token so
that the first real token is scored too. Windows of `window` inputs start every `stride` tokens;
each window scores only the targets the previous window did not reach, so with stride < window every
scored token sees at least `window - stride` tokens of context (the HF "sliding window" recipe).

Document-level ("document_rolling"): lm-evaluation-harness's `loglikelihood_rolling`. Each document
is scored alone, prefixed with the separator token; the first window predicts the first `window`
tokens, every later window is full length and predicts the next (at most) `window - context + 1`
tokens, so every token is scored once with as much in-document context as fits. With context = 1
(lm-eval's default) this is `get_rolling_token_windows(..., context_len=1)` + `make_disjoint_window`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

from lightning_bench.models.token_nll import IGNORE_INDEX  # the label the model's loss skips


@dataclass(frozen=True)
class Window:
    input_ids: list[int]
    labels: list[int]  # same length as input_ids; IGNORE_INDEX where not scored
    doc_index: int = 0

    @property
    def n_scored(self) -> int:
        return sum(label != IGNORE_INDEX for label in self.labels)


def token_windows(tokens: Sequence[int], prefix_token: int, window: int, stride: int) -> Iterator[Window]:
    """Fixed windows over one stream; targets are tokens[0..n-1], each scored exactly once."""
    if window < 1 or not 1 <= stride <= window:
        raise ValueError(f"need window >= 1 and 1 <= stride <= window, got window={window} stride={stride}")
    stream = [prefix_token, *tokens]  # stream[i] predicts stream[i + 1] == tokens[i]
    n_targets = len(tokens)
    scored_until = 0  # targets [0, scored_until) are done
    begin = 0
    while scored_until < n_targets:
        end = min(begin + window, n_targets)  # inputs stream[begin:end] predict tokens[begin:end]
        inputs = stream[begin:end]
        targets = list(tokens[begin:end])
        n_context = scored_until - begin  # already-scored targets in this window are context only
        labels = [IGNORE_INDEX] * n_context + targets[n_context:]
        yield Window(inputs, labels)
        scored_until = end
        begin += stride


def rolling_windows(tokens: Sequence[int], prefix_token: int, window: int, context: int = 1,
                    doc_index: int = 0) -> Iterator[Window]:
    """lm-eval's rolling loglikelihood windows for one document (see module docstring)."""
    if not 1 <= context <= window:
        raise ValueError(f"need 1 <= context <= window, got context={context} window={window}")
    n = len(tokens)
    if n == 0:
        return
    first = min(window, n)
    yield Window([prefix_token, *tokens[: first - 1]], list(tokens[:first]), doc_index)
    predicted = first
    per_window = window - context + 1
    while predicted < n:
        n_pred = min(n - predicted, per_window)
        end = predicted + n_pred
        # after the first window `end > window`, so the inputs are the full `window` tokens before `end`
        inputs = list(tokens[end - window - 1: end - 1])
        labels = [IGNORE_INDEX] * (len(inputs) - n_pred) + list(tokens[predicted:end])
        yield Window(inputs, labels, doc_index)
        predicted = end
