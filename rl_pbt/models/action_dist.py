"""Action distributions for Discrete, MultiDiscrete/Tuple-of-Discrete and Box spaces.

`ActionSpec` describes how actions are stored (int64 or float32, `dim` columns) and turns the
policy head's output into samples, log-probabilities and entropies.

With an action mask (1 legal, 0 illegal; one entry per action, head after head), an illegal
action's logit is replaced by MASKED_LOGIT before the log-softmax: its probability is exactly
0 (exp underflows), so it is never sampled nor picked by argmax, and log-probs and entropy are
those of the distribution over the legal actions alone. The value is finite, so the entropy
has no 0 * inf.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

MASKED_LOGIT = -1e9


@dataclass(frozen=True)
class ActionSpec:
    kind: str  # "discrete" (one or more categorical heads) or "continuous"
    nvec: tuple[int, ...]  # categorical sizes (discrete) or () (continuous)
    dim: int  # columns in the stored action tensor
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()

    @property
    def num_outputs(self) -> int:
        return sum(self.nvec) if self.kind == "discrete" else self.dim

    @property
    def dtype(self) -> torch.dtype:
        return torch.int64 if self.kind == "discrete" else torch.float32


def _shifted(space: gym.Space) -> bool:
    start = getattr(space, "start", 0)
    return bool(np.any(np.asarray(start) != 0))


def action_spec(space: gym.Space) -> ActionSpec:
    parts = space.spaces if isinstance(space, gym.spaces.Tuple) else (space,)
    if any(isinstance(s, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)) and _shifted(s)
           for s in parts):  # fmt: skip
        raise ValueError(
            f"unsupported action space {space}: its actions do not start at 0, and the policy "
            "sends 0..n-1; shift them in the env (or a wrapper) to start at 0"
        )
    if isinstance(space, gym.spaces.MultiDiscrete) and np.asarray(space.nvec).ndim > 1:
        raise ValueError(
            f"unsupported action space {' '.join(str(space).split())}: a MultiDiscrete of shape "
            f"{np.asarray(space.nvec).shape}; give a flat one (nvec.reshape(-1)) and reshape "
            "the actions in the env"
        )
    if isinstance(space, gym.spaces.Discrete):
        return ActionSpec("discrete", (int(space.n),), 1)
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = tuple(int(n) for n in np.asarray(space.nvec).reshape(-1))
        return ActionSpec("discrete", nvec, len(nvec))
    if isinstance(space, gym.spaces.Tuple) and all(
        isinstance(s, gym.spaces.Discrete) for s in space.spaces
    ):
        nvec = tuple(int(s.n) for s in space.spaces)
        return ActionSpec("discrete", nvec, len(nvec))
    if isinstance(space, gym.spaces.Box):
        low = tuple(float(x) for x in np.asarray(space.low).reshape(-1))
        high = tuple(float(x) for x in np.asarray(space.high).reshape(-1))
        return ActionSpec("continuous", (), int(np.prod(space.shape)), low, high)
    raise ValueError(
        f"unsupported action space {space}: use Discrete, MultiDiscrete, Tuple of Discrete, or Box"
    )


def to_env_action(spec: ActionSpec, space: gym.Space, row: np.ndarray):
    """One stored action row -> what env.step expects."""
    if spec.kind == "discrete":
        if isinstance(space, gym.spaces.Discrete):
            return int(row[0])
        if isinstance(space, gym.spaces.Tuple):
            return tuple(int(x) for x in row)
        return row.astype(np.int64)
    return np.clip(row, spec.low, spec.high).astype(np.float32).reshape(space.shape)


class ActionDistribution:
    """Wraps head outputs; `log_std` is the learned state-independent log std (continuous)."""

    def __init__(
        self,
        spec: ActionSpec,
        outputs: Tensor,
        log_std: Tensor | None = None,
        mask: Tensor | None = None,
    ):
        self.spec = spec
        if spec.kind == "discrete":
            logits = torch.split(outputs, list(spec.nvec), dim=-1)
            if mask is not None:
                legal = torch.split(mask > 0, list(spec.nvec), dim=-1)
                logits = [
                    lg.float().masked_fill(~ok, MASKED_LOGIT) for lg, ok in zip(logits, legal)
                ]
            self.logits = logits
            self.log_softmax = [torch.log_softmax(lg.float(), dim=-1) for lg in self.logits]
        else:
            self.mean = outputs
            self.log_std = log_std.expand_as(outputs)

    def sample(self) -> Tensor:
        if self.spec.kind == "discrete":
            cols = [torch.multinomial(ls.exp(), 1) for ls in self.log_softmax]
            return torch.cat(cols, dim=-1)
        return self.mean + self.log_std.exp() * torch.randn_like(self.mean)

    def log_prob(self, actions: Tensor) -> Tensor:
        if self.spec.kind == "discrete":
            actions = actions.long()
            total = 0.0
            for i, ls in enumerate(self.log_softmax):
                total = total + ls.gather(-1, actions[..., i : i + 1]).squeeze(-1)
            return total
        var = (2 * self.log_std).exp()
        lp = -((actions - self.mean) ** 2) / (2 * var) - self.log_std - 0.5 * math.log(2 * math.pi)
        return lp.sum(-1)

    def entropy(self) -> Tensor:
        if self.spec.kind == "discrete":
            return sum(-(ls.exp() * ls).sum(-1) for ls in self.log_softmax)
        return (0.5 + 0.5 * math.log(2 * math.pi) + self.log_std).sum(-1)

    def argmax(self) -> Tensor:
        if self.spec.kind == "discrete":
            return torch.stack([lg.argmax(-1) for lg in self.logits], dim=-1)
        return self.mean
