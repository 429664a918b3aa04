"""Does bootstrapping episodes cut by a time limit (`--value_bootstrap`, the default) train
better agents? Pendulum-v1 never terminates: every episode is truncated after 200 steps, and
without the bootstrap the critic learns that the last steps lead nowhere (their returns are
cut short), a value the observations cannot explain.

For each seed, one run with the bootstrap and one without, same flags and env steps; each
trained policy then plays `--episodes` fresh episodes, deterministic (the mean action), and
the script prints their mean return (higher is better: 0 is the best; a policy that always
pushes 0 scores -1252 and a uniformly random one -1240 on 20 such episodes), then the median
and spread over the seeds.

    python benchmarks/time_limits.py                          # 3 seeds, 300k env steps each
    python benchmarks/time_limits.py --seeds 5 --steps 500000 --extra --gamma=0.95
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from runs import train_run  # noqa: E402

# PPO settings that learn Pendulum here in a few hundred thousand steps; both arms share them
FLAGS = [
    "--env=Pendulum-v1",
    "--num_workers=2",
    "--num_envs_per_worker=8",
    "--rollout=64",
    "--batch_size=1024",
    "--num_epochs=4",
    "--learning_rate=1e-3",
    "--ppo_clip_ratio=0.2",
    "--exploration_loss_coeff=0.0",
    "--encoder_mlp_layers",
    "64",
    "64",
    "--status_interval=30",
    "--save_every_sec=100000",
]


def evaluate(exp_dir: str, episodes: int, seed: int) -> float:
    """Mean return of the trained policy over fresh episodes, deterministic."""
    import gymnasium as gym
    import numpy as np
    import torch

    from rl_pbt.models.loading import experiment_cfg, load_policy

    cfg = experiment_cfg(exp_dir)
    env = gym.make("Pendulum-v1")
    model = load_policy(exp_dir, 0, env.observation_space, env.action_space, cfg)
    returns = []
    for e in range(episodes):
        obs, _ = env.reset(seed=seed * 1000 + e)
        total, done = 0.0, False
        while not done:
            x = {"obs": torch.as_tensor(obs, dtype=torch.float32)[None]}
            action, _, _, _ = model.act(x, None, deterministic=True)
            a = np.clip(action[0].numpy(), env.action_space.low, env.action_space.high)
            obs, r, term, trunc, _ = env.step(a)
            total += float(r)
            done = term or trunc
        returns.append(total)
    return float(np.mean(returns))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first_seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=300_000, help="env steps per run")
    parser.add_argument("--episodes", type=int, default=20, help="evaluation episodes per run")
    parser.add_argument("--train_dir", default=None, help="default: a new temporary folder")
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more flags")
    args = parser.parse_args(argv)
    train_dir = args.train_dir or tempfile.mkdtemp(prefix="time_limits_")
    os.makedirs(train_dir, exist_ok=True)
    print(f"runs under {train_dir}; flags: {' '.join(FLAGS + args.extra)}", flush=True)
    scores: dict[bool, list[float]] = {True: [], False: []}
    print("| seed | bootstrap | no bootstrap |")
    print("|---|---|---|")
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        row = []
        for boot in (True, False):
            exp = f"pendulum_{'boot' if boot else 'cut'}_s{seed}"
            flags = [*FLAGS, *args.extra, f"--value_bootstrap={boot}"]
            flags += [f"--train_for_env_steps={args.steps}", f"--seed={seed}"]
            train_run(flags, train_dir, exp)
            score = evaluate(os.path.join(train_dir, exp), args.episodes, seed)
            scores[boot].append(score)
            row.append(f"{score:.0f}")
        print(f"| {seed} | {row[0]} | {row[1]} |", flush=True)
    for boot in (True, False):
        s = scores[boot]
        name = "bootstrap" if boot else "no bootstrap"
        print(
            f"{name}: median {statistics.median(s):.0f}, min {min(s):.0f}, max {max(s):.0f} "
            f"over {len(s)} seeds ({args.episodes} deterministic episodes each)"
        )


if __name__ == "__main__":
    main()
