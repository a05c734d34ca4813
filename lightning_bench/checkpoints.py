"""`--ckpt_path`: the checkpoint read weights-only, and every way it can be wrong as one ConfigError.

Lightning's own handling lets a missing file through to a traceback at fit time, raises whatever
torch.load raises on a corrupt or unsafe file, and silently replaces the model options of the command
with the checkpoint's (even those given for the default `--model` when the checkpoint holds another
class); `model_conflicts` is what the CLI refuses instead.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pickle
import re
import zipfile
from pathlib import Path

import torch

from lightning_bench.errors import ConfigError

# Lightning resolves these names itself (from the ModelCheckpoint callbacks of the run)
SPECIAL_CKPT_PATHS = ("last", "best", "hpc", "registry")


def load_checkpoint(path) -> dict:
    """The checkpoint dict, loaded with weights_only=True: no code stored in the file runs."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--ckpt_path {path}: no such file")
    try:
        # a zip checkpoint (every torch.save since 1.6) is memory-mapped: reading it costs no copy
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError as err:
        blocked = re.search(r"GLOBAL ([\w.]+)", str(err))
        if blocked:
            raise ConfigError(f"--ckpt_path {path}: refused: loading it would run code ({blocked.group(1)}); "
                              "lightning_bench loads checkpoints weights-only") from err
        raise ConfigError(f"--ckpt_path {path}: not a readable PyTorch checkpoint (corrupt or another format)") from err
    except Exception as err:  # noqa: BLE001 - arbitrary bytes make torch.load raise anything (seen: KeyError)
        raise ConfigError(f"--ckpt_path {path}: not a readable PyTorch checkpoint "
                          f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})") from err
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError(f"--ckpt_path {path}: not a Lightning checkpoint (no state_dict)")
    return checkpoint


def model_conflicts(checkpoint: dict, class_path: str, init_args: dict, explicit: set[str],
                    strict: bool = False) -> list[str]:
    """The model options of this command that contradict the ones the checkpoint was saved with, as
    `--model.d_model 64 (checkpoint: 128)`.

    explicit: the options named on the command line. An option also counts as set when it differs
    from its default (a config file set it). strict (`--ckpt_path last`, whose options Lightning does
    not take from the file): every option with a value counts.
    """
    saved = {k: v for k, v in (checkpoint.get("hyper_parameters") or {}).items() if k != "_instantiator"}
    saved_class = saved.pop("_class_path", None)
    if saved_class and saved_class != class_path:
        if strict or "class_path" in explicit:
            return [f"--model {class_path} (checkpoint: {saved_class})"]
        # the checkpoint's class and options will be used: an option given for the default class would be
        # dropped without a word
        return [_option_of_another_class(key, init_args.get(key), saved, saved_class)
                for key in sorted(explicit - {"class_path"})
                if key not in saved or not _same(init_args.get(key), saved[key])]
    module, _, name = class_path.rpartition(".")
    defaults = {k: p.default for k, p in
                inspect.signature(getattr(importlib.import_module(module), name).__init__).parameters.items()}
    conflicts = []
    for key, value in saved.items():
        given = init_args.get(key)
        if key not in init_args or _same(given, value):
            continue
        if key in explicit or (strict and given is not None) or not _same(given, defaults.get(key)):
            conflicts.append(f"--model.{key} {given} (checkpoint: {value})")
    return conflicts


def _option_of_another_class(key: str, given, saved: dict, saved_class: str) -> str:
    found = saved[key] if key in saved else f"a {saved_class.rpartition('.')[2]}, which has no {key}"
    return f"--model.{key} {given} (checkpoint: {found})"


def _same(a, b) -> bool:
    """Equal as configuration values: a tuple from a signature equals the list read back from YAML."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)
