"""Per-policy parameter store in shared memory: learners publish, rollout workers read.

A sequence counter guards each row (odd while a write is in progress), so a reader never
sees half-written weights. The transfer area holds a learner's whole state (weights,
normalisers, optimiser moments) for in-memory PBT copies between learner processes.

Layout of a row (float32 words): the model's 4-byte tensors (float32 weights and buffers) in
state-dict order, padded to an even count, then its 8-byte tensors (the float64 normaliser
statistics) reinterpreted bit for bit as pairs of words. So a whole state dict moves as one
contiguous float32 vector: one `torch.cat` and one copy to publish, one copy to read (also
host -> device), and the statistics stay exact.
"""

from __future__ import annotations

import time
from typing import Optional

import torch
from torch import nn

WORD = torch.float32


def _even(n: int) -> int:
    return n + n % 2


def _by_width(model: nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The state dict's tensors: (4-byte ones, 8-byte ones), each in state-dict order."""
    narrow, wide = [], []
    for name, t in model.state_dict().items():
        if t.element_size() == 4:
            narrow.append(t)
        elif t.element_size() == 8:
            wide.append(t)
        else:
            raise ValueError(
                f"state {name!r} is {t.dtype}: the param store holds 4- and 8-byte tensors only"
            )
    return narrow, wide


def flat_state_size(model: nn.Module) -> int:
    """Words (float32) that `pack_state(model)` takes; always even."""
    narrow, wide = _by_width(model)
    return _even(sum(t.numel() for t in narrow)) + 2 * sum(t.numel() for t in wide)


def transfer_size(model: nn.Module) -> int:
    """Words of a whole learner state: the packed state, Adam's two moments, its step."""
    n_params = sum(p.numel() for p in model.parameters())
    return flat_state_size(model) + 2 * n_params + 1


def store_words(num_rows: int, model: nn.Module) -> int:
    """Words (float32) of `ParamStore.for_model(num_rows, model)`'s weight and transfer rows."""
    return num_rows * (_even(flat_state_size(model)) + _even(transfer_size(model)))


def pack_state(model: nn.Module, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The model's state dict as one float32 vector on the model's device (one copy), or
    written into `out` (a float32 vector of `flat_state_size(model)` words on that device)."""
    narrow, wide = _by_width(model)
    pieces = [t.reshape(-1).view(WORD) for t in narrow]
    if sum(t.numel() for t in narrow) % 2:
        # 8-byte values start at an even word, so a row can be viewed as them in place
        device = narrow[0].device
        pieces.append(torch.zeros(1, dtype=WORD, device=device))
    pieces += [t.reshape(-1).view(WORD) for t in wide]
    if out is None:
        return torch.cat(pieces)
    with torch.no_grad():
        return torch.cat(pieces, out=out)


def same_state_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two packed states hold the same bits. Not `torch.equal` on the float words:
    the two halves of a float64 or int64 value (normalisers, counts) can read as a NaN word,
    and a NaN never equals itself."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int)))


def unpack_state(model: nn.Module, flat: torch.Tensor) -> None:
    """Load a vector made by `pack_state` into the model: one copy to the model's device
    (when it is elsewhere), then the pieces on the device. `flat` must start at an even word."""
    narrow, wide = _by_width(model)
    flat = flat.to((narrow or wide)[0].device)
    offset = 0
    with torch.no_grad():
        for t in narrow:
            n = t.numel()
            t.copy_(flat[offset : offset + n].view(t.dtype).view_as(t))
            offset += n
        offset = _even(offset)
        for t in wide:
            n = 2 * t.numel()
            t.copy_(flat[offset : offset + n].view(t.dtype).view_as(t))
            offset += n


class ParamStore:
    """Weights of every row (policies, then any snapshots): `flat[row]` holds a model's state
    dict packed as above. Rows are even-sized so that every row starts at an even word."""

    def __init__(self, num_rows: int, state_size: int, transfer_size: int):
        self.flat = torch.zeros(num_rows, _even(state_size), dtype=WORD).share_memory_()
        self.seq = torch.zeros(num_rows, dtype=torch.int64).share_memory_()
        self.version = torch.zeros(num_rows, dtype=torch.int64).share_memory_()
        self.transfer = torch.zeros(num_rows, _even(transfer_size), dtype=WORD).share_memory_()
        self.transfer_seq = torch.zeros(num_rows, dtype=torch.int64).share_memory_()

    @classmethod
    def for_model(cls, num_rows: int, model: nn.Module) -> ParamStore:
        """A store whose areas fit `model`: its packed state (weights and float64 statistics)
        and a learner's whole state (that, Adam's moments and step) for PBT transfers."""
        return cls(num_rows, flat_state_size(model), transfer_size(model))

    def publish(self, row: int, model: nn.Module, version: int) -> None:
        self.publish_flat(row, pack_state(model), version)

    def publish_flat(self, row: int, flat: torch.Tensor, version: int) -> None:
        """Publish a state already packed by `pack_state` (on any device: one copy)."""
        self.seq[row] += 1  # odd: write in progress
        self.flat[row, : flat.numel()].copy_(flat)
        self.version[row] = version
        self.seq[row] += 1

    def read_into(self, row: int, model: nn.Module, timeout: float = 5.0) -> int:
        """Copy the latest weights of `row` into `model`; returns their version."""
        buf, version = _consistent_copy(self.flat, self.seq, row, timeout, "weights", self.version)
        unpack_state(model, buf)
        return version

    def read_flat(self, row: int, timeout: float = 5.0) -> tuple[torch.Tensor, int]:
        """(a copy of `row`'s packed weights, their version): what `publish_flat` takes."""
        buf, version = _consistent_copy(self.flat, self.seq, row, timeout, "weights", self.version)
        return buf, int(version)

    def write_transfer(self, row: int, flat: torch.Tensor) -> None:
        """Export a whole learner state (on any device: one copy), guarded like `publish`."""
        self.transfer_seq[row] += 1
        self.transfer[row, : flat.numel()].copy_(flat)
        self.transfer_seq[row] += 1

    def read_transfer(self, row: int, timeout: float = 5.0) -> torch.Tensor:
        """A copy of `row`'s exported whole state, never a mix of two exports (a source
        may export again for another target while this one is still reading)."""
        return _consistent_copy(self.transfer, self.transfer_seq, row, timeout, "exported state")[0]

    def set_version(self, row: int, version: int) -> None:
        """Announce a new version without its weights (with --inference=device the server
        reads them on the device; workers still follow the version here)."""
        self.version[row] = version

    def current_version(self, row: int) -> int:
        return int(self.version[row])


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
