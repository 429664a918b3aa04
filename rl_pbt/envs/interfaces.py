"""What an env may implement beyond gymnasium: reward shaping and the multi-agent contract."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Optional, Union

import numpy as np


class RewardShapingInterface(ABC):
    """Envs whose shaped reward PBT may tune.

    `get_default_reward_shaping()` returns a (possibly nested) dict whose leaves are floats or
    tuples of floats, or None. `set_reward_shaping(shaping, agent_idx)` installs new values
    for one agent (an int) or several (a slice); the trainer calls it before the next episode
    of an agent whose policy changed.
    """

    @abstractmethod
    def get_default_reward_shaping(self) -> Optional[dict]:
        """The starting shaping values (nested dict of floats / tuples of floats), or None."""

    @abstractmethod
    def set_reward_shaping(self, reward_shaping: dict, agent_idx: Union[int, slice]) -> None:
        """Use these values for agent `agent_idx` (an int, or a slice of agents) from now on."""


def find_reward_shaping_env(env: Any) -> Optional[RewardShapingInterface]:
    """The outermost layer of a wrapper stack that implements RewardShapingInterface."""
    seen = 0
    while env is not None and seen < 32:
        if isinstance(env, RewardShapingInterface):
            return env
        env = getattr(env, "env", None)
        seen += 1
    return None


def is_multiagent_env(env: Any) -> bool:
    return bool(getattr(env, "is_multiagent", False))


class BatchedMultiAgentEnv(ABC):
    """Several copies of a multi-agent env stepped in one call (an optional fast path).

    An env registers one with `register_env(..., make_batch_func=...)`; a rollout worker then
    steps all its copies at once instead of one env object per copy. Each copy follows the
    multi-agent contract: it resets itself when its episode ends (the returned observations
    are then the first of the next episode), and the infos of that step carry
    `true_objective`. Attributes: `num_envs` (copies), `num_agents` (per copy),
    `observation_space` and `action_space` (per agent).
    """

    num_envs: int
    num_agents: int

    @abstractmethod
    def reset_copy(self, k: int, seed: Optional[int] = None) -> tuple[list, list[dict]]:
        """Start a new episode in copy k: (observation per agent, info per agent)."""

    @abstractmethod
    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, list[list[dict]]]:
        """actions: shape (num_envs, num_agents). Returns observations (num_envs, num_agents,
        ...), rewards (num_envs, num_agents), terminated and truncated (num_envs,) or
        (num_envs, num_agents), and infos (one list of per-agent dicts per copy)."""

    @abstractmethod
    def get_default_reward_shaping(self) -> Optional[dict]:
        """As RewardShapingInterface; None when the env has no shaping."""

    @abstractmethod
    def set_reward_shaping(
        self, reward_shaping: dict, agent_idx: Union[int, slice], env_idx: Optional[int] = None
    ) -> None:
        """Shaping for agent `agent_idx` of copy `env_idx` (every copy when None)."""

    @abstractmethod
    def close(self) -> None:
        """Release the copies' resources."""


def generator_from_state(state: dict) -> np.random.Generator:
    """A NumPy generator that continues from `bit_generator.state` saved by an env's
    `get_state()` (plain data, as serial runs save it)."""
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    return rng
