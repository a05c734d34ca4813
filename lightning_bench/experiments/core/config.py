"""One configuration system for every experiment command, the one the fit/test CLI uses: a typed
dataclass (fields with docstrings, `__post_init__` checks) parsed by jsonargparse. So every command
has `--config FILE`, `--print_config`, `--help` and dotted overrides (`--methods '[dense, h2o]'`,
`--model.pretrained DIR`, `--streaming.chunk_size 8`, `--method_params.h2o.recent_ratio 0.2`).

Environment defaults are jsonargparse's omegaconf interpolation in the YAML:
`pretrained: ${oc.env:LB_SMOLLM2_DIR,${oc.env:HOME}/.cache/lightning_bench/smollm2-135m-instruct}`.

The argparse spellings of the earlier commands are the parser's own (no argument list is rewritten):
hyphenated names (`--context-length`) are aliases of their options, a list option takes space-separated
values (`--methods dense h2o`, `--seeds 1 2 3`) and a boolean one may stand bare (`--rerotate`).
Deprecated options (docs/experiments.md's table) are a config class's `DEPRECATED` table {old: Renamed(new)}:
each old name is an option of the parser (so a YAML key too) but no field; after parsing, each one given is
moved to its new field with one `lightning_bench: note:` line on stderr.

Every error is one `lightning_bench: error: COMMAND: ...` line (a ConfigError, printed by cli.main).

Ranges are declared once, on the option, as restricted types (`ratios: list[Fraction]`, docs/experiments.md):
jsonargparse refuses a value outside one while parsing; `__post_init__` keeps the checks between fields.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import typing
from pathlib import Path
from typing import Optional

import yaml
from jsonargparse import ActionConfigFile, ArgumentParser

from lightning_bench.errors import PROG, ConfigError, deprecated as say_deprecated, parser_error_line
from lightning_bench.options import ContextTokens, Fraction, OpenClosedUnitInterval, Seed  # noqa: F401 - re-exported
from lightning_bench.options import check_name, option_kind, read_config_file  # noqa: F401 - re-exported
PARSER_MODE = "omegaconf"  # `${oc.env:VAR,default}` in presets; otherwise plain YAML
# a nested config's own error line, quoted among the Union's errors: `Parser key "sparsity_sweep": ... - --x: ...`
_NESTED = re.compile(r'^Parser key "([^"]+)":[\s\S]*?^\s*- --([\w.]+): (.*)$', re.M)


class _OneLineParser(ArgumentParser):
    """jsonargparse reports a usage block and an indented explanation; the user gets one line."""

    argv: list[str] = []
    command: Optional[str] = None  # set on a command's own parser; jsonargparse also builds nested ones
    spaced: dict[str, type] = {}  # dest -> list item type (list options) or bool (flags that may stand bare)

    def _get_nargs_pattern(self, action):
        """A list option consumes every value up to the next option, a boolean one none or one."""
        kind = self.spaced.get(action.dest)
        if kind is None or not action.option_strings:
            return super()._get_nargs_pattern(action)
        return "(A?)" if kind is bool else "(A[A-]*)"  # argparse's `?` and `+` patterns of an option

    def _get_values(self, action, arg_strings):
        """`--seeds 1 2 3` is `--seeds [1, 2, 3]`; a bare `--rerotate` is `--rerotate true`."""
        kind = self.spaced.get(action.dest)
        if kind is bool and not arg_strings:
            arg_strings = ["true"]
        elif kind not in (None, bool) and not (len(arg_strings) == 1 and arg_strings[0].lstrip().startswith("[")):
            arg_strings = [json.dumps([v if kind is str else yaml.safe_load(v) for v in arg_strings])]
        return super()._get_values(action, arg_strings)

    def error(self, message: str, ex: Optional[Exception] = None):
        if self.command is None:  # the parser of a nested config (Optional[SparsitySweep]): the line
            raise ConfigError(parser_error_line(message)) from ex  # goes into its parent's message, unprefixed
        nested = _NESTED.search(str(message))
        text = (f"--{nested.group(1)}.{nested.group(2)}: {nested.group(3)}" if nested
                else parser_error_line(message, self.argv))  # the flag, the value given, what is allowed
        if "not an option here" in text or "unrecognized arguments" in text:  # say what is
            options = sorted(a.option_strings[0] for a in self._actions if a.option_strings and
                             "." not in a.option_strings[0] and a.option_strings[0] not in ("-h", "--help"))
            text += f"; valid: {', '.join(options)}"
        elif "import path" in text:  # `class_path: hf`: the aliases are command-line shorthands of the fit CLI
            from lightning_bench.models import MODEL_ALIASES

            text += f"; give a class path, e.g. {', '.join(sorted(MODEL_ALIASES.values()))}"
        raise ConfigError(f"{self.command}: {text}") from ex


@dataclasses.dataclass
class Parsed:
    config: object  # the command's config dataclass, checked by its __post_init__
    resolved: dict  # the whole config as plain data, defaults included: what records store
    config_files: list[Path]  # the --config files given, in order


def parse_command(command: str, config_class: type, argv: list[str], description: str) -> Parsed:
    """Parse `argv` (config files, then overrides, as jsonargparse orders them) into `config_class`."""
    parser = _OneLineParser(prog=f"{PROG} {command}", description=description, parser_mode=PARSER_MODE,
                            exit_on_error=False)
    parser.argv, parser.command = list(argv), command  # error messages name the flags as typed
    for path in _config_files(argv):
        read_config_file(command, path)
    parser.add_argument("--config", action=ActionConfigFile, help="a YAML preset of this command's options")
    parser.add_class_arguments(config_class, nested_key=None, fail_untyped=True, sub_configs=True)
    deprecated = getattr(config_class, "DEPRECATED", {})
    hints = typing.get_type_hints(config_class)
    hints.update({old: Optional[renamed.type or hints[renamed.new]] for old, renamed in deprecated.items()})
    for old, renamed in deprecated.items():  # an option (and YAML key) of its own, moved after parsing
        parser.add_argument(f"--{old}", type=hints[old], default=None,
                            help=f"deprecated: use --{renamed.new}{renamed.hint}")
    _add_spellings(parser, config_class, hints)
    try:
        namespace = parser.parse_args(list(argv))
    except Exception as err:  # noqa: BLE001 - omegaconf's interpolation errors pass through jsonargparse
        if type(err).__module__.split(".")[0] != "omegaconf":
            raise
        where = getattr(err, "full_key", None) or "the config"
        reason = str(err).splitlines()[0].removeprefix("KeyError raised while resolving interpolation: ")
        raise ConfigError(f"{command}: {where}: {reason.strip(chr(34))} (set it, give a default as "
                          "${oc.env:VAR,default}, or override the option on the command line)") from err
    _move_deprecated(parser, namespace, deprecated, argv)
    _merge_nested_items(namespace, argv, hints)
    files = [Path(str(f)) for f in (namespace.pop("config", None) or []) if f is not None]
    resolved = json.loads(json.dumps(namespace.as_dict(), default=str))  # plain data: lists, not tuples
    # records name the current fields, and not how the grid ran (runner.Execution): the same however it ran
    unrecorded = {*deprecated, *getattr(config_class, "EXECUTION_OPTIONS", ())}
    resolved = {k: v for k, v in resolved.items() if k not in unrecorded}
    init = parser.instantiate(namespace)
    config = config_class(**{f.name: _plain(init[f.name]) for f in dataclasses.fields(config_class) if f.init})
    return Parsed(config, resolved, files)


def _merge_nested_items(namespace, argv: list[str], hints: dict) -> None:
    """`--method_params.cab.local_ratio 0.2 --method_params.cab.importance_ratio 0.6`: jsonargparse sets a
    dict-of-dicts field's inner dict whole for each item, so only the last item of a method survived,
    silently. Every such item typed after the last whole assignment of its dict is set into it, in order."""
    items: dict = {}
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        parts = name[2:].split(".") if name.startswith("--") else []
        if not parts or typing.get_origin(hints.get(parts[0])) is not dict or \
                typing.get_origin(typing.get_args(hints[parts[0]])[1]) is not dict:
            continue
        if len(parts) < 3:  # the whole field or one inner dict: earlier items are replaced on purpose
            items = {k: v for k, v in items.items() if k[0] != parts[0] or (len(parts) == 2 and k[1] != parts[1])}
        elif len(parts) == 3 and (eq or i + 1 < len(argv)):
            items[tuple(parts)] = value if eq else argv[i + 1]
    for (field_name, key, item), value in items.items():
        table = namespace.get(field_name) or {}
        table.setdefault(key, {})[item] = yaml.safe_load(value)
        namespace[field_name] = table


def _config_files(argv: list[str]) -> list[Path]:
    """The existing files given to --config (jsonargparse also takes a YAML string there)."""
    values = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--config"]
    values += [arg.split("=", 1)[1] for arg in argv if arg.startswith("--config=")]
    return [Path(v) for v in values if Path(v).is_file()]


def _plain(value):
    """Restricted ints and floats (jsonargparse.typing) as plain ones, in lists, dicts and nested configs:
    yaml.safe_dump and torch.load(weights_only=True) know only the plain types."""
    base = getattr(type(value), "_type", None)
    if base in (int, float) and isinstance(value, base) and type(value) is not base:
        return base(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            object.__setattr__(value, f.name, _plain(getattr(value, f.name)))
    return value


def _add_spellings(parser: _OneLineParser, config_class: type, hints: dict) -> None:
    """The argparse spellings as the parser's own: `--context-length` an alias of `--context_length`,
    space-separated list values, bare boolean flags, and `LEGACY_OPTIONS` (e.g. `--method-param`)."""
    parser.spaced = {name: option_kind(hint) for name, hint in hints.items() if option_kind(hint) is not None}
    for action in list(parser._actions):
        for option in list(action.option_strings):
            alias = option.replace("_", "-")
            if "." not in option and alias != option and alias not in parser._option_string_actions:
                action.option_strings.append(alias)
                parser._option_string_actions[alias] = action
    for options, action in getattr(config_class, "LEGACY_OPTIONS", {}).items():
        parser.add_argument(*options, action=action, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                            metavar=getattr(action, "metavar", None), help=action.__doc__)


@dataclasses.dataclass(frozen=True)
class Renamed:
    """A deprecated option: its value moves to `new` (through `convert`) after parsing, with one note."""

    new: str
    convert: Optional[typing.Callable] = None
    hint: str = ""  # what the note adds, e.g. how the old value maps
    type: object = None  # the old option's type where it is not the new one's (e.g. one seed for a list)


def _move_deprecated(parser, namespace, deprecated: dict[str, Renamed], argv) -> None:
    """Each deprecated field given (on the command line or in a YAML) goes to its new field: one note each.
    Given with the new field too, the command line wins over a --config file (as for any option: an old
    script's `--sparsity` over a preset's `ratios:`); both on the command line, or both in files, is one
    error line."""
    defaults = parser.get_defaults()
    typed = lambda name: any(a.split("=")[0] in (f"--{name}", f"--{name.replace('_', '-')}") for a in argv)
    for old, renamed in deprecated.items():
        value = namespace.get(old)
        if value is None:
            continue
        namespace[old] = None
        if namespace.get(renamed.new) != defaults.get(renamed.new) and typed(old) == typed(renamed.new):
            raise ConfigError(f"give --{renamed.new} or --{old}, not both")
        say_deprecated(f"--{old}", f"--{renamed.new}{renamed.hint}")
        if not typed(renamed.new):
            namespace[renamed.new] = renamed.convert(value) if renamed.convert else value


def check_unique(option: str, values: list, noun: str = "value") -> None:
    if len(set(map(str, values))) != len(values):
        raise ConfigError(f"{option} lists a {noun} twice: {' '.join(map(str, values))}")

