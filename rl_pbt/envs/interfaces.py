"""What an env may implement beyond gymnasium: reward shaping and the multi-agent contract."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Optional, Union


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
