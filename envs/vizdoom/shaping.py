"""Shaped Doom reward from game-variable deltas weighted by a nested coefficient dict (PBT tunes
every leaf); one RewardShaper per agent in doom_env.py and multiplayer.py.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from envs.vizdoom.scenarios import GV

WEAPON_SLOTS = tuple(range(1, 8))
# Ammo gained is counted as a fraction of what one backpack-less player can carry.
AMMO_CAPACITY = {"AMMO2": 200.0, "AMMO3": 50.0, "AMMO5": 50.0, "AMMO6": 300.0}


def default_shaping(kind: str, scenario_reward_scale: float) -> dict[str, Any]:
    """Coefficients for one agent. Single-player scenarios rely on their own reward; fights
    reward frags and the events that lead to them.
    """
    fight = kind != "single"
    return {
        "scenario_reward_scale": float(scenario_reward_scale),
        "living": 0.0,  # per agent step
        "events": {  # per occurrence
            "frag": 1.0 if fight else 0.0,  # a suicide lowers the frag count: -frag
            "death": -0.5 if fight else 0.0,
            "kill": 0.0,  # monsters
            "hit": 0.01 if fight else 0.0,
            "hit_taken": -0.01 if fight else 0.0,
        },
        "damage": {  # per hit point
            "dealt": 0.005 if fight else 0.0,
            "taken": -0.002 if fight else 0.0,
        },
        "pickups": {  # health/armour per point gained, weapon per new weapon, ammo per capacity
            "health": 0.004 if fight else 0.0,
            "armor": 0.004 if fight else 0.0,
            "weapon": 0.2 if fight else 0.0,
            "ammo": 0.5 if fight else 0.0,
        },
        "selected_weapon": {  # per agent step while alive with this weapon slot selected
            f"weapon{slot}": (0.0005 if fight and slot >= 3 else 0.0) for slot in WEAPON_SLOTS
        },
    }


def flatten(shaping: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """{"events": {"frag": 1.0}} -> {"events/frag": 1.0}."""
    flat: dict[str, float] = {}
    for key, value in shaping.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, path + "/"))
        else:
            flat[path] = value
    return flat


def merge_shaping(current: dict[str, Any], update: dict[str, Any], where: str = "") -> dict:
    """A copy of `current` with the leaves present in `update` replaced; unknown keys and
    non-numeric leaves are errors that name the key.
    """
    merged = copy.deepcopy(current)
    for key, value in update.items():
        path = f"{where}{key}"
        if key not in merged:
            raise KeyError(
                f"unknown Doom reward-shaping key {path!r}; known: {sorted(flatten(current))}"
            )
        if isinstance(merged[key], dict):
            if not isinstance(value, dict):
                raise TypeError(f"reward shaping {path!r} must be a dict, got {value!r}")
            merged[key] = merge_shaping(merged[key], value, path + "/")
        else:
            if isinstance(value, (list, tuple)) and len(value) == 1:
                value = value[0]
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
                raise TypeError(f"reward shaping {path!r} must be a number, got {value!r}")
            merged[key] = float(value)
    return merged


class RewardShaper:
    """Reward of one agent = sum over components of coefficient * component.

    Components of a step: the scenario's own reward, 1 (living), and deltas of game variables
    since the previous step. Pickups are not counted across a death or respawn (a respawn
    refills health and ammo without any pickup).
    """

    def __init__(self, shaping: dict[str, Any]):
        self.shaping = copy.deepcopy(shaping)
        self.keys = tuple(flatten(shaping))
        self._coeffs = np.array([flatten(shaping)[k] for k in self.keys], dtype=np.float64)
        self._slot = {k: i for i, k in enumerate(self.keys)}
        self.components = np.zeros(len(self.keys), dtype=np.float64)
        self._prev: np.ndarray | None = None

    def set_shaping(self, update: dict[str, Any]) -> None:
        self.shaping = merge_shaping(self.shaping, update)
        flat = flatten(self.shaping)
        self._coeffs = np.array([flat[k] for k in self.keys], dtype=np.float64)

    def start_episode(self, game_vars: np.ndarray) -> None:
        self._prev = np.array(game_vars, dtype=np.float64)

    def components_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in zip(self.keys, self.components)}

    def step(self, game_vars: np.ndarray, scenario_reward: float) -> float:
        cur = np.asarray(game_vars, dtype=np.float64)
        prev = self._prev if self._prev is not None else cur
        c = self.components
        c[:] = 0.0
        s = self._slot
        d = cur - prev
        c[s["scenario_reward_scale"]] = scenario_reward
        c[s["living"]] = 1.0
        c[s["events/frag"]] = d[GV["FRAGCOUNT"]]
        c[s["events/death"]] = max(0.0, d[GV["DEATHCOUNT"]])
        c[s["events/kill"]] = max(0.0, d[GV["KILLCOUNT"]])
        c[s["events/hit"]] = max(0.0, d[GV["HITCOUNT"]])
        c[s["events/hit_taken"]] = max(0.0, d[GV["HITS_TAKEN"]])
        c[s["damage/dealt"]] = max(0.0, d[GV["DAMAGECOUNT"]])
        c[s["damage/taken"]] = max(0.0, d[GV["DAMAGE_TAKEN"]])
        alive_now = cur[GV["DEAD"]] < 0.5 and cur[GV["HEALTH"]] > 0
        alive_before = prev[GV["DEAD"]] < 0.5 and prev[GV["HEALTH"]] > 0
        if alive_now and alive_before and d[GV["DEATHCOUNT"]] <= 0:
            c[s["pickups/health"]] = max(0.0, d[GV["HEALTH"]])
            c[s["pickups/armor"]] = max(0.0, d[GV["ARMOR"]])
            c[s["pickups/weapon"]] = sum(max(0.0, d[GV[f"WEAPON{k}"]]) for k in WEAPON_SLOTS)
            c[s["pickups/ammo"]] = sum(
                max(0.0, d[GV[name]]) / cap for name, cap in AMMO_CAPACITY.items()
            )
        if alive_now:
            slot = int(round(cur[GV["SELECTED_WEAPON"]]))
            key = f"selected_weapon/weapon{slot}"
            if key in s:
                c[s[key]] = 1.0
        self._prev = cur
        return float(np.dot(self._coeffs, c))
