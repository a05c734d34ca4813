"""One configuration system for every experiment command, the one the fit/test CLI uses: a typed
dataclass (fields with docstrings, `__post_init__` checks) parsed by jsonargparse. So every command
has `--config FILE`, `--print_config`, `--help` and dotted overrides (`--methods '[dense, h2o]'`,
`--model.pretrained DIR`, `--streaming.chunk_size 8`, `--method_params.h2o.recent_ratio 0.2`).

Environment defaults are jsonargparse's omegaconf interpolation in the YAML:
`pretrained: ${oc.env:LB_SMOLLM2_DIR,${oc.env:HOME}/.cache/lightning_bench/smollm2-135m-instruct}`.

The argparse spellings of the earlier commands still parse (`normalize_argv`): hyphenated names
(`--context-length`), space-separated lists (`--methods dense h2o`, `--seeds 1 2 3`) and bare
boolean flags (`--rerotate`), so documented command lines keep working.

Every error is one `lightning_bench: error: COMMAND: ...` line (a ConfigError, printed by cli.main).

Ranges are declared once, on the option: a numeric field's annotation is a jsonargparse restricted type
(`interval: PositiveInt`, `sparsity: list[Fraction]`, `seeds: list[Seed]`), so jsonargparse refuses a
value outside it while parsing, `--help` shows it, and errors.parser_error_line names the flag and the
range (`--max_new_tokens: got '-1'; expected an int > 0`). Besides jsonargparse's own (PositiveInt,
NonNegativeInt, NonNegativeFloat, ...), the ranges below are made with lightning_bench.options.number_range,
which returns the type models or data already registered for the same range under the same name
(jsonargparse refuses a second name for one range). `__post_init__` keeps the checks between fields
(`--seeds` or `--num_runs`, a method's parameters, an empty list).
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path
from typing import Optional, Union

import yaml
from jsonargparse import ActionConfigFile, ArgumentParser

from lightning_bench.errors import PROG, ConfigError, parser_error_line
from lightning_bench.options import ContextTokens, Fraction, OpenClosedUnitInterval, Seed  # noqa: F401 - re-exported
PARSER_MODE = "omegaconf"  # `${oc.env:VAR,default}` in presets; otherwise plain YAML
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# a nested config's own error line, quoted among the Union's errors: `Parser key "sparsity_sweep": ... - --x: ...`
_NESTED = re.compile(r'^Parser key "([^"]+)":[\s\S]*?^\s*- --([\w.]+): (.*)$', re.M)


class _OneLineParser(ArgumentParser):
    """jsonargparse reports a usage block and an indented explanation; the user gets one line."""

    argv: list[str] = []
    command: Optional[str] = None  # set on a command's own parser; jsonargparse also builds nested ones

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


def parse_command(command: str, config_class: type, argv: list[str], description: str,
                  renames: Optional[dict[str, str]] = None) -> Parsed:
    """Parse `argv` (config files, then overrides, as jsonargparse orders them) into `config_class`."""
    parser = _OneLineParser(prog=f"{PROG} {command}", description=description, parser_mode=PARSER_MODE,
                            exit_on_error=False)
    parser.argv, parser.command = list(argv), command  # error messages name the flags as typed
    for path in _config_files(argv):
        check_config_file(command, path)
    parser.add_argument("--config", action=ActionConfigFile, help="a YAML preset of this command's options")
    parser.add_class_arguments(config_class, nested_key=None, fail_untyped=True, sub_configs=True)
    try:
        namespace = parser.parse_args(normalize_argv(argv, config_class, renames or {}))
    except Exception as err:  # noqa: BLE001 - omegaconf's interpolation errors pass through jsonargparse
        if type(err).__module__.split(".")[0] != "omegaconf":
            raise
        where = getattr(err, "full_key", None) or "the config"
        reason = str(err).splitlines()[0].removeprefix("KeyError raised while resolving interpolation: ")
        raise ConfigError(f"{command}: {where}: {reason.strip(chr(34))} (set it, give a default as "
                          "${oc.env:VAR,default}, or override the option on the command line)") from err
    files = [Path(str(f)) for f in (namespace.pop("config", None) or []) if f is not None]
    resolved = json.loads(json.dumps(namespace.as_dict(), default=str))  # plain data: lists, not tuples
    init = parser.instantiate(namespace)
    config = config_class(**{f.name: _plain(init[f.name]) for f in dataclasses.fields(config_class) if f.init})
    return Parsed(config, resolved, files)


def _config_files(argv: list[str]) -> list[Path]:
    """The existing files given to --config (jsonargparse also takes a YAML string there)."""
    values = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--config"]
    values += [arg.split("=", 1)[1] for arg in argv if arg.startswith("--config=")]
    return [Path(v) for v in values if Path(v).is_file()]


def check_config_file(command: str, path: Path) -> None:
    """One line naming the file: jsonargparse parses a config file's text as `<unicode string>` and says
    only "Unexpected config" for an empty file or a list."""
    expected = f"expected a mapping of {command}'s options (`key: value` lines; see --print_config)"
    try:
        loaded = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ConfigError(f"{command}: --config {path}: cannot read it ({err.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{command}: --config {path}: not UTF-8 text; {expected}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(f"{command}: --config {path}: not valid YAML: {where}{getattr(err, 'problem', None) or err}"
                          ) from None
    if loaded is None:
        raise ConfigError(f"{command}: --config {path} is empty; {expected}")
    if not isinstance(loaded, dict):
        raise ConfigError(f"{command}: --config {path} holds a {type(loaded).__name__}; {expected}")


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


def _kind(hint) -> tuple[Optional[str], Optional[type]]:
    """("list", item type), ("bool", None) or (None, None) for a field's type hint (Optional unwrapped)."""
    if typing.get_origin(hint) is Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else None
    if typing.get_origin(hint) is list:
        return "list", (typing.get_args(hint) or (str,))[0]
    return ("bool", None) if hint is bool else (None, None)


def normalize_argv(argv: list[str], config_class: type, renames: dict[str, str]) -> list[str]:
    """Rewrite argparse-style options into jsonargparse's: `--context-length 8 16` ->
    `--context_length [8, 16]`, `--rerotate` -> `--rerotate true`; `renames` maps old option names
    (without `--`) to fields. Anything else is passed through untouched."""
    hints = typing.get_type_hints(config_class)
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("--") or arg == "--":
            out.append(arg)
            continue
        name, eq, value = arg[2:].partition("=")
        name = renames.get(name, name)
        if "." not in name:
            name = name.replace("-", "_")
        kind, item = _kind(hints.get(name))
        if eq or kind is None:
            out.append(f"--{name}" + (f"={value}" if eq else ""))
            continue
        values = []
        while i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
        if kind == "bool" and not values:
            values = ["true"]
        elif kind == "list" and values and not (len(values) == 1 and values[0].lstrip().startswith("[")):
            values = [json.dumps([v if item is str else yaml.safe_load(v) for v in values])]
        out += [f"--{name}", *values]
    return out


def check_unique(option: str, values: list, noun: str = "value") -> None:
    if len(set(map(str, values))) != len(values):
        raise ConfigError(f"{option} lists a {noun} twice: {' '.join(map(str, values))}")


def check_name(what: str, name: str) -> str:
    """Names that become file or folder names: letters, digits, '_', '-', '.' (not first)."""
    if not _NAME.match(str(name)):
        raise ConfigError(f"{what} {name!r} must be letters, digits, '_', '-' or '.'")
    return str(name)
