r"""`lightning_bench export_documents`: write the documents that `document_rolling` scores as JSON lines.

    lightning_bench export_documents --config configs/test/smollm2_wikitext2.yaml \
        --data.eval_max_documents 7 --output wikitext2_test_7.jsonl
    lightning_bench test ... --data text --data.test_path wikitext2_test_7.jsonl   # the same documents

The data flags are those of `lightning_bench test` that decide the documents (`--data ALIAS`, `--data.path`,
`--data.test_path`, `--data.document_split`, `--data.eval_max_documents`, ...), so the file holds exactly
what a run with those flags would score: one `{"text": document}` object a line (`--data.text_field`
renames the field).

`--config FILE` reads this command's options as `--print_config` writes them (`data:` {source, path, ...},
`split:`, `output:`) or a fit/test config: its `data:` section (an alias, or class_path + init_args) gives
the --data.* options above, the data options that do not change the documents (seq_len, tokenizer,
batch_size, ...) are ignored, and so is every other section (model:, trainer:, ...). Flags given after
--config override it.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from dataclasses import dataclass, field
from typing import Literal

from lightning_bench.data.lm import LMDataModule
from lightning_bench.data.options import ConfigFile, parse_command, read_config_file
from lightning_bench.errors import ConfigError

# the LMDataModule options that decide which documents a split holds (the others, seq_len, tokenizer, ...,
# only decide how they are scored); their types, ranges and defaults are LMDataModule's
DOCUMENT_OPTIONS = ("source", "path", "train_path", "val_path", "test_path", "document_split", "text_field",
                    "eval_max_documents", "use_hub", "hub_id", "hub_config", "max_documents", "val_fraction")
_SPLITS = {"test": "test", "validation": "validation", "valid": "validation", "train": "train"}


def _document_options() -> type:
    """A dataclass of DOCUMENT_OPTIONS, declared by LMDataModule's signature (source defaults to text)."""
    hints = typing.get_type_hints(LMDataModule.__init__)
    defaults = {name: p.default for name, p in inspect.signature(LMDataModule.__init__).parameters.items()}
    defaults["source"] = "text"
    return dataclasses.make_dataclass(
        "DocumentOptions", [(n, hints[n], field(default=defaults[n])) for n in DOCUMENT_OPTIONS],
        namespace={"__doc__": "the documents: LMDataModule's options that decide them (see `lightning_bench test "
                              "--help`); --data ALIAS is --data.source ALIAS"})


DocumentOptions = _document_options()


class ExportConfigFile(ConfigFile):
    """this command's options as --print_config writes them, or a fit/test config: its data section gives the
    --data.* options (those that do not change the documents ignored), and every other section (model:,
    trainer:, ...) is ignored; flags given after it override it"""

    @staticmethod
    def options(command: str, path: str) -> dict:
        config = read_config_file(command, path)
        data = config.get("data") or {}
        if isinstance(data, str):  # `data: ptb`, the alias
            data = {"source": data}
        if not isinstance(data, dict):
            raise ConfigError(f"{command}: --config {path}: data: expected a data alias or a mapping of --data.* "
                              f"options, got a {type(data).__name__}")
        if "class_path" in data or "init_args" in data:  # a trainer config's DataModule
            data = data.get("init_args") or {}
        scored_only = set(inspect.signature(LMDataModule.__init__).parameters) - set(DOCUMENT_OPTIONS)
        data = {k: v for k, v in data.items() if k not in scored_only}  # an unknown key is left to the parser
        return {"data": data, **{k: config[k] for k in ("split", "output") if k in config}}


@dataclass
class ExportConfig:
    """export_documents' options (`--config FILE` reads them from YAML under the same names)."""

    output: str
    """the JSON-lines file to write"""
    split: Literal["test", "validation", "valid", "train"] = "test"
    """which split (valid is validation)"""
    data: DocumentOptions = field(default_factory=DocumentOptions)
    """the documents: --data ALIAS (ptb, wikitext2, ..., text) and the --data.* options of `lightning_bench
    test` that decide them"""

    def __post_init__(self):
        if isinstance(self.data, dict):
            self.data = DocumentOptions(**self.data)


def main(argv: list[str]) -> int:
    args = parse_command("export_documents", ExportConfig, argv, __doc__, config_file=ExportConfigFile,
                         spellings={"--config": ["-c"], "--output": ["-o"], "--data.source": ["--data"]})
    from lightning_bench.results.io import check_output

    check_output("-o", args.output, kind="file")  # before the corpus is read

    from lightning_bench.data.sources import write_documents_jsonl

    options = dataclasses.asdict(args.data)
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
