"""Watch or evaluate a trained policy: load its latest checkpoint, play N episodes, print
returns (and true objectives when the env gives them).

    python -m launch.enjoy --env=CartPole-v1 --experiment=cp --policy=0 --episodes=10
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import envs  # noqa: F401  (registers the built-in envs)
from rl_pbt.config.parse import experiment_dir
from rl_pbt.envs.registry import make_env
from rl_pbt.envs.wrappers import as_multiagent
from rl_pbt.models.loading import PolicyActor, experiment_cfg, load_policy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", required=True)
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--train_dir", default="train_dir")
    parser.add_argument("--policy", type=int, default=0, help="population member to load")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--deterministic", action="store_true", help="argmax actions")
    parser.add_argument("--max_steps", type=int, default=100_000, help="bound on total steps")
    args = parser.parse_args(argv)

    exp_dir = experiment_dir(args)
    try:
        cfg = experiment_cfg(exp_dir, {"env": args.env})
        env = as_multiagent(
            make_env(args.env, cfg, {"worker_index": 0, "vector_index": 0, "env_id": 0})
        )
        model = load_policy(exp_dir, args.policy, env.observation_space, env.action_space, cfg)
    except (FileNotFoundError, ValueError) as e:
        print(f"rl-pbt-enjoy: error: {e}", file=sys.stderr)
        return 2
    actors = [
        PolicyActor(model, env.observation_space, env.action_space, args.deterministic)
        for _ in range(env.num_agents)
    ]
    obs, _ = env.reset(seed=cfg.seed)
    returns, objectives = [], []
    extras: dict[str, list[float]] = {}
    ep_ret = np.zeros(env.num_agents)
    steps = 0
    while len(returns) < args.episodes and steps < args.max_steps:
        obs, rew, term, trunc, infos = env.step([a.act(o) for a, o in zip(actors, obs)])
        ep_ret += rew
        steps += 1
        if all(t or u for t, u in zip(term, trunc)):
            returns.append(float(ep_ret[0]))
            obj = infos[0].get("true_objective")
            objectives.append(obj)
            for k, v in infos[0].get("episode_extra_stats", {}).items():
                extras.setdefault(k, []).append(float(v))
            extra = f", true_objective {obj:.3g}" if obj is not None else ""
            print(f"episode {len(returns)}: return {ep_ret[0]:.3f}{extra}")
            ep_ret[:] = 0
            for a in actors:
                a.reset()
    env.close()
    if returns:
        print(
            f"policy {args.policy}: mean return {np.mean(returns):.3f} over {len(returns)} episodes"
        )
        if all(o is not None for o in objectives):
            print(f"policy {args.policy}: mean true_objective {np.mean(objectives):.3f}")
        for k, values in extras.items():
            print(f"policy {args.policy}: mean {k} {np.mean(values):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
