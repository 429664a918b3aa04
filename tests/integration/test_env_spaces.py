"""Spaces the trainer would misread are refused at the start in one line: channels-last
images, discrete actions that do not start at 0, a MultiDiscrete of several dimensions; a
continuous action box away from 0 is named in a warning; a resumed run whose env changed its
spaces since is refused before anything is written."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from rl_pbt import parse_cfg, register_env, train
from rl_pbt.config.parse import ConfigError
from rl_pbt.runtime.runner import Runner


class Spaces(gym.Env):
    """Random observations of `obs_space`, episodes of 5 steps."""

    def __init__(self, obs_space, act_space):
        self.observation_space, self.action_space = obs_space, act_space
        self.t = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.t += 1
        return self.observation_space.sample(), 0.0, self.t >= 5, False, {}


VEC = gym.spaces.Box(-1, 1, (4,), np.float32)
CASES = {
    "hwc": (gym.spaces.Box(0, 255, (84, 84, 3), np.uint8), gym.spaces.Discrete(2)),
    "start": (VEC, gym.spaces.Discrete(3, start=-1)),
    "md2d": (VEC, gym.spaces.MultiDiscrete([[3, 4], [2, 2]])),
    "far_box": (VEC, gym.spaces.Box(10, 20, (2,), np.float32)),
    "vec4": (VEC, gym.spaces.Discrete(2)),
    "vec5": (gym.spaces.Box(-1, 1, (5,), np.float32), gym.spaces.Discrete(2)),
}


def make_case(full_env_name, cfg, env_config, render_mode=None):
    return Spaces(*CASES[full_env_name.split("_", 1)[1]])


for name in CASES:
    register_env(f"spaces_{name}", make_case)


def cfg_for(tmp_path, name, *extra):
    return parse_cfg(
        [f"--env=spaces_{name}", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=2"]
        + ["--rollout=8", "--batch_size=16", "--encoder_mlp_layers=8"]
        + [f"--train_dir={tmp_path}", f"--experiment={name}", *extra]
    )


@pytest.mark.parametrize(
    "name, words",
    [
        ("hwc", ["(84, 84, 3)", "channels-last", "np.moveaxis"]),
        ("start", ["Discrete(3, start=-1)", "do not start at 0"]),
        ("md2d", ["MultiDiscrete", "shape (2, 2)", "flat"]),
    ],
)
def test_spaces_it_would_misread_are_refused(tmp_path, name, words):
    with pytest.raises(ConfigError) as err:
        Runner(cfg_for(tmp_path, name))
    text = str(err.value)
    assert "\n" not in text
    for word in words:
        assert word in text, (word, text)
    assert not (tmp_path / name).exists()


def test_an_action_box_away_from_zero_is_named(tmp_path, capsys):
    assert train(cfg_for(tmp_path, "far_box", "--train_for_env_steps=64")) == 0
    out = capsys.readouterr().out
    assert "WARNING: the action box [10, 20] does not hold 0" in out


def test_action_boxes_that_hold_zero_only_at_an_edge_are_named():
    from gymnasium.spaces import Box

    from rl_pbt.runtime.runner import action_box_note

    note = action_box_note(Box(0.0, 1.0, (2,)))
    assert "[0, 1] has 0 at an edge" in note and "half of them" in note
    assert "does not hold 0" in action_box_note(Box(0.5, 1.0, (2,)))
    assert action_box_note(Box(-1.0, 1.0, (2,))) is None
    assert action_box_note(Box(-0.1, 3.0, (1,))) is None
    # the dimensions that fail, with their own bounds (it named [-2, 3], which holds 0)
    note = action_box_note(Box(np.array([-2.0, 0.5]), np.array([2.0, 3.0])))
    assert note.startswith("dimension 1 of the action box ([0.5, 3]) does not hold 0"), note
    note = action_box_note(Box(np.array([0.0, -1.0, 1.0]), np.array([1.0, 1.0, 2.0])))
    assert note.startswith("dimensions 0, 2 of the action box ([0, 1], [1, 2]) do not"), note


def test_a_resume_after_the_env_changed_its_spaces_is_refused(tmp_path):
    assert train(cfg_for(tmp_path, "vec4", "--train_for_env_steps=64")) == 0
    config = tmp_path / "vec4" / "config.json"
    before = config.read_text()
    changed = json.loads(before)
    changed["env"] = "spaces_vec5"
    config.write_text(json.dumps(changed))  # as if the env's observations had grown
    saved = config.read_text()
    with pytest.raises(ConfigError, match="holds a network of other sizes"):
        Runner(cfg_for(tmp_path, "vec5", "--experiment=vec4", "--train_for_env_steps=128"))
    assert config.read_text() == saved  # nothing written
