"""Train a policy or a population: parse flags, register the built-in envs, run.

    rl-pbt-train --env=arena_duel --with_pbt --num_policies=8     (--help[=TOPIC] for the flags)

The training loop lives in rl_pbt/runtime/runner.py (Runner.run). A config error is one line
on stderr and exit status 2, before anything is written.
"""

from __future__ import annotations

import os
import sys

import envs  # noqa: F401  (registers the built-in envs)
from launch import command, one_line
from rl_pbt import ConfigError, parse_cfg, train
from rl_pbt.runtime import runner


def config_error(e: ConfigError, prog: str = "rl-pbt-train") -> int:
    print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None, prog: str = "rl-pbt-train") -> int:
    """`prog`: the tool that runs the training (rl-pbt-replay names itself in its errors)."""
    try:
        cfg = parse_cfg(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:  # --help printed
        return e.code if isinstance(e.code, int) else 0
    except BrokenPipeError:  # --help piped into a pager or head that stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except ConfigError as e:  # bad flags, or flags that do not fit the env
        return config_error(e, prog)
    if argv is None:  # the command line: a jammed run may restart itself with it, resuming
        runner.REEXEC_ARGV = [sys.executable, "-m", "launch.train", *resume_flags(sys.argv[1:])]
        runner.WHOLE_PROCESS = True
    try:
        return train(cfg)
    except ConfigError as e:  # found once the env is built, still before anything is written
        return config_error(e, prog)


def resume_flags(flags: list[str]) -> list[str]:
    """`flags` with --restart_behavior=resume in place of any other restart behaviour."""
    out, skip = [], False
    for flag in flags:
        if skip:
            skip = False
            continue
        if flag == "--restart_behavior":
            skip = True
            continue
        if not flag.startswith("--restart_behavior="):
            out.append(flag)
    return [*out, "--restart_behavior=resume"]


def cli(argv: list[str] | None = None) -> int:
    """`rl-pbt-train`: main() as the process's last work (see launch.command)."""
    return command(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
