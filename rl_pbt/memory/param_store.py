"""Per-policy parameter store in shared memory: learners publish, rollout workers read.

A sequence counter guards each store (odd while a write is in progress), so a reader never
sees half-written weights. The transfer area holds a learner's whole state (weights,
normalisers, optimiser moments) for in-memory PBT copies between learner processes.
"""

from __future__ import annotations

import time
from typing import Optional

import torch
from torch import nn


def flat_state_size(model: nn.Module) -> int:
    return sum(t.numel() for t in model.state_dict().values())


def flatten_state(model: nn.Module, out: torch.Tensor) -> None:
    offset = 0
    for t in model.state_dict().values():
        n = t.numel()
        out[offset : offset + n].copy_(t.reshape(-1))
        offset += n


def unflatten_state(model: nn.Module, flat: torch.Tensor) -> None:
    offset = 0
    with torch.no_grad():
        for t in model.state_dict().values():
            n = t.numel()
            t.copy_(flat[offset : offset + n].view_as(t))
            offset += n


class ParamStore:
    """Weights of every policy: `flat[p]` holds the model's state dict as one float64 vector
    (float64 so normaliser statistics round-trip exactly)."""

    def __init__(self, num_policies: int, state_size: int, transfer_size: int):
        self.flat = torch.zeros(num_policies, state_size, dtype=torch.float64).share_memory_()
        self.seq = torch.zeros(num_policies, dtype=torch.int64).share_memory_()
        self.version = torch.zeros(num_policies, dtype=torch.int64).share_memory_()
        self.transfer = torch.zeros(
            num_policies, transfer_size, dtype=torch.float64
        ).share_memory_()
        self.transfer_seq = torch.zeros(num_policies, dtype=torch.int64).share_memory_()

    def publish(self, policy_id: int, model: nn.Module, version: int) -> None:
        self.seq[policy_id] += 1  # odd: write in progress
        flatten_state(model, self.flat[policy_id])
        self.version[policy_id] = version
        self.seq[policy_id] += 1

    def read_into(self, policy_id: int, model: nn.Module, timeout: float = 5.0) -> int:
        """Copy the latest weights of `policy_id` into `model`; returns their version."""
        buf, version = _consistent_copy(
            self.flat, self.seq, policy_id, timeout, "weights", self.version
        )
        unflatten_state(model, buf)
        return version

    def read_transfer(self, policy_id: int, timeout: float = 5.0) -> torch.Tensor:
        """A copy of `policy_id`'s exported whole state, never a mix of two exports (a source
        may export again for another target while this one is still reading)."""
        return _consistent_copy(
            self.transfer, self.transfer_seq, policy_id, timeout, "exported state"
        )[0]

    def current_version(self, policy_id: int) -> int:
        return int(self.version[policy_id])


def _consistent_copy(
    area: torch.Tensor,
    seq: torch.Tensor,
    row: int,
    timeout: float,
    what: str,
    version: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, Optional[int]]:
    """Copy `area[row]` (and read `version[row]`, if given) between two equal, even readings of
    `seq[row]`: odd means a write is in progress, a change means one happened meanwhile."""
    deadline = time.monotonic() + timeout
    buf = torch.empty_like(area[row])
    while True:
        before = int(seq[row])
        if before % 2 == 0:
            buf.copy_(area[row])
            v = int(version[row]) if version is not None else None
            if int(seq[row]) == before:
                return buf, v
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} of policy {row} stayed mid-write for {timeout} s")
        time.sleep(0.0005)
