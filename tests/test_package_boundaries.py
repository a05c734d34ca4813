"""The packages of lightning_bench talk through declared interfaces: no import cycles, and no module or
test reaches into another package's private (`_name`) names. Both are read from the source with `ast`."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lightning_bench"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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
    assert cycles(import_graph()) == []


def test_cycle_finder_sees_function_level_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    graph = import_graph()
    assert "lightning_bench.quantization.export" in graph["lightning_bench.models.hf"]  # inside load_quantized
    assert "lightning_bench.quantization" in graph["lightning_bench.models.hf"]  # whose __init__ that runs


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
