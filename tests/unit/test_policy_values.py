"""--policy_values: the file's checks, the split into learning and shaping values, the flag's
conflicts, and PBT members starting from the file's values."""

import json

import pytest

from rl_pbt import parse_cfg
from rl_pbt.config.parse import ConfigError
from rl_pbt.config.policy_values import (
    check_shaping_keys,
    describe_values,
    load_policy_values,
    split_values,
)
from rl_pbt.logging.files import policy_cfg_path, policy_shaping_path, read_json
from rl_pbt.pbt.lineage import lineage_path, read_events
from tests.unit.test_pbt_manager import HPARAMS, SHAPING, make_cfg


def write(tmp_path, data, name="values.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_values_load_with_labels_dropped(tmp_path):
    path = write(
        tmp_path,
        [{}, {"_label": "fast", "learning_rate": 0.001, "rew.pickup": 0.3, "gamma": 0.995}],
    )
    values = load_policy_values(path, 2)
    assert values == [{}, {"learning_rate": 0.001, "rew.pickup": 0.3, "gamma": 0.995}]
    learning, shaping = split_values(values[1])
    assert learning == {"learning_rate": 0.001, "gamma": 0.995}
    assert shaping == {"rew.pickup": 0.3}
    assert describe_values(values) == "p1 learning_rate=0.001, rew.pickup=0.3, gamma=0.995"
    assert describe_values([{}, {}]) == "every policy keeps the defaults"


@pytest.mark.parametrize(
    "data, n, message",
    [
        ("[{}, ", 1, "not valid JSON"),
        ({"learning_rate": 0.001}, 1, "a JSON list with one object per policy"),
        ([{}, {}], 3, "2 entries for --num_policies=3"),
        ([{}, 0.5], 2, "entry 1 must be an object"),
        ([{"lr": 0.001}], 1, "policy 0: unknown key 'lr'; allowed: learning_rate"),
        ([{"batch_size": 64}], 1, "unknown key 'batch_size'"),
        ([{"learning_rate": "fast"}], 1, "learning_rate='fast' is not a number"),
        ([{"rew.win": True}], 1, "rew.win=True is not a number"),
        ('[{"rew.win": Infinity}]', 1, "is not finite"),
        ([{}, {"learning_rate": -0.001}], 2, "policy 1: learning_rate=-0.001: must be > 0"),
        ([{"gamma": 1.5}], 1, "gamma=1.5: must be in [0, 1]"),
    ],
)
def test_bad_files_name_the_policy_key_and_rule(tmp_path, data, n, message):
    with pytest.raises(ConfigError) as err:
        load_policy_values(write(tmp_path, data), n)
    assert message in str(err.value)
    assert "--policy_values=" in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_policy_values(str(tmp_path / "nope.json"), 1)


def test_shaping_keys_must_be_leaves_of_the_env_shaping():
    leaves = {"rew.win": 1.0, "rew.pickup": 0.05}
    check_shaping_keys([{}, {"rew.pickup": 0.2, "learning_rate": 1e-3}], leaves, "arena_duel")
    with pytest.raises(ConfigError) as err:
        check_shaping_keys([{}, {"rew.pickups": 0.2}], leaves, "arena_duel")
    text = str(err.value)
    assert "policy 1: rew.pickups not in --env=arena_duel's reward shaping" in text
    assert "rew.pickup, rew.win" in text
    with pytest.raises(ConfigError, match="rew.win: --env=CartPole-v1 has no reward shaping"):
        check_shaping_keys([{"rew.win": 2.0}], None, "CartPole-v1")


def test_flag_is_checked_at_parse_time_and_conflicts_are_named(tmp_path):
    good = write(tmp_path, [{}, {"learning_rate": 0.001}])
    base = ["--env=CartPole-v1", "--num_policies=2", f"--policy_values={good}"]
    assert parse_cfg(base).policy_values == good
    with pytest.raises(ConfigError, match="2 entries for --num_policies=3"):
        parse_cfg(base + ["--num_policies=3"])
    # both set starting values: --pbt_init_random draws the tuned ones after the file
    assert parse_cfg(base + ["--with_pbt", "--pbt_init_random"]).pbt_init_random


def test_a_preset_names_its_values_file_relative_to_itself(tmp_path):
    write(tmp_path, [{}, {"rew.pickup": 0.3}], "mix.json")
    preset = write(
        tmp_path,
        {"env": "CartPole-v1", "num_policies": 2, "policy_values": "mix.json"},
        "preset.json",
    )
    cfg = parse_cfg([f"--preset={preset}"])
    assert cfg.policy_values == str(tmp_path / "mix.json")


def test_pbt_members_start_from_their_values(tmp_path):
    from rl_pbt.pbt.manager import PBTManager

    values = [{}] * 6
    values[2] = {"learning_rate": 3e-4, "rew.pickup": 0.2}
    values[5] = {"rew.group.x": -0.5, "gamma": 0.995}
    cfg = make_cfg(num_policies=6)
    mgr = PBTManager(cfg, 6, dict(HPARAMS), SHAPING, str(tmp_path), initial_values=values)
    assert mgr.hparams[0] == HPARAMS and mgr.shaping[0] == SHAPING
    assert mgr.hparams[2] == {**HPARAMS, "learning_rate": 3e-4}
    assert mgr.shaping[2] == {**SHAPING, "pickup": 0.2}
    assert mgr.hparams[5]["gamma"] == 0.995
    assert mgr.shaping[5] == {**SHAPING, "group": {"x": -0.5}}
    # the policy files and the lineage's init events carry the starting values
    assert read_json(policy_cfg_path(str(tmp_path), 2))["learning_rate"] == 3e-4
    assert read_json(policy_shaping_path(str(tmp_path), 5))["group"] == {"x": -0.5}
    inits = {e["policy"]: e for e in read_events(lineage_path(str(tmp_path)))}
    assert inits[2]["changes"]["rew.pickup"] == [None, 0.2]
    # a resumed run keeps its own state, not the file's
    again = PBTManager(cfg, 6, dict(HPARAMS), SHAPING, str(tmp_path), initial_values=[{}] * 6)
    assert again.hparams[2]["learning_rate"] == 3e-4


def test_pbt_rejects_values_it_does_not_hold(tmp_path):
    from rl_pbt.pbt.manager import PBTManager

    cfg = make_cfg(num_policies=2)
    with pytest.raises(ValueError, match="policy 1: 'rew.nope'"):
        PBTManager(
            cfg, 2, dict(HPARAMS), SHAPING, str(tmp_path), initial_values=[{}, {"rew.nope": 1}]
        )
    with pytest.raises(ValueError, match="1 sets of starting values for 2 policies"):
        PBTManager(cfg, 2, dict(HPARAMS), SHAPING, str(tmp_path / "b"), initial_values=[{}])


def test_starting_values_stretch_built_in_bounds_and_file_bounds_get_a_note(tmp_path):
    from rl_pbt.pbt.manager import PBTManager

    values = [{}, {"learning_rate": 0.05, "rew.pickup": 0.3}]
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"rew.pickup": {"type": "float", "low": 0.0, "high": 0.1}}))
    cfg = make_cfg(num_policies=2, pbt_search_space=str(space))
    mgr = PBTManager(cfg, 2, dict(HPARAMS), SHAPING, str(tmp_path / "run"), initial_values=values)
    assert mgr.space["learning_rate"].high == 0.05  # built-in high is 1e-2: stretched
    assert mgr.space["rew.pickup"].high == 0.1  # the file's bound is kept ...
    assert "rew.pickup of p1 starts outside its search space" in " ".join(mgr.space_notes)
    # ... and a resumed run stretches the same built-in bound again
    again = PBTManager(cfg, 2, dict(HPARAMS), SHAPING, str(tmp_path / "run"))
    assert again.restored and again.space["learning_rate"].high == 0.05


def test_a_bad_shaping_key_leaves_the_experiment_folder_alone(tmp_path):
    from rl_pbt.runtime.runner import Runner

    old_run = tmp_path / "exp"
    old_run.mkdir()
    (old_run / "config.json").write_text("{}")
    (old_run / "keep.txt").write_text("weights")
    values = write(tmp_path, [{}, {"rew.alive": 2.0}])
    cfg = parse_cfg(
        [
            "--env=CartPole-v1",
            "--num_policies=2",
            f"--policy_values={values}",
            f"--train_dir={tmp_path}",
            "--experiment=exp",
            "--restart_behavior=overwrite",
        ]
    )
    with pytest.raises(ConfigError, match="has no reward shaping"):
        Runner(cfg)
    assert (old_run / "keep.txt").read_text() == "weights"
    assert (old_run / "config.json").read_text() == "{}"
