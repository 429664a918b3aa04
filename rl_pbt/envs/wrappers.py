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


class ReplayMismatch(RuntimeError):
    """A seeded replay did not reach the saved observation: the env is not deterministic
    under `reset(seed=...)` and the same actions."""


class SingleToMultiAgent:
    """1-agent view of a gymnasium env, resetting itself when an episode ends.

    With `seed_episodes(seed)` every episode starts from `reset(seed=s)`, s drawn from a
    stream of its own, and the actions since that reset are kept: `get_state()` then
    describes the env as plain data (seed, actions, last observation) and `set_state()`
    rebuilds it by replaying them, which is how a serial run resumes exactly.
    """

    num_agents = 1
    is_multiagent = True

    def __init__(self, env: Any):
        self.env = env
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self._seeds: Optional[np.random.Generator] = None  # episode seeds, once enabled
        self._keep_actions = False
        self._episode_seed: Optional[int] = None
        self._actions: list = []  # since the episode's seeded reset
        self._last_obs: Any = None

    def seed_episodes(self, seed: int, keep_actions: bool = True) -> None:
        """From now on every self-reset draws its seed from a stream started at `seed`;
        with `keep_actions` the episode's actions are kept for `get_state()`."""
        self._seeds = np.random.default_rng(seed)
        self._keep_actions = keep_actions

    def reset(self, seed: Optional[int] = None, **kwargs):
        obs, info = self.env.reset(seed=seed, **kwargs)
        self._episode_seed, self._actions, self._last_obs = seed, [], obs
        return [obs], [info]

    def step(self, actions):
        obs, rew, terminated, truncated, info = self.env.step(actions[0])
        if self._keep_actions:
            self._actions.append(actions[0])
        if terminated or truncated:
            if getattr(self.env, "render_mode", None) == "rgb_array":
                self.final_frame = self.env.render()  # the end, for a video (reset next)
            seed = None if self._seeds is None else int(self._seeds.integers(2**31))
            obs, reset_info = self.env.reset(seed=seed)
            self._episode_seed, self._actions = seed, []
            info = dict(info)
            info["reset_info"] = reset_info
        self._last_obs = obs
        return [obs], [rew], [bool(terminated)], [bool(truncated)], [info]

    def can_save_state(self) -> bool:
        return self._keep_actions and self._episode_seed is not None

    def get_state(self) -> dict:
        if not self.can_save_state():
            raise RuntimeError("get_state() needs seed_episodes() and a seeded reset first")
        return {
            "episode_seed": self._episode_seed,
            "actions": list(self._actions),
            "seeds": self._seeds.bit_generator.state,
            "last_obs": self._last_obs,
        }

    def set_state(self, state: dict) -> None:
        """Replay the episode so far; ReplayMismatch when it ends elsewhere than saved."""
        self.env.reset(seed=state["episode_seed"])
        obs = None
        for i, action in enumerate(state["actions"]):
            obs, _, terminated, truncated, _ = self.env.step(action)
            if (terminated or truncated) and i < len(state["actions"]) - 1:
                raise ReplayMismatch(f"the replayed episode ended at step {i + 1}")
        if state["actions"] and not _same_obs(obs, state["last_obs"]):
            raise ReplayMismatch(
                f"after replaying {len(state['actions'])} actions from reset(seed="
                f"{state['episode_seed']}) the observation differs from the saved one"
            )
        self._seeds = np.random.default_rng()
        self._seeds.bit_generator.state = state["seeds"]
        self._keep_actions = True
        self._episode_seed = state["episode_seed"]
        self._actions = list(state["actions"])
        self._last_obs = state["last_obs"]

    def close(self):
        self.env.close()

    def render(self):
        return self.env.render()


def _same_obs(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return (
            isinstance(b, dict) and a.keys() == b.keys() and all(_same_obs(a[k], b[k]) for k in a)
        )
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same_obs(x, y) for x, y in zip(a, b))
    return np.array_equal(np.asarray(a), np.asarray(b))


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
