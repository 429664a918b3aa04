"""Builds configured DoomGame instances and resizes their screens; resolves env settings from cfg
and env_config. Used by doom_env.py (in process) and selfplay_game.py (in the helper).
"""

from __future__ import annotations

import atexit
import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import vizdoom as vzd

from envs.vizdoom.processes import doom_ini_path
from envs.vizdoom.scenarios import GAME_VARIABLES, MAX_PLAYERS, Scenario

# Resolutions VizDoom can render, smallest first; a frame is rendered at the smallest one that
# is at least as large as the requested observation and then resized.
RENDER_RESOLUTIONS = (
    (160, 120),
    (200, 150),
    (256, 192),
    (320, 240),
    (400, 300),
    (512, 384),
    (640, 480),
    (800, 600),
    (1024, 768),
)


@dataclass
class DoomSettings:
    """Resolved options of one env instance (see the `doom_*` flags in `__init__.py`)."""

    env_name: str
    env_id: int = 0
    worker_index: int = 0
    vector_index: int = 0
    frameskip: int = 4
    width: int = 128
    height: int = 72
    resize: str = "nearest"
    episode_timeout: int = 0  # tics; 0: the scenario's own
    num_bots: int = 0
    num_agents: int = 1
    doom_map: str = ""
    seed: Optional[int] = None
    port_base: int = 40000
    connect_timeout: float = 30.0
    step_timeout: float = 30.0
    max_parallel_starts: int = 2
    start_attempts: int = 3

    @property
    def label(self) -> str:
        return (
            f"{self.env_name} (env_id={self.env_id}, worker={self.worker_index}, "
            f"vector={self.vector_index})"
        )


def _lookup(cfg: Any, env_config: Optional[Mapping], name: str, default: Any) -> Any:
    if env_config is not None and env_config.get(name) is not None:
        return env_config[name]
    if cfg is not None:
        value = cfg.get(name) if isinstance(cfg, Mapping) else getattr(cfg, name, None)
        if value is not None:
            return value
    return default


def parse_resolution(text: str) -> tuple[int, int]:
    try:
        w, h = (int(x) for x in str(text).lower().split("x"))
    except ValueError:
        raise ValueError(
            f"--doom_resolution={text!r}: expected WIDTHxHEIGHT, e.g. 128x72"
        ) from None
    if w <= 0 or h <= 0 or w > RENDER_RESOLUTIONS[-1][0] or h > RENDER_RESOLUTIONS[-1][1]:
        raise ValueError(f"--doom_resolution={text!r}: out of range")
    return w, h


def resolve_settings(
    scenario: Scenario, full_env_name: str, cfg: Any, env_config: Optional[Mapping]
) -> DoomSettings:
    """env_config entries win over cfg flags, which win over the scenario's defaults."""
    env_config = env_config or {}

    def get(name, default):
        return _lookup(cfg, env_config, name, default)

    width, height = parse_resolution(get("doom_resolution", "128x72"))
    env_id = int(env_config.get("env_id", 0) or 0)
    num_bots = int(get("doom_num_bots", -1))
    num_agents = int(get("doom_num_agents", 0))
    settings = DoomSettings(
        env_name=full_env_name,
        env_id=env_id,
        worker_index=int(env_config.get("worker_index", 0) or 0),
        vector_index=int(env_config.get("vector_index", 0) or 0),
        frameskip=max(1, int(get("env_frameskip", 4))),
        width=width,
        height=height,
        resize=str(get("doom_resize", "nearest")),
        episode_timeout=int(get("doom_episode_timeout", 0)),
        num_bots=scenario.num_bots if num_bots < 0 else num_bots,
        num_agents=scenario.num_agents
        if num_agents <= 0 or scenario.kind != "selfplay"
        else num_agents,
        doom_map=str(get("doom_map", "") or ""),
        port_base=int(get("doom_port_base", 40000)),
        connect_timeout=float(get("doom_connect_timeout", 30.0)),
        step_timeout=float(get("doom_step_timeout", 30.0)),
        max_parallel_starts=int(get("doom_max_parallel_starts", 2)),
        start_attempts=max(1, int(get("doom_start_attempts", 3))),
    )
    seed = get("seed", None)
    if seed is not None:
        settings.seed = (int(seed) * 1_000_003 + env_id * 7919) % (2**31 - 1)
    if scenario.kind == "selfplay" and settings.num_agents < 2:
        raise ValueError(f"{full_env_name}: needs at least 2 agents")
    total = settings.num_agents + (settings.num_bots if scenario.is_multiplayer else 0)
    if total > scenario.max_players:
        raise ValueError(
            f"{full_env_name}: {settings.num_agents} agents + {settings.num_bots} "
            f"bots exceed the {scenario.max_players} players its map can hold"
        )
    if settings.resize not in ("nearest", "area"):
        raise ValueError(f"--doom_resize={settings.resize!r}: expected 'nearest' or 'area'")
    return settings


def render_resolution(width: int, height: int) -> tuple[int, int]:
    for w, h in RENDER_RESOLUTIONS:
        if w >= width and h >= height:
            return w, h
    return RENDER_RESOLUTIONS[-1]


class ScreenResizer:
    """(3, H, W) uint8 -> (3, h, w) uint8 in numpy: nearest sampling through one flat index
    table (the default, ~20 us), or area averaging with separable weight matrices.
    """

    def __init__(self, src_hw: tuple[int, int], dst_hw: tuple[int, int], mode: str = "nearest"):
        (sh, sw), (dh, dw) = src_hw, dst_hw
        self.dst_shape = (3, dh, dw)
        self.identity = (sh, sw) == (dh, dw)
        self.mode = mode
        if mode == "nearest":
            rows = np.minimum(((np.arange(dh) + 0.5) * sh / dh).astype(np.int64), sh - 1)
            cols = np.minimum(((np.arange(dw) + 0.5) * sw / dw).astype(np.int64), sw - 1)
            self._flat = (rows[:, None] * sw + cols[None, :]).reshape(-1)
        else:
            self._rows = self._area_weights(sh, dh)
            self._cols_t = self._area_weights(sw, dw).T.copy()

    @staticmethod
    def _area_weights(src: int, dst: int) -> np.ndarray:
        """Row i averages source cells [i*src/dst, (i+1)*src/dst), partial cells weighted."""
        w = np.zeros((dst, src), dtype=np.float32)
        scale = src / dst
        for i in range(dst):
            lo, hi = i * scale, (i + 1) * scale
            for j in range(int(np.floor(lo)), min(src, int(np.ceil(hi)))):
                w[i, j] = min(hi, j + 1) - max(lo, j)
        return w / w.sum(axis=1, keepdims=True)

    def __call__(self, screen: np.ndarray) -> np.ndarray:
        if self.identity:
            return np.ascontiguousarray(screen)
        if self.mode == "nearest":
            return np.take(screen.reshape(3, -1), self._flat, axis=1).reshape(self.dst_shape)
        c, sh, sw = screen.shape
        _, dh, dw = self.dst_shape
        cols = screen.reshape(c * sh, sw).astype(np.float32) @ self._cols_t  # (c*sh, dw)
        rows = self._rows @ cols.reshape(c, sh, dw).transpose(1, 0, 2).reshape(sh, c * dw)
        out = rows.reshape(dh, c, dw).transpose(1, 0, 2)
        return np.clip(out + 0.5, 0, 255).astype(np.uint8)


def self_play_frag_variables(scenario: Scenario) -> tuple[str, ...]:
    """Per-slot frag counts, read in games with other players (self-play or bots) to tell
    who won."""
    if scenario.kind not in ("selfplay", "bots"):
        return ()
    return tuple(
        f"PLAYER{k}_FRAGCOUNT" for k in range(1, min(scenario.max_players, MAX_PLAYERS) + 1)
    )


def bot_frags(
    game_vars: np.ndarray, agent_slots: set[int], num_players: int, start_vars: np.ndarray
) -> list[float]:
    """Frags of the player slots that agents do not hold (the bots) since the episode's start
    (`start_vars`, the variables when the agents first saw it), from the per-slot counts that
    follow GAME_VARIABLES; [] when an agent's slot is out of range."""
    if not all(0 <= k < num_players for k in agent_slots):
        return []
    base = len(GAME_VARIABLES)
    return [
        float(game_vars[base + k] - start_vars[base + k])
        for k in range(num_players)
        if k not in agent_slots
    ]


# Players (bots included) spawn in the first tics of an episode, and one that lands on another's
# spot kills it (a telefrag): the agents must not start dead, nor a bot with a frag. The tics an
# episode may take to bring every player in alive, then it starts anyway.
SPAWN_TICS = 35


def settle_spawns(game) -> None:
    """After a local game's `new_episode()` and `addbot`s: no-op tics, respawning the agent when
    it was killed, until it is alive after a tic (at most SPAWN_TICS)."""
    noop = [0] * game.get_available_buttons_size()
    for _ in range(SPAWN_TICS):
        game.make_action(noop, 1)
        if game.is_episode_finished() or not game.is_player_dead():
            return
        game.respawn_player()


def match_result(mine: float, rivals: list[float]) -> float:
    """1 for more frags than every rival, 0.5 when level with the best, 0 otherwise."""
    best = max(rivals) if rivals else float("-inf")
    return 1.0 if mine > best else 0.5 if mine == best else 0.0


def _make_doom_folder() -> None:
    """Doom makes ./_vizdoom/ in the folder it starts in when the folder has none; two games
    starting at once there can both find it missing, and the one whose mkdir fails crashes
    ("Failed to create ./_vizdoom/ directory: File exists", then a segfault). Made here first,
    with exist_ok, before any game of this process starts."""
    with contextlib.suppress(OSError):  # a read-only folder: Doom says so itself
        os.makedirs("_vizdoom", exist_ok=True)


def _doom_ini_path() -> str:
    """Doom's settings file, one per process (removed when the process exits, or by the next
    Doom start after it was killed: processes.kill_orphans)."""
    path = doom_ini_path()
    if path not in _INI_FILES:
        _INI_FILES.add(path)
        atexit.register(_remove_quietly, path)
    return path


_INI_FILES: set[str] = set()


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


DEATHMATCH_ARGS = (
    "-deathmatch +timelimit 0 +fraglimit 0 +sv_forcerespawn 1 +sv_noautoaim 1 "
    "+sv_respawnprotect 1 +sv_spawnfarthest 1 +sv_nocrouch 1 "
    "+viz_respawn_delay 0 +viz_nocheat 1"
)


def build_game(
    scenario: Scenario,
    settings: DoomSettings,
    buttons: tuple[str, ...],
    role: str = "single",
    port: Optional[int] = None,
    player_index: int = 0,
    num_players: int = 1,
) -> vzd.DoomGame:
    """A DoomGame ready for `init()`. role: "single" (a .cfg scenario), "bots" (a local
    deathmatch, no network, bots added by the env), "host" (hosts a network deathmatch for
    `num_players` players on UDP `port`) or "join" (joins the host on 127.0.0.1:`port`).
    """
    _make_doom_folder()
    game = vzd.DoomGame()
    if scenario.config:
        game.load_config(os.path.join(vzd.scenarios_path, scenario.config))
    game.set_doom_scenario_path(os.path.join(vzd.scenarios_path, scenario.wad))
    game.set_doom_map(settings.doom_map or scenario.doom_map)
    game.set_doom_config_path(_doom_ini_path())
    w, h = render_resolution(settings.width, settings.height)
    game.set_screen_resolution(getattr(vzd.ScreenResolution, f"RES_{w}X{h}"))
    game.set_screen_format(vzd.ScreenFormat.CRCGCB)
    game.set_window_visible(False)
    game.set_console_enabled(False)
    game.set_sound_enabled(False)
    game.set_mode(vzd.Mode.PLAYER)
    game.set_render_hud(scenario.render_hud)
    game.set_render_messages(False)
    game.set_available_buttons([getattr(vzd.Button, b) for b in buttons])
    names = GAME_VARIABLES + self_play_frag_variables(scenario)
    game.set_available_game_variables([getattr(vzd.GameVariable, v) for v in names])
    timeout = settings.episode_timeout or scenario.episode_timeout
    if timeout > 0:
        game.set_episode_timeout(int(timeout))
    if settings.seed is not None:
        game.set_seed(int(settings.seed))
    # VizDoom's own connect timeout stays long: a network game that fails inside init()
    # takes the calling process down with it, so the env's helper process and watchdog
    # (multiplayer.py) handle stuck starts instead.
    connect = max(int(settings.connect_timeout) * 4, 120)
    if role == "bots":
        game.add_game_args(DEATHMATCH_ARGS)
    elif role == "host":
        game.add_game_args(
            f"-host {num_players} -port {port} {DEATHMATCH_ARGS} +viz_connect_timeout {connect}"
        )
    elif role == "join":
        game.add_game_args(f"-join 127.0.0.1 -port {port} +viz_connect_timeout {connect}")
    if role in ("host", "join"):
        game.add_game_args(f"+name agent{player_index} +colorset {player_index % 8}")
    return game


def read_game_variables(game: vzd.DoomGame, state: Any, count: int) -> np.ndarray:
    if state is not None and state.game_variables is not None:
        return np.asarray(state.game_variables, dtype=np.float64)
    enums = game.get_available_game_variables()
    return np.array([game.get_game_variable(v) for v in enums[:count]], dtype=np.float64)
