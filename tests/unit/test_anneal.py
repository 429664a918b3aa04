"""--anneal_env_steps: the learning rate and the entropy bonus fall linearly with the policy's env
steps to --anneal_final_fraction of their values, PBT's values included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl_pbt import parse_cfg
from rl_pbt.config.parse import ConfigError
from tests.unit.test_learner_hot_path import fill, make_learner


@pytest.mark.parametrize("steps", [0, 1, 250, 500, 999, 1000, 1001, 5000])
def test_the_factor_falls_linearly_then_stays(tmp_path, steps):
    learner = make_learner(tmp_path, "--anneal_env_steps=1000", "--anneal_final_fraction=0.2")
    learner.env_steps = steps
    expected = np.interp(steps, [0, 1000], [1.0, 0.2])  # NumPy's reference
    assert learner.anneal_factor() == pytest.approx(expected)


def test_off_by_default(tmp_path):
    learner = make_learner(tmp_path)
    learner.env_steps = 10**9
    assert learner.anneal_factor() == 1.0


def test_an_annealed_update_is_the_update_at_the_scaled_values(tmp_path):
    """Halfway through the annealing (factor 0.55), one iteration gives the weights of an
    iteration without annealing at 0.55 x the learning rate and 0.55 x the entropy bonus."""
    runs = []
    for flags in (
        ["--anneal_env_steps=1000", "--learning_rate=1e-3", "--exploration_loss_coeff=0.05"],
        ["--learning_rate=5.5e-4", "--exploration_loss_coeff=0.0275"],
    ):
        learner = make_learner(tmp_path, "--use_rnn=False", *flags)
        learner.env_steps = 500
        fill(learner, torch.Generator().manual_seed(7), learner.traj_per_iteration)
        assert learner.train_if_ready()
        assert learner.stats["learning_rate"] == pytest.approx(5.5e-4)
        runs.append(learner.model.state_dict())
    for k in runs[0]:
        torch.testing.assert_close(runs[0][k], runs[1][k], rtol=1e-5, atol=1e-6, msg=k)


def test_pbt_values_are_annealed_too(tmp_path):
    learner = make_learner(tmp_path, "--anneal_env_steps=1000", "--anneal_final_fraction=0.1")
    learner.env_steps = 2000
    learner.set_hparams({"learning_rate": 2e-3})
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(2e-4)


def test_a_final_fraction_outside_0_1_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"--anneal_final_fraction=0.0: must be in \(0.0, 1.0\]"):
        parse_cfg(["--env=CartPole-v1", "--anneal_final_fraction=0", f"--train_dir={tmp_path}"])
