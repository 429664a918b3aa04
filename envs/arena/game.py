"""Arena: a small grid shooter for 2 (duel) or 4 (2 vs 2) players, in plain Python and NumPy.

Follows the multi-agent contract of `rl_pbt.envs.interfaces` and implements
`RewardShapingInterface`; `envs.arena` registers it, `envs.arena.scripted` plays it.

Rules. An 11x11 floor with five pillars. Each player has a cell, a facing (N, E, S, W),
health, ammo and a shot cooldown. Actions (Discrete(10)): 0 noop, 1-4 step N/E/S/W (and face
that way), 5-8 face N/E/S/W in place, 9 shoot. A shot hits the nearest enemy straight ahead
within `SHOT_RANGE` cells, unless a pillar is in between; teammates are not hit. Moves are
resolved one player at a time (the order alternates every step), then pickups, then all
shots at once, so two players can eliminate each other in the same step. Health and ammo
pickups respawn some steps after they are taken.

The storm: a safe zone, the square of Chebyshev radius r around the floor's centre cell,
covers the whole floor (r = ZONE_FULL_RADIUS) until ZONE_START_PCT % of the episode; then it
shrinks one cell at a time, at evenly spaced steps, to r = ZONE_MIN_RADIUS at ZONE_END_PCT %
and stays there (`zone_schedule`). Every ZONE_DAMAGE_EVERY steps after the shrinking began,
each living player outside the zone loses 1 health, after the shots of that step; a player
whose health reaches 0 this way is eliminated like one shot down (no one gets the kill). The
storm ends stalemates: a player that waits far from the centre (a good answer to a hunter)
must come in or die, and the two sides meet around the centre before the time limit.

A side wins when the other is eliminated (shots or storm), or at the time limit when its
players have more health left in total; equal health at the time limit, or both sides falling
together, is a draw.

Episode end: every agent gets `terminated` at the same step, whether a side fell or time ran
out (`truncated` is never set: the time limit is a rule of the game, and the observations show
the time left, so its end is final and not bootstrapped); every info has `true_objective` (1
win, 0.5 draw, 0 loss, by team) and `time_limit` (True when time ran out), and the
returned observations are the first of the next episode. An agent eliminated earlier in a
2v2 episode is inactive (`info["is_active"] = False`, zero observation, zero reward) while
its team plays on; on the final step every agent is active again, so the eliminated agent
also receives its team's win/loss reward.

Calibration (measured before the storm was added): a plain PPO learner (MLP 128x128, default
shaping) against a uniformly random player won over 99% of duels after about 120k of its own
steps.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np
from gymnasium import spaces

from rl_pbt.envs.interfaces import RewardShapingInterface, generator_from_state

WIDTH = 11
HEIGHT = 11
PILLARS = ((3, 3), (7, 3), (3, 7), (7, 7), (5, 5))
MAX_HEALTH = 4
START_AMMO = 10
MAX_AMMO = 15
SHOT_RANGE = 5
SHOT_COOLDOWN = 2  # steps after a shot during which the player cannot shoot
HEALTH_PICKUPS = 2
AMMO_PICKUPS = 2
HEALTH_PICKUP_AMOUNT = 2
AMMO_PICKUP_AMOUNT = 5
PICKUP_RESPAWN_STEPS = 15
DEFAULT_EPISODE_STEPS = 300
# the storm (see the module docstring): percentages of the episode, so that short test
# episodes get the whole schedule too
ZONE_CENTER_X, ZONE_CENTER_Y = WIDTH // 2, HEIGHT // 2  # the centre pillar's cell
ZONE_FULL_RADIUS = max(WIDTH // 2, HEIGHT // 2)  # the whole floor
ZONE_MIN_RADIUS = 1  # the 8 cells around the centre pillar: the sides must meet there
ZONE_START_PCT = 40
ZONE_END_PCT = 80
ZONE_DAMAGE_EVERY = 5  # a player caught outside for good falls in 4 ticks (MAX_HEALTH)

# Directions: 0 N, 1 E, 2 S, 3 W (y grows downwards).
DIR_DX = (0, 1, 0, -1)
DIR_DY = (-1, 0, 1, 0)

NOOP, MOVE_N, MOVE_E, MOVE_S, MOVE_W, FACE_N, FACE_E, FACE_S, FACE_W, SHOOT = range(10)
NUM_ACTIONS = 10

EVENTS = (
    "win",
    "loss",
    "kill",
    "death",
    "damage_dealt",
    "damage_taken",
    "pickup",
    "proximity",
    "shot_fired",
    "zone_damage",
)
EVENT_INDEX = {name: k for k, name in enumerate(EVENTS)}
(
    EV_WIN,
    EV_LOSS,
    EV_KILL,
    EV_DEATH,
    EV_DAMAGE_DEALT,
    EV_DAMAGE_TAKEN,
    EV_PICKUP,
    EV_PROXIMITY,
    EV_SHOT_FIRED,
    EV_ZONE_DAMAGE,
) = range(len(EVENTS))

# Shaped reward of an agent for one step = sum over events of coefficient * count.
# "win"/"loss": once, at the end of an episode (by team); "kill"/"death": eliminations;
# "damage_*": health points; "pickup": items taken; "proximity": 1 for every step that ends
# with a living enemy within SHOT_RANGE (Manhattan); "shot_fired": shots actually fired;
# "zone_damage": health lost to the storm. Storm damage is its own key, not "damage_taken":
# it needs no opponent (so damage_taken keeps equal to the enemies' damage_dealt) and PBT can
# weigh "stay inside" apart from "do not get shot".
DEFAULT_REWARD_SHAPING = {
    "win": 1.0,
    "loss": -1.0,
    "kill": 0.25,
    "death": -0.25,
    "damage_dealt": 0.1,
    "damage_taken": -0.1,
    "pickup": 0.05,
    "proximity": 0.002,
    "shot_fired": -0.01,
    "zone_damage": -0.1,
}


class ObsLayout:
    """Offsets into the per-agent observation vector (every value lies in [-1, 1]).

    Own block: x, y, facing one-hot (4), health, ammo, cooldown (fractions), can-shoot.
    Then one block per other agent, teammates first, then enemies, each in seat order:
    alive, dx, dy, Manhattan distance (normalised), health, facing one-hot (4), in-my-sights
    (a shot now would hit it: the nearest enemy straight ahead within reach; never a
    teammate), threat (it faces me with a clear line within range), aligned
    (same row or column, clear line, within range); an eliminated agent's block is zeros.
    Then the nearest available health pickup and ammo pickup: dx, dy, available.
    Then free cells ahead in each direction N, E, S, W. Then the fraction of the episode left.
    Then the storm: the safe zone's radius and the agent's own Chebyshev distance from the
    centre, both divided by ZONE_FULL_RADIUS, and outside (1 if that distance exceeds the
    radius: the next storm tick would cost 1 health unless the agent moves in or it shrinks).
    Positions, offsets and free cells along x are divided by WIDTH - 1, along y by HEIGHT - 1.
    An eliminated agent observes all zeros.
    """

    X, Y = 0, 1
    FACING = 2
    HEALTH, AMMO, COOLDOWN, CAN_SHOOT = 6, 7, 8, 9
    OWN_SIZE = 10
    # inside an "other agent" block
    O_ALIVE, O_DX, O_DY, O_DIST, O_HEALTH, O_FACING = 0, 1, 2, 3, 4, 5
    O_IN_SIGHTS, O_THREAT, O_ALIGNED = 9, 10, 11
    OTHER_SIZE = 12

    def __init__(self, num_agents: int):
        self.num_agents = num_agents
        self.team_size = num_agents // 2
        self.num_teammates = self.team_size - 1
        self.num_enemies = num_agents - self.team_size
        self.others = self.OWN_SIZE
        self.health_pickup = self.others + (num_agents - 1) * self.OTHER_SIZE
        self.ammo_pickup = self.health_pickup + 3
        self.rays = self.ammo_pickup + 3
        self.time_left = self.rays + 4
        self.zone_radius = self.time_left + 1
        self.zone_distance = self.zone_radius + 1
        self.zone_outside = self.zone_distance + 1
        self.size = self.zone_outside + 1

    def other(self, k: int) -> int:
        """Start of the block of the k-th other agent (teammates first)."""
        return self.others + k * self.OTHER_SIZE

    def enemy(self, k: int) -> int:
        return self.other(self.num_teammates + k)


def _free_rays() -> list[list[int]]:
    """rays[cell][d]: free cells in direction d from `cell` before a pillar or the border."""
    blocked = {(x, y) for x, y in PILLARS}
    rays = []
    for cell in range(WIDTH * HEIGHT):
        x0, y0 = cell % WIDTH, cell // WIDTH
        row = []
        for d in range(4):
            n, x, y = 0, x0 + DIR_DX[d], y0 + DIR_DY[d]
            while 0 <= x < WIDTH and 0 <= y < HEIGHT and (x, y) not in blocked:
                n += 1
                x += DIR_DX[d]
                y += DIR_DY[d]
            row.append(n)
        rays.append(row)
    return rays


_RAYS = _free_rays()
_RAY_FEATURES = [
    (r[0] / (HEIGHT - 1), r[1] / (WIDTH - 1), r[2] / (HEIGHT - 1), r[3] / (WIDTH - 1))
    for r in _RAYS
]
_ONE_HOT = tuple(tuple(1.0 if k == d else 0.0 for k in range(4)) for d in range(4))
_ZERO_OTHER = (0.0,) * ObsLayout.OTHER_SIZE
_PILLAR_CELLS = frozenset(y * WIDTH + x for x, y in PILLARS)
_FREE_CELLS = tuple(c for c in range(WIDTH * HEIGHT) if c not in _PILLAR_CELLS)


# [cell]: Chebyshev distance from the zone's centre; [r]: a radius or distance as observed
_ZONE_DIST = tuple(
    max(abs(c % WIDTH - ZONE_CENTER_X), abs(c // WIDTH - ZONE_CENTER_Y))
    for c in range(WIDTH * HEIGHT)
)
_ZONE_FEAT = tuple(r / ZONE_FULL_RADIUS for r in range(ZONE_FULL_RADIUS + 1))


def zone_schedule(episode_steps: int) -> tuple[list[int], list[bool]]:
    """The storm over an episode: radius[t] and damage[t] (a storm tick) for t in
    0..episode_steps, t counting the steps taken (the state after step t).

    Radius ZONE_FULL_RADIUS until the start (ZONE_START_PCT % of the episode); from there one
    cell less at evenly spaced steps, ZONE_MIN_RADIUS from the end (ZONE_END_PCT %) on. A tick
    every ZONE_DAMAGE_EVERY steps after the start, so the first comes a few steps after the
    first shrink: the players see it coming.
    """
    start = episode_steps * ZONE_START_PCT // 100
    span = max(1, episode_steps * ZONE_END_PCT // 100 - start)
    shrinks = ZONE_FULL_RADIUS - ZONE_MIN_RADIUS  # the first comes at the start
    radius, damage = [], []
    for t in range(episode_steps + 1):
        if t < start:
            radius.append(ZONE_FULL_RADIUS)
        else:
            done = 1 + (shrinks - 1) * (t - start) // span
            radius.append(max(ZONE_MIN_RADIUS, ZONE_FULL_RADIUS - done))
        damage.append(t > start and (t - start) % ZONE_DAMAGE_EVERY == 0)
    return radius, damage


def _direction_to(dx: int, dy: int) -> int:
    """Direction from a cell to an aligned cell at offset (dx, dy); -1 if not aligned."""
    if dx == 0:
        return 0 if dy < 0 else (2 if dy > 0 else -1)
    if dy == 0:
        return 1 if dx > 0 else 3
    return -1


class ArenaGame(RewardShapingInterface):
    """The arena for `num_agents` players in two teams (2: duel, 4: 2 vs 2)."""

    is_multiagent = True
    metadata = {"render_modes": ["rgb_array"], "render_fps": 15}
    CELL_PX = 32  # `render` draws a cell in 32x32 pixels, the wall around the floor one cell wide

    def __init__(
        self,
        num_agents: int = 2,
        episode_steps: int = DEFAULT_EPISODE_STEPS,
        seed: Optional[Union[int, np.random.SeedSequence]] = None,
        render_mode: Optional[str] = None,
    ):
        if num_agents not in (2, 4):
            raise ValueError(f"arena supports 2 or 4 players, got {num_agents}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.num_agents = num_agents
        self.episode_steps = int(episode_steps)
        self.render_mode = render_mode
        self.layout = ObsLayout(num_agents)
        self.observation_space = spaces.Box(-1.0, 1.0, (self.layout.size,), np.float32)
        self.action_space = spaces.Discrete(NUM_ACTIONS)
        self._rng = np.random.default_rng(seed)

        n = num_agents
        self.team = [0 if i < n // 2 else 1 for i in range(n)]
        team_members = [[i for i in range(n) if self.team[i] == t] for t in (0, 1)]
        self._others = [
            [j for j in team_members[self.team[i]] if j != i] + team_members[1 - self.team[i]]
            for i in range(n)
        ]
        self._enemies = [team_members[1 - self.team[i]] for i in range(n)]
        self._team_members = team_members
        self._order_even = list(range(n))
        self._order_odd = list(reversed(range(n)))

        # per-agent state, mutated in place
        self.x = [0] * n
        self.y = [0] * n
        self.facing = [0] * n
        self.health = [0] * n
        self.ammo = [0] * n
        self.cooldown = [0] * n
        self.alive = [False] * n
        # pickups: kind 0 health, 1 ammo; cell -1 while waiting to respawn
        self._pickup_kind = [0] * HEALTH_PICKUPS + [1] * AMMO_PICKUPS
        self.pickup_cell = [-1] * len(self._pickup_kind)
        self._pickup_timer = [0] * len(self._pickup_kind)
        self._pickup_at = [-1] * (WIDTH * HEIGHT)
        self.t = 0

        self._coeffs = np.empty((n, len(EVENTS)), dtype=np.float64)
        self._coeffs[:] = [DEFAULT_REWARD_SHAPING[k] for k in EVENTS]
        self.events = np.zeros((n, len(EVENTS)), dtype=np.float64)  # last step's event counts
        self._zero_row = (0.0,) * self.layout.size
        self._hits = [0] * n  # damage received in the current step (all zero between steps)
        self._shot_target = [-1] * n  # whom each player hit in the current step
        self._background: Optional[np.ndarray] = None

    @property
    def episode_steps(self) -> int:
        return self._episode_steps

    @episode_steps.setter
    def episode_steps(self, steps: int) -> None:
        # the storm's schedule follows the time limit (tests set it after construction)
        if int(steps) < 1:
            raise ValueError(f"episode_steps must be at least 1, got {steps}")
        self._episode_steps = int(steps)
        self._zone_radius, self._zone_damage = zone_schedule(self._episode_steps)

    # ----- reward shaping -----
    def get_default_reward_shaping(self) -> dict:
        return dict(DEFAULT_REWARD_SHAPING)

    def set_reward_shaping(self, reward_shaping: dict, agent_idx: Union[int, slice]) -> None:
        unknown = set(reward_shaping) - set(EVENTS)
        if unknown:
            raise ValueError(
                f"unknown arena reward shaping keys {sorted(unknown)}; known: {EVENTS}"
            )
        for key, value in reward_shaping.items():
            self._coeffs[agent_idx, EVENT_INDEX[key]] = float(value)

    def get_reward_shaping(self, agent_idx: int) -> dict:
        return {k: float(self._coeffs[agent_idx, i]) for i, k in enumerate(EVENTS)}

    # ----- episode -----
    def seed(self, seed: Optional[int] = None) -> None:
        self._rng = np.random.default_rng(seed)

    def reset(
        self, seed: Optional[int] = None, options: Optional[dict] = None
    ) -> tuple[list[np.ndarray], list[dict]]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._new_episode()
        return self._observations(), [{"is_active": True} for _ in range(self.num_agents)]

    def _random_free_cell(self, x_lo: int, x_hi: int) -> int:
        """A random pillar-free, player-free, pickup-free cell with x in [x_lo, x_hi]."""
        rng = self._rng
        occupied = {self.y[i] * WIDTH + self.x[i] for i in range(self.num_agents) if self.alive[i]}
        while True:
            x = int(rng.integers(x_lo, x_hi + 1))
            y = int(rng.integers(0, HEIGHT))
            cell = y * WIDTH + x
            if cell not in _PILLAR_CELLS and cell not in occupied and self._pickup_at[cell] < 0:
                return cell

    def _new_episode(self) -> None:
        self.t = 0
        for i in range(self.num_agents):
            self.alive[i] = False
        for c in self.pickup_cell:
            if c >= 0:
                self._pickup_at[c] = -1
        for i in range(self.num_agents):
            lo, hi = (0, 2) if self.team[i] == 0 else (WIDTH - 3, WIDTH - 1)
            cell = self._random_free_cell(lo, hi)
            self.x[i], self.y[i] = cell % WIDTH, cell // WIDTH
            self.facing[i] = 1 if self.team[i] == 0 else 3
            self.health[i] = MAX_HEALTH
            self.ammo[i] = START_AMMO
            self.cooldown[i] = 0
            self.alive[i] = True
        for p in range(len(self._pickup_kind)):
            self._place_pickup(p)

    def _place_pickup(self, p: int) -> None:
        cell = self._random_free_cell(0, WIDTH - 1)
        self.pickup_cell[p] = cell
        self._pickup_at[cell] = p
        self._pickup_timer[p] = 0

    def step(
        self, actions: Union[Sequence[int], np.ndarray]
    ) -> tuple[list[np.ndarray], list[float], list[bool], list[bool], list[dict]]:
        n = self.num_agents
        acts = np.asarray(actions, dtype=np.int64).reshape(-1).tolist()
        if len(acts) != n:
            raise ValueError(f"expected {n} actions, got {len(acts)}")
        for i, a in enumerate(acts):  # before anything changes (the eliminated's are ignored)
            if self.alive[i] and not 0 <= a < NUM_ACTIONS:
                raise ValueError(f"action {a} of agent {i} is outside [0, {NUM_ACTIONS})")
        ev = self.events
        ev.fill(0.0)
        x, y, facing, alive = self.x, self.y, self.facing, self.alive
        was_alive = list(alive)
        self.t += 1

        # 1. turning and moving, one player at a time
        for i in self._order_even if self.t % 2 == 0 else self._order_odd:
            a = acts[i]
            if not alive[i] or a == NOOP or a == SHOOT:
                continue
            if a >= FACE_N:
                facing[i] = a - FACE_N
                continue
            d = a - MOVE_N
            facing[i] = d
            if _RAYS[y[i] * WIDTH + x[i]][d] == 0:
                continue
            nx, ny = x[i] + DIR_DX[d], y[i] + DIR_DY[d]
            for j in range(n):
                if j != i and alive[j] and x[j] == nx and y[j] == ny:
                    break
            else:
                x[i], y[i] = nx, ny

        # 2. pickups
        for i in range(n):
            if not alive[i]:
                continue
            p = self._pickup_at[y[i] * WIDTH + x[i]]
            if p >= 0:
                if self._pickup_kind[p] == 0:
                    self.health[i] = min(MAX_HEALTH, self.health[i] + HEALTH_PICKUP_AMOUNT)
                else:
                    self.ammo[i] = min(MAX_AMMO, self.ammo[i] + AMMO_PICKUP_AMOUNT)
                self._pickup_at[self.pickup_cell[p]] = -1
                self.pickup_cell[p] = -1
                self._pickup_timer[p] = PICKUP_RESPAWN_STEPS
                ev[i, EV_PICKUP] += 1.0

        # 3. shots, resolved simultaneously
        hits, shot_target = self._hits, self._shot_target
        any_hit = False
        for i in range(n):
            if acts[i] != SHOOT or not alive[i] or self.cooldown[i] > 0 or self.ammo[i] <= 0:
                continue
            self.ammo[i] -= 1
            self.cooldown[i] = SHOT_COOLDOWN + 1  # the decrement below makes it SHOT_COOLDOWN
            ev[i, EV_SHOT_FIRED] += 1.0
            d = facing[i]
            reach = min(SHOT_RANGE, _RAYS[y[i] * WIDTH + x[i]][d])
            target, best = -1, reach + 1
            for j in self._enemies[i]:
                if not alive[j]:
                    continue
                dx, dy = x[j] - x[i], y[j] - y[i]
                if _direction_to(dx, dy) == d:
                    dist = abs(dx) + abs(dy)
                    if dist < best:
                        target, best = j, dist
            if target >= 0:
                any_hit = True
                hits[target] += 1
                shot_target[i] = target
                ev[i, EV_DAMAGE_DEALT] += 1.0
                ev[target, EV_DAMAGE_TAKEN] += 1.0
        if any_hit:
            for j in range(n):
                if hits[j]:
                    self.health[j] -= hits[j]
                    hits[j] = 0
                    if self.health[j] <= 0:
                        alive[j] = False
                        ev[j, EV_DEATH] += 1.0
                        for i in range(n):
                            if shot_target[i] == j:
                                ev[i, EV_KILL] += 1.0
            for i in range(n):
                shot_target[i] = -1

        # 3b. the storm, after the shots: a player shot down this step is not hit again
        tz = min(self.t, self.episode_steps)  # (t only passes the limit before a first reset)
        if self._zone_damage[tz]:
            radius = self._zone_radius[tz]
            for i in range(n):
                if alive[i] and _ZONE_DIST[y[i] * WIDTH + x[i]] > radius:
                    self.health[i] -= 1
                    ev[i, EV_ZONE_DAMAGE] += 1.0
                    if self.health[i] <= 0:
                        alive[i] = False
                        ev[i, EV_DEATH] += 1.0

        # 4. timers
        for i in range(n):
            if self.cooldown[i] > 0:
                self.cooldown[i] -= 1
        for p in range(len(self._pickup_kind)):
            if self._pickup_timer[p] > 0:
                self._pickup_timer[p] -= 1
                if self._pickup_timer[p] == 0:
                    self._place_pickup(p)

        # 5. proximity
        for i in range(n):
            if alive[i]:
                for j in self._enemies[i]:
                    if alive[j] and abs(x[j] - x[i]) + abs(y[j] - y[i]) <= SHOT_RANGE:
                        ev[i, EV_PROXIMITY] = 1.0
                        break

        # 6. episode end
        team_alive = [any(alive[j] for j in members) for members in self._team_members]
        terminated = not (team_alive[0] and team_alive[1])
        truncated = not terminated and self.t >= self.episode_steps
        if terminated or truncated:
            winner = -1
            if terminated and team_alive[0] != team_alive[1]:
                winner = 0 if team_alive[0] else 1
            elif truncated:
                # at the time limit the side with more health left wins
                left = [sum(self.health[j] for j in m if alive[j]) for m in self._team_members]
                if left[0] != left[1]:
                    winner = 0 if left[0] > left[1] else 1
            if winner >= 0:
                objectives = [1.0 if self.team[i] == winner else 0.0 for i in range(n)]
                for i in range(n):
                    ev[i, EV_WIN if self.team[i] == winner else EV_LOSS] += 1.0
            else:
                objectives = [0.5] * n
            rewards = (self._coeffs * ev).sum(axis=1).tolist()
            infos = [
                {
                    "is_active": True,
                    "true_objective": objectives[i],
                    "team": self.team[i],
                    "time_limit": truncated,
                }
                for i in range(n)
            ]
            self.final_frame = self.render()  # the end, for a video (reset next)
            self._new_episode()
            obs = self._observations()
            return obs, rewards, [True] * n, [False] * n, infos

        rewards = (self._coeffs * ev).sum(axis=1).tolist()
        infos = [{"is_active": was_alive[i]} for i in range(n)]
        return self._observations(), rewards, [False] * n, [False] * n, infos

    def _aim(self, i: int) -> int:
        """The agent a shot of i's now would hit (as `step` picks it): the nearest living enemy
        straight ahead within reach; n (nobody's index) when none, so a teammate or an enemy
        behind it is never in i's sights."""
        x, y, d = self.x, self.y, self.facing[i]
        reach = min(SHOT_RANGE, _RAYS[y[i] * WIDTH + x[i]][d])
        target, best = self.num_agents, reach + 1
        for j in self._enemies[i]:
            if self.alive[j]:
                dx, dy = x[j] - x[i], y[j] - y[i]
                if _direction_to(dx, dy) == d and abs(dx) + abs(dy) < best:
                    target, best = j, abs(dx) + abs(dy)
        return target

    # ----- observations -----
    def _observations(self) -> list[np.ndarray]:
        x, y, facing, alive, health = self.x, self.y, self.facing, self.alive, self.health
        inv_x, inv_y = 1.0 / (WIDTH - 1), 1.0 / (HEIGHT - 1)
        inv_dist = 1.0 / ((WIDTH - 1) + (HEIGHT - 1))
        frac_left = 1.0 - self.t / self.episode_steps
        radius = self._zone_radius[min(self.t, self.episode_steps)]
        radius_feat = _ZONE_FEAT[radius]
        # what every observer sees of agent j, computed once
        seen = [
            (health[j] / MAX_HEALTH,) + _ONE_HOT[facing[j]] if alive[j] else None
            for j in range(self.num_agents)
        ]
        pickups = [[], []]
        for p, c in enumerate(self.pickup_cell):
            if c >= 0:
                pickups[self._pickup_kind[p]].append((c % WIDTH, c // WIDTH))
        row: list[float] = []  # all agents' observations, one after the other
        for i in range(self.num_agents):
            if not alive[i]:
                row += self._zero_row
                continue
            xi, yi, fi = x[i], y[i], facing[i]
            cell = yi * WIDTH + xi
            rays = _RAYS[cell]
            cd, ammo = self.cooldown[i], self.ammo[i]
            row.append(xi * inv_x)
            row.append(yi * inv_y)
            row += _ONE_HOT[fi]
            row += (
                health[i] / MAX_HEALTH,
                ammo / MAX_AMMO,
                cd / SHOT_COOLDOWN,
                1.0 if cd == 0 and ammo > 0 else 0.0,
            )
            aim = self._aim(i) if self.num_agents > 2 else -1  # a duel: the other, if ahead
            for j in self._others[i]:
                if seen[j] is None:
                    row += _ZERO_OTHER
                    continue
                dx, dy = x[j] - xi, y[j] - yi
                dist = abs(dx) + abs(dy)
                d = _direction_to(dx, dy)
                row += (1.0, dx * inv_x, dy * inv_y, dist * inv_dist)
                row += seen[j]
                if d >= 0 and dist <= SHOT_RANGE and dist <= rays[d]:
                    row += (
                        1.0 if fi == d and (aim < 0 or j == aim) else 0.0,
                        1.0 if facing[j] == (d + 2) % 4 else 0.0,
                        1.0,
                    )
                else:
                    row += (0.0, 0.0, 0.0)
            for kind in (0, 1):
                best, bdx, bdy = 1 << 30, 0, 0
                for px, py in pickups[kind]:
                    dist = abs(px - xi) + abs(py - yi)
                    if dist < best:
                        best, bdx, bdy = dist, px - xi, py - yi
                if best < 1 << 30:
                    row += (bdx * inv_x, bdy * inv_y, 1.0)
                else:
                    row += (0.0, 0.0, 0.0)
            row += _RAY_FEATURES[cell]
            row.append(frac_left)
            zd = _ZONE_DIST[cell]
            row += (radius_feat, _ZONE_FEAT[zd], 1.0 if zd > radius else 0.0)
        return list(np.array(row, dtype=np.float32).reshape(self.num_agents, -1))

    # ----- exact resume -----
    # every list a step or a reset changes (in place: the step keeps local names for them)
    _STATE = ("x", "y", "facing", "health", "ammo", "cooldown", "alive", "pickup_cell",
              "_pickup_timer", "_pickup_at")  # fmt: skip

    def get_state(self) -> dict:
        """The game as plain data: a serial run saves it at a stop and `set_state` puts it
        back, so that the run resumes exactly (as the batched twin's)."""
        out = {k: list(getattr(self, k)) for k in self._STATE}
        out.update(t=self.t, coeffs=self._coeffs.copy(), events=self.events.copy())
        out["rng"] = self._rng.bit_generator.state
        return out

    def set_state(self, state: dict) -> None:
        for k in self._STATE:
            now = getattr(self, k)
            now[:] = [type(old)(v) for old, v in zip(now, state[k])]  # plain ints and bools
        self.t = int(state["t"])
        self._coeffs[...] = state["coeffs"]
        self.events[...] = state["events"]
        self._rng = generator_from_state(state["rng"])

    # ----- rendering -----
    def render(self) -> Optional[np.ndarray]:
        """The floor from above (416x416, sizes divisible by 16 for video codecs): players as
        discs in their team's colour (blue seats first, red after; a teammate in a lighter
        shade) with a white mark on the side they face and their health above them; the storm
        as purple stripes outside the safe zone's light outline; health pickups green crosses,
        ammo yellow boxes; last step's shots as yellow lines. The strip on top shows every
        player's health and ammo (blue on the left, red on the right) and the time bar, its
        storm phase in purple. Cell (x, y) covers pixels from ((y + 1) * CELL_PX,
        (x + 1) * CELL_PX) on."""
        if self.render_mode != "rgb_array":
            return None
        if self._background is None:
            self._background = _draw_background()
        img = self._background.copy()
        radius = self._zone_radius[min(self.t, self.episode_steps)]
        if radius < ZONE_FULL_RADIUS:
            _draw_storm(img, radius)
        for p, c in enumerate(self.pickup_cell):
            if c >= 0:
                _draw_pickup(img, c % WIDTH, c // WIDTH, self._pickup_kind[p])
        for x, y in self._draw_shots(img) if self.t > 0 else []:
            _frame_cell(img, x, y, _SHOT_COLOR, 2)  # under the player: its health stays seen
        for i in range(self.num_agents):
            if self.alive[i]:
                _draw_player(
                    img,
                    self.x[i],
                    self.y[i],
                    self.facing[i],
                    self.health[i],
                    _PLAYER_COLORS[self.team[i]][self._seat_in_team(i)],
                )
            elif self.t > 0:  # eliminated earlier in this (2 vs 2) episode
                _draw_fallen(img, self.x[i], self.y[i], _PLAYER_COLORS[self.team[i]][0])
        self._draw_hud(img)
        return img

    def _seat_in_team(self, i: int) -> int:
        return self._team_members[self.team[i]].index(i)

    def _draw_shots(self, img: np.ndarray) -> list[tuple[int, int]]:
        """Draws the shots fired in the last step; returns the cells of the players hit."""
        hits = []
        for i in range(self.num_agents):
            if not self.events[i, EV_SHOT_FIRED]:  # (a shooter may have fallen in the step)
                continue
            d, x0, y0 = self.facing[i], self.x[i], self.y[i]
            reach = min(SHOT_RANGE, _RAYS[y0 * WIDTH + x0][d])
            if self.events[i, EV_DAMAGE_DEALT]:
                # the nearest enemy in line that stands or fell this step: whom the shot hit
                line = [
                    abs(self.x[j] - x0) + abs(self.y[j] - y0)
                    for j in self._enemies[i]
                    if (self.alive[j] or self.events[j, EV_DEATH])
                    and _direction_to(self.x[j] - x0, self.y[j] - y0) == d
                ]
                reach = min(line + [reach])
                hits.append((x0 + DIR_DX[d] * reach, y0 + DIR_DY[d] * reach))
            if reach > 0:
                _draw_ray(img, x0, y0, d, reach)
        return hits

    def _draw_hud(self, img: np.ndarray) -> None:
        for team, members in enumerate(self._team_members):
            for k, i in enumerate(members):
                top = 6 + 13 * k if len(members) > 1 else 12
                _draw_status(
                    img,
                    team,
                    top,
                    _PLAYER_COLORS[team][k],
                    self.alive[i],
                    self.health[i] if self.alive[i] else 0,
                    self.ammo[i],
                )
        # the time bar: elapsed in light grey over the storm phase in purple
        x0, x1, y0 = _TIME_BAR_X0, _TIME_BAR_X1, _HUD_PX // 2 - 4
        bar = img[y0 : y0 + 8, x0:x1]
        bar[:] = (60, 60, 70)
        span = x1 - x0
        start, stop = span * ZONE_START_PCT // 100, span * ZONE_END_PCT // 100
        bar[:, start:] = _STORM_DARK
        bar[:, start:stop] = _STORM_LIGHT
        done = span * min(self.t, self.episode_steps) // self.episode_steps
        bar[2:6, :done] = (230, 230, 230)

    def close(self) -> None:
        pass


# ----- rendering helpers (drawing only: they read the state, never change it) -----
_CELL_PX = ArenaGame.CELL_PX
_HUD_PX = _CELL_PX  # the status strip, drawn over the top wall
_ORIGIN_X, _ORIGIN_Y = _CELL_PX, _CELL_PX  # the floor's top-left pixel
_FRAME_W, _FRAME_H = (WIDTH + 2) * _CELL_PX, (HEIGHT + 2) * _CELL_PX
_TIME_BAR_X0, _TIME_BAR_X1 = _FRAME_W // 2 - 64, _FRAME_W // 2 + 64
# per team, per seat in the team: blue and red, the second teammate lighter
_PLAYER_COLORS = (((50, 110, 255), (130, 180, 255)), ((235, 55, 45), (255, 150, 110)))
_STORM_DARK, _STORM_LIGHT = (95, 30, 110), (150, 55, 170)
_ZONE_EDGE = (235, 180, 255)
_SHOT_COLOR = (255, 235, 110)


def _disc_masks(size: int, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks of a disc and a 1.5-px rim around it, centred in a size x size box."""
    yy, xx = np.mgrid[:size, :size] + 0.5 - size / 2
    dist = np.hypot(xx, yy)
    return dist <= radius, (dist > radius) & (dist <= radius + 1.5)


def _facing_marks() -> list[np.ndarray]:
    """Per direction N, E, S, W: a 4-px wide bar from the cell's centre to the disc's rim."""
    yy, xx = np.mgrid[:_CELL_PX, :_CELL_PX] + 0.5 - _CELL_PX / 2
    marks = []
    for d in range(4):
        along = xx * DIR_DX[d] + yy * DIR_DY[d]  # distance from the centre towards d
        across = np.abs(xx * DIR_DY[d] - yy * DIR_DX[d])
        marks.append((along >= 0) & (along <= _CELL_PX / 2 - 2) & (across <= 2.5))
    return marks


_DISC, _RIM = _disc_masks(_CELL_PX, _CELL_PX * 0.36)
_FACING_MARKS = _facing_marks()


def _cell_view(img: np.ndarray, x: int, y: int) -> np.ndarray:
    px, py = _ORIGIN_X + x * _CELL_PX, _ORIGIN_Y + y * _CELL_PX
    return img[py : py + _CELL_PX, px : px + _CELL_PX]


def _draw_background() -> np.ndarray:
    img = np.zeros((_FRAME_H, _FRAME_W, 3), dtype=np.uint8)
    img[:] = (18, 18, 22)  # the status strip
    img[_HUD_PX:] = (95, 95, 105)  # the wall
    floor = img[_ORIGIN_Y : _ORIGIN_Y + HEIGHT * _CELL_PX, _ORIGIN_X : _ORIGIN_X + WIDTH * _CELL_PX]
    floor[:] = (34, 36, 44)
    floor[::_CELL_PX] = (46, 49, 58)  # a faint grid
    floor[:, ::_CELL_PX] = (46, 49, 58)
    for cx, cy in PILLARS:
        cell = _cell_view(img, cx, cy)
        cell[:] = (80, 80, 90)
        cell[2:-2, 2:-2] = (130, 130, 142)
    return img


def _draw_storm(img: np.ndarray, radius: int) -> None:
    """Purple stripes on the free cells outside the safe zone, a light line around it."""
    yy, xx = np.mgrid[:_CELL_PX, :_CELL_PX]
    for c in _FREE_CELLS:
        if _ZONE_DIST[c] > radius:
            x, y = c % WIDTH, c // WIDTH
            cell = _cell_view(img, x, y)
            cell[:] = _STORM_DARK
            # stripes that run on across cells
            cell[((xx + yy + (x + y) * _CELL_PX) // 6) % 2 == 0] = _STORM_LIGHT
    lo_x, hi_x = max(0, ZONE_CENTER_X - radius), min(WIDTH, ZONE_CENTER_X + radius + 1)
    lo_y, hi_y = max(0, ZONE_CENTER_Y - radius), min(HEIGHT, ZONE_CENTER_Y + radius + 1)
    x0, x1 = _ORIGIN_X + lo_x * _CELL_PX, _ORIGIN_X + hi_x * _CELL_PX
    y0, y1 = _ORIGIN_Y + lo_y * _CELL_PX, _ORIGIN_Y + hi_y * _CELL_PX
    img[y0 : y0 + 2, x0:x1] = _ZONE_EDGE
    img[y1 - 2 : y1, x0:x1] = _ZONE_EDGE
    img[y0:y1, x0 : x0 + 2] = _ZONE_EDGE
    img[y0:y1, x1 - 2 : x1] = _ZONE_EDGE


def _draw_pickup(img: np.ndarray, x: int, y: int, kind: int) -> None:
    cell, m = _cell_view(img, x, y), _CELL_PX // 2
    arm, half = _CELL_PX * 5 // 16, _CELL_PX // 10
    if kind == 0:  # health: a green cross
        cell[m - arm : m + arm, m - half : m + half] = (40, 205, 80)
        cell[m - half : m + half, m - arm : m + arm] = (40, 205, 80)
    else:  # ammo: a yellow box with a dark band
        cell[m - arm + 2 : m + arm - 2, m - arm : m + arm] = (235, 200, 40)
        cell[m - 1 : m + 1, m - arm : m + arm] = (120, 95, 20)


def _draw_player(img, x: int, y: int, facing: int, health: int, color) -> None:
    cell = _cell_view(img, x, y)
    cell[_RIM] = (10, 10, 12)
    cell[_DISC] = color
    cell[_FACING_MARKS[facing]] = (255, 255, 255)
    # health above the disc, one segment a point
    seg = (_CELL_PX - 4) // MAX_HEALTH
    for h in range(MAX_HEALTH):
        cell[0:3, 2 + h * seg : 1 + (h + 1) * seg] = (90, 235, 90) if h < health else (90, 25, 25)


def _draw_fallen(img, x: int, y: int, color) -> None:
    cell = _cell_view(img, x, y)
    dim = tuple(c // 2 for c in color)
    for k in range(4, _CELL_PX - 4):
        cell[k, k - 1 : k + 2] = dim
        cell[k, _CELL_PX - k - 2 : _CELL_PX - k + 1] = dim


def _draw_ray(img, x: int, y: int, d: int, reach: int) -> None:
    m = _CELL_PX // 2
    x0, y0 = _ORIGIN_X + x * _CELL_PX + m, _ORIGIN_Y + y * _CELL_PX + m
    x1, y1 = x0 + DIR_DX[d] * reach * _CELL_PX, y0 + DIR_DY[d] * reach * _CELL_PX
    img[min(y0, y1) - 1 : max(y0, y1) + 2, min(x0, x1) - 1 : max(x0, x1) + 2] = _SHOT_COLOR


def _frame_cell(img, x: int, y: int, color, width: int) -> None:
    cell = _cell_view(img, x, y)
    cell[:width], cell[-width:] = color, color
    cell[:, :width], cell[:, -width:] = color, color


def _draw_status(img, team: int, top: int, color, alive: bool, health: int, ammo: int) -> None:
    """One player's line in the status strip: colour swatch, health boxes, ammo bar; team 0
    from the left edge, team 1 mirrored from the right."""
    line = np.zeros((10, 8 + 4 + MAX_HEALTH * 10, 3), dtype=np.uint8)
    line[:] = (18, 18, 22)
    line[0:8, 0:8] = color if alive else tuple(c // 3 for c in color)
    for h in range(MAX_HEALTH):
        line[0:7, 12 + h * 10 : 20 + h * 10] = (90, 235, 90) if h < health else (70, 25, 25)
    line[8:10, 12 : 12 + (MAX_HEALTH * 10 - 2) * ammo // MAX_AMMO] = (235, 200, 40)
    x0 = 8 if team == 0 else _FRAME_W - 8 - line.shape[1]
    img[top : top + 10, x0 : x0 + line.shape[1]] = line if team == 0 else line[:, ::-1]
