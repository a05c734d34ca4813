"""Ranges of numeric options, declared once, on the options themselves (jsonargparse.typing's restricted
types in `__init__` signatures and config dataclasses): jsonargparse refuses a value outside them while
parsing any command, --help shows them, and tests/test_option_ranges.py walks them.

jsonargparse registers each range once, globally, under one name, and refuses a second name for the same
range: `number_range` returns the type already registered, so models, data and experiment configs can
each declare the ranges they need without knowing who declared them first.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Optional, Union

import yaml
from jsonargparse import typing as jtyping
from jsonargparse.typing import restricted_number_type

from lightning_bench.errors import ConfigError


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


# ---- what every command's jsonargparse parser shares (experiments/core/config.py, data/options.py) -------
def option_kind(hint) -> Optional[type]:
    """The item type of a list option, bool for a boolean one, None otherwise (Optional unwrapped): the
    options that take space-separated values (`--lengths 4096 8192`) or stand bare (`--rerotate`)."""
    if typing.get_origin(hint) is Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else None
    if typing.get_origin(hint) is list:
        return (typing.get_args(hint) or (str,))[0]
    return bool if hint is bool else None


def read_config_file(command: str, path) -> dict:
    """A --config file's mapping; one line naming the file if it is unreadable, not YAML, empty or no
    mapping (jsonargparse parses the text as `<unicode string>` and says only "Unexpected config")."""
    expected = f"expected a mapping of {command}'s options (`key: value` lines; see --print_config)"
    try:
        loaded = yaml.safe_load(Path(path).read_text())
    except OSError as err:
        raise ConfigError(f"{command}: --config {path}: cannot read it ({err.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{command}: --config {path}: not UTF-8 text; {expected}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(f"{command}: --config {path}: not valid YAML: {where}"
                          f"{getattr(err, 'problem', None) or err}") from None
    if loaded is None:
        raise ConfigError(f"{command}: --config {path} is empty; {expected}")
    if not isinstance(loaded, dict):
        raise ConfigError(f"{command}: --config {path} holds a {type(loaded).__name__}; {expected}")
    return loaded


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def check_name(what: str, name: str) -> str:
    """Names that become file or folder names: letters, digits, '_', '-', '.' (not first)."""
    if not _NAME.match(str(name)):
        raise ConfigError(f"{what} {name!r} must be letters, digits, '_', '-' or '.'")
    return str(name)
