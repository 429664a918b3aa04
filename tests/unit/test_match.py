"""launch/match's batched games: the same players and scores as one game at a time."""

import numpy as np
import pytest
import torch

import envs  # noqa: F401
from launch.match import (
    BatchPolicyActor,
    RandomActor,
    SeatActors,
    cross_play,
    main,
    make_batch_env,
    make_player,
    play,
    play_batched,
)
from rl_pbt import parse_cfg
from rl_pbt.envs.registry import make_env
from rl_pbt.envs.wrappers import as_multiagent
from rl_pbt.models.actor_critic import make_actor_critic
from rl_pbt.models.loading import PolicyActor


class Idle:
    """Never moves nor shoots."""

    def act(self, obs) -> int:
        return 0

    def reset(self) -> None:
        pass


def chasers(seats: int) -> SeatActors:
    return SeatActors(make_player("chaser", arena(), None, 1), seats)


def randoms(seats: int, seed: int = 2) -> SeatActors:
    env = arena()
    return SeatActors(lambda: RandomActor(env.action_space, seed), seats)


def arena(env_id: int = 0):
    return as_multiagent(
        make_env("arena_duel", None, {"worker_index": 0, "vector_index": 0, "env_id": env_id})
    )


@pytest.mark.parametrize("use_rnn", [False, True])
def test_batch_policy_actor_acts_like_one_policy_actor_per_seat(use_rnn):
    env = arena()
    flags = ["--env=arena_duel", f"--use_rnn={use_rnn}", "--rnn_size=16"]
    torch.manual_seed(0)
    model = make_actor_critic(env.observation_space, env.action_space, parse_cfg(flags))
    model.eval()
    seats = 6
    batch = BatchPolicyActor(model, env.observation_space, env.action_space, seats, True)
    single = [
        PolicyActor(model, env.observation_space, env.action_space, True) for _ in range(seats)
    ]
    rng = np.random.default_rng(0)
    for step in range(5):
        obs = rng.uniform(-1, 1, (seats, env.observation_space.shape[0])).astype(np.float32)
        with torch.no_grad():
            expected = [s.act(o) for s, o in zip(single, obs)]
        assert batch.act(obs).tolist() == expected
        if step == 2:  # a new episode in seat 1 only
            batch.reset(slice(1, 2))
            single[1].reset()


def test_play_batched_plays_the_same_number_of_games_in_every_copy():
    batch_env = make_batch_env("arena_duel", 8, seed=3)
    scores = play_batched(batch_env, chasers(8), randoms(8), games=20, max_steps=100_000)
    assert len(scores) == 24  # 3 games in each of the 8 copies
    assert set(scores) <= {0.0, 0.5, 1.0}
    # the same pairing one game at a time, for scale: the chaser beats random either way
    env = arena(5)
    one = play(env, chasers(1).actors, randoms(1).actors, 24, 100_000)
    assert np.mean(scores) >= 0.8 and np.mean(one) >= 0.8, (np.mean(scores), np.mean(one))
    reverse = play_batched(batch_env, randoms(8), chasers(8), games=16, max_steps=100_000)
    assert len(reverse) == 16 and np.mean(reverse) <= 0.2


def test_cross_play_batched_table():
    env = arena()
    batch_env = make_batch_env("arena_duel", 4, seed=0)
    factories = {"chaser": chasers, "idle": lambda seats: SeatActors(Idle, seats)}
    table, elo = cross_play(env, ["chaser", "idle"], factories, 8, 100_000, batch_env)
    assert table[0, 1] + table[1, 0] == pytest.approx(1.0)
    assert table[0, 1] >= 0.75
    assert elo.rating("chaser") > elo.rating("idle")


def test_seed_makes_the_games_repeat():
    def scores(seed):
        batch_env = make_batch_env("arena_duel", 4, seed=seed)
        return play_batched(batch_env, randoms(8), randoms(8), games=8, max_steps=100_000)

    def first_obs(seed):
        return make_batch_env("arena_duel", 4, seed=seed).reset()[0]

    np.testing.assert_array_equal(first_obs(5), first_obs(5))
    assert not np.array_equal(first_obs(5), first_obs(6))
    assert scores(5) == scores(5)


def test_num_envs_needs_a_batched_env(capsys):
    assert main(["--env=doom_duel", "--players", "random", "random", "--num_envs=4"]) == 2
    err = capsys.readouterr().err
    assert "--num_envs=4" in err and "doom_duel" in err and "no batched version" in err
    assert main(["--env=arena_duel", "--players", "random", "random", "--num_envs=0"]) == 2
    assert "--num_envs=0: must be at least 1" in capsys.readouterr().err


def test_match_main_batched_prints_the_table(capsys):
    code = main(["--env=arena_duel", "--players", "chaser", "random", "--games=16", "--num_envs=8"])
    assert code == 0
    out = capsys.readouterr().out
    row = next(line.split() for line in out.splitlines() if line.split()[:2] == ["chaser", "-"])
    assert float(row[-1]) >= 0.8  # chaser's win rate against random
