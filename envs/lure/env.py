"""Lure: a tiny grid world whose default shaped reward points away from the true objective.

A single-agent `gymnasium.Env` implementing `RewardShapingInterface`; registered by `envs.lure`.

The agent starts near the left side of a 9x5 room. At the right end is the goal: stepping
on it ends the episode with success (`true_objective` 1). At the left end is a coin pit:
once the agent steps in it cannot leave, and a coin appears in the pit every few steps
until the time limit (`true_objective` 0). With the default weights a coin-farming policy
has the higher shaped return, so an agent trained on the shaped reward ignores the goal;
with the lure weight lowered (or the goal weight raised) reaching the goal pays more.

Calibration (plain PPO, gamma 0.99, 64k steps, 5 seeds each): default weights -> the pit in
5/5 runs; lure 0.2 -> the goal in 3/5, lure 0.15 -> 4/5, lure 0.1 or goal 2.0 -> 5/5.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rl_pbt.envs.interfaces import RewardShapingInterface

WIDTH = 9
HEIGHT = 5
PIT = (0, 2)
GOAL = (WIDTH - 1, 2)
START_X = (2, 4)  # the start cell's x is drawn from this range (inclusive), y from all rows
COIN_RESPAWN_STEPS = 5
DEFAULT_EPISODE_STEPS = 50

STAY, UP, RIGHT, DOWN, LEFT = range(5)
_DX = (0, 0, 1, 0, -1)
_DY = (0, -1, 0, 1, 0)

# Shaped reward = goal * [goal reached] + lure * [coin taken] + step_penalty * 1, per step.
DEFAULT_REWARD_SHAPING = {"goal": 1.0, "lure": 0.3, "step_penalty": -0.001}


class LureEnv(gym.Env, RewardShapingInterface):
    """The goal-or-coins room. Observation (9 floats in [-1, 1]): x, y, goal dx, goal dy,
    pit dx, pit dy (offsets divided by the room size - 1), in-pit flag, steps to the next
    coin (a fraction of the respawn time), fraction of the episode left.
    Actions: stay, up, right, down, left."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    CELL_PX = 8

    def __init__(
        self,
        episode_steps: int = DEFAULT_EPISODE_STEPS,
        render_mode: Optional[str] = None,
        start_x: tuple[int, int] = START_X,
        coin_respawn_steps: int = COIN_RESPAWN_STEPS,
    ):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.episode_steps = int(episode_steps)
        self.start_x = start_x
        self.coin_respawn_steps = int(coin_respawn_steps)
        self.render_mode = render_mode
        self.observation_space = spaces.Box(-1.0, 1.0, (9,), np.float32)
        self.action_space = spaces.Discrete(5)
        self.shaping = dict(DEFAULT_REWARD_SHAPING)
        self._obs = np.zeros(9, dtype=np.float32)
        self.x = self.y = 0
        self.t = 0
        self.in_pit = False
        self.coin_timer = 0  # steps until the next coin appears in the pit (0: one is there)
        self.coins = 0

    # ----- reward shaping -----
    def get_default_reward_shaping(self) -> dict:
        return dict(DEFAULT_REWARD_SHAPING)

    def set_reward_shaping(self, reward_shaping: dict, agent_idx: Union[int, slice] = 0) -> None:
        if isinstance(agent_idx, slice):
            if 0 not in range(1)[agent_idx]:
                return
        elif agent_idx != 0:
            raise IndexError(f"lure is a single-agent env; agent_idx must be 0, got {agent_idx}")
        unknown = set(reward_shaping) - set(DEFAULT_REWARD_SHAPING)
        if unknown:
            raise ValueError(
                f"unknown lure reward shaping keys {sorted(unknown)}; "
                f"known: {sorted(DEFAULT_REWARD_SHAPING)}"
            )
        for key, value in reward_shaping.items():
            self.shaping[key] = float(value)

    # ----- episode -----
    def reset(
        self, *, seed: Optional[int] = None, options: Optional[dict] = None
    ) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.x = int(self.np_random.integers(self.start_x[0], self.start_x[1] + 1))
        self.y = int(self.np_random.integers(0, HEIGHT))
        self.t = 0
        self.in_pit = False
        self.coin_timer = 0
        self.coins = 0
        return self._observation(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = int(action)
        if not 0 <= a < 5:
            raise ValueError(f"action {a} is outside [0, 5)")
        self.t += 1
        reward = self.shaping["step_penalty"]
        terminated = False
        if not self.in_pit:
            nx, ny = self.x + _DX[a], self.y + _DY[a]
            if 0 <= nx < WIDTH and 0 <= ny < HEIGHT:
                self.x, self.y = nx, ny
            if (self.x, self.y) == GOAL:
                reward += self.shaping["goal"]
                terminated = True
            elif (self.x, self.y) == PIT:
                self.in_pit = True
        if self.in_pit:
            if self.coin_timer > 0:
                self.coin_timer -= 1
            if self.coin_timer == 0:
                reward += self.shaping["lure"]
                self.coins += 1
                self.coin_timer = self.coin_respawn_steps
        truncated = not terminated and self.t >= self.episode_steps
        info: dict = {}
        if terminated or truncated:
            info["true_objective"] = 1.0 if terminated else 0.0
            info["episode_extra_stats"] = {"coins": float(self.coins)}
        return self._observation(), reward, terminated, truncated, info

    def _observation(self) -> np.ndarray:
        o = self._obs
        sx, sy = WIDTH - 1, HEIGHT - 1
        o[0] = self.x / sx
        o[1] = self.y / sy
        o[2] = (GOAL[0] - self.x) / sx
        o[3] = (GOAL[1] - self.y) / sy
        o[4] = (PIT[0] - self.x) / sx
        o[5] = (PIT[1] - self.y) / sy
        o[6] = 1.0 if self.in_pit else 0.0
        o[7] = self.coin_timer / self.coin_respawn_steps
        o[8] = 1.0 - self.t / self.episode_steps
        return o.copy()

    def render(self) -> Optional[np.ndarray]:
        if self.render_mode != "rgb_array":
            return None
        px = self.CELL_PX
        img = np.full((HEIGHT * px, WIDTH * px, 3), 30, dtype=np.uint8)
        for (cx, cy), color in ((GOAL, (40, 200, 70)), (PIT, (120, 90, 40))):
            img[cy * px : (cy + 1) * px, cx * px : (cx + 1) * px] = color
        if self.coin_timer == 0 or self.coin_timer == self.coin_respawn_steps:
            img[PIT[1] * px + 2 : PIT[1] * px + px - 2, 2 : px - 2] = (230, 200, 40)
        img[self.y * px + 1 : self.y * px + px - 1, self.x * px + 1 : self.x * px + px - 1] = (
            60,
            120,
            255,
        )
        return img
