"""MultiWOZ dialogue state tracking: joint goal accuracy and slot accuracy of generated belief states.

The standard followed is TRADE's (Wu et al. 2019, jasonwu0731/trade-dst), the MultiWOZ 2.1 DST evaluation
most later work reuses: its 30 slots of five domains, its value clean-up, its slot accuracy. Hand-written
because TRADE is a training repository, not a package; each rule below says where it comes from.

Value normalisation, `normalize_value(value, slot)`, applied to predictions and golds alike:
1. lower-case, curly apostrophes made straight, whitespace collapsed (TRADE's create_data.py `normalize`);
2. "dont care", "don't care", "do not care" -> "dontcare" (create_data.py `get_summary_bstate`);
3. TRADE's utils/fix_label.py `fix_general_label_error`: the table of general typos ("center" -> "centre",
   "guesthouse" -> "guest house", "any" -> "dontcare", "not mentioned" -> "none", ...) and its slot-specific
   fixes (an area of "no" is "north", a hotel type of "bed and breakfast" is "none", ...).
"none" means "not set": such slots are dropped from both states before comparing. Not taken from TRADE:
its spelling table `mapping.pair` and punctuation spacing (MultiWOZ 2.1's gold values are already in that
form), and time formats, which TRADE does not normalise ("5:15 pm" is not "17:15"). One TRADE quirk is
kept: its rule for "hotel-star" never fires (the slot is "hotel-stars"), so it is not here either.

Slot names are canonicalised so that MultiWOZ 2.1 ("hotel-book people", "train-arriveBy") and 2.2
("hotel-bookpeople") spellings meet: lower-case, "_" as a space, "bookX" -> "book X", "arrive by" ->
"arriveby", "leave at" -> "leaveat", "price range" -> "pricerange".
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence, Union

from lightning_bench.tasks.multiwoz.definitions import MULTIWOZ21_SLOTS  # the task definition owns them
from lightning_bench.errors import ConfigError
from lightning_bench.tasks.metrics.bootstrap import mean_ci

_DONTCARE = {"dont care", "don't care", "do not care"}
_GENERAL_TYPOS = {  # fix_label.py's GENERAL_TYPO, in its groups
    # type
    "guesthouse": "guest house", "guesthouses": "guest house", "guest": "guest house",
    "mutiple sports": "multiple sports", "sports": "multiple sports", "mutliple sports": "multiple sports",
    "swimmingpool": "swimming pool", "concerthall": "concert hall", "concert": "concert hall",
    "pool": "swimming pool", "night club": "nightclub", "mus": "museum", "ol": "architecture",
    "colleges": "college", "coll": "college", "architectural": "architecture", "musuem": "museum",
    "churches": "church",
    # area
    "center": "centre", "center of town": "centre", "near city center": "centre", "in the north": "north",
    "cen": "centre", "east side": "east", "east area": "east", "west part of town": "west", "ce": "centre",
    "town center": "centre", "centre of cambridge": "centre", "city center": "centre", "the south": "south",
    "scentre": "centre", "town centre": "centre", "in town": "centre", "north part of town": "north",
    "centre of town": "centre", "cb30aq": "none",
    # price, day, parking, internet, stars
    "mode": "moderate", "moderate -ly": "moderate", "mo": "moderate", "next friday": "friday",
    "monda": "monday", "free parking": "free", "free internet": "yes", "4 star": "4", "4 stars": "4",
    "0 star rarting": "none",
    # others
    "y": "yes", "any": "dontcare", "n": "no", "does not care": "dontcare", "not men": "none", "not": "none",
    "not mentioned": "none", "": "none", "not mendtioned": "none", "3 .": "3", "does not": "no",
    "fun": "none", "art": "none",
}
# fix_label.py's slot-specific rules: values that do not belong to the slot ...
_NOT_A_VALUE = {
    "hotel-type": {"nigh", "moderate -ly priced", "bed and breakfast", "centre", "venetian", "intern",
                   "a cheap -er hotel"},
    "hotel-internet": {"4"}, "hotel-pricerange": {"2"},
    "attraction-type": {"gastropub", "la raza", "galleria", "gallery", "science", "m"},
}
_HOTEL_TYPE_HOTEL = {"hotel with free parking and free wifi", "4", "3 star hotel"}
# ... abbreviations fixed by the kind of slot (a substring of its name, as TRADE tests it) ...
_BY_KIND = (("area", {"no": "north", "we": "west", "cent": "centre"}),
            ("day", {"we": "wednesday", "no": "none"}),
            ("price", {"ch": "cheap"}),
            ("internet", {"free": "yes"}))
# ... and places that are not areas of Cambridge
_NOT_AN_AREA = {"restaurant-area": {"stansted airport", "cambridge", "silver street"},
                "attraction-area": {"norwich", "ely", "museum", "same area as hotel"}}

State = Union[Mapping[str, Union[str, Sequence[str]]], str]


def canonical_slot(name: str) -> str:
    """'Hotel-Book_People' / 'hotel-bookpeople' -> 'hotel-book people' (see the module docstring)."""
    domain, _, slot = " ".join(name.lower().replace("_", " ").split()).partition("-")
    slot = re.sub(r"^book(?=\S)", "book ", slot.strip())
    slot = {"arrive by": "arriveby", "leave at": "leaveat", "price range": "pricerange"}.get(slot, slot)
    return f"{domain.strip()}-{slot}"


def normalize_value(value: str, slot: str | None = None) -> str:
    """A slot value as TRADE compares it ("none" = not set); slot ("domain-slot") enables its slot rules."""
    value = " ".join(str(value).lower().replace("\u2019", "'").replace("\u2018", "'").split())
    if value in _DONTCARE:
        value = "dontcare"
    value = _GENERAL_TYPOS.get(value, value)
    if slot is None:
        return value
    slot = canonical_slot(slot)
    # TRADE's if/elif chain: the first matching rule wins
    if value in _NOT_A_VALUE.get(slot, ()) or ("area" in slot and value == "moderate") \
            or ("day" in slot and value == "t"):
        value = "none"
    elif slot == "hotel-type" and value in _HOTEL_TYPE_HOTEL:
        value = "hotel"
    else:
        kind = next((fixes for key, fixes in _BY_KIND if key in slot), {})
        value = kind.get(value, value)
    return "none" if value in _NOT_AN_AREA.get(slot, ()) else value


_PAIR = re.compile(r"([A-Za-z]+)\s*-\s*([A-Za-z_ ]+?)\s*=\s*(.*)")


def parse_belief_state(text: str) -> dict[str, str]:
    """`domain-slot=value; domain-slot=value` -> {canonical slot: value as written, stripped}.

    Pairs may be separated by ";", "," or newlines; a trailing "." is dropped; a piece that is no
    `domain-slot=value` pair (e.g. "none", chatter) is ignored; values that normalise to "none" are
    dropped; a slot written twice keeps its last value. A value containing a comma loses its tail.
    """
    state = {}
    for piece in re.split(r"[;,\n]", text):
        match = _PAIR.fullmatch(piece.strip().rstrip(".").strip())
        if match:
            slot, value = canonical_slot(f"{match[1]}-{match[2]}"), match[3].strip()
            if normalize_value(value, slot) != "none":
                state[slot] = value
    return state


def _normalized(state: State, slots: Sequence[str] | None, what: str) -> dict[str, set[str]]:
    """{canonical slot: set of acceptable normalised values}, "none" dropped, kept to `slots` unless None.
    A gold value may be a list of alternatives (MultiWOZ 2.2 lists several spellings); a prediction may not."""
    if isinstance(state, str):
        state = parse_belief_state(state)
    if not isinstance(state, Mapping):
        raise ConfigError(f"a {what} belief state must be a dict of slot -> value or a 'domain-slot=value; ...' "
                          f"string, got {type(state).__name__}")
    out = {}
    for name, value in state.items():
        if not isinstance(value, str) and what == "predicted":
            raise ConfigError(f"predicted slot {name!r} has {value!r}: give one value string per predicted slot")
        slot = canonical_slot(name)
        values = {normalize_value(v, slot) for v in ([value] if isinstance(value, str) else value)} - {"none"}
        if values and (slots is None or slot in slots):
            out[slot] = values
    return out


def dst_per_turn(preds: Sequence[State], golds: Sequence[State],
                 slots: Sequence[str] = MULTIWOZ21_SLOTS) -> list[dict]:
    """[{"joint_goal_accuracy": 100 or 0, "slot_accuracy": x100}] per turn.

    The gold state keeps only the scored `slots` (TRADE drops the other domains from its data); the
    prediction is judged as written, so a slot outside the list is an extra, wrong slot.
    """
    if len(preds) != len(golds):
        raise ConfigError(f"{len(preds)} predicted states but {len(golds)} gold states: give one prediction per turn")
    scored = {canonical_slot(s) for s in slots}
    if not slots or len(scored) != len(slots):
        raise ConfigError("slots must be a non-empty list of distinct 'domain-slot' names")
    out = []
    for pred, gold in zip(preds, golds):
        predicted, wanted = _normalized(pred, None, "predicted"), _normalized(gold, scored, "gold")
        # TRADE's compute_acc: a gold slot not matched (missing or wrong value) counts once; a predicted slot
        # the gold state does not have at all counts once more
        missed = sum(1 for s, options in wanted.items() if not predicted.get(s, set()) & options)
        extra = sum(1 for s in predicted if s not in wanted)
        out.append({"joint_goal_accuracy": 100.0 * (missed == 0 and extra == 0),
                    "slot_accuracy": 100.0 * (len(scored) - missed - extra) / len(scored)})
    return out


def _mean_of(key: str, per: list[dict]) -> float:
    if not per:
        raise ConfigError("no dialogue turns to score: pass at least one predicted and gold state")
    return sum(t[key] for t in per) / len(per)


def joint_goal_accuracy(preds: Sequence[State], golds: Sequence[State],
                        slots: Sequence[str] = MULTIWOZ21_SLOTS) -> float:
    """Percent of turns whose whole normalised predicted state equals the gold state."""
    return _mean_of("joint_goal_accuracy", dst_per_turn(preds, golds, slots))


def slot_accuracy(preds: Sequence[State], golds: Sequence[State], slots: Sequence[str] = MULTIWOZ21_SLOTS) -> float:
    """TRADE's slot accuracy, percent: per turn (len(slots) - missed gold slots - extra predicted slots)
    / len(slots), averaged over turns."""
    return _mean_of("slot_accuracy", dst_per_turn(preds, golds, slots))


def dst_metrics(preds: Sequence[State], golds: Sequence[State], slots: Sequence[str] = MULTIWOZ21_SLOTS,
                seed: int = 0) -> dict:
    """{"joint_goal_accuracy", "slot_accuracy"}: mean_ci dicts over turns, x100."""
    per = dst_per_turn(preds, golds, slots)
    _mean_of("joint_goal_accuracy", per)  # the same one-line error as the plain figures when there are no turns
    return {key: mean_ci([t[key] for t in per], seed=seed) for key in ("joint_goal_accuracy", "slot_accuracy")}
