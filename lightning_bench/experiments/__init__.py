"""Experiment commands: grids of cells run by one driver each (`sweep`, `generation`, `multi_dataset`).

Every command shares `experiments.core`: a typed config dataclass parsed by jsonargparse (`--config`,
`--print_config`, dotted overrides, `${oc.env:VAR,default}` in presets), a grid of frozen cells, a
resumable store of finished cells, aggregation with paired statistics. Each command is registered in
`lightning_bench.cli.EXTRA_COMMANDS`; docs/experiments.md says how to add one.
"""
