"""Choosing the next token and deciding when to stop: ONE rule for prompted generation
(evaluation/request_scoring.py) and for the KV engine's schedules (task_decode.py), and one seed rule.

Greedy (temperature 0) or nucleus sampling (Holtzman et al. 2020) from a torch.Generator; a generation
stops at a token of `stop_ids` (kept in the tokens), once the decoded new text holds one of
`stop_strings`, or after `max_new_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from lightning_bench.errors import ConfigError


def draw_seed(seed: int, index: int, draw: int) -> int:
    """The seed of one sampled completion: the run's seed, the example (request) index and the draw, so a
    rerun or a resumed run draws the same whatever else ran before."""
    return seed * 1_000_003 + index * 1009 + draw


def draw_generator(seed: int, index: int, draw: int, temperature: float) -> Optional[torch.Generator]:
    """A CPU generator seeded by `draw_seed`, or None for greedy decoding (which draws nothing)."""
    return None if temperature <= 0 else torch.Generator(device="cpu").manual_seed(draw_seed(seed, index, draw))


def sample_token(logits: torch.Tensor, temperature: float, top_p: float, gen) -> int:
    """One draw from softmax(logits / temperature) restricted to the smallest set of tokens whose
    probability reaches top_p (nucleus sampling; the token that crosses top_p is kept)."""
    probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)
    if top_p < 1.0:
        ordered, order = probs.sort(descending=True)
        before = ordered.cumsum(0) - ordered  # mass of the tokens ranked above each one
        ordered[before >= top_p] = 0.0
        probs = torch.zeros_like(probs).scatter_(0, order, ordered)
    return int(torch.multinomial(probs, 1, generator=gen))


@dataclass
class Decoding:
    """How one completion is drawn and where it ends (module docstring)."""

    max_new_tokens: int = 32
    temperature: float = 0.0
    top_p: float = 1.0
    generator: Optional[torch.Generator] = None
    stop_ids: frozenset = frozenset()
    stop_strings: tuple = ()
    tokenizer: object = None

    def __post_init__(self):
        self.stop_ids = frozenset(int(t) for t in self.stop_ids)

    def check(self) -> "Decoding":
        """One-line ConfigErrors for settings no decoding can follow."""
        n = self.max_new_tokens
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"max_new_tokens must be a positive integer, got {n!r}")
        if not self.temperature >= 0.0:
            raise ConfigError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if isinstance(self.stop_strings, str):
            raise ConfigError(f"stop_strings must be a sequence of strings, got the string {self.stop_strings!r}")
        if self.stop_strings and self.tokenizer is None:
            raise ConfigError("stop_strings need the tokenizer (to decode the new tokens); pass tokenizer=")
        return self

    def pick(self, logits: torch.Tensor) -> int:
        """The next token from one row of logits (V,)."""
        row = logits.float()
        return int(row.argmax()) if self.temperature <= 0 else sample_token(row, self.temperature, self.top_p,
                                                                             self.generator)

    def stop_reason(self, tokens: list[int]) -> Optional[str]:
        """"stop_token", "stop_string", or None while the generation `tokens` goes on."""
        if tokens[-1] in self.stop_ids:
            return "stop_token"
        if self.stop_strings and any(s in self.tokenizer.decode(tokens) for s in self.stop_strings):
            return "stop_string"
        return None

    def finished(self, tokens: list[int]) -> bool:
        return self.stop_reason(tokens) is not None or len(tokens) >= self.max_new_tokens
