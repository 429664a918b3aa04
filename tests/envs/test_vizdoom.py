"""Tests of the VizDoom envs (envs/vizdoom): spaces, episodes, true_objective, multiplayer without
hangs or leftover Doom processes, reward-shaping replays. Skipped without vizdoom.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

vzd = pytest.importorskip("vizdoom")

import envs.vizdoom  # noqa: E402,F401  (registers the Doom env names)
from envs.vizdoom import game as doom_game  # noqa: E402
from envs.vizdoom import multiplayer as doom_mp  # noqa: E402
from envs.vizdoom.processes import SHM_NAMES, DoomStartError, doom_ini_path, doom_pids  # noqa: E402
from envs.vizdoom.scenarios import GAME_VARIABLES, GV, SCENARIOS, ActionMapper  # noqa: E402
from envs.vizdoom.selfplay_game import Snapshot  # noqa: E402
from envs.vizdoom.shaping import RewardShaper, default_shaping, flatten  # noqa: E402
from rl_pbt import parse_cfg  # noqa: E402
from rl_pbt.envs.interfaces import RewardShapingInterface, is_multiagent_env  # noqa: E402
from rl_pbt.envs.registry import make_env, registered_envs  # noqa: E402

pytestmark = pytest.mark.doom

SINGLE_AGENT = [n for n, s in SCENARIOS.items() if s.kind != "selfplay"]
SELF_PLAY = [n for n, s in SCENARIOS.items() if s.kind == "selfplay"]
SHORT = 100  # tics per test episode (25 steps at frameskip 4)
_next_env_id = iter(range(1000, 100000))


def env_config(**extra) -> dict:
    env_id = next(_next_env_id)
    cfg = {
        "worker_index": 0,
        "vector_index": env_id % 4,
        "env_id": env_id,
        "doom_episode_timeout": SHORT,
    }
    cfg.update(extra)
    return cfg


def live_doom_children() -> list[int]:
    """Doom processes under this test process that are not zombies (psutil, else /proc)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        found = []
        for p in psutil.Process().children(recursive=True):
            try:
                if "vizdoom" in p.name() and p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p.pid)
            except psutil.NoSuchProcess:
                pass
        return found
    me, found, parents = os.getpid(), [], {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        parents[int(entry)] = (int(fields[1]), fields[0], name)
    for pid, (_, state, name) in parents.items():
        ancestor = pid
        while ancestor in parents and ancestor != me:
            ancestor = parents[ancestor][0]
        if ancestor == me and "vizdoom" in name and state not in ("Z", "X"):
            found.append(pid)
    return found


@pytest.fixture(autouse=True)
def no_doom_left_behind():
    before = set(live_doom_children())
    yield
    deadline = time.monotonic() + 5
    while set(live_doom_children()) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not set(live_doom_children()) - before, "a Doom process outlived its env"


def check_obs(space, obs):
    assert set(obs) == {"obs", "measurements"}
    assert obs["obs"].shape == (3, 72, 128) and obs["obs"].dtype == np.uint8
    assert obs["measurements"].shape == space["measurements"].shape
    assert obs["measurements"].dtype == np.float32
    assert space.contains(obs)


# ----------------------------------------------------------------------------- no game needed


def test_every_name_is_registered_with_flags_and_defaults():
    names = set(registered_envs())
    assert set(SCENARIOS) <= names
    assert {
        "doom_basic",
        "doom_defend_the_center",
        "doom_defend_the_line",
        "doom_health_gathering",
        "doom_health_gathering_supreme",
        "doom_my_way_home",
        "doom_deadly_corridor",
        "doom_deathmatch_bots",
        "doom_duel_bots",
        "doom_duel",
        "doom_deathmatch",
    } <= names
    cfg = parse_cfg(
        ["--env=doom_deathmatch_bots", "--doom_num_bots=3", "--doom_episode_timeout=300"]
    )
    assert cfg.env_frameskip == 4 and cfg.rollout == 32 and cfg.num_envs_per_worker == 4
    env = make_env("doom_deathmatch_bots", cfg, env_config(doom_episode_timeout=None))
    assert env.settings.num_bots == 3 and env.settings.episode_timeout == 300
    assert env.settings.frameskip == 4
    env.close()
    cfg = parse_cfg(["--env=doom_deathmatch", "--doom_num_agents=5"])
    env = make_env("doom_deathmatch", cfg, env_config())
    assert env.num_agents == 5 and is_multiagent_env(env)
    env.close()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_spaces_are_declared_without_starting_doom(name):
    env = make_env(name, None, env_config())
    obs_space = env.observation_space
    assert obs_space["obs"].shape == (3, 72, 128) and obs_space["obs"].dtype == np.uint8
    assert obs_space["measurements"].dtype == np.float32
    scenario = SCENARIOS[name]
    if scenario.multi_discrete:
        assert list(env.action_space.nvec) == [3, 3, 3, 2, 3]  # move, strafe, turn, attack, weapon
    else:
        assert env.action_space.n == int(np.prod([len(h.options) for h in scenario.heads]))
    assert isinstance(env, RewardShapingInterface)
    assert (scenario.kind == "selfplay") == is_multiagent_env(env)
    env.close()


def test_action_mapper_covers_every_combination():
    mapper = ActionMapper(SCENARIOS["doom_deathmatch"].heads, multi_discrete=True)
    assert mapper.buttons_for([0, 0, 0, 0, 0]) == [0] * len(mapper.buttons)
    pressed = mapper.buttons_for([1, 2, 1, 1, 2])
    names = {b for b, v in zip(mapper.buttons, pressed) if v}
    assert names == {"MOVE_FORWARD", "MOVE_RIGHT", "TURN_LEFT", "ATTACK", "SELECT_PREV_WEAPON"}
    basic = ActionMapper(SCENARIOS["doom_basic"].heads, multi_discrete=False)
    rows = {tuple(basic.buttons_for(a)) for a in range(basic.space.n)}
    assert len(rows) == basic.space.n == 6


@pytest.mark.parametrize("mode", ["nearest", "area"])
def test_screen_resize_keeps_content(mode):
    rng = np.random.default_rng(0)
    screen = np.repeat(np.arange(160, dtype=np.uint8)[None, None, :], 120, axis=1)
    screen = np.repeat(screen, 3, axis=0) + rng.integers(0, 2, (3, 120, 160), dtype=np.uint8)
    out = doom_game.ScreenResizer((120, 160), (72, 128), mode)(screen)
    assert out.shape == (3, 72, 128) and out.dtype == np.uint8
    # A horizontal ramp stays a ramp: column j of the output samples near 1.25 * j.
    assert np.all(np.abs(out[0].mean(axis=0) - 1.25 * (np.arange(128) + 0.5)) < 2.0)
    flat = np.full((3, 120, 160), 77, dtype=np.uint8)
    assert np.all(doom_game.ScreenResizer((120, 160), (72, 128), mode)(flat) == 77)


# ----------------------------------------------------------------------------- single agent


def run_single(env, steps: int, seed: int = 0):
    obs, info = env.reset(seed=seed)
    check_obs(env.observation_space, obs)
    env.action_space.seed(seed)
    objectives = []
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        check_obs(env.observation_space, obs)
        assert isinstance(reward, float) and np.isfinite(reward)
        if terminated or truncated:
            assert isinstance(info["true_objective"], float)
            assert "episode_extra_stats" in info
            objectives.append(info["true_objective"])
            obs, info = env.reset()
        else:
            assert "true_objective" not in info
    return objectives


@pytest.mark.parametrize("name", SINGLE_AGENT)
def test_single_agent_env_200_random_steps(name):
    env = make_env(name, None, env_config())
    try:
        assert not is_multiagent_env(env)
        objectives = run_single(env, 200)
        assert len(objectives) >= 2  # 100-tic episodes end within 26 steps
        kind = SCENARIOS[name].objective
        if kind == "goal":
            assert set(objectives) <= {0.0, 1.0}
        if kind == "survival":
            assert all(0 < o <= SHORT / 35 + 1e-6 for o in objectives)
        if kind == "kills":
            assert all(o >= 0 for o in objectives)
    finally:
        env.close()


def test_render_and_seeded_reset_repeat_an_episode():
    env = make_env("doom_defend_the_center", None, env_config(), render_mode="rgb_array")
    try:
        runs = []
        for _ in range(2):
            obs, _ = env.reset(seed=11)
            frames = [obs["obs"]]
            for a in [0, 1, 3, 4, 5, 2] * 5:
                obs, *_ = env.step(a)
                frames.append(obs["obs"])
            runs.append(np.stack(frames))
        assert np.array_equal(runs[0], runs[1])
        assert env.render().shape == (72, 128, 3)
    finally:
        env.close()


# ----------------------------------------------------------------------------- self-play


def run_multi(env, steps: int, seed: int = 0):
    obs, infos = env.reset(seed=seed)
    n = env.num_agents
    assert len(obs) == len(infos) == n
    for o in obs:
        check_obs(env.observation_space, o)
    env.action_space.seed(seed)
    results = []
    for _ in range(steps):
        obs, rewards, terminated, truncated, infos = env.step(
            [env.action_space.sample() for _ in range(n)]
        )
        assert len(obs) == len(rewards) == len(terminated) == len(truncated) == len(infos) == n
        for o in obs:
            check_obs(env.observation_space, o)
        assert all(isinstance(r, float) and np.isfinite(r) for r in rewards)
        ended = [t or u for t, u in zip(terminated, truncated)]
        assert len(set(ended)) == 1, "agents must end an episode at the same step"
        if ended[0]:
            assert not any(i.get("episode_aborted") for i in infos)
            match = [i["true_objective"] for i in infos]
            assert all(m in (0.0, 0.5, 1.0) for m in match)
            results.append(match)
        else:
            assert not any("true_objective" in i for i in infos)
    return results


@pytest.mark.parametrize("name", SELF_PLAY)
def test_self_play_env_200_random_steps(name):
    env = make_env(name, None, env_config())
    try:
        assert env.is_multiagent and env.num_agents == SCENARIOS[name].num_agents
        results = run_multi(env, 200)
        assert len(results) >= 2
        for match in results:
            wins, draws = match.count(1.0), match.count(0.5)
            assert wins <= 1 and (draws == 0 or wins == 0)
    finally:
        env.close()


def test_deathmatch_with_bots_counts_bots_as_rivals():
    env = make_env("doom_deathmatch", None, env_config(doom_num_agents=2, doom_num_bots=2))
    try:
        results = run_multi(env, 60)
        assert results
        snaps = [Snapshot(True, None, np.zeros(env._num_vars), True, 0) for _ in range(2)]
        snaps[1].game_vars[GV["PLAYER_NUMBER"]] = 1
        snaps[0].game_vars[len(GAME_VARIABLES) + 3] = 2.0  # a bot in slot 3 scored twice
        snaps[0].game_vars[GV["FRAGCOUNT"]] = 1.0
        env._start_vars = [np.zeros(env._num_vars), np.zeros(env._num_vars)]
        assert env.match_results(snaps) == [0.0, 0.0]
        snaps[0].game_vars[GV["FRAGCOUNT"]] = 2.0
        assert env.match_results(snaps) == [0.5, 0.0]
    finally:
        env.close()


def test_bot_match_result_compares_agent_and_bot_frags():
    env = make_env("doom_duel_bots", None, env_config())  # the game starts only on reset
    try:
        base = len(GAME_VARIABLES)
        env._start_vars = np.zeros(env._num_vars)
        env._start_vars[GV["FRAGCOUNT"]] = 3.0  # counts carried over from earlier episodes
        end = np.zeros(env._num_vars)
        end[GV["PLAYER_NUMBER"]] = 0
        end[GV["FRAGCOUNT"]] = 5.0  # 2 frags in this episode
        end[base + 0] = 5.0  # the agent's own slot is not a rival
        end[base + 1] = 1.0
        assert env.bot_match(end) == {"win": 1.0, "best_bot_frags": 1.0}
        end[base + 1] = 2.0
        assert env.bot_match(end)["win"] == 0.5
        end[base + 1] = 4.0
        assert env.bot_match(end) == {"win": 0.0, "best_bot_frags": 4.0}
        env._start_vars[base + 1] = 1.0  # a frag the bot had when the agent first saw the game
        assert env.bot_match(end) == {"win": 0.0, "best_bot_frags": 3.0}
    finally:
        env.close()


@pytest.mark.parametrize("name", ["doom_deathmatch_bots", "doom_duel"])
def test_every_player_starts_an_episode_alive(name):
    """Bots and other players spawn in an episode's first tics, and one landing on another's
    spot kills it: before the fix, a do-nothing agent died on its first step in 7 of 12
    deathmatches with bots (its death penalty, a free frag for a bot, no draw possible), and the
    host of a duel started 4 of 10 matches dead."""
    env = make_env(name, None, env_config(doom_episode_timeout=40, seed=3))
    n = env.num_agents if is_multiagent_env(env) else 1
    noop = np.zeros(len(env.action_space.nvec), dtype=np.int64)
    try:
        env.reset()
        starts, first_step_deaths, bot_frags_at_start = 0, 0, 0
        while starts < 10:
            start = np.asarray(env._start_vars).reshape(n, -1)
            assert (start[:, GV["DEAD"]] == 0).all() and (start[:, GV["HEALTH"]] > 0).all()
            starts += 1
            first = True
            for _ in range(40):
                if n == 1:
                    _, reward, term, trunc, info = env.step(noop)
                    ended, infos = term or trunc, [info]
                    died = env._vars[GV["DEATHCOUNT"]] > start[0, GV["DEATHCOUNT"]]
                else:
                    _, _, terms, truncs, infos = env.step([noop] * n)
                    ended = terms[0] or truncs[0]
                    died = False
                first_step_deaths += int(first and died)
                first = False
                if ended:
                    stats = infos[0]["episode_extra_stats"]
                    bot_frags_at_start += int(
                        n == 1 and stats["deaths"] == 0 and stats["best_bot_frags"] > 0
                    )
                    if n == 1:
                        env.reset()
                    break
        assert first_step_deaths == 0
        assert bot_frags_at_start <= 2  # bots fighting each other in 1 s of play: rare
    finally:
        env.close()


def _play_episodes(name, episodes, out, key, **extra):
    env = make_env(name, None, env_config(**extra))
    try:
        objectives = []
        if is_multiagent_env(env):
            env.reset(seed=key)
            while len(objectives) < episodes:
                _, _, term, trunc, infos = env.step(
                    [env.action_space.sample() for _ in range(env.num_agents)]
                )
                if term[0] or trunc[0]:
                    objectives.append([i.get("true_objective") for i in infos])
        else:
            env.reset(seed=key)
            while len(objectives) < episodes:
                _, _, term, trunc, info = env.step(env.action_space.sample())
                if term or trunc:
                    objectives.append(info.get("true_objective"))
                    env.reset()
        out[key] = objectives
    finally:
        env.close()


@pytest.mark.parametrize("name", ["doom_duel", "doom_deathmatch_bots"])
def test_parallel_copies_play_three_episodes_without_hanging(name):
    out: dict = {}
    threads = [
        threading.Thread(target=_play_episodes, args=(name, 3, out, k), daemon=True)
        for k in range(2)
    ]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(1.0, 120 - (time.monotonic() - start)))
    assert not any(t.is_alive() for t in threads), f"{name} hung"
    assert sorted(out) == [0, 1]
    for objectives in out.values():
        assert len(objectives) == 3
        assert all(o is not None for o in objectives), "an episode ended without true_objective"


def test_failed_start_is_retried_then_reported_by_name(monkeypatch):
    """VizDoom kills its process when a network game fails inside init(); the game's helper
    process takes that blow, and the env retries and then names itself in the error.
    """
    launches = []

    def crashing_helper(fd):
        launches.append(fd)
        return [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]

    monkeypatch.setattr(doom_mp, "launch_command", crashing_helper)
    env = make_env("doom_duel", None, env_config(doom_start_attempts=2))
    with pytest.raises(DoomStartError, match=r"doom_duel \(env_id=.*signal 11"):
        env.reset()
    env.close()
    assert len(launches) == 2


def _game_doom_pids(env) -> list[int]:
    return doom_pids([("-port", str(env._port))])


OWNER = """
import sys, time
sys.path.insert(0, sys.argv[1])
import envs.vizdoom
from envs.vizdoom.processes import doom_pids
from rl_pbt.envs.registry import make_env
from envs.vizdoom.processes import forget_pids, _cmdline
env = make_env("doom_basic", None, {"env_id": 77, "worker_index": 0, "vector_index": 0})
env.reset()
pids = doom_pids()
# as if killed before it recorded them (while the game was starting)
forget_pids(pids)
ids = [a for p in pids for k, a in zip(_cmdline(p), _cmdline(p)[1:]) if k == "+viz_instance_id"]
print(*pids, flush=True)
print(*ids, flush=True)
time.sleep(60)
"""


def test_doom_of_a_killed_process_is_ended_by_the_next_start():
    """A rollout worker SIGKILLed with its games running (the runner starts another), even
    one killed while a game was starting (before it kept the game's pid): before, its Doom
    processes ran on, one set per restart, with their shared memory and settings file; the
    next Doom start now ends them and removes both."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    owner = subprocess.Popen([sys.executable, "-c", OWNER, root], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)  # fmt: skip
    try:
        left = [int(p) for p in owner.stdout.readline().split()]
        ids = owner.stdout.readline().split()
    finally:
        owner.kill()
        owner.wait()
    assert left and len(ids) == len(left), "the owner's game did not start"
    segments = [f"/dev/shm/{name}{i}" for i in ids for name in SHM_NAMES]
    ini = doom_ini_path(owner.pid)  # Doom writes it when a game closes (none has here)
    open(ini, "a").close()
    time.sleep(0.5)
    assert all(os.path.exists(f"/proc/{p}") for p in left)  # no one ended them so far
    assert all(os.path.exists(path) for path in segments + [ini])
    env = make_env("doom_basic", None, env_config())
    try:
        env.reset()
        deadline = time.monotonic() + 5
        while any(os.path.exists(f"/proc/{p}") for p in left) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(os.path.exists(f"/proc/{p}") for p in left)
        assert not any(os.path.exists(path) for path in segments + [ini])
    finally:
        env.close()
        for p in left:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)


@pytest.mark.parametrize("failure", ["frozen_doom", "killed_helper"])
def test_hung_or_dead_game_is_killed_and_restarted(failure):
    env = make_env("doom_duel", None, env_config(doom_step_timeout=2))
    try:
        env.reset()
        for _ in range(5):
            env.step([env.action_space.sample() for _ in range(2)])
        victims = _game_doom_pids(env)
        assert len(victims) == 2
        if failure == "frozen_doom":
            os.kill(victims[-1], signal.SIGSTOP)
        else:
            os.kill(env.game_process.proc.pid, signal.SIGKILL)
        start = time.monotonic()
        obs, rewards, term, trunc, infos = env.step([env.action_space.sample()] * 2)
        assert time.monotonic() - start < 30
        assert trunc == [True, True] and all(i["episode_aborted"] for i in infos)
        assert "doom_duel (env_id=" in infos[0]["doom_error"]
        assert not set(victims) & set(live_doom_children())
        assert not set(victims) & set(_game_doom_pids(env))
        assert run_multi(env, 30)  # the restarted game plays on
    finally:
        env.close()


@pytest.mark.slow
def test_start_that_never_connects_is_cut_off_by_the_watchdog(monkeypatch):
    real_launch = doom_mp.launch_command

    def joiner_knocks_on_the_wrong_door(fd):
        cmd = real_launch(fd)
        body, call = cmd[2].rsplit("serve(fd)", 1)
        cmd[2] = body + (
            "import envs.vizdoom.selfplay_game as g\n"
            "real_build = g.build_game\n"
            "def build(*args, **kwargs):\n"
            "    if kwargs.get('role') == 'join':\n"
            "        kwargs['port'] += 1\n"
            "    return real_build(*args, **kwargs)\n"
            "g.build_game = build\n"
            "serve(fd)" + call
        )
        return cmd

    monkeypatch.setattr(doom_mp, "launch_command", joiner_knocks_on_the_wrong_door)
    env = make_env("doom_duel", None, env_config(doom_connect_timeout=2, doom_start_attempts=2))
    start = time.monotonic()
    with pytest.raises(DoomStartError, match="no answer to start"):
        env.reset()
    assert time.monotonic() - start < 60
    env.close()


# ----------------------------------------------------------------------------- reward shaping


def replay(env, seed: int, actions) -> tuple[float, dict[str, float]]:
    """Total reward and total reward components of a fixed action sequence."""
    env.reset(seed=seed)
    total, components = 0.0, dict.fromkeys(env.shaper.keys, 0.0)
    for a in actions:
        _, reward, terminated, truncated, _ = env.step(a)
        total += reward
        for k, v in env.last_reward_components.items():
            components[k] += v
        if terminated or truncated:
            break
    return total, components


def nested(path: str, value: float) -> dict:
    out: dict = value
    for part in reversed(path.split("/")):
        out = {part: out}
    return out


@pytest.mark.parametrize(
    "name", ["doom_defend_the_center", "doom_defend_the_line", "doom_health_gathering"]
)
def test_changed_coefficient_changes_reward_of_replayed_actions(name):
    env = make_env(name, None, env_config(doom_episode_timeout=300))
    try:
        rng = np.random.default_rng(3)
        actions = [int(a) for a in rng.integers(0, env.action_space.n, 80)]
        base_total, components = replay(env, 5, actions)
        again, _ = replay(env, 5, actions)
        assert again == pytest.approx(base_total)
        defaults = flatten(env.get_default_reward_shaping())
        exercised = [k for k, v in components.items() if v != 0]
        assert {"scenario_reward_scale", "living", "damage/taken"} <= set(exercised)
        for key in exercised:
            env.set_reward_shaping(env.get_default_reward_shaping(), 0)
            env.set_reward_shaping(nested(key, defaults[key] + 0.5), 0)
            total, _ = replay(env, 5, actions)
            assert total - base_total == pytest.approx(0.5 * components[key], rel=1e-6, abs=1e-9), (
                key
            )
        env.set_reward_shaping(env.get_default_reward_shaping(), slice(None))
        assert replay(env, 5, actions)[0] == pytest.approx(base_total)
    finally:
        env.close()


def _scripted_game_variables() -> list[np.ndarray]:
    """A replayed sequence of game variables with every shaped event in it: weapon, ammo,
    armour and health pickups, every weapon slot selected, hits, damage, a kill, a frag, a death
    and a respawn (whose refill must not count as a pickup).
    """
    v = np.zeros(len(GAME_VARIABLES))
    v[GV["HEALTH"]], v[GV["SELECTED_WEAPON"]], v[GV["WEAPON2"]], v[GV["AMMO2"]] = 100, 2, 1, 50
    seq = [v.copy()]

    def then(**changes):
        for name, value in changes.items():
            v[GV[name]] += value
        seq.append(v.copy())

    then(WEAPON3=1, AMMO3=8)  # picks up a shotgun
    then(SELECTED_WEAPON=1)  # slot 3
    then(HITCOUNT=1, DAMAGECOUNT=30, KILLCOUNT=1)
    then(HITS_TAKEN=2, DAMAGE_TAKEN=40, HEALTH=-40)
    then(HEALTH=25, ARMOR=100)  # medikit and armour
    for _ in range(4):  # slots 4..7
        then(SELECTED_WEAPON=1)
    then(SELECTED_WEAPON=-6, AMMO2=20)  # slot 1, some bullets
    then(FRAGCOUNT=1)
    then(DEATHCOUNT=1, DEAD=1, HEALTH=-85)
    then(DEAD=-1, HEALTH=100, AMMO2=30)  # respawn refill
    return seq


def test_every_shaping_coefficient_changes_the_reward_of_a_replay():
    for kind in ("single", "bots"):
        shaping = default_shaping(kind, 0.5)
        keys = list(flatten(shaping))
        seq = _scripted_game_variables()
        scenario_rewards = [0.0] + [1.0] * (len(seq) - 1)

        def total(shaper, seq=seq, scenario_rewards=scenario_rewards):
            shaper.start_episode(seq[0])
            return sum(shaper.step(v, r) for v, r in zip(seq[1:], scenario_rewards[1:]))

        base = total(RewardShaper(shaping))
        for key in keys:
            shaper = RewardShaper(shaping)
            shaper.set_shaping(nested(key, flatten(shaping)[key] + 1.0))
            assert total(shaper) != pytest.approx(base), f"{key} has no effect on the reward"
        respawn = RewardShaper(shaping)
        respawn.start_episode(seq[-2])
        respawn.step(seq[-1], 0.0)
        comps = respawn.components_dict()
        assert comps["pickups/health"] == comps["pickups/ammo"] == 0.0


def test_shaping_rejects_unknown_keys_and_reaches_only_the_chosen_agents():
    env = make_env("doom_deathmatch", None, env_config())
    try:
        with pytest.raises(KeyError, match="events/nope"):
            env.set_reward_shaping({"events": {"nope": 1.0}}, 0)
        env.set_reward_shaping({"events": {"frag": 3.0}}, slice(1, 3))
        frags = [s.shaping["events"]["frag"] for s in env.shapers]
        assert frags == [1.0, 3.0, 3.0, 1.0]
        env.set_reward_shaping({"damage": {"taken": -1.0}}, 3)
        assert env.shapers[3].shaping["damage"]["taken"] == -1.0
        assert env.shapers[0].shaping["damage"]["taken"] != -1.0
    finally:
        env.close()


# ----------------------------------------------------------------------------- long runs


@pytest.mark.slow
def test_many_multiplayer_games_start_at_once_and_play_full_length_matches():
    out: dict = {}
    jobs = [
        ("doom_duel", 2, {"doom_episode_timeout": 0}),
        ("doom_duel", 2, {}),
        ("doom_deathmatch", 1, {"doom_num_bots": 2, "doom_episode_timeout": 1050}),
        ("doom_deathmatch_bots", 2, {"doom_episode_timeout": 0}),
        ("doom_duel_bots", 3, {}),
    ]
    threads = [
        threading.Thread(target=_play_episodes, args=(name, n, out, k), kwargs=extra, daemon=True)
        for k, (name, n, extra) in enumerate(jobs)
    ]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(1.0, 900 - (time.monotonic() - start)))
    assert not any(t.is_alive() for t in threads)
    assert sorted(out) == list(range(len(jobs)))
    for k, (_, n, _) in enumerate(jobs):
        assert len(out[k]) == n and all(o is not None for o in out[k])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["doom_duel", "doom_deathmatch"])
def test_self_play_long_run_stays_in_lock_step(name):
    env = make_env(name, None, env_config(doom_episode_timeout=700))
    try:
        results = run_multi(env, 1500)
        assert len(results) >= 8
    finally:
        env.close()


def test_the_orphan_sweep_leaves_other_users_doom_alone(monkeypatch):
    """A Doom process started here whose owner is gone is ended by the next Doom start, but
    not another user's (it waited 3 s for a process it could not signal, on every start, and
    reported it as ended)."""
    from envs.vizdoom import processes

    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names the settings file of an owner that is gone
    fake = subprocess.Popen(
        ["bash", "-c", 'exec -a /opt/vizdoom/vizdoom "$0" -c "import time; time.sleep(30)" '
         f"-config {doom_ini_path(gone.pid)} +viz_instance_id X", sys.executable]
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 5
        while "vizdoom" not in " ".join(processes._cmdline(fake.pid)[:1]):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with monkeypatch.context() as m:
            m.setattr(processes, "_own_process", lambda pid: False)  # as if another user's
            start = time.monotonic()
            assert fake.pid not in processes.kill_orphans()
            assert time.monotonic() - start < 1.0 and fake.poll() is None
        assert fake.pid in processes.kill_orphans()  # this user's: ended (and reaped)
        assert not os.path.exists(f"/proc/{fake.pid}")
    finally:
        fake.kill()
        fake.wait()
