"""How a grid is run: the options every experiment command's config inherits (`Execution`: --shard,
--executor, --ray.*) and the executor they choose (core/runner.py has the runner and the shards,
core/ray_executor.py the Ray workers). None of them is part of what a cell computes: records and reports
are the same however the grid ran, so none is recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar, Literal, Optional

from jsonargparse.typing import NonNegativeFloat, PositiveInt

from lightning_bench.experiments.core.runner import Shard, run_serial


@dataclass
class RayOptions:
    address: Optional[str] = None
    """a running Ray cluster to attach to (HOST:PORT as `ray start --head` prints it, ray://HOST:10001, or
    auto); None: a local instance started for this run"""
    workers: PositiveInt = 1
    """Ray actors computing groups at once; each loads the model once"""
    num_cpus_per_worker: NonNegativeFloat = 1.0
    """CPUs each worker reserves (Ray also sets its threads to them)"""
    num_gpus_per_worker: NonNegativeFloat = 0.0
    """GPUs each worker reserves: a fraction (0.25) puts several workers on one GPU when cells are small"""


@dataclass(kw_only=True)
class Execution:
    """The options every experiment command's config inherits (parse_command leaves EXECUTION_OPTIONS out of
    the resolved config that records keep)."""

    shard: Optional[str] = None
    """I/N: compute only the I-th of N slices of the grid's groups into the shared store (e.g. one per SLURM
    array task); the run that finds every cell done writes the report"""
    executor: Literal["serial", "ray"] = "serial"
    """serial: the groups one after another in this process; ray: on Ray workers (--ray.*), each loading the
    model once, this process writing the store"""
    ray: RayOptions = field(default_factory=RayOptions)
    """the workers of --executor ray"""
    EXECUTION_OPTIONS: ClassVar[tuple] = ("shard", "executor", "ray")

    def __post_init__(self):
        self.shard_slice = Shard.parse(self.shard) if self.shard is not None else None
        if self.executor == "ray":  # installed, its cluster reachable: one line before anything loads
            from lightning_bench.experiments.core.ray_executor import check_ray

            check_ray(self.ray)

    def executor_for(self, command: Callable[[], object]):
        """The executor of these options; `command` (the command's main with its argv, e.g.
        functools.partial(main, argv): pickled by reference) is what a Ray worker runs to build the grid."""
        if self.executor == "serial":
            return run_serial
        from lightning_bench.experiments.core.ray_executor import RayExecutor

        return RayExecutor(self.ray, command)


def recorded_argv(argv: list[str]) -> list[str]:
    """`argv` without the Execution options: a record that keeps its command line (sweep's `overrides`) is
    the same however the grid ran."""
    out, value_follows = [], False
    for arg in argv:
        name, equals, _ = arg.partition("=")
        if value_follows:
            value_follows = False
        elif name in ("--shard", "--executor", "--ray") or name.startswith("--ray."):
            value_follows = not equals  # `--shard 0/2`: its value goes too
        else:
            out.append(arg)
    return out
