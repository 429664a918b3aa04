"""Advantage and value-target estimators (GAE, V-trace) over time-major [T, B] rollouts."""

from __future__ import annotations

import torch
from torch import Tensor


def _check_time_major(name: str, x: Tensor, t: int, b: int) -> None:
    if x.shape != (t, b):
        raise ValueError(f"{name} must have shape [T, B] = [{t}, {b}], got {tuple(x.shape)}")


def gae(
    rewards: Tensor,
    values: Tensor,
    dones: Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016).

    rewards [T, B]; values [T+1, B] where values[T] is the bootstrap value; dones [T, B] is 1.0
    where the episode ended after taking action t, so values[t+1] starts a new episode and is not
    bootstrapped into step t. Returns (advantages [T, B], returns [T, B] = advantages + values[:T]).
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape [T, B], got {tuple(rewards.shape)}")
    t_len, batch = rewards.shape
    if values.shape != (t_len + 1, batch):
        raise ValueError(
            f"values must have shape [T+1, B] = [{t_len + 1}, {batch}], got {tuple(values.shape)}"
        )
    _check_time_major("dones", dones, t_len, batch)

    not_done = 1.0 - dones.to(rewards.dtype)
    deltas = rewards + gamma * not_done * values[1:] - values[:-1]
    decay = gamma * gae_lambda * not_done

    advantages = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(t_len - 1, -1, -1):
        running = deltas[t] + decay[t] * running
        advantages[t] = running
    return advantages, advantages + values[:-1]


def vtrace(
    log_rhos: Tensor,
    discounts: Tensor,
    rewards: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    clip_rho: float,
    clip_c: float,
) -> tuple[Tensor, Tensor]:
    """V-trace off-policy correction (Espeholt et al. 2018); no gradients flow through the result.

    log_rhos = log pi(a|x) - log mu(a|x) [T, B]; discounts = gamma * (1 - done) [T, B];
    rewards [T, B]; values [T, B]; bootstrap_value [B]. Returns (vs [T, B], pg_advantages [T, B])
    with pg_advantages = min(rho, clip_rho) * (rewards + discounts * vs_{t+1} - values).
    """
    if log_rhos.dim() != 2:
        raise ValueError(f"log_rhos must have shape [T, B], got {tuple(log_rhos.shape)}")
    t_len, batch = log_rhos.shape
    _check_time_major("discounts", discounts, t_len, batch)
    _check_time_major("rewards", rewards, t_len, batch)
    _check_time_major("values", values, t_len, batch)
    if bootstrap_value.shape != (batch,):
        raise ValueError(
            f"bootstrap_value must have shape [B] = [{batch}], got {tuple(bootstrap_value.shape)}"
        )

    with torch.no_grad():
        rhos = torch.exp(log_rhos)
        clipped_rhos = torch.clamp(rhos, max=clip_rho)
        cs = torch.clamp(rhos, max=clip_c)

        values_next = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
        deltas = clipped_rhos * (rewards + discounts * values_next - values)
        decay = discounts * cs

        # Recursing on vs - V keeps the accumulator independent of the value scale.
        vs_minus_v = torch.empty_like(values)
        running = torch.zeros_like(bootstrap_value)
        for t in range(t_len - 1, -1, -1):
            running = deltas[t] + decay[t] * running
            vs_minus_v[t] = running
        vs = vs_minus_v + values

        vs_next = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
        pg_advantages = clipped_rhos * (rewards + discounts * vs_next - values)
    return vs, pg_advantages
