"""RULER: the 13 definitions, the generator (lengths within 1% after tokenization, needles at the requested
depth, deterministic per seed, every task at 4096 and 8192 for SmolLM2's tokenizer), the reader (generated
files, RULER's own files, hub rows, broken files refused in one line) and string_match_all / part."""

import bisect
import json
import re
import shutil
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from lightning_bench.tasks.ruler.generate import SPECS, TASK_NAMES, generate_task, main, write_rows
from lightning_bench.tasks import BENCHMARKS, check_definition, get_task, load_rows
from lightning_bench.tasks.ruler.reader import READERS
from lightning_bench.errors import ConfigError, MissingData
from lightning_bench.tasks.generative_scoring import score_generative
from lightning_bench.tasks.ruler.scorer import postprocess, string_match_all, string_match_part

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ruler"
FAMILY_TOKENS = {"niah": 128, "vt": 30, "cwe": 120, "fwe": 50, "qa": 32}


@lru_cache(maxsize=1)
def tokenizer(path: str):
    from lightning_bench.data.tokenization import build_tokenizer

    return build_tokenizer(path)


def _one_line(err) -> str:
    text = str(err.value)
    assert "\n" not in text, text
    return text


def _hotpotqa_file(shared_data: Path, tmp_path: Path) -> Path:
    """A HotpotQA-layout file (question, answer, context [[title, sentences]], supporting_facts) made of
    SQuAD paragraphs: HotpotQA itself is not available offline."""
    squad = json.loads((shared_data / "squad_v2.0" / "dev-v2.0.cs224n_subset.json").read_text())
    rows = []
    for article in squad["data"][:10]:
        paragraphs = article["paragraphs"][:10]
        context = [[f"{article['title']} {j}", [p["context"]]] for j, p in enumerate(paragraphs)]
        for j, p in enumerate(paragraphs[:2]):
            qa = next(q for q in p["qas"] if q["answers"])
            rows.append({"question": qa["question"], "answer": qa["answers"][0]["text"], "context": context,
                         "supporting_facts": [[f"{article['title']} {j}", 0]]})
    path = tmp_path / "hotpot_tiny.json"
    path.write_text(json.dumps(rows))
    return path


# ---- definitions and scores ----------------------------------------------------------------------------
def test_thirteen_definitions_pass_check_definition():
    group = BENCHMARKS["ruler"]
    assert group.aggregation == "task_means" and group.tasks == tuple(f"ruler/{t}" for t in TASK_NAMES)
    assert len(group.tasks) == 13
    for name in group.tasks:
        task = get_task(name)
        assert check_definition(task) == [], name
        assert task.benchmark == "ruler" and task.scorer == "ruler" and task.source.format == "ruler"
        gen = task.generation
        # the model's chat template where it has one (--chat_template auto), the row's answer prefix after it
        assert gen.document == "context" and gen.stop == () and gen.chat is True
        assert gen.answer_prefix_field == "answer_prefix"
        kind = "niah" if task.short_name.startswith("niah") else task.short_name.split("_")[0]
        assert gen.max_new_tokens == FAMILY_TOKENS[kind]
    row = {"context": "C ", "question": "Q?", "answer_prefix": " A:", "outputs": ["x"]}
    assert get_task("ruler/vt").template(row) == ("C Q?", ("x",))  # the user's text; the prefix follows it
    assert get_task("ruler/vt").generation.answer_start(row) == (" A:", "")


def test_string_match_all_and_part_by_hand():
    # string_match_all: the fraction of the references inside the prediction, case-insensitive, x100
    refs = ["7083019", "8289267", "4890493", "KZWKL"]
    assert string_match_all("The numbers are 7083019 and 4890493, and kzwkl.", refs) == 75.0
    assert string_match_all("nothing", refs) == 0.0
    # string_match_part: 100 if any reference is inside
    assert string_match_part("It is in france.", ["France", "the French Republic"]) == 100.0
    assert string_match_part("Germany", ["France", "the French Republic"]) == 0.0
    # RULER's post-processing: strip, control characters -> newline, strip
    assert postprocess("  12\x0334\x00 ") == "12\n34"
    assert string_match_all(postprocess("12\x0334"), ["1234"]) == 0.0

    rows = [{"outputs": ["a1", "b2"], "depth": 50.0}, {"outputs": ["c3"], "depth": 0.0},
            {"outputs": ["d4"], "depth": 50.0}]
    pairs = [(type("R", (), {"row": r}), {"prediction": p}) for r, p in zip(rows, ["A1 and x", "c3", "  \x00 "])]
    figures, per = score_generative(get_task("ruler/niah_multivalue"), pairs)
    assert [s["string_match"] for s in per] == [50.0, 100.0, 0.0]
    assert figures["string_match"] == 50.0 and figures["metric"] == "string_match_all"
    assert figures["null_predictions"] == 1 and figures["by_depth"] == {"0": 100.0, "50": 25.0}
    figures, per = score_generative(get_task("ruler/qa_1"), pairs)
    assert [s["string_match"] for s in per] == [100.0, 100.0, 0.0] and figures["metric"] == "string_match_part"


# ---- the generator -------------------------------------------------------------------------------------------
def test_every_task_at_4096_and_8192_within_one_percent(smollm2_dir, shared_data, tmp_path):
    tok = tokenizer(str(smollm2_dir))
    hotpot = _hotpotqa_file(shared_data, tmp_path)
    for length in (4096, 8192):
        for task in TASK_NAMES:
            (row,) = generate_task(task, tok, length, 1, seed=3, hotpotqa=hotpot)
            max_new = get_task(f"ruler/{task}").generation.max_new_tokens
            assert row["length"] == len(tok.encode(row["input"])) + max_new == len(tok.encode(
                row["context"] + row["question"] + row["answer_prefix"])) + max_new, task
            assert 0.99 * length <= row["length"] <= length, (task, length, row["length"])
            assert row["input"] == row["context"] + row["question"] + row["answer_prefix"]
            assert row["target_length"] == length and row["max_new_tokens"] == max_new and row["task"] == task
            assert row["outputs"] and all(o in row["context"] for o in row["outputs"]), task  # the gold is there
            assert row["question"] and row["question"] not in row["context"][-200:]
            assert set(row) >= {"index", "input", "outputs", "length", "context", "question", "answer_prefix",
                                "max_new_tokens", "depth", "target_length"}


ESSAY_TASKS = tuple(t for t in TASK_NAMES if SPECS[t][1].get("haystack") == "essay")


def test_essay_tasks_at_4096_and_8192_on_pg19_within_one_percent(smollm2_dir, shared_data):
    """The long_context preset's haystack (--haystack essay --essay ../shared/data/pg19) at both lengths."""
    assert ESSAY_TASKS == ("niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multivalue", "niah_multiquery")
    tok = tokenizer(str(smollm2_dir))
    books = sorted((shared_data / PG19).rglob("*.txt"))  # a folder's .txt files, in name order
    text = " ".join(" ".join(f.read_text(encoding="utf-8").split()) for f in books)
    for length in (4096, 8192):
        for task in ESSAY_TASKS:
            (row,) = generate_task(task, tok, length, 1, seed=3, haystack="essay", essay=shared_data / PG19)
            max_new = get_task(f"ruler/{task}").generation.max_new_tokens
            assert row["length"] == len(tok.encode(row["input"])) + max_new, task
            assert 0.99 * length <= row["length"] <= length, (task, length, row["length"])
            assert row["haystack"] == "essay" and row["target_length"] == length
            assert all(f" is: {value}." in row["context"] for value in row["outputs"]), task
            # the haystack, its needles taken out, is the books' text from their start (RULER: haystack[:n])
            body = row["context"].split("\n", 1)[1]
            prose = " ".join(NEEDLE_SENTENCE.sub(" ", body).split())
            assert len(tok.encode(prose)) > 0.9 * length and text.startswith(prose), (task, length)


# ---- depth: where the answer sits in the tokenized haystack --------------------------------------------------
# RULER's depth: the needle (qa: the gold paragraph) is inserted at depth% of the haystack, 0 = before its first
# unit, 100 = after its last (RULER: insertion_positions = int(len(haystack_sentences) * depth / 100)). Measured
# here on the context as the model reads it: the haystack's tokens before the answer's first token, as a
# fraction of the haystack's tokens, the inserted needles / gold paragraphs left out of both counts.
# Tolerance: an insertion can only go between two units of the haystack (a noise line, 25 tokens; a distractor
# needle, 20-80; an essay sentence; a document, 50-500), so the boundary nearest depth% is at most half the
# unit around it away: half the larger of the two units beside the answer, in tokens, plus JOIN_SLACK tokens
# (a unit tokenized on its own and inside the text may differ by a merge at its edges).
JOIN_SLACK = 2
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")  # the module's documented sentence rule
LINE_END = re.compile(r"\n")
DOCUMENT_END = re.compile(r"\n\n(?=Document \d+:\n)")
NEEDLE_SENTENCE = re.compile(r"One of the special magic (?:numbers|uuids) for \S+ is: \S+\.")
PG19 = "pg19"  # the long_context preset's essay haystack (--haystack essay --essay ../shared/data/pg19)


def _depths_in_haystack(tok, context: str, start: int, end: int, separator, items, answers):
    """For each answer (a character position: the start of one of `items`), (haystack tokens before it,
    haystack tokens, tolerance in tokens) in context[start:end] split into units at `separator`; `items` are
    the (start, end) character spans of the inserted needles / paragraphs, left out of the counts."""
    enc = tok.tok(context, add_special_tokens=False, return_offsets_mapping=True)
    ends = [e for _, e in enc["offset_mapping"]]
    token_at = lambda char: bisect.bisect_right(ends, char)  # noqa: E731 (the token holding the character)
    cuts = {start} | {m.end() for m in separator.finditer(context, start, end)}
    for a, b in items:  # an inserted item is a unit of its own, wherever it was put
        cuts |= {a, b + len(context[b:end]) - len(context[b:end].lstrip())}
    cuts = sorted(c for c in cuts if c < end)
    inserted = {a for a, _ in items}
    units = [(cut in inserted, token_at(nxt) - token_at(cut)) for cut, nxt in zip(cuts, cuts[1:] + [end])]
    haystack = sum(n for own, n in units if not own)
    out = []
    for answer in answers:
        assert answer in inserted, (answer, context[answer - 40:answer + 40])
        k = cuts.index(answer)
        first = tok.decode(enc["input_ids"][token_at(answer):token_at(answer) + 6]).lstrip()
        assert context[answer:].startswith(first), (first, context[answer:answer + 40])  # the answer starts a token
        before = sum(n for own, n in units[:k] if not own)
        beside = [next((n for own, n in reversed(units[:k]) if not own), 0),
                  next((n for own, n in units[k:] if not own), 0)]
        out.append((before, haystack, max(beside) / 2 + JOIN_SLACK))
    return out


def _assert_at(row, depths, measured):
    for depth, (before, haystack, tolerance) in zip(depths, measured, strict=True):
        wanted = depth / 100 * haystack
        assert abs(before - wanted) <= tolerance, (
            f"{row['task']} at {row['target_length']}: asked for {depth}%, found at {100 * before / haystack:.2f}% "
            f"of {haystack} haystack tokens ({before - wanted:+.1f} tokens; tolerance {tolerance:.1f})")


def _needle_depths(tok, row):
    """The measured place of each of the row's answer needles (in `outputs` order)."""
    context = row["context"]
    assert context.count("\n", 0, context.index("\n") + 1) == 1 and context.endswith("\n")
    start, end = context.index("\n") + 1, len(context) - 1  # the intro line | the haystack | "\n"
    needles = [(m.start(), m.end()) for m in NEEDLE_SENTENCE.finditer(context, start, end)]
    answers = [context.rindex("One of the special magic", 0, context.index(f" is: {value}."))
               for value in row["outputs"]]
    # noise and essay haystacks hold no needle of their own: every needle there was inserted; a haystack of
    # distractor needles (niah_multikey_2/3) had only the answer needles inserted into it
    items = needles if row["haystack"] != "needle" else [(a, b) for a, b in needles if a in answers]
    separator = SENTENCE_END if row["haystack"] == "essay" else LINE_END
    return _depths_in_haystack(tok, context, start, end, separator, items, answers)


def _gold_depth(tok, row, gold_paragraphs):
    """The measured place of a qa row's gold paragraph(s) (inserted together: the first one's place)."""
    context = row["context"]
    start = context.index("given documents.\n\n") + len("given documents.\n\n")
    end = len(context) - 2  # the documents | "\n\n"
    items = []
    for gold in gold_paragraphs:
        found = [m.span() for m in re.finditer(r"Document \d+:\n" + re.escape(gold) + r"(?=\n\n)", context)]
        assert len(found) == 1, (row["task"], gold[:60], found)
        items += found
    return _depths_in_haystack(tok, context, start, end, DOCUMENT_END, items, [min(a for a, _ in items)])


def _squad_gold(shared_data: Path, question: str) -> list[str]:
    squad = json.loads((shared_data / "squad_v2.0" / "dev-v2.0.cs224n_subset.json").read_text())
    return list({p["context"] for a in squad["data"] for p in a["paragraphs"] for q in p["qas"]
                 if q["question"] == question and q["answers"]})


def _hotpot_gold(hotpot: Path, question: str) -> list[str]:
    row = next(r for r in json.loads(hotpot.read_text()) if r["question"] == question)
    titles = {title for title, _ in row["supporting_facts"]}
    return [f"{title}\n{''.join(sentences)}" for title, sentences in row["context"] if title in titles]


NIAH_CASES = (("niah_single_1", "noise"), ("niah_single_2", "essay"), ("niah_multikey_1", "essay"),
              ("niah_multikey_2", "noise"), ("niah_multikey_3", "noise"), ("niah_multivalue", "essay"))


@pytest.mark.parametrize("depth", [0, 25, 50, 75, 100])
def test_needles_at_the_requested_depth_of_the_haystack(depth, smollm2_dir, shared_data):
    tok = tokenizer(str(smollm2_dir))
    for task, haystack in NIAH_CASES:
        (row,) = generate_task(task, tok, 4096, 1, seed=5, depth=depth, haystack=haystack, essay=shared_data / PG19)
        assert row["depth"] == depth and row["needle_depths"] == [depth] * len(row["outputs"])
        assert row["haystack"] == {"niah_multikey_2": "needle", "niah_multikey_3": "needle"}.get(task, haystack)
        _assert_at(row, row["needle_depths"], _needle_depths(tok, row))


@pytest.mark.parametrize("depth", [0, 25, 50, 75, 100])
def test_gold_paragraph_at_the_requested_depth(depth, smollm2_dir, shared_data, tmp_path):
    tok = tokenizer(str(smollm2_dir))
    hotpot = _hotpotqa_file(shared_data, tmp_path)
    for task, gold in (("qa_1", lambda q: _squad_gold(shared_data, q)), ("qa_2", lambda q: _hotpot_gold(hotpot, q))):
        (row,) = generate_task(task, tok, 4096, 1, seed=5, depth=depth, hotpotqa=hotpot)
        assert row["depth"] == depth
        question = row["question"].split("\n\nQuestion: ", 1)[1]
        paragraphs = gold(question)
        assert paragraphs and all(any(a in p for p in paragraphs) for a in row["outputs"])  # the gold holds the answer
        _assert_at(row, [depth], _gold_depth(tok, row, paragraphs))


def test_drawn_depths_are_recorded_per_needle(smollm2_dir, shared_data):
    tok = tokenizer(str(smollm2_dir))
    ruler_depths = {float(d) for d in np.round(np.linspace(0, 100, 40))}  # RULER's depths
    for task, haystack in (("niah_multivalue", "noise"), ("niah_multiquery", "essay"), ("niah_multikey_1", "essay")):
        for row in generate_task(task, tok, 4096, 2, seed=11, haystack=haystack, essay=shared_data / PG19,
                                 depths="drawn"):
            depths = row["needle_depths"]
            assert len(depths) == len(row["outputs"]) and row["depth"] == depths[0]
            assert set(depths) <= ruler_depths and len(set(depths)) == len(depths)  # drawn without replacement
            _assert_at(row, depths, _needle_depths(tok, row))


def test_stratified_depths_cover_rulers_forty_depths(smollm2_dir):
    """By default row i of n puts its answer needle at DEPTHS[floor(i * 40 / n)]: n = 40 covers each of
    RULER's 40 depths once, n = 10 every fourth, and every row records the depth it was given."""
    tok = tokenizer(str(smollm2_dir))
    ruler_depths = [float(d) for d in np.round(np.linspace(0, 100, 40))]
    rows = generate_task("niah_single_1", tok, 512, 40, seed=3)
    assert [r["depth"] for r in rows] == ruler_depths
    assert all(r["needle_depths"] == [r["depth"]] for r in rows)
    ten = generate_task("niah_multikey_1", tok, 512, 10, seed=3)
    assert [r["depth"] for r in ten] == ruler_depths[::4]
    drawn = generate_task("niah_single_1", tok, 512, 10, seed=3, depths="drawn")
    assert [r["depth"] for r in drawn] != ruler_depths[::4] and set(r["depth"] for r in drawn) <= set(ruler_depths)
    with pytest.raises(ConfigError, match="depth rule"):
        generate_task("niah_single_1", tok, 512, 2, depths="evenly")


def test_the_depth_measure_follows_a_moved_needle(smollm2_dir, shared_data, tmp_path):
    """The checks above can fail: moved in a copy of a row, the needle (gold paragraph) is measured where it
    went, and refused at the depth the row records."""
    tok = tokenizer(str(smollm2_dir))
    (row,) = generate_task("niah_single_1", tok, 4096, 1, seed=5, depth=50)
    ((before, haystack, tolerance),) = _needle_depths(tok, row)
    lines = row["context"].split("\n")
    i = next(i for i, line in enumerate(lines) if line.startswith("One of the special magic"))
    moved = lines[:i] + lines[i + 1:i + 6] + [lines[i]] + lines[i + 6:]  # 5 noise lines later
    ((after, total, _),) = measured = _needle_depths(tok, {**row, "context": "\n".join(moved)})
    assert set(lines[i + 1:i + 6]) == {lines[i + 1]} and total == haystack
    assert after - before == 5 * len(tok.encode(lines[i + 1] + "\n")) > 4 * tolerance
    with pytest.raises(AssertionError, match="asked for 50.0%"):
        _assert_at(row, row["needle_depths"], measured)

    hotpot = _hotpotqa_file(shared_data, tmp_path)
    (row,) = generate_task("qa_2", tok, 4096, 1, seed=5, depth=25, hotpotqa=hotpot)
    gold = _hotpot_gold(hotpot, row["question"].split("\n\nQuestion: ", 1)[1])
    ((before, haystack, _),) = _gold_depth(tok, row, gold)
    doc = re.search(r"Document \d+:\n" + re.escape(gold[0]) + "\n\n", row["context"]).group()
    last = row["context"].replace(doc, "")[:-2] + "\n\n" + doc  # the gold paragraph moved after the last one
    ((after, total, _),) = measured = _gold_depth(tok, {**row, "context": last}, gold)
    assert before < 0.5 * haystack and after == total and abs(total - haystack) <= 2
    with pytest.raises(AssertionError, match="asked for 25%"):
        _assert_at(row, [25], measured)


def test_cwe_worked_example_is_written_as_rulers(smollm2_dir):
    """RULER joins the worked example's answer to "are:" with a space (template + ' ' + numbered words)."""
    (row,) = generate_task("cwe", tokenizer(str(smollm2_dir)), 1024, 1)
    assert "most often in the list are: 1. " in row["context"] and "are:1." not in row["context"]


def test_deterministic_per_seed_and_sample(smollm2_dir):
    tok = tokenizer(str(smollm2_dir))
    for task in ("niah_multikey_3", "vt", "cwe", "fwe", "qa_1"):
        first = generate_task(task, tok, 1024, 2, seed=42)
        assert generate_task(task, tok, 1024, 2, seed=42) == first
        # sample 0 does not depend on the count (its stratified depth is DEPTHS[0] at any count)
        assert generate_task(task, tok, 1024, 1, seed=42) == first[:1]
        other = generate_task(task, tok, 1024, 2, seed=43)
        assert [r["input"] for r in other] != [r["input"] for r in first], task
        assert first[0]["input"] != first[1]["input"]


def test_generator_errors_are_one_line(smollm2_dir, tmp_path):
    tok = tokenizer(str(smollm2_dir))
    with pytest.raises(ConfigError, match="too short") as err:
        generate_task("cwe", tok, 200, 1)
    _one_line(err)
    with pytest.raises(MissingData, match="HotpotQA") as err:
        generate_task("qa_2", tok, 1024, 1, hotpotqa=tmp_path / "absent.json")
    _one_line(err)
    with pytest.raises(ConfigError, match="unknown RULER task") as err:
        generate_task("niah_single_9", tok, 1024, 1)
    with pytest.raises(ConfigError, match="depth applies to the niah and qa") as err:
        generate_task("vt", tok, 1024, 1, depth=50)
    short = tmp_path / "short.txt"
    short.write_text("A short text. " * 60)
    with pytest.raises(ConfigError, match="runs out") as err:
        generate_task("niah_single_2", tok, 4096, 1, haystack="essay", essay=short)
    _one_line(err)


def test_cli_writes_length_folders_and_a_manifest(smollm2_dir, tmp_path, capsys):
    out = tmp_path / "data" / "ruler"
    assert main(["--tokenizer", str(smollm2_dir), "--data_dir", str(out), "--lengths", "4096", "1024", "--tasks",
                 "niah_single_1", "vt", "--num_samples", "2", "--seed", "9", "--depth", "40"]) == 0
    assert sorted(p.name for p in (out / "4096").iterdir()) == ["manifest.json", "niah_single_1.jsonl", "vt.jsonl"]
    manifest = json.loads((out / "1024" / "manifest.json").read_text())
    assert manifest["vt"]["rows"] == 2 and manifest["vt"]["seed"] == 9 and manifest["vt"]["target_length"] == 1024
    rows = load_rows("ruler/vt", "eval", data_dir=tmp_path / "data")  # split test = the 4096 folder
    # SmolLM2's chat template (30 tokens) counted in the length, as RULER's --model_template_token
    assert manifest["vt"]["model_template_tokens"] == 30
    written = [json.loads(line) for line in (out / "4096" / "vt.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(4055 <= r["length_w_model_temp"] == r["length"] + 30 <= 4096 for r in written)
    niah = load_rows("ruler/niah_single_1", "4096", data_dir=tmp_path / "data")
    assert niah[0]["target_length"] == 4096 and niah[0]["depth"] == 40 and rows[0]["depth"] is None  # vt: no needle
    assert not list(out.rglob(".*.tmp"))  # atomic writes leave no temporary file
    assert "ruler/vt @1024: 2 rows" in capsys.readouterr().out
    with pytest.raises(MissingData, match="qa_2 needs HotpotQA") as err:
        main(["--tokenizer", str(smollm2_dir), "--data_dir", str(out), "--tasks", "qa_2", "--hotpotqa",
              str(tmp_path / "none.json")])
    _one_line(err)


# ---- the reader -----------------------------------------------------------------------------------------------
def test_reader_reads_generated_files_from_the_layout(tmp_path):
    folder = tmp_path / "ruler" / "4096"
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / "niah_single_1.300.jsonl", folder / "niah_single_1.jsonl")
    rows, origin = load_rows("ruler/niah_single_1", "eval", data_dir=tmp_path, with_origin=True)
    raw = [json.loads(line) for line in (FIXTURES / "niah_single_1.300.jsonl").read_text().splitlines()]
    assert origin["files"][0]["path"].endswith("ruler/4096/niah_single_1.jsonl") and "generate_ruler" in origin["note"]
    assert [r["id"] for r in rows] == ["0", "1"]
    for row, original in zip(rows, raw):
        for key in ("input", "context", "question", "answer_prefix", "outputs", "length", "depth", "max_new_tokens"):
            assert row[key] == original[key], key
    text, answers = get_task("ruler/niah_single_1").template(rows[0])
    prefix, joiner = get_task("ruler/niah_single_1").generation.answer_start(rows[0])
    assert text + joiner + prefix == raw[0]["input"] and answers == tuple(raw[0]["outputs"])


def test_reader_splits_rulers_own_rows():
    rows = load_rows("ruler/vt", "eval", paths=FIXTURES / "ruler_format_vt.700.jsonl")
    assert len(rows) == 2
    for row in rows:
        assert row["context"].endswith("\n") and row["question"].startswith("Question: Find all variables")
        assert row["answer_prefix"].startswith(" Answer: According to the chain(s)")
        assert row["context"] + row["question"] + row["answer_prefix"] == row["input"]
        assert row["context"].count("Question: Find all variables") == 1  # the worked example stays in the context
        assert row["max_new_tokens"] == 30 and row["depth"] is None and len(row["outputs"]) == 5


def test_reader_refuses_broken_files_in_one_line(tmp_path):
    good = [json.loads(line) for line in (FIXTURES / "niah_single_1.300.jsonl").read_text().splitlines()]
    cases = {
        "a vt row": [{**good[0], "task": "vt"}],
        "no outputs": [{k: v for k, v in good[0].items() if k != "outputs"}],
        "input is not context": [{**good[0], "input": good[0]["input"] + " extra"}],
        "no RULER niah question": [{"index": 0, "input": "just some text", "outputs": ["1"]}],
        "neither input nor context": [{"index": 0, "outputs": ["1"]}],
        "max_new_tokens must be": [{**good[0], "max_new_tokens": 0}],
    }
    for message, rows in cases.items():
        path = write_rows(tmp_path / "broken.jsonl", rows)
        with pytest.raises(ConfigError, match=message) as err:
            load_rows("ruler/niah_single_1", "eval", paths=path)
        _one_line(err)
    with pytest.raises(MissingData, match="generated with `lightning_bench generate_ruler") as err:
        load_rows("ruler/vt", "eval", data_dir=tmp_path / "empty")  # no ruler/4096/vt.jsonl there
    _one_line(err)
    (tmp_path / "bad.jsonl").write_text('{"index": 0}\nnot json\n')
    with pytest.raises(ConfigError, match="line 2 is not a JSON object") as err:
        load_rows("ruler/niah_single_1", "eval", paths=tmp_path / "bad.jsonl")
    _one_line(err)


def test_hub_rows_keep_their_task():
    reader = READERS["ruler"]
    hub = [{"context": "Some special magic numbers are hidden ... 1234.\n",
            "question": "What is the special magic number for x mentioned in the provided text? ",
            "answer_prefix": "The special magic number for x mentioned in the provided text is", "answer": ["1234"],
            "task": "niah_single_1", "max_new_tokens": 128},
           {"context": "c\n", "question": "Question: q?", "answer_prefix": " Answer:", "answer": ["a"], "task": "cwe",
            "max_new_tokens": 120}]
    rows = reader.from_hub(get_task("ruler/niah_single_1"), "test", hub)
    assert len(rows) == 1 and rows[0]["outputs"] == ["1234"] and rows[0]["target_length"] == 4096
    assert rows[0]["input"] == hub[0]["context"] + hub[0]["question"] + hub[0]["answer_prefix"]
    with pytest.raises(ConfigError, match="holds no vt rows") as err:
        reader.from_hub(get_task("ruler/vt"), "test", hub)
    _one_line(err)
