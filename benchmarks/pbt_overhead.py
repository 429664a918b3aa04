"""What PBT costs: frames/s of the same 8-policy run with and without --with_pbt (alternating
runs, medians), and the time from a replacement decision to the target learner's first update
on the copied weights, for a ~1M-parameter model on the CPU.

    python benchmarks/pbt_overhead.py [--seconds 40] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

from runs import train_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COMMON = [
    "--env=CartPole-v1",
    "--num_workers=2",
    "--num_envs_per_worker=8",
    "--rollout=32",
    "--batch_size=512",
    "--num_policies=8",
    "--status_interval=2",
    "--save_every_sec=100000",
    "--restart_behavior=overwrite",
]


def train(train_dir: str, exp: str, extra: list[str]) -> dict:
    return train_run([*COMMON, *extra], train_dir, exp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--copy_only", action="store_true", help="only the copy-latency run, no frames/s pairs"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        fps = {"off": [], "on": []}
        pbt = ["--with_pbt", "--pbt_period_env_steps=20000", "--pbt_start_mutation=20000"]
        for r in range(0 if args.copy_only else args.repeats):
            for mode in ("off", "on"):
                s = train(
                    d,
                    f"ovh_{mode}_{r}",
                    [f"--train_for_seconds={args.seconds}", "--encoder_mlp_layers", "512", "512"]
                    + (pbt if mode == "on" else []),
                )
                fps[mode].append(s["fps_median_second_half"])
                print(f"run {r} PBT {mode}: {fps[mode][-1]:,.0f} frames/s", flush=True)
        if fps["off"]:
            off, on = statistics.median(fps["off"]), statistics.median(fps["on"])
            print(
                f"8 policies, CartPole, MLP [512, 512]: {off:,.0f} frames/s without PBT, "
                f"{on:,.0f} with PBT (updates every 20k frames per policy): {on / off:.1%} "
                f"(goal >= 97%)"
            )

        s = train(
            d,
            "ovh_copy",
            [
                # the big model trains slowly on 2 cores: short PBT periods so that
                # replacements happen within the run
                f"--train_for_seconds={max(args.seconds, 60)}",
                "--encoder_mlp_layers",
                "1024",
                "1024",
                "--with_pbt",
                "--pbt_period_env_steps=3000",
                "--pbt_start_mutation=3000",
                "--pbt_replace_reward_gap=0.0",
                "--pbt_replace_reward_gap_absolute=0.0",
            ],
        )
        lat = s["pbt_copy_latency_s"]
        if not lat:
            print("no replacement happened in the copy-latency run; run longer")
            return
        copied = [x["weights_copied"] for x in lat]
        fresh = [x["first_experience"] for x in lat]
        first = [x["first_update"] for x in lat]
        print(
            f"~1.06M parameters: {len(lat)} replacements; decision -> weights copied: median "
            f"{statistics.median(copied) * 1e3:.1f} ms (max {max(copied) * 1e3:.1f}); "
            f"-> first trajectory from them: median {statistics.median(fresh) * 1e3:.0f} ms "
            f"(max {max(fresh) * 1e3:.0f}); -> first update on the copied weights: median "
            f"{statistics.median(first) * 1e3:.0f} ms (max {max(first) * 1e3:.0f}), "
            f"{sum(f < 1.0 for f in first)} of {len(first)} under 1 s (goal < 1 s)"
        )
        slow = sorted(lat, key=lambda x: -x["first_update"])[:5]
        print(
            "slowest (copied / first trajectory / first update, s): "
            + ", ".join(
                f"{x['weights_copied']:.2f}/{x['first_experience']:.2f}/{x['first_update']:.2f}"
                for x in slow
            )
        )


if __name__ == "__main__":
    main()
