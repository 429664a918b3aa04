"""GAE and V-trace over each agent's own decisions (turn-taking): checked against a NumPy
reference that compacts each column to its decisions and runs the textbook estimator there."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl_pbt.learning.advantages import credit_to_decisions, gae, vtrace


def compact(rewards, dones, valid, t_len):
    """Per column: the decision steps, each with its credited reward and episode end."""
    steps, rew, end = [], [], []
    owner = None
    for t in range(t_len):
        if valid[t]:
            steps.append(t)
            rew.append(rewards[t])
            end.append(bool(dones[t]))
            owner = len(steps) - 1
        elif owner is not None:
            rew[owner] += rewards[t]
            end[owner] = end[owner] or bool(dones[t])
        if dones[t]:
            owner = None
    return steps, rew, end


def ref_gae(rewards, values, dones, valid, gamma, lam):
    t_len, batch = rewards.shape
    adv = np.zeros((t_len, batch))
    for b in range(batch):
        steps, rew, end = compact(rewards[:, b], dones[:, b], valid[:, b], t_len)
        running, next_v = 0.0, values[t_len, b]
        for i in range(len(steps) - 1, -1, -1):
            t = steps[i]
            nd = 0.0 if end[i] else 1.0
            delta = rew[i] + gamma * nd * next_v - values[t, b]
            running = delta + gamma * lam * nd * running
            adv[t, b] = running
            next_v = values[t, b]
    return adv


def ref_vtrace(log_rhos, rewards, values, boot, dones, valid, gamma, rho_bar, c_bar):
    t_len, batch = rewards.shape
    vs = values.copy()
    pg = np.zeros_like(values)
    for b in range(batch):
        steps, rew, end = compact(rewards[:, b], dones[:, b], valid[:, b], t_len)
        vs_next, v_next = boot[b], boot[b]
        for i in range(len(steps) - 1, -1, -1):
            t = steps[i]
            disc = 0.0 if end[i] else gamma
            rho = np.exp(log_rhos[t, b])
            r_bar, c = min(rho, rho_bar), min(rho, c_bar)
            vs[t, b] = (
                values[t, b]
                + r_bar * (rew[i] + disc * v_next - values[t, b])
                + (disc * c * (vs_next - v_next))
            )
            pg[t, b] = r_bar * (rew[i] + disc * vs_next - values[t, b])
            vs_next, v_next = vs[t, b], values[t, b]
    return vs, pg


def sample(seed, t_len=24, batch=16, p_valid=0.6, p_done=0.1):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(t_len, batch))
    values = rng.normal(size=(t_len + 1, batch))
    dones = (rng.random((t_len, batch)) < p_done).astype(np.float64)
    valid = rng.random((t_len, batch)) < p_valid
    log_rhos = rng.normal(0, 0.5, (t_len, batch))
    return rewards, values, dones, valid, log_rhos


def t(x):
    return torch.from_numpy(np.asarray(x))


@pytest.mark.parametrize("seed", range(5))
def test_gae_over_decisions_matches_numpy(seed):
    rewards, values, dones, valid, _ = sample(seed)
    adv, ret = gae(t(rewards), t(values), t(dones), 0.97, 0.9, valid=t(valid))
    ref = ref_gae(rewards, values, dones, valid, 0.97, 0.9)
    np.testing.assert_allclose(adv.numpy(), ref, atol=1e-10)
    np.testing.assert_allclose(ret.numpy(), ref + values[:-1], atol=1e-10)


@pytest.mark.parametrize("seed", range(5))
def test_vtrace_over_decisions_matches_numpy(seed):
    rewards, values, dones, valid, log_rhos = sample(seed)
    r_dec, d_dec = credit_to_decisions(t(rewards), t(dones), t(valid))
    vs, pg = vtrace(
        t(log_rhos), 0.97 * (1.0 - d_dec), r_dec, t(values[:-1]), t(values[-1]), 1.0, 1.0,
        valid=t(valid),
    )  # fmt: skip
    ref_vs, ref_pg = ref_vtrace(
        log_rhos, rewards, values[:-1], values[-1], dones, valid, 0.97, 1.0, 1.0
    )
    np.testing.assert_allclose(vs.numpy(), ref_vs, atol=1e-10)
    np.testing.assert_allclose(pg.numpy(), ref_pg, atol=1e-10)


@pytest.mark.parametrize("seed", range(3))
def test_every_step_valid_is_the_usual_estimator(seed):
    rewards, values, dones, _, log_rhos = sample(seed)
    valid = np.ones_like(dones, dtype=bool)
    a1, r1 = gae(t(rewards), t(values), t(dones), 0.99, 0.95, valid=t(valid))
    a0, r0 = gae(t(rewards), t(values), t(dones), 0.99, 0.95)
    assert torch.allclose(a1, a0, atol=1e-12) and torch.allclose(r1, r0, atol=1e-12)
    disc = 0.99 * (1.0 - t(dones))
    args = (t(log_rhos), disc, t(rewards), t(values[:-1]), t(values[-1]), 1.0, 1.0)
    vs1, pg1 = vtrace(*args, valid=t(valid))
    vs0, pg0 = vtrace(*args)
    assert torch.allclose(vs1, vs0, atol=1e-12) and torch.allclose(pg1, pg0, atol=1e-12)


def test_the_waiting_agents_final_reward_goes_to_its_last_move():
    # one agent of an alternating game: it moves at steps 0 and 2, waits at 1 and 3; the
    # opponent wins on step 3, which hands this agent -1 on its waiting step
    rewards = t([[0.0], [0.0], [0.0], [-1.0]])
    dones = t([[0.0], [0.0], [0.0], [1.0]])
    valid = t([[True], [False], [True], [False]])
    # values of the waiting states are garbage (never trained): they must not matter
    values = t([[0.1], [50.0], [0.2], [-50.0], [9.0]])
    adv, ret = gae(rewards, values, dones, 1.0, 1.0, valid=valid)
    assert ret[2, 0].item() == pytest.approx(-1.0)  # the last move earned the loss
    assert ret[0, 0].item() == pytest.approx(-1.0)  # ... and so did the first (gamma = 1)
    assert adv[1, 0] == 0 and adv[3, 0] == 0
    # with lambda < 1 the usual estimator leans on the waiting steps' values; this one not
    half, _ = gae(rewards, values, dones, 1.0, 0.5, valid=valid)
    plain, _ = gae(rewards, values, dones, 1.0, 0.5)
    assert half[2, 0].item() == pytest.approx(-1.2)  # -1 - V(step 2)
    assert plain[2, 0].item() == pytest.approx(-25.7)  # (V3 - V2) + 0.5 (r3 - V3)


@pytest.mark.parametrize("seed", range(3))
def test_padding_after_an_episode_end_changes_nothing(seed):
    """A single-agent rollout is invalid only where it was padded after its episode ended
    (done, reward 0, value 0): there the plain estimators already agree with the decision
    ones, which is why learners of single-agent envs use the plain ones."""
    rng = np.random.default_rng(seed)
    t_len, batch = 16, 32
    rewards, values = rng.normal(size=(t_len, batch)), rng.normal(size=(t_len + 1, batch))
    dones = (rng.random((t_len, batch)) < 0.1).astype(np.float64)
    valid = np.ones((t_len, batch), dtype=bool)
    for b in range(batch // 2):  # these end early and are padded
        end = int(rng.integers(1, t_len))
        dones[end - 1, b] = 1.0
        dones[end:, b], rewards[end:, b], values[end:, b], valid[end:, b] = 1.0, 0.0, 0.0, False
    a1, _ = gae(t(rewards), t(values), t(dones), 0.99, 0.95, valid=t(valid))
    a0, _ = gae(t(rewards), t(values), t(dones), 0.99, 0.95)
    assert torch.allclose(a1[t(valid)], a0[t(valid)], atol=1e-12)
