"""Raw single-core stepping speed of the built-in envs (arena_duel, arena_2v2, lure).

Random actions, no learning: `python benchmarks/arena_speed.py [--seconds S] [--windows N]`.
Prints the median agent steps per second over a few timed windows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envs.arena import make_arena  # noqa: E402
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
    args = parser.parse_args()
    print(f"one core, random actions, median of {args.windows} windows of {args.seconds:g} s")
    for name in ("arena_duel", "arena_2v2"):
        rates = arena_rate(name, args.seconds, args.windows)
        print(
            f"{name:12s} {statistics.median(rates):>12,.0f} agent steps/s "
            f"(min {min(rates):,.0f}, max {max(rates):,.0f})"
        )
    rates = lure_rate(args.seconds, args.windows)
    print(
        f"{'lure':12s} {statistics.median(rates):>12,.0f} agent steps/s "
        f"(min {min(rates):,.0f}, max {max(rates):,.0f})"
    )


if __name__ == "__main__":
    main()
