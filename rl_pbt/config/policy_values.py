"""Per-policy starting values (`--policy_values=FILE`): the learning values and reward-shaping
leaves in which each population member differs from the defaults.

Checked at parse time (`load_policy_values`) and against the env's shaping by the runner
(`check_shaping_keys`); the runner applies them without PBT, the PBT manager starts a fresh
population from them. Shaping keys are the flat names of `pbt/search_space.py` (rew.<key>).
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping, Optional

from rl_pbt.config.flags import FLAGS_BY_NAME, TUNED_HPARAMS
from rl_pbt.config.parse import TUNABLE_TEXT, ConfigError, did_you_mean, is_tunable
from rl_pbt.logging.files import load_user_json
from rl_pbt.pbt.search_space import is_shaping_key

FLAG = "--policy_values"


def load_policy_values(path: str, num_policies: int) -> list[dict[str, float]]:
    """The file's values, one dict per policy (keys starting with '_' dropped).

    The file is a JSON list of `num_policies` objects; a key is a learning value a learner can
    change while it runs (TUNED_HPARAMS) or a shaping leaf `rew.<key>`; values are numbers that
    pass the flag's own check. Anything else is a ConfigError naming the policy and key.
    """
    where = f"{FLAG}={path!r}"
    if not os.path.isfile(path):
        raise ConfigError(f"{where}: no such file")
    try:
        with open(path) as f:
            data = load_user_json(f)
    except ValueError as e:  # json.JSONDecodeError, or bytes that are not text
        raise ConfigError(f"{where}: not valid JSON ({e})") from None
    except OSError as e:
        raise ConfigError(f"{where}: cannot read it ({e.strerror})") from None
    if not isinstance(data, list):
        raise ConfigError(f"{where}: expected a JSON list with one object per policy")
    if len(data) != num_policies:
        raise ConfigError(
            f"{where}: {len(data)} entries for --num_policies={num_policies}; give one object "
            "per policy ({} keeps the defaults)"
        )
    return [_policy_entry(where, p, entry) for p, entry in enumerate(data)]


def _policy_entry(where: str, p: int, entry: Any) -> dict[str, float]:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: entry {p} must be an object, got {entry!r}")
    values: dict[str, float] = {}
    for key, value in entry.items():
        if key.startswith("_"):  # "_label", "_comment"
            continue
        if not is_tunable(key):
            hint = did_you_mean(key, TUNED_HPARAMS, prefix="")
            raise ConfigError(
                f"{where}: policy {p}: unknown key {key!r}{hint}; allowed: {TUNABLE_TEXT}"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: policy {p}: {key}={value!r} is not a number")
        try:
            value = float(value)
        except OverflowError:  # an integer too large for a float
            value = math.inf
        if not math.isfinite(value):
            raise ConfigError(f"{where}: policy {p}: {key}={value!r} is not finite")
        flag = FLAGS_BY_NAME.get(key)
        problem = flag.check(value) if flag is not None and flag.check is not None else None
        if problem:
            raise ConfigError(f"{where}: policy {p}: {key}={value!r}: {problem}")
        values[key] = value
    return values


def check_shaping_keys(
    values: list[dict[str, float]], shaping_flat: Optional[Mapping[str, float]], env: str
) -> None:
    """Every rew.<key> named in `values` must be a leaf of the env's reward shaping."""
    leaves = set(shaping_flat or {})
    for p, entry in enumerate(values):
        unknown = [k for k in entry if is_shaping_key(k) and k not in leaves]
        if unknown and not leaves:
            raise ConfigError(
                f"{FLAG}: policy {p}: {', '.join(unknown)}: --env={env} has no reward shaping"
            )
        if unknown:
            raise ConfigError(
                f"{FLAG}: policy {p}: {', '.join(unknown)} not in --env={env}'s reward shaping "
                f"(leaves: {', '.join(sorted(leaves))})"
            )


def split_values(values: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """(learning values, flat shaping values) of one policy's entry."""
    learning = {k: v for k, v in values.items() if not is_shaping_key(k)}
    shaping = {k: v for k, v in values.items() if is_shaping_key(k)}
    return learning, shaping


def describe_values(values: list[dict[str, float]]) -> str:
    """One line: 'p1 learning_rate=0.001, rew.kill=0.5; p2 ...' (members with values only)."""
    parts = [
        f"p{p} " + ", ".join(f"{k}={v:g}" for k, v in entry.items())
        for p, entry in enumerate(values)
        if entry
    ]
    return "; ".join(parts) if parts else "every policy keeps the defaults"
