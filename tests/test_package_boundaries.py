"""The packages of lightning_bench talk through declared interfaces: no import cycles, packages import only the
layers below them (ALLOWED), and no module or test reaches into another package's private (`_name`) names. All are
read from the source with `ast`."""

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lightning_bench"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.lru_cache(maxsize=1)  # read-only for its callers
def import_graph() -> dict[str, set[str]]:
    """module -> the lightning_bench modules it imports, at any level (function-level imports too), and the
    packages whose __init__ those imports run."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}

    def known(name: str):  # `from pkg.mod import name`: name may be a module or a name inside pkg.mod
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps.update(known(a.name) for a in node.names if a.name.startswith("lightning_bench"))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}" if base else package
                if base.startswith("lightning_bench"):
                    deps.update(known(f"{base}.{a.name}") for a in node.names)
        deps.discard(None)
        for dep in list(deps):  # importing a.b.c runs a.b's __init__ (unless we are inside a.b already)
            parts = dep.split(".")
            for i in range(2, len(parts)):
                package = ".".join(parts[:i])
                if package in modules and not name.startswith(package + ".") and name != package:
                    deps.add(package)
        deps.discard(name)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert cycles(without_pending(import_graph())) == []


def test_cycle_finder_sees_function_level_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    graph = import_graph()
    assert "lightning_bench.quantization.export" in graph["lightning_bench.results.recorder"]  # inside model_size
    assert "lightning_bench.quantization" in graph["lightning_bench.results.recorder"]  # whose __init__ that runs


# ---- package layers ------------------------------------------------------------------------------------
# DESIGN.md "Layers": models at the bottom (adapters declaring capabilities); kv engine (sparsity), quantization,
# profiling, corpora (data), tasks (one folder per benchmark) and the evaluation loop above them; the Lightning recipe (callbacks and records in
# results, console, checkpoints, trainer_cli) above those; experiment commands on top (cli dispatches them).
# A module's unit is its top-level package (`lightning_bench.models.hf` -> "models") or top-level module
# (`lightning_bench.trainer_cli` -> "trainer_cli"), except the helpers in BASE, which every layer may use.
BASE = frozenset({
    "lightning_bench", "lightning_bench.errors", "lightning_bench.options", "lightning_bench.hub",
    "lightning_bench.logging_setup",
    # file writing (imports errors only); data writes its caches with it. Importing it runs results/__init__.py,
    # so that stays free of lightning_bench imports too (base may import base only)
    "lightning_bench.results.io", "lightning_bench.results",
})
_MIDDLE = frozenset({"base", "models", "data", "tasks", "profiling", "quantization", "evaluation", "sparsity"})
_RECIPE = frozenset({"results", "console", "checkpoints", "trainer_cli"})
# unit -> the units its modules may import (at any level, function-level imports included). Acyclic (checked).
ALLOWED: dict[str, frozenset] = {
    "base": frozenset(),
    "models": frozenset({"base"}),  # what a model declares is in models/capabilities.py, for the others to read
    "data": frozenset({"base", "models"}),  # labels use the loss's IGNORE_INDEX (models/token_nll.py)
    # the benchmark folders and their DataModules read corpora helpers (tokenizers, options, samplers) from data
    "tasks": frozenset({"base", "models", "data"}),
    "profiling": frozenset({"base", "models"}),
    "quantization": frozenset({"base", "models"}),
    "evaluation": frozenset({"base", "models", "data", "tasks", "sparsity"}),  # scoring tasks; decoding on the KV engine
    "sparsity": frozenset({"base", "models", "data"}),
    "checkpoints": frozenset({"base"}),
    "results": _MIDDLE,
    "console": _MIDDLE,
    "trainer_cli": _MIDDLE | {"results", "console", "checkpoints"},
    "experiments": _MIDDLE | _RECIPE,
    "cli": _MIDDLE | _RECIPE | {"experiments", "reports"},  # hands downstream --wandb the report's figures
    "reports": _MIDDLE | _RECIPE | {"experiments"},  # reads what the recipe and the experiments write
}
# Imports outside the table that are scheduled for removal: (importer, imported module) -> who removes it, how.
# Each must still exist (a removed one is taken off this list); the check and the cycle test skip them.
PENDING: dict[tuple[str, str], str] = {}


def unit(module: str) -> str:
    return "base" if module in BASE else module.split(".")[1]


def _excused(module: str, dep: str, pending) -> bool:
    """(module, dep) is pending, or dep is a package __init__ that a pending import of module runs."""
    return any(importer == module and (target == dep or target.startswith(dep + "."))
               for importer, target in pending)


def without_pending(graph: dict[str, set[str]], pending=PENDING) -> dict[str, set[str]]:
    return {module: {dep for dep in deps if not _excused(module, dep, pending)} for module, deps in graph.items()}


def layering_problems(graph: dict[str, set[str]], allowed: dict[str, frozenset], unit_of=unit,
                      pending=PENDING) -> list[str]:
    """Every import between units that `allowed` does not list, every cycle between units, every module in a
    unit the table does not know, and every pending entry that is no longer in the graph."""
    problems, units = [], {}
    for module, deps in sorted(without_pending(graph, pending).items()):
        here = unit_of(module)
        if here not in allowed:
            problems.append(f"{module}: unit {here!r} is not in the table of allowed edges")
        for dep in sorted(deps):
            there = unit_of(dep)
            if there == here:
                continue
            units.setdefault(here, set()).add(there)
            if here in allowed and there not in allowed[here]:
                problems.append(f"{here} -> {there} is not allowed: {module} imports {dep}")
    problems += [f"package cycle: {' <-> '.join(component)}" for component in cycles(units)]
    problems += [f"pending {importer} -> {target} no longer exists: take it off PENDING"
                 for importer, target in pending if target not in graph.get(importer, ())]
    return problems


def test_the_table_of_allowed_edges_is_layered():
    assert cycles({u: set(lower) - {u} for u, lower in ALLOWED.items()}) == []
    assert all(lower <= set(ALLOWED) for lower in ALLOWED.values())


def test_packages_import_only_the_layers_below_them():
    assert layering_problems(import_graph(), ALLOWED) == []


def test_layering_check_reports_forbidden_edges_package_cycles_and_stale_entries():
    table = {"base": frozenset(), "low": frozenset({"base"}), "high": frozenset({"base", "low"})}
    of = lambda module: module.split(".")[0]  # noqa: E731 - made-up modules "unit.module"
    assert layering_problems({"high.a": {"low.b", "base.c"}, "low.b": {"base.c"}, "base.c": set()}, table, of,
                             pending={}) == []
    # low imports high: an edge the table does not allow, and with high -> low a cycle between the two
    graph = {"high.a": {"low.b"}, "low.b": {"high.x"}, "high.x": set()}
    assert layering_problems(graph, table, of, pending={}) == [
        "low -> high is not allowed: low.b imports high.x", "package cycle: high <-> low"]
    # a table that allows both directions lets each edge through; the cycle is still reported
    cyclic = {**table, "low": frozenset({"base", "high"})}
    assert layering_problems(graph, cyclic, of, pending={}) == ["package cycle: high <-> low"]
    # a unit the table does not know; a pending edge is skipped, and reported once it is gone
    assert layering_problems({"new.m": {"base.c"}}, table, of, pending={}) == [
        "new.m: unit 'new' is not in the table of allowed edges"]
    assert layering_problems(graph, table, of, pending={("low.b", "high.x"): "scheduled"}) == []
    assert layering_problems({"low.b": set()}, table, of, pending={("low.b", "high.x"): "scheduled"}) == [
        "pending low.b -> high.x no longer exists: take it off PENDING"]
    assert unit("lightning_bench.models.capabilities") == "models" and unit("lightning_bench.results.io") == "base"


def test_models_import_no_package_above_them():
    """models/ reads nothing from evaluation/, profiling/, quantization/ or sparsity/ (other than PENDING)."""
    graph = without_pending(import_graph())
    above = {"evaluation", "profiling", "quantization", "sparsity", "data", "results"}
    assert sorted(f"{m} -> {d}" for m, deps in graph.items() if unit(m) == "models"
                  for d in deps if unit(d) in above) == []


# ---- private names -----------------------------------------------------------------------------------
def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _package(path: Path) -> str:
    parts = path.relative_to(ROOT).parts
    return "tests" if parts[0] == "tests" else parts[1].removesuffix(".py")


def private_reaches() -> list[str]:
    """`from lightning_bench.<other package> import _x`, and `obj._x` / `getattr|setattr(obj, "_x")` where
    `_x` is defined (def, class, name or self-attribute) only in other lightning_bench packages."""
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    trees = {p: ast.parse(p.read_text()) for p in files}
    owners: dict[str, set[str]] = {}
    for path, tree in trees.items():
        for node in ast.walk(tree):
            names = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name):
                            names.append(sub.id)
                        elif (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
                              and sub.value.id in ("self", "cls")):
                            names.append(sub.attr)
            for name in filter(_private, names):
                owners.setdefault(name, set()).add(_package(path))

    found = []
    for path, tree in trees.items():
        here = _package(path)
        for node in ast.walk(tree):
            name, target = None, None
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lightning_bench."):
                package = node.module.split(".")[1]
                for alias in node.names:
                    if _private(alias.name) and package != here:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import {alias.name}")
                continue
            if isinstance(node, ast.Attribute):
                name, target = node.attr, node.value
            elif (isinstance(node, ast.Call) and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                  and isinstance(node.args[1].value, str) and ast.unparse(node.func).endswith(("getattr", "setattr"))):
                name, target = node.args[1].value, node.args[0]
            if name is None or not _private(name) or (isinstance(target, ast.Name) and target.id in ("self", "cls")):
                continue
            if owners.get(name) and here not in owners[name]:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return sorted(found)


def test_no_reaching_into_other_packages_private_names():
    assert private_reaches() == []
