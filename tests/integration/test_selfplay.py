"""Self-play bookkeeping on the arena: Elo ratings, frozen snapshots as opponents."""

import json
import os

from rl_pbt import parse_cfg, train
from tests.small_run import SMALL_RUN


def test_snapshots_play_and_are_rated(tmp_path):
    import envs  # noqa: F401  (registers arena_duel)

    cfg = parse_cfg(
        [
            "--env=arena_duel",
            "--num_policies=2",
            *SMALL_RUN,
            "--selfplay_snapshot_prob=0.5",
            "--selfplay_snapshot_every_env_steps=5000",
            "--selfplay_snapshot_pool_size=3",
            "--matchmaking=elo",
            "--train_for_env_steps=30000",
            f"--train_dir={tmp_path}",
            "--experiment=sp",
            "--status_interval=30",
        ]
    )
    assert train(cfg) == 0
    with open(os.path.join(tmp_path, "sp", "elo.json")) as f:
        elo = json.load(f)
    keys = {str(e[0]) for e in elo["entries"]}
    games = {str(e[0]): e[2] for e in elo["entries"]}
    snaps = [k for k in keys if k.startswith("snap:")]
    assert {"0", "1"} <= keys
    assert 1 <= len(snaps) <= 3  # the pool is bounded; evicted snapshots leave the table
    assert sum(games[k] for k in snaps) > 0  # snapshots were actually played against
    with open(os.path.join(tmp_path, "sp", "summary.json")) as f:
        summary = json.load(f)
    assert all(p["env_steps"] >= 30000 for p in summary["policies"].values())
