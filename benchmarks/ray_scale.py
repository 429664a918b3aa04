"""A population over Ray on this one machine against the same population in one plain run.

    python benchmarks/ray_scale.py [--seconds 60] [--repeats 3]

1. frames/s: 4 CartPole members, 2 rollout workers in all, no PBT; the plain run (one
   process tree) against `--ray_address=local --policies_per_node=2` (2 node groups of 1
   worker each, every group an actor). Runs alternate; each run's figure is its median
   frames/s over its second half (the sum over groups for Ray); the ratio of the medians
   prints (goal >= 0.9).
2. copy latency: the same 2 groups with a ~1M-parameter model (MLP [1024, 1024]) and PBT every
   20k env steps; for every copy between groups, the seconds from the decision to the
   target's state installed and checked (export, object store, import, read back) and to the
   target's first update on it (goal < 2 s). The groups keep their runs in a folder of their
   own (--ray_node_dir, as on other nodes' disks) and checkpoint every 10 s, so every
   member's checkpoints also travel to the experiment folder: their count, size and the
   seconds from the driver's ask to the file written there print.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

from runs import run_logged

COMMON = [
    "--env=CartPole-v1",
    "--num_policies=4",
    "--num_envs_per_worker=8",
    "--rollout=32",
    "--batch_size=512",
    "--status_interval=5",
    "--save_every_sec=100000",
    "--train_for_env_steps=1000000000",
    "--restart_behavior=overwrite",
]
RAY = ["--ray_address=local", "--policies_per_node=2", "--num_workers=1"]


def train(train_dir: str, exp: str, flags: list[str]) -> str:
    cmd = [sys.executable, "-m", "launch.train", *COMMON, *flags]
    cmd += [f"--train_dir={train_dir}", f"--experiment={exp}"]
    run_logged(cmd, os.path.join(train_dir, f"{exp}.log"), exp)
    return os.path.join(train_dir, exp)


def read(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def fps_of(exp_dir: str) -> float:
    if os.path.isfile(os.path.join(exp_dir, "population.json")):
        groups = sorted(os.listdir(os.path.join(exp_dir, "groups")))
        return sum(
            read(os.path.join(exp_dir, "groups", g, "summary.json"))["fps_median_second_half"]
            for g in groups
            if os.path.isfile(os.path.join(exp_dir, "groups", g, "summary.json"))
        )
    return read(os.path.join(exp_dir, "summary.json"))["fps_median_second_half"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--copy_only", action="store_true")
    args = parser.parse_args()
    seconds = [f"--train_for_seconds={args.seconds}"]
    with tempfile.TemporaryDirectory() as d:
        fps: dict[str, list[float]] = {"plain": [], "ray": []}
        for r in range(0 if args.copy_only else args.repeats):
            for mode, flags in (("plain", ["--num_workers=2"]), ("ray", RAY)):
                fps[mode].append(fps_of(train(d, f"{mode}_{r}", flags + seconds)))
                print(f"run {r} {mode}: {fps[mode][-1]:,.0f} frames/s", flush=True)
        if fps["plain"]:
            plain, ray = statistics.median(fps["plain"]), statistics.median(fps["ray"])
            print(
                f"4 members, CartPole, 2 rollout workers in all, {args.seconds} s runs: "
                f"plain {plain:,.0f} frames/s, Ray (2 node groups) {ray:,.0f} frames/s: "
                f"ratio {ray / plain:.2f} (medians of {args.repeats}; goal >= 0.9)",
                flush=True,
            )
        big = ["--encoder_mlp_layers", "1024", "1024", "--with_pbt"]
        big += ["--pbt_period_env_steps=20000", "--pbt_start_mutation=20000"]
        node = [f"--ray_node_dir={os.path.join(d, 'nodes')}", "--save_every_sec=10"]
        exp = train(d, "copy", RAY + big + node + seconds)
        pop = read(os.path.join(exp, "population.json"))
        copies = pop["cross_group_copies"]
        first = pop["first_update_after_copy_s"]["across_groups"]
        exact = sum(c["bit_exact"] for c in copies)
        installed = [c["copied_s"] for c in copies]
        print(f"copies between node groups: {len(copies)}, {exact} read back bit for bit")
        if installed:
            mid = statistics.median(installed)
            print(f"decision -> state installed and checked: median {mid:.3f} s, max "
                  f"{max(installed):.3f} s")  # fmt: skip
        if first:
            print(
                f"decision -> first update of the target: median {statistics.median(first):.2f} "
                f"s, max {max(first):.2f} s over {len(first)} copies (goal < 2 s)"
            )
        fetched = pop["checkpoints_fetched_from_groups"]
        if fetched["files"]:
            took = fetched["seconds"]
            print(
                f"checkpoints copied from the groups' folders to the experiment folder: "
                f"{fetched['files']} files, {fetched['bytes'] / fetched['files'] / 2**20:.1f} MiB "
                f"each; ask -> written: median {statistics.median(took):.3f} s, max "
                f"{max(took):.3f} s"
            )


if __name__ == "__main__":
    main()
