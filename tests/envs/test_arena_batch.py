"""ArenaBatch (envs.arena.batch) must play exactly like K separate ArenaGame instances."""

from __future__ import annotations

import numpy as np
import pytest

from envs.arena.batch import ArenaBatch
from envs.arena.game import (
    EV_DEATH,
    EV_KILL,
    EV_PICKUP,
    EV_ZONE_DAMAGE,
    EVENTS,
    FACE_N,
    MOVE_N,
    NOOP,
    NUM_ACTIONS,
    SHOOT,
    ZONE_CENTER_X,
    ZONE_CENTER_Y,
    ArenaGame,
    ObsLayout,
)
from rl_pbt.envs.interfaces import BatchedMultiAgentEnv

# random actions: every action possible, moves and shots favoured
ACTION_PROBS = np.array([0.04] + [0.12] * 4 + [0.05] * 4 + [0.28])
ACTION_PROBS /= ACTION_PROBS.sum()


def _actions(
    obs: np.ndarray, layout: ObsLayout, aggression: np.ndarray, homing: np.ndarray, rng
) -> np.ndarray:
    """Random actions (K, n); with probability aggression[k] an agent of copy k instead shoots
    an enemy in its sights, turns to an aligned enemy, or steps towards the first enemy; else,
    with probability homing[k], one outside the storm's safe zone steps towards its centre and
    one inside a shrinking zone stays put (noop)."""
    K, n, _ = obs.shape
    acts = rng.choice(NUM_ACTIONS, size=(K, n), p=ACTION_PROBS)
    # towards the zone's centre along the longer axis (a pillar may block it: random moves
    # get the agent round it)
    dx = ZONE_CENTER_X - np.rint(obs[:, :, ObsLayout.X] * 10)
    dy = ZONE_CENTER_Y - np.rint(obs[:, :, ObsLayout.Y] * 10)
    home = np.where(np.abs(dx) >= np.abs(dy), np.where(dx > 0, 1, 3), np.where(dy > 0, 2, 0))
    homes = rng.random((K, n)) < homing[:, None]
    outside = obs[:, :, layout.zone_outside] > 0
    shrinking = obs[:, :, layout.zone_radius] < 1
    acts = np.where(homes & outside, MOVE_N + home, acts)
    acts = np.where(homes & shrinking & ~outside, NOOP, acts)
    planned = np.full((K, n), -1)
    first = layout.enemy(0)
    dx, dy = obs[:, :, first + ObsLayout.O_DX], obs[:, :, first + ObsLayout.O_DY]
    towards = np.where(np.abs(dx) >= np.abs(dy), np.where(dx > 0, 1, 3), np.where(dy > 0, 2, 0))
    planned = np.where(obs[:, :, first + ObsLayout.O_ALIVE] > 0, MOVE_N + towards, planned)
    for e in reversed(range(layout.num_enemies)):
        block = layout.enemy(e)
        dx, dy = obs[:, :, block + ObsLayout.O_DX], obs[:, :, block + ObsLayout.O_DY]
        facing = np.where(dx == 0, np.where(dy < 0, 0, 2), np.where(dx > 0, 1, 3))
        planned = np.where(obs[:, :, block + ObsLayout.O_ALIGNED] > 0, FACE_N + facing, planned)
    for e in range(layout.num_enemies):
        in_sights = obs[:, :, layout.enemy(e) + ObsLayout.O_IN_SIGHTS] > 0
        planned = np.where(in_sights, SHOOT, planned)
    follow = (planned >= 0) & (rng.random((K, n)) < aggression[:, None])
    return np.where(follow, planned, acts)


def _random_shaping(rng) -> dict:
    keys = rng.choice(EVENTS, size=rng.integers(1, len(EVENTS) + 1), replace=False)
    return {str(k): float(rng.normal()) for k in keys}


def _step_alike(batch, games: list, actions: np.ndarray, t: int):
    """Steps the batch and each of its copies' games with the same actions; asserts that
    every output and the event counts are the same. Returns the batch's outputs."""
    n = actions.shape[1]
    obs, rewards, terminated, truncated, infos = batch.step(actions)
    for k, game in enumerate(games):
        g_obs, g_rewards, g_terminated, g_truncated, g_infos = game.step(actions[k])
        assert np.stack(g_obs).tobytes() == obs[k].tobytes(), (t, k)
        assert np.array_equal(np.float32(g_rewards), rewards[k]), (t, k)
        assert g_terminated == [bool(terminated[k])] * n, (t, k)
        assert g_truncated == [bool(truncated[k])] * n, (t, k)
        assert g_infos == infos[k], (t, k)
        assert np.array_equal(game.events, batch.events[k]), (t, k)
        assert game.t == batch.t[k] and game.alive == batch.alive[k].tolist()
    return obs, rewards, terminated, truncated, infos


@pytest.mark.parametrize("num_agents, episode_steps", [(2, 40), (4, 300)])
def test_batch_plays_exactly_like_separate_games(num_agents, episode_steps):
    K, n, num_steps = 8, num_agents, 1500
    seeds = [1000 * n + k for k in range(K)]
    batch = ArenaBatch(K, n, episode_steps, seeds=seeds)
    games = [ArenaGame(n, episode_steps, seed=s) for s in seeds]
    layout = batch.layout
    aggression = np.linspace(0.0, 0.9, K)  # passive copies run into the time limit
    # copies whose agents keep out of the storm (reaching the time limit) or ignore it (storm
    # damage and eliminations)
    homing = np.array([0.97, 0.97, 0.0, 0.8, 0.0, 0.9, 0.3, 0.0])
    rng = np.random.default_rng(n)

    obs, infos = batch.reset()
    for k, game in enumerate(games):
        game_obs, game_infos = game.reset()
        assert np.array_equal(obs[k], np.stack(game_obs)) and infos[k] == game_infos

    counts = dict(
        eliminations=0,
        truncations=0,
        time_limit_wins=0,
        pickups=0,
        kills=0,
        zone_damage=0,
        zone_eliminations=0,
    )
    for t in range(num_steps):
        if t % 97 == 13:  # new shaping for some agent(s) of some copy / all copies
            shaping = _random_shaping(rng)
            agent = [int(rng.integers(n)), slice(0, n // 2), slice(None)][t % 3]
            env = None if t % 5 == 0 else int(rng.integers(K))
            batch.set_reward_shaping(shaping, agent, env)
            for k in range(K) if env is None else [env]:
                games[k].set_reward_shaping(shaping, agent)
            for k in range(K):
                for i in range(n):
                    assert batch.get_reward_shaping(i, k) == games[k].get_reward_shaping(i)
        if t == num_steps // 2:  # restart one copy with a new seed mid-episode
            copy_obs, copy_infos = batch.reset_copy(3, seed=77)
            game_obs, game_infos = games[3].reset(seed=77)
            assert np.array_equal(np.stack(copy_obs), np.stack(game_obs))
            assert copy_infos == game_infos
            obs[3] = np.stack(copy_obs)

        actions = _actions(obs, layout, aggression, homing, rng)
        obs, rewards, terminated, truncated, infos = _step_alike(batch, games, actions, t)
        assert not truncated.any(), "the time limit is a rule of the game: terminated"
        time_up = [bool(terminated[k] and infos[k][0]["time_limit"]) for k in range(K)]
        counts["eliminations"] += int(terminated.sum()) - sum(time_up)
        counts["truncations"] += sum(time_up)
        counts["time_limit_wins"] += sum(
            time_up[k] and infos[k][0]["true_objective"] != 0.5 for k in range(K)
        )
        counts["pickups"] += int(batch.events[:, :, EV_PICKUP].sum())
        counts["kills"] += int(batch.events[:, :, EV_KILL].sum())
        zone = batch.events[:, :, EV_ZONE_DAMAGE]
        counts["zone_damage"] += int(zone.sum())
        counts["zone_eliminations"] += int((zone * batch.events[:, :, EV_DEATH]).sum())
    # the run covered every kind of event, so equality above means something; in 2v2 the
    # storm makes time-limit ends rare (four players crowd round the centre pillar)
    rare = ("truncations", "time_limit_wins") if n == 4 else ()
    assert all(v >= (2 if key in rare else 5) for key, v in counts.items()), counts


def test_stepping_before_reset_matches_too():
    batch = ArenaBatch(2, 2, episode_steps=5, seeds=[3, 4])
    games = [ArenaGame(2, 5, seed=3), ArenaGame(2, 5, seed=4)]
    actions = np.array([[SHOOT, MOVE_N], [FACE_N, NUM_ACTIONS + 3]])  # ignored: nobody is alive
    for _ in range(7):
        obs, rewards, terminated, truncated, infos = batch.step(actions)
        for k, game in enumerate(games):
            g_obs, g_rewards, g_terminated, g_truncated, g_infos = game.step(actions[k])
            assert np.array_equal(np.stack(g_obs), obs[k])
            assert np.array_equal(np.float32(g_rewards), rewards[k])
            assert (g_terminated[0], g_truncated[0]) == (terminated[k], truncated[k])
            assert g_infos == infos[k]
        actions = np.full((2, 2), SHOOT)


def test_step_outputs_shapes_and_types():
    K, n = 3, 4
    batch = ArenaBatch(K, n, seeds=[0, 1, 2])
    assert isinstance(batch, BatchedMultiAgentEnv)
    assert batch.observation_space == ArenaGame(n).observation_space
    assert batch.action_space.n == NUM_ACTIONS
    obs, infos = batch.reset()
    assert obs.shape == (K, n, batch.layout.size) and obs.dtype == np.float32
    assert len(infos) == K and all(len(row) == n for row in infos)
    obs, rewards, terminated, truncated, infos = batch.step(np.zeros((K, n), dtype=np.int64))
    assert obs.shape == (K, n, batch.layout.size) and obs.dtype == np.float32
    assert rewards.shape == (K, n) and rewards.dtype == np.float32
    assert terminated.shape == truncated.shape == (K,)
    assert terminated.dtype == truncated.dtype == np.bool_
    assert all(batch.observation_space.contains(o) for o in obs.reshape(-1, batch.layout.size))
    assert infos == [[{"is_active": True}] * n] * K
    with pytest.raises(ValueError, match="expected actions of shape"):
        batch.step(np.zeros((K, n + 1), dtype=np.int64))


@pytest.mark.parametrize("bad", [-1, NUM_ACTIONS])
def test_invalid_action_raises(bad):
    batch = ArenaBatch(3, 2, seeds=[0, 1, 2])
    batch.reset()
    actions = np.zeros((3, 2), dtype=np.int64)
    actions[2, 1] = bad
    t = batch.t.copy()
    with pytest.raises(ValueError, match=f"action {bad} of agent 1 in copy 2"):
        batch.step(actions)
    assert np.array_equal(batch.t, t), "a rejected step changes nothing"


def test_reward_shaping_interface():
    batch = ArenaBatch(2, 4, seeds=[0, 1])
    default = batch.get_default_reward_shaping()
    assert default == ArenaGame().get_default_reward_shaping()
    with pytest.raises(ValueError, match="unknown arena reward shaping keys"):
        batch.set_reward_shaping({"win": 2.0, "bogus": 1.0}, 0)
    assert batch.get_reward_shaping(0, 1) == default, "a rejected call changes nothing"
    batch.set_reward_shaping({"win": 3.0}, slice(2, 4), env_idx=1)
    assert batch.get_reward_shaping(3, 1)["win"] == 3.0
    assert batch.get_reward_shaping(1, 1)["win"] == default["win"]
    assert batch.get_reward_shaping(3, 0)["win"] == default["win"]
    batch.set_reward_shaping({"kill": 0.5}, 0)
    assert batch.get_reward_shaping(0, 0)["kill"] == batch.get_reward_shaping(0, 1)["kill"] == 0.5


def test_reset_seeds():
    batch = ArenaBatch(2, 2, seeds=[5, 6])
    first, _ = batch.reset()
    obs, _ = batch.reset(seed=[5, 6])
    assert np.array_equal(obs, first)
    a, _ = batch.reset(seed=9)
    b, _ = batch.reset(seed=9)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("health, ammo", [(3, 1), (1, 2)])
def test_unequal_pickup_counts_play_alike(monkeypatch, health, ammo):
    """The batch pads the shorter kind of its (kind, index in kind) pickup table: with other
    pickup counts than the game's own (2 and 2) it still plays exactly like ArenaGame."""
    import importlib

    import envs.arena.batch as batch_module
    import envs.arena.game as game_module

    monkeypatch.setattr(game_module, "HEALTH_PICKUPS", health)
    monkeypatch.setattr(game_module, "AMMO_PICKUPS", ammo)
    try:
        patched = importlib.reload(batch_module)
        K, n, num_steps = 6, 2, 600
        seeds = [50 + k for k in range(K)]
        batch = patched.ArenaBatch(K, n, 200, seeds=seeds)
        games = [ArenaGame(n, 200, seed=s) for s in seeds]
        rng = np.random.default_rng(health * 10 + ammo)
        aggression, homing = np.linspace(0.0, 0.8, K), np.full(K, 0.5)
        obs, _ = batch.reset()
        for k, game in enumerate(games):
            assert np.array_equal(obs[k], np.stack(game.reset()[0]))
        assert (batch.pickup_cell < patched.NO_PICKUP).sum(axis=1).tolist() == [health + ammo] * K
        pickups = 0
        for t in range(num_steps):
            actions = _actions(obs, batch.layout, aggression, homing, rng)
            obs = _step_alike(batch, games, actions, t)[0]
            pickups += int(batch.events[:, :, EV_PICKUP].sum())
        assert pickups >= 5
    finally:
        monkeypatch.undo()
        importlib.reload(batch_module)
