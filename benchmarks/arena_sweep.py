"""Which values make stronger arena players? One population, members that differ only in chosen
learning values or reward-shaping weights (`--policy_values`), trained together without PBT;
then a round robin of all members, a uniformly random player and the scripted chaser.

Every member trains against the same mixed population, so a member's mean score against the
others says whether its values help, at this budget, against this population. The `shaping`
and `learning` sets move one thing at a time away from the arena's defaults (member 0 keeps
them); `combined` pairs up changes that looked better, beside four default members:

    python benchmarks/arena_sweep.py --set shaping --seeds 21 22
    python benchmarks/arena_sweep.py --set learning --seeds 11 12
    python benchmarks/arena_sweep.py --set combined --seeds 31 32
    python benchmarks/arena_sweep.py --variants my_values.json   # a --policy_values file

Prints, per seed and as the mean over seeds, each member's score against the rest of the
population, against random and against chaser (draw = 0.5).
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

# one change at a time from the arena defaults (envs/arena/game.py, envs/arena/__init__.py)
SETS = {
    "shaping": [
        {"_label": "defaults"},
        {"_label": "cautious", "rew.damage_taken": -0.3, "rew.death": -0.75, "rew.pickup": 0.1},
        {"_label": "survival", "rew.damage_taken": -0.5, "rew.death": -1.0},
        {"_label": "collector", "rew.pickup": 0.3},
        {"_label": "ammo saver", "rew.shot_fired": -0.05},
        {
            "_label": "aggressive",
            "rew.damage_dealt": 0.3,
            "rew.kill": 0.5,
            "rew.proximity": 0.01,
            "rew.shot_fired": 0.0,
        },
        {"_label": "hunter", "rew.proximity": 0.05},
        {"_label": "zone fear", "rew.zone_damage": -0.5},
    ],
    "learning": [
        {"_label": "defaults"},
        {"_label": "lr x3", "learning_rate": 1.5e-3},
        {"_label": "lr /3", "learning_rate": 1.67e-4},
        {"_label": "entropy x4", "exploration_loss_coeff": 0.02},
        {"_label": "entropy /5", "exploration_loss_coeff": 0.001},
        {"_label": "clip 0.2", "ppo_clip_ratio": 0.2},
        {"_label": "gamma 0.995", "gamma": 0.995},
        {"_label": "gamma 0.97", "gamma": 0.97},
    ],
    # the better-looking single changes of the two sets above, two at a time, beside defaults
    "combined": [
        {"_label": "defaults"},
        {"_label": "defaults"},
        {"_label": "defaults"},
        {"_label": "defaults"},
        {"_label": "zone fear + collector", "rew.zone_damage": -0.5, "rew.pickup": 0.3},
        {"_label": "zone fear + collector", "rew.zone_damage": -0.5, "rew.pickup": 0.3},
        {"_label": "lr x2 + clip 0.2", "learning_rate": 1e-3, "ppo_clip_ratio": 0.2},
        {"_label": "lr x2 + clip 0.2", "learning_rate": 1e-3, "ppo_clip_ratio": 0.2},
    ],
}


def label(values: dict) -> str:
    named = ", ".join(f"{k}={v:g}" for k, v in values.items() if not k.startswith("_"))
    return values.get("_label") or named or "defaults"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=sorted(SETS), default="shaping")
    parser.add_argument("--variants", default=None, help="a --policy_values file instead of --set")
    parser.add_argument("--seeds", type=int, nargs="+", default=[21])
    parser.add_argument("--steps", type=int, default=500_000, help="env frames per member")
    parser.add_argument("--games", type=int, default=100, help="games per pairing")
    parser.add_argument("--num_envs", type=int, default=100, help="games played at once")
    parser.add_argument("--train_dir", default="/tmp/rl_pbt_bench")
    parser.add_argument("--flags", default="", help="more training flags")
    args = parser.parse_args()
    os.makedirs(args.train_dir, exist_ok=True)
    torch.set_num_threads(1)  # small batches in the matches: more threads only contend

    name = os.path.splitext(os.path.basename(args.variants))[0] if args.variants else args.set
    if args.variants:
        with open(args.variants) as f:
            variants = json.load(f)
        values_path = os.path.abspath(args.variants)
    else:
        variants = SETS[args.set]
        values_path = os.path.join(args.train_dir, f"sweep_{name}.json")
        with open(values_path, "w") as f:
            json.dump(variants, f, indent=1)
    P = len(variants)
    scores = []  # per seed: [member] mean score against the rest of the population
    for seed in args.seeds:
        exp = f"arena_sweep_{name}_s{seed}"
        start = time.monotonic()
        summary = train_run(
            [
                "--env=arena_duel",
                f"--num_policies={P}",
                f"--train_for_env_steps={args.steps}",
                f"--seed={seed}",
                f"--policy_values={values_path}",
                "--restart_behavior=overwrite",
                "--status_interval=30",
                "--save_every_sec=100000",
                *args.flags.split(),
            ],
            args.train_dir,
            exp,
            echo=True,
        )
        print(f"  {exp}: {summary['frames']:,} frames in {time.monotonic() - start:,.0f} s")
        players = [f"{exp}:p{p}" for p in range(P)] + ["random", "chaser"]
        table = arena_cross_play(args.train_dir, players, args.games, args.num_envs, seed)
        score = np.nanmean(table[:P, :P], axis=1)
        scores.append(score)
        print(f"\nseed {seed}, {args.games} games per pairing; row member's score:")
        print(f"  {'member':22s} {'vs pop':>7s} {'random':>7s} {'chaser':>7s}  vs p0..p{P - 1}")
        for p, v in enumerate(variants):
            cells = " ".join("  -  " if q == p else f"{table[p, q]:.2f} " for q in range(P))
            print(
                f"  p{p} {label(v)[:19]:19s} {score[p]:7.3f} {table[p, P]:7.3f} "
                f"{table[p, P + 1]:7.3f}  {cells}",
                flush=True,
            )
    if len(args.seeds) > 1:
        mean = np.mean(scores, axis=0)
        print(f"\nmean over seeds {args.seeds} of the score against the rest of the population:")
        for p, v in enumerate(variants):
            each = ", ".join(f"{s[p]:.3f}" for s in scores)
            print(f"  p{p} {label(v)[:19]:19s} {mean[p]:.3f}  ({each})")


if __name__ == "__main__":
    main()
