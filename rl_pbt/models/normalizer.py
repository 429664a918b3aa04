"""Running mean/variance (parallel Welford merge), kept as module buffers.

Buffers travel with the weights, so rollout workers normalise exactly as the learner does.
The statistics are float64: they are merged over millions of samples, and the param store
carries them bit for bit.
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
        self.update_masked(x, torch.ones(x.shape[0], dtype=torch.bool, device=x.device))

    @torch.no_grad()
    def update_masked(self, x: Tensor, mask: Tensor) -> None:
        """Merge the samples of x [*batch, *shape] where mask [*batch] is true.

        No boolean indexing and no branch on the data: the merge never waits for the device,
        and an all-false mask leaves the statistics exactly as they were."""
        if tuple(x.shape[mask.dim() :]) != tuple(self.mean.shape):
            raise ValueError(
                f"samples of shape {tuple(x.shape)} with a mask of shape {tuple(mask.shape)}: "
                f"expected samples of shape {tuple(self.mean.shape)}"
            )
        mean, var, n = masked_moments(x.reshape(-1, *self.mean.shape), mask.reshape(-1))
        total = self.count + n
        delta = mean - self.mean
        new_mean = self.mean + delta * n / total
        m2 = self.var * self.count + var * n + delta**2 * self.count * n / total
        seen = n > 0
        self.mean.copy_(torch.where(seen, new_mean, self.mean))
        self.var.copy_(torch.where(seen, m2 / total, self.var))
        self.count.copy_(total)

    def normalize(self, x: Tensor) -> Tensor:
        std = (self.var + self.eps).sqrt().to(x.dtype)
        return ((x - self.mean.to(x.dtype)) / std).clamp(-self.clip, self.clip)

    @property
    def std(self) -> Tensor:
        return (self.var + self.eps).sqrt()


def masked_moments(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(mean, population variance, count) in float64 over the rows of x [N, *shape] where mask
    [N] is true; mean and variance are 0 when no row is. Rows left out may hold NaN."""
    keep = mask.reshape(-1, *([1] * (x.dim() - 1)))
    # where(), not a product: a masked-out NaN sentinel times 0 would still be NaN
    x = torch.where(keep, x.double(), torch.zeros((), dtype=torch.float64, device=x.device))
    n = mask.sum(dtype=torch.float64)
    denom = n.clamp(min=1.0)
    mean = x.sum(0) / denom
    centered = torch.where(keep, x - mean, torch.zeros((), dtype=torch.float64, device=x.device))
    # two passes (mean, then squared deviations) keep the variance accurate for large means
    return mean, (centered**2).sum(0) / denom, n
