"""Episodes cut by a time limit bootstrap from their last state's value (`--value_bootstrap`):
`bootstrap_time_limits` against a NumPy reference, alone and with turn-taking, and GAE with it
against a direct sum-form reference in which a cut step's next value is V(s_t)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl_pbt.learning.advantages import bootstrap_time_limits, gae
from tests.unit.test_advantages import trace_sums


def _sample(seed, t_len=20, batch=9, p_valid=1.0):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(t_len, batch))
    values = rng.normal(size=(t_len + 1, batch))
    ends = rng.random((t_len, batch)) < 0.25
    cut = ends & (rng.random((t_len, batch)) < 0.5)
    valid = rng.random((t_len, batch)) < p_valid
    return rewards, values, ends.astype(np.float64), cut, valid


def _t(x):
    return torch.as_tensor(x)


def _reference(rewards, values, dones, cut, gamma, valid=None):
    """Walk each column: a cut step adds gamma * the value of the decision its reward belongs
    to (the step itself without turn-taking; else the last valid step of its episode)."""
    out = rewards.copy()
    t_len, batch = rewards.shape
    for b in range(batch):
        owner = None
        for t in range(t_len):
            if valid is None or valid[t, b]:
                owner = t
            if cut[t, b] and owner is not None:
                out[t, b] += gamma * values[owner, b]
            if dones[t, b]:
                owner = None
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_step_valid_matches_numpy(seed):
    rewards, values, dones, cut, _ = _sample(seed)
    got = bootstrap_time_limits(_t(rewards), _t(values[:-1]), _t(cut), _t(dones), 0.9)
    np.testing.assert_allclose(got.numpy(), _reference(rewards, values, dones, cut, 0.9))
    assert cut.any() and not np.allclose(got.numpy(), rewards)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_turn_taking_credits_the_agents_last_decision(seed):
    rewards, values, dones, cut, valid = _sample(seed, p_valid=0.5)
    values[:-1][~valid] = np.nan  # never read: the critic does not learn waiting states
    got = bootstrap_time_limits(
        _t(rewards), _t(values[:-1]), _t(cut), _t(dones), 0.9, valid=_t(valid)
    ).numpy()
    ref = _reference(rewards, values, dones, cut, 0.9, valid=valid)
    np.testing.assert_allclose(got, ref)
    assert np.isfinite(got).all()
    waiting_cuts = cut & ~valid
    assert waiting_cuts.any() and not np.allclose(got[waiting_cuts], rewards[waiting_cuts])


def test_a_cut_before_the_first_decision_adds_nothing():
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[float("nan")], [5.0], [7.0]])
    valid = torch.tensor([[False], [True], [True]])
    dones = torch.tensor([[1.0], [0.0], [1.0]])
    cut = torch.tensor([[True], [False], [True]])
    got = bootstrap_time_limits(rewards, values, cut, dones, 0.5, valid=valid)
    assert got.squeeze(1).tolist() == [1.0, 2.0, 3.0 + 0.5 * 7.0]


def _gae_reference_with_cuts(rewards, values, dones, cut, gamma, lam):
    """The sum form, where delta_s bootstraps from V(s_s) at a cut (the episode ends, the trace
    stops, but the value goes on)."""
    following = np.where(cut, values[:-1], np.where(dones > 0, 0.0, values[1:]))
    return trace_sums(rewards + gamma * following - values[:-1], dones, gamma, lam)


@pytest.mark.parametrize("seed", [3, 4])
def test_gae_after_bootstrap_matches_a_cut_aware_reference(seed):
    rewards, values, dones, cut, _ = _sample(seed)
    boot = bootstrap_time_limits(_t(rewards), _t(values[:-1]), _t(cut), _t(dones), 0.97)
    adv, _ = gae(boot, _t(values), _t(dones), 0.97, 0.9)
    ref = _gae_reference_with_cuts(rewards, values, dones, cut, 0.97, 0.9)
    np.testing.assert_allclose(adv.numpy(), ref, atol=1e-10)


def test_shapes_are_checked():
    r = torch.zeros(4, 2)
    with pytest.raises(ValueError, match="timeouts"):
        bootstrap_time_limits(r, r, torch.zeros(4, 3, dtype=torch.bool), r, 0.9)
