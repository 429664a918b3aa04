"""Lure: a tiny grid world whose default shaped reward points away from the true objective.

A single-agent `gymnasium.Env` implementing `RewardShapingInterface`; registered by `envs.lure`.

The agent starts anywhere in the room but the two end columns. At the right end is the
goal: stepping on it ends the episode, and the sooner the better: `true_objective` is
`1 - t / episode_steps` when the goal is reached at step t (about 0.9 on a straight path),
0 when it is not reached in time. At the left end is a coin pit: a coin lies there and
reappears a few steps after it is taken. The pit is a dead end (only a step right leaves
it), so exploration that wanders in stays a while and soon learns what coins pay; the agent
may leave at any time. The shaped reward pays `lure * COIN_DECAY**k` for the k-th coin of an
episode (k = 0, 1, ...), so the shaped optimum is to farm a number of coins that grows with
lure / goal, then walk to the goal. Every coin farmed costs 5 steps, 0.1 of objective.

What PPO learns moves smoothly with the lure weight, because where the agent starts decides
which of goal and pit it finds first: the lower the lure, the more of the room walks to the
goal. Measured (2 members x 200k steps each, default learning values, goal weight 1):
lure 2.0 -> objective 0.01; 1.0 (the default) -> 0.02-0.09; 0.5 -> 0.23-0.33; 0.25 -> 0.81.
PBT's starting draws (`--pbt_init_random`: each shaping weight moved by a factor of up to
2.25 either way) put lure/goal below 0.3 for about 1 member in 30.
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
START_X = (1, 7)  # the start cell's x is drawn from this range (inclusive), y from all rows
COIN_RESPAWN_STEPS = 5
COIN_DECAY = 0.8  # the k-th coin of an episode pays lure * COIN_DECAY**k
DEFAULT_EPISODE_STEPS = 50
OBS_SIZE = 10  # see LureEnv's docstring

STAY, UP, RIGHT, DOWN, LEFT = range(5)
_DX = (0, 0, 1, 0, -1)
_DY = (0, -1, 0, 1, 0)

# Shaped reward per step = goal * [goal reached] + lure * COIN_DECAY**k * [k-th coin taken]
# + step_penalty.
DEFAULT_REWARD_SHAPING = {"goal": 1.0, "lure": 1.0, "step_penalty": -0.001}


class LureEnv(gym.Env, RewardShapingInterface):
    """The goal-or-coins room. Observation (10 floats in [-1, 1]): x, y, goal dx, goal dy,
    pit dx, pit dy (offsets divided by the room size - 1), in-pit flag, steps to the next
    coin (a fraction of the respawn time), fraction of the episode left, value of the next
    coin (COIN_DECAY**k). Actions: stay, up, right, down, left."""

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
        for name, value in (("episode_steps", episode_steps),
                            ("coin_respawn_steps", coin_respawn_steps)):  # fmt: skip
            if int(value) < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        self.episode_steps = int(episode_steps)
        self.start_x = start_x
        self.coin_respawn_steps = int(coin_respawn_steps)
        self.render_mode = render_mode
        self.observation_space = spaces.Box(-1.0, 1.0, (OBS_SIZE,), np.float32)
        self.action_space = spaces.Discrete(5)
        self.shaping = dict(DEFAULT_REWARD_SHAPING)
        self._obs = np.zeros(OBS_SIZE, dtype=np.float32)
        self.x = self.y = 0
        self.t = 0
        self.coin_timer = 0  # steps until the next coin appears in the pit (0: one is there)
        self.coins = 0

    @property
    def in_pit(self) -> bool:
        return (self.x, self.y) == PIT

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
        self.coin_timer = 0
        self.coins = 0
        return self._observation(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = int(action)
        if not 0 <= a < 5:
            raise ValueError(f"action {a} is outside [0, 5)")
        self.t += 1
        reward = self.shaping["step_penalty"]
        if self.coin_timer > 0:  # the coin reappears whether or not the agent waits for it
            self.coin_timer -= 1
        nx, ny = self.x + _DX[a], self.y + _DY[a]
        free = not self.in_pit or a == RIGHT  # the pit is a dead end: only a step right leaves
        if free and 0 <= nx < WIDTH and 0 <= ny < HEIGHT:
            self.x, self.y = nx, ny
        at_goal = (self.x, self.y) == GOAL
        if at_goal:
            reward += self.shaping["goal"]
        elif self.in_pit and self.coin_timer == 0:
            reward += self.shaping["lure"] * COIN_DECAY**self.coins
            self.coins += 1
            self.coin_timer = self.coin_respawn_steps
        # the time limit is part of the task, and the observation shows the time left: its
        # end is final (`terminated`), not a cut to bootstrap
        terminated = at_goal or self.t >= self.episode_steps
        info: dict = {}
        if terminated:
            info["true_objective"] = 1.0 - self.t / self.episode_steps if at_goal else 0.0
            info["episode_extra_stats"] = {
                "coins": float(self.coins),
                "goal_reached": float(at_goal),
            }
        return self._observation(), reward, terminated, False, info

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
        o[9] = COIN_DECAY**self.coins
        return o.copy()

    def render(self) -> Optional[np.ndarray]:
        if self.render_mode != "rgb_array":
            return None
        px = self.CELL_PX
        img = np.full((HEIGHT * px, WIDTH * px, 3), 30, dtype=np.uint8)
        for (cx, cy), color in ((GOAL, (40, 200, 70)), (PIT, (120, 90, 40))):
            img[cy * px : (cy + 1) * px, cx * px : (cx + 1) * px] = color
        if self.coin_timer == 0:
            img[PIT[1] * px + 2 : PIT[1] * px + px - 2, 2 : px - 2] = (230, 200, 40)
        img[self.y * px + 1 : self.y * px + px - 1, self.x * px + 1 : self.x * px + px - 1] = (
            60,
            120,
            255,
        )
        return img
