"""Short real runs: CartPole-v1 learns, in parallel mode (2 policies) and serial mode."""

import json
import os

import pytest

from rl_pbt import parse_cfg, train
from tests.small_run import CARTPOLE_LEARN, CARTPOLE_STEPS

FLAGS = ["--env=CartPole-v1", *CARTPOLE_LEARN]


def last20(exp_dir):
    with open(os.path.join(exp_dir, "summary.json")) as f:
        summary = json.load(f)
    return {
        int(p): (s["mean_return"], len(s["recent_returns"]), s["env_steps"])
        for p, s in summary["policies"].items()
    }


def test_parallel_two_policies_learn(tmp_path):
    cfg = parse_cfg(
        FLAGS
        + ["--num_workers=2", "--num_policies=2", f"--train_dir={tmp_path}", "--experiment=cp2"]
    )
    assert train(cfg) == 0
    result = last20(os.path.join(tmp_path, "cp2"))
    for p, (mean_return, n, steps) in result.items():
        assert n == 20
        assert steps >= CARTPOLE_STEPS
        assert mean_return >= 195, f"policy {p}: mean of last 20 episodes {mean_return}"
    # resumed, the first episodes are played by the checkpoint's weights, never by zeros or a
    # fresh init: they score like the end of the first run (a random policy scores ~20)
    more = max(steps for _, _, steps in result.values()) + 20_000
    resumed = parse_cfg(
        FLAGS
        + ["--num_workers=2", "--num_policies=2", f"--train_dir={tmp_path}", "--experiment=cp2"]
        + [f"--train_for_env_steps={more}", "--stats_avg=200"]
        + ["--decorrelate_envs_on_one_worker=False"]  # every first episode counts
    )
    with open(os.path.join(tmp_path, "cp2", "summary.json")) as f:
        before = json.load(f)["policies"]
    assert train(resumed) == 0
    with open(os.path.join(tmp_path, "cp2", "summary.json")) as f:
        policies = json.load(f)["policies"]
    for p, s in policies.items():
        # the summary goes on from the first run's: its recent episodes come first
        k = len(before[p]["recent_returns"])
        assert s["recent_returns"][:k] == before[p]["recent_returns"]
        assert s["episodes"] - before[p]["episodes"] + k <= 200  # none pushed out
        first = s["recent_returns"][k : k + 20]
        assert len(first) == 20, (p, len(first))
        assert sum(first) / 20 >= 150, f"policy {p}: first 20 episodes after resume {first}"


# serial mode learns in CI in test_action_mask_learning (the masked bandit, serial); CartPole in
# serial mode (25-30 s) by hand (-m slow)
@pytest.mark.slow
def test_serial_one_policy_learns(tmp_path):
    cfg = parse_cfg(
        FLAGS + ["--serial_mode", "--num_workers=1", f"--train_dir={tmp_path}", "--experiment=cp1"]
    )
    assert train(cfg) == 0
    ((mean_return, n, steps),) = last20(os.path.join(tmp_path, "cp1")).values()
    assert n == 20 and steps >= CARTPOLE_STEPS
    assert mean_return >= 195, f"mean of last 20 episodes {mean_return}"


# 22-33 s: by hand (-m slow); CI checks the critic's own layers in
# tests/unit/test_models.py::test_critic_of_its_own_keeps_the_losses_apart
@pytest.mark.slow
def test_serial_critic_of_its_own_learns(tmp_path):
    """--actor_critic_share_weights=False end to end: the critic's own layers train beside the
    policy's (fused acting, learner, checkpoints) and the policy learns as well."""
    cfg = parse_cfg(
        FLAGS
        + ["--serial_mode", "--num_workers=1", f"--train_dir={tmp_path}", "--experiment=own"]
        + ["--actor_critic_share_weights=False"]
    )
    assert train(cfg) == 0
    ((mean_return, n, steps),) = last20(os.path.join(tmp_path, "own")).values()
    assert n == 20 and steps >= CARTPOLE_STEPS
    assert mean_return >= 195, f"mean of last 20 episodes {mean_return}"
