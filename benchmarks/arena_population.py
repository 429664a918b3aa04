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

A second pick uses each population's own members alone (the same round robin's sub-tables),
and those two play their own `--games` games. The all-members pick scores a member partly on
how it fares against the other population: where that population is one family (as PBT's
becomes), the other side's pick tends to be whichever member counters that family, which the
family's best then meets. The own-population pick is what a user holding one population could
choose, and it is the goal's figure; both are printed.

With `--null`, a second no-PBT population (seed + 100) goes through the same comparison with the
first: the spread of that figure is what chance alone gives on this game. With `--ceiling
FLAGS`, a no-PBT population trained with FLAGS in place of `--flags` (same seed; `--ceiling ''`
is the shipped defaults) goes through it too: where `--flags` gives every member a flawed start,
that is a population which never had the flaw, so its figure is about the most that fixing the
flaw, by PBT or any other means, could give. A single pairing of two members is decided largely
by which styles meet (the arena is strongly non-transitive at these budgets), so compare the PBT
figure with the null one over several seeds.

    python benchmarks/arena_population.py --seeds 1 2 3 --null   # 8 members, 500k frames each
    python benchmarks/arena_population.py --seeds 1 2 --null --steps 2000000 --period 100000
    python benchmarks/arena_population.py --policies 4 --steps 200000 --games 200
    # two finished populations, e.g. 2M frames per member against 500k (same seed)
    python benchmarks/arena_population.py --versus arena_nopbt_2000k_s1 arena_nopbt_s1
    # also a no-PBT population at the shipped defaults: how far a fix of a flawed start could go
    python benchmarks/arena_population.py --seeds 1 --ceiling '' \
        --flags=--policy_values=configs/arena_hunter_start.json
    # a flawed start: every member of both begins at proximity weight 0.05 (25x the default);
    # PBT tunes that weight alone, each explore step resampling it from the prior half the time
    python benchmarks/arena_population.py --seeds 1 2 3 4 5 --steps 1000000 --period 50000 \
        --search_space configs/arena_tune_proximity.json \
        --pbt_flags="--pbt_mutation_rate=1.0 --pbt_resample_probability=0.5" \
        --flags=--policy_values=configs/arena_hunter_start.json
    # the same, with PBT's members but the reference starting from draws of the prior (as the
    # PBT paper starts its population); add --pbt_start_mutation=1000000000000 to the
    # --pbt_flags for random search (the same draws, never updated)
    python benchmarks/arena_population.py --seeds 16 17 18 19 20 21 22 23 24 25 --steps 1000000 \
        --period 50000 --search_space configs/arena_tune_proximity.json \
        --pbt_flags="--pbt_mutation_rate=1.0 --pbt_resample_probability=0.5 --pbt_init_random" \
        --flags=--policy_values=configs/arena_hunter_start.json
    # snapshot opponents in both, one replacement per round
    python benchmarks/arena_population.py --seeds 2 --pbt_flags=--pbt_replace_fraction=0.125 \
        --tag rf125 --flags "--selfplay_snapshot_prob=0.25 \
        --selfplay_snapshot_every_env_steps=100000 --selfplay_snapshot_pool_size=24"

Prints the win rate of PBT's best against no-PBT's best (draw = 0.5) per seed, by both picks,
the mean score of the PBT members against the no-PBT members, the same for the null, and a
summary. Goal: PBT's best above 0.6, judged by the own-population pick (the pick a user could
make without the other population) as a mean over seeds; the summary prints its standard error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from runs import arena_cross_play, train_run  # noqa: E402

from rl_pbt.sampling.elo import EloRatings  # noqa: E402

DEFAULT_STEPS = 500_000
DEFAULT_PERIOD = 50_000
DEFAULT_POLICIES = 8
NULL_SEED_OFFSET = 100  # the null population of seed s trains with seed s + 100


def flags_slug(flags: str) -> str:
    """'--selfplay_snapshot_prob=0.25 --x=1' -> 'selfplay_snapshot_prob0.25_x1' (run names);
    a path's separators become '-', so that '--policy_values=/tmp/v.json' names one folder."""
    slug = "_".join(f.lstrip("-").replace("=", "") for f in flags.split())
    return re.sub(r"[^A-Za-z0-9._-]+", "-", slug)


def run_name(args, seed: int, pbt: bool, null: bool = False) -> str:
    """Experiment name: every setting that differs from the defaults is in it, so --reuse
    never takes a run made with other settings."""
    parts = ["pbt" if pbt else "nopbt"]
    if pbt and args.target != "true_objective":
        parts.append(args.target)
    if args.flags:
        parts.append(flags_slug(args.flags))
    if pbt and args.search_space:
        parts.append(os.path.splitext(os.path.basename(args.search_space))[0])
    if pbt and args.pbt_flags:
        parts.append(flags_slug(args.pbt_flags))
    if pbt and args.tag:
        parts.append(args.tag)
    if args.policies != DEFAULT_POLICIES:
        parts.append(f"n{args.policies}")
    if args.steps != DEFAULT_STEPS:
        parts.append(f"{args.steps // 1000}k")
    if pbt and args.period != DEFAULT_PERIOD:
        parts.append(f"p{args.period // 1000}k")
    if null:
        parts.append("null")
    return f"arena_{'_'.join(parts)}_s{seed}"


def finished(args, exp: str) -> bool:
    """The run in --train_dir trained every member for --steps (an interrupted run did not)."""
    path = os.path.join(args.train_dir, exp, "summary.json")
    if not os.path.isfile(path):
        return False
    with open(path) as f:
        policies = json.load(f).get("policies", {})
    return len(policies) == args.policies and all(
        p["env_steps"] >= args.steps for p in policies.values()
    )


def train(args, seed: int, pbt: bool, null: bool = False) -> str:
    exp = run_name(args, seed, pbt, null)
    if args.reuse and finished(args, exp):
        print(f"  {exp}: reusing the finished run in {args.train_dir}", flush=True)
        return exp
    flags = [
        "--env=arena_duel",
        f"--num_policies={args.policies}",
        f"--train_for_env_steps={args.steps}",
        f"--seed={seed + NULL_SEED_OFFSET if null else seed}",
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


def population_size(args, exp: str) -> int:
    with open(os.path.join(args.train_dir, exp, "config.json")) as f:
        return int(json.load(f)["num_policies"])


def elo_best(args, exp: str) -> str:
    """The member with the highest training Elo (elo.json), as EXPERIMENT:pN."""
    with open(os.path.join(args.train_dir, exp, "elo.json")) as f:
        elo = EloRatings.from_dict(json.load(f))
    live = {int(k): elo.rating(k) for k in elo.keys() if str(k).isdigit()}
    return f"{exp}:p{max(live, key=live.get)}"


def compare(args, exp_a: str, exp_b: str, seed: int, names=("PBT", "no-PBT")) -> dict:
    """Round robin of the members of both populations (the same opponents for everyone, as
    they are now); each population's best plays the other's `--games` new games, on layouts
    the round robin did not use. Returns {"best": A best vs B best, "mean": A members vs B
    members (mean over all their pairings), "picks": the two bests, "own": A best vs B best
    when each best is picked by its own population's members alone}."""
    na, nb = population_size(args, exp_a), population_size(args, exp_b)
    members = [f"{exp_a}:p{p}" for p in range(na)] + [f"{exp_b}:p{p}" for p in range(nb)]
    start = time.monotonic()
    rr = arena_cross_play(args.train_dir, members, args.rr_games, args.num_envs, seed)
    score = np.nanmean(rr, axis=1)
    best = [members[int(np.argmax(score[:na]))], members[na + int(np.argmax(score[na:]))]]
    mean = float(np.mean(rr[:na, na:]))
    print(
        f"\n{names[0]} vs {names[1]}: round robin of the {na + nb} members, {args.rr_games} "
        f"games per pairing ({time.monotonic() - start:,.0f} s); mean score against the other "
        f"{na + nb - 1}:"
    )
    for label, rows in ((names[0], range(na)), (names[1], range(na, na + nb))):
        print(f"  {label:6s} " + ", ".join(f"p{r - rows.start} {score[r]:.3f}" for r in rows))
    print(f"  {names[0]} members vs {names[1]} members, mean of the {na}x{nb} pairings: {mean:.3f}")
    table = arena_cross_play(args.train_dir, best + ["random"], args.games, args.num_envs, seed + 1)
    print(
        f"  {args.games} new games, draw = 0.5: {names[0]} best ({best[0]}) vs {names[1]} best "
        f"({best[1]}): {table[0, 1]:.3f}"
    )
    print(f"  bests vs random: {table[0, 2]:.3f}, {table[1, 2]:.3f}", flush=True)
    # each population's best by its own members alone (the sub-tables of the same round robin):
    # what a user with only that population could pick, not chosen for how it fares against the
    # other population (a pick that is partly a counter to the other's style)
    own = [
        members[int(np.nanargmax(np.nanmean(rr[:na, :na], axis=1)))],
        members[na + int(np.nanargmax(np.nanmean(rr[na:, na:], axis=1)))],
    ]
    own_score = float(table[0, 1])
    if own != best:
        own_table = arena_cross_play(args.train_dir, own, args.games, args.num_envs, seed + 3)
        own_score = float(own_table[0, 1])
    print(
        f"  bests by each population's own round robin: {own[0]} vs {own[1]}: {own_score:.3f}",
        flush=True,
    )
    return {"best": float(table[0, 1]), "mean": mean, "picks": best, "own": own_score}


def figures(rows: list[dict], key: str) -> str:
    """'0.510, 0.664 (mean 0.587, SE 0.077)': one figure of every seed's comparison, their mean
    and its standard error over seeds (given from two seeds on)."""
    values = np.array([r[key] for r in rows])
    spread = f", SE {values.std(ddof=1) / np.sqrt(len(values)):.3f}" if len(values) > 1 else ""
    return ", ".join(f"{v:.3f}" for v in values) + f" (mean {values.mean():.3f}{spread})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--policies", type=int, default=DEFAULT_POLICIES)
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="env frames per member")
    parser.add_argument("--period", type=int, default=DEFAULT_PERIOD, help="PBT period, frames")
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
        help="also train a second no-PBT population per seed (its seed + 100, name ..._null) "
        "and put the two no-PBT populations through the same comparison: what no difference "
        "looks like",
    )
    parser.add_argument(
        "--ceiling",
        metavar="FLAGS",
        default=None,
        help="also train a no-PBT population per seed with FLAGS instead of --flags ('' for the "
        "shipped defaults) and compare it with the no-PBT population: where --flags is a "
        "flawed start, about the most that fixing the flaw could give",
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
        help="more training flags for every run, e.g. '--selfplay_snapshot_prob=0.25'; "
        "training runs from the repo root, so give file paths absolute or relative to it",
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
        help="skip training a population whose run in --train_dir (same settings, so the same "
        "name) trained every member for --steps",
    )
    args = parser.parse_args()
    os.makedirs(args.train_dir, exist_ok=True)
    torch.set_num_threads(1)  # small batches: more threads only contend for the cores

    if args.versus:
        compare(args, *args.versus, args.seeds[0], names=("A", "B"))
        return

    if args.ceiling is not None and args.ceiling.split() == args.flags.split():
        parser.error(f"--ceiling={args.ceiling!r} is the same as --flags: nothing to compare")
    ceiling_args = argparse.Namespace(**{**vars(args), "flags": args.ceiling or ""})
    results, nulls, ceilings = [], [], []
    for seed in args.seeds:
        print(f"\n=== seed {seed}", flush=True)
        pbt_exp, plain_exp = train(args, seed, pbt=True), train(args, seed, pbt=False)
        result = compare(args, pbt_exp, plain_exp, seed)
        by_elo = [elo_best(args, pbt_exp), elo_best(args, plain_exp)]
        if by_elo != result["picks"]:
            table = arena_cross_play(args.train_dir, by_elo, args.games, args.num_envs, seed + 2)
            print(f"  by training Elo instead: {by_elo[0]} vs {by_elo[1]}: {table[0, 1]:.3f}")
        results.append(result)
        if args.null:
            other = train(args, seed, pbt=False, null=True)
            nulls.append(compare(args, plain_exp, other, seed, names=("no-PBT", "no-PBT'")))
        if args.ceiling is not None:
            top = train(ceiling_args, seed, pbt=False)
            ceilings.append(compare(args, top, plain_exp, seed, names=("ceiling", "no-PBT")))

    print(f"\nsummary, {args.policies} members x {args.steps:,} frames, seeds {args.seeds}:")
    for label, rows, goal in (
        ("PBT vs no-PBT", results, " (the goal's figure)"),
        ("no-PBT vs no-PBT' (null)", nulls, ""),
        (f"ceiling ({args.ceiling!r}) vs no-PBT", ceilings, ""),
    ):
        if not rows:
            continue
        print(f"  {label}:")
        print(f"    bests by own round robin{goal}: {figures(rows, 'own')}")
        print(f"    bests by the all-members round robin: {figures(rows, 'best')}")
        print(f"    members vs members: {figures(rows, 'mean')}")


if __name__ == "__main__":
    main()
