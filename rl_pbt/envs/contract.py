"""What an env promises the trainer, checked where it is cheap, and one clear line when an
env breaks it: which env, which copy and agent, and the rule.

Checked on every step: the number of observations and rewards equals `num_agents`; rewards
are finite numbers; each observation fits the observation space's shape. At the end of an
episode: the ranked objective (`true_objective` or `--pbt_target_objective`) is a finite
number. With an action mask: each action head has at least one legal action. Around reset()
and step(): an exception becomes an EnvContractError naming the call.
"""

from __future__ import annotations

import math
from typing import Any


class EnvContractError(RuntimeError):
    """An env broke the trainer's contract; the message is one line naming env and rule."""


def where(env_name: str, worker: int, copy: int, agent: int | None = None) -> str:
    agent_part = f", agent {agent}" if agent is not None else ""
    return f"env {env_name!r} (worker {worker}, copy {copy}{agent_part})"


def check_counts(place: str, obs: Any, rewards: Any, num_agents: int) -> None:
    """step() must give one observation and one reward per agent."""
    for what, values in (("observations", obs), ("rewards", rewards)):
        try:
            n = len(values)
        except TypeError:
            n = None
        if n != num_agents:
            got = "no list" if n is None else f"{n}"
            raise EnvContractError(
                f"{place}: step() returned {got} {what} for num_agents={num_agents} "
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
    return EnvContractError(f"{place}: {call} raised {type(error).__name__}: {error}")


def empty_action_mask(place: str, head: int, num_heads: int) -> EnvContractError:
    which = f" for action head {head}" if num_heads > 1 else ""
    return EnvContractError(
        f"{place}: the action mask allows no action{which} (a waiting agent still needs one "
        "legal action, e.g. a no-op, with info['is_active']=False)"
    )
