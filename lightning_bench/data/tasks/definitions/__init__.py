"""Every task definition, one module per benchmark. A new task is one more definition in its benchmark's
module (a new benchmark: a new module, listed here); docs/tasks.md walks through it."""

from lightning_bench.data.tasks.definitions import glue, mmlu, squad, superglue

MODULES = (glue, superglue, squad, mmlu)  # the order benchmarks are listed and recorded in
