"""The free-slot pool: rollout workers take slots from it, learners give them back.

An empty pool is the back-pressure signal: workers wait instead of letting queues grow.
"""

from __future__ import annotations

import queue as std_queue

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

    def acquire(self, n: int, timeout: float) -> list[int]:
        """Up to n free slots, waiting at most `timeout` seconds for the first; may return []."""
        try:
            slots = self.free_queue.get_many(
                block=timeout > 0, timeout=timeout, max_messages_to_get=n
            )
        except std_queue.Empty:
            return []
        self.buffers.transfer(slots, FREE, WORKER)
        return slots

    def release(self, slots: list[int]) -> None:
        self.buffers.transfer(slots, LEARNER, FREE)
        for s in slots:
            self.free_queue.put(s)
