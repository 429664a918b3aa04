"""Raw single-core stepping speed of the built-in envs (arena_duel, arena_2v2, lure).

Random actions, no learning: `python benchmarks/arena_speed.py [--seconds S] [--windows N]
[--batch-sizes K ...]`. Prints the median agent steps per second over a few timed windows,
for the scalar envs and for `envs.arena.batch.ArenaBatch` stepping K arena copies at once.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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
    args = parser.parse_args()
    print(f"one core, random actions, median of {args.windows} windows of {args.seconds:g} s")
    for name in ("arena_duel", "arena_2v2"):
        _report(name, arena_rate(name, args.seconds, args.windows))
        for k in args.batch_sizes:
            _report(f"{name} batch K={k}", arena_batch_rate(name, k, args.seconds, args.windows))
    _report("lure", lure_rate(args.seconds, args.windows))


if __name__ == "__main__":
    main()
