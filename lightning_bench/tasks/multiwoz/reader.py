"""MultiWOZ dialogue state tracking: one row per USER turn.

Row: {"id": "<dialogue_id>/<turn>", "dialogue_id", "turn" (0-based user turn index), "history": [{"speaker":
"user"|"system", "text"}, ...] up to and including this user turn, "belief_state": {"domain-slot": value}
(the gold accumulated state after this user turn), "domains": the dialogue's domains, sorted}.

Slot names follow TRADE (Wu et al., 2019), the naming most MultiWOZ DST work uses: "<domain>-<slot>" in
lower case ("hotel-pricerange", "train-leaveat", "taxi-arriveby"), booking slots "<domain>-book <slot>"
("hotel-book stay", "hotel-book day", "hotel-book people", "restaurant-book time"). Every domain the
file has is kept (police, hospital, bus included); the scorer picks the slots it evaluates. A slot whose
value is empty, "not mentioned" or "none" is left out; values are otherwise kept as written (stripped).

Read:
- MultiWOZ 2.1 as data.json / ConvLab-2's {train,val,test}.json.zip ({dialogue_id: {"goal", "log":
  [turns alternating user, system; a system turn's "metadata" = the belief state per domain with
  "book" and "semi" slots]}}), a `.zip` or the extracted `.json`. As in standard DST preprocessing
  (TRADE's create_data.py), the state after a user turn is the metadata of the system turn that follows
  it; "booked" (the booking result) is not a slot. domains = the goal's non-empty domains.
- MultiWOZ 2.2's dialogues_*.json (a list of {"dialogue_id", "services", "turns": [{"speaker":
  "USER"|"SYSTEM", "utterance", "frames": [{"service", "state": {"slot_values": {slot: [values]}}}]}]}):
  the state is the union of the user turn's frames; 2.2's booking slots ("hotel-bookstay") get TRADE's
  names ("hotel-book stay"). A slot with several acceptable values keeps the first in `belief_state`;
  `belief_state_values` lists them all (2.1 rows have it too, one value a slot). domains = "services". The hub's multi_woz_v22 rows (the same,
  with `datasets`' column layout and speaker 0 = USER) read the same.
"""

from __future__ import annotations

from pathlib import Path

from lightning_bench.tasks.generative_readers import Reader, json_data, need, records
from lightning_bench.errors import ConfigError

EXPECTED = ('MultiWOZ 2.1 dialogues ({dialogue_id: {"goal", "log"}}, e.g. ConvLab-2\'s test.json.zip) or '
            'MultiWOZ 2.2 dialogues_*.json ([{"dialogue_id", "services", "turns"}])')
EMPTY = ("", "not mentioned", "none")
BOOK_SLOTS_22 = {"bookday": "book day", "bookpeople": "book people", "bookstay": "book stay",
                 "booktime": "book time"}


def _file_rows(task, path: Path, start: int = 0) -> list[dict]:
    data = json_data(task.name, path, EXPECTED)
    if isinstance(data, dict) and data and all(isinstance(d, dict) and "log" in d for d in data.values()):
        return from_rows(task, [{"dialogue_id": k} | d for k, d in data.items()], str(path))
    if isinstance(data, list) and data and all(isinstance(d, dict) for d in data):
        return from_rows(task, data, str(path))
    raise ConfigError(f"{task.name}: {path} is not {EXPECTED}")


def from_rows(task, dialogues: list[dict], where: str) -> list[dict]:
    out = []
    for n, dialogue in enumerate(dialogues):
        here = f"{where} dialogue {dialogue.get('dialogue_id', n)}"
        try:
            out += _v21(dialogue) if "log" in dialogue else _v22(task, dialogue, here)
        except ConfigError:  # already one line naming the dialogue (a ValueError too: not wrapped again)
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
            raise ConfigError(f"{task.name}: {here} does not match {EXPECTED} ({type(err).__name__}: {err})") from None
    return out


def _row(dialogue_id: str, turn: int, history: list[dict], state: dict, domains: list[str]) -> dict:
    return {"id": f"{dialogue_id}/{turn}", "dialogue_id": dialogue_id, "turn": turn, "history": list(history),
            "belief_state": state, "domains": domains}


def state_21(metadata: dict) -> dict[str, str]:
    """TRADE-named slots of a MultiWOZ 2.1 system turn's metadata."""
    state = {}
    for domain, slots in metadata.items():
        for kind in ("book", "semi"):
            for slot, value in (slots.get(kind) or {}).items():
                if slot == "booked" or not isinstance(value, str) or value.strip().lower() in EMPTY:
                    continue
                name = f"book {slot.lower()}" if kind == "book" else slot.lower()
                state[f"{domain.lower()}-{name}"] = value.strip()
    return state


def _v21(dialogue: dict) -> list[dict]:
    dialogue_id, log = str(dialogue["dialogue_id"]), dialogue["log"]
    goal = dialogue.get("goal") or {}
    domains = sorted(d for d, g in goal.items() if d not in ("message", "topic") and isinstance(g, dict) and g)
    history, rows = [], []
    for i, turn in enumerate(log):
        history.append({"speaker": "user" if i % 2 == 0 else "system", "text": turn["text"]})
        if i % 2 == 0:
            if i + 1 >= len(log):
                raise ValueError(f"user turn {i // 2} has no system turn after it to take the state from")
            state = state_21(log[i + 1]["metadata"])
            rows.append(_row(dialogue_id, i // 2, history, state, domains)
                        | {"belief_state_values": {k: [v] for k, v in state.items()}})
    return rows


def _slot_22(name: str) -> str:
    domain, _, slot = name.lower().partition("-")
    return f"{domain}-{BOOK_SLOTS_22.get(slot, slot)}"


def _state_22(frames) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for frame in records(frames):
        state = frame.get("state") or {}
        slot_values = state.get("slot_values")
        if slot_values is None and "slots_values" in state:  # the hub's column layout
            slot_values = {r["slots_values_name"]: r["slots_values_list"] for r in records(state["slots_values"])}
        for name, vals in (slot_values or {}).items():
            vals = [v.strip() for v in ([vals] if isinstance(vals, str) else vals) if v.strip().lower() not in EMPTY]
            if vals:
                values[_slot_22(name)] = vals
    return values


def _v22(task, dialogue: dict, where: str) -> list[dict]:
    need(task.name, where, dialogue, ("dialogue_id", "turns"), EXPECTED)
    dialogue_id = str(dialogue["dialogue_id"])
    domains = sorted(dialogue.get("services") or [])
    history, rows = [], []
    for turn in records(dialogue["turns"]):
        user = turn["speaker"] in ("USER", 0, "user")
        history.append({"speaker": "user" if user else "system", "text": turn["utterance"]})
        if user:
            values = _state_22(turn.get("frames"))
            row = _row(dialogue_id, len(rows), history, {k: v[0] for k, v in values.items()}, domains)
            rows.append(row | {"belief_state_values": values})
    return rows


MULTIWOZ = Reader(_file_rows, from_rows)
read, from_hub = MULTIWOZ.read, MULTIWOZ.from_hub
