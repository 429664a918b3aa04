"""Shared by the benchmark scripts: run one training command with its output in a log file."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_logged(cmd: list[str], log_path: str, name: str) -> None:
    """Run `cmd` from the repo root, output to `log_path`; on failure print its tail and raise."""
    with open(log_path, "w") as f:
        status = subprocess.call(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    if status != 0:
        with open(log_path) as f:
            print(f.read()[-3000:])
        raise RuntimeError(f"run {name} failed")


def train_run(flags: list[str], train_dir: str, experiment: str, echo: bool = False) -> dict:
    """`python -m launch.train FLAGS` as `experiment` under `train_dir`, its output in
    `{train_dir}/{experiment}.log`; returns the run's summary.json."""
    cmd = [
        sys.executable,
        "-m",
        "launch.train",
        *flags,
        f"--train_dir={train_dir}",
        f"--experiment={experiment}",
    ]
    if echo:
        print("$", " ".join(cmd[1:]), flush=True)
    run_logged(cmd, os.path.join(train_dir, f"{experiment}.log"), experiment)
    with open(os.path.join(train_dir, experiment, "summary.json")) as f:
        return json.load(f)
