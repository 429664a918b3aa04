"""Checks GAE and V-trace against direct NumPy sum-form references and known special cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl_pbt.learning.advantages import gae, vtrace
from rl_pbt.runtime.devices import probe_gpu_count

SEEDS = [0, 1, 2]
T_SIZES = [1, 5, 32]
B_SIZES = [1, 7]


def _random_dones(rng: np.random.Generator, t_len: int, batch: int) -> np.ndarray:
    dones = (rng.random((t_len, batch)) < 0.2).astype(np.float64)
    # Always exercise an episode ending on the final step of the rollout for one column.
    dones[-1, 0] = 1.0
    return dones


def _gae_reference(rewards, values, dones, gamma, lam):
    """A_t = sum_s (gamma * lam)^(s - t) * prod_{t <= i < s} (1 - d_i) * delta_s."""
    deltas = rewards + gamma * (1.0 - dones) * values[1:] - values[:-1]
    return trace_sums(deltas, dones, gamma, lam)


def trace_sums(deltas, dones, gamma, lam):
    """A_t = sum_s (gamma * lam)^(s - t) * prod_{t <= i < s} (1 - d_i) * deltas_s, loop by loop."""
    t_len, batch = deltas.shape
    adv = np.zeros((t_len, batch))
    for b in range(batch):
        for t in range(t_len):
            total, weight = 0.0, 1.0
            for s in range(t, t_len):
                total += weight * deltas[s, b]
                weight *= gamma * lam * (1.0 - dones[s, b])
            adv[t, b] = total
    return adv


def _discounted_returns(rewards, values, dones, gamma):
    """Monte-Carlo return that stops at an episode end and bootstraps from values[T] otherwise."""
    t_len, batch = rewards.shape
    ret = np.zeros((t_len, batch))
    for b in range(batch):
        for t in range(t_len):
            total, discount, ended = 0.0, 1.0, False
            for s in range(t, t_len):
                total += discount * rewards[s, b]
                if dones[s, b]:
                    ended = True
                    break
                discount *= gamma
            if not ended:
                total += discount * values[t_len, b]
            ret[t, b] = total
    return ret


def _vtrace_reference(log_rhos, discounts, rewards, values, bootstrap, clip_rho, clip_c):
    """vs_t = V_t + sum_s (prod_{t <= i < s} disc_i * c_i) * delta_s, as in the paper's eq. (1)."""
    t_len, batch = rewards.shape
    rhos = np.exp(log_rhos)
    crho = np.minimum(rhos, clip_rho)
    cs = np.minimum(rhos, clip_c)
    v_next = np.concatenate([values[1:], bootstrap[None]], axis=0)
    vs = np.zeros((t_len, batch))
    for b in range(batch):
        for t in range(t_len):
            total, weight = 0.0, 1.0
            for s in range(t, t_len):
                delta = crho[s, b] * (rewards[s, b] + discounts[s, b] * v_next[s, b] - values[s, b])
                total += weight * delta
                weight *= discounts[s, b] * cs[s, b]
            vs[t, b] = values[t, b] + total
    vs_next = np.concatenate([vs[1:], bootstrap[None]], axis=0)
    pg_adv = crho * (rewards + discounts * vs_next - values)
    return vs, pg_adv


def _t(x: np.ndarray, dtype=torch.float64, device="cpu") -> torch.Tensor:
    return torch.as_tensor(x, dtype=dtype, device=device)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("t_len", T_SIZES)
@pytest.mark.parametrize("batch", B_SIZES)
def test_gae_matches_reference(seed: int, t_len: int, batch: int) -> None:
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(t_len, batch))
    values = rng.normal(size=(t_len + 1, batch))
    dones = _random_dones(rng, t_len, batch)
    gamma, lam = 0.97, 0.9

    adv, ret = gae(_t(rewards), _t(values), _t(dones), gamma, lam)
    expected = _gae_reference(rewards, values, dones, gamma, lam)

    assert adv.shape == (t_len, batch) and ret.shape == (t_len, batch)
    np.testing.assert_allclose(adv.numpy(), expected, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ret.numpy(), expected + values[:-1], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("t_len", T_SIZES)
@pytest.mark.parametrize("batch", B_SIZES)
def test_gae_lambda_one_is_discounted_return_minus_value(seed: int, t_len: int, batch: int) -> None:
    rng = np.random.default_rng(100 + seed)
    rewards = rng.normal(size=(t_len, batch))
    values = rng.normal(size=(t_len + 1, batch))
    dones = _random_dones(rng, t_len, batch)
    gamma = 0.95

    adv, ret = gae(_t(rewards), _t(values), _t(dones), gamma, 1.0)
    mc = _discounted_returns(rewards, values, dones, gamma)

    np.testing.assert_allclose(ret.numpy(), mc, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(adv.numpy(), mc - values[:-1], rtol=1e-10, atol=1e-10)


def test_gae_lambda_zero_is_one_step_td_error() -> None:
    rng = np.random.default_rng(7)
    rewards = rng.normal(size=(6, 3))
    values = rng.normal(size=(7, 3))
    dones = _random_dones(rng, 6, 3)
    gamma = 0.9

    adv, _ = gae(_t(rewards), _t(values), _t(dones), gamma, 0.0)
    td = rewards + gamma * (1.0 - dones) * values[1:] - values[:-1]
    np.testing.assert_allclose(adv.numpy(), td, rtol=1e-12, atol=1e-12)


def test_gae_done_stops_bootstrapping() -> None:
    rng = np.random.default_rng(3)
    t_len, batch, cut = 8, 4, 3
    rewards = rng.normal(size=(t_len, batch))
    values = rng.normal(size=(t_len + 1, batch))
    dones = np.zeros((t_len, batch))
    dones[cut] = 1.0

    adv_a, _ = gae(_t(rewards), _t(values), _t(dones), 0.99, 0.95)

    # Everything after the episode end belongs to another episode and must not leak backwards.
    rewards_b, values_b = rewards.copy(), values.copy()
    rewards_b[cut + 1 :] += 100.0
    values_b[cut + 1 :] -= 50.0
    adv_b, _ = gae(_t(rewards_b), _t(values_b), _t(dones), 0.99, 0.95)

    np.testing.assert_allclose(adv_a[: cut + 1].numpy(), adv_b[: cut + 1].numpy(), rtol=0, atol=0)
    assert not np.allclose(adv_a[cut + 1 :].numpy(), adv_b[cut + 1 :].numpy())
    # At the terminal step the advantage is exactly r - V.
    np.testing.assert_allclose(adv_a[cut].numpy(), rewards[cut] - values[cut], rtol=1e-12)


def test_gae_done_on_last_step_ignores_bootstrap_value() -> None:
    rewards = torch.tensor([[1.0], [2.0]], dtype=torch.float64)
    dones = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    values_a = torch.tensor([[0.5], [0.25], [10.0]], dtype=torch.float64)
    values_b = values_a.clone()
    values_b[-1] = -1e6
    adv_a, _ = gae(rewards, values_a, dones, 0.9, 0.8)
    adv_b, _ = gae(rewards, values_b, dones, 0.9, 0.8)
    torch.testing.assert_close(adv_a, adv_b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gae_keeps_dtype(dtype: torch.dtype) -> None:
    rng = np.random.default_rng(11)
    rewards = rng.normal(size=(5, 2))
    values = rng.normal(size=(6, 2))
    dones = _random_dones(rng, 5, 2)
    adv, ret = gae(_t(rewards, dtype), _t(values, dtype), _t(dones, dtype), 0.99, 0.95)
    assert adv.dtype == dtype and ret.dtype == dtype
    expected = _gae_reference(rewards, values, dones, 0.99, 0.95)
    np.testing.assert_allclose(adv.double().numpy(), expected, rtol=1e-5, atol=1e-5)


def test_gae_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError):
        gae(torch.zeros(4, 2), torch.zeros(4, 2), torch.zeros(4, 2), 0.99, 0.95)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("t_len", T_SIZES)
@pytest.mark.parametrize("batch", B_SIZES)
@pytest.mark.parametrize("clips", [(1.0, 1.0), (0.8, 0.6), (2.0, 1.0)])
def test_vtrace_matches_reference(
    seed: int, t_len: int, batch: int, clips: tuple[float, float]
) -> None:
    rng = np.random.default_rng(seed)
    gamma = 0.98
    log_rhos = rng.normal(scale=0.7, size=(t_len, batch))
    dones = _random_dones(rng, t_len, batch)
    discounts = gamma * (1.0 - dones)
    rewards = rng.normal(size=(t_len, batch))
    values = rng.normal(size=(t_len, batch))
    bootstrap = rng.normal(size=(batch,))
    clip_rho, clip_c = clips

    vs, pg_adv = vtrace(
        _t(log_rhos), _t(discounts), _t(rewards), _t(values), _t(bootstrap), clip_rho, clip_c
    )
    exp_vs, exp_pg = _vtrace_reference(
        log_rhos, discounts, rewards, values, bootstrap, clip_rho, clip_c
    )
    np.testing.assert_allclose(vs.numpy(), exp_vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(pg_adv.numpy(), exp_pg, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("t_len", T_SIZES)
@pytest.mark.parametrize("batch", B_SIZES)
@pytest.mark.parametrize("clips", [(1.0, 1.0), (1.5, 3.0)])
def test_vtrace_on_policy_is_discounted_return(
    seed: int, t_len: int, batch: int, clips: tuple[float, float]
) -> None:
    rng = np.random.default_rng(200 + seed)
    gamma = 0.97
    dones = _random_dones(rng, t_len, batch)
    rewards = rng.normal(size=(t_len, batch))
    values = rng.normal(size=(t_len, batch))
    bootstrap = rng.normal(size=(batch,))

    vs, pg_adv = vtrace(
        _t(np.zeros((t_len, batch))),
        _t(gamma * (1.0 - dones)),
        _t(rewards),
        _t(values),
        _t(bootstrap),
        *clips,
    )
    mc = _discounted_returns(rewards, np.concatenate([values, bootstrap[None]]), dones, gamma)
    np.testing.assert_allclose(vs.numpy(), mc, rtol=1e-10, atol=1e-10)

    # On-policy, the policy-gradient advantage is the one-step target built on the next vs.
    vs_next = np.concatenate([mc[1:], bootstrap[None]], axis=0)
    expected_pg = rewards + gamma * (1.0 - dones) * vs_next - values
    np.testing.assert_allclose(pg_adv.numpy(), expected_pg, rtol=1e-10, atol=1e-10)


def test_vtrace_rho_clipping_matters() -> None:
    rng = np.random.default_rng(5)
    t_len, batch = 6, 3
    # Positive log-rhos put every rho above 1, so any clip_rho < 1 must bind.
    log_rhos = np.abs(rng.normal(size=(t_len, batch))) + 0.1
    discounts = np.full((t_len, batch), 0.9)
    rewards = rng.normal(size=(t_len, batch))
    values = rng.normal(size=(t_len, batch))
    bootstrap = rng.normal(size=(batch,))
    args = [_t(a) for a in (log_rhos, discounts, rewards, values, bootstrap)]

    vs_clip, pg_clip = vtrace(*args, clip_rho=0.5, clip_c=1.0)
    vs_loose, pg_loose = vtrace(*args, clip_rho=100.0, clip_c=1.0)
    assert not torch.allclose(vs_clip, vs_loose)
    assert not torch.allclose(pg_clip, pg_loose)

    exp_vs, exp_pg = _vtrace_reference(log_rhos, discounts, rewards, values, bootstrap, 0.5, 1.0)
    np.testing.assert_allclose(vs_clip.numpy(), exp_vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(pg_clip.numpy(), exp_pg, rtol=1e-10, atol=1e-10)

    # With every rho clipped to the constant 0.5, the last-step vs is a fixed TD blend.
    last = values[-1] + 0.5 * (rewards[-1] + 0.9 * bootstrap - values[-1])
    np.testing.assert_allclose(vs_clip[-1].numpy(), last, rtol=1e-12)


def test_vtrace_has_no_gradient() -> None:
    t_len, batch = 4, 2
    log_rhos = torch.randn(t_len, batch, requires_grad=True)
    values = torch.randn(t_len, batch, requires_grad=True)
    bootstrap = torch.randn(batch, requires_grad=True)
    vs, pg_adv = vtrace(
        log_rhos,
        torch.full((t_len, batch), 0.99),
        torch.randn(t_len, batch),
        values,
        bootstrap,
        1.0,
        1.0,
    )
    assert not vs.requires_grad and not pg_adv.requires_grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_vtrace_keeps_dtype(dtype: torch.dtype) -> None:
    rng = np.random.default_rng(13)
    t_len, batch = 5, 3
    arrays = (
        rng.normal(scale=0.5, size=(t_len, batch)),
        np.full((t_len, batch), 0.99),
        rng.normal(size=(t_len, batch)),
        rng.normal(size=(t_len, batch)),
        rng.normal(size=(batch,)),
    )
    vs, pg_adv = vtrace(*[_t(a, dtype) for a in arrays], 1.0, 1.0)
    assert vs.dtype == dtype and pg_adv.dtype == dtype
    exp_vs, exp_pg = _vtrace_reference(*arrays, 1.0, 1.0)
    np.testing.assert_allclose(vs.double().numpy(), exp_vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pg_adv.double().numpy(), exp_pg, rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.skipif(probe_gpu_count() == 0, reason="needs a CUDA device")
def test_gae_and_vtrace_on_cuda() -> None:
    rng = np.random.default_rng(17)
    t_len, batch = 32, 7
    rewards = rng.normal(size=(t_len, batch))
    values = rng.normal(size=(t_len + 1, batch))
    dones = _random_dones(rng, t_len, batch)
    adv, _ = gae(*[_t(a, device="cuda") for a in (rewards, values, dones)], 0.99, 0.95)
    assert adv.device.type == "cuda"
    np.testing.assert_allclose(
        adv.cpu().numpy(), _gae_reference(rewards, values, dones, 0.99, 0.95), rtol=1e-10
    )

    log_rhos = rng.normal(scale=0.5, size=(t_len, batch))
    discounts = 0.99 * (1.0 - dones)
    args = (log_rhos, discounts, rewards, values[:-1], values[-1])
    vs, _ = vtrace(*[_t(a, device="cuda") for a in args], 1.0, 1.0)
    assert vs.device.type == "cuda"
    exp_vs, _ = _vtrace_reference(*args, 1.0, 1.0)
    np.testing.assert_allclose(vs.cpu().numpy(), exp_vs, rtol=1e-10, atol=1e-10)
