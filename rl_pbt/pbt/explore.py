"""PBT explore: pure functions that mutate tuned values within a search space (search_space.py).

Each returns the new value(s) and readable operations such as
`learning_rate 3.0e-4 -> 3.6e-4 (*1.2)`. All randomness comes from the numpy Generator passed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from rl_pbt.pbt.search_space import ParamSpec, fmt_value


@dataclass(frozen=True)
class ExploreSettings:
    """mutation_rate: chance that each parameter mutates. A perturbation multiplies or divides
    (50/50) by a factor drawn uniformly from [perturb_min, perturb_max]; with
    resample_probability a mutation draws from the prior instead (see resample_value)."""

    mutation_rate: float = 0.15
    perturb_min: float = 1.1
    perturb_max: float = 1.5
    resample_probability: float = 0.0

    @classmethod
    def from_cfg(cls, cfg: Any) -> ExploreSettings:
        return cls(
            mutation_rate=float(cfg.pbt_mutation_rate),
            perturb_min=float(cfg.pbt_perturb_min),
            perturb_max=float(cfg.pbt_perturb_max),
            resample_probability=float(getattr(cfg, "pbt_resample_probability", 0.0)),
        )


def _finish_numeric(spec: ParamSpec, old: Any, new: float) -> Any:
    """Round ints, clip into the bounds, keep the sign of a reward weight when bounds allow
    (after the rounding: an int weight of 1 divided by 2 would round to 0 and stay there)."""
    if spec.kind == "int":
        new = int(round(new))
    if spec.keep_sign and old != 0 and (new == 0 or (new > 0) != (old > 0)):
        new = old  # a move across zero (or onto it) keeps the old value
    new = spec.clip(new)
    return int(new) if spec.kind == "int" else float(new)


def _int_step(old: int, moved: float) -> float:
    """An int that rounds back to itself still moves one step in the perturbation's direction."""
    if round(moved) == old and moved != old:
        return old + (1 if moved > old else -1)
    return moved


def perturb_value(
    spec: ParamSpec, value: Any, rng: np.random.Generator, settings: ExploreSettings
) -> tuple[Any, str]:
    """Multiply or divide by U[perturb_min, perturb_max]; discount-like values move 1 - x.

    Categoricals step to a neighbouring value of their list. A zero has no scale to move by: a
    bounded one is drawn from its bounds (as a resample), an unbounded one stays zero.
    """
    if spec.kind == "categorical":
        return _categorical_neighbour(spec, value, rng)
    if value == 0 and not spec.discount_like and spec.bounded:
        return resample_value(spec, value, rng, settings)
    factor = float(rng.uniform(settings.perturb_min, settings.perturb_max))
    multiply = bool(rng.random() < 0.5)
    scale = factor if multiply else 1.0 / factor
    how = f"{'*' if multiply else '/'}{factor:.3g}"
    if spec.discount_like:
        moved = 1.0 - (1.0 - float(value)) * scale
        how = f"1-x {how}"
    else:
        moved = float(value) * scale
    if spec.kind == "int":
        moved = _int_step(int(value), moved)
    return _finish_numeric(spec, value, moved), how


def _categorical_neighbour(
    spec: ParamSpec, value: Any, rng: np.random.Generator
) -> tuple[Any, str]:
    values = list(spec.values)
    if value not in values or len(values) == 1:
        return values[int(rng.integers(len(values)))], "pick"
    i = values.index(value)
    neighbours = [j for j in (i - 1, i + 1) if 0 <= j < len(values)]
    return values[neighbours[int(rng.integers(len(neighbours)))]], "neighbour"


def _log_uniform(rng: np.random.Generator, low: float, high: float) -> float:
    """Log-uniform in [low, high] for bounds of one sign (negative bounds: by magnitude)."""
    sign = -1.0 if high < 0 else 1.0
    a, b = sorted((abs(low), abs(high)))
    return sign * math.exp(rng.uniform(math.log(a), math.log(b)))


def resample_value(
    spec: ParamSpec, value: Any, rng: np.random.Generator, settings: ExploreSettings
) -> tuple[Any, str]:
    """Draw from the prior.

    Bounded: log_float is log-uniform, float uniform, int uniform over the integers, a
    categorical any other value; discount-like values draw 1 - x log-uniform in
    [1 - high, 1 - low]; a reward weight draws from the part of its bounds on its own side of
    zero. Unbounded (or half-bounded) values have no prior, so they take a wide multiplicative
    jump instead: a factor log-uniform in [1 / perturb_max**2, perturb_max**2], then clipped.
    """
    if spec.kind == "categorical":
        others = [v for v in spec.values if v != value] or list(spec.values)
        return others[int(rng.integers(len(others)))], "resample"
    if not spec.bounded:
        reach = 2.0 * math.log(max(settings.perturb_max, 1.0))
        scale = math.exp(rng.uniform(-reach, reach)) if reach > 0 else 1.0
        if spec.discount_like:
            moved = 1.0 - (1.0 - float(value)) * scale
        else:
            moved = float(value) * scale
        if spec.kind == "int":
            moved = _int_step(int(value), moved)
        return _finish_numeric(spec, value, moved), f"jump *{scale:.3g}"
    low, high = spec.effective_bounds()
    if spec.discount_like:
        new = 1.0 - _log_uniform(rng, 1.0 - high, 1.0 - low)  # bounds lie inside (0, 1)
        return _finish_numeric(spec, value, new), "resample"
    if spec.keep_sign and value != 0:  # stay on the weight's own side of zero when possible
        side_low, side_high = (max(low, 0.0), high) if value > 0 else (low, min(high, 0.0))
        if side_low < side_high:
            low, high = side_low, side_high
    if spec.kind == "int":
        new = float(rng.integers(int(low), int(high) + 1))
    elif spec.kind == "log_float" and low * high > 0:
        new = _log_uniform(rng, low, high)
    else:
        new = float(rng.uniform(low, high))
        if spec.keep_sign and new == 0 and value != 0:
            new = float(value)
    return _finish_numeric(spec, value, new), "resample"


def mutate_value(
    spec: ParamSpec, value: Any, rng: np.random.Generator, settings: ExploreSettings
) -> tuple[Any, str]:
    """Resample with settings.resample_probability, else perturb. Returns (new value, how)."""
    if settings.resample_probability > 0 and rng.random() < settings.resample_probability:
        return resample_value(spec, value, rng, settings)
    return perturb_value(spec, value, rng, settings)


def describe(name: str, old: Any, new: Any, how: str = "") -> str:
    text = f"{name} {fmt_value(old)} -> {fmt_value(new)}"
    return f"{text} ({how})" if how else text


def explore(
    values: Mapping[str, Any],
    space: Mapping[str, ParamSpec],
    rng: np.random.Generator,
    settings: ExploreSettings,
) -> tuple[dict[str, Any], list[str]]:
    """Mutate each parameter of `space` present in `values` with probability mutation_rate.

    Returns the complete new values (keys outside the space unchanged) and one readable
    operation per value that actually changed, in the order of the space.
    """
    new = dict(values)
    ops: list[str] = []
    for name, spec in space.items():
        if name not in values:
            continue
        if rng.random() >= settings.mutation_rate:
            continue
        old = values[name]
        moved, how = mutate_value(spec, old, rng, settings)
        if moved != old:
            new[name] = moved
            ops.append(describe(name, old, moved, how))
    return new, ops
