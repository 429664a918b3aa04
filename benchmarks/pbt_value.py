"""Does PBT find better agents than random search? On the `lure` env (whose default shaping
misleads: agents farm coins and reach the goal late or never), a population of 8 with PBT
against the same 8 randomly initialised members without PBT, same env-frame budget per member,
several seeds. Prints the best and median true_objective of each population and how PBT moved
the lure / goal weight ratio (both weights are tuned, so their ratio is what the agent sees).

    python benchmarks/pbt_value.py                     # 3 seeds, 300k frames per member
    python benchmarks/pbt_value.py --first_seed 3      # three other seeds
    python benchmarks/pbt_value.py --seeds 1 --steps 100000 --policies 4

Both populations start from the same draws of the search space (--pbt_init_random with the
same seed); random search is PBT with its updates switched off. By default the search space is
the reward shaping alone (configs/shaping_only.json: learning parameters fixed at their
defaults) and every explore step perturbs each tuned value (--mutation_rate 1.0, as in the
original PBT); --search_space '' --mutation_rate 0.3 tunes every default parameter instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from runs import train_run  # noqa: E402

from rl_pbt.pbt.lineage import lineage_path, read_events, schedule_for  # noqa: E402


def run(args, seed: int, pbt: bool, train_dir: str) -> str:
    exp = f"lure_{'pbt' if pbt else 'random'}_s{seed}"
    # random search: never an update
    start = args.start if pbt else 10**15
    flags = [
        "--env=lure",
        "--with_pbt",
        "--pbt_init_random",
        f"--num_policies={args.policies}",
        f"--train_for_env_steps={args.steps}",
        f"--pbt_period_env_steps={args.period}",
        f"--pbt_start_mutation={start}",
        f"--pbt_mutation_rate={args.mutation_rate}",
        *([f"--pbt_search_space={args.search_space}"] if args.search_space else []),
        f"--seed={seed}",
        "--status_interval=30",
        "--save_every_sec=100000",
        "--stats_avg=100",
        "--pbt_objective_window=100",
    ]
    train_run(flags, train_dir, exp)
    return os.path.join(train_dir, exp)


def objectives(exp_dir: str) -> list[float]:
    with open(os.path.join(exp_dir, "summary.json")) as f:
        summary = json.load(f)
    return [p["mean_objective"] or 0.0 for p in summary["policies"].values()]


def lure_ratios(exp_dir: str, n: int) -> tuple[list, list, list]:
    """lure / goal of each member at the start of the run, at its end, and at the start of the
    lineage that produced each member's final weights (its earliest ancestor's draw)."""
    events = read_events(lineage_path(exp_dir))

    def ratio(values: dict) -> float:
        return values["lure"] / values["goal"]

    initial = [None] * n
    for e in events:
        if e["action"] == "init":
            values = {k.removeprefix("rew."): new for k, (_, new) in e["changes"].items()}
            initial[e["policy"]] = ratio(values)
    final, ancestor = [], []
    for p in range(n):
        schedule = schedule_for(events, p)
        ancestor.append(ratio(schedule[0][2]))
        final.append(ratio(schedule[-1][2]))
    return initial, final, ancestor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--first_seed", type=int, default=0, help="seeds first_seed, first_seed+1, ..."
    )
    parser.add_argument("--policies", type=int, default=8)
    parser.add_argument("--steps", type=int, default=300_000, help="env frames per member")
    parser.add_argument("--period", type=int, default=20_000)
    parser.add_argument("--mutation_rate", type=float, default=1.0)
    parser.add_argument(
        "--search_space",
        default=os.path.join(ROOT, "configs", "shaping_only.json"),
        help="--pbt_search_space file of both populations ('' tunes every default parameter)",
    )
    parser.add_argument(
        "--start",
        type=int,
        default=60_000,
        help="env frames per member before PBT's first update",
    )
    parser.add_argument("--train_dir", default=None)
    args = parser.parse_args()
    train_dir = args.train_dir or tempfile.mkdtemp(prefix="pbt_value_")
    os.makedirs(train_dir, exist_ok=True)
    print(
        f"lure, {args.policies} members, {args.steps:,} frames each, PBT period "
        f"{args.period:,}, mutation rate {args.mutation_rate}, search space "
        f"{args.search_space or 'all defaults'}, {args.seeds} seeds; runs in {train_dir}",
        flush=True,
    )
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        pbt_dir = run(args, seed, True, train_dir)
        rnd_dir = run(args, seed, False, train_dir)
        pbt_obj, rnd_obj = objectives(pbt_dir), objectives(rnd_dir)
        initial, final, ancestor = lure_ratios(pbt_dir, args.policies)
        best = max(range(args.policies), key=lambda p: pbt_obj[p])
        rnd_best = max(range(args.policies), key=lambda p: rnd_obj[p])
        rnd_initial = lure_ratios(rnd_dir, args.policies)[0]
        rows.append(
            (max(pbt_obj), statistics.median(pbt_obj), max(rnd_obj), statistics.median(rnd_obj))
        )
        print(
            f"seed {seed}: PBT best {max(pbt_obj):.3f} median {statistics.median(pbt_obj):.3f}"
            f" | random search best {max(rnd_obj):.3f} median {statistics.median(rnd_obj):.3f}"
            f" (its lure/goal {rnd_initial[rnd_best]:.3f})\n"
            f"  PBT lure/goal: population median {statistics.median(initial):.3f} at the start"
            f" -> {statistics.median(final):.3f} at the end (lowest drawn at the start "
            f"{min(initial):.3f}); best member p{best} {final[best]:.3f}, its lineage started "
            f"from a draw of {ancestor[best]:.3f}",
            flush=True,
        )
    pbt_best = statistics.mean(r[0] for r in rows)
    rnd_best = statistics.mean(r[2] for r in rows)
    print("\n| | best (mean over seeds) | median (mean over seeds) |")
    print("|---|---|---|")
    print(f"| PBT | {pbt_best:.3f} | {statistics.mean(r[1] for r in rows):.3f} |")
    print(f"| random search | {rnd_best:.3f} | {statistics.mean(r[3] for r in rows):.3f} |")
    ratio = pbt_best / rnd_best if rnd_best > 0 else float("inf")
    print(f"PBT best / random-search best: {ratio:.2f} (goal >= 1.5)")


if __name__ == "__main__":
    main()
