"""Advantage and value-target estimators (GAE, V-trace) over time-major [T, B] rollouts.

Turn-taking: with `valid` [T, B] (False where the agent's action did not count: not its turn,
dead, padding), both estimators run over each column's own decisions. The reward of an
invalid step is credited to the agent's previous decision of the same episode (an alternating
game hands the final reward to the waiting agent on such a step), an episode end on an
invalid step ends that decision's return, and a decision bootstraps from the value of the
agent's next decision, not from the invalid steps' values (the critic is not trained there).

At the edges of a rollout: the last decision of a rollout bootstraps from `values[T]`, and
the rewards of invalid steps before the first decision of a rollout have no decision here and
are dropped. The rollout workers make both right: a rollout that ends on an agent's decision
is sent once the agent decides again (or its episode ends), however many steps it waits, with
that decision's value as `values[T]`, the episode end of the invalid steps in between marked
on its last step and their rewards as the rollout's `late_rewards` (scaled and clipped one by
one; the learner adds them to the last step's reward), so they are credited to the last
decision; those steps' copies that open the next rollout are the ones dropped. With every
step valid this is the usual estimator.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _check_time_major(name: str, x: Tensor, t: int, b: int) -> None:
    if x.shape != (t, b):
        raise ValueError(f"{name} must have shape [T, B] = [{t}, {b}], got {tuple(x.shape)}")


def decision_owners(dones: Tensor, valid: Tensor) -> Tensor:
    """[T, B] long: for each step, the decision (valid step) of the same episode and column
    that it belongs to: itself when valid, else the last decision before it; T where there is
    none in the rollout (an invalid step before the rollout's first decision)."""
    t_len, batch = valid.shape
    valid = valid.bool()
    ended = dones.bool()
    owner = torch.empty(t_len, batch, dtype=torch.long, device=valid.device)
    none = torch.full((batch,), t_len, dtype=torch.long, device=valid.device)
    current = none
    for t in range(t_len):
        current = torch.where(valid[t], t, current)
        owner[t] = current
        current = torch.where(ended[t], none, current)  # later steps: a new episode
    return owner


def credit_to_decisions(rewards: Tensor, dones: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """Per decision (valid step): its reward plus those of the invalid steps after it in the
    same episode, and whether the episode ended on it or on one of those steps. [T, B] each;
    zero at invalid steps."""
    t_len, batch = rewards.shape
    owner = decision_owners(dones, valid)  # t_len: none, the reward is dropped
    dec_rewards = rewards.new_zeros(t_len + 1, batch).scatter_add_(0, owner, rewards)
    dec_dones = rewards.new_zeros(t_len + 1, batch).scatter_reduce_(
        0, owner, dones.to(rewards.dtype), reduce="amax"
    )
    return dec_rewards[:t_len], dec_dones[:t_len]


def scale_rewards(rewards: Tensor, scale: float, clip: float) -> Tensor:
    """Rewards as the returns see them: times `scale`, then clipped to [-clip, clip]
    (--reward_scale, --reward_clip). A NaN stays NaN, so the learner's check still sees it."""
    return (rewards * scale).clamp(-clip, clip)


def bootstrap_time_limits(
    rewards: Tensor,
    values: Tensor,
    timeouts: Tensor,
    dones: Tensor,
    gamma: float,
    valid: Tensor | None = None,
) -> Tensor:
    """Rewards [T, B] with gamma * V added where an episode was cut by a time limit
    (`timeouts`: truncated and not terminated), so that the estimators, which stop at every
    episode end, bootstrap such an end instead of treating it as terminal.

    The value is that of the step's own state (`values` [T, B]), as the state after a cut is
    reset away: V(s_t) stands for V(s_t+1), one step apart. With `valid` (turn-taking), a cut
    on an agent's invalid step bootstraps from the value of its decision that the step's
    reward is credited to (`decision_owners`); with no such decision in the rollout, nothing
    is added (that reward is dropped too). Values at invalid steps are never read."""
    _check_time_major("values", values, *rewards.shape)
    _check_time_major("timeouts", timeouts, *rewards.shape)
    cut = timeouts.bool()
    if valid is None:
        own_value = values
    else:
        _check_time_major("valid", valid, *rewards.shape)
        owner = decision_owners(dones, valid)
        padded = torch.cat([values, values.new_zeros(1, values.shape[1])], 0)
        own_value = padded.gather(0, owner)
        cut = cut & (owner < rewards.shape[0])
    return torch.where(cut, rewards + gamma * own_value.to(rewards.dtype), rewards)


def gae(
    rewards: Tensor,
    values: Tensor,
    dones: Tensor,
    gamma: float,
    gae_lambda: float,
    valid: Tensor | None = None,
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
    if valid is not None:
        _check_time_major("valid", valid, t_len, batch)
        return _gae_over_decisions(rewards, values, dones, valid, gamma, gae_lambda)

    not_done = 1.0 - dones.to(rewards.dtype)
    deltas = rewards + gamma * not_done * values[1:] - values[:-1]
    decay = gamma * gae_lambda * not_done

    advantages = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(t_len - 1, -1, -1):
        running = deltas[t] + decay[t] * running
        advantages[t] = running
    return advantages, advantages + values[:-1]


def _gae_over_decisions(rewards, values, dones, valid, gamma, gae_lambda):
    rewards, dones = credit_to_decisions(rewards, dones, valid)
    valid = valid.bool()
    not_done = 1.0 - dones
    advantages = torch.zeros_like(rewards)
    next_value, running = values[-1], torch.zeros_like(rewards[0])
    for t in range(rewards.shape[0] - 1, -1, -1):
        delta = rewards[t] + gamma * not_done[t] * next_value - values[t]
        adv = delta + gamma * gae_lambda * not_done[t] * running
        advantages[t] = torch.where(valid[t], adv, 0.0)
        next_value = torch.where(valid[t], values[t], next_value)
        running = torch.where(valid[t], adv, running)
    return advantages, advantages + values[:-1]


def vtrace(
    log_rhos: Tensor,
    discounts: Tensor,
    rewards: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    clip_rho: float,
    clip_c: float,
    valid: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """V-trace off-policy correction (Espeholt et al. 2018); no gradients flow through the result.

    log_rhos = log pi(a|x) - log mu(a|x) [T, B]; discounts = gamma * (1 - done) [T, B];
    rewards [T, B]; values [T, B]; bootstrap_value [B]. Returns (vs [T, B], pg_advantages [T, B])
    with pg_advantages = min(rho, clip_rho) * (rewards + discounts * vs_{t+1} - values).

    With `valid`, over each column's decisions: give rewards and discounts per decision
    (`credit_to_decisions`); "t+1" is then the column's next valid step, and invalid steps get
    vs = values and a zero advantage.
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

    if valid is not None:
        _check_time_major("valid", valid, t_len, batch)
        return _vtrace_over_decisions(
            log_rhos, discounts, rewards, values, bootstrap_value, clip_rho, clip_c, valid
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


@torch.no_grad()
def _vtrace_over_decisions(
    log_rhos, discounts, rewards, values, bootstrap_value, clip_rho, clip_c, valid
):
    valid = valid.bool()
    rhos = torch.exp(log_rhos)
    clipped_rhos = torch.clamp(rhos, max=clip_rho)
    cs = torch.clamp(rhos, max=clip_c)
    vs = values.clone()
    pg_advantages = torch.zeros_like(values)
    next_value, running = bootstrap_value, torch.zeros_like(bootstrap_value)  # running: vs - V
    for t in range(values.shape[0] - 1, -1, -1):
        next_vs = next_value + running
        delta = clipped_rhos[t] * (rewards[t] + discounts[t] * next_value - values[t])
        vs_minus_v = delta + discounts[t] * cs[t] * running
        adv = clipped_rhos[t] * (rewards[t] + discounts[t] * next_vs - values[t])
        vs[t] = torch.where(valid[t], vs_minus_v + values[t], values[t])
        pg_advantages[t] = torch.where(valid[t], adv, 0.0)
        next_value = torch.where(valid[t], values[t], next_value)
        running = torch.where(valid[t], vs_minus_v, running)
    return vs, pg_advantages
