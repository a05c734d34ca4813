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

PARSER_MODE = "omegaconf"  # `${oc.env:VAR,default}` in presets; otherwise plain YAML
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class _OneLineParser(ArgumentParser):
    """jsonargparse reports a usage block and an indented explanation; the user gets one line."""

    argv: list[str] = []

    def error(self, message: str, ex: Optional[Exception] = None):
        text = parser_error_line(message, self.argv)  # the flag, the value given, what is allowed
        if "not an option here" in text or "unrecognized arguments" in text:  # say what is
            options = sorted(a.option_strings[0] for a in self._actions if a.option_strings and
                             "." not in a.option_strings[0] and a.option_strings[0] not in ("-h", "--help"))
            text += f"; valid: {', '.join(options)}"
        elif "import path" in text:  # `class_path: hf`: the aliases are command-line shorthands of the fit CLI
            from lightning_bench.models import MODEL_ALIASES

            text += f"; give a class path, e.g. {', '.join(sorted(MODEL_ALIASES.values()))}"
        raise ConfigError(f"{self.prog.split()[-1]}: {text}") from ex


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
    parser.argv = list(argv)  # error messages name the flags as typed
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
    config = config_class(**{f.name: init[f.name] for f in dataclasses.fields(config_class) if f.init})
    return Parsed(config, resolved, files)


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


def check_at_least(option: str, value, minimum: int) -> None:
    if value is not None and value < minimum:
        raise ConfigError(f"{option} must be >= {minimum}, got {value}")
