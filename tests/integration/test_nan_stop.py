"""An env whose rewards turn NaN mid-run: the rollout worker that sees the first one stops the
run with one line naming the env and the rule (non-zero status), before any learner trains on
it, and the newest checkpoint holds finite weights. (A learner's own non-finite updates, from a
learning rate too large, say, are undone and counted: tests/unit/test_nonfinite.py.)"""

import glob
import math
import os

import gymnasium as gym
import torch

from rl_pbt import parse_cfg, register_env, train
from rl_pbt.learning.checkpoints import read_checkpoint
from tests.small_run import SMALL_RUN

NAN_AFTER_STEPS = 8000  # per env copy: 2 workers x 4 copies, about 64k env steps in all


class NanRewardAfter(gym.Wrapper):
    """CartPole whose rewards are NaN from its `nan_after`-th step on."""

    def __init__(self, env: gym.Env, nan_after: int):
        super().__init__(env)
        self.nan_after = nan_after
        self.steps = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps >= self.nan_after:
            reward = math.nan
        return obs, reward, terminated, truncated, info


def make_nan_cartpole(name, cfg, env_config, render_mode=None):
    return NanRewardAfter(gym.make("CartPole-v1", render_mode=render_mode), NAN_AFTER_STEPS)


register_env("nan_cartpole", make_nan_cartpole)


def test_nan_rewards_stop_the_run_and_keep_a_finite_checkpoint(tmp_path, capsys):
    cfg = parse_cfg(
        SMALL_RUN
        + [
            "--env=nan_cartpole",
            "--save_every_sec=1",
            "--train_for_seconds=30",  # a safety net: the NaN stop comes well before
            "--status_interval=30",
            "--seed=0",
            f"--train_dir={tmp_path}",
            "--experiment=nan",
        ]
    )
    status = train(cfg)
    out = capsys.readouterr().out
    assert status != 0, out[-3000:]
    assert "env 'nan_cartpole' (worker" in out and "the reward is nan" in out, out[-3000:]
    assert "Traceback" not in out
    assert "--train_for_seconds=30 reached" not in out
    files = sorted(glob.glob(os.path.join(tmp_path, "nan", "checkpoint_p0", "checkpoint_*.pth")))
    assert files, out[-3000:]
    state = read_checkpoint(files[-1], map_location="cpu")
    assert state["version"] > 0
    for name, tensor in state["model"].items():
        assert bool(torch.isfinite(tensor).all()), name
    for st in state["optimizer"]["state"].values():
        assert bool(torch.isfinite(st["exp_avg"]).all() and torch.isfinite(st["exp_avg_sq"]).all())
