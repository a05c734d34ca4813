"""Every registered task renders, prompts and scores exactly as it did when the snapshot was taken
(tests/task_snapshot.py says what one rendering holds): moving the task layer must not change a byte."""

import json

from tests.task_snapshot import SNAPSHOT, digests


def test_every_task_renders_as_in_the_snapshot(shared_data):
    expected = json.loads(SNAPSHOT.read_text())
    got = digests(shared_data.parent)
    assert sorted(got) == sorted(expected), "tasks added or removed: retake the snapshot for the new ones only"
    changed = sorted(name for name in got if got[name] != expected[name])
    assert not changed, f"{len(changed)} tasks render differently: {changed[:10]}"
