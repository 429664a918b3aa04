"""Per-step inference cost of a rollout worker: ActorCritic.act per policy against one
FusedPopulationPolicy.act for all of them (single thread, as in rollout workers).

    python benchmarks/inference_micro.py
    python benchmarks/inference_micro.py --layers 64 64 --policies 4 --agents 32

Prints the median milliseconds per call over repeated timings. Compare figures from one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Callable

import gymnasium as gym
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rl_pbt import parse_cfg  # noqa: E402
from rl_pbt.models.actor_critic import ActorCritic, make_actor_critic  # noqa: E402
from rl_pbt.sampling.fused_inference import FusedPopulationPolicy  # noqa: E402


def median_ms(fn: Callable[[], object], repeats: int, inner: int) -> float:
    for _ in range(inner):  # warm-up: allocator, lazy initialisation, caches
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples) * 1e3


def make_models(num: int, layers: list[int]) -> list[ActorCritic]:
    cfg = parse_cfg(["--env=CartPole-v1", "--encoder_mlp_layers", *map(str, layers)])
    obs_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    models = []
    for _ in range(num):
        model = make_actor_critic(obs_space, gym.spaces.Discrete(2), cfg)
        model.eval()
        models.append(model)
    return models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[512, 512])
    parser.add_argument("--policies", type=int, default=8)
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--inner", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    p, n = args.policies, args.agents
    models = make_models(p, args.layers)
    obs = {"obs": torch.randn(n, 4)}
    # agents of one policy are spread over the envs, so the fused call has to regroup them
    rows = np.arange(n) % p
    per_policy = [{"obs": obs["obs"][torch.from_numpy(rows == r)]} for r in range(p)]

    fused = FusedPopulationPolicy(models[0], p)
    for row, model in enumerate(models):
        fused.load(row, model)
    single = FusedPopulationPolicy(models[0], 1)
    single.load(0, models[0])
    zeros = np.zeros(n, np.int64)

    def separate() -> None:
        for model, sub in zip(models, per_policy):
            model.act(sub, None)

    cases = [
        (f"(a) 1 policy, {n} agents, ActorCritic.act", lambda: models[0].act(obs, None)),
        (f"(b) {p} policies x {n // p} agents, {p} ActorCritic.act calls", separate),
        (f"(c) fused, {p} rows, {n} agents", lambda: fused.act(obs, rows)),
        (f"(d) fused, 1 row, {n} agents", lambda: single.act(obs, zeros)),
    ]
    print(
        f"MLP {args.layers}, obs 4, Discrete(2), 1 thread, median of {args.repeats} x {args.inner}"
    )
    for name, fn in cases:
        print(f"{name:<52} {median_ms(fn, args.repeats, args.inner):8.3f} ms/call")


if __name__ == "__main__":
    main()
