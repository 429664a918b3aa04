"""Play trained policies and baselines against each other; print a cross-play table and Elo.

    python -m launch.match --env=arena_duel --experiment=arena_pbt_demo \
        --players p0 p1 p2 random chaser --games=200

A player is `pN` (policy N of --experiment), `EXPERIMENT:pN` (another experiment),
`random` (uniform over the legal actions) or a scripted player the env registers
(`register_scripted_policy`): `chaser` for the arena, `alphabeta` for connect four, with
parameters as `alphabeta:depth=4`. In an env with 2k agents, the first k seats are one side
and the rest the other; every pairing plays half its games on each side.

With `--num_envs=K` (K > 1) the games of a pairing run K at a time in the env's batched
version (envs registered with one, such as the arena), each trained player acting for all its
seats with one model call per step: the same games, many times faster.

`--env` may be left out when a player comes from an experiment: the run's env is used. The
ratings are fitted to all games at once (`fit_ratings`: Bradley-Terry in Elo units), so they
do not depend on the order of the games. `--save_video` (optionally a path ending in .mp4 or
.gif) records one more game of the first two players, by default to
`{train_dir}/{experiment}/videos/`.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Optional, Sequence

import gymnasium as gym
import numpy as np
import torch

import envs  # noqa: F401  (registers the built-in envs)
from launch import ToolParser, command, integer, summary
from rl_pbt.config.flags import seed_range
from rl_pbt.envs.registry import has_batched_env, make_env, make_env_batch
from rl_pbt.envs.scripted import (  # noqa: F401  (RandomActor: for callers of this module)
    RandomActor,
    looks_scripted,
    make_scripted,
    scripted_policies,
)
from rl_pbt.envs.wrappers import as_multiagent
from rl_pbt.learning.checkpoints import CheckpointError
from rl_pbt.logging.video import (
    VideoWriter,
    add_video_flag,
    check_video_path,
    default_video_path,
    env_fps,
    episode_end_frame,
    render_problem,
)
from rl_pbt.models.action_dist import to_env_action
from rl_pbt.models.loading import (
    PolicyActor,
    add_play_flags,
    checkpoint_misfit,
    experiment_cfg,
    given_env_problem,
    load_policy,
    play_cfg,
    play_flags_problem,
    run_env_problem,
)
from rl_pbt.sampling.elo import DEFAULT_RATING


def make_player(spec: str, env, args, seed: int) -> Callable[[], Any]:
    """Returns a factory of per-seat actors for the player named by `spec`."""
    env_name = getattr(args, "env", None)
    if looks_scripted(spec):  # a name of another env fails in make_scripted, in one line
        make_scripted(env_name, spec, env, seed)  # a bad name or parameter fails here, once
        return lambda: _Scripted(make_scripted(env_name, spec, env, seed))
    model = _load_model(spec, env, args)
    return lambda: PolicyActor(
        model,
        env.observation_space,
        env.action_space,
        deterministic=args.deterministic,
        temperature=getattr(args, "temperature", 1.0),
    )


def parse_player(
    spec: str, experiment: Optional[str], env_name: Optional[str] = None
) -> Optional[tuple[str, int]]:
    """(experiment, policy id) of a trained player; None for `random` and scripted players.
    ValueError (one line) for a spec of no known form, or `pN` without --experiment."""
    if looks_scripted(spec):
        return None
    exp, _, pol = spec.rpartition(":")
    if not pol.startswith("p") or not pol[1:].isdigit():
        known = f" ({', '.join(scripted_policies(env_name))} for {env_name})" if env_name else ""
        raise ValueError(
            f"player {spec!r}: expected pN, EXPERIMENT:pN, random or a scripted player of the "
            f"env{known} (NAME or NAME:key=value)"
        )
    if not exp and not experiment:
        raise ValueError(f"player {spec!r} needs --experiment (or name it EXPERIMENT:{spec})")
    return exp or experiment, int(pol[1:])


def resolve_env(args) -> str:
    """--env, else the env the first trained player's experiment was trained on."""
    if args.env:
        problem = given_env_problem(args.env, "launch.match")
        if problem:
            raise ValueError(problem)
        return args.env
    for spec in args.players:
        found = parse_player(spec, args.experiment)
        if found is not None:
            exp_dir = os.path.join(args.train_dir, found[0])
            env = experiment_cfg(exp_dir).env
            problem = run_env_problem(exp_dir, env, "launch.match")
            if problem:
                raise ValueError(f"player {spec!r}: {problem}; or give --env=NAME")
            return env
    raise ValueError(
        "--env is needed when no player comes from an experiment (e.g. --env=arena_duel)"
    )


def _load_model(spec: str, env, args):
    """The trained model of player `spec` (`pN` of --experiment or `EXPERIMENT:pN`)."""
    exp, policy_id = parse_player(spec, args.experiment)
    exp_dir = os.path.join(args.train_dir, exp)
    cfg = experiment_cfg(exp_dir)
    trained_on, cfg.env = cfg.env, args.env
    try:
        return load_policy(exp_dir, policy_id, env.observation_space, env.action_space, cfg)
    except CheckpointError:  # unusable, whatever the env
        raise
    except (RuntimeError, ValueError) as e:  # torch's size mismatch, or a model flag (such
        # as its observation features) another env has not: another env's run
        if args.env == trained_on:  # the run's own env: the checkpoint and config.json disagree
            if isinstance(e, ValueError):
                raise
            raise ValueError(checkpoint_misfit(exp_dir, policy_id, e)) from e
        if not getattr(args, "env_given", True):  # the env of another player's run
            raise ValueError(
                f"player {spec!r} was trained on {trained_on}, whose observations or actions "
                f"differ from those of {args.env}, the env of the first trained player's run: "
                "a match is played in one env; name players of runs of one env"
            ) from e
        raise ValueError(
            f"player {spec!r} was trained on {trained_on}, whose observations or actions differ "
            f"from --env={args.env}'s; leave --env out to play in {trained_on}"
        ) from e


class BatchPolicyActor:
    """Acts for `seats` seats at once with one trained model: one forward pass per step, one
    RNN state per seat. The actions of seat k are those a `PolicyActor` would draw there."""

    def __init__(
        self,
        model,
        obs_space,
        action_space,
        seats: int,
        deterministic: bool = False,
        temperature: float = 1.0,
    ):
        if not isinstance(obs_space, gym.spaces.Box):
            raise ValueError("batched matches need Box observations")
        self.model, self.action_space = model, action_space
        self.deterministic, self.temperature = deterministic, temperature
        self.h = torch.zeros(seats, model.rnn_size) if model.rnn_size else None

    def reset(self, rows) -> None:
        if self.h is not None:
            self.h[rows] = 0.0

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> np.ndarray:
        batch = {"obs": torch.as_tensor(np.asarray(obs, dtype=np.float32))}
        actions, _, _, self.h = self.model.act(
            batch, self.h, deterministic=self.deterministic, temperature=self.temperature
        )
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
    if looks_scripted(spec):
        factory = make_player(spec, env, args, seed)
        return lambda seats: SeatActors(factory, seats)
    model = _load_model(spec, env, args)
    return lambda seats: BatchPolicyActor(
        model,
        env.observation_space,
        env.action_space,
        seats,
        deterministic=args.deterministic,
        temperature=getattr(args, "temperature", 1.0),
    )


class _Scripted:
    def __init__(self, player):
        self.player = player

    def act(self, obs):
        return self.player.act(obs)

    def reset(self) -> None:
        reset = getattr(self.player, "reset", None)
        if reset is not None:
            reset()


def game_score(info: dict) -> float:
    """Side A's score of a game from its first agent's last info: `true_objective`, which a
    match needs as 1 win, 0.5 draw, 0 loss (a value in [0, 1]); ValueError (one line) else."""
    score = info.get("true_objective")
    try:
        ok = score is not None and 0.0 <= float(score) <= 1.0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(
            f"a game ended with info['true_objective']={score!r}: a match scores each game by "
            "it and needs 1 for a win, 0.5 for a draw, 0 for a loss (a value in [0, 1]); give "
            "it in the infos of the step that ends the game (a PettingZoo game: "
            "register_pettingzoo_aec_env or register_pettingzoo_env with objective=..., "
            "mapping a return to that score)"
        )
    return float(score)


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
            scores.append(game_score(infos[0]))
            for s in seats:
                s.reset()
    return scores


def seeded(seed: int) -> SimpleNamespace:
    """The cfg an env factory gets here: only `seed` (envs seed themselves from `cfg.seed` and
    their env id, and draw fresh entropy without a cfg)."""
    return SimpleNamespace(seed=seed)


def make_batch_env(env_name: str, num_envs: int, seed: int, cfg=None):
    """`num_envs` copies of `env_name` as its batched version, seeded from `seed`, with the env
    flags of `cfg` (a run's, see `env_cfg`; the env's defaults without one)."""
    configs = [{"worker_index": 0, "vector_index": k, "env_id": k} for k in range(num_envs)]
    return make_env_batch(env_name, seeded(seed) if cfg is None else cfg, configs)


def env_cfg(args):
    """The cfg the match's env is made from: the config of the first trained player's run
    when it was trained on the match's env (its env flags as trained, those for training
    games only at their defaults, `--seed`); else the env's defaults and `--seed`."""
    for spec in args.players:
        found = parse_player(spec, args.experiment)
        if found is not None:
            cfg = experiment_cfg(os.path.join(args.train_dir, found[0]))
            return play_cfg(cfg, args.seed) if cfg.env == args.env else seeded(args.seed)
    return seeded(args.seed)


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
                scores[k].append(game_score(infos[k][0]))
            played[k] += 1
            side_a.reset(slice(k * half, (k + 1) * half))
            side_b.reset(slice(k * (n - half), (k + 1) * (n - half)))
    return [s for copy in scores for s in copy]


def score_interval(scores: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a mean score in [0, 1] (a draw counts half): it stays inside
    [0, 1] and is not empty for a perfect score, unlike mean +- z standard errors."""
    n = len(scores)
    if n == 0:
        return 0.0, 1.0
    p = float(np.mean(scores))
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


ELO_SCALE = 400.0 / np.log(10.0)  # Elo points per unit of log-odds


def fit_ratings(
    games: Sequence[tuple[int, int, float]], num_players: int, prior_sd: float = 400.0
) -> tuple[np.ndarray, np.ndarray]:
    """Bradley-Terry ratings in Elo units fitted to all `games` at once (maximum a posteriori).

    A game is (i, j, score of i): 1 win, 0.5 draw (half a win and half a loss), 0 loss, and
    P(i beats j) = 1 / (1 + 10 ** ((r_j - r_i) / 400)). Every rating has a N(0, prior_sd^2)
    prior: it keeps an unbeaten player's rating finite and moves the others little once they
    have played some dozens of games. The fit sees the games only through per-pair totals, so
    their order does not matter. Returns the ratings (mean 0) and their standard errors
    relative to the mean (from the curvature of the log posterior at its peak).
    """
    g = np.asarray(games, dtype=np.float64).reshape(-1, 3)
    i, j, s = g[:, 0].astype(np.int64), g[:, 1].astype(np.int64), g[:, 2]
    if len(g) and (i.min() < 0 or j.min() < 0 or max(i.max(), j.max()) >= num_players):
        raise ValueError(f"game with a player outside 0..{num_players - 1}")
    if np.any(i == j) or np.any((s < 0) | (s > 1)):
        raise ValueError("a game needs two different players and a score in [0, 1]")
    once = np.zeros((num_players, num_players))
    won = np.zeros((num_players, num_players))
    np.add.at(once, (i, j), 1.0)
    np.add.at(won, (i, j), s)
    played = once + once.T  # games between i and j
    score = won + (once - won).T  # i's score against j, draws counting half
    prior = (ELO_SCALE / prior_sd) ** 2  # in log-odds units

    def log_posterior(x: np.ndarray) -> float:
        d = x[:, None] - x[None, :]
        return float(-(score * np.logaddexp(0.0, -d)).sum() - 0.5 * prior * x @ x)

    x = np.zeros(num_players)  # ratings in log-odds units
    value = log_posterior(x)
    for _ in range(100):  # Newton's method on a strictly concave function: a few steps
        p = 1.0 / (1.0 + np.exp(-(x[:, None] - x[None, :])))
        grad = (score - played * p).sum(axis=1) - prior * x
        curv = played * p * (1.0 - p)
        neg_hessian = np.diag(curv.sum(axis=1) + prior) - curv
        step = np.linalg.solve(neg_hessian, grad)
        t = 1.0
        while t > 1e-6 and log_posterior(x + t * step) < value - 1e-12:
            t *= 0.5
        x = x + t * step
        value = log_posterior(x)
        if np.max(np.abs(t * step)) < 1e-10:
            break
    p = 1.0 / (1.0 + np.exp(-(x[:, None] - x[None, :])))
    curv = played * p * (1.0 - p)
    cov = np.linalg.inv(np.diag(curv.sum(axis=1) + prior) - curv)
    centre = np.eye(num_players) - 1.0 / num_players
    stderr = np.sqrt(np.clip(np.diag(centre @ cov @ centre), 0.0, None))
    return x * ELO_SCALE, stderr * ELO_SCALE


@dataclass
class Ratings:
    """The players' fitted Elo ratings (mean DEFAULT_RATING), their standard errors, games
    played and mean scores."""

    names: list[str]
    elo: np.ndarray
    stderr: np.ndarray
    games: np.ndarray
    score: np.ndarray
    results: list = field(default_factory=list)  # the games: (i, j, score of i)

    @classmethod
    def fit(cls, names: list[str], games: list[tuple[int, int, float]]) -> Ratings:
        elo, stderr = fit_ratings(games, len(names))
        g = np.asarray(games, dtype=np.float64).reshape(-1, 3)
        idx = np.concatenate([g[:, 0], g[:, 1]]).astype(np.int64)
        points = np.concatenate([g[:, 2], 1.0 - g[:, 2]])
        count = np.bincount(idx, minlength=len(names))
        total = np.bincount(idx, weights=points, minlength=len(names))
        score = np.divide(total, count, out=np.full(len(names), np.nan), where=count > 0)
        return cls(list(names), elo + DEFAULT_RATING, stderr, count, score, list(games))

    def pair_scores(self, z: float = 1.96) -> list[tuple[str, str, float, float, float, int]]:
        """Per pairing: (row player, column player, score of the row player, low, high of its
        confidence interval, games)."""
        out = []
        for i, j in sorted({(a, b) for a, b, _ in self.results}):
            s = [x for a, b, x in self.results if (a, b) == (i, j)]
            lo, hi = score_interval(s, z)
            out.append((self.names[i], self.names[j], float(np.mean(s)), lo, hi, len(s)))
        return out

    def rating(self, name: str) -> float:
        return float(self.elo[self.names.index(name)])

    def table(self) -> str:
        """Highest rating first; ± is one standard error."""
        width = max(6, *(len(n) for n in self.names))
        lines = [f"{'rank':>4}  {'player':<{width}}  {'elo':>7}  {'+/-':>5}  {'games':>6}  score"]
        for rank, k in enumerate(np.argsort(-self.elo, kind="stable"), start=1):
            lines.append(
                f"{rank:>4}  {self.names[k]:<{width}}  {self.elo[k]:>7.1f}  "
                f"{self.stderr[k]:>5.1f}  {self.games[k]:>6d}  {self.score[k]:.3f}"
            )
        return "\n".join(lines)


def cross_play(env, names: list[str], factories: dict, games: int, max_steps: int, batch_env=None):
    """Every pairing of `names` plays `games` games, half on each side: the row player's win
    rates (draw = 0.5) and the `Ratings` fitted to all those games. With `batch_env` (a batched
    env), `factories` are batch-player factories (`make_batch_player`) and the games run in it."""
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
    played = np.zeros((len(names), len(names)), dtype=np.int64)  # games that ended, per pair
    results: list[tuple[int, int, float]] = []
    for (i, a), (j, b) in itertools.combinations(enumerate(names), 2):
        first = run(a, b, games // 2)
        second = run(b, a, games - games // 2)
        scores_a = first + [1.0 - s for s in second]
        played[i, j] = played[j, i] = len(scores_a)
        if scores_a:  # none ended within max_steps: no win rate
            table[i, j] = float(np.mean(scores_a))
            table[j, i] = 1.0 - table[i, j]
        results += [(i, j, s) for s in scores_a]
    return table, Ratings.fit(names, results), played


def build_parser() -> argparse.ArgumentParser:
    parser = ToolParser("rl-pbt-match", summary(__doc__))
    parser.add_argument("--env", default=None, help="default: the env of the players' experiment")
    parser.add_argument("--experiment", default=None, help="the run whose members pN are")
    parser.add_argument("--train_dir", default="train_dir", type=os.path.expanduser)
    parser.add_argument("--players", nargs="+", required=True)
    parser.add_argument("--games", type=integer, default=200, help="games per pairing")
    add_play_flags(parser)
    parser.add_argument("--seed", type=integer, default=0, help="seeds the env and every player")
    parser.add_argument("--max_steps", type=integer, default=5_000_000, help="bound per pairing")
    parser.add_argument(
        "--num_envs",
        type=integer,
        default=1,
        help="games played at once in the env's batched version (1: one game at a time)",
    )
    add_video_flag(parser, "one more game of the first two players", "A_vs_B")
    return parser


def video_path(args) -> str:
    """Where --save_video writes (checked before any game is played)."""
    path = args.save_video
    if not path:  # the folder of the first trained player's run, else --train_dir
        runs = [parse_player(p, args.experiment) for p in args.players[:2]]
        exp = next((run[0] for run in runs if run is not None), args.experiment)
        folder = os.path.join(args.train_dir, exp) if exp else args.train_dir
        path = default_video_path(folder, "_vs_".join(args.players[:2]))
    path, note = check_video_path(path)
    if note:
        print(note)
    return path


def check_args(args) -> None:
    """ValueError (one line naming the flag) for values no match can use."""
    for flag in ("games", "max_steps", "num_envs"):
        value = getattr(args, flag)
        if value < 1:
            raise ValueError(f"--{flag}={value}: must be at least 1")
    problem = seed_range(args.seed)
    if problem:
        raise ValueError(f"--seed={args.seed}: {problem}")
    problem = play_flags_problem(args)
    if problem:
        raise ValueError(problem)
    for spec in args.players:
        try:
            parse_player(spec, args.experiment, args.env)
        except ValueError:
            env = args.env or _env_of_the_runs(args)
            if env is not None:  # the same error, naming the scripted players of the env
                parse_player(spec, args.experiment, env)
            raise


def _env_of_the_runs(args) -> Optional[str]:
    """The env of the first trained player's run, when one names a run that can be read
    (None otherwise: resolve_env says what is wrong with it later)."""
    for spec in args.players:
        try:
            found = parse_player(spec, args.experiment)
        except ValueError:
            continue
        if found is not None:
            try:
                return experiment_cfg(os.path.join(args.train_dir, found[0])).env
            except (OSError, ValueError):
                return None
    return None


def check_players(args) -> None:
    """ValueError (one line) for a player named twice, as the same name or as the same
    member of the same run."""
    seen: dict[Any, str] = {}
    for spec in args.players:
        found = parse_player(spec, args.experiment, args.env)
        key = ("policy", *found) if found is not None else ("scripted", spec)
        if key in seen:
            same = f"{spec!r} twice" if seen[key] == spec else f"{seen[key]!r} and {spec!r}"
            raise ValueError(
                f"--players names {same}, the same player: a player does not play itself; "
                "name each player once"
            )
        seen[key] = spec


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if len(args.players) < 2:
        parser.error("--players needs at least two players")
    torch.set_num_threads(1)  # one game or a small batch a step: more threads only contend

    try:
        check_args(args)
        torch.manual_seed(args.seed)  # trained players sample their actions from torch's rng
        args.env_given = args.env is not None
        args.env = resolve_env(args)
        if args.num_envs > 1 and not has_batched_env(args.env):
            raise ValueError(
                f"--num_envs={args.num_envs}: env {args.env!r} has no batched version; "
                "use --num_envs=1"
            )
        check_players(args)
        video = video_path(args) if args.save_video is not None else None
        cfg = env_cfg(args)
        env = as_multiagent(
            make_env(
                args.env,
                cfg,
                {"worker_index": 0, "vector_index": 0, "env_id": 0},
                render_mode="rgb_array" if video else None,
            )
        )
        if env.num_agents < 2:
            raise ValueError(f"--env={args.env} has one agent: matches need a multi-agent env")
        if args.num_envs > 1 and not isinstance(env.observation_space, gym.spaces.Box):
            space = type(env.observation_space).__name__
            raise ValueError(
                f"--num_envs={args.num_envs}: batched matches need flat (Box) observations, "
                f"and {args.env}'s are a {space}; use --num_envs=1 for this env"
            )
        if video:
            env.reset()
            problem = render_problem(env, args.env)
            if problem:
                raise ValueError(problem)
        batch_env = None
        if args.num_envs > 1:
            batch_env = make_batch_env(args.env, args.num_envs, args.seed, cfg)
            if not callable(getattr(batch_env, "reset", None)):
                batch_env.close()
                raise ValueError(
                    f"--num_envs={args.num_envs}: the batched version of {args.env} cannot "
                    "start all its games at once (it has no reset()); use --num_envs=1"
                )
        make = make_batch_player if batch_env is not None else make_player
        factories = {p: make(p, env, args, args.seed + k) for k, p in enumerate(args.players)}
    except (FileNotFoundError, ValueError) as e:
        print(f"rl-pbt-match: error: {e}", file=sys.stderr)
        return 2

    try:
        table, ratings, played = cross_play(
            env, args.players, factories, args.games, args.max_steps, batch_env=batch_env
        )
    except ValueError as e:  # a game without a score
        env.close()
        print(f"rl-pbt-match: error: --env={args.env}: {e}", file=sys.stderr)
        return 2
    pairs = list(itertools.combinations(range(len(args.players)), 2))
    if all(played[i, j] == 0 for i, j in pairs):
        print(
            f"rl-pbt-match: error: no game ended within --max_steps={args.max_steps} env "
            "steps; raise it",
            file=sys.stderr,
        )
        return 1
    counts = {int(played[i, j]) for i, j in pairs}
    each = f"{counts.pop()} games each" if len(counts) == 1 else "games per pair: see below"
    width = max(8, *(len(p) for p in args.players)) + 2  # names never run together
    print(f"win rate of the row player against the column player ({each}, draw = 0.5):")
    print(" " * width + "".join(f"{p:>{width}}" for p in args.players))
    for i, p in enumerate(args.players):
        cells = "".join(
            f"{'-':>{width}}"
            if i == j
            else (f"{'n/a':>{width}}" if played[i, j] == 0 else f"{table[i, j]:>{width}.3f}")
            for j in range(len(args.players))
        )
        print(f"{p:>{width}}{cells}")
    for i, j in pairs:
        if played[i, j] < args.games:
            a, b = args.players[i], args.players[j]
            print(
                f"note: {played[i, j]} of the {args.games} games of {a} against {b} ended "
                f"within --max_steps={args.max_steps} env steps"
            )
    print(
        "\nElo ratings fitted to all games at once (Bradley-Terry, draw = half a win; "
        "+/- one standard error):"
    )
    print(ratings.table())
    print("\nscore of the first player with its 95% confidence interval (Wilson):")
    for a, b, score, lo, hi, n in ratings.pair_scores():
        print(f"  {a} vs {b}: {score:.3f} [{lo:.3f}, {hi:.3f}] over {n} games")
    if video:
        players = {p: make_player(p, env, args, args.seed) for p in args.players[:2]}
        save_video(env, args.players[:2], players, video)
    env.close()
    return 0


def save_video(env, pair: list[str], factories: dict, path: str, max_steps: int = 100_000) -> int:
    """Plays one game of `pair` (first half of the seats to the first) in `env` (made with
    render_mode="rgb_array") and writes its frames to `path`; returns the frame count."""
    n = env.num_agents
    a, b = pair
    seats = [factories[a]() for _ in range(n // 2)] + [factories[b]() for _ in range(n - n // 2)]
    obs, _ = env.reset()
    infos: list = []
    with VideoWriter(path, env_fps(env)) as video:
        frame = env.render()
        video.append(frame)
        for _ in range(max_steps):
            obs, _, term, trunc, infos = env.step([s.act(o) for s, o in zip(seats, obs)])
            if all(t or u for t, u in zip(term, trunc)):
                frame = episode_end_frame(env, frame)  # the env has begun the next game
                video.append(frame)
                break
            frame = env.render()
            video.append(frame)
        for _ in range(int(video.fps) // 2):
            video.append(frame)
    result = infos[0].get("true_objective") if infos else None
    outcome = "" if result is None else f" ({a} scored {result:g})"
    print(f"saved a game of {a} vs {b}{outcome}: {video.frames} frames to {path}")
    return video.frames


def cli(argv: list[str] | None = None) -> int:
    """`rl-pbt-match`: main() as the process's last work (see launch.command)."""
    return command(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
