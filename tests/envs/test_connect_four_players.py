"""Fixed opponents of connect four and the scripted-player registry: alpha-beta takes a win and
blocks a loss, beats random play, plays only legal moves; names and parameters are checked
with one-line errors; `rl-pbt-match` prints scores with confidence intervals."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

import envs  # noqa: E402,F401  (registers connect_four and its players)
from envs.connect_four import COLS, AlphaBetaPlayer, drop_row  # noqa: E402
from launch import match  # noqa: E402
from rl_pbt.envs.registry import make_env  # noqa: E402
from rl_pbt.envs.scripted import (  # noqa: E402
    looks_scripted,
    make_scripted,
    parse_scripted,
    scripted_policies,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def obs_of(board: np.ndarray) -> dict:
    """An observation of `board` (+1 mine, -1 theirs), every non-full column legal."""
    planes = np.stack([(board == 1), (board == -1)], axis=-1).astype(np.int8).reshape(-1)
    mask = np.array([drop_row(board.reshape(-1), c) >= 0 for c in range(COLS)], np.int8)
    return {"observation": planes.astype(np.float32), "action_mask": mask}


def test_takes_a_win_and_blocks_a_loss():
    board = np.zeros((6, 7), np.int8)
    board[5, 0:3] = 1  # three of mine on the bottom row: column 3 wins
    board[4, 0:2] = -1
    for depth in (1, 2, 4):
        assert AlphaBetaPlayer(depth, seed=0).act(obs_of(board)) == 3
    board = np.zeros((6, 7), np.int8)
    board[5, 0:3] = -1  # the opponent wins in column 3 unless it is blocked
    board[5, 5:7] = 1
    board[4, 6] = 1
    for seed in range(3):
        assert AlphaBetaPlayer(2, seed=seed).act(obs_of(board)) == 3


def test_a_waiting_agents_all_legal_mask_never_picks_a_full_column():
    board = np.zeros((6, 7), np.int8)
    board[:, 3] = [1, -1, 1, -1, 1, -1]
    obs = obs_of(board)
    obs["action_mask"][:] = 1  # as a waiting agent sees it
    assert AlphaBetaPlayer(2, seed=0).act(obs) != 3


def test_only_legal_moves():
    board = np.zeros((6, 7), np.int8)
    board[:, 3] = [1, -1, 1, -1, 1, -1]  # the centre column, its favourite, is full
    for seed in range(5):
        assert AlphaBetaPlayer(2, seed=seed).act(obs_of(board)) != 3


def test_alphabeta_beats_random_play():
    env = make_env("connect_four", match.seeded(0), {"env_id": 0})
    args = type("Args", (), {"env": "connect_four"})()
    ab = match.make_player("alphabeta:depth=2", env, args, 1)
    rnd = match.make_player("random", env, args, 2)
    scores = match.play(env, [ab(), ab()], [rnd(), rnd()], 20, 10_000)
    scores += [1.0 - s for s in match.play(env, [rnd(), rnd()], [ab(), ab()], 20, 10_000)]
    assert np.mean(scores) >= 0.9


def test_registry_names_and_parameters():
    assert scripted_policies("connect_four") == ["random", "alphabeta"]
    assert "chaser" in scripted_policies("arena_duel")
    assert parse_scripted("alphabeta:depth=4") == ("alphabeta", {"depth": 4})
    assert looks_scripted("alphabeta:depth=4", "connect_four")
    assert not looks_scripted("myrun:p3")  # an experiment's policy
    env = make_env("connect_four", match.seeded(0), {"env_id": 0})
    assert make_scripted("connect_four", "alphabeta:depth=3", env, 0).depth == 3
    with pytest.raises(ValueError, match=r"no scripted player 'minimax'.*known: random, alpha"):
        make_scripted("connect_four", "minimax", env)
    with pytest.raises(ValueError, match="unexpected keyword argument 'width'"):
        make_scripted("connect_four", "alphabeta:width=3", env)
    with pytest.raises(ValueError, match="key=value"):
        parse_scripted("alphabeta:3")
    with pytest.raises(ValueError, match="depth=0: at least 1"):
        make_scripted("connect_four", "alphabeta:depth=0", env)


def test_score_interval():
    lo, hi = match.score_interval([1.0] * 20)
    assert hi == 1.0 and 0.8 < lo < 0.9  # a perfect score still has an interval
    lo, hi = match.score_interval([0.0, 1.0] * 50)
    assert lo < 0.5 < hi and hi - lo == pytest.approx(2 * 1.96 * 0.05, rel=0.05)


def test_match_prints_scores_with_intervals(capsys):
    argv = ["--env=connect_four", "--players", "random", "alphabeta:depth=1", "--games=6"]
    assert match.main(argv) == 0
    out = capsys.readouterr().out
    assert "random vs alphabeta:depth=1: " in out and "over 6 games" in out
    assert match.main(["--env=connect_four", "--players", "random", "minimax"]) == 2
    err = capsys.readouterr().err
    assert "player 'minimax'" in err and "(random, alphabeta for connect_four)" in err
    # another env's scripted player: one line, no traceback
    assert match.main(["--env=connect_four", "--players", "random", "chaser"]) == 2
    err = capsys.readouterr().err
    assert "no scripted player 'chaser' for env 'connect_four'" in err, err


@pytest.mark.parametrize("missing", ["pettingzoo", "pygame"])
def test_without_pettingzoo_or_pygame_tools_say_which_extra_to_install(tmp_path, missing):
    """Connect four's games are PettingZoo's, which import pygame: with either missing,
    rl-pbt-match and rl-pbt-train stop in one line that names the package and the extra."""
    code = (
        f"import sys; sys.modules[{missing!r}] = None\n"  # as if it were not installed
        "from launch import match, train\n"
        "tool = match if sys.argv[1] == 'match' else train\n"
        "sys.exit(tool.main(sys.argv[2:]))"
    )
    runs = {
        "match": ["--env=connect_four", "--players", "random", "alphabeta", "--games=2"],
        "train": ["--env=connect_four", f"--train_dir={tmp_path}", "--train_for_env_steps=100"],
    }
    for tool, argv in runs.items():
        done = subprocess.run(
            [sys.executable, "-c", code, tool, *argv], cwd=ROOT, capture_output=True, text=True
        )
        err = done.stderr.strip().splitlines()
        assert done.returncode == 2, (tool, done.stderr)
        assert len(err) == 1 and missing in err[0], (tool, done.stderr)
        assert 'pip install "rl_pbt[pettingzoo]"' in err[0], (tool, done.stderr)
    assert list(tmp_path.iterdir()) == []
