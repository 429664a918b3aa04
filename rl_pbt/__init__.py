"""rl_pbt: asynchronous APPO with Population Based Training and self-play on one machine.

Public names: `register_env`, `register_scripted_policy`, `RewardShapingInterface`,
`parse_cfg`, `train`.
"""

from rl_pbt.config.parse import Cfg, ConfigError, parse_cfg
from rl_pbt.envs.interfaces import RewardShapingInterface
from rl_pbt.envs.registry import register_env
from rl_pbt.envs.scripted import register_scripted_policy


def train(cfg: Cfg) -> int:
    """Train until the config's budget is spent; returns 0 on success. See runtime/runner.py
    (one machine) and distributed/driver.py (--ray_address: a population over Ray)."""
    if getattr(cfg, "ray_address", None) is not None:
        from rl_pbt.distributed.driver import run
    else:
        from rl_pbt.runtime.runner import run

    return run(cfg)


__all__ = [
    "register_env",
    "register_scripted_policy",
    "RewardShapingInterface",
    "parse_cfg",
    "train",
    "Cfg",
    "ConfigError",
]
