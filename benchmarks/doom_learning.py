"""Learning quality on VizDoom: `doom_basic` after a frame budget, and a `doom_duel` PBT population
scored against the built-in bot.

    python benchmarks/doom_learning.py basic [--frames 1000000]
    python benchmarks/doom_learning.py duel [--frames 500000] [--eval_episodes 20]

--frames is per population member (as `--train_for_env_steps`), with frameskip counted.

basic: trains one policy on doom_basic (2 workers x 4 envs, CPU) and prints the mean episode
reward (the scenario's own reward, which is also the shaped return with default shaping) and
the success rate over the last 100 episodes.

duel: trains an 8-policy PBT self-play population on doom_duel, picks the member with the best
PBT objective (win rate in self-play over its recent matches) and plays it against one bot in
doom_duel_bots with `launch.enjoy`; prints its win rate (more frags than the bot) and frags.
Both write their runs under --train_dir (default /tmp/rl_pbt_bench) and keep the logs there.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.runs import ROOT, train_run  # noqa: E402


def train(args, experiment: str, flags: list[str]) -> dict:
    common = [
        f"--train_for_env_steps={args.frames}",
        "--restart_behavior=overwrite",
        "--stats_avg=100",
        "--device=cpu",
        f"--seed={args.seed}",
    ]
    os.makedirs(args.train_dir, exist_ok=True)
    start = time.monotonic()
    summary = train_run(common + flags, args.train_dir, experiment, echo=True)
    print(
        f"trained {summary['frames']:,} frames in {time.monotonic() - start:,.0f} s "
        f"({summary['fps_median_second_half'] or 0:,.0f} frames/s, median of the second half)"
    )
    return summary


def basic(args) -> None:
    summary = train(
        args, "doom_basic_learning", ["--env=doom_basic", "--num_workers=2", "--num_policies=1"]
    )
    p = summary["policies"]["0"]
    returns = p["recent_returns"]
    print(
        f"doom_basic after {summary['frames']:,} frames: mean episode reward over the last "
        f"{len(returns)} episodes {np.mean(returns):.1f} (episodes: {p['episodes']:,}); "
        f"success rate (true_objective) {p['mean_objective']:.2f}"
    )


def duel(args) -> None:
    experiment = "doom_duel_pbt_learning"
    summary = train(
        args,
        experiment,
        [
            "--env=doom_duel",
            "--with_pbt",
            f"--num_policies={args.num_policies}",
            f"--num_workers={args.num_workers}",
            f"--pbt_period_env_steps={args.pbt_period}",
            f"--pbt_start_mutation={args.pbt_period}",
        ],
    )
    objectives = {
        int(p): v["mean_objective"]
        for p, v in summary["policies"].items()
        if v["mean_objective"] is not None
    }
    for p in sorted(objectives):
        print(f"  p{p}: self-play win rate {objectives[p]:.2f}")
    best = max(objectives, key=objectives.get)
    print(f"best member by PBT objective: p{best}; playing {args.eval_episodes} games vs 1 bot")
    cmd = [
        sys.executable,
        "-m",
        "launch.enjoy",
        "--env=doom_duel_bots",
        f"--experiment={experiment}",
        f"--train_dir={args.train_dir}",
        f"--policy={best}",
        f"--episodes={args.eval_episodes}",
    ]
    print("$", " ".join(cmd[1:]), flush=True)
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    means = dict(re.findall(r"mean (\w+) (-?[\d.]+)", out))
    print(
        f"doom_duel PBT ({args.num_policies} members, {summary['frames']:,} frames in all): "
        f"best member "
        f"p{best} vs 1 bot over {args.eval_episodes} games: win rate {means.get('win')}, "
        f"frags {means.get('frags')} (bot {means.get('best_bot_frags')}), "
        f"deaths {means.get('deaths')}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("which", choices=["basic", "duel"])
    parser.add_argument("--frames", type=int, default=None, help="env frames per member")
    parser.add_argument("--train_dir", default="/tmp/rl_pbt_bench")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num_policies", type=int, default=8, help="duel: population size")
    parser.add_argument("--num_workers", type=int, default=2, help="duel: rollout workers")
    parser.add_argument("--pbt_period", type=int, default=100_000, help="duel: PBT period")
    parser.add_argument("--eval_episodes", type=int, default=20, help="duel: games vs the bot")
    args = parser.parse_args()
    if args.frames is None:
        args.frames = 1_000_000 if args.which == "basic" else 500_000
    basic(args) if args.which == "basic" else duel(args)


if __name__ == "__main__":
    main()
