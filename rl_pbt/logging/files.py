"""Experiment-folder paths and atomic writes (write to a temp file, then rename)."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable


def atomic_write(path: str, write: Callable[[Any], None], mode: str = "w") -> None:
    """Call write(file) on a temp file in the same folder, fsync, then rename over `path`."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp_" + os.path.basename(path))
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str, data: Any) -> None:
    atomic_write(path, lambda f: json.dump(data, f, indent=2, sort_keys=True, default=float))


def read_json(path: str, default: Any = None) -> Any:
    if not os.path.isfile(path):
        return default
    with open(path) as f:
        return json.load(f)


def policy_cfg_path(exp_dir: str, policy_id: int) -> str:
    return os.path.join(exp_dir, f"policy_{policy_id:02d}_cfg.json")


def policy_shaping_path(exp_dir: str, policy_id: int) -> str:
    return os.path.join(exp_dir, f"policy_{policy_id:02d}_reward_shaping.json")


def checkpoint_dir(exp_dir: str, policy_id: int) -> str:
    return os.path.join(exp_dir, f"checkpoint_p{policy_id}")


def summary_dir(exp_dir: str, policy_id: int) -> str:
    return os.path.join(exp_dir, ".summary", str(policy_id))


def pbt_dir(exp_dir: str) -> str:
    return os.path.join(exp_dir, "pbt")
