"""Experiments made of several CLI runs (e.g. `multi_dataset`: one preset x datasets x seeds).

Each experiment is an extra subcommand registered in `lightning_bench.cli.EXTRA_COMMANDS` (name -> "module:function"); it runs the
ordinary `fit` / `test` subcommands in-process, so every cell also leaves its ordinary JSON records.
"""
