"""rl-pbt-enjoy plays a PBT member with the reward shaping PBT gave it, so the returns it
prints are those the member trained on; without PBT's file, the env's defaults stay."""

import json

import envs  # noqa: F401  (registers the built-in envs)
from launch.enjoy import install_member_shaping
from rl_pbt.envs.registry import make_env
from rl_pbt.envs.wrappers import as_multiagent, reward_shaping_target
from rl_pbt.logging.files import policy_shaping_path


def _lure():
    return as_multiagent(make_env("lure", None, {"env_id": 0}))


def test_a_member_plays_with_its_own_shaping(tmp_path, capsys):
    saved = {"goal": 1.0, "lure": 0.25, "step_penalty": -0.002, "gone": 7.0}
    (tmp_path / "policy_01_reward_shaping.json").write_text(json.dumps(saved))
    assert policy_shaping_path(str(tmp_path), 1).endswith("policy_01_reward_shaping.json")
    env = _lure()
    install_member_shaping(env, str(tmp_path), 1)
    assert reward_shaping_target(env).shaping == {"goal": 1.0, "lure": 0.25, "step_penalty": -0.002}
    assert "policy 1 plays with the reward shaping PBT gave it" in capsys.readouterr().out
    other = _lure()  # policy 0 has no file: the defaults
    before = dict(reward_shaping_target(other).shaping)
    install_member_shaping(other, str(tmp_path), 0)
    assert reward_shaping_target(other).shaping == before and capsys.readouterr().out == ""
