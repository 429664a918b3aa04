"""Train a single policy on one population member's recorded PBT schedule.

    python -m launch.replay --from_experiment=lure --policy=3 --experiment=lure_p3_replay \
        [any training flags]

Reads {train_dir}/{from_experiment}/pbt/lineage.jsonl, follows the member's ancestry
(copies included), and applies each recorded change of hyperparameters and reward shaping
at the same env-step count. The env, model and learning flags (the env's own included)
default to the source experiment's.

The replay goes to a new experiment (by default {from_experiment}_p{policy}_replay). An
existing one is resumed only when it is a replay of the same member of the same run; any
other folder is refused unless --restart_behavior=restart (moves it aside) or overwrite is
given, and the source experiment itself is never written to.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

from launch import ToolParser, command, integer, summary
from launch.train import main as train_main
from rl_pbt.config.flags import FLAGS, FLAGS_BY_NAME
from rl_pbt.config.parse import (
    MODEL_FLAGS,
    close_names,
    same_value,
    with_added_model_flags,
)
from rl_pbt.envs.registry import env_default_overrides, env_extra_flags
from rl_pbt.logging.files import experiment_name_problem, read_run_config
from rl_pbt.models.loading import run_env_problem
from rl_pbt.pbt.lineage import lineage_path, read_events, schedule_for

PROG = "rl-pbt-replay"
# the flags a replay takes from the source run unless given: what its member trained on and
# with (the env's own flags are added per env); PBT's values come from the lineage
INHERITED = [
    "env",
    "env_frameskip",
    "rollout",
    "num_envs_per_worker",
    "train_for_env_steps",
    *MODEL_FLAGS,
    # but --policy_values: the member's own values are in the lineage
    *(
        f.name
        for f in FLAGS
        if f.group == "learning" and f.name not in (*MODEL_FLAGS, "policy_values")
    ),
]


# flags the replay sets itself, and why
SET_HERE = {
    "num_policies": "a replay trains one policy",
    "with_pbt": "a replay follows the recorded schedule, without PBT of its own",
    "pbt_replay_lineage": "the replay reads the lineage of --from_experiment",
    "pbt_replay_policy": "the replay follows the member given by --policy",
}


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def _read_config(path: str) -> tuple[Optional[dict], Optional[str]]:
    """A config.json as a dict, or why it cannot be read."""
    try:
        return read_run_config(path), None
    except ValueError as e:
        return None, str(e)


def policy_problem(lineage: str, policy: int, source: str) -> Optional[str]:
    """Why `policy` has no schedule in the lineage file (None when it has one)."""
    events = read_events(lineage)
    if not events:
        return f"{lineage} holds no lineage events: nothing to replay"
    members = sorted({str(e["policy"]) for e in events}, key=lambda p: (len(p), p))
    try:
        schedule = schedule_for(events, policy)
    except (KeyError, TypeError, ValueError) as e:
        return f"{lineage} is unreadable ({type(e).__name__}: {e})"
    if not schedule:
        return (
            f"--policy={policy}: {source}'s lineage ({lineage}) has no events for that "
            f"policy; its members: {', '.join(members)}"
        )
    return None


def target_problem(args: Any, target: str, src: str, lineage: str) -> Optional[str]:
    """Why the replay must not be written to `target` (None when it may)."""
    where = os.path.join(args.train_dir, target)
    if os.path.realpath(where) == os.path.realpath(src):
        return (
            f"--experiment={target} is the experiment being replayed (--from_experiment="
            f"{args.from_experiment}): the replay needs a folder of its own, e.g. "
            f"--experiment={args.from_experiment}_p{args.policy}_replay"
        )
    if not os.path.isdir(where) or not os.listdir(where):
        return None
    if args.restart_behavior in ("restart", "overwrite"):
        return None  # asked for by name: the trainer moves the old run aside or deletes it
    cfg, _ = _read_config(os.path.join(where, "config.json"))
    replayed = (cfg or {}).get("pbt_replay_lineage")
    if (
        isinstance(replayed, str)
        and os.path.realpath(replayed) == os.path.realpath(lineage)
        and cfg.get("pbt_replay_policy") == args.policy
    ):
        return None  # an earlier replay of the same member: resumed as any run
    return (
        f"--experiment={target}: {where} already holds another run (not a replay of policy "
        f"{args.policy} of {args.from_experiment}); choose another --experiment, or give "
        "--restart_behavior=restart (moves it aside) or --restart_behavior=overwrite"
    )


def main(argv: list[str] | None = None) -> int:
    parser = ToolParser(  # its parse_known_args: the other flags go on to the trainer
        PROG,
        summary(__doc__),
        epilog="Any flag of rl-pbt-train (rl-pbt-train --help) goes on to the training, e.g. "
        "--train_for_env_steps=N to stop the replay sooner, or --num_workers; the env, "
        "model and learning flags (the env's own included) default to the source run's. The "
        "replay sets --num_policies, --with_pbt and --pbt_replay_* itself.",
    )
    parser.add_argument("--from_experiment", required=True, help="the PBT run to replay from")
    parser.add_argument(
        "--policy", type=integer, required=True, help="the member whose schedule is replayed"
    )
    parser.add_argument("--train_dir", default="train_dir", type=os.path.expanduser)
    parser.add_argument(
        "--experiment", default=None, help="default: {from_experiment}_p{policy}_replay"
    )
    parser.add_argument("--restart_behavior", default=None, help="as rl-pbt-train's")
    args, rest = parser.parse_known_args(argv)
    own = [a.dest for a in parser._actions if a.dest != "help"]
    for flag in rest:  # the others go on to the trainer, which would not know replay's own
        name = flag[2:].split("=")[0] if flag.startswith("--") else ""
        near = close_names(name, own) if name and name not in FLAGS_BY_NAME else []
        if near:
            return _fail(f"unknown flag --{name} (did you mean --{near[0]}?)")
    clash = sorted(
        {a.split("=")[0].lstrip("-") for a in rest if a.startswith("--")} & set(SET_HERE)
    )
    if clash:
        return _fail(f"--{clash[0]}: {SET_HERE[clash[0]]}; leave it out")
    problem = experiment_name_problem(args.from_experiment)
    if problem:
        return _fail(f"--from_experiment={args.from_experiment!r} {problem}: give its name")
    src = os.path.join(args.train_dir, args.from_experiment)
    lineage = lineage_path(src)
    if not os.path.isdir(src):
        return _fail(f"--from_experiment={args.from_experiment}: no run at {src}")
    if not os.path.isfile(lineage):
        return _fail(
            f"--from_experiment={args.from_experiment}: {src} has no PBT lineage ({lineage}); "
            "only a run trained with --with_pbt has a schedule to replay"
        )
    src_cfg, problem = _read_config(os.path.join(src, "config.json"))
    if problem:
        return _fail(f"--from_experiment={args.from_experiment}: {problem}")
    problem = policy_problem(lineage, args.policy, args.from_experiment)
    if problem:
        return _fail(problem)
    if isinstance(src_cfg.get("env"), str):
        problem = run_env_problem(src, src_cfg["env"], "launch.replay")
        if problem:
            return _fail(problem)
    target = args.experiment or f"{args.from_experiment}_p{args.policy}_replay"
    problem = experiment_name_problem(target)
    if problem:
        return _fail(f"--experiment={target!r} {problem}: give the replay's name")
    problem = target_problem(args, target, src, lineage)
    if problem:
        return _fail(problem)

    given = {a.split("=")[0].lstrip("-") for a in rest if a.startswith("--")}
    base = []
    src_cfg = with_added_model_flags(src_cfg)  # a run saved before a model flag existed
    env = src_cfg.get("env") if isinstance(src_cfg.get("env"), str) else None
    env_flags = {f.name: f.default for f in env_extra_flags(env)} if env else {}
    defaults = {
        **{k: FLAGS_BY_NAME[k].default for k in INHERITED},
        **env_flags,
        **(env_default_overrides(env) if env else {}),
    }
    for key in INHERITED + list(env_flags):
        # a value the replay gets anyway is not given (it would be named in notes as set)
        if key != "env" and same_value(src_cfg.get(key), defaults.get(key)):
            continue
        if key not in given and src_cfg.get(key) is not None:
            value = src_cfg[key]
            base += (
                [f"--{key}", *map(str, value)] if isinstance(value, list) else [f"--{key}={value}"]
            )
    base.append(f"--experiment={target}")
    if args.restart_behavior is not None:
        base.append(f"--restart_behavior={args.restart_behavior}")
    return train_main(
        prog=PROG,
        argv=base
        + [
            f"--train_dir={args.train_dir}",
            f"--pbt_replay_lineage={lineage}",
            f"--pbt_replay_policy={args.policy}",
            "--num_policies=1",
            "--with_pbt=False",
            *rest,
        ],
    )


def cli(argv: list[str] | None = None) -> int:
    """`rl-pbt-replay`: main() as the process's last work (see launch.command)."""
    return command(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
