"""Declared parameters, one mechanism for every sparsity method and masker: a parameter is a dataclass field
made with `param` (default, description, valid range or choices). `Parameterised` checks the values once,
`param_specs()` hands them to the CLI and a tuner, `params()` to the records."""

from __future__ import annotations

from dataclasses import field, fields, is_dataclass

from lightning_bench.errors import ConfigError


def param(default, description: str, *, low=None, high=None, choices=None, step=None):
    """A parameter: a dataclass field whose metadata says what it means and which values are valid (`low`/`high`
    inclusive bounds, or `choices`; an integer's `step` from `low`: step 2 from 1 = odd numbers), so the CLI, the
    records and a tuner read it from one place (a tuner then proposes only valid values)."""
    return field(default=default, metadata={"description": description, "low": low, "high": high,
                                            "choices": choices, "step": step})


class Parameterised:
    """Base class of a dataclass whose fields are `param`s: each value is cast to its field's type (a YAML `1`
    for a ratio is the float 1.0) and checked against its bounds or choices, or one ConfigError line."""

    name = ""

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            cast = {"float": float, "int": int}.get(str(f.type))
            if cast is int and isinstance(value, float) and value.is_integer():
                value = int(value)
            elif cast is int and isinstance(value, float):
                raise ConfigError(f"{self.name} parameter {f.name} must be an integer, got {value!r}")
            try:
                value = cast(value) if cast is not None else value
            except (TypeError, ValueError):
                raise ConfigError(f"{self.name} parameter {f.name} must be a number, got {value!r}") from None
            setattr(self, f.name, value)
            spec = f.metadata
            if spec.get("choices") is not None and value not in spec["choices"]:
                raise ConfigError(f"{self.name} parameter {f.name} must be one of {list(spec['choices'])}, "
                                  f"got {value!r}")
            low, high = spec.get("low"), spec.get("high")
            if (low is not None and value < low) or (high is not None and value > high):
                bounds = f"in [{low}, {high}]" if low is not None and high is not None else \
                    (f">= {low}" if low is not None else f"<= {high}")
                raise ConfigError(f"{self.name} parameter {f.name} must be {bounds}, got {value}")
            step = spec.get("step")
            if step and (value - (low or 0)) % step:
                which = "an odd number" if (step, (low or 0) % 2) == (2, 1) else f"{low or 0} + a multiple of {step}"
                raise ConfigError(f"{self.name} parameter {f.name} must be {which}, got {value}")

    @classmethod
    def param_specs(cls) -> dict[str, dict]:
        """{parameter: {default, description, low, high, choices}}: what a user or a tuner may set."""
        return {f.name: {"default": f.default, **f.metadata} for f in fields(cls)} if is_dataclass(cls) else {}

    def params(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)} if is_dataclass(self) else {}


def build(kind: str, registry: dict, name: str, params: dict):
    """registry[name](**params), or one ConfigError line: an unknown name lists the registry, an unknown
    parameter lists the valid ones."""
    from lightning_bench.errors import unknown_name

    if name not in registry:
        raise unknown_name(kind, name, registry)
    valid = list(registry[name].param_specs())
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise ConfigError(f"unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} for {kind} "
                          f"{name!r}; valid: {', '.join(valid) or 'none'}")
    return registry[name](**params)
