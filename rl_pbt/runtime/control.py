"""A run steered from outside: the seam between one node group and a population spread over
several machines.

A node group is an ordinary run of some of the population's members (its own learners and
rollout workers) whose PBT decisions come from elsewhere. `GroupControl` is its door: the
population driver (on another thread, reached through Ray) submits commands and collects what
the group saw; the runner serves the commands and hands over its records at each tick of its
loop. Nothing here knows of Ray.

Commands, in the group's own (local) policy ids:
- `Apply(policy, source, hparams, shaping)`: a PBT decision inside the group (source local or
  None), carried out as the runner's own PBT step would;
- `Export(policy)`: the member's whole state (weights, normalisers, Adam moments and step) as
  one flat tensor, the same bytes a copy inside the group moves;
- `Import(policy, state, hparams, shaping, arrived_at)`: a copy from a member of another group;
- `ExportSnapshot(snapshot)`, `AddSnapshot(snapshot, weights, version)`: self-play, a frozen
  snapshot of a member of one group becomes an opponent in the others.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

import torch


@dataclass
class Apply:
    policy: int
    source: Optional[int]
    hparams: dict[str, float]
    shaping: Optional[dict]


@dataclass
class Export:
    policy: int


@dataclass
class Import:
    policy: int
    state: torch.Tensor
    hparams: dict[str, float]
    shaping: Optional[dict]
    arrived_at: float  # on the group's own clock: the first update is timed from it


@dataclass
class ExportSnapshot:
    snapshot: str  # a snapshot of this group, as it names it


@dataclass
class AddSnapshot:
    snapshot: str  # a name unique in the population (see foreign_snapshot_id)
    weights: torch.Tensor
    version: int


class RunEnded(RuntimeError):
    """A command reached a node group whose run had ended (its budget trained, a failure or a
    stop): nothing was done, and the group's next poll says how it ended."""


class Reply:
    """The answer to one command, set by the runner's thread, awaited by the caller's."""

    def __init__(self):
        self._done = threading.Event()
        self._value: Any = None
        self._error: Optional[str] = None
        self._ended = False

    def set(self, value: Any = None, error: Optional[str] = None, ended: bool = False) -> None:
        self._value, self._error, self._ended = value, error, ended
        self._done.set()

    def wait(self, timeout: float) -> Any:
        if not self._done.wait(timeout):
            raise TimeoutError(f"no answer within {timeout:g} s")
        if self._error is not None:
            raise (RunEnded if self._ended else RuntimeError)(self._error)
        return self._value


@dataclass
class Records:
    """What a group saw since the last `take_records()`."""

    # (policy, objective, whether it is the episode's return: the env gives no objective)
    episodes: list[tuple[int, float, bool]] = field(default_factory=list)
    # (policy, seconds from the decision to the first update after the copy, across groups)
    copy_latencies: list[tuple[int, float, bool]] = field(default_factory=list)
    snapshots: list[tuple[str, int, int]] = field(default_factory=list)  # (id, policy, steps)
    # rated games: (team a's seats, team b's seats, a's score), seats as the group names them
    matches: list[tuple[list, list, float]] = field(default_factory=list)


class GroupControl:
    def __init__(self):
        self._commands: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._records = Records()
        self.stop_requested = False
        # runner side: (policy, transfer row) -> replies waiting for that export. Keyed by the
        # row too: an export of a member into its own row (a copy's source) must never answer
        # the read-back of a state imported into the incoming row, nor the other way round
        self.waiting_exports: dict[tuple[int, int], list[Reply]] = {}
        self.imported: set[int] = set()  # runner side: copies from another group in flight

    # --- the driver's side ------------------------------------------------------------------
    def submit(self, command) -> Reply:
        reply = Reply()
        self._commands.put((command, reply))
        return reply

    def take_records(self) -> Records:
        with self._lock:
            out, self._records = self._records, Records()
        return out

    def request_stop(self) -> None:
        self.stop_requested = True

    # --- the runner's side ------------------------------------------------------------------
    def pending(self) -> list[tuple[Any, Reply]]:
        out = []
        while True:
            try:
                out.append(self._commands.get_nowait())
            except queue.Empty:
                return out

    def record_episode(self, policy: int, objective: float, is_return: bool = False) -> None:
        with self._lock:
            self._records.episodes.append((policy, float(objective), bool(is_return)))

    def record_copy_latency(self, policy: int, seconds: float) -> None:
        across = policy in self.imported
        self.imported.discard(policy)
        with self._lock:
            self._records.copy_latencies.append((policy, float(seconds), across))

    def record_match(self, team_a: list, team_b: list, score_a: float) -> None:
        with self._lock:
            self._records.matches.append((list(team_a), list(team_b), float(score_a)))

    def forget(self, policy: int) -> None:
        """A copy into `policy` is being carried out: its episodes and games not yet taken by
        the driver were played by the weights the copy replaces (the driver cleared its window
        at the decision), so they go."""
        with self._lock:
            r = self._records
            r.episodes = [e for e in r.episodes if e[0] != policy]
            r.matches = [m for m in r.matches if policy not in (*m[0], *m[1])]

    def record_snapshot(self, snapshot: str, policy: int, env_steps: int) -> None:
        with self._lock:
            self._records.snapshots.append((snapshot, policy, env_steps))

    def fail_all(self, why: str) -> None:
        """The run ended: every command not served gets `why` as its error."""
        for _, reply in self.pending():
            reply.set(error=why, ended=True)
        for replies in self.waiting_exports.values():
            for reply in replies:
                reply.set(error=why, ended=True)
        self.waiting_exports.clear()
