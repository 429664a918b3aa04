"""What an env promises the trainer, checked where it is cheap, and one clear line when an
env breaks it: which env, which copy and agent, and the rule.

Checked on every step: the number of observations, rewards, `terminated` and `truncated`
flags and infos equals `num_agents`, and each info is a dict (where it is read); rewards
are finite numbers; each observation fits the observation space's shape. At the end of an
episode: the ranked objective (`true_objective` or `--pbt_target_objective`) is a finite
number. With an action mask: each action head has at least one legal action. Around reset()
and step(): an exception becomes an EnvContractError naming the call and the line of the env's
own code that raised it.
"""

from __future__ import annotations

import math
import os
import sysconfig
import traceback
from collections.abc import Mapping
from typing import Any, Optional

import gymnasium as gym
import numpy as np


class EnvContractError(RuntimeError):
    """An env broke the trainer's contract; the message is one line naming env and rule."""


def where(env_name: str, worker: int, copy: int, agent: int | None = None) -> str:
    agent_part = f", agent {agent}" if agent is not None else ""
    return f"env {env_name!r} (worker {worker}, copy {copy}{agent_part})"


def check_counts(
    place: str, obs: Any, rewards: Any, num_agents: int, ends: tuple = (), infos: Any = None
) -> None:
    """step() must give one observation, one reward, one `terminated` and one `truncated` flag
    (`ends`) per agent, and one info per agent (each a dict: checked where they are read)."""
    named = [("observations", obs), ("rewards", rewards)]
    named += [(f"{flag} flags", v) for flag, v in zip(("terminated", "truncated"), ends)]
    if infos is not None:
        named.append(("infos", infos))
    for what, values in named:
        try:
            n = None if isinstance(values, dict) else len(values)
        except TypeError:
            n = None
        if n != num_agents:
            got = f"{n} {what}" if n is not None else f"{what} as a {type(values).__name__}"
            raise EnvContractError(
                f"{place}: step() returned {got} for num_agents={num_agents} "
                "(a multi-agent env returns one per agent, in a list)"
            )


def check_reward(place: str, reward: Any) -> float:
    """A reward must be a finite number; returns it as a float."""
    try:
        value = float(reward)
    except (TypeError, ValueError):
        raise EnvContractError(f"{place}: the reward {reward!r} is not a number") from None
    if not math.isfinite(value):
        raise EnvContractError(
            f"{place}: the reward is {value} (rewards must be finite: a NaN or infinite reward "
            "would poison training)"
        )
    return value


def check_objective(place: str, key: str, value: Any) -> float:
    """The objective PBT ranks on, at the end of an episode, must be a finite number."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise EnvContractError(
            f"{place}: info[{key!r}] at the end of an episode is {value!r}, not a number "
            "(PBT ranks members on it)"
        ) from None
    if not math.isfinite(out):
        raise EnvContractError(f"{place}: info[{key!r}] at the end of an episode is {out}")
    return out


def observation_misfit(place: str, obs: Any, space: Any, error: Exception) -> EnvContractError:
    shape = getattr(obs, "shape", None)
    got = f"shape {tuple(shape)}" if shape is not None else f"a {type(obs).__name__}"
    return EnvContractError(
        f"{place}: the observation ({got}) does not fit the observation space {space!r} ({error})"
    )


def call_failed(place: str, call: str, error: Exception) -> EnvContractError:
    return EnvContractError(
        f"{place}: {call} raised {type(error).__name__}: {error}{raised_at(error)}"
    )


def raised_at(error: BaseException) -> str:
    """Where the env's own code raised `error`, as " (at FILE:LINE, in FUNCTION)": the
    innermost frame outside Python's library, installed packages and this trainer (the
    innermost frame of all when every frame is theirs); "" without a traceback."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    theirs = tuple(p for p in _library_paths() if p)
    own = [f for f in frames if not os.path.abspath(f.filename).startswith(theirs)]
    frame = (own or frames)[-1]
    return f" (at {frame.filename}:{frame.lineno}, in {frame.name})"


def _library_paths() -> list[str]:
    paths = sysconfig.get_paths()
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # rl_pbt/
    return [
        os.path.join(os.path.abspath(p), "")
        for p in (paths["stdlib"], paths["purelib"], paths["platlib"], package)
    ]


def empty_action_mask(place: str, head: int, num_heads: int) -> EnvContractError:
    which = f" for action head {head}" if num_heads > 1 else ""
    return EnvContractError(
        f"{place}: the action mask allows no action{which} (a waiting agent still needs one "
        "legal action, e.g. a no-op, with info['is_active']=False; a multi-agent env resets "
        "itself on the step that ends an episode, and returns the next one's observations)"
    )


def observation_problem(obs: Any, space: gym.Space) -> Optional[str]:
    """What keeps `obs` from being an observation of `space` as the trainer stores it, or None:
    a shape other than the space's (numpy would spread a scalar over a vector), floats for an
    integer space (they would be cast, 0.7 to 0), a Dict observation without one of the space's
    keys (its value would stay from an earlier step), a Discrete observation out of range. Run
    on the first observations of each env copy only: bounds are not checked."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, Mapping):
            return f"a {type(obs).__name__} for a Dict space"
        missing = [k for k in space.spaces if k not in obs]
        if missing:
            return f"no key {missing[0]!r} (the space's keys: {list(space.spaces)})"
        for key, sub in space.spaces.items():
            problem = observation_problem(obs[key], sub)
            if problem:
                return f"key {key!r}: {problem}"
        return None
    if isinstance(space, gym.spaces.Discrete):
        if np.ndim(obs) != 0 or np.asarray(obs).dtype.kind not in "iu":
            return f"{obs!r} for a Discrete space (an integer is expected)"
        if not 0 <= int(obs) - int(space.start) < int(space.n):
            last = int(space.start) + int(space.n) - 1
            return f"{int(obs)}, outside the Discrete space's {space.start}..{last}"
        return None
    if isinstance(space, gym.spaces.Box):
        a = np.asarray(obs)
        if a.shape != space.shape:
            return f"shape {a.shape} for the space's {space.shape}"
        if a.dtype.kind not in "biuf":
            return f"dtype {a.dtype}"
        if np.issubdtype(space.dtype, np.integer) and a.dtype.kind == "f":
            return f"floats ({a.dtype}) for a {space.dtype} space: they would be cast to integers"
    return None
