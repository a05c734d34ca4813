"""The one exception type that the CLI turns into a single `lightning_bench: error: ...` line.

Raise `ConfigError` for anything the user can fix (a name, a path, a size); the message must say what
to change. Anything else is a bug and keeps its traceback.
"""


class ConfigError(ValueError):
    """A user-fixable problem with the command line, a config file or the input data."""


class MissingData(ConfigError):
    """The data asked for does not exist (no such split, file or hub access): callers may fall back,
    unlike for a file that exists but is wrong."""


def unknown_name(kind: str, name: str, valid) -> ConfigError:
    """`unknown model 'bq'; valid: bk, hf, transformer` — the shape every lookup error takes."""
    return ConfigError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(valid))}")
