"""A masked bandit: the action that would pay most is always illegal. Training (serial, and
parallel with the inference server and with the fused local pass) never takes it and learns the
best legal one; deterministic play with the trained policy follows the mask it is given; a
mask with no legal action stops the run naming the env and agent."""

from __future__ import annotations

import json
import os

import gymnasium as gym
import numpy as np
import pytest

from rl_pbt import parse_cfg, register_env, train
from rl_pbt.models.loading import PolicyActor, load_policy
from rl_pbt.runtime.runner import Runner

EPISODE = 8


class MaskedBandit(gym.Env):
    """Each step: action 0 would pay 2 but is illegal (taking it raises), action 1 pays 1,
    action 2 pays 0. Episodes of EPISODE steps: best return 8, a uniform legal policy 4."""

    def __init__(self, empty_mask_at: int = -1):
        self.observation_space = gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(-1, 1, (3,), np.float32),
                "action_mask": gym.spaces.Box(0, 1, (3,), np.int8),
            }
        )
        self.action_space = gym.spaces.Discrete(3)
        self.empty_mask_at = empty_mask_at
        self.t = self.total = 0

    def _obs(self):
        mask = np.array([0, 1, 1], np.int8)
        if self.total == self.empty_mask_at:
            mask[:] = 0
        return {"observation": self.np_random.uniform(-1, 1, 3).astype(np.float32),
                "action_mask": mask}  # fmt: skip

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        if int(action) == 0:
            raise RuntimeError("illegal action 0 taken")
        self.t += 1
        self.total += 1
        done = self.t >= EPISODE
        info = {"true_objective": 1.0} if done else {}
        return self._obs(), float(int(action) == 1), done, False, info


register_env("masked_bandit", lambda full_name, cfg, env_config, render_mode=None: MaskedBandit())
register_env(
    "masked_bandit_empty",
    lambda full_name, cfg, env_config, render_mode=None: MaskedBandit(empty_mask_at=5),
)

FLAGS = [
    "--env=masked_bandit",
    "--num_envs_per_worker=8",
    "--rollout=8",
    "--batch_size=128",
    "--encoder_mlp_layers",
    "16",
    "--learning_rate=3e-3",
    "--stats_avg=20",
    "--train_for_env_steps=25000",
    "--seed=3",
    "--decorrelate_envs_on_one_worker=False",
]


@pytest.mark.parametrize(
    "layout",
    [
        ["--serial_mode", "--num_workers=1"],
        ["--num_workers=2", "--num_policies=2", "--inference=device"],
        ["--num_workers=2", "--num_policies=2", "--inference=local", "--fused_inference=True"],
    ],
    ids=["serial", "inference_server", "fused_local"],
)
def test_masked_bandit_never_takes_the_illegal_action_and_learns(tmp_path, layout):
    cfg = parse_cfg(FLAGS + layout + [f"--train_dir={tmp_path}", "--experiment=mb"])
    # an illegal action raises in the env, which stops the run with status 1
    assert train(cfg) == 0
    exp = os.path.join(tmp_path, "mb")
    with open(os.path.join(exp, "summary.json")) as f:
        summary = json.load(f)
    for p, s in summary["policies"].items():
        # best 8, uniform over the legal actions 4
        assert s["mean_return"] >= 7.0, f"policy {p}: {s}"

    # deterministic play with the trained policy: it prefers action 1, yet follows the mask
    env = MaskedBandit()
    model = load_policy(exp, 0, env.observation_space, env.action_space, cfg)
    actor = PolicyActor(model, env.observation_space, env.action_space, deterministic=True)
    obs = {"observation": np.zeros(3, np.float32), "action_mask": np.array([0, 1, 1], np.int8)}
    assert actor.act(obs) == 1
    obs["action_mask"] = np.array([0, 0, 1], np.int8)
    assert actor.act(obs) == 2


def test_a_mask_without_a_legal_action_names_the_env_and_agent(tmp_path, capsys):
    cfg = parse_cfg(
        FLAGS[1:]
        + ["--env=masked_bandit_empty", "--serial_mode", "--num_workers=1"]
        + ["--num_envs_per_worker=2", f"--train_dir={tmp_path}", "--experiment=empty"]
    )
    assert Runner(cfg).run() == 1
    text = capsys.readouterr().out
    line = next((ln for ln in text.splitlines() if "ERROR" in ln), "")
    assert "env 'masked_bandit_empty' (worker 0, copy 0, agent 0)" in line, text[-2000:]
    assert "the action mask allows no action" in line and "Traceback" not in text


def test_the_start_up_warm_up_plays_legal_actions_only(tmp_path):
    """--decorrelate_envs_on_one_worker (on by default) first plays each env copy a random
    number of random steps: with a mask, random legal ones (action 0 raises in the env)."""
    flags = [f for f in FLAGS if not f.startswith("--decorrelate")]
    flags = [f if not f.startswith("--train_for") else "--train_for_env_steps=2000" for f in flags]
    cfg = parse_cfg(
        flags
        + ["--serial_mode", "--num_workers=1", "--decorrelate_envs_on_one_worker=True"]
        + [f"--train_dir={tmp_path}", "--experiment=warm"]
    )
    assert train(cfg) == 0
