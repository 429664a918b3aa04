"""Scripted arena players (uniform random, chaser) and a match runner for evaluation.

Players read only the observation vector described by `envs.arena.game.ObsLayout`.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from envs.arena.game import (
    FACE_N,
    HEIGHT,
    MOVE_N,
    NOOP,
    NUM_ACTIONS,
    SHOOT,
    WIDTH,
    ObsLayout,
)


class RandomPlayer:
    """Picks every action uniformly at random."""

    def __init__(self, num_actions: int = NUM_ACTIONS, seed: Optional[int] = None):
        self.num_actions = num_actions
        self._rng = np.random.default_rng(seed)

    def act(self, obs: np.ndarray) -> int:
        return int(self._rng.integers(self.num_actions))

    __call__ = act


class ChaserPlayer:
    """Walks to line up with the nearest enemy, turns to face it and shoots.

    When out of ammo it walks to the nearest ammo pickup instead. Pillars are only
    side-stepped, so it is beatable, but it is far better than random play.
    """

    def __init__(self, num_agents: int = 2, seed: Optional[int] = None):
        self.lay = ObsLayout(num_agents)
        self._rng = np.random.default_rng(seed)

    def _step_towards(self, obs: np.ndarray, dx: int, dy: int) -> int:
        """A move that reduces the smaller non-zero offset first (to line up), if free."""
        rays = obs[self.lay.rays : self.lay.rays + 4]
        horizontal = 1 if dx > 0 else 3
        vertical = 2 if dy > 0 else 0
        if dx != 0 and (dy == 0 or abs(dx) <= abs(dy)):
            choices = (horizontal, vertical) if dy != 0 else (horizontal,)
        elif dy != 0:
            choices = (vertical, horizontal) if dx != 0 else (vertical,)
        else:
            choices = ()
        for d in choices:
            if rays[d] > 0:
                return MOVE_N + d
        return MOVE_N + int(self._rng.integers(4))

    def act(self, obs: np.ndarray) -> int:
        lay = self.lay
        if not obs[lay.FACING : lay.FACING + 4].any():  # eliminated: zero observation
            return NOOP
        can_shoot = obs[lay.CAN_SHOOT] > 0.5
        target, best = -1, 2.0
        for k in range(lay.num_enemies):
            b = lay.enemy(k)
            if obs[b + lay.O_ALIVE] < 0.5:
                continue
            if can_shoot and obs[b + lay.O_IN_SIGHTS] > 0.5:
                return SHOOT
            if obs[b + lay.O_DIST] < best:
                target, best = b, obs[b + lay.O_DIST]
        if target < 0:
            return NOOP
        span = WIDTH - 1
        if obs[lay.AMMO] <= 0 and obs[lay.ammo_pickup + 2] > 0.5:
            dx = round(float(obs[lay.ammo_pickup]) * span)
            dy = round(float(obs[lay.ammo_pickup + 1]) * (HEIGHT - 1))
            return self._step_towards(obs, dx, dy)
        dx = round(float(obs[target + lay.O_DX]) * span)
        dy = round(float(obs[target + lay.O_DY]) * (HEIGHT - 1))
        if obs[target + lay.O_ALIGNED] > 0.5:
            d = (0 if dy < 0 else 2) if dx == 0 else (1 if dx > 0 else 3)
            if obs[lay.FACING + d] < 0.5:
                return FACE_N + d
            return NOOP  # facing it, waiting for the cooldown
        return self._step_towards(obs, dx, dy)

    __call__ = act


ActFn = Union[Callable[[np.ndarray], Any], Any]


def _as_callable(player: ActFn) -> Callable[[np.ndarray], Any]:
    act = getattr(player, "act", None)
    return act if callable(act) else player


def play_match(
    env: Any,
    act_fns: Sequence[ActFn],
    num_games: int,
    seed: Optional[int] = None,
    max_steps: int = 10_000_000,
) -> list[list[float]]:
    """Play `num_games` episodes of a multi-agent env; one player (callable or `.act`) per seat.

    Returns one list per game holding every agent's `true_objective` (1 win, 0.5 draw, 0 loss).
    """
    if len(act_fns) != env.num_agents:
        raise ValueError(f"need {env.num_agents} players, got {len(act_fns)}")
    fns = [_as_callable(p) for p in act_fns]
    obs, _ = env.reset(seed=seed)
    results: list[list[float]] = []
    steps = 0
    while len(results) < num_games:
        actions = [fn(o) for fn, o in zip(fns, obs)]
        obs, _, terminated, truncated, infos = env.step(actions)
        steps += 1
        if terminated[0] or truncated[0]:
            results.append([float(info.get("true_objective", np.nan)) for info in infos])
        if steps >= max_steps:
            raise RuntimeError(f"play_match: {num_games} games not finished in {max_steps} steps")
    return results
