"""The ranges of the data options, declared once: on each DataModule's `__init__` signature and on the
config dataclasses of the data commands (export_documents here; the benchmarks' generators generate_ruler,
infinitebench_generate, counting_stars_generate in their task folders), and the
jsonargparse parser of those commands (`parse_command`).

jsonargparse reads them while it parses a command, so `--data.eval_batch_size 0` is refused before any
work, and `--help` names them. `checked_arguments` reads the same signature for a DataModule built in
Python (a sweep's `datasets:` entries, export_documents) and returns plain ints and floats: an instance
of a restricted type kept in the hyperparameters would make the checkpoint unloadable with
weights_only=True.

The data commands are configured as every other command is (the experiment commands' parser,
experiments/core/config.py, is a layer above data, so this is its counterpart here): a typed dataclass read
by jsonargparse, hence `--config FILE` (YAML, the same option names), `--print_config` and `--help`; a list
option takes space-separated values (`--lengths 4096 8192`) as the argparse commands did; every error is one
`lightning_bench: error: COMMAND: ...` line (a ConfigError, printed by cli.main).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import typing
from typing import Optional, Sequence, Union

import yaml
from jsonargparse import ActionConfigFile, ArgumentParser, DefaultHelpFormatter, Namespace
from jsonargparse._actions import _ActionConfigLoad  # the action of a group's own option

from jsonargparse.typing import (ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, OpenUnitInterval, PositiveInt,
                                 restricted_string_type)

from lightning_bench.errors import PROG, ConfigError, deprecated, describe_range, find_config_error, parser_error_line
from lightning_bench.options import ContextTokens, Fraction, OpenClosedUnitInterval, number_range, option_kind, read_config_file

__all__ = ["ClosedUnitInterval", "CommandParser", "ConfigFile", "ContextTokens", "DatasetName", "Fraction",
           "NonNegativeFloat", "NonNegativeInt", "OpenClosedUnitInterval", "OpenUnitInterval", "Percent", "PositiveInt",
           "checked_arguments", "parse_command", "read_config_file"]

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


# ---- the data commands' parser ---------------------------------------------------------------------------
class _RawDescription(argparse.RawDescriptionHelpFormatter, DefaultHelpFormatter):
    """--help keeps the command's docstring as written (its examples and lists)."""


class CommandParser(ArgumentParser):
    """jsonargparse for a data command: its usage block and indented explanation become one
    `COMMAND: --option: ...` line (a ConfigError); a list option consumes every value up to the next option."""

    command: str = ""
    argv: list[str] = []
    lists: dict[str, type] = {}  # dest -> item type, of the list options

    def _get_nargs_pattern(self, action):
        if action.dest in self.lists and action.option_strings:
            return "(A[A-]*)"  # argparse's `+` pattern of an option
        return super()._get_nargs_pattern(action)

    def _get_values(self, action, arg_strings):
        """`--lengths 4096 8192` is `--lengths [4096, 8192]` (one value in brackets is read as YAML, as is)."""
        kind = self.lists.get(action.dest)
        if kind is not None and not (len(arg_strings) == 1 and arg_strings[0].lstrip().startswith("[")):
            arg_strings = [json.dumps([v if kind is str else yaml.safe_load(v) for v in arg_strings])]
        return super()._get_values(action, arg_strings)

    def error(self, message: str, ex: Optional[Exception] = None):
        inner = find_config_error(ex)
        if inner is not None:  # already one line (a --config file's, from this parser)
            raise inner
        missing = re.search(r'Key "([^"]+)" is required|the following arguments are required: (.*)', str(message))
        if missing:  # jsonargparse names the keys: say the flags
            names = (missing.group(1) or missing.group(2)).split(", ")
            text = f"{', '.join(map(self._flag, names))} {'is' if len(names) == 1 else 'are'} required " \
                   "(on the command line or in --config)"
        else:
            text = parser_error_line(message, self.argv)
        if "not an option here" in text or "unrecognized arguments" in text:  # say what is
            options = sorted(_long(a) for a in self._actions if a.option_strings and _long(a) != "--help"
                             and not getattr(a, "old", False) and a.help != argparse.SUPPRESS)
            text += f"; valid: {', '.join(options)}"
        raise ConfigError(f"{self.command}: {text}") from ex

    def _flag(self, dest: str) -> str:
        return next((_long(a) for a in self._actions if a.dest == dest and a.option_strings), f"--{dest}")


def _long(action) -> str:
    """An option's long name (not jsonargparse's `--lengths+`, which appends to a list)."""
    return next((o for o in action.option_strings if o.startswith("--") and not o.endswith("+")),
                action.option_strings[0])


class ConfigFile(ActionConfigFile):
    """a YAML file of this command's options (the names of the flags, as --print_config writes them); the
    options given after it override it"""

    def __call__(self, parser, cfg, values, option_string=None):
        options = self.options(parser.command, str(values))
        try:
            self.apply_config(parser, cfg, self.dest, yaml.safe_dump(options))  # the checked mapping, as YAML
        except (TypeError, ValueError) as err:  # a value in the file (jsonargparse wraps the line): say which file
            inner, prefix = find_config_error(err), f"{parser.command}: "
            if inner is None:
                raise
            raise ConfigError(f"{prefix}--config {values}: {str(inner).removeprefix(prefix)}") from None

    @staticmethod
    def options(command: str, path: str) -> dict:
        """The file read into a mapping of the command's options (a subclass may read another layout)."""
        return read_config_file(command, path)


class Spelling(argparse.Action):
    """Another spelling of an option that jsonargparse cannot hold on the option itself (`--data` for
    `--data.source`, where `data` is a group) or a deprecated one (`--out` for `--data_dir`, with one
    `lightning_bench: note:` line each time): it sets that option as given. No key of its own: --print_config
    writes the option's name."""

    new: str = ""
    old: bool = False  # deprecated

    def __call__(self, parser, namespace, values, option_string=None):
        if self.old:
            deprecated(option_string, self.new)
        parser._option_string_actions[self.new](parser, namespace, values, self.new)


def _plain(value):
    """Restricted ints and floats (jsonargparse.typing) as plain ones, in lists and dicts too: what rows and
    manifests record."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (dict, Namespace)):
        return {k: _plain(v) for k, v in (value.as_dict() if isinstance(value, Namespace) else value).items()}
    base = getattr(type(value), "_type", None)
    return base(value) if base in (int, float) and isinstance(value, base) else value


def _field_help(parser: ArgumentParser, config_class: type) -> None:
    """Each option's help is its field's docstring (jsonargparse reads attribute docstrings only under a
    global setting, which would change every other command's parsing too)."""
    import docstring_parser  # jsonargparse[signatures]'s

    docs = {p.arg_name: p.description for p in docstring_parser.parse_from_object(config_class).params}
    for action in parser._actions:
        if docs.get(action.dest) and not action.help:
            action.help = docs[action.dest]


class GroupShorthand(_ActionConfigLoad):
    """jsonargparse's option of a group (`--data`, which loads the group's options from a YAML mapping), which
    reads any other value as one of the group's options: `--data ptb` is `--data.source ptb` (even where a
    file is called ptb)."""

    option: str = ""

    def __call__(self, parser, cfg, values, option_string=None):
        try:
            mapping = isinstance(yaml.safe_load(values), dict)
        except yaml.YAMLError:
            mapping = False
        if not mapping:
            return parser._option_string_actions[self.option](parser, cfg, values, self.option)
        return super().__call__(parser, cfg, values, option_string)


def _add_spelling(parser: ArgumentParser, spelling: str, option: str, old: bool) -> None:
    group = parser._option_string_actions.get(spelling)
    if isinstance(group, _ActionConfigLoad):  # the option of a group: it stays one (`--data.path` is its key)
        group.__class__, group.option = GroupShorthand, option
        group.metavar, group.help = option.split(".")[-1].upper(), f"the same as {option}"
        return
    action = parser.add_argument(spelling, action=Spelling, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                                 metavar=option.lstrip("-").split(".")[-1].upper(),
                                 help=f"deprecated: use {option}" if old else f"the same as {option}")
    action.new, action.old = option, old


def parse_command(command: str, config_class: type, argv: Sequence[str], description: str, *,
                  spellings: Optional[dict[str, Sequence[str]]] = None,
                  old_spellings: Optional[dict[str, str]] = None, config_file: type = ConfigFile):
    """`argv` parsed into `config_class`, a dataclass whose fields are the options (with docstrings, for
    --help) and whose `__post_init__` checks them together. `spellings`: more names of an option
    ({"--output": ["-o"], "--data.source": ["--data"]}); `old_spellings`: deprecated ones
    ({"--out": "--data_dir"}); `config_file`: the --config action. A nested dataclass field (a group of
    options, `--data.path`) arrives as a dict."""
    parser = CommandParser(prog=f"{PROG} {command}", description=description, formatter_class=_RawDescription,
                           exit_on_error=False, parser_mode="yaml")
    parser.command, parser.argv = command, list(argv)
    spellings = dict(spellings or {})
    parser.add_argument(*spellings.pop("--config", ()), "--config", action=config_file,
                        help=" ".join((config_file.__doc__ or "").split()))
    parser.add_class_arguments(config_class, nested_key=None, fail_untyped=True)
    _field_help(parser, config_class)
    hints = typing.get_type_hints(config_class)
    parser.lists = {name: option_kind(hint) for name, hint in hints.items() if option_kind(hint) not in (None, bool)}
    for option, more in spellings.items():
        action = parser._option_string_actions[option]
        for spelling in more:
            if "." in option:  # an option of a group: its own action
                _add_spelling(parser, spelling, option, old=False)
                continue
            action.option_strings.insert(0 if not spelling.startswith("--") else len(action.option_strings),
                                         spelling)  # a short one first, as argparse lists `-o, --output`
            parser._option_string_actions[spelling] = action
    for old, new in (old_spellings or {}).items():
        _add_spelling(parser, old, new, old=True)
    namespace = parser.parse_args(list(argv))
    fields = {f.name for f in dataclasses.fields(config_class) if f.init}
    return config_class(**{name: _plain(namespace.get(name)) for name in fields if name in namespace})
