"""The ranges of the data options, declared once: on each DataModule's `__init__` signature (and on the
options of the data commands, through `value_type`), and the one-line parser of those commands.

jsonargparse reads them while it parses a command, so `--data.eval_batch_size 0` is refused before any
work, and `--help` names them. `checked_arguments` reads the same signature for a DataModule built in
Python (a sweep's `datasets:` entries, export_documents) and returns plain ints and floats: an instance
of a restricted type kept in the hyperparameters would make the checkpoint unloadable with
weights_only=True.
"""

from __future__ import annotations

import argparse
import inspect
import typing
from typing import Union

from jsonargparse.typing import (ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, OpenUnitInterval, PositiveInt,
                                 restricted_string_type)

from lightning_bench.errors import ConfigError, deprecated, describe_range
from lightning_bench.options import ContextTokens, Fraction, OpenClosedUnitInterval, number_range

__all__ = ["ClosedUnitInterval", "ContextTokens", "DatasetName", "Fraction", "NonNegativeFloat", "NonNegativeInt",
           "OneLineParser", "OpenClosedUnitInterval", "OpenUnitInterval", "Percent", "PositiveInt", "Renamed",
           "checked_arguments", "value_type"]

Percent = number_range("Percent", float, [(">=", 0.0), ("<=", 100.0)])
# a record's and its files' name: safe in a path, short enough to leave room for the rest of the file name
DatasetName = restricted_string_type("DatasetName", r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$",
                                     docstring="a name of at most 100 letters, digits, '_', '-', '.' (not first)")


def restricted(hint) -> type | None:
    """The restricted type (jsonargparse.typing) an option is declared with, Optional unwrapped; else None."""
    options = typing.get_args(hint) if typing.get_origin(hint) is Union else (hint,)
    return next((t for t in options if isinstance(t, type) and hasattr(t, "_validation_fn")), None)


def shown(value) -> str:
    """A value as an error line quotes it: a 400-character name is not repeated whole."""
    text = repr(value)
    if len(text) <= 60:
        return text
    return f"{text[:40]}...{text[-1] if isinstance(value, str) else ''} ({len(str(value))} characters)"


def check_value(option: str, kind: type | None, value):
    """`value` as a plain int/float/str if it lies in `kind`'s range (None passes: the option's default)."""
    if kind is None or value is None:
        return value
    try:
        return kind._type(kind(value))
    except (TypeError, ValueError):
        raise ConfigError(f"{option}: got {shown(value)}; expected {describe_range(kind)}") from None


def checked_arguments(function, arguments: dict, prefix: str = "--data.") -> dict:
    """The parameters of `function` (an `__init__`) taken from `arguments` (its `locals()`), each checked
    against the range its annotation declares and made a plain value."""
    hints = typing.get_type_hints(function)
    names = [n for n, p in inspect.signature(function).parameters.items() if n != "self"
             and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return {name: check_value(prefix + name, restricted(hints.get(name)), arguments[name]) for name in names}


def value_type(kind: type):
    """An argparse `type=` for a restricted type: the value as a plain int/float, or the option's one line."""
    def parse(text: str):
        try:
            return kind._type(kind(text))
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"got {shown(text)}; expected {describe_range(kind)}") from None

    parse.__name__ = kind.__name__
    return parse


class OneLineParser(argparse.ArgumentParser):
    """argparse for the data commands (generate_ruler, infinitebench_generate, export_documents): an error is
    one `lightning_bench: error: COMMAND: ...` line (a ConfigError, printed by cli.main), not a usage block."""

    def error(self, message: str):
        hint = " (see --help)" if message.startswith("unrecognized arguments") else ""
        raise ConfigError(f"{self.prog.split()[-1]}: {message}{hint}")


class Renamed(argparse.Action):
    """An option whose first spelling is the current one (`--data_dir`) and whose others are deprecated
    (`--out`): they still work, with one `lightning_bench: note:` line each time one is given."""

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string not in (None, self.option_strings[0]):
            deprecated(option_string, self.option_strings[0])
        setattr(namespace, self.dest, values)
