"""Small deterministic envs for tests: a tagged multi-agent env and failure-injecting envs."""

from __future__ import annotations

import json
import os
import time

import gymnasium as gym
import numpy as np

from rl_pbt import RewardShapingInterface
from rl_pbt.envs.interfaces import BatchedMultiAgentEnv


class TaggedMultiAgentEnv(RewardShapingInterface):
    """3 agents; every observation carries (env_id, episode, agent, step) so a test can tell
    exactly which env, episode and seat produced each sample. Episodes last 5..40 steps."""

    is_multiagent = True

    def __init__(self, env_id: int, num_agents: int = 3):
        self.num_agents = num_agents
        self.env_id = env_id
        self.observation_space = gym.spaces.Box(-1e9, 1e9, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.rng = np.random.default_rng(1000 + env_id)
        self.episode = -1
        self.emitted: dict[tuple[int, int], int] = {}  # (episode, agent) -> steps taken
        self.shaping_calls: list[tuple[dict, int]] = []
        self.bonus = np.zeros(num_agents)

    def get_default_reward_shaping(self):
        return {"bonus": 0.0}

    def set_reward_shaping(self, reward_shaping, agent_idx):
        self.shaping_calls.append((reward_shaping, agent_idx))
        self.bonus[agent_idx] = reward_shaping["bonus"]

    def _obs(self):
        return [
            np.array([self.env_id, self.episode, a, self.t], np.float32)
            for a in range(self.num_agents)
        ]

    def _new_episode(self):
        self.episode += 1
        self.t = 0
        self.length = int(self.rng.integers(5, 41))

    def reset(self, seed=None):
        self._new_episode()
        return self._obs(), [{} for _ in range(self.num_agents)]

    def step(self, actions):
        for a in range(self.num_agents):
            key = (self.episode, a)
            self.emitted[key] = self.emitted.get(key, 0) + 1
        self.t += 1
        rewards = [float(actions[a] == 1) + self.bonus[a] for a in range(self.num_agents)]
        done = self.t >= self.length
        infos = [{"true_objective": float(a == 0)} if done else {} for a in range(self.num_agents)]
        if done:
            self._new_episode()
        dones = [done] * self.num_agents
        return self._obs(), rewards, dones, [False] * self.num_agents, infos

    def close(self):
        pass


class TaggedBatch(BatchedMultiAgentEnv):
    """Copies of TaggedMultiAgentEnv stepped in one call, through the batched-env contract."""

    def __init__(self, envs: list[TaggedMultiAgentEnv]):
        self.copies = envs
        self.num_envs = len(envs)
        self.num_agents = envs[0].num_agents
        self.observation_space = envs[0].observation_space
        self.action_space = envs[0].action_space

    def reset_copy(self, k, seed=None):
        return self.copies[k].reset(seed=seed)

    def step(self, actions):
        actions = np.asarray(actions)
        assert actions.shape == (self.num_envs, self.num_agents)
        out = [env.step(list(a)) for env, a in zip(self.copies, actions)]
        obs = np.stack([np.stack(o[0]) for o in out])
        rewards = np.array([o[1] for o in out], dtype=np.float32)
        terminated = np.array([o[2][0] for o in out])  # one flag per copy
        truncated = np.array([o[3][0] for o in out])
        return obs, rewards, terminated, truncated, [o[4] for o in out]

    def get_default_reward_shaping(self):
        return self.copies[0].get_default_reward_shaping()

    def set_reward_shaping(self, reward_shaping, agent_idx, env_idx=None):
        for k in range(self.num_envs) if env_idx is None else [env_idx]:
            self.copies[k].set_reward_shaping(reward_shaping, agent_idx)

    def close(self):
        for env in self.copies:
            env.close()


class HangingEnv(gym.Env):
    """CartPole-like env whose env 1 on worker 0 (every env with `everywhere`) hangs, or
    raises with `crash`, after `hang_after` steps."""

    def __init__(
        self, env_config, hang_after: int = 300, crash: bool = False, everywhere: bool = False
    ):
        self.observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.armed = everywhere or (
            env_config["worker_index"] == 0 and env_config["vector_index"] == 1
        )
        self.hang_after = hang_after
        self.crash = crash
        self.steps = 0

    def reset(self, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.armed and self.steps > self.hang_after:
            if self.crash:
                raise RuntimeError("env exploded on purpose")
            time.sleep(3600)
        return np.zeros(2, np.float32), 0.0, self.steps % 20 == 0, False, {}


class ShapedCartPole(gym.Wrapper, RewardShapingInterface):
    """CartPole with a tunable reward scale; appends every set_reward_shaping call to a file
    (folder from $RL_PBT_SHAPING_LOG) so a test can see what envs in child processes got."""

    def __init__(self, env_id: int):
        super().__init__(gym.make("CartPole-v1"))
        self.env_id = env_id
        self.shaping = {"alive": 1.0, "nested": {"fall": -1.0}}
        self.steps = 0

    def get_default_reward_shaping(self):
        return {"alive": 1.0, "nested": {"fall": -1.0}}

    def set_reward_shaping(self, reward_shaping, agent_idx):
        self.shaping = reward_shaping
        folder = os.environ.get("RL_PBT_SHAPING_LOG")
        if folder:
            with open(os.path.join(folder, f"env_{self.env_id}.jsonl"), "a") as f:
                f.write(json.dumps(reward_shaping) + "\n")

    def reset(self, **kwargs):
        self.steps = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, _, term, trunc, info = self.env.step(action)
        self.steps += 1
        reward = self.shaping["alive"] + (self.shaping["nested"]["fall"] if term else 0.0)
        if term or trunc:
            info = dict(info, true_objective=self.steps / 500.0)
        return obs, reward, term, trunc, info
