"""`benchmarks/connect_four_critic.py` looks one move ahead: the outcome of each legal column
and the position after it, as the other side sees it, match the env's own step."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

import envs  # noqa: E402,F401  (registers connect_four)
from benchmarks.connect_four_critic import after_moves  # noqa: E402
from launch import match  # noqa: E402
from rl_pbt.envs.registry import make_env  # noqa: E402


def test_after_moves_match_the_env():
    env = make_env("connect_four", match.seeded(3), {"env_id": 0})
    trial = make_env("connect_four", match.seeded(3), {"env_id": 1})
    rng = np.random.default_rng(3)
    checked = {"win": 0, "goes on": 0}
    obs, _ = env.reset()
    for _ in range(15):  # games
        done, moves = False, []
        while not done:
            m = env.agent_names.index(env.env.agent_selection)
            cols, outcome, nxt = after_moves(obs[m])
            assert cols == np.flatnonzero(obs[m]["action_mask"]).tolist()
            for col, out, after in zip(cols, outcome, nxt):
                trial.reset()
                for played in moves:  # the game so far, then the column
                    trial.step([played, played])
                obs2, rew, term, _, _ = trial.step([col, col])
                if np.isnan(out):
                    assert not any(term)
                    seen = np.asarray(obs2[1 - m]["observation"], np.float32).reshape(-1)
                    assert np.array_equal(seen, after)
                    checked["goes on"] += 1
                else:
                    assert all(term) and rew[m] == (1.0 if out == 1.0 else 0.0)
                    checked["win"] += out == 1.0
            move = int(rng.choice(cols))
            moves.append(move)
            obs, _, term, trunc, _ = env.step([move, move])
            done = any(term) or any(trunc)
    assert checked["win"] >= 30 and checked["goes on"] >= 1000
