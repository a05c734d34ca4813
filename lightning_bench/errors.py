"""The one exception type that the CLI turns into a single `lightning_bench: error: ...` line.

Raise `ConfigError` for anything the user can fix (a name, a path, a size); the message must say what
to change. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import ast
import errno
import operator
import re
import sys

PROG = "lightning_bench"


class ConfigError(ValueError):
    """A user-fixable problem with the command line, a config file or the input data."""


class MissingData(ConfigError):
    """The data asked for does not exist (no such split, file or hub access): callers may fall back,
    unlike for a file that exists but is wrong."""


class DivergedError(ConfigError):
    """A training loss or evaluation loss became NaN or infinite. The run stops (exit 2, one line) and the
    ResultsRecorder writes a record with `"status": "diverged"`: a NaN must never be summed away into a
    perplexity of 1. `quantity` is e.g. "train/loss", `step` the training step (see docs/results.md)."""

    def __init__(self, message: str, quantity: str, value: float, step: int):
        super().__init__(message)
        self.quantity, self.value, self.step = quantity, value, step


def unknown_name(kind: str, name: str, valid) -> ConfigError:
    """`unknown model 'bq'; valid: bk, hf, transformer` — the shape every lookup error takes."""
    return ConfigError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(valid))}")


def fail(message: str, code: int = 2):
    """Print one `lightning_bench: error: ...` line and exit (2 = a usage error, as argparse uses)."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(code)


def note(message: str) -> None:
    """One `lightning_bench: note: ...` line on stderr: something the user should know, not an error."""
    print(f"{PROG}: note: {message}", file=sys.stderr)


def deprecated(old: str, new: str) -> None:
    """The one note an old spelling of an option gets (it still works): `--old is deprecated; use --new`."""
    note(f"{old} is deprecated; use {new}")


def find_config_error(err: BaseException | None) -> ConfigError | None:
    """The ConfigError behind `err` (jsonargparse wraps errors raised while instantiating classes)."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, ConfigError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


# a write the machine refused after the command started: the disk or quota is full, the file size limit hit
WRITE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def find_write_error(err: BaseException | None) -> OSError | None:
    """The out-of-space OSError behind `err`, if any (Lightning and fsspec wrap it)."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, OSError) and err.errno in WRITE_ERRNOS:
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


# jsonargparse nests its reasons under `Parser key "bits":` (the first line says only *where*); these
# lines of the nesting say nothing about what is wrong
_PARSER_NOISE = ("Does not validate against any of the Union subtypes", "Subtypes:", "Errors:",
                 "Given value type:", "Expected a path but")


def parser_error_line(message: str, argv: list[str] = (), choices: tuple = ()) -> str:
    """jsonargparse's multi-line message as one line: the flag, the value given and what is allowed,
    e.g. `--bits: got 'abc'; expected one of 32, 16, 8, 4`. choices: the option's declared values (a
    Literal of ints is reported by jsonargparse as `Expected a <class 'int'>` when the value is no int)."""
    lines = [line.strip().removeprefix("- ") for line in str(message).splitlines() if line.strip()]
    if not lines:
        return "invalid arguments (see --help)"
    head = re.match(r'Parser key "([^"]+)":\s*(.*)', lines[0])
    unknown = re.fullmatch(r"Option '([^']+)' is not accepted", lines[0])
    if unknown:
        return f"{_flag_for(unknown.group(1), argv)} is not an option here (see --help)"
    if head is None:
        return " ".join(lines)
    key, rest = head.groups()
    given, types, literals, details = None, [], [], [rest] if rest else []
    for line in lines[1:]:
        expected = re.match(r"Expected a (.*?)(?:\. Got value: (.*))?$", line)
        restricted = re.match(r"Not of type (\w+): (.*)", line)
        if line.startswith(("Given value: ", "Got value: ")):
            given = line.split(": ", 1)[1]
        elif restricted and _restricted_type(restricted.group(1)):
            given = given or _value_in(restricted.group(2))
            types.append(_restricted_type(restricted.group(1)))
        elif expected and not line.startswith(_PARSER_NOISE):
            given = given or expected.group(2)
            literal = re.fullmatch(r"typing\.Literal\[(.*)\]", expected.group(1))
            if literal:
                literals += [str(v) for v in ast.literal_eval(f"[{literal.group(1)}]") if str(v) not in literals]
            else:
                types.append(_type_name(expected.group(1)))
        elif not line.startswith(_PARSER_NOISE):
            details.append(line)
    flag = _flag_for(key, argv)
    given = given if given is not None else _value_for(key, argv)
    if details:
        return f"{flag}: {' '.join(details)}"
    if choices:
        types, literals = [], [str(c) for c in choices]
    allowed = [t for t in types if t != "null"] + ([f"one of {', '.join(literals)}"] if literals else [])
    allowed += ["null"] if "null" in types else []
    return f"{flag}: got {_shown(given)}; expected {' or '.join(allowed) or 'another value'}"


def _type_name(text: str) -> str:
    name = re.sub(r"<class '(?:builtins\.)?([\w.]+)'>", r"\1", text)
    return {"int": "an int", "float": "a float", "bool": "true or false", "str": "a string",
            "NoneType": "null"}.get(name, f"a {name}")


_SYMBOLS = {operator.gt: ">", operator.ge: ">=", operator.lt: "<", operator.le: "<=", operator.eq: "==",
            operator.ne: "!="}


def _restricted_type(name: str) -> str | None:
    """describe_range of the jsonargparse type called `name` (its messages name only the type: `Not of
    type PositiveInt: ...`); None for a type without a range (paths: their own message says what is wrong)."""
    from jsonargparse.typing import registered_types

    cls = next((t for t in registered_types.values() if getattr(t, "__name__", None) == name), None)
    return describe_range(cls) if cls is not None else None


def describe_range(kind: type) -> str | None:
    """What a jsonargparse restricted type allows, as an error line says it: `an int > 0`, `a float in
    [0, 1)`, `a float < 0 or > 1`, a string type's own docstring or `a string matching ^x+$`."""
    if getattr(kind, "_regex", None) is not None:
        doc = kind.__doc__ or ""
        return doc if doc and not doc.startswith("str restricted") else f"a string matching {kind._regex.pattern}"
    if not getattr(kind, "_restrictions", None):
        return None
    bounds = [(_SYMBOLS[op], ref) for op, ref in kind._restrictions]
    base = _type_name(kind._type.__name__)
    lower = [b for b in bounds if b[0] in (">", ">=")]
    upper = [b for b in bounds if b[0] in ("<", "<=")]
    if kind._join == "and" and len(lower) == len(upper) == 1 and len(bounds) == 2:
        (low_op, low), (high_op, high) = lower[0], upper[0]
        return (f"{base} in {'[' if low_op == '>=' else '('}{_number(low)}, "
                f"{_number(high)}{']' if high_op == '<=' else ')'}")
    return f"{base} " + f" {kind._join} ".join(f"{op} {_number(ref)}" for op, ref in bounds)


def _number(value) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(value)


def _shown(value) -> str:
    """A given value as the error line quotes it: a 400-character name is not repeated whole."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}...' ({len(str(value))} characters)"


def _value_in(detail: str) -> str | None:
    """The value a restricted type's validation message quotes (`0 does not conform to restriction v>0`,
    `invalid literal for int() with base 10: 'abc'`); None when it quotes none."""
    found = (re.match(r"(.+?) (?:does not conform to restriction|does not match regular expression|"
                      r"not an integer|not a number)", detail) or re.search(r": '(.*)'$", detail))
    return found.group(1) if found else None


def _value_for(key: str, argv: list[str]) -> str | None:
    """The value given on the command line to the flag of `key` (`--x V` or `--x=V`), if any."""
    flag = _flag_for(key, argv)
    for i, arg in enumerate(argv):
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _flag_for(key: str, argv: list[str]) -> str:
    """The flag as the user typed it: jsonargparse names a model/data option without its `model.` prefix."""
    for arg in argv:
        name = arg[2:].split("=", 1)[0] if arg.startswith("--") else ""
        if name == key or name.endswith("." + key):
            return "--" + name
    return "--" + key
