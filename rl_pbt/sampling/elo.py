"""Elo ratings for population policies and frozen snapshots, fed by finished episodes.

Read by `matchmaking.EloMatchmaker` to pair close opponents and by PBT when it ranks by rating.
"""

from __future__ import annotations

import collections
import numbers
from collections.abc import Hashable, Sequence
from typing import Any, Optional

DEFAULT_RATING = 1200.0
DEFAULT_K = 16.0

Match = tuple[list[Hashable], list[Hashable], float]


def expected_score(r_a: float, r_b: float) -> float:
    """Probability-like expected score of A against B (logistic curve, 400-point scale)."""
    return 1.0 / (1.0 + 10.0 ** ((float(r_b) - float(r_a)) / 400.0))


def elo_update(r_a: float, r_b: float, score_a: float, k: float) -> tuple[float, float]:
    """New (r_a, r_b) after one game; score_a is 1 (A wins), 0 (A loses) or 0.5 (draw).

    The update is zero-sum: whatever A gains, B loses.
    """
    if not 0.0 <= score_a <= 1.0:
        raise ValueError(f"score_a must be in [0, 1] (1 win, 0.5 draw, 0 loss), got {score_a}")
    delta = k * (score_a - expected_score(r_a, r_b))
    return r_a + delta, r_b - delta


class EloRatings:
    """Ratings keyed by any hashable id: ints for population policies, strings for snapshots.

    Unknown keys read as `initial` until they play. A team's rating is the mean over its seats,
    and every distinct member of a team moves by the same team delta.
    """

    def __init__(self, initial: float = DEFAULT_RATING, k: float = DEFAULT_K):
        if k <= 0:
            raise ValueError(f"k must be > 0, got {k}")
        self.initial = float(initial)
        self.k = float(k)
        self._ratings: dict[Hashable, float] = {}
        self._games: dict[Hashable, int] = {}

    # --- queries ---
    def rating(self, key: Hashable) -> float:
        return self._ratings.get(key, self.initial)

    def games(self, key: Hashable) -> int:
        """How many rated matches `key` took part in."""
        return self._games.get(key, 0)

    def keys(self) -> list[Hashable]:
        return list(self._ratings)

    def __contains__(self, key: object) -> bool:
        return key in self._ratings

    def __len__(self) -> int:
        return len(self._ratings)

    # --- edits ---
    def set_rating(self, key: Hashable, value: float) -> None:
        """Overwrite one rating (e.g. a policy that inherited another's weights)."""
        self._ratings[key] = float(value)
        self._games.setdefault(key, 0)

    def remove(self, key: Hashable) -> None:
        """Forget `key` (e.g. an evicted snapshot); unknown keys are ignored."""
        self._ratings.pop(key, None)
        self._games.pop(key, None)

    def record_match(
        self, team_a: Sequence[Hashable], team_b: Sequence[Hashable], score_a: float
    ) -> None:
        """Rate one match between two teams; score_a is 1, 0 or 0.5 from team A's side.

        Team rating = mean of its members' ratings (one entry per seat). Each distinct member of
        A moves by +delta and each of B by -delta. A key present on both sides (a self-play
        mirror) is not updated; a match where every key is on both sides changes nothing.
        """
        if not team_a or not team_b:
            raise ValueError("both teams need at least one member")
        mirrored = set(team_a) & set(team_b)
        movers_a = [key for key in dict.fromkeys(team_a) if key not in mirrored]
        movers_b = [key for key in dict.fromkeys(team_b) if key not in mirrored]
        if not movers_a and not movers_b:
            return
        mean_a = sum(self.rating(key) for key in team_a) / len(team_a)
        mean_b = sum(self.rating(key) for key in team_b) / len(team_b)
        new_a, _ = elo_update(mean_a, mean_b, score_a, self.k)
        delta = new_a - mean_a
        for key in movers_a:
            self._ratings[key] = self.rating(key) + delta
            self._games[key] = self.games(key) + 1
        for key in movers_b:
            self._ratings[key] = self.rating(key) - delta
            self._games[key] = self.games(key) + 1

    # --- saving ---
    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state; entries are [key, rating, games] so int keys stay ints."""
        return {
            "initial": self.initial,
            "k": self.k,
            "entries": [[key, r, self.games(key)] for key, r in self._ratings.items()],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EloRatings:
        ratings = cls(initial=data.get("initial", DEFAULT_RATING), k=data.get("k", DEFAULT_K))
        for key, value, games in data.get("entries", []):
            key = tuple(key) if isinstance(key, list) else key
            ratings._ratings[key] = float(value)
            ratings._games[key] = int(games)
        return ratings

    def table(self) -> str:
        """Readable table, highest rating first."""
        rows = sorted(self._ratings.items(), key=lambda kv: (-kv[1], str(kv[0])))
        width = max([len("id")] + [len(str(key)) for key, _ in rows])
        lines = [f"{'rank':>4}  {'id':<{width}}  {'rating':>8}  {'games':>6}"]
        for rank, (key, value) in enumerate(rows, start=1):
            lines.append(f"{rank:>4}  {str(key):<{width}}  {value:>8.1f}  {self.games(key):>6}")
        if not rows:
            lines.append("(no rated players yet)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"EloRatings(n={len(self)}, initial={self.initial}, k={self.k})"


def _outcome(obj_a: float, obj_b: float) -> float:
    if obj_a > obj_b:
        return 1.0
    if obj_a < obj_b:
        return 0.0
    return 0.5


def matches_from_episode(
    policy_of_agent: Sequence[Hashable],
    team_of_agent: Optional[Sequence[Hashable]],
    true_objectives: Sequence[float],
) -> list[Match]:
    """Turn one finished multi-agent episode into (team_a, team_b, score_a) rating updates.

    Agents are grouped by team (None: every agent is its own team). A team's objective is the
    mean over its agents; every pair of teams is one match, scored 1/0 by comparing objectives
    and 0.5 on equality. Two teams give a single match (1v1 or team vs team); a free-for-all
    with n teams gives n*(n-1)/2 matches. Team order follows first appearance among agents.
    """
    n = len(policy_of_agent)
    if team_of_agent is None:
        team_of_agent = list(range(n))
    if len(team_of_agent) != n or len(true_objectives) != n:
        raise ValueError(
            "policy_of_agent, team_of_agent and true_objectives must have one entry per agent, "
            f"got lengths {n}, {len(team_of_agent)}, {len(true_objectives)}"
        )
    members: dict[Hashable, list[Hashable]] = {}
    scores: dict[Hashable, list[float]] = {}
    for policy, team, objective in zip(policy_of_agent, team_of_agent, true_objectives):
        members.setdefault(team, []).append(policy)
        scores.setdefault(team, []).append(float(objective))
    teams = list(members)
    mean_obj = {team: sum(scores[team]) / len(scores[team]) for team in teams}
    matches: list[Match] = []
    for i, team_a in enumerate(teams):
        for team_b in teams[i + 1 :]:
            score_a = _outcome(mean_obj[team_a], mean_obj[team_b])
            matches.append((list(members[team_a]), list(members[team_b]), score_a))
    return matches


def scores_against_snapshots(matches: Sequence[Match]) -> list[tuple[int, float]]:
    """(policy, score) for every live policy in a match whose other team is made of frozen
    snapshots alone (snapshot ids are strings, live policies ints); mixed teams, and matches
    between live policies, give nothing. The objective of `--pbt_target_objective=vs_snapshots`.
    """
    from rl_pbt.sampling.matchmaking import is_snapshot

    return scores_against(matches, is_snapshot)


def scores_against_scripted(matches: Sequence[Match], seat: str) -> list[tuple[int, float]]:
    """(policy, score) for every live policy in a match whose other team is the scripted
    player `seat` alone (in every seat): the objective of
    `--pbt_target_objective=vs_scripted:NAME`."""
    return scores_against(matches, lambda p: p == seat)


def scores_against(matches: Sequence[Match], is_opponent) -> list[tuple[int, float]]:
    """(policy, score) for every team of live policies whose other team is made only of
    seats for which `is_opponent(seat)` holds."""
    out: list[tuple[int, float]] = []
    for team_a, team_b, score_a in matches:
        for team, other, score in ((team_a, team_b, score_a), (team_b, team_a, 1.0 - score_a)):
            live = not any(isinstance(p, str) for p in team)
            if live and all(is_opponent(p) for p in other):
                out.extend((int(p), float(score)) for p in team)
    return out


class CrossPlay:
    """Recent results between population members, per pair: the win-rate matrix of the run's
    report. Only games of one member against one other count (a team of several members, or
    a frozen snapshot, has no cell of its own); draws count half."""

    def __init__(self, num_policies: int, window: int = 200):
        self.n = num_policies
        self.window = window
        self._scores: dict[tuple[int, int], collections.deque] = {}

    def record(
        self, team_a: Sequence[Hashable], team_b: Sequence[Hashable], score_a: float
    ) -> None:
        if len(team_a) != 1 or len(team_b) != 1:
            return
        a, b = team_a[0], team_b[0]
        if not (isinstance(a, numbers.Integral) and isinstance(b, numbers.Integral)) or a == b:
            return  # a frozen snapshot (a string id) or a mirror match
        a, b = int(a), int(b)
        if a > b:
            a, b, score_a = b, a, 1.0 - score_a
        self._scores.setdefault((a, b), collections.deque(maxlen=self.window)).append(score_a)

    def matrix(self) -> tuple[list[list[Optional[float]]], list[list[int]]]:
        """(win rate of the row member against the column member or None, games per cell)."""
        rate: list[list[Optional[float]]] = [[None] * self.n for _ in range(self.n)]
        games = [[0] * self.n for _ in range(self.n)]
        for (a, b), scores in self._scores.items():
            if a >= self.n or b >= self.n or not scores:
                continue
            mean = sum(scores) / len(scores)
            rate[a][b], rate[b][a] = mean, 1.0 - mean
            games[a][b] = games[b][a] = len(scores)
        return rate, games

    def forget(self, member: int) -> None:
        """A PBT copy replaced `member`'s weights: its games so far were another player's."""
        for pair in [pair for pair in self._scores if member in pair]:
            del self._scores[pair]

    def to_dict(self) -> dict:
        rate, games = self.matrix()
        scores = {f"{a},{b}": list(s) for (a, b), s in sorted(self._scores.items()) if s}
        return {
            "players": [f"p{p}" for p in range(self.n)],
            "win_rate": rate,
            "games": games,
            "scores": scores,  # the recent results of each pair (row member's), for a resume
        }

    @classmethod
    def from_dict(cls, data: dict, num_policies: int, window: int = 200) -> CrossPlay:
        """The table a run saved (`to_dict`), to go on with at a resume; pairs beyond
        `num_policies` and malformed entries are left out."""
        table = cls(num_policies, window)
        scores = data.get("scores") if isinstance(data, dict) else None
        for key, values in (scores if isinstance(scores, dict) else {}).items():
            try:
                a, b = (int(x) for x in str(key).split(","))
                kept = [float(v) for v in values][-window:]
            except (TypeError, ValueError):
                continue
            if 0 <= a < b < num_policies and kept:
                table._scores[(a, b)] = collections.deque(kept, maxlen=window)
        return table
