"""The free-slot pool: rollout workers take slots from it, learners give them back.

An empty pool is the back-pressure signal: workers wait instead of letting queues grow.
"""

from __future__ import annotations

import queue as std_queue

import numpy as np

from rl_pbt.memory.buffers import FREE, LEARNER, WORKER, TrajectoryBuffers


class SlotPool:
    def __init__(self, buffers: TrajectoryBuffers, free_queue):
        self.buffers = buffers
        self.free_queue = free_queue

    def fill(self) -> None:
        """Put every slot in the pool (once, at start)."""
        self.free_queue.put_many(list(range(self.buffers.num_slots))) if hasattr(
            self.free_queue, "put_many"
        ) else [self.free_queue.put(s) for s in range(self.buffers.num_slots)]

    def acquire(self, n: int, timeout: float, holder: int = -1) -> list[int]:
        """Up to n free slots, waiting at most `timeout` seconds for the first; may return [].
        `holder`: the rollout worker taking them (its slots come back if it dies)."""
        try:
            slots = self.free_queue.get_many(
                block=timeout > 0, timeout=timeout, max_messages_to_get=n
            )
        except std_queue.Empty:
            return []
        # the holder first: the runner reclaims slots that are WORKER-owned *and* held by a
        # dead worker, so a slot must never show WORKER with a previous user's holder
        self.buffers.holder[slots] = holder
        self.buffers.transfer(slots, FREE, WORKER)
        return slots

    def reclaim(self, holder: int) -> int:
        """A rollout worker died: the slots it was filling go back to the pool (their partial
        trajectories are dropped). Returns how many came back."""
        owner = self.buffers.owner.numpy()
        # owner read before holder: live workers write a slot's holder before its owner, so
        # a slot another worker takes meanwhile never matches with a stale holder
        by_worker = owner == WORKER
        held = np.flatnonzero(by_worker & (self.buffers.holder.numpy() == holder))
        slots = held.tolist()
        self.release(slots, owner=WORKER)
        return len(slots)

    def release(self, slots: list[int], owner: int = LEARNER) -> None:
        """Slots back to the pool from `owner` (the learner that trained on them, or a dead
        worker's slots from the worker's side)."""
        self.buffers.transfer(slots, owner, FREE)
        if not slots:
            return
        if hasattr(self.free_queue, "put_many"):
            self.free_queue.put_many(list(slots))  # one lock for all of them
        else:
            for s in slots:
                self.free_queue.put(s)
