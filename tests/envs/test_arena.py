"""Tests of the arena game (envs.arena): contract, episode ends, shaping, scripted players."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from envs.arena import ARENA_PLAYERS, make_arena
from envs.arena.game import (
    DEFAULT_REWARD_SHAPING,
    EVENT_INDEX,
    EVENTS,
    ZONE_DAMAGE_EVERY,
    ZONE_FULL_RADIUS,
    ZONE_MIN_RADIUS,
    ArenaGame,
    zone_schedule,
)
from envs.arena.scripted import ChaserPlayer, RandomPlayer, play_match
from rl_pbt.envs.interfaces import RewardShapingInterface, is_multiagent_env
from rl_pbt.envs.registry import env_default_overrides, make_env

NAMES = sorted(ARENA_PLAYERS)


def _env(name: str, env_id: int = 0, **kwargs) -> ArenaGame:
    env = make_arena(name, None, {"worker_index": 0, "vector_index": env_id, "env_id": env_id})
    for key, value in kwargs.items():
        setattr(env, key, value)
    return env


@pytest.mark.parametrize("name", NAMES)
def test_random_steps_follow_the_contract(name):
    env = _env(name, episode_steps=60)
    n = env.num_agents
    assert n == ARENA_PLAYERS[name] and is_multiagent_env(env)
    assert isinstance(env, RewardShapingInterface)
    obs, infos = env.reset(seed=3)
    assert len(obs) == len(infos) == n
    assert all(info["is_active"] for info in infos)
    rng = np.random.default_rng(0)
    length, episodes = 0, 0
    for _ in range(200):
        obs, rew, term, trunc, infos = env.step(rng.integers(env.action_space.n, size=n))
        length += 1
        assert len(obs) == len(rew) == len(term) == len(trunc) == len(infos) == n
        for o in obs:
            assert o.dtype == np.float32 and o.shape == env.observation_space.shape
            assert env.observation_space.contains(o)
        assert all(isinstance(r, float) for r in rew)
        assert len(set(term)) == 1 and len(set(trunc)) == 1, "all agents end together"
        assert all("is_active" in info for info in infos)
        if term[0] or trunc[0]:
            assert not (term[0] and trunc[0])
            objectives = [info["true_objective"] for info in infos]
            assert all(v in (0.0, 0.5, 1.0) for v in objectives)
            for i in range(n):  # teammates share the result; opponents get 1 - it
                for j in range(n):
                    same_team = env.team[i] == env.team[j]
                    expected = objectives[i] if same_team else 1.0 - objectives[i]
                    assert objectives[j] == expected
            assert not trunc[0], "the time limit is a rule of the game: terminated"
            assert all(info["time_limit"] == (length == 60) for info in infos)
            assert length <= 60
            # the env reset itself: these are the first observations of the next episode
            assert env.t == 0 and all(env.alive)
            assert all(o[env.layout.time_left] == 1.0 for o in obs)
            length, episodes = 0, episodes + 1
        else:
            assert not any("true_objective" in info for info in infos)
    assert episodes >= 3


@pytest.mark.parametrize("name", NAMES)
def test_default_time_limit_and_every_episode_reports_true_objective(name):
    env = _env(name)
    n = env.num_agents
    env.reset(seed=1)
    players = [RandomPlayer(seed=i) for i in range(n)]
    obs, _ = env.reset(seed=1)
    lengths, length = [], 0
    for _ in range(2000):
        obs, _, term, trunc, infos = env.step([p.act(o) for p, o in zip(players, obs)])
        length += 1
        if term[0] or trunc[0]:
            assert all("true_objective" in info for info in infos)
            lengths.append(length)
            length = 0
    assert lengths and max(lengths) <= env.episode_steps == 300


@pytest.mark.parametrize(
    "name, health, expected",
    [
        ("arena_duel", [4, 2], [1.0, 0.0]),
        ("arena_duel", [1, 3], [0.0, 1.0]),
        ("arena_duel", [3, 3], [0.5, 0.5]),
        ("arena_2v2", [4, 1, 2, 2], [1.0, 1.0, 0.0, 0.0]),
        ("arena_2v2", [1, 2, 2, 1], [0.5] * 4),
    ],
)
def test_time_limit_goes_to_the_side_with_more_health(name, health, expected):
    env = _env(name, episode_steps=5)
    n = env.num_agents
    env.reset(seed=2)
    env.health[:] = health
    for _ in range(5):  # nobody moves or shoots: the health set above stands
        _, rew, term, trunc, infos = env.step([0] * n)
    assert term == [True] * n and trunc == [False] * n
    assert all(info["time_limit"] for info in infos)
    assert [info["true_objective"] for info in infos] == expected
    win, loss = DEFAULT_REWARD_SHAPING["win"], DEFAULT_REWARD_SHAPING["loss"]
    outcome = {1.0: win, 0.0: loss, 0.5: 0.0}
    np.testing.assert_allclose(rew, [outcome[v] for v in expected], atol=1e-12)


def test_same_seed_same_game():
    runs = []
    for _ in range(2):
        env = _env("arena_2v2")
        obs, _ = env.reset(seed=11)
        rng = np.random.default_rng(5)
        trace = [np.stack(obs)]
        for _ in range(120):
            obs, rew, *_ = env.step(rng.integers(10, size=4))
            trace.append(np.concatenate([np.stack(obs).ravel(), rew]))
        runs.append(np.concatenate([t.ravel() for t in trace]))
    np.testing.assert_array_equal(runs[0], runs[1])


def test_eliminated_teammate_is_inactive_until_the_episode_ends():
    env = _env("arena_2v2")
    n = env.num_agents
    lay = env.layout
    # a strong team against a random one, so that eliminations while a team plays on happen
    players = [
        ChaserPlayer(n, seed=0),
        ChaserPlayer(n, seed=1),
        RandomPlayer(seed=2),
        RandomPlayer(seed=3),
    ]
    obs, _ = env.reset(seed=7)
    dead = [False] * n
    checked_inactive = checked_final = 0
    for _ in range(3000):
        obs, rew, term, trunc, infos = env.step([p.act(o) for p, o in zip(players, obs)])
        if term[0] or trunc[0]:
            assert all(info["is_active"] for info in infos)
            if any(dead):
                checked_final += 1
                # the earlier-eliminated agent still gets its team's win/loss reward
                for i in range(n):
                    if dead[i]:
                        win = infos[i]["true_objective"] == 1.0
                        loss = infos[i]["true_objective"] == 0.0
                        expected = 1.0 if win else (-1.0 if loss else 0.0)
                        assert rew[i] == pytest.approx(expected)
            dead = [False] * n
            continue
        for i in range(n):
            if dead[i]:
                checked_inactive += 1
                assert infos[i]["is_active"] is False
                assert rew[i] == 0.0
                assert not obs[i].any()
            else:
                assert infos[i]["is_active"] is True
        for i in range(n):
            if not dead[i] and not obs[i][lay.FACING : lay.FACING + 4].any():
                dead[i] = True  # eliminated in this step: it was still active for it
                assert not env.alive[i]
        # an eliminated agent appears as not alive in its teammates' observations
        for i in range(n):
            if dead[i]:
                continue
            for k, j in enumerate(env._others[i]):
                assert obs[i][lay.other(k) + lay.O_ALIVE] == (0.0 if dead[j] else 1.0)
    assert checked_inactive > 10 and checked_final > 3


def test_duel_agents_are_always_active():
    env = _env("arena_duel")
    obs, _ = env.reset(seed=2)
    rng = np.random.default_rng(1)
    for _ in range(300):
        *_, infos = env.step(rng.integers(10, size=2))
        assert all(info["is_active"] for info in infos)


def _recorded_actions(name: str, steps: int, seed: int) -> list[list[int]]:
    """Actions of a chaser team against random players: rich in every kind of event. In every
    other episode both teams play at random, so that it lasts into the storm."""
    env = _env(name)
    n = env.num_agents
    players = [
        ChaserPlayer(n, seed=i) if env.team[i] == 0 else RandomPlayer(seed=i) for i in range(n)
    ]
    # the chasers sometimes act randomly, so that they also take damage and pick up items
    noise = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    actions = []
    episode = 0
    for _ in range(steps):
        chance = 1.0 if episode % 2 else 0.3
        acts = [
            int(noise.integers(10)) if noise.random() < chance else p.act(o)
            for p, o in zip(players, obs)
        ]
        actions.append(acts)
        obs, _, term, trunc, _ = env.step(acts)
        episode += term[0] or trunc[0]
    return actions


def _replay(name: str, actions, seed: int, shaping=None, agent_idx=slice(None)):
    env = _env(name)
    if shaping is not None:
        env.set_reward_shaping(shaping, agent_idx)
    env.reset(seed=seed)
    rewards, events, objectives = [], [], []
    for acts in actions:
        _, rew, term, trunc, infos = env.step(acts)
        rewards.append(rew)
        events.append(env.events.copy())
        if term[0] or trunc[0]:
            objectives.append([info["true_objective"] for info in infos])
    return np.array(rewards), np.array(events), objectives


@pytest.fixture(scope="module", params=NAMES)
def replay(request):
    name = request.param
    seed = 21
    actions = _recorded_actions(name, 1500, seed)
    rewards, events, objectives = _replay(name, actions, seed)
    return name, seed, actions, rewards, events, objectives


def test_default_shaping_is_the_sum_of_weighted_events(replay):
    name, _, _, rewards, events, objectives = replay
    defaults = _env(name).get_default_reward_shaping()
    assert list(defaults) == list(EVENTS)
    coeffs = np.array([defaults[k] for k in EVENTS])
    np.testing.assert_allclose(rewards, events @ coeffs, atol=1e-9)
    totals = events.sum(axis=(0, 1))
    # independent cross-checks of the event counts
    assert totals[EVENT_INDEX["damage_dealt"]] == totals[EVENT_INDEX["damage_taken"]]
    # a death in the same step as storm damage is the storm's (no one gets the kill); every
    # other death has at least one killer (two shooters can share one)
    deaths = events[:, :, EVENT_INDEX["death"]]
    storm_deaths = (deaths * events[:, :, EVENT_INDEX["zone_damage"]]).sum()
    assert storm_deaths > 0
    assert totals[EVENT_INDEX["kill"]] >= totals[EVENT_INDEX["death"]] - storm_deaths
    assert totals[EVENT_INDEX["shot_fired"]] >= totals[EVENT_INDEX["damage_dealt"]]
    objectives = np.array(objectives)
    assert totals[EVENT_INDEX["win"]] == (objectives == 1.0).sum()
    assert totals[EVENT_INDEX["loss"]] == (objectives == 0.0).sum()


@pytest.mark.parametrize("key", EVENTS)
def test_every_shaping_coefficient_changes_the_reward(replay, key):
    name, seed, actions, base_rewards, events, _ = replay
    env = _env(name)
    delta = 0.37
    shaping = {key: env.get_default_reward_shaping()[key] + delta}
    rewards, _, _ = _replay(name, actions, seed, shaping)
    counts = events[:, :, EVENT_INDEX[key]]
    assert counts.sum() > 0, f"the replay never produced a {key!r} event"
    np.testing.assert_allclose(rewards - base_rewards, delta * counts, atol=1e-9)

    # per-agent shaping: only agent 1's reward moves
    rewards, _, _ = _replay(name, actions, seed, shaping, agent_idx=1)
    diff = rewards - base_rewards
    np.testing.assert_allclose(diff[:, 1], delta * counts[:, 1], atol=1e-9)
    others = [i for i in range(env.num_agents) if i != 1]
    assert not diff[:, others].any()


def test_shaping_interface_details():
    env = _env("arena_2v2")
    assert env.get_reward_shaping(3) == env.get_default_reward_shaping()
    env.set_reward_shaping({"win": 2.0}, slice(2, 4))
    assert [env.get_reward_shaping(i)["win"] for i in range(4)] == [1.0, 1.0, 2.0, 2.0]
    assert env.get_reward_shaping(2)["loss"] == -1.0  # untouched keys keep their values
    with pytest.raises(ValueError, match="unknown"):
        env.set_reward_shaping({"wins": 1.0}, 0)
    defaults = env.get_default_reward_shaping()
    defaults["win"] = 5.0
    assert env.get_default_reward_shaping()["win"] == 1.0  # a copy


@pytest.mark.parametrize("chaser_seat", [0, 1])
def test_chaser_beats_random_in_duels(chaser_seat):
    env = _env("arena_duel")
    players = [RandomPlayer(seed=1), RandomPlayer(seed=2)]
    players[chaser_seat] = ChaserPlayer(2, seed=3)
    results = play_match(env, players, num_games=100, seed=4)
    assert len(results) == 100 and all(len(r) == 2 for r in results)
    wins = sum(r[chaser_seat] == 1.0 for r in results)
    assert wins > 70


def test_chaser_team_beats_random_team_in_2v2():
    env = _env("arena_2v2")
    players = [
        RandomPlayer(seed=0),
        RandomPlayer(seed=1),
        ChaserPlayer(4, seed=2),
        ChaserPlayer(4, seed=3),
    ]
    results = play_match(env, players, num_games=40, seed=5)
    assert sum(r[2] == 1.0 for r in results) > 28
    assert all(r[2] == r[3] and r[0] == 1.0 - r[2] for r in results)


def test_render_rgb_array():
    env = make_arena("arena_2v2", None, {"env_id": 0}, render_mode="rgb_array")
    env.reset(seed=0)
    img = env.render()
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
    assert img.shape[0] == (11 + 2) * env.CELL_PX
    env.step([1, 2, 3, 4])
    assert env.render().shape == img.shape
    assert _env("arena_duel").render() is None


def test_registered_and_configurable():
    from rl_pbt import parse_cfg

    env = make_env("arena_duel", None, {"worker_index": 0, "vector_index": 0, "env_id": 4})
    assert env.num_agents == 2
    assert env_default_overrides("arena_2v2")["encoder_mlp_layers"] == [128, 128]
    cfg = parse_cfg(["--env=arena_2v2", "--arena_episode_steps=77", "--seed=3"])
    env = make_env("arena_2v2", cfg, {"worker_index": 0, "vector_index": 0, "env_id": 1})
    assert env.num_agents == 4 and env.episode_steps == 77
    # env_id separates the random streams of env copies with the same cfg.seed
    other = make_env("arena_2v2", cfg, {"worker_index": 0, "vector_index": 1, "env_id": 2})
    again = make_env("arena_2v2", cfg, {"worker_index": 0, "vector_index": 0, "env_id": 1})
    first = np.stack(env.reset()[0])
    assert np.array_equal(first, np.stack(again.reset()[0]))
    assert not np.array_equal(first, np.stack(other.reset()[0]))
    pickle.dumps(make_arena)  # factories must reach spawned processes


# ----- the storm (shrinking safe zone) -----


def _storm_duel(cells, health=(4, 4), t=0, episode_steps=300) -> ArenaGame:
    """A duel with the players on `cells` ((x, y) each, facing away from each other so no
    shot can hit), the given health, at step t, and no pickups (none respawns either)."""
    env = _env("arena_duel", episode_steps=episode_steps)
    env.reset(seed=0)
    for c in env.pickup_cell:
        if c >= 0:
            env._pickup_at[c] = -1
    env.pickup_cell[:] = [-1] * len(env.pickup_cell)
    for i, (x, y) in enumerate(cells):
        env.x[i], env.y[i] = x, y
        env.health[i] = health[i]
    env.facing[:] = [0, 2]  # N and S: on different cells nobody is in anybody's sights
    env.t = t
    return env


def test_zone_schedule():
    radius, damage = zone_schedule(300)
    assert len(radius) == len(damage) == 301
    assert radius[:120] == [ZONE_FULL_RADIUS] * 120  # the whole floor until 40%
    assert [radius[t] for t in (120, 159, 160, 199, 200, 239, 240, 300)] == [4, 4, 3, 3, 2, 2, 1, 1]
    assert all(a >= b for a, b in zip(radius, radius[1:]))
    ticks = [t for t in range(301) if damage[t]]
    assert ticks == list(range(120 + ZONE_DAMAGE_EVERY, 301, ZONE_DAMAGE_EVERY))
    assert ZONE_FULL_RADIUS == 5 and ZONE_MIN_RADIUS == 1
    # every episode length gets the whole schedule; very short ones never tick
    for steps in (5, 40, 60, 77, 1000):
        radius, damage = zone_schedule(steps)
        assert radius[0] == ZONE_FULL_RADIUS and radius[steps] == ZONE_MIN_RADIUS
        assert all(a >= b for a, b in zip(radius, radius[1:]))
    assert not any(zone_schedule(5)[1])


def test_outside_the_zone_loses_health_on_schedule_inside_does_not():
    # player 0 in a corner (distance 5), player 1 next to the centre pillar (distance 1)
    env = _storm_duel([(0, 0), (5, 4)], t=120)
    lay = env.layout
    health0 = []
    for _ in range(30):
        obs, rew, term, trunc, _ = env.step([0, 0])
        assert not (term[0] or trunc[0])
        health0.append(env.health[0])
        assert env.health[1] == 4, "inside the zone: no damage"
        tick = env.t % ZONE_DAMAGE_EVERY == 0
        assert env.events[0, EVENT_INDEX["zone_damage"]] == (1.0 if tick else 0.0)
        assert not env.events[1].any()
        expected = DEFAULT_REWARD_SHAPING["zone_damage"] if tick else 0.0
        assert rew[0] == pytest.approx(expected) and rew[1] == 0.0
        if env.t < 125:
            assert env.health[0] == 4
        # observation: the zone's radius, the own distance from the centre, outside
        radius = env._zone_radius[env.t]
        zone = lay.zone_radius
        np.testing.assert_allclose(obs[0][zone : zone + 3], [radius / 5, 1.0, 1.0], rtol=1e-6)
        np.testing.assert_allclose(obs[1][zone : zone + 3], [radius / 5, 0.2, 0.0], rtol=1e-6)
        if env.t == 135:
            break
    assert health0[-1] == 1 and env.t == 135  # ticks at 125, 130 and 135


def test_zone_covers_the_whole_floor_before_it_shrinks():
    env = _storm_duel([(0, 0), (10, 10)], t=0)
    for _ in range(119):
        obs, *_ = env.step([0, 0])
        assert env.health == [4, 4]
        assert obs[0][env.layout.zone_radius] == 1.0 and obs[0][env.layout.zone_outside] == 0.0


@pytest.mark.parametrize(
    "cells, health, expected",
    [
        ([(0, 0), (5, 6)], [1, 4], [0.0, 1.0]),  # the storm eliminates player 0: 1 wins
        ([(5, 6), (10, 10)], [1, 1], [1.0, 0.0]),  # health does not protect the one outside
        ([(0, 0), (10, 10)], [1, 1], [0.5, 0.5]),  # both fall together: a draw
    ],
)
def test_zone_elimination_decides_the_game(cells, health, expected):
    env = _storm_duel(cells, health=health, t=124)
    _, rew, term, trunc, infos = env.step([0, 0])  # t = 125: the first storm tick
    assert term == [True, True] and trunc == [False, False]
    assert [info["true_objective"] for info in infos] == expected
    ev = env.events  # the deciding step's events (the env has already reset)
    assert not ev[:, EVENT_INDEX["kill"]].any(), "nobody gets the storm's kill"
    coeff = DEFAULT_REWARD_SHAPING
    for i in range(2):
        outside = cells[i] != (5, 6)
        assert ev[i, EVENT_INDEX["zone_damage"]] == float(outside)
        assert ev[i, EVENT_INDEX["death"]] == float(outside)
        result = {1.0: coeff["win"], 0.0: coeff["loss"], 0.5: 0.0}[expected[i]]
        shaped = (coeff["zone_damage"] + coeff["death"]) if outside else 0.0
        assert rew[i] == pytest.approx(result + shaped)


def test_shot_down_player_is_not_hit_by_the_storm_too():
    # player 1 faces player 0 along row 0 (distance 3) and shoots him down at a storm tick
    env = _storm_duel([(0, 0), (3, 0)], health=[1, 4], t=124)
    env.facing[:] = [0, 3]
    _, _, term, _, infos = env.step([0, 9])
    assert term[0] and [info["true_objective"] for info in infos] == [0.0, 1.0]
    ev = env.events
    assert ev[0, EVENT_INDEX["death"]] == 1.0 and ev[1, EVENT_INDEX["kill"]] == 1.0
    assert ev[0, EVENT_INDEX["zone_damage"]] == 0.0 and ev[1, EVENT_INDEX["zone_damage"]] == 1.0


def test_render_shows_the_storm():
    env = make_arena("arena_duel", None, {"env_id": 0}, render_mode="rgb_array")
    env.reset(seed=0)
    for c in env.pickup_cell:
        env._pickup_at[c] = -1
    env.pickup_cell[:] = [-1] * len(env.pickup_cell)
    env.x[:], env.y[:] = [4, 6], [5, 5]
    px = env.CELL_PX
    corner = (slice(px, 2 * px), slice(px, 2 * px))  # cell (0, 0)
    calm = env.render()[corner].copy()
    env.t = 200  # radius 2
    stormy = env.render()
    assert not np.array_equal(stormy[corner], calm)
    centre = (slice(5 * px, 6 * px), slice(6 * px, 7 * px))  # cell (5, 4): inside
    assert np.array_equal(stormy[centre], env._background[centre])


def test_in_my_sights_is_only_the_agent_a_shot_would_hit():
    """2v2, seat 0 at (0, 0) facing east, its teammate at (1, 0), enemies at (2, 0) and
    (4, 0): a shot hits the nearer enemy only. The flag (documented as "a shot now would hit
    it") was 1 for all three; now for the nearer enemy alone, in the game and its twin."""
    from envs.arena.batch import NO_PICKUP, ArenaBatch
    from envs.arena.game import EV_DAMAGE_TAKEN, NOOP, SHOOT, WIDTH

    game = ArenaGame(4, 300, seed=0)
    game.reset()
    batch = ArenaBatch(1, 4, 300, seeds=[0])
    batch.reset()
    spots = [(0, 0), (1, 0), (2, 0), (4, 0)]
    for i, (x, y) in enumerate(spots):
        game.x[i], game.y[i] = x, y
        batch.cell[0, i] = y * WIDTH + x
    game.facing[:] = [1, 1, 3, 3]
    batch.facing[0] = [1, 1, 3, 3]
    for c in game.pickup_cell:
        if c >= 0:
            game._pickup_at[c] = -1
    game.pickup_cell[:] = [-1] * len(game.pickup_cell)
    batch.pickup_cell[:] = NO_PICKUP
    L = game.layout
    for obs in (game._observations()[0], batch._observations()[0, 0]):
        assert obs[L.other(0) + L.O_IN_SIGHTS] == 0.0  # the teammate
        assert obs[L.enemy(0) + L.O_IN_SIGHTS] == 1.0  # the nearer enemy
        assert obs[L.enemy(1) + L.O_IN_SIGHTS] == 0.0  # behind it
    np.testing.assert_array_equal(game._observations()[0], batch._observations()[0, 0])
    game.step([SHOOT, NOOP, NOOP, NOOP])
    assert game.events[:, EV_DAMAGE_TAKEN].tolist() == [0.0, 0.0, 1.0, 0.0]


def test_an_invalid_action_changes_nothing_and_steps_must_be_positive():
    """The game raised after moving the agents before the bad one and advancing its clock
    (its twin raises first); a time limit of 0 failed with a ZeroDivisionError at reset."""
    from envs.arena.batch import ArenaBatch
    from envs.lure.env import LureEnv

    game = ArenaGame(2, 300, seed=0)
    game.reset()
    game.step([1, 1])
    before = (game.t, list(game.x), list(game.y), list(game.facing), game.events.copy())
    with pytest.raises(ValueError, match="action 42 of agent 1"):
        game.step([2, 42])
    after = (game.t, list(game.x), list(game.y), list(game.facing), game.events)
    assert before[:4] == after[:4] and np.array_equal(before[4], after[4])
    for make in (lambda: ArenaGame(2, 0), lambda: ArenaBatch(2, 2, 0), lambda: LureEnv(0),
                 lambda: LureEnv(coin_respawn_steps=0)):  # fmt: skip
        with pytest.raises(ValueError, match="must be at least 1"):
            make()


def test_the_game_saves_and_restores_its_state_exactly():
    """Without its batched twin (--batched_envs=False) the arena had no get_state(), so a
    serial run of it wrote no state for an exact resume, unlike the README's word."""
    rng = np.random.default_rng(0)
    game = ArenaGame(4, 60, seed=3)
    game.reset()
    game.set_reward_shaping({"kill": 2.0}, 1)
    for _ in range(25):
        game.step(rng.integers(0, 10, 4).tolist())
    saved = game.get_state()
    actions = [rng.integers(0, 10, 4).tolist() for _ in range(80)]  # past an episode's end
    first = [game.step(a) for a in actions]
    other = ArenaGame(4, 60, seed=99)
    other.reset()
    other.set_state(pickle.loads(pickle.dumps(saved)))
    again = [other.step(a) for a in actions]
    for (o1, r1, t1, u1, i1), (o2, r2, t2, u2, i2) in zip(first, again):
        np.testing.assert_array_equal(np.stack(o1), np.stack(o2))
        assert (r1, t1, u1, i1) == (r2, t2, u2, i2)
    assert any(t[0] for _, _, t, _, _ in first)  # an episode ended and the next one began
