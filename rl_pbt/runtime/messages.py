"""Typed messages between processes, and the queue type that carries them.

Queues carry only these small records (slot indices, statistics, commands); bulk data
stays in shared memory. `LocalQueue` has the same interface for serial mode.
"""

from __future__ import annotations

import collections
import queue as std_queue
from dataclasses import dataclass, field
from typing import Any, Optional, Union

# values of the shared stop flag (RunSpec.stop_flag): 0 running; STOPPING, the runner is
# stopping and its Stop messages follow; STOP_NOW, no message will follow (the runner's loop is
# stuck): learners save at once
STOPPING = 1
STOP_NOW = 2

# --- rollout worker -> learner -----------------------------------------------------------


@dataclass
class Trajectories:
    policy_id: int
    slots: list[int]


# --- rollout worker -> runner ------------------------------------------------------------


@dataclass
class EpisodeStats:
    policy_id: Union[int, str]  # a snapshot id (str) for frozen past opponents
    episode_return: float
    length: int
    objective: Optional[float]  # the env's target objective, None when the env gives none
    extra: dict[str, float] = field(default_factory=dict)
    # the version of the policy's weights at the episode's first step (-1: not known): after
    # a PBT copy, PBT counts only episodes played by the copied weights
    policy_version: int = -1


@dataclass
class MatchResult:
    seats: list[Union[int, str]]  # the policy or snapshot in each agent seat
    teams: list[int]
    objectives: list[float]
    # per seat, the version of the weights that began the game (-1: unknown): after a PBT
    # copy, games begun on the replaced weights are not the copy's
    versions: list[int] = field(default_factory=list)


@dataclass
class WorkerReport:
    worker_idx: int
    episodes: list[EpisodeStats]
    matches: list[MatchResult]
    env_steps: int  # agent steps since the last report (all policies)


# --- learner -> runner ---------------------------------------------------------------------


@dataclass
class LearnerReport:
    policy_id: int
    env_steps: int  # total samples trained on (x env_frameskip = env frames)
    version: int
    stats: dict[str, float]


@dataclass
class LearnerEvent:
    policy_id: int
    kind: str  # "pbt_applied" | "saved" | "save_failed" | "error" | ...
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


# --- runner -> learner ---------------------------------------------------------------------


@dataclass
class ApplyPBT:
    """Copy `source_id`'s whole state first (if given), then install `hparams`."""

    policy_id: int
    source_id: Optional[int]
    hparams: dict[str, float]
    # then export the new state at once (before any update) into this transfer row: a copy
    # from another node group reads it back to check it arrived whole
    export_to: Optional[int] = None
    # when a copy was decided (wall time, the runner's machine): the copy's latency counts
    # from there, and travels with the copy, so a later decision cannot take its place
    decided_at: Optional[float] = None


@dataclass
class ExportDone:
    """Forwarded by ExportState to the exporting learner's own host: it tells the runner
    (LearnerEvent "exported") that the state lies in the transfer area."""

    policy_id: int


@dataclass
class ExportState:
    """Ask the learner of `policy_id` to write its state to the transfer area, then forward
    `then` to the process of the target learner."""

    policy_id: int
    then: Union[ApplyPBT, ExportDone]


@dataclass
class PublishSnapshot:
    """Write the current weights of `policy_id` into row `row` of the param store, where rollout
    workers read them as the frozen opponent `snapshot_id`."""

    policy_id: int
    row: int
    snapshot_id: str


@dataclass
class SaveCheckpoint:
    policy_id: Optional[int] = None  # None: every policy of the process


@dataclass
class Stop:
    save: bool = True


# --- runner -> rollout worker --------------------------------------------------------------


@dataclass
class SetRewardShaping:
    policy_id: int
    shaping: dict


@dataclass
class SetSnapshots:
    """Frozen past opponents now in the pool: snapshot id -> row of the param store."""

    snapshot_ids: dict[str, int]


@dataclass
class SetRatings:
    """Current Elo ratings (policy or snapshot id -> rating), for Elo matchmaking."""

    ratings: dict


# --- rollout worker <-> inference server ----------------------------------------------------


@dataclass
class InferenceRequest:
    """Act for actors [lo, hi) of rollout worker `worker_idx` (their data is in InferenceIO)."""

    worker_idx: int
    split: int
    lo: int
    hi: int
    incarnation: int = 0  # a restarted worker ignores answers meant for the one before it


@dataclass
class InferenceReply:
    server: int
    split: int
    incarnation: int = 0


class LocalQueue:
    """In-process queue with the subset of faster_fifo.Queue's interface we use."""

    def __init__(self):
        self._items: collections.deque = collections.deque()

    def put(self, item: Any, block: bool = True, timeout: float = 0.0) -> None:
        self._items.append(item)

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)

    def get(self, block: bool = True, timeout: float = 0.0) -> Any:
        if not self._items:
            raise std_queue.Empty
        return self._items.popleft()

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def get_many(
        self, block: bool = True, timeout: float = 0.0, max_messages_to_get: int = 10**9
    ) -> list[Any]:
        if not self._items:
            raise std_queue.Empty
        n = min(len(self._items), max_messages_to_get)
        return [self._items.popleft() for _ in range(n)]

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items


def make_queue(serial: bool, max_size_bytes: int = 1_000_000):
    if serial:
        return LocalQueue()
    from faster_fifo import Queue

    return Queue(max_size_bytes=max_size_bytes)


def drain(q, max_messages: int = 10**6, timeout: float = 0.0) -> list[Any]:
    """Everything waiting in q (blocking up to `timeout` for the first message)."""
    try:
        if timeout > 0:
            return q.get_many(block=True, timeout=timeout, max_messages_to_get=max_messages)
        return q.get_many(block=False, max_messages_to_get=max_messages)
    except std_queue.Empty:
        return []
