"""Every numeric option of every model and DataModule the CLI offers declares its range on the option
(a jsonargparse restricted type in the class's `__init__` signature): a value just outside it is refused
while parsing, in one line naming the flag, before any model or data loads.

The options are found by walking the signatures, so an option added with a range is tested without
being listed here, and a numeric option declared without one fails the walk's own test."""

from __future__ import annotations

import importlib
import inspect
import operator
import re
import typing
from typing import Union, get_args, get_origin

import pytest

from lightning_bench.data import LMDataModule
from lightning_bench.tasks.datamodules import PROTOCOL_CLASSES
from lightning_bench.errors import describe_range
from lightning_bench.models import MODEL_ALIASES
from tests.conftest import ROOT
from tests.test_cli import run


def _import(class_path: str) -> type:
    module, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def cli_classes() -> list[tuple[str, type]]:
    """("model" | "data", class) for every class `--model` and `--data` / `--task` can pick."""
    data = [LMDataModule, *(_import(path) for path in PROTOCOL_CLASSES.values())]
    return [("model", _import(path)) for path in MODEL_ALIASES.values()] + [("data", cls) for cls in data]


def _is_range(hint) -> bool:
    return isinstance(hint, type) and hasattr(hint, "_restrictions")  # jsonargparse's restricted number types


def range_in(hint) -> type | None:
    """The restricted number type inside an annotation (itself, Optional[...], tuple[...] or list[...])."""
    if _is_range(hint):
        return hint
    return next((found for arg in get_args(hint) if (found := range_in(arg)) is not None), None)


def written(hint, value: str) -> str:
    """`value` as the command line gives the option: `[v, v]` for a pair, `[v]` for a list."""
    if get_origin(hint) is Union:
        hint = next(a for a in get_args(hint) if a is not type(None))
    if get_origin(hint) is tuple:
        return "[" + ", ".join([value] * len(get_args(hint))) + "]"
    return f"[{value}]" if get_origin(hint) is list else value


def options(cls: type) -> dict[str, typing.Any]:
    """name -> annotation of the options of `cls` as jsonargparse sees them: its `__init__`'s parameters,
    and its parents' where it passes **kwargs on."""
    found = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        hints, parameters = typing.get_type_hints(init), inspect.signature(init).parameters
        for name, parameter in parameters.items():
            if name != "self" and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                found.setdefault(name, hints.get(name))
        if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            break
    return found


def plain_number(hint) -> bool:
    """Whether an annotation holds a bare int or float: a numeric option declared without a range."""
    return hint in (int, float) or any(plain_number(arg) for arg in get_args(hint))


# how far past each kind of bound the nearest refused value lies, in steps
PAST = {operator.gt: 0, operator.ge: -1, operator.lt: 0, operator.le: 1, operator.eq: 1, operator.ne: 0}


def just_outside(kind: type) -> list[str]:
    """For each bound of the range, the nearest value past it (int: one step; float: 0.001), kept when the
    type refuses it (an "or" range may allow what one bound refuses)."""
    step = 1 if kind._type is int else 0.001
    outside = []
    for compare, ref in kind._restrictions:
        value = kind._type(ref + PAST[compare] * step)
        try:
            kind(value)
        except ValueError:
            outside.append(repr(value) if kind._type is float else str(value))
    return outside


def cases():
    """One case per option, range and bound; an option that several classes declare with the same range
    (the LanguageModule options of every model family) is parsed by the same code: it is run once."""
    seen = set()
    for group, cls in cli_classes():
        for name, hint in options(cls).items():
            kind = range_in(hint)
            for value in just_outside(kind) if kind is not None else []:
                if (group, name, kind, value) not in seen:
                    seen.add((group, name, kind, value))
                    yield pytest.param(group, cls, name, written(hint, value), id=f"{cls.__name__}.{name}={value}")


CASES = list(cases())


def test_every_numeric_option_declares_a_range():
    unranged = [f"{cls.__name__}.{name}: {hint}" for _, cls in cli_classes()
                for name, hint in options(cls).items() if plain_number(hint) and range_in(hint) is None]
    assert not unranged, "declare these with a jsonargparse restricted type: " + ", ".join(unranged)
    ranged = {(cls, name) for _, cls in cli_classes() for name, hint in options(cls).items() if range_in(hint)}
    assert {cls for cls, _ in ranged} == {cls for _, cls in cli_classes()}
    assert len(ranged) >= 60, sorted(ranged)  # the walk itself works: it cannot pass on an empty list
    assert len(CASES) >= 50


def test_docs_list_every_model_option_under_its_range():
    text = (ROOT / "docs/models.md").read_text()
    rows = dict(re.findall(r"^\| (an? [^|]+?) \| (`.+)\|$", text, re.MULTILINE))
    missing = [f"{name} ({describe_range(range_in(hint))})" for group, cls in cli_classes() if group == "model"
               for name, hint in options(cls).items()
               if range_in(hint) and f"`{name}`" not in rows.get(describe_range(range_in(hint)), "")]
    assert not missing, "docs/models.md 'Option ranges' lacks " + ", ".join(missing)


@pytest.mark.parametrize("group, cls, name, value", CASES)
def test_a_value_outside_its_range_is_refused_at_parse_time(group, cls, name, value, capsys):
    flag = f"--{group}.{name}"
    # --print_config stops right after parsing: the refusal must come from the parser, not the class
    code, _, err = run(["fit", f"--{group}", f"{cls.__module__}.{cls.__name__}", flag, value, "--print_config"],
                       capsys)
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith(f"lightning_bench: error: {flag}: got "), err
    assert "; expected " in lines[-1] and sum(line.startswith("lightning_bench: error:") for line in lines) == 1, err


CHECKS_BETWEEN_OPTIONS = {
    "d_model by n_head": (dict(d_model=30, n_head=4), "--model.d_model 30 must be divisible by --model.n_head 4"),
    "odd head size": (dict(d_model=6, n_head=2), "= 3 channels per head; RoPE needs an even number"),
    "n_kv_head by n_head": (dict(d_model=32, n_head=2, n_kv_head=3), "--model.n_kv_head 3 must divide --model.n_head 2"),
    "top_k by num_experts": (dict(top_k=5, num_experts=4), "1 <= top_k <= num_experts, got num_experts=4, top_k=5"),
}


@pytest.mark.parametrize("case", sorted(CHECKS_BETWEEN_OPTIONS))
def test_checks_between_options_name_both_flags(case):
    from lightning_bench.errors import ConfigError
    from lightning_bench.models import ResNetBKLM, TransformerLM

    options, expected = CHECKS_BETWEEN_OPTIONS[case]
    with pytest.raises(ConfigError, match=re.escape(expected)):
        (ResNetBKLM if "top_k" in options else TransformerLM)(**options)
