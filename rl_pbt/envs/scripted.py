"""Scripted policies an env provides by name: fixed opponents that never trained with the
population, to measure its strength against the outside world (`rl-pbt-match`, and PBT's
`--pbt_target_objective=vs_scripted:NAME`).

    register_scripted_policy("connect_four", "alphabeta", make_alphabeta)

`make_fn(env, seed, **params)` returns an actor: `act(obs)` gives the env action for one
agent's observation, and an optional `reset()` is called at the start of each episode. A
player is named `NAME` or `NAME:key=value[,key=value]` (e.g. `alphabeta:depth=2`); the values
are given to `make_fn` as ints, floats or strings. `random` exists for every env: uniform over
the legal actions (the action mask, when the observation has one).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

import gymnasium as gym
import numpy as np

from rl_pbt.models.obs import MASK_KEY

MakeScripted = Callable[..., Any]

_SCRIPTED: dict[str, dict[str, MakeScripted]] = {}


class RandomActor:
    """Uniform over the legal actions: every action of the space, or those the observation's
    action mask allows."""

    def __init__(self, action_space, seed: Optional[int] = None):
        self.space = action_space
        self.space.seed(seed)
        self.rng = np.random.default_rng(seed)

    def act(self, obs):
        if not (isinstance(obs, dict) and MASK_KEY in obs):
            return self.space.sample()
        mask = np.asarray(obs[MASK_KEY]).reshape(-1) > 0
        if hasattr(self.space, "n"):
            return int(self.rng.choice(np.flatnonzero(mask)))
        if isinstance(self.space, gym.spaces.MultiDiscrete):  # one slice of the mask per head
            heads = np.split(mask, np.cumsum(self.space.nvec.reshape(-1))[:-1])
            picks = [self.rng.choice(np.flatnonzero(h)) for h in heads]
            return np.asarray(picks, dtype=self.space.dtype).reshape(self.space.shape)
        return self.space.sample()

    def reset(self) -> None:
        pass


def _make_random(env, seed: Optional[int] = None) -> RandomActor:
    return RandomActor(env.action_space, seed)


def register_scripted_policy(env_name: str, name: str, make_fn: MakeScripted) -> None:
    """Register the scripted player `name` for `env_name` (re-registering replaces it)."""
    from rl_pbt.envs.registry import kept_from_builtins  # avoid cycle

    if not name or ":" in name or "," in name or name == "random":
        raise ValueError(f"scripted player name {name!r}: a plain name, not 'random'")
    if kept_from_builtins(env_name):
        return  # the script's own env of a built-in's name: its players stay its own
    _SCRIPTED.setdefault(env_name, {})[name] = make_fn


def scripted_policies(env_name: str) -> list[str]:
    """The scripted players of `env_name`, `random` first."""
    return ["random", *sorted(_SCRIPTED.get(env_name, {}))]


def _value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_scripted(spec: str) -> tuple[str, dict[str, Any]]:
    """`NAME` or `NAME:k=v,k=v` -> (NAME, params). ValueError (one line) when malformed."""
    name, sep, rest = spec.partition(":")
    params: dict[str, Any] = {}
    if sep:
        for item in rest.split(","):
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise ValueError(
                    f"player {spec!r}: parameters are key=value pairs, e.g. {name}:depth=2"
                )
            params[key.strip()] = _value(value.strip())
    return name, params


def looks_scripted(spec: str, env_name: Optional[str] = None) -> bool:
    """Whether `spec` names a scripted player (of `env_name`, or of any env when None)."""
    name, sep, rest = spec.partition(":")
    if sep and "=" not in rest:
        return False  # EXPERIMENT:pN
    if name == "random":
        return True
    if env_name is not None:
        return name in _SCRIPTED.get(env_name, {})
    return any(name in players for players in _SCRIPTED.values())


def make_scripted(env_name: Optional[str], spec: str, env, seed: Optional[int] = None) -> Any:
    """An actor of the scripted player `spec` for `env` (an instance of `env_name`). With
    `env_name` None, a name is found when every env registering it shares one `make_fn`."""
    name, params = parse_scripted(spec)
    if name == "random":
        make_fn: MakeScripted = _make_random
    else:
        if env_name is None:  # found if every env that has `name` has the same one
            fns = {id(p[name]): p[name] for p in _SCRIPTED.values() if name in p}
            found = next(iter(fns.values())) if len(fns) == 1 else None
        else:
            found = _SCRIPTED.get(env_name, {}).get(name)
        if found is None:
            known = ", ".join(scripted_policies(env_name)) if env_name else "random"
            raise ValueError(
                f"player {spec!r}: no scripted player {name!r} for env {env_name!r} "
                f"(known: {known})"
            )
        make_fn = found
    problem = _params_problem(name, make_fn, params)
    if problem:
        raise ValueError(f"player {spec!r}: {problem}")
    try:
        return make_fn(env, seed=seed, **params)
    except (TypeError, ValueError) as e:  # a value the player refuses
        raise ValueError(f"player {spec!r}: {e}; {_takes(name, make_fn)}") from None


_KIND_WORDS = {int: "an integer", float: "a number", str: "a string"}


def _parameters(make_fn: MakeScripted) -> Optional[dict[str, inspect.Parameter]]:
    """The parameters `make_fn` takes besides the env and the seed; None when it takes any
    (a **kwargs) or its signature cannot be read."""
    try:
        sig = inspect.signature(make_fn)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name: p for p in params[1:] if p.kind in named and p.name != "seed"}


def _kind(param: inspect.Parameter) -> Optional[type]:
    """int, float or str: the type of the parameter's default, else of its annotation."""
    default = param.default
    if default is not inspect.Parameter.empty and default is not None:
        return type(default) if type(default) in _KIND_WORDS else None
    note = param.annotation
    note = note if isinstance(note, str) else getattr(note, "__name__", "")
    return {"int": int, "float": float, "str": str}.get(note)


def _takes(name: str, make_fn: MakeScripted) -> str:
    """'NAME takes: depth (an integer, default 2)', or 'NAME takes no parameters'."""
    params = _parameters(make_fn)
    if params is None:
        return f"see the parameters of {name}'s make_fn"
    if not params:
        return f"{name} takes no parameters"
    parts = []
    for p in params.values():
        bits = [_KIND_WORDS[_kind(p)]] if _kind(p) else []
        if p.default is not inspect.Parameter.empty:
            bits.append(f"default {p.default!r}")
        parts.append(f"{p.name} ({', '.join(bits)})" if bits else p.name)
    return f"{name} takes: {', '.join(parts)}"


def _params_problem(name: str, make_fn: MakeScripted, params: dict[str, Any]) -> Optional[str]:
    """Why `params` do not fit `make_fn` (an unknown name, or a value of the wrong type)."""
    known = _parameters(make_fn)
    if known is None:
        return None
    for key, value in params.items():
        if key not in known:
            return f"unexpected keyword argument {key!r}; {_takes(name, make_fn)}"
        kind = _kind(known[key])
        fits = kind is None or isinstance(value, kind) or (kind is float and isinstance(value, int))
        if not fits:
            return f"{key}={value!r} is not {_KIND_WORDS[kind]}; {_takes(name, make_fn)}"
    return None


def scripted_snapshot(env_name: str) -> dict[str, MakeScripted]:
    """The scripted players of `env_name`, to hand to child processes (which may start by
    spawn, without the registrations a user's script made)."""
    return dict(_SCRIPTED.get(env_name, {}))


def restore_scripted(env_name: str, players: dict[str, MakeScripted]) -> None:
    for name, make_fn in players.items():
        _SCRIPTED.setdefault(env_name, {})[name] = make_fn
