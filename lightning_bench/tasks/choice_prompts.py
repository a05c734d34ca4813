"""Prompt pieces the GLUE and SuperGLUE templates share (styled after lm-evaluation-harness, written here).

A multiple-choice template returns (context, choices, gold): every choice starts with a space and is
scored as a continuation of the context.
"""

YES_NO = (" no", " yes")
TRUE_FALSE = (" True", " False")
ENTAILMENT = ("entailment", "not_entailment")
BINARY = ("0", "1")
BOOL = ("False", "True")


def as_statement(text: str) -> str:
    """A hypothesis read out as a statement ends with a period."""
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def nli(premise: str, hypothesis: str, options: str) -> str:
    return f"{premise}\nQuestion: {as_statement(hypothesis)} {options}?\nAnswer:"


def pair(a: str, b: str, question: str, kind: str = "Sentence") -> str:
    return f"{kind} 1: {a}\n{kind} 2: {b}\nQuestion: {question}\nAnswer:"
