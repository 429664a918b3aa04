"""Lineage log: append/read (torn last line), schedules that follow ancestry, family trees."""

import json

import pytest

from rl_pbt.pbt.lineage import (
    append_event,
    family_tree_dot,
    family_tree_text,
    lineage_path,
    make_event,
    read_events,
    schedule_for,
)


def init(p, lr, pickup=None):
    changes = {"learning_rate": [None, lr], "gamma": [None, 0.99]}
    if pickup is not None:
        changes["rew.pickup"] = [None, pickup]
    return make_event(p, "init", 0, changes, time_s=0.0)


def test_append_and_read_back(tmp_path):
    path = lineage_path(str(tmp_path))
    assert path.endswith("pbt/lineage.jsonl")
    assert read_events(path) == []
    events = [
        init(0, 1e-4),
        make_event(
            1,
            "replace",
            500,
            {"learning_rate": [1e-4, 2e-4]},
            source=0,
            objectives={0: 1.5, 1: None},
            reason="bottom",
        ),
    ]
    for ev in events:
        append_event(path, ev)
    back = read_events(path)
    assert back == json.loads(json.dumps(events))
    ev = back[1]
    assert set(ev) >= {"time", "env_steps", "policy", "action", "source", "changes", "objectives"}
    assert ev["objectives"] == {"0": 1.5, "1": None}
    assert ev["changes"] == {"learning_rate": [1e-4, 2e-4]}
    with open(path) as f:
        assert len(f.read().splitlines()) == 2


def test_truncated_last_line_is_tolerated(tmp_path):
    path = str(tmp_path / "pbt" / "lineage.jsonl")
    append_event(path, init(0, 1e-4))
    append_event(path, init(1, 2e-4))
    full = json.dumps(make_event(1, "mutate", 10, {"learning_rate": [2e-4, 3e-4]}))
    with open(path, "a") as f:
        f.write(full[: len(full) // 2])  # a crash mid-write
    events = read_events(path)
    assert [e["policy"] for e in events] == [0, 1]
    # the next append starts on its own line, and everything stays readable
    append_event(path, make_event(0, "mutate", 20, {"learning_rate": [1e-4, 1.2e-4]}))
    events = read_events(path)
    assert [(e["policy"], e["action"]) for e in events] == [(0, "init"), (1, "init"), (0, "mutate")]


def test_make_event_rejects_unknown_action():
    with pytest.raises(ValueError):
        make_event(0, "explode", 0, {})


def history():
    return [
        init(0, 1.0, pickup=0.5),
        init(1, 2.0, pickup=0.7),
        init(2, 3.0, pickup=0.9),
        make_event(1, "mutate", 100, {"learning_rate": [2.0, 2.5]}),
        make_event(0, "mutate", 150, {"learning_rate": [1.0, 1.5], "rew.pickup": [0.5, 0.4]}),
        # p1 copies p0 at 200 and mutates: changes are relative to p1's old values
        make_event(
            1,
            "replace",
            200,
            {"learning_rate": [2.5, 1.8], "rew.pickup": [0.7, 0.4]},
            source=0,
            objectives={0: 1.0, 1: 0.1, 2: 0.5},
        ),
        make_event(1, "mutate", 300, {"gamma": [0.99, 0.98]}),
        # p2 copies p1 (whose weights came from p0) at 400
        make_event(
            2,
            "replace",
            400,
            {"learning_rate": [3.0, 1.8], "rew.pickup": [0.9, 0.4], "gamma": [0.99, 0.98]},
            source=1,
        ),
    ]


def test_schedule_follows_ancestry():
    events = history()
    s1 = schedule_for(events, 1)
    assert [e[0] for e in s1] == [0, 150, 200, 300]
    assert [e[1]["learning_rate"] for e in s1] == [1.0, 1.5, 1.8, 1.8]
    assert [e[2]["pickup"] for e in s1] == [0.5, 0.4, 0.4, 0.4]
    assert s1[-1][1] == {"learning_rate": 1.8, "gamma": 0.98}

    s2 = schedule_for(events, 2)
    assert [e[0] for e in s2] == [0, 150, 200, 300, 400]
    assert [e[1]["learning_rate"] for e in s2] == [1.0, 1.5, 1.8, 1.8, 1.8]
    assert s2[-1][2] == {"pickup": 0.4}

    s0 = schedule_for(events, 0)
    assert [(e[0], e[1]["learning_rate"]) for e in s0] == [(0, 1.0), (150, 1.5)]
    assert schedule_for(events, 7) == []


def test_schedule_without_shaping_and_with_tuples():
    events = [
        make_event(0, "init", 0, {"learning_rate": [None, 1.0]}),
        make_event(0, "init", 0, {"learning_rate": [None, 1.0]}) | {"policy": 1},
        make_event(1, "mutate", 10, {"learning_rate": [1.0, 1.2]}),
    ]
    assert schedule_for(events, 1) == [
        (0, {"learning_rate": 1.0}, None),
        (10, {"learning_rate": 1.2}, None),
    ]
    tup = [make_event(0, "init", 0, {"rew.t[0]": [None, 0.1], "rew.t[1]": [None, 0.2]})]
    assert schedule_for(tup, 0)[0][2] == {"t": (0.1, 0.2)}


def test_schedule_cut_at_copy_step_when_source_ran_ahead():
    events = [
        init(0, 1.0),
        init(1, 2.0),
        make_event(0, "mutate", 900, {"learning_rate": [1.0, 1.1]}),  # p0 is ahead
        make_event(1, "replace", 500, {"learning_rate": [2.0, 1.1]}, source=0),
    ]
    s1 = schedule_for(events, 1)
    assert [e[0] for e in s1] == [0, 500]  # p0's step-900 entry lies after the copy


def test_schedule_follows_the_weights_steps_after_a_copy():
    """The copied weights had trained as many steps as the source (`source_env_steps`): the
    source's schedule runs up to there, and the copier's later entries move on by the
    difference (a replay then changes each value when the weights it trained had that many
    steps)."""
    events = [
        init(0, 1.0),
        init(1, 2.0),
        init(2, 3.0),
        make_event(0, "mutate", 900, {"learning_rate": [1.0, 1.1]}),  # p0 is ahead
        make_event(
            1, "replace", 500, {"learning_rate": [2.0, 1.1]}, source=0, source_env_steps=1000
        ),
        make_event(1, "mutate", 700, {"learning_rate": [1.1, 1.3]}),  # weights at 1200
        make_event(
            2, "replace", 800, {"learning_rate": [3.0, 1.3]}, source=1, source_env_steps=750
        ),
        make_event(2, "mutate", 900, {"learning_rate": [1.3, 1.4]}),  # weights at 1350
    ]
    s1 = schedule_for(events, 1)
    assert [(e[0], e[1]["learning_rate"]) for e in s1] == [
        (0, 1.0), (900, 1.1), (1000, 1.1), (1200, 1.3)
    ]  # fmt: skip
    s2 = schedule_for(events, 2)
    assert [(e[0], e[1]["learning_rate"]) for e in s2] == [
        (0, 1.0), (900, 1.1), (1000, 1.1), (1200, 1.3), (1250, 1.3), (1350, 1.4)
    ]  # fmt: skip
    assert events[4]["source_env_steps"] == 1000 and "source_env_steps" not in events[3]


def test_family_tree_dot_and_text():
    events = history()
    dot = family_tree_dot(events)
    assert dot.startswith("digraph pbt_lineage {") and dot.rstrip().endswith("}")
    assert '"p0_0" -> "p1_1"' in dot
    assert '"p1_1" -> "p2_1"' in dot
    assert '"p1_0" -> "p1_1" [style=dashed' in dot
    text = family_tree_text(events)
    lines = text.splitlines()
    assert lines[0].startswith("p0 #0: start @ 0 steps, 1 mutation")
    assert any(line.startswith("+-- p1 #1: copied p0 @ 200 steps (obj 0.1 vs 1)") for line in lines)
    assert any(line.startswith("    +-- p2 #1: copied p1 @ 400 steps") for line in lines)
    assert family_tree_text([]) == ""
