"""Weights shared on the device between a learner and the inference server serving its policy
(`--inference=device`): a publish never goes through host memory.

Each learner keeps two slots of its packed state (`param_store.pack_state`'s layout) on its own
device and hands the buffer to the server once, through a multiprocessing queue: CUDA memory
travels as an IPC handle (forkserver and spawn children), CPU memory as shared memory. The
learner packs a new state into the slot readers are not using, waits for the device as part of
its iteration's one read-back, then announces it on the `WeightBoard` (host shared memory):
the slot's version first, then the publish count. A reader copies slot (count - 1) % 2 into its
model on the device and accepts the copy only if the count did not move meanwhile: the writer
touches that slot again only after announcing the next count, so an unchanged count proves
the copy whole. A learner that restarts sends a new buffer, bumps the policy's generation on
the board (so the server looks at its queue only then) and keeps counting from the board.

Collaborators: Learner (writer side), InferenceServer (reader side), the runner (allocates the
board and the queues, one per server).
"""

from __future__ import annotations

import queue as queue_module
import time
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from rl_pbt.memory.param_store import WORD, flat_state_size, pack_state, unpack_state


@dataclass
class WeightBoard:
    """Host shared memory: per policy, the publish count and each slot's learner version."""

    count: torch.Tensor  # [P] int64: publishes announced so far (0: none yet)
    version: torch.Tensor  # [P, 2] int64: version of the state in each slot
    generation: torch.Tensor  # [P] int64: buffers handed over so far (learner restarts)

    @classmethod
    def allocate(cls, num_policies: int) -> WeightBoard:
        return cls(
            torch.zeros(num_policies, dtype=torch.int64).share_memory_(),
            torch.zeros(num_policies, 2, dtype=torch.int64).share_memory_(),
            torch.zeros(num_policies, dtype=torch.int64).share_memory_(),
        )


@dataclass
class WeightsBuffer:
    """Message learner -> server: policy `policy_id`'s two slots, on the learner's device."""

    policy_id: int
    slots: torch.Tensor  # [2, words] float32
    generation: int = 0  # the board's generation this buffer belongs to


def _wait_for_device(t: torch.Tensor) -> None:
    if t.is_cuda:
        torch.cuda.current_stream(t.device).synchronize()


class WeightsWriter:
    """The learner's side. `stage` queues the pack on the device (no wait); `announce` makes it
    the newest once the caller knows the device finished it (its read-back waited)."""

    def __init__(self, board: WeightBoard, policy_id: int, model: nn.Module, device):
        self.board = board
        self.policy_id = policy_id
        self.slots = torch.zeros(2, flat_state_size(model), dtype=WORD, device=device)
        if self.slots.device.type == "cpu":
            self.slots.share_memory_()
        self.n = int(board.count[policy_id])  # a restarted learner goes on counting
        self.generation = int(board.generation[policy_id]) + 1

    def message(self) -> WeightsBuffer:
        """The buffer for the server; once it is sent, the board's generation says so."""
        self.board.generation[self.policy_id] = self.generation
        return WeightsBuffer(self.policy_id, self.slots, self.generation)

    def stage(self, model: nn.Module) -> None:
        pack_state(model, out=self.slots[self.n % 2])

    def announce(self, version: int) -> None:
        p = self.policy_id
        self.board.version[p, self.n % 2] = version
        self.n += 1
        self.board.count[p] = self.n

    def publish(self, model: nn.Module, version: int) -> None:
        """Outside the hot path (start, load, PBT copy): stage, wait, announce."""
        self.stage(model)
        _wait_for_device(self.slots)
        self.announce(version)


class WeightsReader:
    """The server's side, one per policy it serves."""

    def __init__(self, board: WeightBoard, policy_id: int):
        self.board = board
        self.policy_id = policy_id
        self.slots: Optional[torch.Tensor] = None
        self.seen = 0  # the publish count of the weights in the model
        self.generation = 0  # of the buffer attached
        self._count = board.count.numpy()  # read without a copy
        self._generation = board.generation.numpy()

    def attach(self, slots: torch.Tensor, generation: int = 0) -> None:
        """A (new) learner's buffer: its newest state is read again even if counted before."""
        self.slots = slots
        self.seen = -1
        self.generation = generation

    def buffer_pending(self) -> bool:
        """A learner handed over a buffer this reader has not attached yet."""
        return int(self._generation[self.policy_id]) != self.generation

    def ready(self) -> bool:
        return self.slots is not None and int(self._count[self.policy_id]) > 0

    def changed(self) -> bool:
        return self.slots is not None and int(self._count[self.policy_id]) not in (0, self.seen)

    def read_into(self, model: nn.Module, timeout: float = 5.0) -> int:
        """Copy the newest announced state into `model` (device to device); its version."""
        p = self.policy_id
        deadline = time.monotonic() + timeout
        while True:
            count = int(self._count[p])
            slot = (count - 1) % 2
            version = int(self.board.version[p, slot])
            unpack_state(model, self.slots[slot])
            _wait_for_device(self.slots)
            if int(self._count[p]) == count:
                self.seen = count
                return version
            if time.monotonic() > deadline:
                raise TimeoutError(f"weights of policy {p} kept changing for {timeout} s")


def drain_buffers(q) -> list[WeightsBuffer]:
    """Every buffer waiting on a server's weights queue, without blocking."""
    out = []
    while True:
        try:
            out.append(q.get_nowait())
        except queue_module.Empty:
            return out
