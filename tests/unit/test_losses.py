"""Checks the masked loss terms: garbage in masked entries, clip statistics and value clipping."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rl_pbt.learning.losses import (
    clipped_value_loss,
    entropy_loss,
    masked_mean,
    normalize_advantages,
    ppo_policy_loss,
)


def _mask_and_garbage(seed: int, shape=(6, 5)):
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(shape, generator=gen) < 0.6).double()
    mask.view(-1)[0] = 1.0
    mask.view(-1)[1] = 0.0
    garbage = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30, -1e30])
    idx = torch.randint(0, len(garbage), shape, generator=gen)
    return mask, garbage[idx].double(), gen


def _poison(x: torch.Tensor, mask: torch.Tensor, garbage: torch.Tensor) -> torch.Tensor:
    return torch.where(mask > 0, x, garbage).requires_grad_(True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_masked_entries_do_not_affect_policy_loss(seed: int) -> None:
    mask, garbage, gen = _mask_and_garbage(seed)
    shape = mask.shape
    lp_new = torch.randn(shape, generator=gen, dtype=torch.float64) * 0.3 - 1.0
    lp_old = lp_new.detach() + torch.randn(shape, generator=gen, dtype=torch.float64) * 0.3
    adv = torch.randn(shape, generator=gen, dtype=torch.float64)

    new_p = _poison(lp_new, mask, garbage)
    old_p = _poison(lp_old, mask, garbage)
    adv_p = _poison(adv, mask, garbage)
    loss, stats = ppo_policy_loss(new_p, old_p, adv_p, 0.2, mask)
    loss.backward()

    valid = mask > 0
    new_v = lp_new[valid].clone().requires_grad_(True)
    old_v = lp_old[valid].clone().requires_grad_(True)
    adv_v = adv[valid].clone().requires_grad_(True)
    ref_loss, ref_stats = ppo_policy_loss(new_v, old_v, adv_v, 0.2, torch.ones_like(new_v))
    ref_loss.backward()

    assert torch.isfinite(loss)
    torch.testing.assert_close(loss, ref_loss)
    for key in ("clip_fraction", "approx_kl", "ratio_mean"):
        assert isinstance(stats[key], torch.Tensor) and not stats[key].requires_grad
        assert math.isfinite(stats[key].item())
        assert stats[key].item() == pytest.approx(ref_stats[key].item(), rel=1e-12, abs=1e-12)
    for poisoned, ref in ((new_p, new_v), (old_p, old_v), (adv_p, adv_v)):
        assert torch.isfinite(poisoned.grad).all()
        assert (poisoned.grad[~valid] == 0).all()
        torch.testing.assert_close(poisoned.grad[valid], ref.grad)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_masked_entries_do_not_affect_value_loss(seed: int) -> None:
    mask, garbage, gen = _mask_and_garbage(seed)
    shape = mask.shape
    v_old = torch.randn(shape, generator=gen, dtype=torch.float64)
    v_new = v_old + torch.randn(shape, generator=gen, dtype=torch.float64) * 0.5
    targets = torch.randn(shape, generator=gen, dtype=torch.float64)

    new_p = _poison(v_new, mask, garbage)
    old_p = _poison(v_old, mask, garbage)
    tgt_p = _poison(targets, mask, garbage)
    loss = clipped_value_loss(new_p, old_p, tgt_p, 0.2, mask)
    loss.backward()

    valid = mask > 0
    new_v = v_new[valid].clone().requires_grad_(True)
    ref = clipped_value_loss(new_v, v_old[valid], targets[valid], 0.2, torch.ones_like(new_v))
    ref.backward()

    torch.testing.assert_close(loss, ref)
    assert torch.isfinite(new_p.grad).all()
    assert (new_p.grad[~valid] == 0).all()
    torch.testing.assert_close(new_p.grad[valid], new_v.grad)
    assert torch.isfinite(old_p.grad).all() and torch.isfinite(tgt_p.grad).all()


def test_masked_entries_do_not_affect_entropy_and_mean() -> None:
    mask, garbage, gen = _mask_and_garbage(4)
    ent = torch.rand(mask.shape, generator=gen, dtype=torch.float64)
    ent_p = _poison(ent, mask, garbage)
    loss = entropy_loss(ent_p, mask)
    loss.backward()

    valid = mask > 0
    torch.testing.assert_close(loss, -ent[valid].mean())
    expected_grad = torch.where(valid, -1.0 / valid.sum().double(), 0.0)
    torch.testing.assert_close(ent_p.grad, expected_grad)


def test_masked_mean_accepts_bool_mask() -> None:
    x = torch.tensor([1.0, 2.0, float("nan"), 4.0])
    mask = torch.tensor([True, True, False, False])
    assert masked_mean(x, mask).item() == pytest.approx(1.5)


def test_masked_mean_all_masked_is_zero_with_graph() -> None:
    x = torch.tensor([float("nan"), 3.0, float("inf")], requires_grad=True)
    out = masked_mean(x, torch.zeros(3))
    assert out.item() == 0.0 and torch.isfinite(out)
    assert out.requires_grad
    out.backward()
    assert (x.grad == 0).all()


def test_masked_mean_rejects_shape_mismatch() -> None:
    with pytest.raises(ValueError):
        masked_mean(torch.zeros(3, 2), torch.ones(3))


def test_policy_loss_all_masked_is_zero() -> None:
    lp = torch.full((4,), float("nan"), requires_grad=True)
    loss, stats = ppo_policy_loss(lp, lp.detach(), torch.ones(4), 0.2, torch.zeros(4))
    assert loss.item() == 0.0
    assert all(v.item() == 0.0 for v in stats.values())
    loss.backward()
    assert (lp.grad == 0).all()


def test_clip_fraction_and_stats_handcrafted() -> None:
    # Ratios 1.0, 1.1, 1.3, 0.7, 0.79, 2.0 (the last one masked) with clip 0.2:
    # |r - 1| > 0.2 holds for 1.3 and 0.79 and 0.7 among the five valid entries.
    ratios = torch.tensor([1.0, 1.1, 1.3, 0.7, 0.79, 2.0], dtype=torch.float64)
    lp_old = torch.tensor([-1.0, -0.5, -2.0, -0.3, -1.5, -1.0], dtype=torch.float64)
    lp_new = lp_old + ratios.log()
    adv = torch.tensor([1.0, -1.0, 2.0, 1.0, -0.5, 3.0], dtype=torch.float64)
    mask = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 0.0], dtype=torch.float64)

    loss, stats = ppo_policy_loss(lp_new, lp_old, adv, 0.2, mask)

    assert stats["clip_fraction"].item() == pytest.approx(3 / 5)
    r = ratios[:5].numpy()
    a = adv[:5].numpy()
    assert stats["ratio_mean"].item() == pytest.approx(r.mean())
    assert stats["approx_kl"].item() == pytest.approx(np.mean((r - 1) - np.log(r)))
    expected = -np.mean(np.minimum(r * a, np.clip(r, 0.8, 1.2) * a))
    assert loss.item() == pytest.approx(expected)


def test_policy_loss_gradient_vanishes_when_clipped_in_favourable_direction() -> None:
    # r = 1.5 with A > 0 is beyond the trust region, so the surrogate is flat there.
    lp_old = torch.zeros(2, dtype=torch.float64)
    lp_new = torch.tensor([math.log(1.5), math.log(1.05)], dtype=torch.float64).requires_grad_()
    adv = torch.tensor([1.0, 1.0], dtype=torch.float64)
    loss, _ = ppo_policy_loss(lp_new, lp_old, adv, 0.2, torch.ones(2))
    loss.backward()
    assert lp_new.grad[0].item() == 0.0
    assert lp_new.grad[1].item() == pytest.approx(-1.05 / 2)


def _value_loss_reference(v_new, v_old, targets, clip, mask):
    total, count = 0.0, 0
    for vn, vo, t, m in zip(v_new, v_old, targets, mask):
        if m <= 0:
            continue
        clipped = vo + min(max(vn - vo, -clip), clip)
        total += max((vn - t) ** 2, (clipped - t) ** 2)  # no 0.5, as in Sample Factory
        count += 1
    return total / max(count, 1)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_clipped_value_loss_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 40
    v_old = rng.normal(size=n)
    v_new = v_old + rng.normal(scale=0.6, size=n)
    targets = rng.normal(size=n)
    mask = (rng.random(n) < 0.7).astype(np.float64)
    clip = 0.25

    loss = clipped_value_loss(
        torch.from_numpy(v_new),
        torch.from_numpy(v_old),
        torch.from_numpy(targets),
        clip,
        torch.from_numpy(mask),
    )
    expected = _value_loss_reference(v_new, v_old, targets, clip, mask)
    assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_clipped_value_loss_uses_the_larger_error() -> None:
    # v moved from 0 to 1 toward target 2: clipped prediction 0.2 is further away, so it wins.
    loss = clipped_value_loss(
        torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([2.0]), 0.2, torch.ones(1)
    )
    assert loss.item() == pytest.approx(1.8**2)
    # v moved from 0 to 1 past target 0.5: unclipped error 0.5 beats clipped error 0.3.
    loss = clipped_value_loss(
        torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([0.5]), 0.2, torch.ones(1)
    )
    assert loss.item() == pytest.approx(0.5**2)


@pytest.mark.parametrize("seed", [0, 1])
def test_normalize_advantages_on_valid_entries(seed: int) -> None:
    mask, garbage, gen = _mask_and_garbage(seed, shape=(32, 7))
    adv = torch.randn(mask.shape, generator=gen, dtype=torch.float64) * 5.0 + 3.0
    out = normalize_advantages(torch.where(mask > 0, adv, garbage), mask)

    valid = mask > 0
    assert torch.isfinite(out).all()
    assert (out[~valid] == 0).all()
    assert out[valid].mean().item() == pytest.approx(0.0, abs=1e-10)
    assert out[valid].std(unbiased=False).item() == pytest.approx(1.0, abs=1e-6)
    expected = (adv[valid] - adv[valid].mean()) / (adv[valid].std(unbiased=False) + 1e-8)
    torch.testing.assert_close(out[valid], expected)


def test_normalize_advantages_degenerate_cases() -> None:
    all_masked = normalize_advantages(torch.tensor([float("nan"), 1.0]), torch.zeros(2))
    assert (all_masked == 0).all()
    single = normalize_advantages(torch.tensor([5.0, float("nan")]), torch.tensor([1.0, 0.0]))
    assert (single == 0).all()
    constant = normalize_advantages(torch.full((4,), 2.5), torch.ones(4))
    assert torch.isfinite(constant).all() and (constant == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_losses_keep_dtype(dtype: torch.dtype) -> None:
    x = torch.randn(5, dtype=dtype)
    mask = torch.ones(5, dtype=dtype)
    assert masked_mean(x, mask).dtype == dtype
    assert ppo_policy_loss(x, x, x, 0.2, mask)[0].dtype == dtype
    assert clipped_value_loss(x, x, x, 0.2, mask).dtype == dtype
    assert normalize_advantages(x, mask).dtype == dtype
