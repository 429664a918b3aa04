"""Play trained policies and baselines against each other; print a cross-play table and Elo.

    python -m launch.match --env=arena_duel --experiment=arena_pbt_demo \
        --players p0 p1 p2 random chaser --games=200

A player is `pN` (policy N of --experiment), `EXPERIMENT:pN` (another experiment),
`random` (uniform random actions) or a scripted baseline the env provides (`chaser` for the
arena). In an env with 2k agents, the first k seats are one side and the rest the other;
every pairing plays half its games on each side.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from typing import Any, Callable

import numpy as np

import envs  # noqa: F401  (registers the built-in envs)
from rl_pbt.envs.registry import make_env
from rl_pbt.envs.wrappers import as_multiagent
from rl_pbt.models.loading import PolicyActor, experiment_cfg, load_policy
from rl_pbt.sampling.elo import EloRatings

SCRIPTED = {"chaser": ("envs.arena.scripted", "ChaserPlayer")}


class RandomActor:
    def __init__(self, action_space, seed: int):
        self.space = action_space
        self.space.seed(seed)

    def act(self, obs):
        return self.space.sample()

    def reset(self) -> None:
        pass


def make_player(spec: str, env, args, seed: int) -> Callable[[], Any]:
    """Returns a factory of per-seat actors for the player named by `spec`."""
    if spec == "random":
        return lambda: RandomActor(env.action_space, seed)
    if spec in SCRIPTED:
        module, cls = SCRIPTED[spec]
        player_cls = getattr(__import__(module, fromlist=[cls]), cls)
        return lambda: _Scripted(player_cls(num_agents=env.num_agents, seed=seed))
    exp, _, pol = spec.rpartition(":")
    if not pol.startswith("p") or not pol[1:].isdigit():
        raise ValueError(
            f"player {spec!r}: expected pN, EXPERIMENT:pN, random or one of {sorted(SCRIPTED)}"
        )
    exp_dir = os.path.join(args.train_dir, exp or args.experiment)
    cfg = experiment_cfg(exp_dir, {"env": args.env})
    model = load_policy(exp_dir, int(pol[1:]), env.observation_space, env.action_space, cfg)
    return lambda: PolicyActor(
        model, env.observation_space, env.action_space, deterministic=args.deterministic
    )


class _Scripted:
    def __init__(self, player):
        self.player = player

    def act(self, obs):
        return self.player.act(obs)

    def reset(self) -> None:
        pass


def play(env, side_a: list, side_b: list, games: int, max_steps: int) -> list[float]:
    """Scores of side A (1 win, 0.5 draw, 0 loss) over `games` episodes."""
    n = env.num_agents
    half = n // 2
    seats = side_a[:half] + side_b[: n - half]
    obs, _ = env.reset()
    scores: list[float] = []
    steps = 0
    while len(scores) < games and steps < max_steps:
        obs, _, term, trunc, infos = env.step([s.act(o) for s, o in zip(seats, obs)])
        steps += 1
        if all(t or u for t, u in zip(term, trunc)):
            scores.append(float(infos[0].get("true_objective", 0.5)))
            for s in seats:
                s.reset()
    return scores


def cross_play(env, names: list[str], factories: dict, games: int, max_steps: int):
    n = env.num_agents
    table = np.full((len(names), len(names)), np.nan)
    elo = EloRatings(k=16.0)
    for (i, a), (j, b) in itertools.combinations(enumerate(names), 2):
        first = play(
            env,
            [factories[a]() for _ in range(n)],
            [factories[b]() for _ in range(n)],
            games // 2,
            max_steps,
        )
        second = play(
            env,
            [factories[b]() for _ in range(n)],
            [factories[a]() for _ in range(n)],
            games - games // 2,
            max_steps,
        )
        scores_a = first + [1.0 - s for s in second]
        table[i, j] = float(np.mean(scores_a))
        table[j, i] = 1.0 - table[i, j]
        for s in scores_a:
            elo.record_match([a], [b], s)
    return table, elo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", required=True)
    parser.add_argument("--experiment", default=None)
    parser.add_argument("--train_dir", default="train_dir")
    parser.add_argument("--players", nargs="+", required=True)
    parser.add_argument("--games", type=int, default=200, help="games per pairing")
    parser.add_argument("--deterministic", action="store_true", help="argmax actions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_steps", type=int, default=5_000_000, help="bound per pairing")
    parser.add_argument(
        "--save_video",
        default=None,
        help="write one game of the first two players to this .npy file "
        "(frames, when the env renders rgb_array)",
    )
    args = parser.parse_args(argv)
    if len(args.players) < 2:
        parser.error("--players needs at least two players")

    try:
        env = as_multiagent(
            make_env(args.env, None, {"worker_index": 0, "vector_index": 0, "env_id": args.seed})
        )
        if env.num_agents < 2:
            raise ValueError(f"--env={args.env} has one agent: matches need a multi-agent env")
        factories = {
            p: make_player(p, env, args, args.seed + k) for k, p in enumerate(args.players)
        }
    except (FileNotFoundError, ValueError) as e:
        print(f"rl-pbt-match: error: {e}", file=sys.stderr)
        return 2

    table, elo = cross_play(env, args.players, factories, args.games, args.max_steps)
    width = max(8, *(len(p) for p in args.players))
    print(
        f"win rate of the row player against the column player ({args.games} games each, "
        f"draw = 0.5):"
    )
    print(" " * width + "".join(f"{p:>{width}}" for p in args.players))
    for i, p in enumerate(args.players):
        cells = "".join(
            f"{'-':>{width}}" if i == j else f"{table[i, j]:>{width}.3f}"
            for j in range(len(args.players))
        )
        print(f"{p:>{width}}{cells}")
    print("\nElo ratings from these games:")
    print(elo.table())
    if args.save_video:
        save_video(args, factories)
    env.close()
    return 0


def save_video(args, factories) -> None:
    env = as_multiagent(
        make_env(
            args.env,
            None,
            {"worker_index": 0, "vector_index": 0, "env_id": args.seed},
            render_mode="rgb_array",
        )
    )
    n = env.num_agents
    a, b = args.players[:2]
    seats = [factories[a]() for _ in range(n // 2)] + [factories[b]() for _ in range(n - n // 2)]
    obs, _ = env.reset()
    frames = [env.render()]
    for _ in range(100_000):
        obs, _, term, trunc, _ = env.step([s.act(o) for s, o in zip(seats, obs)])
        if all(t or u for t, u in zip(term, trunc)):
            break
        frames.append(env.render())
    if frames[0] is None:
        print(f"--save_video: env {args.env} does not render rgb_array frames")
        return
    np.save(args.save_video, np.stack(frames))
    print(f"saved {len(frames)} frames of {a} vs {b} to {args.save_video}")


if __name__ == "__main__":
    sys.exit(main())
