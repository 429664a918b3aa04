"""Helper process running one self-play Doom game, each player's DoomGame on its own thread;
started and driven over a socket by multiplayer.DoomMultiAgentEnv, games built by game.py.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from envs.vizdoom.game import (
    SPAWN_TICS,
    DoomSettings,
    ScreenResizer,
    build_game,
    read_game_variables,
    render_resolution,
    self_play_frag_variables,
)
from envs.vizdoom.scenarios import GAME_VARIABLES, get_scenario


@dataclass
class Snapshot:
    """What one player sees after a request: its observation screen (already resized) or None
    when its episode is over, and its game variables."""

    finished: bool
    screen: Optional[np.ndarray]
    game_vars: np.ndarray
    timed_out: bool
    episode_time: int


class PlayerThread:
    """Runs calls for one player on a dedicated thread; answers are matched to calls by number,
    so a late answer to an abandoned call is never mistaken for a newer one.
    """

    def __init__(self, name: str):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        self._calls = 0
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def submit(self, fn: Callable, *args) -> int:
        self._calls += 1
        self._jobs.put((self._calls, fn, args))
        return self._calls

    def wait(self, call: int, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            number, ok, value = self._answers.get(timeout=max(0.0, deadline - time.monotonic()))
            if number != call:
                continue
            if ok:
                return value
            raise value

    def stop(self) -> None:
        self._jobs.put(None)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            number, fn, args = job
            try:
                self._answers.put((number, True, fn(*args)))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                self._answers.put((number, False, e))


# Why a separate process: VizDoom takes the calling process down (SIGSEGV) when a network game
# fails inside init(); here that ends only this helper, and the env starts a new one.
# Lock-step rule: in VizDoom's synchronous network mode a player asked for several tics at once
# may run one tic beyond what its peers have sent and then wait for them forever, so players
# advance one tic at a time and meet at a barrier between tics (VizDoom releases the GIL).


class TicSync:
    """Barrier between the tics of one step. Its action decides once, for everyone, whether to
    stop early (some player's episode ended), so all players stop at the same tic.
    """

    def __init__(self, num_players: int, timeout: float):
        self.done = [False] * num_players
        self.stop = False
        self.barrier = threading.Barrier(num_players, action=self._decide, timeout=timeout)

    def _decide(self) -> None:
        self.stop = any(self.done)

    def clear(self) -> None:
        self.done = [False] * len(self.done)
        self.stop = False


class Player:
    """One agent's DoomGame; every method runs on that player's own thread."""

    def __init__(self, index: int, game, num_vars: int, resizer):
        self.index = index
        self.game = game
        self.num_vars = num_vars
        self.resizer = resizer

    def init(self) -> str:
        self.game.init()
        return self.game.get_instance_id()

    def set_seed(self, seed: int) -> None:
        self.game.set_seed(int(seed) % (2**32))

    def new_episode(self, num_bots: int) -> None:
        self.game.new_episode()
        if self.index == 0 and num_bots > 0:
            self.game.send_game_command("removebots")
            for _ in range(num_bots):
                self.game.send_game_command("addbot")

    def spawn_tic(self) -> bool:
        """One tic with no buttons (every player's at once: a network game moves in lock-step);
        True when this player is alive after it. The game respawns the dead itself."""
        self.game.make_action([0] * self.game.get_available_buttons_size(), 1)
        return self.game.is_episode_finished() or not self.game.is_player_dead()

    def step(self, buttons: list[int], tics: int, sync: TicSync) -> Snapshot:
        game = self.game
        game.set_action(buttons)
        for k in range(tics):
            game.advance_action(1, k == tics - 1)
            sync.done[self.index] = game.is_episode_finished()
            if k < tics - 1:
                sync.barrier.wait()
                if sync.stop:
                    break
        return self.snapshot()

    def snapshot(self) -> Snapshot:
        game = self.game
        finished = game.is_episode_finished()
        state = None if finished else game.get_state()
        return Snapshot(
            finished=finished,
            screen=None if state is None else self.resizer(state.screen_buffer),
            game_vars=read_game_variables(game, state, self.num_vars),
            timed_out=finished and game.is_episode_timeout_reached(),
            episode_time=game.get_episode_time(),
        )

    def close(self) -> None:
        self.game.close()


class SelfPlayGame:
    """All players of one network game: player 0 hosts on `port`, the others join it."""

    def __init__(self, scenario_name: str, settings: dict, port: int):
        self.scenario = get_scenario(scenario_name)
        self.settings = DoomSettings(**settings)
        s, n = self.settings, self.settings.num_agents
        w, h = render_resolution(s.width, s.height)
        resizer = ScreenResizer((h, w), (s.height, s.width), s.resize)
        num_vars = len(GAME_VARIABLES) + len(self_play_frag_variables(self.scenario))
        buttons = self.scenario.action_mapper().buttons
        self.players = [
            Player(
                i,
                build_game(
                    self.scenario,
                    s,
                    buttons,
                    role="host" if i == 0 else "join",
                    port=port,
                    player_index=i,
                    num_players=n,
                ),
                num_vars,
                resizer,
            )
            for i in range(n)
        ]
        self.threads = [PlayerThread(f"doom-player{i}") for i in range(n)]
        self.sync = TicSync(n, s.step_timeout)

    def call_all(self, method: str, args: list[tuple], timeout: float, what: str) -> list:
        calls = [
            t.submit(getattr(p, method), *a) for t, p, a in zip(self.threads, self.players, args)
        ]
        deadline = time.monotonic() + timeout
        answers: list = []
        for i, (thread, call) in enumerate(zip(self.threads, calls)):
            try:
                answers.append(thread.wait(call, max(0.0, deadline - time.monotonic())))
                continue
            except queue.Empty:
                problems = [f"player {i} gave no answer to {what} within {timeout:.0f} s"]
            except Exception as e:  # noqa: BLE001 - any failure of a player is reported
                problems = [f"player {i} failed during {what}: {e!r}"]
            self.sync.barrier.abort()
            for j in range(i + 1, len(calls)):  # what the others say, briefly
                try:
                    self.threads[j].wait(calls[j], 0.5)
                except queue.Empty:
                    pass
                except Exception as e:  # noqa: BLE001
                    problems.append(f"player {j} failed during {what}: {e!r}")
            # The player that broke the game first, not those stopped by the barrier.
            problems.sort(key=lambda p: "BrokenBarrierError" in p)
            raise RuntimeError("; ".join(problems))
        return answers

    def start(self) -> list[str]:
        n = len(self.players)
        return self.call_all("init", [()] * n, self.settings.connect_timeout, "start")

    def set_seed(self, seed: int) -> None:
        self.call_all("set_seed", [(seed,)] * len(self.players), 10.0, "set_seed")

    def new_episode(self) -> list[Snapshot]:
        """A new episode, from the first tic at which every player is alive: a player that
        spawns onto another's spot kills it (a telefrag), and no one should start dead."""
        n, s = len(self.players), self.settings
        self.call_all("new_episode", [(s.num_bots,)] * n, s.step_timeout, "new episode")
        for _ in range(SPAWN_TICS):
            if all(self.call_all("spawn_tic", [()] * n, s.step_timeout, "new episode")):
                break
        return self.call_all("snapshot", [()] * n, s.step_timeout, "new episode")

    def step(self, buttons: list[list[int]]) -> list[Snapshot]:
        s = self.settings
        self.sync.clear()
        return self.call_all(
            "step", [(b, s.frameskip, self.sync) for b in buttons], s.step_timeout, "step"
        )

    def close(self) -> None:
        self.call_all("close", [()] * len(self.players), 15.0, "close")
        for t in self.threads:
            t.stop()


def serve(fd: int) -> None:
    """Answer requests (command, argument) with ("ok", value) or ("error", text) until told
    to close or until the env's end of the socket goes away; then no Doom process is left.
    """
    from multiprocessing.connection import Connection

    os.set_inheritable(fd, False)  # Doom processes must not hold the env's socket open
    conn = Connection(fd)
    game: Optional[SelfPlayGame] = None
    try:
        while True:
            try:
                command, arg = conn.recv()
            except (EOFError, OSError):
                return
            try:
                if command == "start":
                    game = SelfPlayGame(arg["scenario"], arg["settings"], arg["port"])
                    value = game.start()
                elif command == "seed":
                    value = game.set_seed(arg)
                elif command == "new_episode":
                    value = game.new_episode()
                elif command == "step":
                    value = game.step(arg)
                elif command == "close":
                    if game is not None:
                        game.close()
                    game = None
                    conn.send(("ok", None))
                    return
                else:
                    raise ValueError(f"unknown request {command!r}")
            except Exception as e:  # noqa: BLE001 - reported to the env, which restarts us
                conn.send(
                    (
                        "error",
                        f"{e}"
                        if isinstance(e, RuntimeError)
                        else "".join(traceback.format_exception_only(type(e), e)).strip(),
                    )
                )
                continue
            conn.send(("ok", value))
    finally:
        # This process leads its own process group, Doom processes included.
        if game is not None:
            os.killpg(os.getpgid(0), signal.SIGKILL)


# Run with `python -c LAUNCHER ROOT FD`: maps the `envs` and `envs.vizdoom` packages onto their
# folders without running their __init__ files (no env registration, no unrelated imports).
LAUNCHER = """
import os, sys, types
root, fd = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, root)
for name, folder in (("envs", "envs"), ("envs.vizdoom", os.path.join("envs", "vizdoom"))):
    module = types.ModuleType(name)
    module.__path__ = [os.path.join(root, folder)]
    sys.modules[name] = module
from envs.vizdoom.selfplay_game import serve
serve(fd)
"""


def launch_command(fd: int) -> list[str]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return [sys.executable, "-c", LAUNCHER, root, str(fd)]
