"""Replays one population member's recorded hyperparameter and shaping schedule (from its
lineage, ancestors included) on a single fresh policy: the PBT schedule without the population.

Has the runner-facing interface of PBTManager (hparams, shaping, update, record_episode, ...).
"""

from __future__ import annotations

import collections
from typing import Optional

from rl_pbt.pbt.lineage import read_events, schedule_for
from rl_pbt.pbt.manager import PBTDecision
from rl_pbt.pbt.search_space import flatten_shaping


def _check_shaping_keys(schedule, default_shaping: Optional[dict], lineage_file: str) -> None:
    """The recorded shaping must fit the env it is replayed on: ValueError naming the keys
    the env lacks (the rollout workers would otherwise fail on them mid-run)."""
    known = set(flatten_shaping(default_shaping)) if default_shaping is not None else set()
    recorded: set[str] = set()
    for _, _, shaping in schedule:
        if shaping is not None:
            recorded |= set(flatten_shaping(shaping))
    missing = sorted(recorded - known)
    if missing:
        has = f"its shaping has {sorted(known)}" if known else "it has no reward shaping"
        raise ValueError(
            f"--pbt_replay_lineage={lineage_file}: the schedule sets reward shaping "
            f"{missing}, which this env does not have ({has}); replay it on the env it was "
            "recorded on"
        )


class ScheduleReplayer:
    def __init__(
        self,
        lineage_file: str,
        policy_id: int,
        default_hparams: dict[str, float],
        default_shaping: Optional[dict],
        window: int = 100,
    ):
        events = read_events(lineage_file)
        if not events:
            raise ValueError(f"--pbt_replay_lineage={lineage_file!r}: no lineage events there")
        self.schedule = schedule_for(events, policy_id)
        if not self.schedule:
            raise ValueError(
                f"--pbt_replay_policy={policy_id}: no events for that policy in {lineage_file}"
            )
        _check_shaping_keys(self.schedule, default_shaping, lineage_file)
        self.hparams = [dict(default_hparams)]
        self.shaping = [default_shaping]
        self.next = 0
        self.window = collections.deque(maxlen=window)

    def record_episode(self, policy_id: int, objective: float) -> None:
        self.window.append(objective)

    def objectives(self) -> dict[int, Optional[float]]:
        return {0: sum(self.window) / len(self.window) if self.window else None}

    def update(self, env_steps: list[int], ratings=None, copying=()) -> list[PBTDecision]:
        """The recorded changes that are due at env_steps[0] (PBTManager.update's signature:
        ratings and copying mean nothing to one policy that never copies)."""
        decisions = []
        while self.next < len(self.schedule) and env_steps[0] >= self.schedule[self.next][0]:
            steps, hparams, shaping = self.schedule[self.next]
            self.next += 1
            changes = {
                k: (self.hparams[0].get(k), v)
                for k, v in hparams.items()
                if k in self.hparams[0] and self.hparams[0].get(k) != v
            }
            self.hparams[0].update({k: v for k, v in hparams.items() if k in self.hparams[0]})
            text = ", ".join(f"{k} {old:.4g} -> {new:.4g}" for k, (old, new) in changes.items())
            if shaping is not None and shaping != self.shaping[0]:
                self.shaping[0] = shaping
                text = f"{text}, reward shaping {shaping}" if text else f"reward shaping {shaping}"
            decisions.append(
                PBTDecision(
                    0,
                    None,
                    dict(self.hparams[0]),
                    self.shaping[0],
                    f"replay @ {steps:,} env steps: {text or 'shaping'}",
                )
            )
        return decisions

    def save(self) -> None:
        """Nothing of its own to save: the schedule is re-read, and the learner's checkpoint
        holds the hyperparameters in force."""
