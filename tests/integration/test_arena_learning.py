"""Self-play learns: after a short 2-policy run on the arena, each member beats a uniformly
random player in at least 80% of 200 games (scored by launch/match: win 1, draw 0.5)."""

import numpy as np

from launch.match import cross_play, make_player
from rl_pbt import parse_cfg, train
from rl_pbt.envs.registry import make_env
from rl_pbt.envs.wrappers import as_multiagent


class Args:
    def __init__(self, train_dir):
        self.train_dir = str(train_dir)
        self.experiment = "sp"
        self.env = "arena_duel"
        self.deterministic = False


def test_selfplay_beats_random(tmp_path):
    import envs  # noqa: F401

    cfg = parse_cfg(
        [
            "--env=arena_duel",
            "--num_policies=2",
            "--train_for_env_steps=400000",
            f"--train_dir={tmp_path}",
            "--experiment=sp",
            "--seed=1",
            "--status_interval=30",
        ]
    )
    assert train(cfg) == 0
    env = as_multiagent(
        make_env("arena_duel", None, {"worker_index": 0, "vector_index": 0, "env_id": 7})
    )
    args = Args(tmp_path)
    names = ["p0", "p1", "random"]
    factories = {n: make_player(n, env, args, seed=k) for k, n in enumerate(names)}
    table, _ = cross_play(env, names, factories, games=200, max_steps=2_000_000)
    vs_random = table[:2, 2]
    assert np.all(vs_random >= 0.8), f"win rates vs random: {vs_random}"
