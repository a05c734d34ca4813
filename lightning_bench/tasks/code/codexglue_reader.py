"""CodeXGLUE code-to-text and line-level code completion.

codexglue_code_to_text (CODE_TO_TEXT): CodeSearchNet JSON lines, plain or `.gz` ({lang}_{split}_N.jsonl.gz,
or CodeXGLUE's cleaned {lang}/{split}.jsonl: repo, path, func_name, original_string, language, code,
code_tokens, docstring, docstring_tokens, ...), and the hub's code_x_glue_ct_code_to_text rows (the same
fields and an int id). Row: {"id" (the row's id / idx, else its row number counted over the files read,
as the hub numbers a split), "language", "code" (CodeXGLUE's model input: ' '.join(code_tokens), white
space collapsed), "code_original", "original_string" (as given), "docstring" (the reference as CodeXGLUE
evaluates it: ' '.join(docstring_tokens), white space collapsed)}.
`code_original` is the function as written WITHOUT its docstring: CodeSearchNet's Python `code` holds
the docstring (the reference) as the first statement of the body, so it is cut out (with its lines);
the other languages keep their documentation comment outside `code`, which is used unchanged.

codexglue_line_completion (LINE_COMPLETION): CodeXGLUE's line-completion files (JSON lines {"input",
"gt"}, an "id" where the evaluator's answers.json has one) and the hub's
code_x_glue_cc_code_completion_line rows (id, input, gt). Row: {"id", "input", "input_raw" (as given),
"gt" (as given)}. `input` is the left context as text: the leading "<s>" dropped and every "<EOL>"
made a line break (each line's edge spaces stripped), since generation stops at "\n": the model has to
see, and end, lines as newlines, not as "<EOL>" tokens. The tokens stay space-separated and literals
stay masked (<STR_LIT>, <NUM_LIT:0>, "" ...), like `gt`, which is kept as given because CodeXGLUE's
evaluator compares the prediction with it as is (exact match over whitespace-split tokens, edit
similarity over the strings). An empty gt (the HF dummy samples have them) is an error: nothing to score.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from lightning_bench.tasks.generative_readers import Reader, json_rows, need, no_reference

# -- code-to-text --------------------------------------------------------------------------------------
CTT_EXPECTED = "CodeSearchNet JSON lines with code, code_tokens, docstring_tokens (CodeXGLUE code-to-text)"


def tokens_text(tokens: list[str], line_breaks: str) -> str:
    """CodeXGLUE's run.py: the tokens joined by spaces, line breaks replaced, white space collapsed."""
    return " ".join(" ".join(tokens).replace("\n", line_breaks).split())


def without_docstring(code: str) -> str:
    """Python `code` less the docstring opening its function's body (and the lines it filled); unchanged
    when there is none, when it shares a line with other code, or when the code does not tokenize."""
    depth, in_header, seen_def = 0, False, False
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if not seen_def:
                seen_def = tok.type == tokenize.NAME and tok.string == "def"
                in_header = seen_def
            elif in_header:
                if tok.type == tokenize.OP and tok.string in ("(", "[", "{"):
                    depth += 1
                elif tok.type == tokenize.OP and tok.string in (")", "]", "}"):
                    depth -= 1
                elif tok.type == tokenize.OP and tok.string == ":" and depth == 0:
                    in_header = False
            elif tok.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.COMMENT):
                return _cut(code, tok) if tok.type == tokenize.STRING else code
    except (tokenize.TokenError, SyntaxError):
        pass
    return code


def _cut(code: str, tok: tokenize.TokenInfo) -> str:
    lines = code.splitlines(keepends=True)
    (first, col), (last, end_col) = tok.start, tok.end
    if lines[first - 1][:col].strip() or lines[last - 1][end_col:].strip():
        return code  # the string shares its line with code: leave it
    return "".join(lines[:first - 1] + lines[last:])


def _ctt_rows(task, rows: list[dict], where: str, start: int = 0) -> list[dict]:
    out = []
    for n, row in enumerate(rows):
        here = f"{where} row {n}"
        need(task.name, here, row, ("code_tokens", "docstring_tokens"), CTT_EXPECTED)
        docstring = tokens_text(row["docstring_tokens"], "")
        if not docstring:
            raise no_reference(task.name, here, "docstring")
        language = row.get("language") or task.source.hub_config or ""
        original = row.get("code", row.get("original_string", ""))
        out.append({"id": str(row.get("id", row.get("idx", start + n))), "language": language,
                    "code": tokens_text(row["code_tokens"], " "),
                    "code_original": without_docstring(original) if language == "python" else original,
                    "original_string": row.get("original_string", original), "docstring": docstring})
    return out


CODE_TO_TEXT = Reader(
    lambda task, path, start=0: _ctt_rows(task, json_rows(task.name, path, CTT_EXPECTED), str(path), start),
    _ctt_rows)

# -- line completion -----------------------------------------------------------------------------------
LINE_EXPECTED = 'CodeXGLUE line-completion JSON lines {"input", "gt"}'


def line_context(raw: str) -> str:
    """The left context as text: "<s>" dropped, "<EOL>" -> a line break, each line's edge spaces stripped."""
    text = re.sub(r"^\s*<s>", "", raw)
    return "\n".join(line.strip() for line in text.split("<EOL>"))


def _line_rows(task, rows: list[dict], where: str, start: int = 0) -> list[dict]:
    out = []
    for n, row in enumerate(rows):
        here = f"{where} row {n}"
        need(task.name, here, row, ("input", "gt"), LINE_EXPECTED)
        if not str(row["gt"]).strip():
            raise no_reference(task.name, here, "gt (the line to complete)")
        out.append({"id": str(row.get("id", start + n)), "input": line_context(row["input"]),
                    "input_raw": row["input"], "gt": row["gt"]})
    return out


LINE_COMPLETION = Reader(
    lambda task, path, start=0: _line_rows(task, json_rows(task.name, path, LINE_EXPECTED), str(path), start),
    _line_rows)
