"""VizDoom integration: registers every Doom env name, its flags and default overrides.

Collaborators: scenarios.py (the names), doom_env.make_doom_env (the factory), rl_pbt registry.
"""

from __future__ import annotations

from envs.vizdoom.doom_env import DoomEnv, make_doom_env
from envs.vizdoom.multiplayer import DoomMultiAgentEnv
from envs.vizdoom.scenarios import SCENARIOS
from rl_pbt.config.flags import Flag, non_negative, positive
from rl_pbt.envs.registry import register_env

__all__ = ["DoomEnv", "DoomMultiAgentEnv", "make_doom_env", "DOOM_FLAGS", "register_doom_envs"]


def _resolution(v) -> str | None:
    try:
        w, h = (int(x) for x in str(v).lower().split("x"))
    except ValueError:
        return "expected WIDTHxHEIGHT, e.g. 128x72"
    return None if 0 < w <= 1024 and 0 < h <= 768 else "must fit in 1024x768"


def _bots(v) -> str | None:
    return None if -1 <= v <= 15 else "must be in [-1, 15] (-1: the env's default)"


COMMON_FLAGS = [
    Flag(
        "doom_resolution",
        str,
        "128x72",
        "observation size WIDTHxHEIGHT; frames are rendered at the smallest larger VizDoom "
        "resolution (160x120 for the default) and resized in numpy",
        _resolution,
        group="env",
    ),
    Flag(
        "doom_resize",
        str,
        "nearest",
        "resize filter for observations",
        choices=["nearest", "area"],
        group="env",
    ),
    Flag(
        "doom_episode_timeout",
        int,
        0,
        "episode length in game tics (35 per second); 0 keeps the scenario's own. Small "
        "values (e.g. 200) give quick episodes for tests",
        non_negative,
        group="env",
    ),
    Flag(
        "doom_max_parallel_starts",
        int,
        2,
        "Doom games starting at the same time on this machine (all processes)",
        positive,
        group="env",
    ),
    Flag(
        "doom_start_attempts",
        int,
        3,
        "tries to start a Doom game before giving up",
        positive,
        group="env",
    ),
]
MULTIPLAYER_FLAGS = [
    Flag(
        "doom_map",
        str,
        "",
        "map of the deathmatch wad to play (empty: the env's default)",
        group="env",
    ),
    Flag(
        "doom_port_base",
        int,
        40000,
        "first UDP port for hosting games; each env derives its port from its env_id",
        lambda v: None if 1024 <= v <= 45535 else "must be in [1024, 45535]",
        group="env",
    ),
    Flag(
        "doom_connect_timeout",
        int,
        30,
        "seconds a multiplayer game waits for all players to connect",
        positive,
        group="env",
    ),
    Flag(
        "doom_step_timeout",
        float,
        30.0,
        "seconds without progress after which a multiplayer game is declared hung and restarted",
        positive,
        group="env",
    ),
]
BOTS_FLAG = Flag(
    "doom_num_bots",
    int,
    -1,
    "built-in bots in the game (-1: the env's default)",
    _bots,
    group="env",
)
AGENTS_FLAG = Flag(
    "doom_num_agents",
    int,
    0,
    "agents of the population in one self-play game (0: the env's default)",
    non_negative,
    group="env",
)
DOOM_FLAGS = COMMON_FLAGS + MULTIPLAYER_FLAGS + [BOTS_FLAG, AGENTS_FLAG]


def _flags_for(kind: str, name: str) -> list[Flag]:
    flags = list(COMMON_FLAGS)
    if kind != "single":
        flags += MULTIPLAYER_FLAGS
    if name in ("doom_deathmatch_bots", "doom_deathmatch"):
        flags.append(BOTS_FLAG)
    if name == "doom_deathmatch":
        flags.append(AGENTS_FLAG)
    return flags


def _overrides_for(kind: str) -> dict:
    overrides = {
        "env_frameskip": 4,
        "rollout": 32,
        "num_envs_per_worker": 4,
        "worker_num_splits": 2,
    }
    if kind == "selfplay":  # each env already holds several games (one per agent)
        overrides["num_envs_per_worker"] = 2
    return overrides


def register_doom_envs() -> None:
    for name, scenario in SCENARIOS.items():
        register_env(
            name,
            make_doom_env,
            extra_flags=_flags_for(scenario.kind, name),
            default_overrides=_overrides_for(scenario.kind),
        )


register_doom_envs()
