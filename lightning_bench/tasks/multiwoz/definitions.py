"""Dialogue state tracking: MultiWOZ 2.1 (Eric et al., 2020) and 2.2 (Zang et al., 2020), prompted.

One request per user turn: the dialogue so far, then the instruction to list the belief state as
`domain-slot=value` pairs. Scored by joint goal accuracy and slot accuracy over the 30 slots of the
five evaluated domains, after the value normalisation of standard MultiWOZ DST evaluations
(tasks/multiwoz/metrics.py). A history too long for the model loses its middle turns (the first and
the latest turns stay). Files: tasks/multiwoz/reader.py (2.1 as ConvLab-2's test.json.zip, 2.2's
dialogues_*.json); hub: pfb30/multi_woz_v22.
"""

from __future__ import annotations

from lightning_bench.tasks.definition import Benchmark, GenerationSettings, Source, Splits, TaskDefinition

# TRADE's ALL_SLOTS: the five domains evaluated on MultiWOZ 2.1 (hospital, police and bus are left out),
# each slot that has a value somewhere in the data (train "book ticket" never does). The prompt lists them and
# they are what is scored (tasks/multiwoz/metrics.py).
MULTIWOZ21_SLOTS = (
    "attraction-area", "attraction-name", "attraction-type",
    "hotel-area", "hotel-book day", "hotel-book people", "hotel-book stay", "hotel-internet", "hotel-name",
    "hotel-parking", "hotel-pricerange", "hotel-stars", "hotel-type",
    "restaurant-area", "restaurant-book day", "restaurant-book people", "restaurant-book time",
    "restaurant-food", "restaurant-name", "restaurant-pricerange",
    "taxi-arriveby", "taxi-departure", "taxi-destination", "taxi-leaveat",
    "train-arriveby", "train-book people", "train-day", "train-departure", "train-destination", "train-leaveat",
)


def history_text(r: dict) -> str:
    return "\n".join(f"{'User' if t['speaker'] == 'user' else 'System'}: {t['text']}" for t in r["history"])


def state_text(state: dict) -> str:
    """The gold state as the model is asked to write it (also a k-shot example's answer)."""
    return "; ".join(f"{slot}={value}" for slot, value in sorted(state.items())) or "none"


def dst_prompt(r: dict) -> tuple:
    # the dialogue first, the instruction last (the part an instruction-tuned model reads last is what it
    # does), with the answer's format shown by an example
    instruction = ("List the dialogue state: every slot the user has specified so far, as domain-slot=value pairs "
                   "separated by semicolons, for example: hotel-area=north; hotel-stars=4. Use only these slots: "
                   + ", ".join(MULTIWOZ21_SLOTS) + '. Write "none" when there is none. Answer with the pairs only.')
    return f"Dialogue:\n{history_text(r)}\n\n{instruction}\n\nState:", (state_text(r["belief_state"]),)


def _task(version: str, fmt_config: str, splits: Splits) -> TaskDefinition:
    return TaskDefinition(
        name=f"multiwoz/{version}", benchmark="multiwoz", title=f"MultiWOZ {version}",
        source=Source("pfb30/multi_woz_v22", fmt_config, "multiwoz"), output_type="generate_until",
        template=dst_prompt, template_version="multiwoz@2", scorer="dst", headline="joint_goal_accuracy", splits=splits,
        answer_field="belief_state",
        generation=GenerationSettings(stop=("\n",), max_new_tokens=96, document_text=history_text, chat=True))


TASKS = (
    # 2.1 has no hub copy with its test split in the original layout: local files (ConvLab-2's test.json.zip)
    _task("2.1", "v2.1", Splits(eval="test", train="train", fewshot="train")),
    _task("2.2", "v2.2", Splits(eval="test", train="train", fewshot="train")),
)
BENCHMARKS = (
    Benchmark("multiwoz", "MultiWOZ", tuple(t.name for t in TASKS), "per_task", member="MultiWOZ version"),
    Benchmark("dialogue", "dialogue tasks", tuple(t.name for t in TASKS), "selection_only"),
)
