"""The one exception type that the CLI turns into a single `lightning_bench: error: ...` line.

Raise `ConfigError` for anything the user can fix (a name, a path, a size); the message must say what
to change. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys

PROG = "lightning_bench"


class ConfigError(ValueError):
    """A user-fixable problem with the command line, a config file or the input data."""


class MissingData(ConfigError):
    """The data asked for does not exist (no such split, file or hub access): callers may fall back,
    unlike for a file that exists but is wrong."""


def unknown_name(kind: str, name: str, valid) -> ConfigError:
    """`unknown model 'bq'; valid: bk, hf, transformer` — the shape every lookup error takes."""
    return ConfigError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(valid))}")


def fail(message: str, code: int = 2):
    """Print one `lightning_bench: error: ...` line and exit (2 = a usage error, as argparse uses)."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(code)


def find_config_error(err: BaseException | None) -> ConfigError | None:
    """The ConfigError behind `err` (jsonargparse wraps errors raised while instantiating classes)."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, ConfigError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None
