"""Masked PPO-style loss terms (clipped surrogate, clipped value, entropy) and their helpers.

Entries where mask == 0 add nothing to any loss or gradient, even if they hold NaN or inf.
Everything stays a tensor on the input's device (statistics too): reading a value back is
the caller's choice, so a training loop can read a whole iteration's values at once.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _valid(mask: Tensor, like: Tensor) -> Tensor:
    if mask.shape != like.shape:
        raise ValueError(
            f"mask shape {tuple(mask.shape)} must match data shape {tuple(like.shape)}"
        )
    return mask > 0


def _sanitize(x: Tensor, valid: Tensor) -> Tensor:
    # Replacing garbage before any nonlinearity is what keeps NaN out of the backward pass:
    # where() hands an exact zero gradient to the unselected branch, whereas 0 * NaN is NaN.
    return torch.where(valid, x, torch.zeros((), dtype=x.dtype, device=x.device))


def _masked_mean_valid(x: Tensor, valid: Tensor) -> Tensor:
    total = _sanitize(x, valid).sum()
    # Clamping the count turns the all-masked case into 0 / 1 instead of 0 / 0.
    count = valid.sum().clamp(min=1).to(total.dtype)
    return total / count


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of x over entries where mask > 0; 0 (still attached to the graph) if none are valid."""
    return _masked_mean_valid(x, _valid(mask, x))


def ppo_policy_loss(
    log_prob_new: Tensor,
    log_prob_old: Tensor,
    advantages: Tensor,
    clip_ratio: float,
    mask: Tensor,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped surrogate loss -min(r * A, clip(r, 1 - c, 1 + c) * A), averaged over valid entries.

    Returns (loss, stats) with stats "clip_fraction" (share of valid entries with |r - 1| > c),
    "approx_kl" (mean of (r - 1) - log r) and "ratio_mean", all as detached 0-d tensors.
    """
    valid = _valid(mask, log_prob_new)
    if log_prob_old.shape != log_prob_new.shape or advantages.shape != log_prob_new.shape:
        raise ValueError("log_prob_new, log_prob_old and advantages must share one shape")
    lp_new = _sanitize(log_prob_new, valid)
    lp_old = _sanitize(log_prob_old, valid)
    adv = _sanitize(advantages, valid)

    log_ratio = lp_new - lp_old
    ratio = torch.exp(log_ratio)
    surrogate = ratio * adv
    surrogate_clipped = torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio) * adv
    loss = -_masked_mean_valid(torch.minimum(surrogate, surrogate_clipped), valid)

    with torch.no_grad():
        clipped = ((ratio - 1.0).abs() > clip_ratio).to(ratio.dtype)
        stats = {
            "clip_fraction": _masked_mean_valid(clipped, valid),
            "approx_kl": _masked_mean_valid((ratio - 1.0) - log_ratio, valid),
            "ratio_mean": _masked_mean_valid(ratio, valid),
        }
    return loss, stats


def clipped_value_loss(
    values_new: Tensor,
    values_old: Tensor,
    targets: Tensor,
    clip_value: float,
    mask: Tensor,
) -> Tensor:
    """max((v - t)^2, (v_old + clip(v - v_old, -c, c) - t)^2), averaged over valid entries (no
    factor 0.5: --value_loss_coeff weighs the squared error itself, as in Sample Factory)."""
    valid = _valid(mask, values_new)
    if values_old.shape != values_new.shape or targets.shape != values_new.shape:
        raise ValueError("values_new, values_old and targets must share one shape")
    v_new = _sanitize(values_new, valid)
    v_old = _sanitize(values_old, valid)
    tgt = _sanitize(targets, valid)

    v_clipped = v_old + torch.clamp(v_new - v_old, -clip_value, clip_value)
    err = torch.maximum((v_new - tgt) ** 2, (v_clipped - tgt) ** 2)
    return _masked_mean_valid(err, valid)


def entropy_loss(entropy: Tensor, mask: Tensor) -> Tensor:
    """Negative mean entropy over valid entries, so minimising it encourages exploration."""
    return -masked_mean(entropy, mask)


def normalize_advantages(adv: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """(adv - mean) / (std + eps) over valid entries (population std); invalid entries become 0."""
    valid = _valid(mask, adv)
    clean = _sanitize(adv, valid)
    mean = _masked_mean_valid(clean, valid)
    centered = _sanitize(clean - mean, valid)
    std = _masked_mean_valid(centered**2, valid).sqrt()
    return _sanitize(centered / (std + eps), valid)
