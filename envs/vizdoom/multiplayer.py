"""Self-play VizDoom env the trainer sees: drives a selfplay_game.py helper process with
time-outs, shapes rewards (shaping.py), scores matches and restarts failed games.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import asdict
from multiprocessing.connection import Connection
from typing import Any, Optional

import numpy as np

from envs.vizdoom.doom_env import MAX_CONSECUTIVE_FAILURES, episode_stats
from envs.vizdoom.game import (
    DoomSettings,
    bot_frags,
    match_result,
    self_play_frag_variables,
)
from envs.vizdoom.processes import (
    DoomGameError,
    DoomStartError,
    doom_work_dir,
    release_port,
    reserve_port,
    start_slot,
)
from envs.vizdoom.scenarios import (
    GAME_VARIABLES,
    GV,
    TICS_PER_SECOND,
    Scenario,
    measurement_vector,
    observation_space,
)
from envs.vizdoom.selfplay_game import Snapshot, launch_command
from envs.vizdoom.shaping import RewardShaper, default_shaping
from rl_pbt.envs.interfaces import RewardShapingInterface

log = logging.getLogger(__name__)


class GameProcess:
    """The env's handle on one helper process. The helper leads its own process group, which
    its Doom processes share, so one kill ends them all.
    """

    def __init__(self, label: str):
        self.label = label
        parent_end, child_end = socket.socketpair()
        self.output = tempfile.TemporaryFile()  # Doom's console chatter and any traceback
        try:
            self.proc = subprocess.Popen(
                launch_command(child_end.fileno()),
                pass_fds=(child_end.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=self.output,
                stderr=self.output,
                start_new_session=True,
                cwd=doom_work_dir(),  # where Doom drops its _vizdoom/ folder and crash logs
            )
        except BaseException:
            parent_end.close()
            self.output.close()
            raise
        finally:
            child_end.close()
        self.conn = Connection(parent_end.detach())

    def request(self, command: str, arg: Any, timeout: float, what: str) -> Any:
        try:
            self.conn.send((command, arg))
            if not self.conn.poll(timeout):
                raise DoomGameError(
                    f"{self.label}: the game gave no answer to {what} within {timeout:.0f} s"
                )
            status, value = self.conn.recv()
        except (EOFError, OSError) as e:
            raise DoomGameError(
                f"{self.label}: the game process ended during {what} ({self.describe_exit()})"
            ) from e
        if status != "ok":
            raise DoomGameError(f"{self.label}: {what} failed: {value}")
        return value

    def describe_exit(self) -> str:
        try:
            code = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None
        text = (
            "still running"
            if code is None
            else f"killed by signal {-code}"
            if code < 0
            else f"exit code {code}"
        )
        try:
            self.output.seek(0, os.SEEK_END)
            self.output.seek(max(0, self.output.tell() - 600))
            lines = self.output.read().decode(errors="replace").splitlines()
            tail = " | ".join(line.strip() for line in lines if line.strip())[-300:]
        except (OSError, ValueError):
            tail = ""
        return f"{text}; last output: {tail.strip()}" if tail.strip() else text

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # before wait(): the group id stays ours
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5.0)
        self.conn.close()
        self.output.close()

    def close(self, timeout: float = 15.0) -> None:
        try:
            self.request("close", None, timeout, "close")
        except DoomGameError as e:
            log.warning("%s", e)
        finally:
            self.kill()


class DoomMultiAgentEnv(RewardShapingInterface):
    """`num_agents` agents in one Doom deathmatch (optionally with bots).

    Multi-agent contract: per-agent `observation_space`/`action_space`; `reset()` returns
    (obs_list, info_list); `step(actions)` returns lists (obs, rewards, terminated, truncated,
    infos). When the match ends every agent is terminated at the same step, each info holds
    `true_objective` (win 1, draw 0.5, loss 0 by frags against every other player, bots
    included), and the env starts the next match itself: the returned observations are its first.
    A game that crashes or hangs is killed and restarted; that step is truncated for all agents,
    with `episode_aborted` and no `true_objective` in the infos.
    """

    is_multiagent = True
    metadata = {"render_modes": ["rgb_array"], "render_fps": TICS_PER_SECOND}

    def __init__(
        self, scenario: Scenario, settings: DoomSettings, render_mode: Optional[str] = None
    ):
        self.scenario = scenario
        self.settings = settings
        self.render_mode = render_mode
        self.num_agents = settings.num_agents
        self.mapper = scenario.action_mapper()
        self.action_space = self.mapper.space
        self.observation_space = observation_space(settings.height, settings.width)
        self._num_vars = len(GAME_VARIABLES) + len(self_play_frag_variables(scenario))
        self._default_shaping = default_shaping(scenario.kind, scenario.reward_scale)
        self.shapers = [RewardShaper(self._default_shaping) for _ in range(self.num_agents)]
        self._game: Optional[GameProcess] = None
        self._port: Optional[int] = None
        self._failures = 0
        self._pending_seed: Optional[int] = settings.seed
        self._obs: list[Optional[dict[str, np.ndarray]]] = [None] * self.num_agents
        self._start_vars = [np.zeros(self._num_vars) for _ in range(self.num_agents)]

    # ------------------------------------------------------------------ the game process

    @property
    def game_process(self) -> Optional[GameProcess]:
        return self._game

    def _start(self) -> None:
        s, last_error = self.settings, None
        for attempt in range(s.start_attempts):
            port = reserve_port(s.env_id, attempt, s.port_base)
            game = None
            try:
                with start_slot(
                    s.max_parallel_starts,
                    timeout=120.0,
                    stagger=0.05 * (s.vector_index % 4) if attempt == 0 else 0.0,
                ):
                    game = GameProcess(s.label)
                    game.request(
                        "start",
                        {"scenario": self.scenario.name, "settings": asdict(s), "port": port},
                        s.connect_timeout + 10.0,
                        "start",
                    )
            except (DoomGameError, OSError) as e:
                last_error = e
                log.warning(
                    "%s: start attempt %d (port %d) failed: %s", s.label, attempt + 1, port, e
                )
                if game is not None:
                    game.kill()
                release_port(port)
                time.sleep(0.5 * (attempt + 1))
                continue
            self._game, self._port = game, port
            return
        raise DoomStartError(
            f"{s.label}: the {self.num_agents}-player game did not start after "
            f"{s.start_attempts} attempts (last error: {last_error})"
        )

    def _stop_game(self, graceful: bool) -> None:
        if self._game is not None:
            if graceful:
                self._game.close()
            else:
                self._game.kill()
        release_port(self._port)
        self._game, self._port = None, None

    def _register_failure(self, error: BaseException) -> None:
        self._failures += 1
        log.warning("%s: restarting the game after: %s", self.settings.label, error)
        self._stop_game(graceful=False)
        if self._failures > MAX_CONSECUTIVE_FAILURES:
            raise DoomGameError(
                f"{self.settings.label}: the game failed {self._failures} times "
                f"in a row, last error: {error}"
            ) from error

    def close(self) -> None:
        self._stop_game(graceful=True)

    # ------------------------------------------------------------------ episodes

    def _to_obs(self, i: int, snap: Snapshot) -> dict[str, np.ndarray]:
        if snap.screen is not None:
            screen = snap.screen
        elif self._obs[i] is not None:
            screen = self._obs[i]["obs"]
        else:
            screen = np.zeros(self.observation_space["obs"].shape, dtype=np.uint8)
        return {"obs": screen, "measurements": measurement_vector(snap.game_vars)}

    def _new_episode(self) -> list[dict[str, np.ndarray]]:
        s = self.settings
        if self._pending_seed is not None:
            self._game.request("seed", self._pending_seed, 15.0, "set_seed")
            self._pending_seed = None
        snaps = self._game.request("new_episode", None, s.step_timeout + 10.0, "new episode")
        for i, snap in enumerate(snaps):
            self._obs[i] = self._to_obs(i, snap)
            self._start_vars[i] = snap.game_vars.copy()
            self.shapers[i].start_episode(snap.game_vars)
        return list(self._obs)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        if seed is not None:
            self._pending_seed = seed
        while True:
            if self._game is None:
                self._start()
            try:
                return self._new_episode(), [{} for _ in range(self.num_agents)]
            except DoomGameError as e:
                self._register_failure(e)

    def frags(self, snaps: list[Snapshot]) -> tuple[list[float], list[float]]:
        """(frags of each agent, frags of each bot) in the episode that just ended."""
        own = [
            float(snap.game_vars[GV["FRAGCOUNT"]] - self._start_vars[i][GV["FRAGCOUNT"]])
            for i, snap in enumerate(snaps)
        ]
        bots: list[float] = []
        if self.settings.num_bots > 0:
            slots = {int(round(snap.game_vars[GV["PLAYER_NUMBER"]])) for snap in snaps}
            if len(slots) == self.num_agents:
                total = self.num_agents + self.settings.num_bots
                bots = bot_frags(snaps[0].game_vars, slots, total, self._start_vars[0])
        return own, bots

    def match_results(self, snaps: list[Snapshot]) -> list[float]:
        own, bots = self.frags(snaps)
        return [
            match_result(mine, [f for j, f in enumerate(own) if j != i] + bots)
            for i, mine in enumerate(own)
        ]

    def step(self, actions):
        if self._game is None:
            raise RuntimeError(f"{self.settings.label}: step() before reset()")
        n, s = self.num_agents, self.settings
        buttons = [self.mapper.buttons_for(a) for a in actions]
        try:
            snaps = self._game.request("step", buttons, s.step_timeout + 5.0, "step")
        except DoomGameError as e:
            return self._abort_episode(e)
        self._failures = 0
        rewards = []
        for i, snap in enumerate(snaps):
            rewards.append(self.shapers[i].step(snap.game_vars, 0.0))
            self._obs[i] = self._to_obs(i, snap)
        if not any(snap.finished for snap in snaps):
            return list(self._obs), rewards, [False] * n, [False] * n, [{} for _ in range(n)]

        results = self.match_results(snaps)
        own, bots = self.frags(snaps)
        infos = []
        for i, snap in enumerate(snaps):
            stats = episode_stats(self._start_vars[i], snap.game_vars)
            stats["best_rival_frags"] = max([f for j, f in enumerate(own) if j != i] + bots)
            infos.append(
                {
                    "true_objective": results[i],
                    "episode_timeout": bool(snap.timed_out),
                    "episode_extra_stats": stats,
                }
            )
        try:
            obs = self._new_episode()
        except DoomGameError as e:
            self._register_failure(e)
            obs, _ = self.reset()
            for info in infos:
                info["doom_error"] = str(e)
        return obs, rewards, [True] * n, [False] * n, infos

    def _abort_episode(self, error: DoomGameError):
        n = self.num_agents
        self._register_failure(error)
        obs, _ = self.reset()
        infos = [{"episode_aborted": True, "doom_error": str(error)} for _ in range(n)]
        return obs, [0.0] * n, [False] * n, [True] * n, infos

    def render(self):
        if self.render_mode == "rgb_array" and self._obs[0] is not None:
            return np.ascontiguousarray(self._obs[0]["obs"].transpose(1, 2, 0))
        return None

    # ------------------------------------------------------------------ reward shaping

    def get_default_reward_shaping(self) -> dict:
        return copy.deepcopy(self._default_shaping)

    def set_reward_shaping(self, reward_shaping: dict, agent_idx=0) -> None:
        indices = (
            range(self.num_agents)[agent_idx]
            if isinstance(agent_idx, slice)
            else [range(self.num_agents)[agent_idx]]
        )
        for i in indices:
            self.shapers[i].set_shaping(reward_shaping)

    @property
    def last_reward_components(self) -> list[dict[str, float]]:
        return [shaper.components_dict() for shaper in self.shapers]

    @property
    def unwrapped(self):
        return self
