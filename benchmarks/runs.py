"""Shared by the benchmark scripts: run one training command with its output in a log file."""

from __future__ import annotations

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_logged(cmd: list[str], log_path: str, name: str) -> None:
    """Run `cmd` from the repo root, output to `log_path`; on failure print its tail and raise."""
    with open(log_path, "w") as f:
        status = subprocess.call(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    if status != 0:
        with open(log_path) as f:
            print(f.read()[-3000:])
        raise RuntimeError(f"run {name} failed")
