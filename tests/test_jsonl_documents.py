"""Documents given as JSON lines (`{"text": ...}` a line), the WikiText article boundaries, and the
export of a split's documents as JSON lines (so other tools score the very same documents)."""

import hashlib
import json
import re

import pytest

from lightning_bench.cli import main
from lightning_bench.data import LMDataModule
from lightning_bench.data.sources import (SplitText, load_split, read_documents_jsonl, split_documents,
                                          write_documents_jsonl)
from lightning_bench.errors import ConfigError

# documents with everything a careless reader would change: outer spaces and newlines, blank lines
# inside, a line separator (U+2028, which str.splitlines would cut at), quotes, non-ASCII text
TRICKY = ["  leading and trailing spaces  ", "\nnewline first, blank line inside\n\nand last\n",
          "quote \" backslash \\ tab\t", "na\u00efve caf\u00e9 \u2014 \u65e5\u672c\u8a9e",
          "line\u2028separator\u2029paragraph", " "]

# a WikiText-like split: a " \n" preamble (as the real files open), sub-headings inside articles,
# a trailing blank line, and a line that only looks like a heading
WIKI = (" \n"
        " = Alpha = \n \n alpha text . \n \n = = Early life = = \n \n more alpha . \n \n \n"
        " = Beta = \n \n beta text with = signs = inside . \n \n"
        " = Gamma = \n \n gamma last . \n \n")


def _jsonl(path, rows, end="\n"):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + end for r in rows), encoding="utf-8")
    return path


# ---- reading -------------------------------------------------------------------------------------
def test_each_line_is_one_document_exactly_as_given(tmp_path):
    file = _jsonl(tmp_path / "docs.jsonl", [{"text": d, "id": i} for i, d in enumerate(TRICKY)])
    split = load_split("text", "test", split_path=str(file))
    assert split.documents == TRICKY  # nothing stripped, split or re-joined
    assert split.document_split == "jsonl"
    assert split.text == "\n\n".join(TRICKY)  # the stream token_windows (and fit) read: as blank_lines joins
    # provenance names the file itself: its path and the sha256 of its bytes
    assert split.origin == str(file) and split.sha256 == hashlib.sha256(file.read_bytes()).hexdigest()


def test_blank_lines_crlf_and_a_byte_order_mark_are_fine(tmp_path):
    file = tmp_path / "docs.jsonl"
    file.write_bytes(b'\xef\xbb\xbf{"text": "a"}\r\n\r\n   \n{"text": "b\\r\\n"}\r\n\n')
    assert load_split("text", "test", split_path=str(file)).documents == ["a", "b\r\n"]


def test_text_field_names_the_document_field(tmp_path):
    file = _jsonl(tmp_path / "docs.jsonl", [{"body": "one", "text": "not this"}, {"body": "two"}])
    split = load_split("text", "test", split_path=str(file), text_field="body")
    assert split.documents == ["one", "two"] and "body" in split.origin  # a different field: another origin
    with pytest.raises(ConfigError, match="text_field names the document field of JSON-lines files"):
        load_split("ptb", "test", text_field="body")


@pytest.mark.parametrize("content, message", [
    ('{"text": "ok"}\n{"text": "unterminated}\n', r"line 2 is not valid JSON .*one JSON object per line"),
    ('{"text": "ok"}\n\n{"body": "x", "id": 3}\n', r"line 3 has no 'text' field \(its fields: body, id\); "
                                                   r"add it, or name .* --data.text_field"),
    ('["a list"]\n', r"line 1 is a JSON array, not an object"),
    ('{"text": 7}\n', r"line 1: 'text' is a JSON number, not a string"),
    ('{"text": ""}\n', r"line 1: 'text' is empty .*remove the line"),
    ("", r"is empty"),
    ("\n  \n\n", r"is empty"),
])
def test_bad_files_are_one_line_errors_naming_file_and_line(tmp_path, content, message):
    file = tmp_path / "bad.jsonl"
    file.write_text(content)
    with pytest.raises(ConfigError, match=message) as err:
        load_split("text", "test", split_path=str(file))
    assert str(file) in str(err.value) and "\n" not in str(err.value)


def test_only_blank_lines_in_a_jsonl_text(tmp_path):
    with pytest.raises(ConfigError, match="has no documents"):
        read_documents_jsonl("\n \n", "x.jsonl")


def test_document_split_option(tmp_path):
    rows = [{"text": "first doc"}, {"text": "second doc"}]
    ndjson = _jsonl(tmp_path / "docs.ndjson", rows)  # not named .jsonl: ask for it
    assert load_split("text", "test", split_path=str(ndjson), document_split="jsonl").documents == \
        ["first doc", "second doc"]
    assert len(load_split("text", "test", split_path=str(ndjson)).documents) == 1  # auto: plain text
    jsonl = _jsonl(tmp_path / "docs.jsonl", rows)
    with pytest.raises(ConfigError, match="holds one document per JSON line; --data.document_split lines"):
        load_split("text", "test", split_path=str(jsonl), document_split="lines")
    with pytest.raises(ConfigError, match="document_split jsonl reads JSON-lines files"):
        load_split("ptb", "test", document_split="jsonl")
    with pytest.raises(ConfigError, match="unknown document_split 'pages'"):
        load_split("text", "test", split_path=str(ndjson), document_split="pages")


def test_a_folder_with_test_jsonl(tmp_path):
    _jsonl(tmp_path / "test.jsonl", [{"text": "a b c"}, {"text": "d e"}])
    dm = LMDataModule(source="text", path=str(tmp_path), tokenizer="gpt2", eval_protocol="document_rolling",
                      seq_len=8)
    dm.setup("test")
    assert dm.splits["test"].documents == ["a b c", "d e"]
    units = dm.eval_units("test")
    assert units["tokens"] == sum(len(dm.tokenizer.encode(d)) for d in ["a b c", "d e"])
    assert units["bytes"] == len("a b cd e")


def test_eval_subset_of_jsonl_documents(tmp_path):
    file = _jsonl(tmp_path / "docs.jsonl", [{"text": d} for d in TRICKY])
    dm = LMDataModule(source="text", test_path=str(file), tokenizer="gpt2", eval_protocol="document_rolling",
                      eval_max_documents=2)
    dm.setup("test")
    units = dm.eval_units("test")  # the first two documents, as given
    assert units["bytes"] == sum(len(d.encode()) for d in TRICKY[:2])
    assert units["tokens"] == sum(len(dm.tokenizer.encode(d)) for d in TRICKY[:2])
    test = dm.provenance()["splits"]["test"]
    assert test["sha256"] == hashlib.sha256(file.read_bytes()).hexdigest() and test["documents"] == len(TRICKY)
    assert "first 2 of 6 documents" in test["evaluated_origin"]


def test_fit_on_jsonl_holds_out_whole_documents(tmp_path):
    docs = [f"document {i} : " + " ".join(["the cat sat on the mat ."] * 5) for i in range(20)]
    file = _jsonl(tmp_path / "train.jsonl", [{"text": d} for d in docs])
    dm = LMDataModule(source="text", train_path=str(file), tokenizer="word", seq_len=8, val_fraction=0.1)
    dm.setup("fit")
    train, val = dm.splits["train"], dm.splits["validation"]
    assert train.documents + val.documents == docs and len(val.documents) == 2  # ~10 %, no document cut
    assert train.text == "\n\n".join(train.documents) and "held out: last 2 of 20 documents" in val.origin
    assert next(iter(dm.train_dataloader()))["input_ids"].shape[1] == 8


def test_cli_test_scores_jsonl_documents(tmp_path, capsys):
    file = _jsonl(tmp_path / "docs.jsonl", [{"text": d} for d in ["a b c d e f", "g h\n\ni j", " k l "]])
    argv = ["test", "--model", "transformer", "--model.n_layer", "1", "--model.d_model", "32",
            "--model.n_head", "2", "--data", "text", "--data.test_path", str(file), "--data.tokenizer", "gpt2",
            "--data.seq_len", "4", "--data.eval_protocol", "document_rolling", "--trainer.enable_progress_bar",
            "false", "--trainer.enable_model_summary", "false", "--results_dir", "r"]
    assert main(argv) in (0, None), capsys.readouterr().err
    record = json.loads(next((tmp_path / "r").glob("*_test.json")).read_text())
    test = record["meta"]["data"]["splits"]["test"]
    assert test["origin"] == str(file) and test["sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
    from lightning_bench.data.tokenization import build_tokenizer

    gpt2 = build_tokenizer("gpt2")
    expected = sum(len(gpt2.encode(d)) for d in ["a b c d e f", "g h\n\ni j", " k l "])
    assert record["meta"]["evaluation_protocol"]["units"]["tokens"] == expected


# ---- WikiText article boundaries -------------------------------------------------------------------
def test_wikitext_articles_run_from_heading_to_next_heading_exactly():
    docs = split_documents(WIKI, "auto")
    assert docs == [" = Alpha = \n \n alpha text . \n \n = = Early life = = \n \n more alpha . \n \n \n",
                    " = Beta = \n \n beta text with = signs = inside . \n \n",
                    " = Gamma = \n \n gamma last . \n \n"]
    # the articles are the file from the first heading on, cut before each heading line: what another
    # tool splitting on headings gets (the blank " \n" preamble belongs to no article)
    assert "".join(docs) == WIKI[len(" \n"):]
    assert docs == [d for d in re.split(r"(?m)^(?= = [^=].* = $)", WIKI) if d.strip()]


def test_wikitext_text_before_the_first_heading():
    assert split_documents(" \n \n = A = \n a \n", "wikitext_articles") == [" = A = \n a \n"]
    assert split_documents(" intro . \n = A = \n a", "wikitext_articles") == [" intro . \n", " = A = \n a"]
    assert split_documents(" = A = \n = B = \n", "wikitext_articles") == [" = A = \n", " = B = \n"]
    assert split_documents(" = \n x = \n", "auto") == [" = \n x = "]  # no heading across two lines


def test_other_document_splits_are_unchanged():
    assert split_documents("x\n\ny\nz\n", "lines") == ["x", "y", "z"]
    assert split_documents("x\n\ny\nz\n", "blank_lines") == ["x", "y\nz"]
    assert split_documents("\nx\n\ny\n", "whole") == ["x\n\ny"]


def test_document_cache_key_follows_the_boundaries():
    a = SplitText("abc", ["ab", "c"], "o")
    b = SplitText("abc", ["a", "bc"], "o")
    assert a.sha256 == b.sha256 and a.documents_sha256 != b.documents_sha256


# ---- export and round trip ---------------------------------------------------------------------------
@pytest.mark.parametrize("documents", [TRICKY, split_documents(WIKI, "auto")])
def test_write_documents_jsonl_round_trip(tmp_path, documents):
    path = write_documents_jsonl(SplitText("".join(documents), documents, "mem"), tmp_path / "out" / "d.jsonl")
    lines = path.read_text(encoding="utf-8").split("\n")
    assert len(lines) == len(documents) + 1 and lines[-1] == ""  # one object a line, newline-terminated
    assert [json.loads(line)["text"] for line in lines[:-1]] == documents
    assert load_split("text", "test", split_path=str(path)).documents == documents
    write_documents_jsonl(documents, tmp_path / "b.jsonl", text_field="page")
    assert load_split("text", "test", split_path=str(tmp_path / "b.jsonl"), text_field="page").documents == documents


def test_export_command_writes_what_a_run_would_score(tmp_path, capsys):
    wiki = tmp_path / "wiki" / "test.txt"
    wiki.parent.mkdir()
    wiki.write_text(WIKI, encoding="utf-8")
    out = tmp_path / "first2.jsonl"
    assert main(["export_documents", "--data", "text", "--data.path", str(wiki.parent),
                 "--data.eval_max_documents", "2", "--output", str(out)]) == 0
    assert "2 documents of" in capsys.readouterr().out
    exported = load_split("text", "test", split_path=str(out)).documents
    assert exported == split_documents(WIKI, "auto")[:2]

    # same tokens scored both ways: the wikitext file cut to 2 articles and the exported file
    def units(**kw):
        dm = LMDataModule(source="text", tokenizer="gpt2", eval_protocol="document_rolling", **kw)
        dm.setup("test")
        return dm.eval_units("test")

    assert units(path=str(wiki.parent), eval_max_documents=2) == units(test_path=str(out))


def test_export_command_reads_a_config_and_bad_input_is_one_line(tmp_path, capsys):
    wiki = tmp_path / "test.txt"
    wiki.write_text(WIKI, encoding="utf-8")
    config = tmp_path / "c.yaml"
    config.write_text(f"model: {{class_path: x}}\ndata:\n  class_path: lightning_bench.data.LMDataModule\n"
                      f"  init_args: {{source: text, test_path: {wiki}, eval_max_documents: 1, seq_len: 9}}\n")
    assert main(["export_documents", "--config", str(config), "-o", "all.jsonl",
                 "--data.eval_max_documents", "null"]) == 0
    assert load_split("text", "test", split_path="all.jsonl").documents == split_documents(WIKI, "auto")
    with pytest.raises(SystemExit) as exit_:
        main(["export_documents", "--data", "text", "--data.test_path", "missing.txt", "-o", "x.jsonl"])
    assert exit_.value.code == 2 and "data file 'missing.txt' does not exist" in capsys.readouterr().err
