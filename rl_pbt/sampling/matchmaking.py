"""Matchmaking: which population policy or frozen snapshot fills each agent seat of an episode.

Pure strategies driven by a caller-owned numpy Generator; `EloMatchmaker` reads `elo.EloRatings`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from typing import Any, Callable, Optional, Union

import numpy as np

from rl_pbt.sampling.elo import EloRatings

Seat = Union[int, str]
SnapshotIds = Callable[[], Sequence[str]]

SNAPSHOT_PREFIX = "snap:"
MATCHMAKER_KINDS = ("uniform", "elo")


def snapshot_id(policy_id: int, env_steps: int) -> str:
    """Canonical id of a frozen copy of `policy_id` taken at `env_steps`, e.g. 'snap:3@1200000'."""
    return f"{SNAPSHOT_PREFIX}{int(policy_id)}@{int(env_steps)}"


def parse_snapshot_id(seat: str) -> tuple[int, int]:
    """Inverse of `snapshot_id`: (policy_id, env_steps)."""
    if not is_snapshot(seat):
        raise ValueError(f"not a snapshot id: {seat!r} (expected 'snap:<policy>@<env_steps>')")
    policy, _, steps = seat[len(SNAPSHOT_PREFIX) :].partition("@")
    try:
        return int(policy), int(steps)
    except ValueError:
        raise ValueError(
            f"malformed snapshot id: {seat!r} (expected 'snap:<policy>@<env_steps>')"
        ) from None


SCRIPTED_PREFIX = "scripted:"


def scripted_seat(player: str) -> str:
    """The seat id of a scripted player (`register_scripted_policy`), e.g.
    'scripted:alphabeta:depth=2'."""
    return f"{SCRIPTED_PREFIX}{player}"


def is_scripted_seat(seat: object) -> bool:
    """True for a seat given to a scripted player (never trained, never a snapshot)."""
    return isinstance(seat, str) and seat.startswith(SCRIPTED_PREFIX)


def is_snapshot(seat: object) -> bool:
    """True for a seat given to a frozen snapshot, False for a population policy (an int)."""
    return isinstance(seat, str) and seat.startswith(SNAPSHOT_PREFIX)


class SnapshotPool:
    """Bounded FIFO of snapshot ids; adding past `max_size` evicts (and returns) the oldest."""

    def __init__(self, max_size: int):
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size}")
        self.max_size = int(max_size)
        self._ids: deque[str] = deque()

    def add(self, snapshot: str) -> Optional[str]:
        """Append `snapshot`; returns the evicted id (so its weights can be freed) or None."""
        if snapshot in self._ids:
            raise ValueError(f"snapshot {snapshot!r} is already in the pool")
        self._ids.append(snapshot)
        if len(self._ids) > self.max_size:
            return self._ids.popleft()
        return None

    def ids(self) -> list[str]:
        """Current ids, oldest first."""
        return list(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, snapshot: object) -> bool:
        return snapshot in self._ids

    def to_dict(self) -> dict[str, Any]:
        return {"max_size": self.max_size, "ids": list(self._ids)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SnapshotPool:
        pool = cls(int(data["max_size"]))
        for snapshot in data.get("ids", []):
            pool.add(snapshot)  # a smaller max_size keeps the newest ids
        return pool


class Matchmaker(ABC):
    """Base strategy: the first seat is a uniform policy; subclasses choose the opponents.

    mix_policies_in_one_env=False puts the first seat's policy in every seat (one policy per
    env); True draws every other seat from `opponent_probs`. Independently, each seat after the
    first goes to a uniformly drawn snapshot with probability `snapshot_prob` (when the pool
    has any); an episode with a snapshot then shuffles its seats, since in turn-based games
    they are the order of play. Policies come back as ints, snapshots as their string ids.

    With a scripted player (`scripted`: its seat id and a probability), an episode plays one
    policy, in a random seat, against it in every other seat, with that probability.
    """

    def __init__(
        self,
        num_policies: int,
        mix_policies_in_one_env: bool = True,
        snapshot_prob: float = 0.0,
        snapshot_ids: Optional[SnapshotIds] = None,
        scripted: Optional[tuple[str, float]] = None,
    ):
        if num_policies < 1:
            raise ValueError(f"num_policies must be >= 1, got {num_policies}")
        if not 0.0 <= snapshot_prob <= 1.0:
            raise ValueError(f"snapshot_prob must be in [0, 1], got {snapshot_prob}")
        if snapshot_prob > 0.0 and snapshot_ids is None:
            raise ValueError("snapshot_prob > 0 needs a snapshot_ids provider (e.g. pool.ids)")
        self.num_policies = int(num_policies)
        self.mix_policies_in_one_env = bool(mix_policies_in_one_env)
        self.snapshot_prob = float(snapshot_prob)
        self.snapshot_ids = snapshot_ids
        self.scripted_seat, self.scripted_prob = scripted or (None, 0.0)
        if not 0.0 <= self.scripted_prob <= 1.0:
            raise ValueError(f"scripted_prob must be in [0, 1], got {self.scripted_prob}")

    @abstractmethod
    def opponent_probs(self, first_policy: int) -> np.ndarray:
        """Distribution over policies for an opponent seat, given the first seat's policy."""

    def assign(self, num_agents: int, rng: np.random.Generator) -> list[Seat]:
        """The population member (int) or snapshot id (str) for each seat of one new episode."""
        if num_agents < 1:
            raise ValueError(f"num_agents must be >= 1, got {num_agents}")
        first = int(rng.integers(self.num_policies))
        seats: list[Seat] = [first]
        if num_agents == 1:
            return seats
        if self.scripted_prob > 0.0 and rng.random() < self.scripted_prob:
            # the member takes a random seat (first or second mover alike), the rest the player
            seats = [self.scripted_seat] * num_agents
            seats[int(rng.integers(num_agents))] = first
            return seats
        snapshots = list(self.snapshot_ids()) if self.snapshot_prob > 0.0 else []
        probs = self.opponent_probs(first) if self.mix_policies_in_one_env else None
        for _ in range(num_agents - 1):
            if snapshots and rng.random() < self.snapshot_prob:
                seats.append(snapshots[int(rng.integers(len(snapshots)))])
            elif probs is None:
                seats.append(first)
            else:
                seats.append(int(rng.choice(self.num_policies, p=probs)))
        if any(is_snapshot(s) for s in seats):
            # seats can be turns (who moves first): the live member takes any of them, so it
            # practises every turn against snapshots, as the snapshots do
            rng.shuffle(seats)
        return seats


class UniformMatchmaker(Matchmaker):
    """Every seat an independent uniform draw (Sample Factory's pbt_mix_policies_in_one_env)."""

    def opponent_probs(self, first_policy: int) -> np.ndarray:
        return np.full(self.num_policies, 1.0 / self.num_policies)


class EloMatchmaker(Matchmaker):
    """Opponents of similar rating are preferred: P(j | i) proportional to exp(-|r_i - r_j| / T).

    T (`temperature`, in Elo points) sets how sharp the preference is: a gap of T weighs e^-1 of
    an equal rating, and a very large T tends to uniform. The exponential kernel was chosen over
    the game-uncertainty weight E(1 - E) because T tunes it directly. A policy may face itself.
    """

    def __init__(
        self,
        num_policies: int,
        ratings: EloRatings,
        temperature: float = 200.0,
        mix_policies_in_one_env: bool = True,
        snapshot_prob: float = 0.0,
        snapshot_ids: Optional[SnapshotIds] = None,
        scripted: Optional[tuple[str, float]] = None,
    ):
        super().__init__(
            num_policies, mix_policies_in_one_env, snapshot_prob, snapshot_ids, scripted
        )
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 (Elo points), got {temperature}")
        self.ratings = ratings
        self.temperature = float(temperature)

    def opponent_probs(self, first_policy: int) -> np.ndarray:
        r = np.array([self.ratings.rating(p) for p in range(self.num_policies)], dtype=np.float64)
        weights = np.exp(-np.abs(r - r[first_policy]) / self.temperature)
        return weights / weights.sum()


def make_matchmaker(
    kind: str,
    num_policies: int,
    mix_policies_in_one_env: bool,
    snapshot_prob: float,
    ratings: Optional[EloRatings] = None,
    pool: Optional[SnapshotPool] = None,
    temperature: float = 200.0,
    scripted: Optional[tuple[str, float]] = None,
) -> Matchmaker:
    """Build the strategy named by --matchmaking; `pool` is required when snapshot_prob > 0."""
    if kind not in MATCHMAKER_KINDS:
        raise ValueError(
            f"unknown matchmaking kind {kind!r}; allowed: {', '.join(MATCHMAKER_KINDS)}"
        )
    if snapshot_prob > 0.0 and pool is None:
        raise ValueError(f"snapshot_prob={snapshot_prob} > 0 needs a SnapshotPool (pool=...)")
    snapshot_ids = pool.ids if pool is not None else None
    if kind == "uniform":
        return UniformMatchmaker(
            num_policies, mix_policies_in_one_env, snapshot_prob, snapshot_ids, scripted
        )
    if ratings is None:
        raise ValueError("matchmaking kind 'elo' needs the shared EloRatings (ratings=...)")
    return EloMatchmaker(
        num_policies,
        ratings,
        temperature,
        mix_policies_in_one_env,
        snapshot_prob,
        snapshot_ids,
        scripted,
    )


class LeastServedMatchmaker:
    """Single-agent envs (see Runner._policy_share), one seat per env: every member of this
    worker's share gets the same experience whatever its episode lengths (a uniform draw per
    episode would give policies with short episodes fewer frames). New episodes stay with one
    focus policy until it is `focus_steps` ahead of the least-served one, then the
    least-served one takes over: the worker then mostly steps one policy at a time, which
    keeps its forward pass on one set of weights and only one learner busy. The imbalance
    stays within `focus_steps` plus the episodes in flight (plus what `prefer` grants);
    `focus_steps=0` starts every episode with the least-served policy."""

    def __init__(self, policies: list[int], focus_steps: int = 0):
        self.steps = {p: 0 for p in policies}
        self.focus_steps = focus_steps
        self.focus: int | None = None
        self.preferred: dict[int, int] = {}  # policy -> step count it keeps the seats until

    def record_steps(self, policy: int, steps: int) -> None:
        self.steps[policy] += steps

    def prefer(self, policy: int, steps: int) -> None:
        """New episodes go to `policy` until it has played `steps` more steps (after a PBT
        weight copy its learner waits for experience from the new weights); several preferred
        policies take turns, the one furthest from its goal first."""
        if policy in self.steps:
            self.preferred[policy] = self.steps[policy] + steps

    def state_dict(self) -> dict:
        return {"steps": dict(self.steps), "focus": self.focus, "preferred": dict(self.preferred)}

    def load_state_dict(self, state: dict) -> None:
        self.steps = {int(p): int(n) for p, n in state["steps"].items()}
        self.focus = state["focus"]
        self.preferred = {int(p): int(n) for p, n in state["preferred"].items()}

    def assign(self, num_agents: int, rng: np.random.Generator) -> list[int]:
        for p, until in list(self.preferred.items()):
            if self.steps[p] >= until:
                del self.preferred[p]
        if self.preferred:
            self.focus = max(self.preferred, key=lambda p: self.preferred[p] - self.steps[p])
            return [self.focus] * num_agents
        fewest = min(self.steps.values())
        if self.focus is None or self.steps[self.focus] - fewest >= self.focus_steps:
            candidates = [p for p, n in self.steps.items() if n == fewest]
            self.focus = candidates[int(rng.integers(len(candidates)))]
        return [self.focus] * num_agents
