"""Population strength on the arena: does PBT make a better best member than no PBT?

Trains two self-play populations of the same size on `arena_duel` with the same env-frame
budget per member and the same seed: one with PBT (learning and shaping values mutated,
weights copied from winners), one without (every member keeps the defaults). The best member of
each is the one with the highest Elo rating in its own population (`elo.json`, from the
self-play matches during training). They then play `--games` games against each other (half on
each side) and, for scale, against a uniformly random player.

    python benchmarks/arena_population.py                  # 8 members, 500k frames each
    python benchmarks/arena_population.py --policies 4 --steps 200000 --games 200

Prints the win rate of PBT's best against no-PBT's best (draw = 0.5). Goal: above 0.6.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from types import SimpleNamespace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from runs import train_run  # noqa: E402

from launch.match import cross_play, make_player  # noqa: E402
from rl_pbt.envs.registry import make_env  # noqa: E402
from rl_pbt.envs.wrappers import as_multiagent  # noqa: E402
from rl_pbt.sampling.elo import EloRatings  # noqa: E402


def train(args, pbt: bool) -> str:
    kind = "nopbt"
    if pbt:
        kind = "pbt" + ("_elo" if args.target == "elo" else "")
        if args.search_space:
            kind += "_" + os.path.splitext(os.path.basename(args.search_space))[0]
        if args.tag:
            kind += "_" + args.tag
    exp = f"arena_{kind}_s{args.seed}"
    done = os.path.join(args.train_dir, exp, "summary.json")
    if args.reuse and os.path.isfile(done):
        print(f"  {exp}: reusing the finished run in {args.train_dir}", flush=True)
        return exp
    flags = [
        "--env=arena_duel",
        f"--num_policies={args.policies}",
        f"--train_for_env_steps={args.steps}",
        f"--seed={args.seed}",
        "--restart_behavior=overwrite",
        "--status_interval=30",
        "--save_every_sec=100000",
    ]
    if pbt:
        flags += [
            "--with_pbt",
            f"--pbt_period_env_steps={args.period}",
            f"--pbt_start_mutation={args.period}",
            f"--pbt_target_objective={args.target}",
        ]
        if args.search_space:
            flags.append(f"--pbt_search_space={args.search_space}")
        flags += args.pbt_flags.split()
    start = time.monotonic()
    summary = train_run(flags, args.train_dir, exp, echo=True)
    print(
        f"  {exp}: {summary['frames']:,} frames in {time.monotonic() - start:,.0f} s "
        f"({summary['fps_median_second_half'] or 0:,.0f} frames/s)",
        flush=True,
    )
    return exp


def best_member(args, exp: str) -> int:
    with open(os.path.join(args.train_dir, exp, "elo.json")) as f:
        elo = EloRatings.from_dict(json.load(f))
    live = {int(k): elo.rating(k) for k in elo.keys() if str(k).isdigit()}
    best = max(live, key=live.get)
    ranked = ", ".join(f"p{p} {r:.0f}" for p, r in sorted(live.items(), key=lambda kv: -kv[1]))
    print(f"  {exp} Elo: {ranked}")
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--policies", type=int, default=8)
    parser.add_argument("--steps", type=int, default=500_000, help="env frames per member")
    parser.add_argument("--period", type=int, default=50_000, help="PBT period, frames")
    parser.add_argument("--games", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--target",
        default="true_objective",
        choices=["true_objective", "elo"],
        help="what PBT ranks on: the recent win rate (true_objective) or the Elo rating",
    )
    parser.add_argument("--train_dir", default="/tmp/rl_pbt_bench")
    parser.add_argument("--search_space", default=None, help="--pbt_search_space of the PBT run")
    parser.add_argument(
        "--pbt_flags",
        default="",
        help="more training flags for the PBT run only, e.g. '--pbt_replace_fraction=0.125'",
    )
    parser.add_argument("--tag", default="", help="added to the PBT run's experiment name")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="skip training a population whose run in --train_dir has finished (same flags)",
    )
    args = parser.parse_args()
    os.makedirs(args.train_dir, exist_ok=True)

    pbt_exp, plain_exp = train(args, pbt=True), train(args, pbt=False)
    players = [f"{pbt_exp}:p{best_member(args, pbt_exp)}"]
    players.append(f"{plain_exp}:p{best_member(args, plain_exp)}")
    players.append("random")

    env = as_multiagent(
        make_env("arena_duel", None, {"worker_index": 0, "vector_index": 0, "env_id": 12345})
    )
    match_args = SimpleNamespace(
        train_dir=args.train_dir, experiment=pbt_exp, env="arena_duel", deterministic=False
    )
    factories = {p: make_player(p, env, match_args, 100 + k) for k, p in enumerate(players)}
    table, _ = cross_play(env, players, factories, args.games, max_steps=10_000_000)
    env.close()
    print(f"\n{args.games} games per pairing, draw = 0.5, row player's win rate:")
    print(f"  PBT best ({players[0]}) vs no-PBT best ({players[1]}): {table[0, 1]:.3f}")
    print(f"  PBT best vs random: {table[0, 2]:.3f}; no-PBT best vs random: {table[1, 2]:.3f}")


if __name__ == "__main__":
    main()
