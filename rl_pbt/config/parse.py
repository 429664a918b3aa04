"""Builds the parser from `flags.FLAGS`, applies presets, validates, saves and loads configs.

Precedence, lowest first: flag defaults < env defaults (from `register_env`) < preset file <
command line. Errors name the flag, the value and what is allowed.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Iterable, Optional

from rl_pbt.config.flags import FLAGS, FLAGS_BY_NAME, TUNED_HPARAMS, Flag
from rl_pbt.pbt.search_space import (
    SHAPING_PREFIX,
    ParamSpec,
    is_shaping_key,
    load_search_space_file,
)


def _configs_dir() -> Path:
    """The presets: the repository's configs/, or the installed `configs` package."""
    here = Path(__file__).resolve().parents[2] / "configs"
    if here.is_dir():
        return here
    try:
        import configs

        return Path(configs.__file__).resolve().parent
    except ImportError:
        return here


CONFIGS_DIR = _configs_dir()


class ConfigError(ValueError):
    """A bad flag value; the message names the flag, the value and what is allowed."""


class Cfg:
    """Resolved configuration: attribute access, plus dict round trips for saving."""

    def __init__(self, values: dict[str, Any]):
        self.__dict__.update(values)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __getitem__(self, key: str) -> Any:  # lets dict-style code read it too
        return self.__dict__[key]

    def __contains__(self, key: str) -> bool:
        return key in self.__dict__

    def __repr__(self) -> str:
        return f"Cfg({self.__dict__})"


def str2bool(v: str) -> bool:
    if isinstance(v, bool):
        return v
    low = v.lower()
    if low in ("true", "1", "yes", "y", "t"):
        return True
    if low in ("false", "0", "no", "n", "f"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (True/False), got {v!r}")


def unknown_flag_message(name: str, known: Iterable[str], source: str) -> str:
    """'unknown flag --NAME in SOURCE', with the closest known names when some are close."""
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.75)
    hint = f"; did you mean {', '.join('--' + c for c in close)}?" if close else ""
    return f"unknown flag --{name} in {source}{hint} (rl-pbt-train --help lists them all)"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # raise instead of exiting, so library callers can catch it
        raise ConfigError(message)


def _add_flag(parser: argparse.ArgumentParser, flag: Flag) -> None:
    kwargs: dict[str, Any] = dict(
        default=argparse.SUPPRESS, help=f"{flag.help} (default: {flag.default})"
    )
    if flag.type is bool:
        kwargs.update(type=str2bool, nargs="?", const=True)
    elif flag.type is list:
        kwargs.update(type=int, nargs="+")
    else:
        kwargs.update(type=flag.type)
    if flag.choices is not None:
        kwargs["choices"] = flag.choices
    parser.add_argument(f"--{flag.name}", **kwargs)


def build_parser(flags: Iterable[Flag]) -> argparse.ArgumentParser:
    parser = _Parser(prog="rl-pbt-train", description="APPO + Population Based Training")
    for flag in flags:
        _add_flag(parser, flag)
    return parser


# file flags: a relative path in a preset is relative to the preset file
PRESET_FILE_FLAGS = ("pbt_search_space", "policy_values")


def load_preset(name_or_path: str) -> dict[str, Any]:
    path = Path(name_or_path)
    candidates = [path, CONFIGS_DIR / name_or_path, CONFIGS_DIR / f"{name_or_path}.json"]
    for candidate in candidates:
        if candidate.is_file():
            with open(candidate) as f:
                preset = json.load(f)
            for key in PRESET_FILE_FLAGS:
                value = preset.get(key)
                if isinstance(value, str) and value and not os.path.isabs(value):
                    preset[key] = str(candidate.resolve().parent / value)
            return preset
    known = sorted(p.stem for p in CONFIGS_DIR.glob("*.json")) if CONFIGS_DIR.is_dir() else []
    raise ConfigError(f"--preset={name_or_path}: no such file; known presets: {', '.join(known)}")


def _coerce(flag: Flag, value: Any) -> Any:
    if value is None:
        return None
    try:
        if flag.type is bool:
            return str2bool(value) if isinstance(value, str) else bool(value)
        if flag.type is list:
            return [int(x) for x in value]
        if flag.type is int and isinstance(value, float) and not value.is_integer():
            raise ValueError
        return flag.type(value)
    except (TypeError, ValueError, argparse.ArgumentTypeError) as e:
        raise ConfigError(f"--{flag.name}={value!r}: expected {flag.type.__name__}") from e


def parse_cfg(
    argv: Optional[list[str]] = None, evaluation: bool = False, extra_flags: Iterable[Flag] = ()
) -> Cfg:
    """Parse command-line style arguments into a validated Cfg.

    `evaluation` skips training-only checks (used by enjoy/match scripts).
    """
    from rl_pbt.envs.registry import env_default_overrides, env_extra_flags  # avoid cycle

    argv = list(argv) if argv is not None else None
    extra_flags = list(extra_flags)
    # Pass 1: find the env, to learn its own flags and defaults.
    first = build_parser(FLAGS + extra_flags)
    first_ns, _ = first.parse_known_args(argv)
    preset_name = getattr(first_ns, "preset", None)
    preset = load_preset(preset_name) if preset_name else {}
    # the env may come from the preset: its flags and defaults apply all the same
    env_name = getattr(first_ns, "env", None) or preset.get("env")
    flags = FLAGS + extra_flags + (env_extra_flags(env_name) if env_name else [])
    by_name = {f.name: f for f in flags}

    parser = build_parser(flags)
    ns, unknown = parser.parse_known_args(argv)
    if unknown:
        name = unknown[0].lstrip("-").split("=", 1)[0]
        if unknown[0].startswith("--") and name:
            raise ConfigError(unknown_flag_message(name, by_name, "the command line"))
        raise ConfigError(f"unrecognized arguments: {' '.join(unknown)}")
    cli = vars(ns)

    values: dict[str, Any] = {f.name: f.default for f in flags}
    layers: list[tuple[str, dict[str, Any]]] = []
    if env_name:
        layers.append(("env defaults", env_default_overrides(env_name)))
    if preset_name:
        layers.append((f"preset {preset_name}", preset))
    layers.append(("command line", cli))
    for source, layer in layers:
        for key, value in layer.items():
            if key not in by_name:
                raise ConfigError(unknown_flag_message(key, by_name, source))
            values[key] = _coerce(by_name[key], value)

    cfg = Cfg(values)
    validate(cfg, flags, evaluation=evaluation)
    return cfg


# what PBT and --policy_values may set per policy: values a learner changes while it runs,
# and reward-shaping leaves
TUNABLE_TEXT = f"{', '.join(TUNED_HPARAMS)} and reward-shaping leaves as {SHAPING_PREFIX}.<key>"


def is_tunable(name: str) -> bool:
    return name in TUNED_HPARAMS or is_shaping_key(name)


def check_search_space_file(path: str) -> None:
    """--pbt_search_space: the file parses, and every learning value it tunes is one a learner
    can change while it runs (reward-shaping leaves, `rew.*`, are checked against the env)."""
    if not os.path.isfile(path):
        raise ConfigError(f"--pbt_search_space={path!r}: no such file")
    try:
        specs = load_search_space_file(path)
    except (ValueError, OSError) as e:  # json.JSONDecodeError is a ValueError
        raise ConfigError(f"--pbt_search_space={path!r}: {e}") from e
    for name, spec in specs.items():
        if spec.tuned and not is_tunable(name):
            raise ConfigError(
                f"--pbt_search_space={path!r}: entry {name!r} cannot be tuned while a learner "
                f"runs; PBT can tune {TUNABLE_TEXT}"
            )
        flag = FLAGS_BY_NAME.get(name)
        if spec.tuned and flag is not None:
            problem = search_space_problem(spec, flag)
            if problem:
                raise ConfigError(f"--pbt_search_space={path!r}: entry {name!r} {problem}")


def _reach(spec: ParamSpec) -> list[tuple[Any, str]]:
    """The extreme values a search-space entry lets PBT give its parameter (every choice of a
    categorical), each with how to name it. An open side is reached by multiplicative moves,
    which keep a value's sign: from a valid learning value (>= 0), down to just above 0 and
    up without limit. Bounds are taken as explore applies them (a discount-like value stays
    inside (0, 1), an int's bounds round inwards)."""
    if spec.kind == "categorical":
        return [(v, f"allows {v!r}") for v in spec.values]
    low, high = spec.effective_bounds()
    open_low = spec.low is None and not spec.discount_like
    open_high = spec.high is None and not spec.discount_like
    return [
        (math.ulp(0.0), "has no lower bound") if open_low else (low, f"allows {low!r}"),
        (sys.float_info.max, "has no upper bound") if open_high else (high, f"allows {high!r}"),
    ]


def search_space_problem(spec: ParamSpec, flag: Flag) -> Optional[str]:
    """Why the entry `spec` lets PBT give flag's learning value one that the flag itself
    rejects ('allows -0.1, but --learning_rate must be > 0'), or None."""
    for value, how in _reach(spec):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{how}, but --{flag.name} is a number"
        if not math.isfinite(value):
            return f"{how}, but --{flag.name} must be finite"
        problem = flag.check(value) if flag.check is not None else None
        if problem:
            return f"{how}, but --{flag.name} {problem}"
    return None


def validate(cfg: Cfg, flags: Iterable[Flag] = FLAGS, evaluation: bool = False) -> None:
    from rl_pbt.envs.registry import is_known_env, known_envs_message

    for flag in flags:
        value = getattr(cfg, flag.name)
        if value is None:
            continue
        if flag.type is float and not math.isfinite(value):
            raise ConfigError(f"--{flag.name}={value!r}: must be finite")
        if flag.choices is not None and value not in flag.choices:
            raise ConfigError(f"--{flag.name}={value!r}: allowed values are {list(flag.choices)}")
        if flag.check is not None:
            problem = flag.check(value)
            if problem:
                raise ConfigError(f"--{flag.name}={value!r}: {problem}")

    if cfg.env is None:
        raise ConfigError("--env is required: " + known_envs_message())
    if not is_known_env(cfg.env):
        raise ConfigError(f"--env={cfg.env!r}: unknown env; " + known_envs_message(cfg.env))
    if evaluation:
        return
    if cfg.num_envs_per_worker % cfg.worker_num_splits != 0:
        raise ConfigError(
            f"--num_envs_per_worker={cfg.num_envs_per_worker} must be a multiple of "
            f"--worker_num_splits={cfg.worker_num_splits}"
        )
    if cfg.batch_size % cfg.rollout != 0:
        raise ConfigError(
            f"--batch_size={cfg.batch_size} must be a multiple of "
            f"--rollout={cfg.rollout} (minibatches hold whole trajectories)"
        )
    if cfg.use_rnn:
        rec = recurrence(cfg)
        if cfg.rollout % rec != 0:
            raise ConfigError(f"--recurrence={cfg.recurrence} must divide --rollout={cfg.rollout}")
    if cfg.pbt_perturb_max < cfg.pbt_perturb_min:
        raise ConfigError(
            f"--pbt_perturb_max={cfg.pbt_perturb_max} must be >= "
            f"--pbt_perturb_min={cfg.pbt_perturb_min}"
        )
    vs_snapshots = cfg.pbt_target_objective == "vs_snapshots"
    if cfg.with_pbt and vs_snapshots and cfg.selfplay_snapshot_prob <= 0:
        raise ConfigError(
            "--pbt_target_objective=vs_snapshots ranks on games against frozen snapshots: "
            f"it needs --selfplay_snapshot_prob > 0 (got {cfg.selfplay_snapshot_prob})"
        )
    if cfg.with_pbt and cfg.num_policies < 2:
        raise ConfigError(
            f"--with_pbt needs a population: --num_policies={cfg.num_policies} must be >= 2"
        )
    if cfg.pbt_replay_lineage:
        if not os.path.isfile(cfg.pbt_replay_lineage):
            raise ConfigError(f"--pbt_replay_lineage={cfg.pbt_replay_lineage!r}: no such file")
        if cfg.with_pbt or cfg.num_policies != 1:
            raise ConfigError(
                "--pbt_replay_lineage trains one policy: use --num_policies=1 without --with_pbt"
            )
    if cfg.pbt_search_space:
        check_search_space_file(cfg.pbt_search_space)
    if cfg.policy_values:
        from rl_pbt.config.policy_values import load_policy_values  # imports this module

        load_policy_values(cfg.policy_values, cfg.num_policies)
        if cfg.pbt_replay_lineage:
            raise ConfigError(
                "--policy_values and --pbt_replay_lineage both set the starting values: use one"
            )


def recurrence(cfg: Cfg) -> int:
    if not cfg.use_rnn:
        return 1
    return cfg.rollout if cfg.recurrence == -1 else cfg.recurrence


def experiment_dir(cfg: Cfg) -> str:
    return os.path.join(cfg.train_dir, cfg.experiment)


def save_cfg(cfg: Cfg, path: str) -> None:
    from rl_pbt.logging.files import atomic_write_json

    atomic_write_json(path, cfg.to_dict())


def load_cfg(path: str) -> Cfg:
    with open(path) as f:
        return Cfg(json.load(f))
