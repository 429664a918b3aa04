from rl_pbt.pbt.lineage import append_event, make_event
from rl_pbt.pbt.replay import ScheduleReplayer


def write_lineage(path):
    init = {"learning_rate": [None, 1e-3], "gamma": [None, 0.99], "rew.a": [None, 1.0]}
    events = [
        make_event(0, "init", 0, init),
        make_event(1, "init", 0, init),
        make_event(1, "mutate", 1000, {"learning_rate": [1e-3, 2e-3]}),
        make_event(0, "mutate", 1500, {"rew.a": [1.0, 0.5]}),
        # p1 copies p0 (values 1e-3 / 0.5), then mutates its learning rate
        make_event(
            1, "replace", 2000, {"learning_rate": [2e-3, 1.1e-3], "rew.a": [1.0, 0.5]}, source=0
        ),
    ]
    for e in events:
        append_event(path, e)


def test_replay_follows_ancestry_at_recorded_steps(tmp_path):
    path = str(tmp_path / "lineage.jsonl")
    write_lineage(path)
    r = ScheduleReplayer(path, 1, {"learning_rate": 1e-3, "gamma": 0.99}, {"a": 1.0})
    assert r.update([0])  # the start values
    # p1's current weights descend from p0 (copied at 2000): before 2000 the schedule is p0's,
    # so p1's own mutation at 1000 (whose weights were discarded) is not replayed
    assert r.update([1499]) == []
    assert r.hparams[0]["learning_rate"] == 1e-3
    d = r.update([1500])
    assert len(d) == 1 and r.shaping[0] == {"a": 0.5}
    assert r.update([1999]) == []
    d = r.update([2000])
    assert len(d) == 1 and r.hparams[0]["learning_rate"] == 1.1e-3
    assert r.shaping[0] == {"a": 0.5}
    assert all(x.source_id is None for x in d)
