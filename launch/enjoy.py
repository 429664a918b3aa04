"""Watch or evaluate a trained policy: load its latest checkpoint, play N episodes, print
returns (and true objectives when the env gives them); `--save_video` records them.

    python -m launch.enjoy --experiment=cp --policy=0 --episodes=10 --save_video

The env and the model's flags come from the run's `config.json`. `--env` may name another env
whose observations and actions fit the model (e.g. a Doom duel trained in self-play, watched
against bots). `--save_video` writes .mp4 (or .gif, by the extension given) to PATH, or without
one to `{train_dir}/{experiment}/videos/p{policy}_TIME.mp4`.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import envs  # noqa: F401  (registers the built-in envs)
from launch import ToolParser, command, integer, summary
from rl_pbt.config.parse import experiment_dir
from rl_pbt.envs.registry import make_env
from rl_pbt.envs.wrappers import as_multiagent, reward_shaping_target
from rl_pbt.learning.checkpoints import CheckpointError
from rl_pbt.logging.files import policy_shaping_path
from rl_pbt.logging.video import (
    VideoWriter,
    add_video_flag,
    check_video_path,
    default_video_path,
    env_fps,
    episode_end_frame,
    render_problem,
)
from rl_pbt.models.loading import (
    BOOL_FLAG,
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
from rl_pbt.pbt.search_space import saved_member_shaping


def build_parser() -> argparse.ArgumentParser:
    parser = ToolParser("rl-pbt-enjoy", summary(__doc__))
    parser.add_argument(
        "--env",
        default=None,
        help="default: the run's env; another must have the same observation and action spaces",
    )
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--train_dir", default="train_dir", type=os.path.expanduser)
    # the second names are Sample Factory's enjoy flags, so its command lines run here too
    parser.add_argument(
        "--policy", "--policy_index", type=integer, default=0, help="population member to load"
    )
    parser.add_argument("--episodes", "--max_num_episodes", type=integer, default=10)
    add_play_flags(parser)
    parser.add_argument(
        "--max_steps",
        "--max_num_frames",  # Sample Factory's name (in env steps here)
        type=integer,
        default=100_000,
        help="bound on total steps",
    )
    add_video_flag(parser, "the episodes", "p{policy}")
    parser.add_argument(
        "--no_render",
        **BOOL_FLAG,
        help="accepted for Sample Factory command lines: nothing is drawn on screen here "
        "(--save_video records the episodes)",
    )
    return parser


def load(args):
    """(cfg, env, model) of the run, or ValueError / FileNotFoundError with one line."""
    exp_dir = experiment_dir(args)
    cfg = experiment_cfg(exp_dir)
    trained_on = cfg.env
    if not args.env:
        problem = run_env_problem(exp_dir, trained_on, "launch.enjoy")
        if problem:
            raise ValueError(f"{problem}; or give --env=NAME to play in another env")
    else:
        problem = given_env_problem(args.env, "launch.enjoy")
        if problem:
            raise ValueError(problem)
    cfg.env = args.env or trained_on
    if cfg.env == trained_on:
        cfg = play_cfg(cfg)  # the env as trained, but not its training games' openings
    env = as_multiagent(
        make_env(
            cfg.env,
            cfg,
            {"worker_index": 0, "vector_index": 0, "env_id": 0},
            render_mode="rgb_array" if args.save_video is not None else None,
        )
    )
    try:
        model = load_policy(exp_dir, args.policy, env.observation_space, env.action_space, cfg)
    except CheckpointError:  # unusable, whatever the env
        env.close()
        raise
    except (RuntimeError, ValueError) as e:  # torch's size mismatch, or a model flag (such as
        # its observation features) another env has not: the weights belong to another env
        env.close()
        if cfg.env == trained_on:  # the run's own env: the checkpoint and config.json disagree
            if isinstance(e, ValueError):
                raise
            raise ValueError(checkpoint_misfit(exp_dir, args.policy, e)) from e
        raise ValueError(
            f"--env={cfg.env} disagrees with the run's env {trained_on} (the model's "
            f"observations or actions differ); leave --env out to play {trained_on}"
        ) from e
    if cfg.env != trained_on:
        print(f"note: {args.experiment} was trained on {trained_on}; playing in {cfg.env}")
    else:
        install_member_shaping(env, exp_dir, args.policy)
    return cfg, env, model


def install_member_shaping(env, exp_dir: str, policy: int) -> None:
    """The reward shaping PBT last gave the member, in every seat, so that the returns shown
    are those it trained on (the env's defaults otherwise)."""
    target = reward_shaping_target(env)
    if target is None:
        return
    shaping = saved_member_shaping(exp_dir, policy, target.get_default_reward_shaping())
    if shaping is None:
        return
    for agent in range(env.num_agents):
        target.set_reward_shaping(shaping, agent)
    name = os.path.basename(policy_shaping_path(exp_dir, policy))
    print(f"policy {policy} plays with the reward shaping PBT gave it ({name})")


def check_args(args) -> None:
    """ValueError (one line naming the flag) for values no run can use."""
    for flag in ("episodes", "max_steps"):
        value = getattr(args, flag)
        if value < 1:
            raise ValueError(f"--{flag}={value}: must be at least 1")
    if args.policy < 0:
        raise ValueError(f"--policy={args.policy}: a population member's number, 0 or more")
    problem = play_flags_problem(args)
    if problem:
        raise ValueError(problem)


def without_training_flags(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`argv` less rl-pbt-train's flags (and Sample Factory's) that are not this tool's own,
    each with its values, named in one note: Sample Factory's enjoy takes the training
    command line (its model cards give `--algo=APPO --env=... --experiment=...`); the run's
    config.json holds the values it trained with."""
    from rl_pbt.config.flags import FLAGS_BY_NAME, FOREIGN_BY_NAME

    own = {o[2:] for o in parser._option_string_actions if o.startswith("--")}
    out, dropped, skipping = [], [], False
    for token in argv:
        if token.startswith("--"):
            name = token[2:].split("=", 1)[0]
            skipping = name not in own and (name in FLAGS_BY_NAME or name in FOREIGN_BY_NAME)
            if skipping:
                dropped.append(f"--{name}")
                skipping = "=" not in token  # its values follow it
                continue
        elif skipping:
            continue
        out.append(token)
    if dropped:
        print(
            f"note: {', '.join(dropped)}: training flags, not used here (the run's config.json "
            "holds the values it trained with)",
            file=sys.stderr,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(without_training_flags(parser, sys.argv[1:] if argv is None else argv))
    try:
        check_args(args)
        video = None
        if args.save_video is not None:
            path = args.save_video or default_video_path(experiment_dir(args), f"p{args.policy}")
            video, note = check_video_path(path)
            if note:
                print(note)
        cfg, env, model = load(args)
        obs, _ = env.reset(seed=cfg.seed)
        problem = render_problem(env, cfg.env) if video else None
        if problem:
            env.close()
            raise ValueError(problem)
    except (FileNotFoundError, ValueError) as e:
        print(f"rl-pbt-enjoy: error: {e}", file=sys.stderr)
        return 2
    writer = VideoWriter(video, env_fps(env)) if video else None
    try:
        ended = play(args, env, model, obs, writer)
    finally:
        env.close()
        if writer is not None:
            frames = writer.close()
            print(f"saved {frames} frames to {video}" if frames else "no frames to save")
    return 0 if ended else 1


def play(args, env, model, obs, writer) -> int:
    """Plays from `obs` (a fresh episode) and prints per-episode and mean results; frames go
    to `writer` (a VideoWriter) when given; returns how many episodes ended."""
    actors = [
        PolicyActor(
            model, env.observation_space, env.action_space, args.deterministic, args.temperature
        )
        for _ in range(env.num_agents)
    ]
    returns, objectives = [], []
    extras: dict[str, list[float]] = {}
    ep_ret = np.zeros(env.num_agents)
    steps = 0
    while len(returns) < args.episodes and steps < args.max_steps:
        if writer is not None:
            frame = env.render()
            writer.append(frame)
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
            if writer is not None:  # the episode's end, held for a moment
                frame = episode_end_frame(env, frame)
                for _ in range(int(writer.fps) // 2 + 1):
                    writer.append(frame)
    if len(returns) < args.episodes:
        print(
            f"{len(returns)} of {args.episodes} episodes ended within --max_steps="
            f"{args.max_steps} env steps" + ("; raise it" if not returns else "")
        )
    if returns:
        print(
            f"policy {args.policy}: mean return {np.mean(returns):.3f} over {len(returns)} episodes"
        )
        if all(o is not None for o in objectives):
            print(f"policy {args.policy}: mean true_objective {np.mean(objectives):.3f}")
        for k, values in extras.items():
            print(f"policy {args.policy}: mean {k} {np.mean(values):.3f}")

    return len(returns)


def cli(argv: list[str] | None = None) -> int:
    """`rl-pbt-enjoy`: main() as the process's last work (see launch.command)."""
    return command(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
