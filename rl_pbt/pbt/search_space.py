"""Typed PBT search space: parameter specs, defaults, the JSON override file, shaping keys.

Used by explore.py (how a value may move), manager.py (what is tuned) and lineage.py (keys).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

from rl_pbt.logging.files import load_user_json, policy_shaping_path, read_json

KINDS = ("float", "log_float", "int", "categorical")
SHAPING_PREFIX = "rew"
DISCOUNT_EPS = 1e-6  # a discount-like value stays within [eps, 1 - eps]


@dataclass(frozen=True)
class ParamSpec:
    """How one tuned value may move.

    kind: float | log_float | int | categorical. low/high: optional inclusive bounds (None:
    open on that side). values: the choices of a categorical. discount_like: perturb 1 - x
    (gamma). keep_sign: a reward weight; explore never flips its sign or makes it zero unless
    the bounds force it. default: starting value for a parameter the runner does not pass.
    tuned: False keeps the parameter out of the search (a file entry {"tune": false}).
    """

    name: str
    kind: str = "float"
    low: Optional[float] = None
    high: Optional[float] = None
    values: Optional[tuple] = None
    discount_like: bool = False
    keep_sign: bool = False
    default: Any = None
    tuned: bool = True  # False: the value stays at its start ({"tune": false} in the file)

    def __post_init__(self) -> None:
        where = f"search space entry {self.name!r}"
        if self.kind not in KINDS:
            raise ValueError(f"{where}: type {self.kind!r} is not one of {list(KINDS)}")
        if self.kind == "categorical":
            if not self.values:
                raise ValueError(f"{where}: a categorical needs a non-empty 'values' list")
            return
        for side, bound in (("low", self.low), ("high", self.high)):
            if bound is not None and math.isnan(bound):
                raise ValueError(f"{where}: {side} is NaN")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"{where}: low={self.low} is above high={self.high}")
        if self.kind == "log_float" and self.bounded:
            if self.low * self.high <= 0:
                raise ValueError(
                    f"{where}: log_float bounds must be non-zero and of one sign, "
                    f"got [{self.low}, {self.high}]"
                )
        if self.discount_like:
            for b in (self.low, self.high):
                if b is not None and not 0.0 <= b <= 1.0:
                    raise ValueError(f"{where}: discount-like bounds must lie in [0, 1]")

    @property
    def bounded(self) -> bool:
        return self.low is not None and self.high is not None

    def effective_bounds(self) -> tuple[float, float]:
        """Bounds as numbers (infinite where open); discount-like params stay inside (0, 1)."""
        low = -math.inf if self.low is None else float(self.low)
        high = math.inf if self.high is None else float(self.high)
        if self.discount_like:
            low, high = max(low, DISCOUNT_EPS), min(high, 1.0 - DISCOUNT_EPS)
        if self.kind == "int":
            low = math.ceil(low) if math.isfinite(low) else low
            high = math.floor(high) if math.isfinite(high) else high
        return low, high

    def clip(self, value: float) -> float:
        low, high = self.effective_bounds()
        return min(max(value, low), high)

    def contains(self, value: Any) -> bool:
        if self.kind == "categorical":
            return value in self.values
        low, high = self.effective_bounds()
        return low <= value <= high

    def widened_to(self, value: float) -> ParamSpec:
        """The same spec with its bounds stretched to include `value` (a user's own default)."""
        low, high = self.low, self.high
        if low is not None and value < low:
            low = value
        if high is not None and value > high:
            high = value
        return replace(self, low=low, high=high)


# Built-in bounds for the learning parameters: wide enough never to bind in practice, tight
# enough that a resample from the prior lands somewhere sensible.
DEFAULT_LEARNING_SPECS: dict[str, ParamSpec] = {
    "learning_rate": ParamSpec("learning_rate", "log_float", 1e-6, 1e-2),
    "exploration_loss_coeff": ParamSpec("exploration_loss_coeff", "log_float", 1e-6, 0.1),
    "value_loss_coeff": ParamSpec("value_loss_coeff", "log_float", 1e-2, 10.0),
    "max_grad_norm": ParamSpec("max_grad_norm", "log_float", 0.1, 100.0),
    "ppo_clip_ratio": ParamSpec("ppo_clip_ratio", "log_float", 0.02, 0.5),
    "ppo_clip_value": ParamSpec("ppo_clip_value", "log_float", 0.01, 100.0),
}
GAMMA_SPEC = ParamSpec("gamma", "float", 0.9, 0.9999, discount_like=True)

_ENTRY_KEYS = {"type", "low", "high", "values", "discount_like", "keep_sign", "default", "tune"}


def is_shaping_key(name: str) -> bool:
    return name.startswith(SHAPING_PREFIX + ".")


def spec_from_dict(name: str, entry: Mapping[str, Any]) -> ParamSpec:
    """One entry of the search-space file, e.g. {"type": "log_float", "low": 1e-5, "high": 1e-2}."""
    if not isinstance(entry, Mapping):
        raise ValueError(f"search space entry {name!r}: expected an object, got {entry!r}")
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        raise ValueError(
            f"search space entry {name!r}: unknown keys {sorted(unknown)} "
            f"(allowed: {sorted(_ENTRY_KEYS)})"
        )
    values = entry.get("values")
    tune = entry.get("tune", True)
    if not isinstance(tune, bool):
        raise ValueError(f"search space entry {name!r}: 'tune' must be true or false, got {tune!r}")
    if not tune:  # only the name matters: the value is never moved
        ignored = sorted(set(entry) - {"tune"})
        if ignored:
            raise ValueError(
                f'search space entry {name!r}: with "tune": false it keeps the value it '
                f"starts with, so {ignored} would do nothing; drop them"
            )
        return ParamSpec(name=name, tuned=False)
    return ParamSpec(
        name=name,
        kind=entry.get("type", "float"),
        low=None if entry.get("low") is None else float(entry["low"]),
        high=None if entry.get("high") is None else float(entry["high"]),
        values=None if values is None else tuple(values),
        discount_like=bool(entry.get("discount_like", name == "gamma")),
        keep_sign=bool(entry.get("keep_sign", is_shaping_key(name))),
        default=entry.get("default"),
    )


def load_search_space_file(path: Optional[str]) -> dict[str, ParamSpec]:
    """Read a JSON search-space file ({name: entry}); None or "" gives an empty dict."""
    if not path:
        return {}
    with open(path) as f:
        data = load_user_json(f)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a search space is a JSON object of name -> entry")
    specs = {}
    for name, entry in data.items():
        if name.startswith("_"):  # "_comment" and similar keys are ignored
            continue
        specs[name] = spec_from_dict(name, entry)
    return specs


def build_search_space(
    hparams: Mapping[str, Any],
    shaping_flat: Optional[Mapping[str, float]] = None,
    optimize_gamma: bool = False,
    overrides: Optional[Mapping[str, ParamSpec]] = None,
) -> tuple[dict[str, ParamSpec], list[str]]:
    """The tuned parameters and their specs, plus notes worth logging once.

    Defaults: the six learning parameters present in `hparams` (+ gamma when optimize_gamma),
    and every non-zero leaf of the flat reward shaping (unbounded, sign kept). A value of 0 is
    a switched-off term (max_grad_norm=0, a zero reward weight) and is not tuned unless the
    overrides name it. An override with tuned=False takes its parameter out of the search.
    Built-in bounds stretch to include the starting value; bounds from the overrides are kept
    as given (explore clips a value that starts outside them).
    """
    overrides = dict(overrides or {})
    shaping_flat = dict(shaping_flat or {})
    space: dict[str, ParamSpec] = {}
    notes: list[str] = []
    fixed: list[str] = []

    defaults = dict(DEFAULT_LEARNING_SPECS)
    if optimize_gamma:
        defaults["gamma"] = GAMMA_SPEC
    order = [n for n in defaults if n in hparams] + list(shaping_flat)
    order += [n for n in overrides if n not in order]
    for name in order:
        value = shaping_flat.get(name, hparams.get(name))
        spec = overrides.get(name)
        if spec is not None:
            if is_shaping_key(name) and name not in shaping_flat:
                raise ValueError(
                    f"search space entry {name!r} is not a leaf of the env's reward shaping "
                    f"(leaves: {sorted(shaping_flat) or 'none'})"
                )
            if not spec.tuned:
                fixed.append(name)
                continue
            if value is None:
                value = spec.default
            if value is not None and not spec.contains(value):
                notes.append(f"{name}={value!r} starts outside its search space; explore clips it")
            space[name] = spec
        elif value == 0:
            notes.append(
                f"{name} is 0 (switched off): not tuned unless the search space names it with "
                "bounds (a 0 is then drawn from them)"
            )
        elif name in defaults:
            space[name] = defaults[name].widened_to(float(value))
        else:
            space[name] = ParamSpec(name, "float", keep_sign=True)
    if fixed:
        notes.append(f"fixed by the search space file (tune: false): {', '.join(fixed)}")
    return space, notes


# ---- reward shaping: nested dict <-> flat keys like rew.pickup, rew.group.x, rew.t[1] ----


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def flatten_shaping(shaping: Optional[Mapping[str, Any]], prefix: str = SHAPING_PREFIX) -> dict:
    """Numeric leaves of a nested shaping dict as {flat key: float}; other leaves are skipped."""
    flat: dict[str, float] = {}
    if not shaping:
        return flat

    def walk(node: Any, key: str) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                walk(v, f"{key}.{k}")
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, f"{key}[{i}]")
        elif _is_number(node):
            flat[key] = float(node)

    walk(shaping, prefix)
    return flat


def unflatten_shaping(
    flat: Mapping[str, Any],
    template: Optional[Mapping[str, Any]] = None,
    prefix: str = SHAPING_PREFIX,
) -> dict:
    """Rebuild the nested shaping dict from flat keys.

    With a template, its exact structure comes back (tuples stay tuples, lists stay lists,
    non-numeric leaves and keys missing from `flat` keep the template's value). Without one,
    the structure is parsed from the keys and indexed leaves become tuples.
    """
    if template is not None:

        def rebuild(node: Any, key: str) -> Any:
            if isinstance(node, Mapping):
                return {k: rebuild(v, f"{key}.{k}") for k, v in node.items()}
            if isinstance(node, (list, tuple)):
                items = [rebuild(v, f"{key}[{i}]") for i, v in enumerate(node)]
                return tuple(items) if isinstance(node, tuple) else items
            if _is_number(node) and key in flat:
                return flat[key]
            return node

        return rebuild(template, prefix)

    root: dict = {}
    token = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")
    for key, value in flat.items():
        if not key.startswith(prefix):
            continue
        path: list = []
        for m in token.finditer(key, len(prefix)):
            path.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
        if not path:
            continue
        node: dict = root  # indexed levels are dicts with int keys until finish() below
        for step in path[:-1]:
            node = node.setdefault(step, {})
        node[path[-1]] = value

    def finish(node: Any) -> Any:
        if isinstance(node, dict):
            done = {k: finish(v) for k, v in node.items()}
            if done and all(isinstance(k, int) for k in done):
                return tuple(done[i] for i in sorted(done))
            return done
        return node

    return finish(root)


def fmt_value(v: Any) -> str:
    """Short readable number: 0.99, 12.5, 3.0e-4, 2.5e+6; non-numbers as repr."""
    if not _is_number(v):
        return repr(v)
    if isinstance(v, int):
        return str(v)
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    if 1e-3 <= abs(v) < 1e5:
        return f"{v:.4g}"
    mantissa, exp = f"{v:.2e}".split("e")
    mantissa = mantissa.rstrip("0")
    if mantissa.endswith("."):
        mantissa += "0"
    return f"{mantissa}e{int(exp)}"


def diff_values(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, list]:
    """{key: [old, new]} for every key whose value differs (a missing side is None)."""
    changes = {}
    for key in list(old) + [k for k in new if k not in old]:
        a, b = old.get(key), new.get(key)
        if a != b:
            changes[key] = [a, b]
    return changes


def overlay_shaping(base: Mapping[str, Any], leaves: Mapping[str, Any], default: dict) -> dict:
    """The whole nested shaping `base` with the flat leaves `leaves` (`rew.`-prefixed, as
    --policy_values gives them) laid over it, in the form of the env's `default`."""
    return unflatten_shaping({**flatten_shaping(base), **leaves}, default)


def saved_member_shaping(exp_dir: str, policy_id: int, default: Optional[dict]) -> Optional[dict]:
    """The reward shaping PBT last gave member `policy_id` of the run in `exp_dir` (its
    policy file), on the env's `default` (tuples stay tuples; leaves the env no longer has are
    left out); None without such a file, or when it cannot be read."""
    path = policy_shaping_path(exp_dir, policy_id)
    if default is None or not os.path.isfile(path):
        return None
    try:
        saved = flatten_shaping(read_json(path))
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    flat = flatten_shaping(default)
    flat.update({k: v for k, v in saved.items() if k in flat})
    return unflatten_shaping(flat, default)
