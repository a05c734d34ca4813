r"""`lightning_bench export_documents`: write the documents that `document_rolling` scores as JSON lines.

    lightning_bench export_documents --config configs/test/smollm2_wikitext2.yaml \
        --data.eval_max_documents 7 --output wikitext2_test_7.jsonl
    lightning_bench test ... --data text --data.test_path wikitext2_test_7.jsonl   # the same documents

The data flags are those of `lightning_bench test` (`--data ALIAS`, `--data.path`, `--data.test_path`,
`--data.document_split`, `--data.eval_max_documents`, ...; a `--config` file's `data` section is read
too, its other sections ignored), so the file holds exactly what a run with those flags would score:
one `{"text": document}` object a line (`--data.text_field` renames the field).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lightning_bench.data.options import OneLineParser
from lightning_bench.errors import ConfigError

# --data.<name> options passed to LMDataModule, with their types (their ranges are LMDataModule's, checked
# when it is built)
_DATA_OPTIONS = {"path": str, "train_path": str, "val_path": str, "test_path": str, "document_split": str,
                 "text_field": str, "eval_max_documents": int, "use_hub": bool, "hub_id": str,
                 "hub_config": str, "max_documents": int, "val_fraction": float}
_SPLITS = {"test": "test", "validation": "validation", "valid": "validation", "train": "train"}
_KIND_NAMES = {int: "an int", float: "a number", bool: "true or false", str: "a string"}


def _value(kind, text: str):
    if text in ("null", "None"):
        return None
    if kind is bool:
        if text.lower() not in ("1", "true", "yes", "0", "false", "no"):
            raise argparse.ArgumentTypeError(f"got {text!r}; expected true or false")
        return text.lower() in ("1", "true", "yes")
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; expected {_KIND_NAMES[kind]} or null") from None


def _config_data(path: str) -> dict:
    import yaml

    try:
        config = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as err:
        raise ConfigError(f"cannot read config {path!r} ({err.strerror})") from err
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        raise ConfigError(f"config {path}: invalid YAML" + (f" at line {where.line + 1}" if where else "")) from None
    if not isinstance(config, dict):
        raise ConfigError(f"config {path}: expected a mapping of sections (data: ...), got a {type(config).__name__}")
    data = config.get("data") or {}
    if isinstance(data, str):
        return {"source": data}
    data = data.get("init_args", data) if isinstance(data, dict) else {}
    return {k: v for k, v in data.items() if k == "source" or k in _DATA_OPTIONS}


def _parser() -> OneLineParser:
    parser = OneLineParser(prog="lightning_bench export_documents", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-c", "--config", action="append", default=[], help="a config file (its data section)")
    parser.add_argument("--data", dest="source", help="data alias (ptb, wikitext2, ..., text)")
    for name, kind in _DATA_OPTIONS.items():
        parser.add_argument(f"--data.{name}", dest=name, type=lambda t, k=kind: _value(k, t),
                            default=argparse.SUPPRESS)  # only the flags given; `null` resets a config's
    parser.add_argument("--split", default="test", choices=sorted(_SPLITS), help="which split (default test)")
    parser.add_argument("-o", "--output", required=True, help="the JSON-lines file to write")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from lightning_bench.results.io import check_output

    check_output("-o", args.output, kind="file")  # before the corpus is read

    options: dict = {"source": "text"}
    for config in args.config:
        options.update(_config_data(config))
    if args.source is not None:
        options["source"] = args.source
    options.update({k: v for k, v in vars(args).items() if k in _DATA_OPTIONS})

    from lightning_bench.data.lm import LMDataModule
    from lightning_bench.data.sources import write_documents_jsonl

    data = LMDataModule(**options)
    split = _SPLITS[args.split]
    if data._load(split) is None:
        raise ConfigError(f"no {split} split found for --data {data.source} (path={options.get('path')!r}); "
                          f"pass --data.{ {'validation': 'val'}.get(split, split)}_path FILE")
    # the evaluated documents (eval_max_documents applied) of validation/test; all of train
    text = data._load(split) if split == "train" else data._eval_text(split)
    path = write_documents_jsonl(text, args.output, options.get("text_field") or "text")
    print(f"{len(text.documents)} documents of {text.origin} -> {path}")
    return 0
