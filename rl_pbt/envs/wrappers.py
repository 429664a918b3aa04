"""Gives every env the multi-agent shape the sampler uses: lists in and out, self-reset.

A single-agent gymnasium env becomes a 1-agent env; multi-agent envs pass through. The
final info of an episode keeps `true_objective`, and episode statistics are accumulated
here, per agent, so every env reports returns and lengths the same way.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from rl_pbt.envs.interfaces import (
    RewardShapingInterface,
    find_reward_shaping_env,
    is_multiagent_env,
)


class SingleToMultiAgent:
    """1-agent view of a gymnasium env, resetting itself when an episode ends."""

    num_agents = 1
    is_multiagent = True

    def __init__(self, env: Any):
        self.env = env
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self._seed: Optional[int] = None

    def reset(self, seed: Optional[int] = None, **kwargs):
        obs, info = self.env.reset(seed=seed, **kwargs)
        return [obs], [info]

    def step(self, actions):
        obs, rew, terminated, truncated, info = self.env.step(actions[0])
        if terminated or truncated:
            obs, reset_info = self.env.reset()
            info = dict(info)
            info["reset_info"] = reset_info
        return [obs], [rew], [bool(terminated)], [bool(truncated)], [info]

    def close(self):
        self.env.close()

    def render(self):
        return self.env.render()


class BatchCopy(RewardShapingInterface):
    """Copy k of a BatchedMultiAgentEnv seen as one env: spaces, reset and reward shaping.
    Stepping goes through the batch (all copies at once), never through a copy alone."""

    is_multiagent = True

    def __init__(self, batch: Any, k: int):
        self.batch = batch
        self.k = k
        self.num_agents = batch.num_agents
        self.observation_space = batch.observation_space
        self.action_space = batch.action_space

    def reset(self, seed: Optional[int] = None, **kwargs):
        return self.batch.reset_copy(self.k, seed=seed)

    def step(self, actions):
        raise RuntimeError("a copy of a batched env is stepped through its batch")

    def get_default_reward_shaping(self) -> Optional[dict]:
        return self.batch.get_default_reward_shaping()

    def set_reward_shaping(self, reward_shaping: dict, agent_idx) -> None:
        self.batch.set_reward_shaping(reward_shaping, agent_idx, self.k)

    def close(self) -> None:
        """Nothing to do: the worker that owns the batch closes it once, for every copy."""


def as_multiagent(env: Any) -> Any:
    return env if is_multiagent_env(env) else SingleToMultiAgent(env)


def reward_shaping_target(env: Any):
    """Where set_reward_shaping calls go for this env (None if it has no shaping)."""
    return find_reward_shaping_env(env)


class EpisodeTracker:
    """Per-agent running return and length for one multi-agent env."""

    def __init__(self, num_agents: int):
        self.returns = np.zeros(num_agents, dtype=np.float64)
        self.lengths = np.zeros(num_agents, dtype=np.int64)

    def step(self, rewards, dones) -> list[tuple[int, float, int]]:
        self.returns += rewards
        self.lengths += 1
        finished = []
        for agent in np.flatnonzero(dones):
            finished.append((int(agent), float(self.returns[agent]), int(self.lengths[agent])))
            self.returns[agent] = 0.0
            self.lengths[agent] = 0
        return finished
