"""An episode cut by a time limit is not the end of the task: with `--value_bootstrap` (the
default) the critic learns the value of going on. In these envs every step pays 1 and a time
limit the observations do not show cuts each episode after 10 steps, so the true value of
every state is 1 / (1 - gamma) = 10 at gamma 0.9. Treated as terminal, the cut teaches the
average of the shortened returns, (1 - 0.9**k) / 0.1 over k = 1..10 remaining steps: 4.1.

The turn-taking variant alternates two agents (each paid 1 for its own move) with an odd
rollout, so that cuts land on an agent's waiting step and on trajectories waiting for their
bootstrap value, which the rollout worker carries to the agent's last decision."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_pbt import parse_cfg, register_env, train
from rl_pbt.models.loading import load_policy

GAMMA = 0.9
TRUE_VALUE = 1.0 / (1.0 - GAMMA)  # 10
CUT_VALUE = float(np.mean([(1 - GAMMA**k) / (1 - GAMMA) for k in range(1, 11)]))  # 4.1


class Endless(gym.Env):
    """One state, reward 1 a step, truncated after 10 steps, never terminated."""

    observation_space = gym.spaces.Box(0, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.ones(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.ones(2, np.float32), 1.0, False, self.t >= 10, {}


class EndlessTurns:
    """Two agents move in turn, each paid 1 on its own move; truncated after 10 moves in all
    (5 each), so with gamma 0.9 per own decision the value of a decision is 1 / (1 - 0.9)."""

    is_multiagent = True
    num_agents = 2

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 1, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def _obs(self):
        mover = self.t % 2
        return [np.array([float(a == mover), 1.0], np.float32) for a in range(2)]

    def reset(self, seed=None, options=None):
        self.t = 0
        return self._obs(), [{"is_active": a == 0} for a in range(2)]

    def step(self, actions):
        mover = self.t % 2
        self.t += 1
        rewards = [float(a == mover) for a in range(2)]
        infos = [{"is_active": a == mover} for a in range(2)]
        if self.t >= 10:
            self.t = 0
            return self._obs(), rewards, [False, False], [True, True], infos
        return self._obs(), rewards, [False, False], [False, False], infos

    def close(self):
        pass


register_env("endless", lambda full_name, cfg, env_config, render_mode=None: Endless())
register_env("endless_turns", lambda full_name, cfg, env_config, render_mode=None: EndlessTurns())


def _learned_value(tmp_path, env_name, obs, extra):
    cfg = parse_cfg(
        [f"--env={env_name}", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=8",
         "--rollout=7", "--batch_size=56", "--encoder_mlp_layers", "16",
         "--learning_rate=3e-3", f"--gamma={GAMMA}", "--train_for_env_steps=12000", "--seed=3",
         "--decorrelate_envs_on_one_worker=False", f"--train_dir={tmp_path}",
         "--experiment=tl", *extra]
    )  # fmt: skip
    assert train(cfg) == 0
    env = Endless() if env_name == "endless" else EndlessTurns()
    model = load_policy(str(tmp_path / "tl"), 0, env.observation_space, env.action_space, cfg)
    _, _, values, _ = model.act({"obs": torch.tensor([obs])}, None)
    return float(values[0])


@pytest.mark.parametrize("extra", [[], ["--with_vtrace"]])
def test_a_cut_episode_bootstraps_its_value(tmp_path, extra):
    value = _learned_value(tmp_path, "endless", [1.0, 1.0], extra)
    assert abs(value - TRUE_VALUE) < 1.5, f"V = {value:.2f}, true value {TRUE_VALUE:.1f}"


def test_without_bootstrap_a_cut_ends_the_return(tmp_path):
    value = _learned_value(tmp_path, "endless", [1.0, 1.0], ["--value_bootstrap=False"])
    assert abs(value - CUT_VALUE) < 1.5, f"V = {value:.2f}, truncated returns {CUT_VALUE:.1f}"


def test_a_cut_on_a_waiting_step_bootstraps_the_last_decision(tmp_path):
    value = _learned_value(tmp_path, "endless_turns", [1.0, 1.0], [])
    assert abs(value - TRUE_VALUE) < 1.5, f"V = {value:.2f}, true value {TRUE_VALUE:.1f}"
