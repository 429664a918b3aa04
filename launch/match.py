"""Play trained policies and baselines against each other; print a cross-play table and Elo.

    python -m launch.match --env=arena_duel --experiment=arena_pbt_demo \
        --players p0 p1 p2 random chaser --games=200

A player is `pN` (policy N of --experiment), `EXPERIMENT:pN` (another experiment),
`random` (uniform random actions) or a scripted baseline the env provides (`chaser` for the
arena). In an env with 2k agents, the first k seats are one side and the rest the other;
every pairing plays half its games on each side.

With `--num_envs=K` (K > 1) the games of a pairing run K at a time in the env's batched
version (envs registered with one, such as the arena), each trained player acting for all its
seats with one model call per step: the same games, many times faster.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from types import SimpleNamespace
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch

import envs  # noqa: F401  (registers the built-in envs)
from rl_pbt.envs.registry import has_batched_env, make_env, make_env_batch
from rl_pbt.envs.wrappers import as_multiagent
from rl_pbt.models.action_dist import to_env_action
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
    model = _load_model(spec, env, args)
    return lambda: PolicyActor(
        model, env.observation_space, env.action_space, deterministic=args.deterministic
    )


def _load_model(spec: str, env, args):
    """The trained model of player `spec` (`pN` of --experiment or `EXPERIMENT:pN`)."""
    exp, _, pol = spec.rpartition(":")
    if not pol.startswith("p") or not pol[1:].isdigit():
        raise ValueError(
            f"player {spec!r}: expected pN, EXPERIMENT:pN, random or one of {sorted(SCRIPTED)}"
        )
    exp_dir = os.path.join(args.train_dir, exp or args.experiment)
    cfg = experiment_cfg(exp_dir, {"env": args.env})
    return load_policy(exp_dir, int(pol[1:]), env.observation_space, env.action_space, cfg)


class BatchPolicyActor:
    """Acts for `seats` seats at once with one trained model: one forward pass per step, one
    RNN state per seat. The actions of seat k are those a `PolicyActor` would draw there."""

    def __init__(self, model, obs_space, action_space, seats: int, deterministic: bool = False):
        if not isinstance(obs_space, gym.spaces.Box):
            raise ValueError("batched matches need Box observations")
        self.model, self.action_space = model, action_space
        self.deterministic = deterministic
        self.h = torch.zeros(seats, model.rnn_size) if model.rnn_size else None

    def reset(self, rows) -> None:
        if self.h is not None:
            self.h[rows] = 0.0

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> np.ndarray:
        batch = {"obs": torch.as_tensor(np.asarray(obs, dtype=np.float32))}
        actions, _, _, self.h = self.model.act(batch, self.h, deterministic=self.deterministic)
        if self.model.act_spec.kind == "discrete" and actions.shape[-1] == 1:
            return actions[:, 0].numpy()
        return np.stack([to_env_action(self.model.act_spec, self.action_space, a) for a in actions])


class SeatActors:
    """Any player for `seats` seats as one batch actor: one per-seat actor per seat."""

    def __init__(self, factory: Callable[[], Any], seats: int):
        self.actors = [factory() for _ in range(seats)]

    def reset(self, rows) -> None:
        for r in np.atleast_1d(np.arange(len(self.actors))[rows]).tolist():
            self.actors[r].reset()

    def act(self, obs: np.ndarray) -> np.ndarray:
        return np.array([a.act(o) for a, o in zip(self.actors, obs)])


def make_batch_player(spec: str, env, args, seed: int) -> Callable[[int], Any]:
    """Returns a factory of batch actors (`factory(seats)`) for the player named by `spec`:
    trained policies act for all their seats with one model call, other players seat by seat."""
    if spec == "random" or spec in SCRIPTED:
        factory = make_player(spec, env, args, seed)
        return lambda seats: SeatActors(factory, seats)
    model = _load_model(spec, env, args)
    return lambda seats: BatchPolicyActor(
        model, env.observation_space, env.action_space, seats, deterministic=args.deterministic
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


def seeded(seed: int) -> SimpleNamespace:
    """The cfg an env factory gets here: only `seed` (envs seed themselves from `cfg.seed` and
    their env id, and draw fresh entropy without a cfg)."""
    return SimpleNamespace(seed=seed)


def make_batch_env(env_name: str, num_envs: int, seed: int):
    """`num_envs` copies of `env_name` as its batched version, seeded from `seed`."""
    configs = [{"worker_index": 0, "vector_index": k, "env_id": k} for k in range(num_envs)]
    return make_env_batch(env_name, seeded(seed), configs)


def play_batched(batch_env, side_a, side_b, games: int, max_steps: int) -> list[float]:
    """`play` over the K copies of a batched env (`BatchedMultiAgentEnv`): side A's batch
    actor takes the first half of the seats of every copy, side B's the rest. Every copy plays
    the same number of games, ceil(games / K), and only those count, so that quick games are
    not over-represented; returns those scores of side A (at least `games` of them)."""
    K, n = batch_env.num_envs, batch_env.num_agents
    half = n // 2
    quota = -(-games // K)
    played = np.zeros(K, dtype=np.int64)
    scores: list[list[float]] = [[] for _ in range(K)]
    obs, _ = batch_env.reset()
    for _ in range(max_steps):
        if played.min() >= quota:
            break
        acts = np.empty((K, n), dtype=np.int64)
        acts[:, :half] = side_a.act(obs[:, :half].reshape(K * half, -1)).reshape(K, half)
        acts[:, half:] = side_b.act(obs[:, half:].reshape(K * (n - half), -1)).reshape(K, n - half)
        obs, _, term, trunc, infos = batch_env.step(acts)
        for k in np.flatnonzero(term | trunc).tolist():
            if played[k] < quota:
                scores[k].append(float(infos[k][0].get("true_objective", 0.5)))
            played[k] += 1
            side_a.reset(slice(k * half, (k + 1) * half))
            side_b.reset(slice(k * (n - half), (k + 1) * (n - half)))
    return [s for copy in scores for s in copy]


def cross_play(env, names: list[str], factories: dict, games: int, max_steps: int, batch_env=None):
    """Every pairing of `names` plays `games` games, half on each side: the row player's win
    rates (draw = 0.5) and Elo ratings from those games. With `batch_env` (a batched env),
    `factories` are batch-player factories (`make_batch_player`) and the games run in it."""
    n = env.num_agents
    if batch_env is not None:
        K, half = batch_env.num_envs, n // 2

        def run(a, b, count):
            side_a, side_b = factories[a](K * half), factories[b](K * (n - half))
            return play_batched(batch_env, side_a, side_b, count, max_steps)

    else:

        def run(a, b, count):
            side_a = [factories[a]() for _ in range(n)]
            side_b = [factories[b]() for _ in range(n)]
            return play(env, side_a, side_b, count, max_steps)

    table = np.full((len(names), len(names)), np.nan)
    elo = EloRatings(k=16.0)
    for (i, a), (j, b) in itertools.combinations(enumerate(names), 2):
        first = run(a, b, games // 2)
        second = run(b, a, games - games // 2)
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
    parser.add_argument("--seed", type=int, default=0, help="seeds the env and every player")
    parser.add_argument("--max_steps", type=int, default=5_000_000, help="bound per pairing")
    parser.add_argument(
        "--num_envs",
        type=int,
        default=1,
        help="games played at once in the env's batched version (1: one game at a time)",
    )
    parser.add_argument(
        "--save_video",
        default=None,
        help="write one game of the first two players to this .npy file "
        "(frames, when the env renders rgb_array)",
    )
    args = parser.parse_args(argv)
    if len(args.players) < 2:
        parser.error("--players needs at least two players")
    torch.set_num_threads(1)  # one game or a small batch a step: more threads only contend
    torch.manual_seed(args.seed)  # trained players sample their actions from torch's generator

    try:
        if args.num_envs < 1:
            raise ValueError(f"--num_envs={args.num_envs}: must be at least 1")
        if args.num_envs > 1 and not has_batched_env(args.env):
            raise ValueError(
                f"--num_envs={args.num_envs}: env {args.env!r} has no batched version; "
                "use --num_envs=1"
            )
        env = as_multiagent(
            make_env(
                args.env, seeded(args.seed), {"worker_index": 0, "vector_index": 0, "env_id": 0}
            )
        )
        if env.num_agents < 2:
            raise ValueError(f"--env={args.env} has one agent: matches need a multi-agent env")
        batch_env = None
        if args.num_envs > 1:
            batch_env = make_batch_env(args.env, args.num_envs, args.seed)
        make = make_batch_player if batch_env is not None else make_player
        factories = {p: make(p, env, args, args.seed + k) for k, p in enumerate(args.players)}
    except (FileNotFoundError, ValueError) as e:
        print(f"rl-pbt-match: error: {e}", file=sys.stderr)
        return 2

    table, elo = cross_play(
        env, args.players, factories, args.games, args.max_steps, batch_env=batch_env
    )
    width = max(8, *(len(p) for p in args.players)) + 2  # names never run together
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
        save_video(args, {p: make_player(p, env, args, args.seed) for p in args.players[:2]})
    env.close()
    return 0


def save_video(args, factories) -> None:
    env = as_multiagent(
        make_env(
            args.env,
            seeded(args.seed),
            {"worker_index": 0, "vector_index": 0, "env_id": 0},
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
