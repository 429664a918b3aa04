"""Shared by the benchmark scripts: run one training command with its output in a log file;
play arena matches between trained members and baselines."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_logged(cmd: list[str], log_path: str, name: str) -> None:
    """Run `cmd` from the repo root, output to `log_path`; on failure print its tail and raise."""
    with open(log_path, "w") as f:
        status = subprocess.call(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    if status != 0:
        with open(log_path) as f:
            print(f.read()[-3000:])
        raise RuntimeError(f"run {name} failed")


def train_run(flags: list[str], train_dir: str, experiment: str, echo: bool = False) -> dict:
    """`python -m launch.train FLAGS` as `experiment` under `train_dir`, its output in
    `{train_dir}/{experiment}.log`; returns the run's summary.json."""
    cmd = [
        sys.executable,
        "-m",
        "launch.train",
        *flags,
        f"--train_dir={train_dir}",
        f"--experiment={experiment}",
    ]
    if echo:
        print("$", " ".join(cmd[1:]), flush=True)
    run_logged(cmd, os.path.join(train_dir, f"{experiment}.log"), experiment)
    with open(os.path.join(train_dir, experiment, "summary.json")) as f:
        return json.load(f)


def arena_cross_play(train_dir: str, players: list[str], games: int, num_envs: int, seed: int):
    """Every pairing of `players` (`EXPERIMENT:pN`, `random`, `chaser`) plays `games` games of
    `arena_duel`, half on each side, `num_envs` at a time in the batched arena: the row player's
    score table (1 win, 0.5 draw, 0 loss; NaN on the diagonal)."""
    from types import SimpleNamespace

    from launch.match import cross_play, make_batch_env, make_batch_player
    from rl_pbt.envs.registry import make_env
    from rl_pbt.envs.wrappers import as_multiagent

    env = as_multiagent(
        make_env("arena_duel", None, {"worker_index": 0, "vector_index": 0, "env_id": 12345})
    )
    batch_env = make_batch_env("arena_duel", num_envs, seed)
    args = SimpleNamespace(
        train_dir=train_dir, experiment=None, env="arena_duel", deterministic=False
    )
    factories = {p: make_batch_player(p, env, args, 100 + k) for k, p in enumerate(players)}
    table, _, _ = cross_play(env, players, factories, games, 10**8, batch_env=batch_env)
    env.close()
    return table
