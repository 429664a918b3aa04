"""Turn-taking: a 2-agent alternating game decided by the first mover's choice. The final reward
reaches the first mover on a step where it waits (is_active=False); the returns over each
agent's own decisions credit it to the first move, so the first mover learns to win.

With --gae_lambda=0 a move's advantage is its credited reward plus the value of the agent's
next decision: the test then fails if the reward stays on the waiting step (the first move would
see only the value of a waiting state, which the critic never learns)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_pbt import parse_cfg, register_env, train
from rl_pbt.models.loading import load_policy

WINNING_MOVE = 2


class FirstMover:
    """Agent 0 picks one of 4 moves, then agent 1 answers (its move does not matter) and the
    game ends: agent 0 gets +1 if it picked WINNING_MOVE, else -1. Agent 1 is a bystander
    (reward 0): a zero-sum reward to it would teach the shared network through agent 1's
    steps too, and this test is about agent 0's credit. Each step, the agent whose turn it is
    not is marked is_active=False; the last step hands agent 0 its result while it waits."""

    is_multiagent = True
    num_agents = 2

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 1, (3,), np.float32)  # [my turn, moved, 1]
        self.action_space = gym.spaces.Discrete(4)
        self.t, self.choice = 0, -1

    def _obs(self):
        if self.t == 0:
            return [np.array([1, 0, 1], np.float32), np.array([0, 0, 1], np.float32)]
        return [np.array([0, 1, 1], np.float32), np.array([1, 1, 1], np.float32)]

    def reset(self, seed=None, options=None):
        self.t, self.choice = 0, -1
        return self._obs(), [{}, {}]

    def step(self, actions):
        if self.t == 0:
            self.choice = int(actions[0])
            self.t = 1
            infos = [{"is_active": True}, {"is_active": False}]
            return self._obs(), [0.0, 0.0], [False, False], [False, False], infos
        win = self.choice == WINNING_MOVE
        rewards = [1.0 if win else -1.0, 0.0]
        infos = [
            {"is_active": False, "true_objective": float(win)},
            {"is_active": True, "true_objective": float(not win)},
        ]
        obs, _ = self.reset()
        return obs, rewards, [True, True], [False, False], infos

    def close(self):
        pass


register_env("first_mover", lambda full_name, cfg, env_config, render_mode=None: FirstMover())


@pytest.mark.parametrize("extra", [[], ["--gae_lambda=0.0"], ["--with_vtrace"]])
def test_first_mover_learns_the_winning_move(tmp_path, extra):
    cfg = parse_cfg(
        ["--env=first_mover", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=8",
         "--rollout=8", "--batch_size=64", "--encoder_mlp_layers", "16",
         "--learning_rate=3e-3", "--train_for_env_steps=12000", "--seed=5",
         "--decorrelate_envs_on_one_worker=False", f"--train_dir={tmp_path}",
         "--experiment=fm", *extra]
    )  # fmt: skip
    assert train(cfg) == 0
    env = FirstMover()
    model = load_policy(str(tmp_path / "fm"), 0, env.observation_space, env.action_space, cfg)
    first_move = {"obs": torch.tensor([[1.0, 0.0, 1.0]])}
    d = model.dist(model.policy_head(model.encode(first_move)))
    p_win = d.log_softmax[0].exp()[0, WINNING_MOVE].item()
    assert p_win >= 0.9, f"P(winning move) = {p_win:.2f}"
