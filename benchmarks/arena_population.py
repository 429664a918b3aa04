"""Population strength on the arena: does PBT make a better best member than no PBT?

Trains two self-play populations of the same size on `arena_duel` with the same env-frame
budget per member and the same seed: one with PBT (learning and shaping values mutated,
weights copied from winners), one without (every member keeps the defaults).

The best member of each population is picked by a round robin of all the members of both
(`--rr_games` games per pairing, run in the batched arena): the member with the highest mean
score against the other 2 * policies - 1. Every member meets the same opponents, as they are at
the end. The training Elo (`elo.json`) is a poorer guide: it averages over each member's whole
history (and a PBT copy inherits its source's rating), and it only measures a member against
its own population, which in a PBT population is largely one family. The two picks then play
`--games` new games against each other (half on each side) and, for scale, against a uniformly
random player; the pairing of the two training-Elo bests is printed too, and the mean score of
the PBT members against the no-PBT members in the round robin.

    python benchmarks/arena_population.py                  # 8 members, 500k frames each
    python benchmarks/arena_population.py --policies 4 --steps 200000 --games 200
    # the README's setting (snapshot opponents in both, one replacement per round)
    python benchmarks/arena_population.py --seed 2 --pbt_flags=--pbt_replace_fraction=0.125 \
        --tag rf125 --flags "--selfplay_snapshot_prob=0.25 \
        --selfplay_snapshot_every_env_steps=100000 --selfplay_snapshot_pool_size=24"

Prints the win rate of PBT's best against no-PBT's best (draw = 0.5). Goal: above 0.6.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from types import SimpleNamespace

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from runs import train_run  # noqa: E402

from launch.match import cross_play, make_batch_env, make_batch_player  # noqa: E402
from rl_pbt.envs.registry import make_env  # noqa: E402
from rl_pbt.envs.wrappers import as_multiagent  # noqa: E402
from rl_pbt.sampling.elo import EloRatings  # noqa: E402


def flags_slug(flags: str) -> str:
    """'--selfplay_snapshot_prob=0.25 --x=1' -> 'selfplay_snapshot_prob0.25_x1' (run names)."""
    return "_".join(f.lstrip("-").replace("=", "") for f in flags.split())


def train(args, pbt: bool) -> str:
    kind = "nopbt"
    if args.flags:
        kind += "_" + flags_slug(args.flags)
    if pbt:
        kind = "pbt" + ("" if args.target == "true_objective" else "_" + args.target)
        if args.flags:
            kind += "_" + flags_slug(args.flags)
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
        *args.flags.split(),
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
    parser.add_argument(
        "--games", type=int, default=400, help="games between the two best members (and random)"
    )
    parser.add_argument(
        "--rr_games",
        type=int,
        default=50,
        help="games per pairing in the round robin that picks each population's best",
    )
    parser.add_argument("--num_envs", type=int, default=100, help="games played at once")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--target",
        default="true_objective",
        choices=["true_objective", "elo", "vs_snapshots"],
        help="what PBT ranks on: the recent win rate (true_objective), the Elo rating, or the "
        "win rate against frozen snapshots alone (vs_snapshots; needs snapshots in --flags)",
    )
    parser.add_argument("--train_dir", default="/tmp/rl_pbt_bench")
    parser.add_argument("--search_space", default=None, help="--pbt_search_space of the PBT run")
    parser.add_argument(
        "--pbt_flags",
        default="",
        help="more training flags for the PBT run only, e.g. '--pbt_replace_fraction=0.125'",
    )
    parser.add_argument(
        "--flags",
        default="",
        help="more training flags for both runs, e.g. '--selfplay_snapshot_prob=0.25'",
    )
    parser.add_argument("--tag", default="", help="added to the PBT run's experiment name")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="skip training a population whose run in --train_dir has finished (same flags)",
    )
    args = parser.parse_args()
    os.makedirs(args.train_dir, exist_ok=True)
    torch.set_num_threads(1)  # small batches: more threads only contend for the cores

    pbt_exp, plain_exp = train(args, pbt=True), train(args, pbt=False)
    elo_best = [f"{pbt_exp}:p{best_member(args, pbt_exp)}"]
    elo_best.append(f"{plain_exp}:p{best_member(args, plain_exp)}")

    env = as_multiagent(
        make_env("arena_duel", None, {"worker_index": 0, "vector_index": 0, "env_id": 12345})
    )
    batch_env = make_batch_env("arena_duel", args.num_envs, args.seed)
    match_args = SimpleNamespace(
        train_dir=args.train_dir, experiment=pbt_exp, env="arena_duel", deterministic=False
    )
    members = [f"{exp}:p{p}" for exp in (pbt_exp, plain_exp) for p in range(args.policies)]
    players = members + ["random"]
    factories = {m: make_batch_player(m, env, match_args, 100 + k) for k, m in enumerate(players)}

    def pairings(players: list[str], games: int) -> np.ndarray:
        table, _ = cross_play(env, players, factories, games, 10**8, batch_env=batch_env)
        return table

    # round robin of all members of both populations: each member's mean score against the
    # other 2 * policies - 1 (the same opponents for everyone, most of them outside its own
    # population, all of them as they are now, unlike the training Elo)
    start = time.monotonic()
    rr = pairings(members, args.rr_games)
    score = np.nanmean(rr, axis=1)
    P = args.policies
    best = [int(np.argmax(score[:P])), P + int(np.argmax(score[P:]))]
    print(
        f"\nround robin of the {2 * P} members, {args.rr_games} games per pairing "
        f"({time.monotonic() - start:,.0f} s); mean score against the other {2 * P - 1}:"
    )
    for label, rows in (("PBT", range(P)), ("no-PBT", range(P, 2 * P))):
        print(f"  {label:6s} " + ", ".join(f"p{r % P} {score[r]:.3f}" for r in rows))
    print(
        f"  PBT members vs no-PBT members, mean of the {P}x{P} pairings: {np.mean(rr[:P, P:]):.3f}"
    )

    print(f"\n{args.games} new games per pairing, draw = 0.5, row player's win rate:")
    final = [members[best[0]], members[best[1]], "random"]
    table = pairings(final, args.games)
    print(f"  PBT best ({final[0]}) vs no-PBT best ({final[1]}): {table[0, 1]:.3f}")
    print(f"  PBT best vs random: {table[0, 2]:.3f}; no-PBT best vs random: {table[1, 2]:.3f}")
    if elo_best != final[:2]:
        table = pairings(elo_best, args.games)
        print(
            f"  by training Elo instead: PBT best ({elo_best[0]}) vs no-PBT best "
            f"({elo_best[1]}): {table[0, 1]:.3f}"
        )
    else:
        print("  (the training Elo picks the same two members)")
    env.close()


if __name__ == "__main__":
    main()
