"""Writes tests/fixtures/kvpress/prompts.json: kvpress's own tokens for unified rows, the reference of
tests/test_kvpress_prompts.py (kvpress is not installed in the project's environment, so its output is kept).

    /tmp/kvpress_venv/bin/python benchmarks/kvpress_prompts.py [--model ~/.cache/lightning_bench/smollm2-135m-instruct]

For each row of tests/fixtures/kvpress/rows.jsonl and each protocol, kvpress 0.5.5's
`KVPressTextGenerationPipeline.preprocess` (called, not copied): `context_ids` is what its press compresses,
`questions_ids[0]` what it feeds after. Query-aware is its evaluation's `query_aware`: the question moved into
the context, the question left empty.
"""

from __future__ import annotations

import argparse
import json
import os
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "kvpress"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.path.expanduser("~/.cache/lightning_bench/smollm2-135m-instruct"))
    args = parser.parse_args()
    from kvpress.pipeline import KVPressTextGenerationPipeline
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    pipeline = SimpleNamespace(tokenizer=tokenizer)  # preprocess reads only the tokenizer
    rows = [json.loads(line) for line in (FIXTURES / "rows.jsonl").read_text().splitlines()]
    out = {"kvpress": version("kvpress"), "transformers": version("transformers"), "model": Path(args.model).name,
           "prompts": []}
    for index, row in enumerate(rows):
        for protocol in ("query_agnostic", "query_aware"):
            context, question = row["context"], row["question"]
            if protocol == "query_aware":
                context, question = context + question, ""
            made = KVPressTextGenerationPipeline.preprocess(pipeline, context, [question], row["answer_prefix"], 10 ** 9)
            out["prompts"].append({"row": index, "protocol": protocol, "context_ids": made["context_ids"][0].tolist(),
                                   "question_ids": made["questions_ids"][0][0].tolist()})
    (FIXTURES / "prompts.json").write_text(json.dumps(out) + "\n")
    print(f"wrote {FIXTURES / 'prompts.json'}: {len(out['prompts'])} prompts")


if __name__ == "__main__":
    main()
