"""Single-agent VizDoom env (single-player scenarios, matches against built-in bots) and the
factory for every Doom name; built on game.py, scenarios.py, shaping.py, processes.py.
"""

from __future__ import annotations

import copy
import logging
import time
from typing import Any, Optional

import gymnasium as gym
import numpy as np
import vizdoom as vzd

from envs.vizdoom.game import (
    DoomSettings,
    ScreenResizer,
    bot_frags,
    build_game,
    match_result,
    read_game_variables,
    render_resolution,
    resolve_settings,
    self_play_frag_variables,
    settle_spawns,
)
from envs.vizdoom.processes import (
    DoomGameError,
    DoomStartError,
    doom_pids,
    forget_pids,
    kill_orphans,
    kill_pids,
    start_slot,
    track_pids,
)
from envs.vizdoom.scenarios import (
    GAME_VARIABLES,
    GV,
    TICS_PER_SECOND,
    Scenario,
    get_scenario,
    measurement_vector,
    observation_space,
)
from envs.vizdoom.shaping import RewardShaper, default_shaping
from rl_pbt.envs.interfaces import RewardShapingInterface

log = logging.getLogger(__name__)

DOOM_ERRORS = (
    vzd.ViZDoomUnexpectedExitException,
    vzd.ViZDoomIsNotRunningException,
    vzd.ViZDoomErrorException,
    vzd.MessageQueueException,
    vzd.SharedMemoryException,
)
MAX_CONSECUTIVE_FAILURES = 3


def episode_stats(start: np.ndarray, end: np.ndarray) -> dict[str, float]:
    d = end - start
    return {
        "frags": float(d[GV["FRAGCOUNT"]]),
        "deaths": float(max(0.0, d[GV["DEATHCOUNT"]])),
        "kills": float(max(0.0, d[GV["KILLCOUNT"]])),
        "hits": float(max(0.0, d[GV["HITCOUNT"]])),
        "damage_dealt": float(max(0.0, d[GV["DAMAGECOUNT"]])),
        "damage_taken": float(max(0.0, d[GV["DAMAGE_TAKEN"]])),
    }


class DoomEnv(gym.Env, RewardShapingInterface):
    """One agent in one Doom game: observation {"obs": (3, H, W) uint8, "measurements"},
    frameskip tics per step, `true_objective` in the info of the step that ends an episode.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": TICS_PER_SECOND}

    def __init__(
        self, scenario: Scenario, settings: DoomSettings, render_mode: Optional[str] = None
    ):
        if scenario.kind == "selfplay":
            raise ValueError(f"{scenario.name} is multi-agent: use DoomMultiAgentEnv")
        self.scenario = scenario
        self.settings = settings
        self.render_mode = render_mode
        self.mapper = scenario.action_mapper()
        self.action_space = self.mapper.space
        self.observation_space = observation_space(settings.height, settings.width)
        w, h = render_resolution(settings.width, settings.height)
        self._resizer = ScreenResizer((h, w), (settings.height, settings.width), settings.resize)
        self._default_shaping = default_shaping(scenario.kind, scenario.reward_scale)
        self.shaper = RewardShaper(self._default_shaping)
        self.game: Optional[vzd.DoomGame] = None
        self._pids: list[int] = []
        self._failures = 0
        self._obs: Optional[dict[str, np.ndarray]] = None
        self._num_vars = len(GAME_VARIABLES) + len(self_play_frag_variables(scenario))
        self._start_vars = np.zeros(self._num_vars)
        self._start_tic = 0
        self._pending_seed: Optional[int] = settings.seed

    # ------------------------------------------------------------------ game life cycle

    def _start(self) -> None:
        s, last_error = self.settings, None
        role = "bots" if self.scenario.kind == "bots" else "single"
        orphans = kill_orphans()  # those of a process that died with its games running
        if orphans:
            log.warning("%s: ended %d Doom processes left by a process that died: %s",
                        s.label, len(orphans), orphans)  # fmt: skip
        for attempt in range(s.start_attempts):
            game = build_game(self.scenario, s, self.mapper.buttons, role=role)
            try:
                with start_slot(
                    s.max_parallel_starts,
                    timeout=60.0,
                    stagger=0.02 * (s.vector_index % 4) if attempt == 0 else 0.0,
                ):
                    game.init()
            except DOOM_ERRORS as e:
                last_error = e
                log.warning("%s: Doom start attempt %d failed: %r", s.label, attempt + 1, e)
                self._close_game(game, [])
                time.sleep(0.2 * (attempt + 1))
                continue
            self.game = game
            self._pids = doom_pids([("+viz_instance_id", game.get_instance_id())])
            track_pids(self._pids, s.label)
            return
        raise DoomStartError(
            f"{s.label}: Doom did not start after {s.start_attempts} attempts "
            f"(last error: {last_error!r})"
        )

    @staticmethod
    def _close_game(game: Optional[vzd.DoomGame], pids) -> None:
        if game is not None:
            try:
                game.close()
            except Exception:  # noqa: BLE001 - a crashed game may fail to close
                pass
        leftovers = [p for p in pids if p in set(doom_pids())]
        if leftovers:
            kill_pids(leftovers)
        forget_pids(pids)

    def close(self) -> None:
        if self.game is not None:
            self._close_game(self.game, self._pids)
        self.game, self._pids = None, []

    # ------------------------------------------------------------------ episodes

    def _observe(self, state) -> dict[str, np.ndarray]:
        game_vars = read_game_variables(self.game, state, self._num_vars)
        self._vars = game_vars
        if state is not None:
            screen = self._resizer(state.screen_buffer)
        else:  # the episode is over: keep the last frame
            screen = (
                self._obs["obs"]
                if self._obs is not None
                else np.zeros(self.observation_space["obs"].shape, dtype=np.uint8)
            )
        return {"obs": screen, "measurements": measurement_vector(game_vars)}

    def _new_episode(self) -> dict[str, np.ndarray]:
        game = self.game
        if self._pending_seed is not None:
            game.set_seed(int(self._pending_seed) % (2**32))
            self._pending_seed = None
        game.new_episode()
        if self.scenario.kind == "bots":
            game.send_game_command("removebots")
            for _ in range(self.settings.num_bots):
                game.send_game_command("addbot")
            settle_spawns(game)
        self._obs = self._observe(game.get_state())
        self._start_vars = self._vars.copy()
        self._start_tic = game.get_episode_time()
        self.shaper.start_episode(self._vars)
        return self._obs

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        if seed is not None:
            self._pending_seed = seed
        for _ in range(MAX_CONSECUTIVE_FAILURES + 1):
            if self.game is None:
                self._start()
            try:
                return self._new_episode(), {}
            except DOOM_ERRORS as e:
                self._register_failure(e)
        raise AssertionError("unreachable")

    def _register_failure(self, error: BaseException) -> None:
        self._failures += 1
        log.warning("%s: Doom game failed (%r), restarting it", self.settings.label, error)
        self.close()
        if self._failures > MAX_CONSECUTIVE_FAILURES:
            raise DoomGameError(
                f"{self.settings.label}: Doom failed {self._failures} times in a "
                f"row, last error: {error!r}"
            ) from error

    def objective(self, end_vars: np.ndarray, timed_out: bool) -> float:
        kind = self.scenario.objective
        if kind == "kills":
            return float(end_vars[GV["KILLCOUNT"]] - self._start_vars[GV["KILLCOUNT"]])
        if kind == "frags":
            return float(end_vars[GV["FRAGCOUNT"]] - self._start_vars[GV["FRAGCOUNT"]])
        if kind == "survival":
            return float(self.game.get_episode_time() - self._start_tic) / TICS_PER_SECOND
        if kind == "goal":
            dead = self.game.is_player_dead() or end_vars[GV["HEALTH"]] <= 0
            return 0.0 if (timed_out or dead) else 1.0
        raise ValueError(f"unknown objective {kind!r}")

    def step(self, action):
        if self.game is None:
            raise RuntimeError(f"{self.settings.label}: step() before reset()")
        game = self.game
        try:
            scenario_reward = game.make_action(
                self.mapper.buttons_for(action), self.settings.frameskip
            )
            finished = game.is_episode_finished()
            if not finished and self.scenario.kind == "bots" and game.is_player_dead():
                game.respawn_player()  # a local deathmatch does not respawn by itself
                finished = game.is_episode_finished()
            obs = self._observe(None if finished else game.get_state())
            timed_out = finished and game.is_episode_timeout_reached()
            objective = self.objective(self._vars, timed_out) if finished else None
        except DOOM_ERRORS as e:
            self._register_failure(e)
            obs, info = self.reset()
            info.update(episode_aborted=True, doom_error=repr(e))
            return obs, 0.0, False, True, info
        self._failures = 0
        self._obs = obs
        reward = self.shaper.step(self._vars, scenario_reward)
        info: dict[str, Any] = {}
        if finished:
            info["true_objective"] = objective
            info["episode_timeout"] = bool(timed_out)
            info["episode_extra_stats"] = episode_stats(self._start_vars, self._vars)
            if self.scenario.kind == "bots":
                info["episode_extra_stats"].update(self.bot_match(self._vars))
        return obs, reward, finished, False, info

    def bot_match(self, end_vars: np.ndarray) -> dict[str, float]:
        """The agent's result against the bots by frags: `win` (as `match_result`) and
        `best_bot_frags`; the agent's own count is taken relative to the episode's start."""
        own_slot = int(round(end_vars[GV["PLAYER_NUMBER"]]))
        bots = bot_frags(end_vars, {own_slot}, 1 + self.settings.num_bots, self._start_vars)
        if not bots:
            return {}
        mine = float(end_vars[GV["FRAGCOUNT"]] - self._start_vars[GV["FRAGCOUNT"]])
        return {"win": match_result(mine, bots), "best_bot_frags": max(bots)}

    def render(self):
        if self.render_mode == "rgb_array" and self._obs is not None:
            return np.ascontiguousarray(self._obs["obs"].transpose(1, 2, 0))
        return None

    # ------------------------------------------------------------------ reward shaping

    def get_default_reward_shaping(self) -> dict:
        return copy.deepcopy(self._default_shaping)

    def set_reward_shaping(self, reward_shaping: dict, agent_idx=0) -> None:
        indices = range(1)[agent_idx] if isinstance(agent_idx, slice) else [agent_idx]
        if any(i != 0 for i in indices):
            raise IndexError(f"{self.settings.label} has one agent, got agent_idx={agent_idx}")
        if len(indices):
            self.shaper.set_shaping(reward_shaping)

    @property
    def last_reward_components(self) -> dict[str, float]:
        """What the last step's reward was made of (before the coefficients)."""
        return self.shaper.components_dict()


def make_doom_env(
    full_env_name: str,
    cfg: Any = None,
    env_config: Optional[dict] = None,
    render_mode: Optional[str] = None,
):
    """Factory registered for every Doom env name (see `__init__.py`)."""
    scenario = get_scenario(full_env_name)
    settings = resolve_settings(scenario, full_env_name, cfg, env_config)
    if scenario.kind == "selfplay":
        from envs.vizdoom.multiplayer import DoomMultiAgentEnv

        return DoomMultiAgentEnv(scenario, settings, render_mode=render_mode)
    return DoomEnv(scenario, settings, render_mode=render_mode)
