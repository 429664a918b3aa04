"""What a resume with changed flags says, and which learning values it applies."""

from rl_pbt import parse_cfg
from rl_pbt.config.parse import resume_changes, resume_notes


def _saved(*flags):
    return parse_cfg(["--env=CartPole-v1", *flags]).to_dict()


def test_changed_flags_are_listed_and_routine_ones_are_not():
    saved = _saved("--learning_rate=0.0001", "--num_workers=2", "--train_for_env_steps=1000")
    cfg = parse_cfg(["--env=CartPole-v1", "--learning_rate=0.01", "--num_workers=4",
                     "--train_for_env_steps=5000", "--restart_behavior=resume"])  # fmt: skip
    changes = resume_changes(cfg, saved)
    assert sorted(changes) == [("learning_rate", 0.01, 0.0001), ("num_workers", 4, 2)]
    assert resume_changes(parse_cfg(["--env=CartPole-v1"]), _saved()) == []


def test_without_pbt_a_changed_learning_flag_applies():
    changes = [("learning_rate", 0.01, 0.0001), ("num_workers", 4, 2)]
    notes, hparams = resume_notes(changes, pbt_before=False, pbt_now=False, replay=False)
    assert hparams == {"learning_rate": 0.01}
    assert "--learning_rate=0.01 (the run had 0.0001)" in notes[0]
    assert "--num_workers=4 (the run had 2)" in notes[0]
    assert "every policy trains with the new learning_rate=0.01" in notes[1]


def test_with_pbt_or_a_replay_each_member_keeps_its_value():
    changes = [("learning_rate", 0.01, 0.0001)]
    for pbt, replay, whose in [(True, False, "PBT's"), (False, True, "replayed")]:
        notes, hparams = resume_notes(changes, pbt_before=pbt, pbt_now=pbt, replay=replay)
        assert hparams == {}
        assert "--learning_rate: each member keeps the value its checkpoint holds" in notes[1]
        assert whose in notes[1]


def test_a_pbt_run_resumed_without_pbt_says_pbt_stops():
    notes, hparams = resume_notes(
        [("with_pbt", False, True)], pbt_before=True, pbt_now=False, replay=False
    )
    assert hparams == {}
    assert "--with_pbt=False (the run had True)" in notes[0]
    assert "PBT stops, each member keeps the values it has" in notes[-1]
    assert resume_notes([], pbt_before=True, pbt_now=True, replay=False) == ([], {})
