"""Raw single-core stepping speed of the built-in envs (arena_duel, arena_2v2, lure).

Random actions, no learning: `python benchmarks/arena_speed.py [--seconds S] [--windows N]
[--batch-sizes K ...]`. Prints the median agent steps per second over a few timed windows,
for the scalar envs and for `envs.arena.batch.ArenaBatch` stepping K arena copies at once.

With `--train_seconds S` it also runs the README's 8-policy PBT self-play job on arena_duel
for S seconds per layout (envs per worker, with and without `--batched_envs`) and compares its
training frames/s with the raw one-core rate: the game should never be the bottleneck.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.runs import train_run  # noqa: E402
from envs.arena import ARENA_PLAYERS, make_arena  # noqa: E402
from envs.arena.batch import ArenaBatch  # noqa: E402
from envs.arena.game import NUM_ACTIONS  # noqa: E402
from envs.lure import make_lure  # noqa: E402


def arena_rate(name: str, seconds: float, windows: int) -> list[float]:
    env = make_arena(name, None, {"worker_index": 0, "vector_index": 0, "env_id": 0})
    n = env.num_agents
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(env.action_space.n, size=(4096, n))
    rates = []
    for _ in range(windows):
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for a in actions[:512]:
                env.step(a)
            steps += 512
            actions = np.roll(actions, 512, axis=0)
        rates.append(steps * n / (time.perf_counter() - start))
    return rates


def arena_batch_rate(name: str, num_envs: int, seconds: float, windows: int) -> list[float]:
    """Agent steps per second of ArenaBatch with `num_envs` copies of arena `name`."""
    n = ARENA_PLAYERS[name]
    env = ArenaBatch(num_envs, n, seeds=list(range(num_envs)))
    env.reset()
    chunk = 64
    actions = np.random.default_rng(0).integers(NUM_ACTIONS, size=(4 * chunk, num_envs, n))
    rates = []
    for _ in range(windows):
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for a in actions[:chunk]:
                env.step(a)
            steps += chunk
            actions = np.roll(actions, chunk, axis=0)
        rates.append(steps * num_envs * n / (time.perf_counter() - start))
    return rates


def _report(label: str, rates: list[float]) -> None:
    print(
        f"{label:22s} {statistics.median(rates):>12,.0f} agent steps/s "
        f"(min {min(rates):,.0f}, max {max(rates):,.0f})"
    )


def lure_rate(seconds: float, windows: int) -> list[float]:
    env = make_lure("lure", None, {"worker_index": 0, "vector_index": 0, "env_id": 0})
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(5, size=4096).tolist()
    rates = []
    for _ in range(windows):
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for a in actions:
                _, _, terminated, truncated, _ = env.step(a)
                if terminated or truncated:
                    env.reset()
            steps += len(actions)
        rates.append(steps / (time.perf_counter() - start))
    return rates


def training_rate(seconds: int, envs_per_worker: int, batched: bool) -> float:
    """Frames/s (median of the second half) of the 8-policy PBT self-play run on arena_duel,
    2 workers, the README's main job with a time budget instead of a frame budget."""
    flags = [
        "--preset=arena_pbt_demo",
        f"--num_envs_per_worker={envs_per_worker}",
        f"--batched_envs={batched}",
        f"--train_for_seconds={seconds}",
        "--train_for_env_steps=1000000000",
        "--status_interval=5",
    ]
    with tempfile.TemporaryDirectory() as d:
        summary = train_run(flags, d, f"speed_{envs_per_worker}_{int(batched)}")
    return float(summary["fps_median_second_half"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one timed window")
    parser.add_argument("--windows", type=int, default=5, help="timed windows per env")
    parser.add_argument(
        "--batch-sizes",
        type=int,
        nargs="*",
        default=[16, 64, 256],
        help="numbers of copies K for the batched arena (none: skip it)",
    )
    parser.add_argument(
        "--train_seconds",
        type=int,
        default=0,
        help="also run the 8-policy arena_duel PBT self-play training this long per layout "
        "and compare its frames/s with the raw rate (0: skip)",
    )
    parser.add_argument(
        "--train_envs", type=int, nargs="*", default=[16, 32], help="envs per worker to train"
    )
    args = parser.parse_args()
    print(f"one core, random actions, median of {args.windows} windows of {args.seconds:g} s")
    raw: dict[tuple[str, int], float] = {}
    for name in ("arena_duel", "arena_2v2"):
        _report(name, arena_rate(name, args.seconds, args.windows))
        for k in args.batch_sizes:
            rates = arena_batch_rate(name, k, args.seconds, args.windows)
            raw[(name, k)] = statistics.median(rates)
            _report(f"{name} batch K={k}", rates)
    _report("lure", lure_rate(args.seconds, args.windows))
    if args.train_seconds <= 0:
        return
    print(f"\n8-policy PBT self-play on arena_duel, 2 workers, {args.train_seconds} s per run:")
    for k in args.train_envs:
        for batched in (False, True):
            fps = training_rate(args.train_seconds, k, batched)
            line = f"  {k} envs/worker, batched_envs={batched}: {fps:,.0f} frames/s"
            if batched:
                one = raw.get(("arena_duel", k))
                if one is None:
                    one = statistics.median(arena_batch_rate("arena_duel", k, args.seconds, 3))
                line += f"; raw one-core rate at K={k} is {one / fps:.1f}x this (goal >= 10x)"
            print(line, flush=True)


if __name__ == "__main__":
    main()
