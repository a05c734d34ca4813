"""The task registry: SUITES lists the benchmark folders (each declares its `Suite` in its __init__.py), the
one place a new benchmark is added. From them: names -> TaskDefinition, the benchmarks as named groups of
them (`--task glue` = its 9 tasks), the readers by file format and the scorers by generation family."""

from __future__ import annotations

from lightning_bench.tasks import (code, counting_stars, glue, infinitebench, long_context_rows, longbench, loogle,
                                   mmlu, multiwoz, open_qa, ruler, squad, summarization, superglue, zeroscrolls)
from lightning_bench.tasks.definition import AGGREGATIONS, Benchmark, Suite, TaskDefinition, check_definition
from lightning_bench.errors import ConfigError, unknown_name

# the order benchmarks are listed and recorded in
SUITES: tuple[Suite, ...] = tuple(folder.SUITE for folder in (
    glue, superglue, squad, mmlu, summarization, open_qa, multiwoz, code,
    ruler, infinitebench, loogle, longbench, zeroscrolls, long_context_rows, counting_stars))
LISTED_IN_FULL = 20  # a benchmark with more tasks (MMLU) is listed as "<name>/<subject>" in messages


def build(suites: tuple[Suite, ...]) -> tuple[dict[str, TaskDefinition], dict[str, Benchmark]]:
    """(tasks by name, benchmarks by name) of `suites`; anything inconsistent is an AssertionError at import, so
    a broken definition (no headline, no scorer, an unknown format) never reaches a run."""
    readers, scorers = _merged(suites, "readers"), _merged(suites, "scorers")
    tasks: dict[str, TaskDefinition] = {}
    groups: dict[str, Benchmark] = {}
    for suite in suites:
        for task in suite.tasks:
            if task.name in tasks:
                raise AssertionError(f"task {task.name!r} is defined twice")
            tasks[task.name] = task
        for group in suite.benchmarks:
            if group.name in groups or group.name in tasks and group.tasks != (group.name,):
                raise AssertionError(f"benchmark {group.name!r} clashes with another name")
            groups[group.name] = group
    for group in groups.values():
        if group.aggregation not in AGGREGATIONS:
            raise AssertionError(f"benchmark {group.name!r}: aggregation {group.aggregation!r} not in {AGGREGATIONS}")
        missing = [t for t in group.tasks if t not in tasks]
        if missing:
            raise AssertionError(f"benchmark {group.name!r} lists undefined tasks {missing}")
    for task in tasks.values():
        problems = check_definition(task)
        if task.source.format not in readers:
            problems.append(f"no suite reads its format {task.source.format!r}")
        if task.scorer and task.scorer not in scorers and task.scorer not in OFFICIAL_GENERATION_SCORERS:
            problems.append(f"no suite scores its family {task.scorer!r}")
        if problems:
            raise AssertionError(f"task {task.name!r}: {'; '.join(problems)}")
    return tasks, groups


def _merged(suites: tuple[Suite, ...], field: str) -> dict:
    """{key: value} of one Suite mapping over `suites`; a key declared twice is an error."""
    merged: dict = {}
    for suite in suites:
        for key, value in getattr(suite, field).items():
            if key in merged:
                raise AssertionError(f"{field} {key!r} is declared by two suites")
            merged[key] = value
    return merged


READERS = _merged(SUITES, "readers")  # file format -> reader (read(task, paths), from_hub(task, split, rows))
SCORERS = _merged(SUITES, "scorers")  # generation family -> scorer(task, rows, predictions, pairs)
EXPECTED_FILES = _merged(SUITES, "expected_files")  # file format -> what a missing file should have been
# the generation families official_metrics.py scores by question id (SQuAD's official scripts), no suite's scorer
OFFICIAL_GENERATION_SCORERS = ("squad_v1", "squad_v2")
TASKS, BENCHMARKS = build(SUITES)
BENCHMARK_ORDER = tuple(name for name, b in BENCHMARKS.items() if b.aggregation != "selection_only")


def benchmark_of(task: TaskDefinition) -> Benchmark:
    """The benchmark whose record section holds `task`."""
    return BENCHMARKS[task.benchmark]


def get_task(name: str) -> TaskDefinition:
    """The one task `name` names; a benchmark or a list gets an error listing its tasks."""
    if name in TASKS:
        return TASKS[name]
    tasks = expand_tasks(name)  # raises the precise error for an unknown benchmark, task or subject
    raise ConfigError(f"{name!r} names {len(tasks)} tasks, not one; pick one of: {', '.join(tasks)}")


def default_max_length(tasks: list[str], window: int | None) -> int:
    """The model-input limit when none is given: the model's window for a run with a long-context task
    (those suites exist to fill it: a 4k RULER set must not lose its middle to a 2048 default), else
    min(2048, window); 2048 when the window is unknown."""
    if window is None:
        return 2048
    long_names = {t.name for suite in SUITES if suite.long_context for t in suite.tasks}
    return window if any(t in long_names for t in tasks) else min(2048, window)


def expand_tasks(spec: str | list[str]) -> list[str]:
    """"glue" -> its 9 tasks, "mmlu" -> its 57 subjects, "glue/sst2,squad" -> both; order kept, no repeats."""
    parts = spec.split(",") if isinstance(spec, str) else [p for s in spec for p in s.split(",")]
    names = [p.strip() for p in parts if p.strip()]
    if not names:
        raise ConfigError("no task given; name a benchmark (" + ", ".join(BENCHMARKS) + ") or a task like glue/sst2")
    out: list[str] = []
    for name in names:
        group = BENCHMARKS.get(name)
        for task in group.tasks if group else [_check(name)]:
            if task not in out:
                out.append(task)
    return out


def _check(name: str) -> str:
    if name in TASKS:
        return name
    prefix, _, sub = name.partition("/")
    group = BENCHMARKS.get(prefix)
    if sub and group is not None:
        raise unknown_name(group.member or f"{group.name} task", sub, [TASKS[t].short_name for t in _members(prefix)])
    groups = {b for b, group in BENCHMARKS.items() if len(group.tasks) > 1}
    tasks = {t for t in TASKS if "/" not in t}  # a task of its own name (squad, xsum)
    for group in BENCHMARKS.values():
        members = _members(group.name)
        noun = (group.member or "task").split()[-1]
        tasks |= set(members) if len(members) <= LISTED_IN_FULL else {f"{group.name}/<{noun}>"}
    # groups first: `--task qa` is what most users want; then every task they hold
    raise ConfigError(f"unknown benchmark or task {name!r}; valid: groups {', '.join(sorted(groups))}; "
                      f"tasks {', '.join(sorted(tasks))}")


def _members(benchmark: str) -> list[str]:
    """Every task recorded under `benchmark` (SuperGLUE's include its diagnostics)."""
    return [name for name, task in TASKS.items() if task.benchmark == benchmark and "/" in name]
