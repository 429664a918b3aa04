"""PBT ranked on strength against a fixed opponent: --pbt_target_objective=vs_scripted:NAME
plays a share of the episodes (--selfplay_scripted_prob) of each member against the env's
scripted player, and only those scores fill PBT's objective windows."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

import envs  # noqa: E402,F401
from rl_pbt import parse_cfg, train  # noqa: E402
from rl_pbt.config.parse import ConfigError  # noqa: E402
from rl_pbt.runtime.runner import Runner  # noqa: E402
from rl_pbt.sampling.elo import scores_against_scripted  # noqa: E402
from rl_pbt.sampling.matchmaking import UniformMatchmaker, scripted_seat  # noqa: E402

OPPONENT = "alphabeta:depth=1"
BASE = [
    "--env=connect_four", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=4",
    "--rollout=16", "--batch_size=128", "--encoder_mlp_layers", "32", "--seed=2",
]  # fmt: skip


def test_matchmaker_seats_the_scripted_player_against_the_first_seat():
    seat = scripted_seat(OPPONENT)
    mm = UniformMatchmaker(4, scripted=(seat, 0.5))
    rng = np.random.default_rng(0)
    draws = [mm.assign(2, rng) for _ in range(2000)]
    scripted = [d for d in draws if seat in d]
    assert 0.45 < len(scripted) / len(draws) < 0.55
    # one member against the player, moving first or second alike
    assert all(sum(isinstance(x, int) for x in d) == 1 for d in scripted)
    first = sum(isinstance(d[0], int) for d in scripted) / len(scripted)
    assert 0.4 < first < 0.6
    # only games of live members against the scripted player alone count
    matches = [([0], [seat], 1.0), ([1], [2], 0.0), ([seat], [3], 0.5), ([0], ["snap:1@5"], 1.0)]
    assert scores_against_scripted(matches, seat) == [(0, 1.0), (3, 0.5)]


def run_vs_scripted(tmp_path, *extra: str) -> str:
    cfg = parse_cfg(
        BASE
        + ["--num_policies=2", "--with_pbt", f"--pbt_target_objective=vs_scripted:{OPPONENT}",
           "--selfplay_scripted_prob=0.5", "--pbt_period_env_steps=2000",
           "--train_for_env_steps=3000", f"--train_dir={tmp_path}", "--experiment=vs", *extra]
    )  # fmt: skip
    assert train(cfg) == 0
    return os.path.join(tmp_path, "vs")


def read_json(*path: str):
    with open(os.path.join(*path)) as f:
        return json.load(f)


def test_pbt_ranks_on_games_against_the_scripted_player(tmp_path):
    exp = run_vs_scripted(tmp_path, "--pbt_start_mutation=2000")
    windows = read_json(exp, "pbt", "state.json")["windows"]
    for p in range(2):  # scores of whole games against alpha-beta: win 1, draw 0.5, loss 0
        assert len(windows[p]) >= 5, windows
        assert set(windows[p]) <= {0.0, 0.5, 1.0}
    assert scripted_seat(OPPONENT) in json.dumps(read_json(exp, "elo.json"))  # rated too


def test_only_games_against_the_scripted_player_fill_the_windows(tmp_path):
    """With windows that never fill or clear, the members' windows hold one score per game
    against the scripted player: about half of their games, not every episode."""
    exp = run_vs_scripted(tmp_path, "--pbt_start_mutation=1000000", "--pbt_objective_window=100000")
    windows = read_json(exp, "pbt", "state.json")["windows"]
    games = {str(e[0]): e[2] for e in read_json(exp, "elo.json")["entries"]}
    against_scripted = games[scripted_seat(OPPONENT)]
    all_games = games["0"] + games["1"]  # every episode a member played, both seats
    assert against_scripted >= 20, games
    counted = len(windows[0]) + len(windows[1])
    # the last reports of a run may reach the ratings and not the windows, or the other way
    assert 0.8 * against_scripted <= counted <= against_scripted + 4, (counted, games)
    assert counted < 0.7 * all_games, (counted, games)


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--pbt_target_objective=vs_scripted:alphabeta"], "--selfplay_scripted_prob > 0"),
        (["--pbt_target_objective=vs_scripted"], "name the scripted player"),
        (["--selfplay_scripted_prob=0.3"], "--pbt_target_objective=vs_scripted:NAME"),
    ],
)
def test_flag_errors(extra, message):
    with pytest.raises(ConfigError, match=message):
        parse_cfg(BASE + extra)


@pytest.mark.parametrize(
    "env,target,message",
    [
        ("connect_four", "vs_scripted:minimax", "no scripted player 'minimax'"),
        ("connect_four", "vs_scripted:alphabeta:depth=0", "depth=0: at least 1"),
        ("CartPole-v1", "vs_scripted:alphabeta", "need a 2-agent env"),
        ("arena_2v2", "vs_scripted:chaser", "need a 2-agent env"),
    ],
)
def test_opponent_errors_name_the_flag_and_touch_nothing(tmp_path, env, target, message):
    cfg = parse_cfg(
        BASE[1:]
        + [f"--env={env}", f"--pbt_target_objective={target}", "--selfplay_scripted_prob=0.2",
           f"--train_dir={tmp_path}", "--experiment=bad"]
    )  # fmt: skip
    with pytest.raises(ConfigError, match=message) as e:
        Runner(cfg)
    assert f"--pbt_target_objective={target}" in str(e.value)
    assert not os.path.exists(os.path.join(tmp_path, "bad"))
