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

With `--null`, a second no-PBT population (seed + 100) goes through the same comparison with
the first: the spread of that figure is what chance alone gives on this game. A single pairing
of two members is decided largely by which styles meet (the arena is strongly non-transitive at
these budgets), so compare the PBT figure with the null one over several seeds.

    python benchmarks/arena_population.py --seeds 1 2 3 --null   # 8 members, 500k frames each
    python benchmarks/arena_population.py --seeds 1 2 --null --steps 2000000 --period 100000
    python benchmarks/arena_population.py --policies 4 --steps 200000 --games 200
    # two finished populations, e.g. 2M frames per member against 500k (same seed)
    python benchmarks/arena_population.py --versus arena_nopbt_2000k_s1 arena_nopbt_s1
    # snapshot opponents in both, one replacement per round
    python benchmarks/arena_population.py --seeds 2 --pbt_flags=--pbt_replace_fraction=0.125 \
        --tag rf125 --flags "--selfplay_snapshot_prob=0.25 \
        --selfplay_snapshot_every_env_steps=100000 --selfplay_snapshot_pool_size=24"

Prints the win rate of PBT's best against no-PBT's best (draw = 0.5) per seed, the mean score
of the PBT members against the no-PBT members, the same two for the null, and a summary.
Goal: PBT's best above 0.6.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from runs import arena_cross_play, train_run  # noqa: E402

from rl_pbt.sampling.elo import EloRatings  # noqa: E402

DEFAULT_STEPS = 500_000


def flags_slug(flags: str) -> str:
    """'--selfplay_snapshot_prob=0.25 --x=1' -> 'selfplay_snapshot_prob0.25_x1' (run names)."""
    return "_".join(f.lstrip("-").replace("=", "") for f in flags.split())


def train(args, seed: int, pbt: bool) -> str:
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
    if args.steps != DEFAULT_STEPS:
        kind += f"_{args.steps // 1000}k"
    exp = f"arena_{kind}_s{seed}"
    done = os.path.join(args.train_dir, exp, "summary.json")
    if args.reuse and os.path.isfile(done):
        print(f"  {exp}: reusing the finished run in {args.train_dir}", flush=True)
        return exp
    flags = [
        "--env=arena_duel",
        f"--num_policies={args.policies}",
        f"--train_for_env_steps={args.steps}",
        f"--seed={seed}",
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


def elo_best(args, exp: str) -> str:
    """The member with the highest training Elo (elo.json), as EXPERIMENT:pN."""
    with open(os.path.join(args.train_dir, exp, "elo.json")) as f:
        elo = EloRatings.from_dict(json.load(f))
    live = {int(k): elo.rating(k) for k in elo.keys() if str(k).isdigit()}
    return f"{exp}:p{max(live, key=live.get)}"


def compare(args, exp_a: str, exp_b: str, seed: int, names=("PBT", "no-PBT")) -> dict:
    """Round robin of the members of both populations (the same opponents for everyone, as
    they are now); each population's best plays the other's `--games` new games. Returns
    {"best": A best vs B best, "mean": A members vs B members (mean of the PxP pairings)}."""
    P = args.policies
    members = [f"{exp}:p{p}" for exp in (exp_a, exp_b) for p in range(P)]
    start = time.monotonic()
    rr = arena_cross_play(args.train_dir, members, args.rr_games, args.num_envs, seed)
    score = np.nanmean(rr, axis=1)
    best = [members[int(np.argmax(score[:P]))], members[P + int(np.argmax(score[P:]))]]
    mean = float(np.mean(rr[:P, P:]))
    print(
        f"\n{names[0]} vs {names[1]}: round robin of the {2 * P} members, {args.rr_games} games "
        f"per pairing ({time.monotonic() - start:,.0f} s); mean score against the other "
        f"{2 * P - 1}:"
    )
    for label, rows in ((names[0], range(P)), (names[1], range(P, 2 * P))):
        print(f"  {label:6s} " + ", ".join(f"p{r % P} {score[r]:.3f}" for r in rows))
    print(f"  {names[0]} members vs {names[1]} members, mean of the {P}x{P} pairings: {mean:.3f}")
    table = arena_cross_play(args.train_dir, best + ["random"], args.games, args.num_envs, seed)
    print(
        f"  {args.games} new games, draw = 0.5: {names[0]} best ({best[0]}) vs {names[1]} best "
        f"({best[1]}): {table[0, 1]:.3f}"
    )
    print(f"  bests vs random: {table[0, 2]:.3f}, {table[1, 2]:.3f}", flush=True)
    return {"best": float(table[0, 1]), "mean": mean, "picks": best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--policies", type=int, default=8)
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="env frames per member")
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
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument(
        "--null",
        action="store_true",
        help="also train a second no-PBT population per seed (seed + 100) and put the two "
        "no-PBT populations through the same comparison: what no difference looks like",
    )
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
        help="more training flags for every run, e.g. '--selfplay_snapshot_prob=0.25'",
    )
    parser.add_argument("--tag", default="", help="added to the PBT run's experiment name")
    parser.add_argument(
        "--versus",
        nargs=2,
        metavar=("EXP_A", "EXP_B"),
        default=None,
        help="train nothing: put two finished populations in --train_dir through the same "
        "comparison (e.g. one trained longer than the other, for scale)",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="skip training a population whose run in --train_dir has finished (same flags)",
    )
    args = parser.parse_args()
    os.makedirs(args.train_dir, exist_ok=True)
    torch.set_num_threads(1)  # small batches: more threads only contend for the cores

    if args.versus:
        compare(args, *args.versus, args.seeds[0], names=("A", "B"))
        return

    results, nulls = [], []
    for seed in args.seeds:
        print(f"\n=== seed {seed}", flush=True)
        pbt_exp, plain_exp = train(args, seed, pbt=True), train(args, seed, pbt=False)
        result = compare(args, pbt_exp, plain_exp, seed)
        by_elo = [elo_best(args, pbt_exp), elo_best(args, plain_exp)]
        if by_elo != result["picks"]:
            table = arena_cross_play(args.train_dir, by_elo, args.games, args.num_envs, seed)
            print(f"  by training Elo instead: {by_elo[0]} vs {by_elo[1]}: {table[0, 1]:.3f}")
        results.append(result)
        if args.null:
            other = train(args, seed + 100, pbt=False)
            nulls.append(compare(args, plain_exp, other, seed, names=("no-PBT", "no-PBT'")))

    print(f"\nsummary, {args.policies} members x {args.steps:,} frames, seeds {args.seeds}:")
    for label, rows in (("PBT vs no-PBT", results), ("no-PBT vs no-PBT' (null)", nulls)):
        if not rows:
            continue
        bests = ", ".join(f"{r['best']:.3f}" for r in rows)
        means = ", ".join(f"{r['mean']:.3f}" for r in rows)
        print(
            f"  {label}: best vs best {bests} (mean {np.mean([r['best'] for r in rows]):.3f}); "
            f"members vs members {means} (mean {np.mean([r['mean'] for r in rows]):.3f})"
        )


if __name__ == "__main__":
    main()
