"""launch/match: batched games (the same players and scores as one game at a time), the
rating fit, and the errors of match and enjoy for a newcomer's commands."""

import os
import random

import gymnasium as gym
import numpy as np
import pytest
import torch

import envs  # noqa: F401
from launch import enjoy
from launch import match as match_module
from launch.match import (
    BatchPolicyActor,
    RandomActor,
    SeatActors,
    cross_play,
    fit_ratings,
    main,
    make_batch_env,
    make_player,
    play,
    play_batched,
)
from rl_pbt import parse_cfg, register_env
from rl_pbt.config.parse import save_cfg
from rl_pbt.envs.registry import make_env
from rl_pbt.envs.scripted import register_scripted_policy
from rl_pbt.envs.wrappers import as_multiagent
from rl_pbt.learning.checkpoints import write_checkpoint
from rl_pbt.logging.files import checkpoint_dir
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
    # sampling near temperature 0 is the argmax: the temperature reaches the model
    cold = BatchPolicyActor(model, env.observation_space, env.action_space, seats, False, 1e-6)
    single = [
        PolicyActor(model, env.observation_space, env.action_space, True) for _ in range(seats)
    ]
    single_cold = [
        PolicyActor(model, env.observation_space, env.action_space, False, 1e-6)
        for _ in range(seats)
    ]
    rng = np.random.default_rng(0)
    for step in range(5):
        obs = rng.uniform(-1, 1, (seats, env.observation_space.shape[0])).astype(np.float32)
        with torch.no_grad():
            expected = [s.act(o) for s, o in zip(single, obs)]
        assert batch.act(obs).tolist() == expected
        assert cold.act(obs).tolist() == expected
        assert [c.act(o) for c, o in zip(single_cold, obs)] == expected
        if step == 2:  # a new episode in seat 1 only
            batch.reset(slice(1, 2))
            cold.reset(slice(1, 2))
            single[1].reset()
            single_cold[1].reset()


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
    table, ratings, played = cross_play(env, ["chaser", "idle"], factories, 8, 100_000, batch_env)
    assert table[0, 1] + table[1, 0] == pytest.approx(1.0)
    assert table[0, 1] >= 0.75
    assert ratings.rating("chaser") > ratings.rating("idle")
    assert ratings.games.tolist() == [8, 8] and played.tolist() == [[0, 8], [8, 0]]
    assert ratings.score[0] == pytest.approx(table[0, 1])


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


def test_fit_ratings_recovers_a_known_win_rate():
    # A wins 75% of 400 games: the difference is 400 * log10(3) = 190.8, the prior barely moves it
    games = [(0, 1, 1.0)] * 300 + [(1, 0, 1.0)] * 100
    elo, stderr = fit_ratings(games, 2)
    assert elo[0] - elo[1] == pytest.approx(400 * np.log10(3), abs=1.5)
    assert elo.sum() == pytest.approx(0.0, abs=1e-6)
    # one game has Fisher information p(1-p) = 3/16 in log-odds: se of the gap = 1/sqrt(75)
    gap_se = 400 / np.log(10) / np.sqrt(400 * 3 / 16)
    assert 2 * stderr[0] == pytest.approx(gap_se, rel=0.02)
    # draws count as half a win: 200 wins, 200 draws of A is again 75%
    elo_draws, _ = fit_ratings([(0, 1, 1.0)] * 200 + [(0, 1, 0.5)] * 200, 2)
    assert elo_draws == pytest.approx(elo, abs=1e-6)


def test_fit_ratings_ignores_the_order_of_the_games_and_keeps_unbeaten_players_finite():
    # A beat B, B beat C, A and C drew: an online update would depend on the order
    games = [(0, 1, 1.0)] * 12 + [(1, 2, 1.0)] * 9 + [(2, 1, 1.0)] * 3 + [(0, 2, 0.5)] * 10
    elo, _ = fit_ratings(games, 3)
    shuffled = list(games)
    random.Random(0).shuffle(shuffled)
    swapped = [(j, i, 1.0 - s) for i, j, s in shuffled]  # the same games seen from the other side
    np.testing.assert_allclose(fit_ratings(shuffled, 3)[0], elo, atol=1e-6)
    np.testing.assert_allclose(fit_ratings(swapped, 3)[0], elo, atol=1e-6)
    assert elo[0] > elo[1]  # A beat B every time: A ranks above B
    unbeaten, stderr = fit_ratings([(0, 1, 1.0)] * 50, 2)
    assert np.all(np.isfinite(unbeaten)) and 200 < unbeaten[0] - unbeaten[1] < 2000
    assert np.all(np.isfinite(stderr))


def fake_run(train_dir, env_name="arena_duel", name="run", extra=()) -> str:
    """An experiment folder as training leaves it: config.json and one checkpoint of p0."""
    cfg = parse_cfg(
        [f"--env={env_name}", f"--experiment={name}", f"--train_dir={train_dir}", *extra]
    )
    exp_dir = os.path.join(str(train_dir), name)
    save_cfg(cfg, os.path.join(exp_dir, "config.json"))
    env = as_multiagent(make_env(env_name, cfg, {"env_id": 0}))
    model = make_actor_critic(env.observation_space, env.action_space, cfg)
    folder = checkpoint_dir(exp_dir, 0)
    write_checkpoint(folder, 1, 10, {"model": model.state_dict()}, keep=1, root=exp_dir)
    return exp_dir


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def test_match_pn_without_experiment_names_the_flag(capsys):
    assert main(["--env=arena_duel", "--players", "p0", "p1", "--games=2"]) == 2
    err = one_line_error(capsys)
    assert "'p0'" in err and "--experiment" in err
    assert main(["--players", "random", "chaser"]) == 2
    assert "--env" in one_line_error(capsys)


def test_match_reads_the_env_of_the_run(tmp_path, capsys):
    fake_run(tmp_path)
    args = [f"--train_dir={tmp_path}", "--experiment=run", "--players", "p0", "chaser"]
    assert main(args + ["--games=2"]) == 0  # no --env: the run's arena_duel
    assert "chaser" in capsys.readouterr().out
    assert main(args + ["--games=2", "--env=arena_2v2"]) == 2
    err = one_line_error(capsys)
    assert "'p0'" in err and "arena_duel" in err and "--env=arena_2v2" in err


def test_enjoy_runs_a_sample_factory_command_line(tmp_path, capsys):
    """Sample Factory's enjoy flags (--max_num_episodes, --policy_index, --no_render) work."""
    fake_run(tmp_path)
    argv = [f"--train_dir={tmp_path}", "--experiment=run", "--max_num_episodes=2"]
    assert enjoy.main(argv + ["--policy_index=0", "--no_render"]) == 0
    out = capsys.readouterr().out
    assert "episode 2:" in out and "episode 3:" not in out
    args = enjoy.build_parser().parse_args(argv + ["--policy_index=3"])
    assert (args.episodes, args.policy, args.no_render) == (2, 3, False)


def test_enjoy_takes_the_env_from_the_run(tmp_path, capsys):
    fake_run(tmp_path)
    base = [f"--train_dir={tmp_path}", "--experiment=run", "--episodes=1"]
    assert enjoy.main(base) == 0
    assert "episode 1:" in capsys.readouterr().out
    assert enjoy.main(base + ["--env=arena_duel"]) == 0  # agreeing is fine
    capsys.readouterr()
    assert enjoy.main(base + ["--env=arena_2v2"]) == 2
    err = one_line_error(capsys)
    assert "--env=arena_2v2" in err and "arena_duel" in err
    assert enjoy.main([f"--train_dir={tmp_path}", "--experiment=nope"]) == 2
    assert "config.json" in one_line_error(capsys)


def test_random_player_keeps_to_the_mask_of_every_head():
    """`random` plays uniformly over the legal actions, with one slice of the mask per head of
    a MultiDiscrete too (it sampled the whole space there)."""
    from rl_pbt.envs.scripted import RandomActor

    space = gym.spaces.MultiDiscrete([3, 2])
    actor = RandomActor(space, seed=0)
    mask = np.array([0, 1, 1, 1, 0], np.int8)  # head 0: 1 or 2; head 1: 0
    picks = np.array([actor.act({"observation": np.zeros(2), "action_mask": mask})
                      for _ in range(300)])  # fmt: skip
    assert picks.shape == (300, 2) and set(picks[:, 1]) == {0}
    assert set(picks[:, 0]) == {1, 2}  # both legal ones, never the masked 0
    discrete = RandomActor(gym.spaces.Discrete(4), seed=0)
    legal = {discrete.act({"action_mask": np.array([0, 0, 1, 1])}) for _ in range(100)}
    assert legal == {2, 3}


def test_match_plays_the_env_as_the_run_trained_it(tmp_path, monkeypatch, capsys):
    """The env's flags of the run (a 40-step arena here), not the env's defaults (300 steps):
    before, the members played a game they never trained on. Flags for training games only
    (connect four's random openings) stay at their defaults."""
    fake_run(tmp_path, extra=["--arena_episode_steps=40"])
    lengths = []

    def counted(env):
        env, steps = as_multiagent(env), [0]
        step = env.step

        def counting(actions):
            out = step(actions)
            steps[0] += 1
            if all(out[2]) or all(out[3]):
                lengths.append(steps[0])
                steps[0] = 0
            return out

        env.step = counting
        return env

    monkeypatch.setattr(match_module, "as_multiagent", counted)
    argv = [f"--train_dir={tmp_path}", "--experiment=run", "--players", "p0", "chaser"]
    assert main(argv + ["--games=4", "--seed=9"]) == 0
    assert len(lengths) >= 4 and max(lengths) <= 40, lengths
    args = match_module.build_parser().parse_args(argv + ["--seed=9"])
    args.env = "arena_duel"
    cfg = match_module.env_cfg(args)
    assert cfg.arena_episode_steps == 40 and cfg.seed == 9
    fake_run(tmp_path, "connect_four", "c4", extra=["--random_opening_moves=8", "--seed=1"])
    args = match_module.build_parser().parse_args(
        [f"--train_dir={tmp_path}", "--experiment=c4", "--players", "p0", "random"]
    )
    args.env = "connect_four"
    assert match_module.env_cfg(args).random_opening_moves == 0


class NoScore:
    """Two agents, 3-step games, `objective` in the ending step's infos (None: not given)."""

    is_multiagent, num_agents = True, 2

    def __init__(self, objective):
        self.objective, self.t = objective, 0
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.t = 0
        return [np.zeros(1, np.float32)] * 2, [{}, {}]

    def step(self, actions):
        self.t += 1
        done = self.t == 3
        info = {} if not done or self.objective is None else {"true_objective": self.objective}
        if done:
            self.t = 0
        return [np.zeros(1, np.float32)] * 2, [1.0, -1.0], [done] * 2, [False] * 2, [info] * 2

    def close(self):
        pass


@pytest.mark.parametrize("objective", [None, -1.0], ids=["missing", "a_return"])
def test_match_refuses_games_without_a_score(objective, capsys):
    """Before, a game without `true_objective` counted as a draw (a player that won every game
    by reward stood at 0.500), and a return of -1 stopped the tool with a traceback after
    every game was played."""
    name = f"no_score_{objective}"
    register_env(name, lambda full_name, cfg, env_config, render_mode=None: NoScore(objective))
    register_scripted_policy(name, "idle", lambda env, seed=None: Idle())
    assert main([f"--env={name}", "--players", "random", "idle", "--games=4"]) == 2
    err = one_line_error(capsys)
    assert f"--env={name}" in err and "true_objective" in err and "[0, 1]" in err


def test_play_tools_take_bool_flags_as_the_trainer_does(tmp_path, capsys):
    """`--deterministic=True` (and `--no_render=True`) as rl-pbt-train takes `--with_pbt=True`:
    before, 'ignored explicit argument'."""
    fake_run(tmp_path)
    base = [f"--train_dir={tmp_path}", "--experiment=run"]
    for value, want in (("", True), ("=True", True), ("=false", False)):
        args = enjoy.build_parser().parse_args(base + [f"--deterministic{value}"])
        assert args.deterministic is want
        args = match_module.build_parser().parse_args(
            base + [f"--deterministic{value}", "--players", "p0", "chaser"]
        )
        assert args.deterministic is want
    assert enjoy.main(base + ["--episodes=1", "--deterministic=True", "--no_render=True"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        enjoy.main(base + ["--deterministic=maybe"])
    assert stop.value.code == 2
    err = one_line_error(capsys)
    assert "--deterministic" in err and "True/False" in err
