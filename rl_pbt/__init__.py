"""rl_pbt: asynchronous APPO with Population Based Training and self-play on one machine.

Public names: `register_env`, `register_scripted_policy`, `RewardShapingInterface`,
`parse_cfg`, `train`.
"""

from rl_pbt.config.parse import Cfg, ConfigError, parse_cfg
from rl_pbt.envs.interfaces import RewardShapingInterface
from rl_pbt.envs.registry import register_env
from rl_pbt.envs.scripted import register_scripted_policy


def train(cfg: Cfg) -> int:
    """Train until the config's budget is spent; returns 0 on success, 1 for a run that
    stopped before its end (a crash, or Ctrl-C / SIGTERM, after saving). The config is checked
    again first (a value changed after `parse_cfg` raises ConfigError as a flag would), and the
    caller's random generators (random, numpy, torch) and numpy's print options are as they
    were when it returns. See runtime/runner.py (one machine) and distributed/driver.py
    (--ray_address: a population over Ray)."""
    import random

    import numpy as np
    import torch

    from rl_pbt.config.parse import validate

    validate(cfg)
    if getattr(cfg, "ray_address", None) is not None:
        from rl_pbt.distributed.driver import run
    else:
        from rl_pbt.runtime.runner import run

    states = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    # CUDA's generators only where the caller has started CUDA (never started here for it)
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    printing = np.get_printoptions()
    try:
        return run(cfg)
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        np.set_printoptions(**printing)


__all__ = [
    "register_env",
    "register_scripted_policy",
    "RewardShapingInterface",
    "parse_cfg",
    "train",
    "Cfg",
    "ConfigError",
]
