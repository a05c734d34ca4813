"""Ranges of numeric options, declared once, on the options themselves (jsonargparse.typing's restricted
types in `__init__` signatures and config dataclasses): jsonargparse refuses a value outside them while
parsing any command, --help shows them, and tests/test_option_ranges.py walks them.

jsonargparse registers each range once, globally, under one name, and refuses a second name for the same
range: `number_range` returns the type already registered, so models, data and experiment configs can
each declare the ranges they need without knowing who declared them first.
"""

from __future__ import annotations

from jsonargparse import typing as jtyping
from jsonargparse.typing import restricted_number_type


def number_range(name: str, base: type, restrictions: list[tuple], docstring: str | None = None) -> type:
    """jsonargparse's restricted type for `restrictions` (e.g. [(">=", 0.0), ("<", 1.0)]), or the one
    already registered for the same range."""
    key = (tuple(sorted(restrictions)), base, "and")
    return jtyping.registered_types.get(key) or restricted_number_type(name, base, restrictions, docstring=docstring)


# The ranges several packages use (each package's own ones sit beside its options).
Fraction = number_range("Fraction", float, [(">=", 0.0), ("<", 1.0)])  # a share evicted or held out: all leaves nothing
OpenClosedUnitInterval = number_range("OpenClosedUnitInterval", float, [(">", 0.0), ("<=", 1.0)])  # top_p
ContextTokens = number_range("ContextTokens", int, [(">=", 8)])  # room for a prompt's template and an answer
# numpy's and Lightning's seed range (seed_everything replaces a seed outside it by a random one)
Seed = number_range("Seed", int, [(">=", 0), ("<=", 2**32 - 1)])
