"""Running mean/variance (parallel Welford merge), kept as module buffers.

Buffers travel with the weights, so rollout workers normalise exactly as the learner does.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RunningMeanStd(nn.Module):
    def __init__(self, shape: tuple[int, ...], eps: float = 1e-5, clip: float = 5.0):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(eps, dtype=torch.float64))
        self.eps = eps
        self.clip = clip

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """x: [N, *shape] samples (already filtered to valid ones)."""
        if x.shape[0] == 0:
            return
        x = x.double()
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False)
        n = x.shape[0]
        delta = batch_mean - self.mean
        total = self.count + n
        self.mean += delta * n / total
        m2 = self.var * self.count + batch_var * n + delta**2 * self.count * n / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def normalize(self, x: Tensor) -> Tensor:
        std = (self.var + self.eps).sqrt().to(x.dtype)
        return ((x - self.mean.to(x.dtype)) / std).clamp(-self.clip, self.clip)

    @property
    def std(self) -> Tensor:
        return (self.var + self.eps).sqrt()
