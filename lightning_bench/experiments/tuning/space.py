"""What a search may vary, read from the declarations (`sparsity.parameters.param`): each parameter of an
eviction method or of each masker of a stack, with the declared range or choices, as a Ray Tune domain.

A config is a `Target`: an eviction method (its parameters, keys `recent_ratio`) or a named masker stack (each
masker's parameters, keys `INDEX.MASKER.PARAM`, e.g. `2.oracle_topk.heavy_size`, since a stack may hold one masker
twice). `--space {config: {key: {low, high} | {choices}}}` narrows a range; a parameter given in `--method_params`
is fixed, not searched. A parameter without an upper bound is searched up to 4x its default (a size given as a
fraction of the keys: up to 1), one without any bound (a seed) is never searched."""

from __future__ import annotations

import dataclasses
from typing import Optional

from lightning_bench.errors import ConfigError

UNBOUNDED_FACTOR = 4  # an open-ended parameter is searched in [low, 4 x default]: the declared default scaled


@dataclasses.dataclass
class Target:
    name: str  # the method, or the stack's name in --attention_sparsity
    method: Optional[str] = None  # an eviction method
    stack: object = None  # a MaskerStack (its maskers' values are the defaults)
    fixed: dict = dataclasses.field(default_factory=dict)  # --method_params: never searched

    def specs(self) -> dict[str, dict]:
        """{key: declared spec with `default` (the stack's value) and `size` (a masker size)}: every parameter."""
        if self.method is not None:
            from lightning_bench.sparsity.methods import METHODS

            return {k: {**s, "size": False} for k, s in METHODS[self.method].param_specs().items()}
        out = {}
        for i, masker in enumerate(self.stack.maskers):
            for key, spec in type(masker).param_specs().items():
                out[f"{i}.{masker.name}.{key}"] = {**spec, "default": getattr(masker, key),
                                                   "size": key in getattr(masker, "sizes", ())}
        return out

    def build(self, point: dict):
        """The method's parameters, or the stack, of a point (defaults where it has none): a ConfigError if the
        declarations refuse it."""
        if self.method is not None:
            from lightning_bench.sparsity.methods import make_method

            params = {**self.fixed, **point}
            make_method(self.method, **params)
            return params
        from lightning_bench.sparsity.masking.stack import MaskerStack

        items = [m.describe() for m in self.stack.maskers]
        for key, value in point.items():
            index, _, param = key.split(".")
            items[int(index)][param] = value
        specs = [{"name": d.pop("masker"), **d} for d in items]
        return MaskerStack.parse([*specs, f"seed:{self.stack.seed}",
                                  *([f"dense_layers:{':'.join(map(str, self.stack.dense_layers))}"]
                                    if self.stack.dense_layers else [])])


def targets(methods: list[str], stacks: dict, method_params: dict) -> list[Target]:
    """The configs of a grid to tune: every method but dense, every stack."""
    from lightning_bench.experiments.core.grid import DENSE
    from lightning_bench.sparsity.masking.stack import check_named_stacks

    out = [Target(m, method=m, fixed=dict(method_params.get(m, {}))) for m in methods if m != DENSE]
    return out + [Target(name, stack=stack) for name, stack in check_named_stacks(stacks, methods).items()]


def _range(key: str, spec: dict) -> Optional[tuple]:
    """(low, high) searched, or None where the declaration bounds nothing (a seed)."""
    low, high, default = spec.get("low"), spec.get("high"), spec["default"]
    if low is None and high is None:
        return None
    if spec["size"] and isinstance(default, float):  # a fraction of the keys: (0, 1]
        return max(low or 0.0, 1e-3), min(high or 1.0, 1.0)
    if high is None:
        high = max(default * UNBOUNDED_FACTOR, low + 1)
    return low, high


def searched(target: Target, overrides: Optional[dict] = None) -> dict[str, dict]:
    """{key: {default, low, high} or {default, choices}} of the parameters searched, narrowed by `overrides`
    ({key: {low, high} | {choices}}) within the declared bounds: anything else is one ConfigError line."""
    specs, overrides = target.specs(), dict(overrides or {})
    unknown = sorted(set(overrides) - set(specs))
    if unknown:
        raise ConfigError(f"--space.{target.name}: unknown parameter {', '.join(unknown)}; valid: "
                          f"{', '.join(specs) or 'none'}")
    out = {}
    for key, spec in specs.items():
        if key in target.fixed:
            continue
        given = overrides.get(key, {})
        if spec.get("choices") is not None or "choices" in given:
            choices = list(given.get("choices", spec["choices"]))
            bad = [c for c in choices if spec.get("choices") is not None and c not in spec["choices"]]
            if bad or not choices:
                raise ConfigError(f"--space.{target.name}.{key}: choices {choices}; valid: {list(spec['choices'])}")
            out[key] = {"default": spec["default"], "choices": choices}
            continue
        bounds = _range(key, spec)
        if bounds is None and not given:
            continue
        low, high = given.get("low", (bounds or (None, None))[0]), given.get("high", (bounds or (None, None))[1])
        if low is None or high is None or low > high or (spec["low"] is not None and low < spec["low"]) or \
                (spec["high"] is not None and high > spec["high"]):
            raise ConfigError(f"--space.{target.name}.{key}: [{low}, {high}] is not within the declared range "
                              f"[{spec['low']}, {spec['high']}]")
        integer = isinstance(spec["default"], int) and not isinstance(spec["default"], bool)
        if integer and spec.get("step"):  # only the valid values (snapkv's odd kernels), not a range half refused
            base = spec["low"] or 0
            out[key] = {"default": spec["default"],
                        "choices": [v for v in range(int(low), int(high) + 1) if (v - base) % spec["step"] == 0]}
            continue
        out[key] = {"default": spec["default"], "low": int(low) if integer else float(low),
                    "high": int(high) if integer else float(high)}
    return out


def tune_space(space: dict[str, dict], search: str, grid_points: int) -> dict:
    """The Ray Tune param_space: `grid` a grid_search over the choices or `grid_points` values per range;
    `random` / `tpe` sampling domains (OptunaSearch converts them)."""
    from ray import tune

    out = {}
    for key, s in space.items():
        if search == "grid":
            out[key] = tune.grid_search(s["choices"] if "choices" in s else grid_values(s, grid_points))
        elif "choices" in s:
            out[key] = tune.choice(s["choices"])
        elif isinstance(s["low"], int):
            out[key] = tune.randint(s["low"], s["high"] + 1)  # randint's upper bound is exclusive
        else:
            out[key] = tune.uniform(s["low"], s["high"])
    return out


def grid_values(s: dict, points: int) -> list:
    step = (s["high"] - s["low"]) / max(1, points - 1)
    values = [s["low"] + i * step for i in range(points)]
    return list(dict.fromkeys(round(v) if isinstance(s["low"], int) else round(v, 6) for v in values))


def defaults(space: dict[str, dict]) -> dict:
    """The declared defaults of the searched parameters: the first point every search evaluates, so the best
    found is never worse than the default on the objective."""
    return {key: s["default"] for key, s in space.items()}


def static_density(target: Target, point: dict) -> Optional[float]:
    """A stack's density known before it runs: the sum of its maskers' fractional sizes and sampling rates
    (token counts and data-dependent maskers add nothing known), None for an eviction method."""
    if target.stack is None:
        return None
    total = 0.0
    for masker in target.build(point).maskers:
        for key in getattr(masker, "sizes", ()):
            value = getattr(masker, key)
            total += value if isinstance(value, float) else 0.0
        total += getattr(masker, "sampling_rate", 0.0) if masker.name == "random_sampling" else 0.0
    return total


def violation(target: Target, point: dict, density_target: Optional[float]) -> Optional[str]:
    """Why `point` is not a valid config (the declarations refuse it, or its parts' densities sum above the
    target), or None."""
    try:
        density = static_density(target, point)
        if target.stack is None:
            target.build(point)
    except ConfigError as err:
        return str(err)
    if density_target is not None and density is not None and density > density_target + 1e-9:
        return f"its parts' densities sum to {density:.4g}, above the target {density_target}"
    return None
