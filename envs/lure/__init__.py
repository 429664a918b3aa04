"""Registers `lure`, a single-agent env whose default shaped reward misleads (see `env.py`).

PBT's tuning of the "lure"/"goal" weights is what makes agents reach the true objective.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from envs.lure.env import DEFAULT_EPISODE_STEPS, DEFAULT_REWARD_SHAPING, LureEnv
from rl_pbt import register_env

LURE_DEFAULTS: dict[str, Any] = {
    "rollout": 32,
    "encoder_mlp_layers": [64, 64],
    "num_envs_per_worker": 16,
    "learning_rate": 3e-4,
    "exploration_loss_coeff": 0.01,
}


def make_lure(
    full_env_name: str, cfg: Any, env_config: Optional[dict], render_mode: Optional[str] = None
) -> LureEnv:
    """The lure env, seeded from `cfg.seed` (fresh entropy when None) and the env id."""
    env = LureEnv(episode_steps=DEFAULT_EPISODE_STEPS, render_mode=render_mode)
    base = getattr(cfg, "seed", None) if cfg is not None else None
    env_id = int((env_config or {}).get("env_id", 0))
    seed = np.random.SeedSequence(entropy=base, spawn_key=(env_id,))
    env.np_random = np.random.Generator(np.random.PCG64(seed))
    return env


register_env("lure", make_lure, default_overrides=LURE_DEFAULTS)

__all__ = ["LureEnv", "make_lure", "DEFAULT_REWARD_SHAPING"]
