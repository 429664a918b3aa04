"""Vectorised twin of `envs.arena.game.ArenaGame`: K independent arena games stepped at once.

`ArenaBatch(K, n, episode_steps, seeds=[s_0, ..., s_{K-1}])` keeps the state of K games in
NumPy arrays of shape (K, n), (K, num_pickups) and (K,) and steps all of them with one call.
Copy k behaves exactly like `ArenaGame(n, episode_steps, seed=s_k)` given the same actions:
the same observations (bitwise), rewards, episode ends, infos and reward shaping effects. Each
copy owns a `np.random.default_rng` and draws from it with the same calls, in the same order,
as `ArenaGame`. Rare events (a new episode, a pickup taken or respawning, two moves whose
outcome depends on the move order) run in small Python loops over just the copies concerned;
everything else is vectorised over K, with few NumPy calls per step (the cost at small K is
their overhead): moves, the storm and the observations are gathered from precomputed tables.
`tests/envs/test_arena_batch.py` keeps the two equal: change the rules in both or in neither.

Use `ArenaGame` for one game behind the usual env interface (the trainer, rendering, scripted
matches); use `ArenaBatch` where many games are stepped together and speed matters, e.g. a
sampler that steps all its env copies with one batched policy call. It does not render.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np
from gymnasium import spaces

from envs.arena.game import (
    _ONE_HOT,
    _PILLAR_CELLS,
    _RAY_FEATURES,
    _RAYS,
    _ZONE_DIST,
    _ZONE_FEAT,
    AMMO_PICKUP_AMOUNT,
    AMMO_PICKUPS,
    DEFAULT_EPISODE_STEPS,
    DEFAULT_REWARD_SHAPING,
    DIR_DX,
    DIR_DY,
    EV_DAMAGE_DEALT,
    EV_DAMAGE_TAKEN,
    EV_DEATH,
    EV_KILL,
    EV_LOSS,
    EV_PICKUP,
    EV_PROXIMITY,
    EV_SHOT_FIRED,
    EV_WIN,
    EV_ZONE_DAMAGE,
    EVENT_INDEX,
    EVENTS,
    HEALTH_PICKUP_AMOUNT,
    HEALTH_PICKUPS,
    HEIGHT,
    MAX_AMMO,
    MAX_HEALTH,
    MOVE_N,
    NOOP,
    NUM_ACTIONS,
    PICKUP_RESPAWN_STEPS,
    SHOOT,
    SHOT_COOLDOWN,
    SHOT_RANGE,
    START_AMMO,
    WIDTH,
    ZONE_FULL_RADIUS,
    ObsLayout,
    zone_schedule,
)
from rl_pbt.envs.interfaces import BatchedMultiAgentEnv, generator_from_state

SeedLike = Union[int, np.random.SeedSequence, None]

_NUM_CELLS = WIDTH * HEIGHT
NO_PICKUP = _NUM_CELLS  # `pickup_cell` of a pickup waiting to respawn (ArenaGame: -1)
NO_AGENT = _NUM_CELLS + 1  # `cell` of an eliminated agent: it is nowhere
_SPOTS = _NUM_CELLS + 2  # cells and the two places that are not on the floor
_NUM_PICKUPS = HEALTH_PICKUPS + AMMO_PICKUPS
_PICKUP_KIND = (0,) * HEALTH_PICKUPS + (1,) * AMMO_PICKUPS  # 0 health, 1 ammo
_FAR = 1 << 30  # distance to or from a place that is not on the floor
# _observations looks at the pickups as a (kind, index in kind) table of _PER_KIND columns a
# kind: _KIND_TABLE[kind * _PER_KIND + j] is the pickup in that place, or _NUM_PICKUPS (a
# column that always reads NO_PICKUP) where a kind has fewer pickups than the other
_PER_KIND = max(HEALTH_PICKUPS, AMMO_PICKUPS, 1)
_KIND_TABLE = np.full(2 * _PER_KIND, _NUM_PICKUPS, dtype=np.int64)
_KIND_TABLE[:HEALTH_PICKUPS] = np.arange(HEALTH_PICKUPS)
_KIND_TABLE[_PER_KIND : _PER_KIND + AMMO_PICKUPS] = HEALTH_PICKUPS + np.arange(AMMO_PICKUPS)
_KIND_PADDED = HEALTH_PICKUPS != AMMO_PICKUPS

# ----- lookup tables; every float is computed exactly as ArenaGame computes it -----
_INV_X, _INV_Y = 1.0 / (WIDTH - 1), 1.0 / (HEIGHT - 1)
_INV_DIST = 1.0 / ((WIDTH - 1) + (HEIGHT - 1))
_NO_LINE, _NOBODY = 4, 5  # sight codes beside the directions 0-3

# [spot * 4 + d]: free cells ahead (0 off the floor)
_RAYS_FLAT = np.zeros(_SPOTS * 4, dtype=np.int64)
_RAYS_FLAT[: _NUM_CELLS * 4] = np.array(_RAYS).reshape(-1)
_DCELL = np.array([DIR_DX[d] + DIR_DY[d] * WIDTH for d in range(4)])  # cell offset of a step
# per action: the direction it faces (-1: noop / shoot)
_ACTION_DIR = np.array([-1, 0, 1, 2, 3, 0, 1, 2, 3, -1])
_NO_MOVE = -(1 << 20)  # no move to a cell; below -1 - i for every agent i (see ArenaBatch._move)


def _move_table() -> np.ndarray:
    """[spot * NUM_ACTIONS + action]: the cell a move action steps to, or _NO_MOVE where the
    action is not a move, a pillar or the border is in the way, or the spot is off the floor."""
    table = np.full((_SPOTS, NUM_ACTIONS), _NO_MOVE, dtype=np.int64)
    for d in range(4):
        free = np.flatnonzero(_RAYS_FLAT[d::4] > 0)  # spots with a free cell ahead in direction d
        table[free, MOVE_N + d] = free + _DCELL[d]
    return table.reshape(-1)


_MOVE_TO = _move_table()


def _pair_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Tables over pairs of spots, indexed by `s1 * _SPOTS + s2` (looking from s1 at s2).

    distance: Manhattan distance (_FAR if either is off the floor); sight: the direction from
    s1 to s2 if s2 is aligned with s1, within SHOT_RANGE and not behind a pillar, else _NO_LINE,
    or _NOBODY if either is off the floor; geometry: the first four features of an "other
    agent" block (alive, dx, dy, distance); pickup: the nearest-pickup features (dx, dy,
    available). geometry and pickup are zero where either spot is off the floor.
    """
    cells = np.arange(_NUM_CELLS)
    x, y = cells % WIDTH, cells // WIDTH
    dx = x[None, :] - x[:, None]
    dy = y[None, :] - y[:, None]
    dist = np.abs(dx) + np.abs(dy)
    direction = np.full(dx.shape, _NO_LINE)
    direction[(dx == 0) & (dy < 0)] = 0
    direction[(dy == 0) & (dx > 0)] = 1
    direction[(dx == 0) & (dy > 0)] = 2
    direction[(dy == 0) & (dx < 0)] = 3
    ray = _RAYS_FLAT[cells[:, None] * 4 + direction % 4]
    clear = (direction < _NO_LINE) & (dist <= SHOT_RANGE) & (dist <= ray)
    distance = np.full((_SPOTS, _SPOTS), _FAR)
    distance[:_NUM_CELLS, :_NUM_CELLS] = dist
    sight = np.full((_SPOTS, _SPOTS), _NOBODY)
    sight[:_NUM_CELLS, :_NUM_CELLS] = np.where(clear, direction, _NO_LINE)
    dxf, dyf = dx * _INV_X, dy * _INV_Y
    geometry = np.zeros((_SPOTS, _SPOTS, 4), dtype=np.float32)
    geometry[:_NUM_CELLS, :_NUM_CELLS] = np.stack(
        [np.ones_like(dxf), dxf, dyf, dist * _INV_DIST], axis=2
    )
    pickup = np.zeros((_SPOTS, _SPOTS, 3), dtype=np.float32)
    pickup[:_NUM_CELLS, :_NUM_CELLS] = np.stack([dxf, dyf, np.ones_like(dxf)], axis=2)
    return (
        distance.reshape(-1),
        sight.reshape(-1),
        geometry.reshape(-1, 4),
        pickup.reshape(-1, 3),
    )


_DISTANCE, _SIGHT, _GEOMETRY, _PICKUP_FEAT = _pair_tables()
_NEAR = _DISTANCE <= SHOT_RANGE  # [pair]: within SHOT_RANGE (the proximity event)
# [x]: a cooldown or pickup timer at x after one more step
_COUNTDOWN = np.maximum(np.arange(max(SHOT_COOLDOWN + 1, PICKUP_RESPAWN_STEPS) + 1) - 1, 0)

# Tables over (safe zone radius, spot), indexed by `radius * _SPOTS + spot`:
# outside: the spot is outside the safe zone (never off the floor; never for the full radius);
# place: x, y (the first 2 own features), then the last 8 features: the 4 ray features (free
# cells ahead), a slot for the fraction of the episode left (written over by _observations),
# the radius feature, the distance feature and outside; zero off the floor
_OUTSIDE = np.zeros((ZONE_FULL_RADIUS + 1, _SPOTS), dtype=bool)
_OUTSIDE[:, :_NUM_CELLS] = np.array(_ZONE_DIST) > np.arange(ZONE_FULL_RADIUS + 1)[:, None]
_PLACE = np.zeros((ZONE_FULL_RADIUS + 1, _SPOTS, 10), dtype=np.float32)
_PLACE[:, :_NUM_CELLS] = [
    [
        (c % WIDTH * _INV_X, c // WIDTH * _INV_Y)
        + _RAY_FEATURES[c]
        + (0.0, _ZONE_FEAT[r], _ZONE_FEAT[_ZONE_DIST[c]], float(_ZONE_DIST[c] > r))
        for c in range(_NUM_CELLS)
    ]
    for r in range(ZONE_FULL_RADIUS + 1)
]
_OUTSIDE, _PLACE = _OUTSIDE.reshape(-1), _PLACE.reshape(-1, 10)


def _own_status(health: int, ammo: int, cooldown: int) -> tuple[float, ...]:
    """Own health, ammo, cooldown and can-shoot features; zeros for health 0 (eliminated)."""
    if health <= 0:
        return (0.0,) * 4
    can_shoot = 1.0 if cooldown == 0 and ammo > 0 else 0.0
    return (health / MAX_HEALTH, ammo / MAX_AMMO, cooldown / SHOT_COOLDOWN, can_shoot)


def _other_status(sight: int, health: int, facing_j: int, facing_i: int) -> tuple[float, ...]:
    """The last 8 features of the block of agent j seen by agent i (health, facing one-hot,
    in-sights, threat, aligned), given the sight code from i to j; zeros for _NOBODY."""
    if sight == _NOBODY:
        return (0.0,) * 8
    if sight == _NO_LINE:
        lined_up = (0.0, 0.0, 0.0)
    else:
        lined_up = (float(facing_i == sight), float(facing_j == (sight + 2) % 4), 1.0)
    return (health / MAX_HEALTH,) + _ONE_HOT[facing_j] + lined_up


# [(health * 4 + facing) * _AMMO_CODES + ammo * (SHOT_COOLDOWN + 1) + cooldown]: facing one-hot,
# health, ammo, cooldown and can-shoot (own features 2-9); zeros for health 0 (eliminated)
_AMMO_CODES = (MAX_AMMO + 1) * (SHOT_COOLDOWN + 1)
_STATUS = np.array(
    [
        (_ONE_HOT[f] if h > 0 else (0.0,) * 4) + _own_status(h, a, cd)
        for h in range(MAX_HEALTH + 1)
        for f in range(4)
        for a in range(MAX_AMMO + 1)
        for cd in range(SHOT_COOLDOWN + 1)
    ],
    dtype=np.float32,
)
# [sight * _SEEN_CODES + (health_j * 4 + facing_j) * 4 + facing_i]
_SEEN_CODES = (MAX_HEALTH + 1) * 16
_SIGHT_BASE = _SIGHT * _SEEN_CODES  # [pair]: the sight part of that index
_OTHER_STATUS = np.array(
    [
        _other_status(s, h, fj, fi)
        for s in range(_NOBODY + 1)
        for h in range(MAX_HEALTH + 1)
        for fj in range(4)
        for fi in range(4)
    ],
    dtype=np.float32,
)


def _random_free_cell(rng: np.random.Generator, x_lo: int, x_hi: int, blocked: set) -> int:
    """`ArenaGame._random_free_cell`: the same draws; `blocked` holds the cells it may not use."""
    while True:
        x = int(rng.integers(x_lo, x_hi + 1))
        y = int(rng.integers(0, HEIGHT))
        cell = y * WIDTH + x
        if cell not in blocked:
            return cell


class ArenaBatch(BatchedMultiAgentEnv):
    """`num_envs` independent arena games for `num_agents` players each, stepped together.

    State (copy k, agent i, pickup p): `t[k]`, `cell[k, i]` (y * WIDTH + x; NO_AGENT once
    eliminated), `facing`, `health` (0 once eliminated), `ammo`, `cooldown`, `alive`,
    `pickup_cell[k, p]` (NO_PICKUP while it waits to respawn), `pickup_timer[k, p]`, and
    `events[k, i, e]`: the event counts of the last step, as `ArenaGame.events`. The storm
    depends on t alone (`zone_schedule`): a tick is one lookup of every agent's cell in the
    row of _OUTSIDE for its copy's t.
    """

    def __init__(
        self,
        num_envs: int,
        num_agents: int = 2,
        episode_steps: int = DEFAULT_EPISODE_STEPS,
        seeds: Optional[Sequence[SeedLike]] = None,
    ):
        if num_agents not in (2, 4):
            raise ValueError(f"arena supports 2 or 4 players, got {num_agents}")
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if seeds is None:
            seeds = [None] * num_envs
        if len(seeds) != num_envs:
            raise ValueError(f"expected {num_envs} seeds, got {len(seeds)}")
        self.num_envs = K = int(num_envs)
        self.num_agents = n = num_agents
        self.episode_steps = episode_steps  # and the storm's schedule
        self.layout = ObsLayout(n)
        self.observation_space = spaces.Box(-1.0, 1.0, (self.layout.size,), np.float32)
        self.action_space = spaces.Discrete(NUM_ACTIONS)
        self._rngs = [np.random.default_rng(s) for s in seeds]

        self.team = [0 if i < n // 2 else 1 for i in range(n)]
        team_members = [[i for i in range(n) if self.team[i] == t] for t in (0, 1)]
        # agent i's other agents in observation order (teammates, then enemies), (n, n - 1),
        # and agent i's enemies, (n, n // 2)
        others = [
            [j for j in team_members[self.team[i]] if j != i] + team_members[1 - self.team[i]]
            for i in range(n)
        ]
        self._others = np.array(others)
        self._enemies = np.array([team_members[1 - self.team[i]] for i in range(n)])
        self._not_self = ~np.eye(n, dtype=bool)
        self._winners = np.array([[t == w for t in self.team] for w in (0, 1)])  # [team, i]
        self._spawn_x = [(0, 2) if self.team[i] == 0 else (WIDTH - 3, WIDTH - 1) for i in range(n)]
        self._spawn_facing = [1 if self.team[i] == 0 else 3 for i in range(n)]
        self._rows = np.arange(K)
        self._stay = np.tile(-1 - np.arange(n), (K, 1))  # (K, n): -1 - i (see _move)
        # [k, i, kind]: the index of the first pickup of that kind in the flattened (K, n,
        # kind, index in kind) pickup tables of the observations
        self._first_pickup = np.arange(K * n * 2).reshape(K, n, 2) * _PER_KIND

        # state of every copy, as ArenaGame.__init__ leaves it (before the first reset)
        self.t = np.zeros(K, dtype=np.int64)
        self.cell = np.full((K, n), NO_AGENT, dtype=np.int64)
        self.facing = np.zeros((K, n), dtype=np.int64)
        self.health = np.zeros((K, n), dtype=np.int64)
        self.ammo = np.zeros((K, n), dtype=np.int64)
        self.cooldown = np.zeros((K, n), dtype=np.int64)
        self.alive = np.zeros((K, n), dtype=bool)
        self.pickup_cell = np.full((K, _NUM_PICKUPS), NO_PICKUP, dtype=np.int64)
        self.pickup_timer = np.zeros((K, _NUM_PICKUPS), dtype=np.int64)
        self._coeffs = np.empty((K, n, len(EVENTS)), dtype=np.float64)
        self._coeffs[:] = [DEFAULT_REWARD_SHAPING[k] for k in EVENTS]
        self.events = np.zeros((K, n, len(EVENTS)), dtype=np.float64)
        # False until a step has checked every copy for a beaten team: from then on, every
        # copy starts each step with both teams standing (a beaten one has started anew)
        self._teams_standing = False

    @property
    def episode_steps(self) -> int:
        return self._episode_steps

    @episode_steps.setter
    def episode_steps(self, steps: int) -> None:
        # tables by t (0 to episode_steps). A step clips t to episode_steps where it reads
        # them (t passes the limit only before a first reset); the observations have t below
        # the limit (a copy that reaches it starts anew).
        if int(steps) < 1:
            raise ValueError(f"episode_steps must be at least 1, got {steps}")
        T = self._episode_steps = int(steps)
        radius, damage = zone_schedule(T)
        self._zone_ticks = any(damage)
        # the safe zone's rows in _PLACE and _OUTSIDE; for the storm, the full zone's rows
        # (nobody outside) at steps without a tick
        self._zone_rows = np.array(radius, dtype=np.int64) * _SPOTS
        self._storm_rows = np.where(damage, radius, ZONE_FULL_RADIUS) * _SPOTS
        self._time_left = (1.0 - np.arange(T + 1) / T).astype(np.float32)  # the feature

    # ----- reward shaping -----
    def get_default_reward_shaping(self) -> dict:
        """The default shaping coefficients (the same as ArenaGame's)."""
        return dict(DEFAULT_REWARD_SHAPING)

    def set_reward_shaping(
        self,
        reward_shaping: dict,
        agent_idx: Union[int, slice],
        env_idx: Union[int, slice, None] = None,
    ) -> None:
        """Set coefficients of agent(s) `agent_idx` in copy(s) `env_idx` (None: every copy)."""
        unknown = set(reward_shaping) - set(EVENTS)
        if unknown:
            raise ValueError(
                f"unknown arena reward shaping keys {sorted(unknown)}; known: {EVENTS}"
            )
        envs = slice(None) if env_idx is None else env_idx
        for key, value in reward_shaping.items():
            self._coeffs[envs, agent_idx, EVENT_INDEX[key]] = float(value)

    def get_reward_shaping(self, agent_idx: int, env_idx: int = 0) -> dict:
        """The coefficients of agent `agent_idx` in copy `env_idx`."""
        return {k: float(self._coeffs[env_idx, agent_idx, e]) for e, k in enumerate(EVENTS)}

    # ----- episodes -----
    def reset_copy(self, k: int, seed: SeedLike = None) -> tuple[list[np.ndarray], list[dict]]:
        """`ArenaGame.reset(seed)` for copy k alone: its observations (n arrays) and infos."""
        if seed is not None:
            self._rngs[k] = np.random.default_rng(seed)
        self._new_episode(k)
        obs = self._observations(np.array([k]))[0]
        return list(obs), [{"is_active": True} for _ in range(self.num_agents)]

    def reset(
        self, seed: Union[SeedLike, Sequence[SeedLike]] = None
    ) -> tuple[np.ndarray, list[list[dict]]]:
        """Start a new episode in every copy; observations (K, n, D) and K lists of infos.

        `seed`: None keeps every copy's generator; a sequence of K seeds reseeds copy k with
        `seed[k]` (as `ArenaGame.reset(seed[k])`); one int or SeedSequence is spawned into K
        child seeds, one per copy.
        """
        K = self.num_envs
        if seed is not None:
            if isinstance(seed, np.random.SeedSequence):
                seeds = seed.spawn(K)
            elif isinstance(seed, (int, np.integer)):
                seeds = np.random.SeedSequence(int(seed)).spawn(K)
            else:
                seeds = list(seed)
                if len(seeds) != K:
                    raise ValueError(f"expected {K} seeds, got {len(seeds)}")
            for k, s in enumerate(seeds):
                if s is not None:
                    self._rngs[k] = np.random.default_rng(s)
        for k in range(K):
            self._new_episode(k)
        infos = [[{"is_active": True} for _ in range(self.num_agents)] for _ in range(K)]
        return self._observations(), infos

    def _new_episode(self, k: int) -> None:
        """`ArenaGame._new_episode` for copy k: agents in seat order, then pickups in order."""
        rng = self._rngs[k]
        blocked = set(_PILLAR_CELLS)
        cells = []
        for lo, hi in self._spawn_x:
            c = _random_free_cell(rng, lo, hi, blocked)
            blocked.add(c)
            cells.append(c)
        pickups = []
        for _ in range(_NUM_PICKUPS):
            c = _random_free_cell(rng, 0, WIDTH - 1, blocked)
            blocked.add(c)
            pickups.append(c)
        self.t[k] = 0
        self.cell[k] = cells
        self.facing[k] = self._spawn_facing
        self.health[k] = MAX_HEALTH
        self.ammo[k] = START_AMMO
        self.cooldown[k] = 0
        self.alive[k] = True
        self.pickup_cell[k] = pickups
        self.pickup_timer[k] = 0

    def _respawn_pickup(self, k: int, p: int) -> None:
        """`ArenaGame._place_pickup` for pickup p of copy k (its timer has run out)."""
        blocked = set(_PILLAR_CELLS)
        blocked.update(self.cell[k].tolist())  # the eliminated are at NO_AGENT: no matter
        blocked.update(self.pickup_cell[k].tolist())
        self.pickup_cell[k, p] = _random_free_cell(self._rngs[k], 0, WIDTH - 1, blocked)

    # ----- stepping -----
    def step(
        self, actions
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[list[dict]]]:
        """One step of every copy; actions (K, n). Returns obs (K, n, D) float32, rewards
        (K, n) float32, terminated (K,), truncated (K,; never set, as in `ArenaGame`) and K lists
        of n infos. A copy whose
        episode ended has already started the next one (its obs are that episode's first)."""
        K, n = self.num_envs, self.num_agents
        acts = np.asarray(actions, dtype=np.int64)
        if acts.size != K * n:
            raise ValueError(f"expected actions of shape ({K}, {n}), got shape {acts.shape}")
        acts = np.ascontiguousarray(acts.reshape(K, n))
        alive, cell = self.alive, self.cell
        all_alive = np.count_nonzero(alive) == K * n
        if np.count_nonzero(acts.view(np.uint64) >= NUM_ACTIONS):  # negative ones are huge
            self._check_actions(acts)
        was_alive = None  # all of them
        if not all_alive:
            acts = np.where(alive, acts, NOOP)  # the eliminated do nothing
            was_alive = alive.copy()
        ev = np.zeros((K, n, len(EVENTS)), dtype=np.float64)
        self.t += 1

        # 1. turning and moving (the eliminated are nowhere, and go nowhere)
        turn = _ACTION_DIR.take(acts)
        np.copyto(self.facing, turn, where=turn >= 0)
        dest = cell * NUM_ACTIONS
        dest += acts
        self._move(_MOVE_TO.take(dest))

        # 2. pickups (living agents never share a cell, so each pickup has at most one taker)
        on_pickup = cell[:, :, None] == self.pickup_cell[:, None, :]
        if np.count_nonzero(on_pickup):
            self._take_pickups(on_pickup, ev)

        # 3. shots, resolved simultaneously
        spot, pair = self._pairs()
        enemy_pair = pair[:, :, n // 2 - 1 :]  # the enemies are the last n // 2 others
        fire = acts == SHOOT
        fire &= self.cooldown == 0
        fire &= self.ammo > 0
        eliminations = np.count_nonzero(fire) and self._shoot(fire, enemy_pair, ev)

        # 3b. the storm, after the shots (the copies of one batch mostly tick together)
        if self._zone_ticks:
            storm = self._storm_rows.take(self.t, mode="clip")  # t clipped to episode_steps
            hurt = _OUTSIDE.take(storm[:, None] + cell)  # never the eliminated
            if np.count_nonzero(hurt):
                eliminations = self._storm(hurt, ev) or eliminations
        if eliminations:
            spot, pair = self._pairs()
            enemy_pair = pair[:, :, n // 2 - 1 :]

        # 4. timers (a pickup whose timer runs out respawns)
        self.cooldown[...] = _COUNTDOWN.take(self.cooldown)
        respawn = self.pickup_timer == 1
        self.pickup_timer[...] = _COUNTDOWN.take(self.pickup_timer)
        if np.count_nonzero(respawn):
            ks, ps = np.nonzero(respawn)  # in copy order, then pickup order
            for k, p in zip(ks.tolist(), ps.tolist()):
                self._respawn_pickup(k, p)

        # 5. proximity: a living enemy within SHOT_RANGE (Manhattan; never for the eliminated)
        near = _NEAR.take(enemy_pair)
        ev[:, :, EV_PROXIMITY] = near[:, :, 0] if n == 2 else np.logical_or.reduce(near, axis=2)

        # 6. episode end (a team can only fall if somebody was eliminated in this step)
        truncated = self.t >= self.episode_steps
        team_may_fall = eliminations or not self._teams_standing
        terminated, ended = np.zeros(K, dtype=bool), {}
        if team_may_fall or np.count_nonzero(truncated):
            terminated, truncated, ended = self._episode_ends(ev, truncated, team_may_fall)
        self.events = ev
        rewards = np.add.reduce(self._coeffs * ev, axis=2).astype(np.float32)
        infos = self._infos(was_alive)
        for k, objectives in ended.items():
            time_up = bool(truncated[k])
            infos[k] = [
                {
                    "is_active": True,
                    "true_objective": objectives[i],
                    "team": self.team[i],
                    "time_limit": time_up,
                }
                for i in range(n)
            ]
            self._new_episode(k)
        # the time limit is a rule of the game (see `ArenaGame`): every end is `terminated`
        terminated, truncated = terminated | truncated, np.zeros(K, dtype=bool)
        if ended:
            return self._observations(), rewards, terminated, truncated, infos
        obs = self._observations(spot=spot, pair=pair)  # nobody moved since the pairs
        return obs, rewards, terminated, truncated, infos

    def _episode_ends(
        self, ev: np.ndarray, truncated: np.ndarray, team_may_fall: bool
    ) -> tuple[np.ndarray, np.ndarray, dict[int, list[float]]]:
        """Which copies end this step: terminated (K,), truncated (K,; not where terminated)
        and {copy: every agent's true_objective} for those that end; adds the win and loss
        events. `team_may_fall`: somebody may have been eliminated since every copy had both
        teams standing."""
        K, n = self.num_envs, self.num_agents
        alive = self.alive
        if team_may_fall:
            self._teams_standing = True
            team_alive = np.logical_or.reduce(alive.reshape(K, 2, n // 2), axis=2)  # (K, team)
            terminated = ~np.logical_and.reduce(team_alive, axis=1)
            truncated = truncated & ~terminated
            decided = terminated & (team_alive[:, 0] != team_alive[:, 1])  # a side won
            winners = self._winners[team_alive[:, 1].astype(np.int64)]  # (K, n), if decided
        else:
            terminated = decided = np.zeros(K, dtype=bool)
            winners = None
        if np.count_nonzero(truncated):
            # at the time limit the side with more health left wins
            left = np.where(alive, self.health, 0).reshape(K, 2, n // 2).sum(axis=2)
            by_health = truncated & (left[:, 0] != left[:, 1])
            if np.count_nonzero(by_health):
                leader = self._winners[(left[:, 1] > left[:, 0]).astype(np.int64)]
                if winners is not None:
                    leader = np.where(by_health[:, None], leader, winners)
                winners = leader
                decided = decided | by_health
        if np.count_nonzero(decided):
            ev[:, :, EV_WIN] += decided[:, None] & winners
            ev[:, :, EV_LOSS] += decided[:, None] & ~winners
        ended = {}
        for k in np.flatnonzero(terminated | truncated).tolist():
            if decided[k]:
                ended[k] = [1.0 if w else 0.0 for w in winners[k].tolist()]
            else:
                ended[k] = [0.5] * n
        return terminated, truncated, ended

    def _pairs(self, rows: Union[slice, np.ndarray] = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """`spot = cell * _SPOTS` (K, n) and `pair[k, i, o] = cell[k, i] * _SPOTS + cell[k, j]`
        for every agent i and its o-th other agent j (teammates, then enemies), (K, n, n - 1),
        of the copies `rows` (all by default)."""
        cell = self.cell[rows]
        spot = cell * _SPOTS
        return spot, spot[:, :, None] + cell.take(self._others, axis=1)

    def _check_actions(self, acts: np.ndarray) -> None:
        """Raise ValueError for an action outside [0, NUM_ACTIONS) of a living agent (before
        anything changes); ArenaGame ignores the actions of the eliminated."""
        bad = np.argwhere(((acts < 0) | (acts >= NUM_ACTIONS)) & self.alive)
        if len(bad):
            k, i = bad[0].tolist()
            raise ValueError(
                f"action {acts[k, i]} of agent {i} in copy {k} is outside [0, {NUM_ACTIONS})"
            )

    def _infos(self, active: Optional[np.ndarray]) -> list[list[dict]]:
        """Fresh `{"is_active": ...}` dicts, K lists of n (active None: every agent)."""
        if active is None:
            if self.num_agents == 2:
                return [[{"is_active": True}, {"is_active": True}] for _ in range(self.num_envs)]
            active = np.ones((self.num_envs, self.num_agents), dtype=bool)
        if self.num_agents == 2:
            return [[{"is_active": a}, {"is_active": b}] for a, b in active.tolist()]
        return [
            [{"is_active": a}, {"is_active": b}, {"is_active": c}, {"is_active": d}]
            for a, b, c, d in active.tolist()
        ]

    def _move(self, dest: np.ndarray) -> None:
        """Move every agent with a target cell (`dest` >= 0; _NO_MOVE: none) there, one at a
        time in each copy's move order (seat order when t is even, reversed when odd), unless
        somebody is on the target cell then.

        The order only matters between two movers, one heading for the other's cell or both
        for the same cell: copies with such a pair go through their agents one at a time in
        Python; elsewhere a move succeeds unless an agent that stays is on the target cell.
        """
        cell, others = self.cell, self._others
        moving = dest >= 0
        # where each agent ends if nothing is in its way: its target, or -1 - i if it stays;
        # nothing is in anybody's way if no end is another agent's cell or end
        ends = np.maximum(dest, self._stay)
        meets = ends[:, :, None] == cell.take(others, axis=1)
        meets |= ends[:, :, None] == ends.take(others, axis=1)
        if not np.count_nonzero(meets):
            np.copyto(cell, dest, where=moving)
            return
        heads_for = dest[:, :, None] == cell[:, None, :]  # [k, i, j] (movers only)
        clash = dest[:, :, None] == dest[:, None, :]
        clash &= self._not_self
        clash |= heads_for
        clash &= moving[:, :, None] & moving[:, None, :]
        go = moving
        if np.count_nonzero(heads_for):
            go = moving & ~np.logical_or.reduce(heads_for & ~moving[:, None, :], axis=2)
        clash_copies = []
        if np.count_nonzero(clash):
            clash_copies = np.flatnonzero(np.logical_or.reduce(clash, axis=(1, 2))).tolist()
            go = go.copy() if go is moving else go
            go[clash_copies] = False
        np.copyto(cell, dest, where=go)
        n = self.num_agents
        for k in clash_copies:
            cells, to, move = cell[k].tolist(), dest[k].tolist(), moving[k].tolist()
            for i in range(n) if self.t[k] % 2 == 0 else reversed(range(n)):
                if move[i] and to[i] not in cells:
                    cells[i] = to[i]
            cell[k] = cells

    def _take_pickups(self, on_pickup: np.ndarray, ev: np.ndarray) -> None:
        """The agents on a pickup (`on_pickup[k, i, p]`; a few a step) take it: health or
        ammo, and the pickup waits PICKUP_RESPAWN_STEPS to respawn."""
        health, ammo = self.health, self.ammo
        for k, i, p in zip(*[a.tolist() for a in np.nonzero(on_pickup)]):
            if _PICKUP_KIND[p] == 0:
                health[k, i] = min(MAX_HEALTH, int(health[k, i]) + HEALTH_PICKUP_AMOUNT)
            else:
                ammo[k, i] = min(MAX_AMMO, int(ammo[k, i]) + AMMO_PICKUP_AMOUNT)
            self.pickup_cell[k, p] = NO_PICKUP
            self.pickup_timer[k, p] = PICKUP_RESPAWN_STEPS
            ev[k, i, EV_PICKUP] = 1.0

    def _shoot(self, fire: np.ndarray, enemy_pair: np.ndarray, ev: np.ndarray) -> bool:
        """Fire the shots of the `fire` agents at once: ammo, cooldown, hits and eliminations.
        True if somebody was eliminated (and moved to NO_AGENT)."""
        np.copyto(self.ammo, self.ammo - 1, where=fire)
        np.copyto(self.cooldown, SHOT_COOLDOWN + 1, where=fire)  # the timers make it SHOT_COOLDOWN
        ev[:, :, EV_SHOT_FIRED] = fire
        # candidates: living enemies straight ahead, within reach and not behind a pillar
        cand = _SIGHT.take(enemy_pair) == self.facing[:, :, None]
        cand &= fire[:, :, None]
        if not np.count_nonzero(cand):
            return False
        n = self.num_agents
        if n == 2:  # one enemy each: the other agent, who takes the other's hit
            hit = cand[:, :, 0]
            hits = hit[:, ::-1]
        else:
            nearest = np.where(cand, _DISTANCE.take(enemy_pair), _FAR).argmin(axis=2)  # (K, n)
            hit = np.logical_or.reduce(cand, axis=2)
            target = np.where(hit, self._enemies[np.arange(n), nearest], -1)
            hits = (target[:, :, None] == np.arange(n)).sum(axis=1)
        ev[:, :, EV_DAMAGE_DEALT] = hit
        ev[:, :, EV_DAMAGE_TAKEN] = hits
        self.health -= hits
        died = hits > 0
        died &= self.health <= 0
        if not np.count_nonzero(died):
            return False
        self.alive &= ~died
        self.cell[died] = NO_AGENT
        self.health[died] = 0
        ev[:, :, EV_DEATH] = died
        ev[:, :, EV_KILL] = hit & (died[:, ::-1] if n == 2 else died[self._rows[:, None], target])
        return True

    def _storm(self, hurt: np.ndarray, ev: np.ndarray) -> bool:
        """1 health off the `hurt` agents (living, outside the safe zone in a storm tick).
        True if somebody was eliminated."""
        health = self.health
        np.copyto(health, health - 1, where=hurt)
        ev[:, :, EV_ZONE_DAMAGE] = hurt
        died = hurt & (health <= 0)
        if not np.count_nonzero(died):
            return False
        self.alive &= ~died
        self.cell[died] = NO_AGENT
        ev[:, :, EV_DEATH] += died
        return True

    # ----- observations -----
    def _observations(
        self,
        rows: Union[slice, np.ndarray] = slice(None),
        spot: Optional[np.ndarray] = None,
        pair: Optional[np.ndarray] = None,
    ) -> np.ndarray:
        """Observations of the copies `rows` (all by default), float32 (len(rows), n, D);
        `spot` and `pair`, if given, are `_pairs()` of every copy.

        Eliminated agents are at NO_AGENT with health 0, where every table gives zeros."""
        L, n = self.layout, self.num_agents
        cell, facing, health = self.cell[rows], self.facing[rows], self.health[rows]
        t, alive = self.t[rows], self.alive[rows]
        K = cell.shape[0]
        obs = np.empty((K, n, L.size), dtype=np.float32)
        # x, y, free cells ahead, the fraction of the episode left and the storm
        zone = self._zone_rows.take(t, mode="clip")[:, None]  # t clipped to episode_steps
        place = _PLACE.take(zone + cell, axis=0)
        obs[:, :, :2] = place[:, :, :2]
        obs[:, :, L.rays :] = place[:, :, 2:]
        obs[:, :, L.time_left] = self._time_left.take(t)[:, None]
        if np.count_nonzero(alive) < alive.size:
            obs[:, :, L.time_left] *= alive
        # facing, health, ammo, cooldown, can-shoot
        looks = health * 4
        looks += facing  # what the others see: health and facing
        status = looks * _AMMO_CODES
        status += self.ammo[rows] * (SHOT_COOLDOWN + 1)
        status += self.cooldown[rows]
        obs[:, :, L.FACING : L.OWN_SIZE] = _STATUS.take(status, axis=0)
        # other agents, through a (K, n, n - 1, OTHER_SIZE) view of their blocks
        blocks = obs[:, :, L.others : L.health_pickup].reshape(K, n, n - 1, L.OTHER_SIZE)
        if pair is None:
            spot, pair = self._pairs(rows)
        blocks[..., : L.O_HEALTH] = _GEOMETRY.take(pair, axis=0)
        looks *= 4
        other = _SIGHT_BASE.take(pair)
        other += looks.take(self._others, axis=1)
        other += facing[:, :, None]
        blocks[..., L.O_HEALTH :] = _OTHER_STATUS.take(other, axis=0)
        if n > 2:  # in my sights: only the agent a shot would hit (`ArenaGame._aim`)
            sights = blocks[..., L.O_IN_SIGHTS]  # (K, n, n - 1), teammates first
            mates = n // 2 - 1
            sights[..., :mates] = 0.0
            ahead = sights[..., mates:] > 0
            if np.count_nonzero(ahead.sum(axis=2) > 1):  # enemies in a row: the nearest
                dist = np.where(ahead, _DISTANCE.take(pair[..., mates:]), _FAR)
                nearest = dist.argmin(axis=2)[..., None] == np.arange(ahead.shape[2])
                sights[..., mates:] = ahead & nearest
        # nearest available pickup of each kind (the first in pickup order on ties)
        cells = self.pickup_cell[rows]
        if _KIND_PADDED:
            cells = np.concatenate([cells, np.full((K, 1), NO_PICKUP)], axis=1)
            cells = cells.take(_KIND_TABLE, axis=1)
        to_pickup = spot[:, :, None] + cells[:, None, :]
        to_pickup = to_pickup.reshape(K, n, 2, _PER_KIND)  # (K, n, kind, index in kind)
        nearest = _DISTANCE.take(to_pickup).argmin(axis=3)  # _FAR: waiting to respawn
        nearest = to_pickup.take(nearest + self._first_pickup[:K])
        pickup_features = _PICKUP_FEAT.take(nearest, axis=0).reshape(K, n, 6)
        obs[:, :, L.health_pickup : L.rays] = pickup_features
        return obs

    # every array a step or a reset changes (the rest is fixed at construction)
    _STATE = (
        "t",
        "cell",
        "facing",
        "health",
        "ammo",
        "cooldown",
        "alive",
        "pickup_cell",
        "pickup_timer",
        "_coeffs",
        "events",
    )

    def get_state(self) -> dict:
        """Every copy's game as plain data (arrays, numbers, dicts): a serial run saves it at
        a stop and `set_state` puts it back, so that the run resumes exactly."""
        out = {k: getattr(self, k).copy() for k in self._STATE}
        out["teams_standing"] = self._teams_standing
        out["rngs"] = [r.bit_generator.state for r in self._rngs]
        return out

    def set_state(self, state: dict) -> None:
        for k in self._STATE:
            getattr(self, k)[...] = state[k]
        self._teams_standing = bool(state["teams_standing"])
        self._rngs = [generator_from_state(saved) for saved in state["rngs"]]

    def close(self) -> None:
        """Nothing to release."""
