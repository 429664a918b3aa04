"""VizDoom scenario table: map, buttons, compact action space and objective per env name, plus
the observation layout. Read by game.py, doom_env.py, multiplayer.py and selfplay_game.py.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional

import gymnasium as gym
import numpy as np

# Game variables every Doom env reads each step, in this order (shaping and measurements
# index into it). Per-player frag counts are appended for self-play games only.
GAME_VARIABLES: tuple[str, ...] = (
    "KILLCOUNT",
    "FRAGCOUNT",
    "DEATHCOUNT",
    "HITCOUNT",
    "HITS_TAKEN",
    "DAMAGECOUNT",
    "DAMAGE_TAKEN",
    "HEALTH",
    "ARMOR",
    "DEAD",
    "SELECTED_WEAPON",
    "SELECTED_WEAPON_AMMO",
    "AMMO2",
    "AMMO3",
    "AMMO5",
    "AMMO6",
    "WEAPON1",
    "WEAPON2",
    "WEAPON3",
    "WEAPON4",
    "WEAPON5",
    "WEAPON6",
    "WEAPON7",
    "PLAYER_NUMBER",
)
GV = {name: i for i, name in enumerate(GAME_VARIABLES)}
MAX_PLAYERS = 16  # VizDoom's limit for one game, bots included

# Measurement vector: (game variable, scale) pairs, each roughly in [0, 2] after scaling.
MEASUREMENTS: tuple[tuple[str, float], ...] = (
    ("HEALTH", 1 / 100),
    ("ARMOR", 1 / 100),
    ("SELECTED_WEAPON", 1 / 7),
    ("SELECTED_WEAPON_AMMO", 1 / 50),
    ("AMMO2", 1 / 200),
    ("AMMO3", 1 / 50),
    ("AMMO5", 1 / 50),
    ("AMMO6", 1 / 300),
    ("DEAD", 1.0),
)
MEASUREMENT_BOUND = 10.0
TICS_PER_SECOND = 35


@dataclass(frozen=True)
class ActionHead:
    """One independent choice of the agent; each option is a set of buttons held together."""

    name: str
    options: tuple[tuple[str, ...], ...]


MOVE = ActionHead("move", ((), ("MOVE_FORWARD",), ("MOVE_BACKWARD",)))
FORWARD = ActionHead("forward", ((), ("MOVE_FORWARD",)))
STRAFE = ActionHead("strafe", ((), ("MOVE_LEFT",), ("MOVE_RIGHT",)))
TURN = ActionHead("turn", ((), ("TURN_LEFT",), ("TURN_RIGHT",)))
ATTACK = ActionHead("attack", ((), ("ATTACK",)))
WEAPON = ActionHead("weapon", ((), ("SELECT_NEXT_WEAPON",), ("SELECT_PREV_WEAPON",)))


class ActionMapper:
    """Maps an agent action (Discrete int or MultiDiscrete vector) to a VizDoom button list.

    Every combination of head options is precomputed, so a step is one table lookup.
    """

    def __init__(self, heads: tuple[ActionHead, ...], multi_discrete: bool):
        self.heads = heads
        self.multi_discrete = multi_discrete
        self.sizes = tuple(len(h.options) for h in heads)
        buttons: list[str] = []
        for head in heads:
            for option in head.options:
                for button in option:
                    if button not in buttons:
                        buttons.append(button)
        self.buttons = tuple(buttons)
        index = {b: i for i, b in enumerate(buttons)}
        table = []
        for combo in itertools.product(*(range(s) for s in self.sizes)):
            row = [0] * len(buttons)
            for head, choice in zip(heads, combo):
                for button in head.options[choice]:
                    row[index[button]] = 1
            table.append(row)
        self._table = table

    @property
    def space(self) -> gym.Space:
        if self.multi_discrete:
            return gym.spaces.MultiDiscrete(np.array(self.sizes, dtype=np.int64))
        return gym.spaces.Discrete(len(self._table))

    def buttons_for(self, action) -> list[int]:
        if self.multi_discrete:
            flat = 0
            for size, a in zip(self.sizes, np.asarray(action).reshape(-1)):
                flat = flat * size + int(a)
            return self._table[flat]
        return self._table[int(np.asarray(action).reshape(-1)[0])]


@dataclass(frozen=True)
class Scenario:
    """Everything that differs between Doom env names.

    kind: "single" (a .cfg scenario, one player), "bots" (one agent hosting a deathmatch
    against built-in bots) or "selfplay" (several agents of the population in one game).
    objective: what `true_objective` measures at the end of an episode:
      "kills" (monsters killed), "survival" (seconds alive), "goal" (1 when the episode
      ended by reaching the goal, else 0), "frags" (frags scored), "match" (win 1,
      draw 0.5, loss 0 by frags against every other player).
    """

    name: str
    kind: str
    wad: str
    doom_map: str
    heads: tuple[ActionHead, ...]
    objective: str
    episode_timeout: int  # tics; 0 keeps the .cfg value
    reward_scale: float  # default weight of the scenario's own reward
    config: Optional[str] = None
    multi_discrete: bool = False
    num_bots: int = 0
    num_agents: int = 1
    max_players: int = MAX_PLAYERS
    render_hud: bool = False

    @property
    def is_multiplayer(self) -> bool:
        return self.kind != "single"

    def action_mapper(self) -> ActionMapper:
        return ActionMapper(self.heads, self.multi_discrete)


_FIGHT_HEADS = (MOVE, STRAFE, TURN, ATTACK, WEAPON)

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "doom_basic",
            "single",
            "basic.wad",
            "map01",
            (STRAFE, ATTACK),
            "kills",
            0,
            0.01,
            config="basic.cfg",
        ),
        Scenario(
            "doom_defend_the_center",
            "single",
            "defend_the_center.wad",
            "map01",
            (TURN, ATTACK),
            "kills",
            0,
            1.0,
            config="defend_the_center.cfg",
        ),
        Scenario(
            "doom_defend_the_line",
            "single",
            "defend_the_line.wad",
            "map01",
            (TURN, ATTACK),
            "kills",
            0,
            1.0,
            config="defend_the_line.cfg",
        ),
        Scenario(
            "doom_health_gathering",
            "single",
            "health_gathering.wad",
            "map01",
            (TURN, FORWARD),
            "survival",
            0,
            0.01,
            config="health_gathering.cfg",
        ),
        Scenario(
            "doom_health_gathering_supreme",
            "single",
            "health_gathering_supreme.wad",
            "map01",
            (TURN, FORWARD),
            "survival",
            0,
            0.01,
            config="health_gathering_supreme.cfg",
        ),
        Scenario(
            "doom_my_way_home",
            "single",
            "my_way_home.wad",
            "map01",
            (TURN, FORWARD, STRAFE),
            "goal",
            0,
            1.0,
            config="my_way_home.cfg",
        ),
        Scenario(
            "doom_deadly_corridor",
            "single",
            "deadly_corridor.wad",
            "map01",
            (MOVE, STRAFE, TURN, ATTACK),
            "goal",
            0,
            0.01,
            config="deadly_corridor.cfg",
        ),
        # cig.wad map02: full deathmatch map with weapons, armour, health and ammo pickups.
        Scenario(
            "doom_deathmatch_bots",
            "bots",
            "cig.wad",
            "map02",
            _FIGHT_HEADS,
            "frags",
            4200,
            1.0,
            multi_discrete=True,
            num_bots=7,
            max_players=11,
        ),
        # multi_duel.wad: small arena, two spawn spots, rocket launchers only.
        Scenario(
            "doom_duel_bots",
            "bots",
            "multi_duel.wad",
            "map01",
            _FIGHT_HEADS,
            "frags",
            4200,
            1.0,
            multi_discrete=True,
            num_bots=1,
            max_players=2,
        ),
        Scenario(
            "doom_duel",
            "selfplay",
            "multi_duel.wad",
            "map01",
            _FIGHT_HEADS,
            "match",
            4200,
            1.0,
            multi_discrete=True,
            num_agents=2,
            max_players=2,
        ),
        Scenario(
            "doom_deathmatch",
            "selfplay",
            "cig.wad",
            "map02",
            _FIGHT_HEADS,
            "match",
            4200,
            1.0,
            multi_discrete=True,
            num_agents=4,
            max_players=11,
        ),
    )
}


def get_scenario(full_env_name: str) -> Scenario:
    try:
        return SCENARIOS[full_env_name]
    except KeyError:
        raise ValueError(
            f"unknown Doom env {full_env_name!r}; known: {sorted(SCENARIOS)}"
        ) from None


_MEASURE_INDEX = np.array([GV[name] for name, _ in MEASUREMENTS])
_MEASURE_SCALE = np.array([scale for _, scale in MEASUREMENTS], dtype=np.float32)
# Health, armour and ammo are floored at zero (a gibbed player reports health far below zero);
# "no weapon" keeps its -1.
_MEASURE_FLOOR = np.array(
    [
        0.0 if name not in ("SELECTED_WEAPON", "SELECTED_WEAPON_AMMO") else -np.inf
        for name, _ in MEASUREMENTS
    ],
    dtype=np.float32,
)


def measurement_vector(game_vars: np.ndarray) -> np.ndarray:
    out = np.maximum(np.asarray(game_vars, dtype=np.float32)[_MEASURE_INDEX], _MEASURE_FLOOR)
    out *= _MEASURE_SCALE
    np.clip(out, -MEASUREMENT_BOUND, MEASUREMENT_BOUND, out=out)
    return out


def observation_space(height: int, width: int) -> gym.spaces.Dict:
    return gym.spaces.Dict(
        {
            "obs": gym.spaces.Box(0, 255, (3, height, width), dtype=np.uint8),
            "measurements": gym.spaces.Box(
                -MEASUREMENT_BOUND, MEASUREMENT_BOUND, (len(MEASUREMENTS),), dtype=np.float32
            ),
        }
    )
