"""Builds the parser and the grouped `--help` from `flags.FLAGS`, applies presets, validates,
saves and loads configs.

Precedence, lowest first: flag defaults < env defaults (from `register_env`) < preset file <
command line. Flags are never abbreviated. Errors are ConfigError, one line naming the flag,
the value and what is allowed; nothing here writes to disk.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import json
import math
import os
import re
import shlex
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterable, Optional

from rl_pbt.config.flags import (
    FLAGS,
    FLAGS_BY_NAME,
    FOREIGN_BY_NAME,
    FOREIGN_CHOICES,
    FOREIGN_FLAGS,
    HELP_ALIASES,
    HELP_GROUPS,
    TUNED_HPARAMS,
    Flag,
    ForeignFlag,
    path_text,
)
from rl_pbt.extras import install_hint
from rl_pbt.logging.files import load_user_json, read_run_config
from rl_pbt.pbt.search_space import (
    KINDS,
    SHAPING_PREFIX,
    ParamSpec,
    is_shaping_key,
    spec_from_dict,
)

PROG = "rl-pbt-train"


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


_TRUE = ("true", "1", "yes", "y", "t")
_FALSE = ("false", "0", "no", "n", "f")


def str2bool(v: str) -> bool:
    if isinstance(v, bool):
        return v
    low = v.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (True/False), got {v!r}")


def close_names(name: str, known: Iterable[str]) -> list[str]:
    """Up to three known names close to `name`, or that `name` abbreviates."""
    known = list(known)
    longer = sorted(k for k in known if name and k.startswith(name) and k != name)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.75)
    return list(dict.fromkeys(close + longer))[:3]


def did_you_mean(name: str, known: Iterable[str], prefix: str = "--") -> str:
    """' (did you mean --a, --b?)' naming close or longer names, or ''."""
    picks = close_names(name, known)
    return f" (did you mean {', '.join(prefix + p for p in picks)}?)" if picks else ""


def unknown_flag_message(
    name: str,
    known: Iterable[str],
    source: str,
    env_name: Optional[str] = None,
    shown: Optional[str] = None,
) -> str:
    """'unknown flag --NAME in SOURCE', with the closest known names when some are close; a
    flag of other registered envs says whose it is (named `shown` where given)."""
    from rl_pbt.envs.registry import envs_with_flag  # avoid cycle

    owners = envs_with_flag(name)
    if owners:
        whose = ", ".join(owners[:3]) + (f" and {len(owners) - 3} more" if len(owners) > 3 else "")
        here = f"--env={env_name}" if env_name else "a run without --env"
        envs = "env" if len(owners) == 1 else "envs"
        return (
            f"{shown or '--' + name} in {source} is a flag of the {envs} {whose}, not of {here} "
            f"({PROG} --help --env=NAME lists an env's own flags)"
        )
    picks = close_names(name, known)
    hint = f"; did you mean {', '.join('--' + p for p in picks)}?" if picks else ""
    if any(p.startswith(name) for p in picks):
        hint += " Flags are never abbreviated."
    return f"unknown flag --{name} in {source}{hint} ({PROG} --help lists them all)"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # raise instead of exiting, so library callers can catch it
        if message.startswith("argument "):  # "argument --x: expected one argument"
            message = message[len("argument ") :]
        flag, _, what = message.partition(": ")
        if what == "expected one argument":
            message = f"{flag}: needs a value ({flag}=VALUE)"
        raise ConfigError(message)


_FOREIGN_DEST = "sample_factory:"  # namespace prefix of the Sample Factory names


def _metavar(flag: Flag) -> str:
    if flag.choices is not None:
        return "{" + ",".join(str(c) for c in flag.choices) + "}"
    if flag.type is list:
        return "INT,..." if flag.item_type is int else "STR,..."
    return {bool: "[BOOL]", int: "INT", float: "FLOAT"}.get(flag.type, "STR")


def _add_flag(parser: argparse.ArgumentParser, flag: Flag) -> None:
    # every value arrives as text and is converted by _coerce, as preset values are: one path,
    # one set of messages
    kwargs: dict[str, Any] = dict(default=argparse.SUPPRESS, type=str, metavar=_metavar(flag))
    if flag.type is bool:
        kwargs.update(nargs="?", const="True")
    elif flag.type is list:
        kwargs.update(nargs="*")
    parser.add_argument(f"--{flag.name}", **kwargs)


def build_parser(flags: Iterable[Flag]) -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, add_help=False, allow_abbrev=False)
    for flag in flags:
        _add_flag(parser, flag)
    own = {flag.name for flag in flags}
    for foreign in FOREIGN_FLAGS:
        if foreign.name in own:  # an env's own flag of that name: it is the env's
            continue
        parser.add_argument(
            f"--{foreign.name}",
            dest=_FOREIGN_DEST + foreign.name,
            default=argparse.SUPPRESS,
            nargs="?",
            const="True",
        )
    return parser


# --- presets -------------------------------------------------------------------------------

# file flags: a relative path in a preset is relative to the preset file
PRESET_FILE_FLAGS = ("pbt_search_space", "policy_values")


def file_kind(data: Any) -> str:
    """What a JSON document in configs/ is: 'preset' (flag -> value), 'search_space'
    (name -> entry object), 'policy_values' (a list, one object per policy) or 'other'."""
    if isinstance(data, list):
        return "policy_values"
    if not isinstance(data, dict):
        return "other"
    entries = [v for k, v in data.items() if not k.startswith("_")]
    objects = [v for v in entries if isinstance(v, dict)]
    if not objects:
        return "preset"
    return "search_space" if len(objects) == len(entries) else "other"


def _read_json(path: Path) -> Any:
    with open(path) as f:
        return load_user_json(f)


def shipped_files(kind: str) -> list[str]:
    """Names of the JSON files of `kind` (see `file_kind`) in configs/."""
    names = []
    for path in sorted(CONFIGS_DIR.glob("*.json")) if CONFIGS_DIR.is_dir() else []:
        try:
            if file_kind(_read_json(path)) == kind:
                names.append(path.name)
        except (OSError, ValueError):
            continue
    return names


def shipped_path(value: str) -> str:
    """A file flag's value: as given when that file exists (or the value is absolute), else
    the file of that name shipped in configs/ when there is one (as a preset names it)."""
    if not value or os.path.isabs(value) or os.path.exists(value):
        return value
    for candidate in (CONFIGS_DIR / value, CONFIGS_DIR / f"{value}.json"):
        if candidate.is_file():
            return str(candidate)
    return value


def list_presets() -> list[str]:
    """Names of the presets in configs/ (the other JSON files there are search spaces and
    per-policy values, named by --pbt_search_space and --policy_values)."""
    names = []
    for path in sorted(CONFIGS_DIR.glob("*.json")) if CONFIGS_DIR.is_dir() else []:
        try:
            kind = file_kind(_read_json(path))
        except (OSError, ValueError):
            continue
        if kind == "preset":
            names.append(path.stem)
    return names


_NOT_A_PRESET = {
    "search_space": ("a --pbt_search_space file", "pbt_search_space"),
    "policy_values": ("a --policy_values file (one object per policy)", "policy_values"),
}


def load_preset(name_or_path: str) -> dict[str, Any]:
    """The preset's flag values ('_'-prefixed keys dropped, file flags made absolute)."""
    where = f"--preset={name_or_path}"
    path = Path(name_or_path).expanduser()
    candidates = [path, CONFIGS_DIR / name_or_path, CONFIGS_DIR / f"{name_or_path}.json"]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        known = list_presets()
        raise ConfigError(
            f"{where}: no such preset or file{did_you_mean(name_or_path, known, prefix='')}; "
            f"presets: {', '.join(known) if known else '(none)'}"
        )
    try:
        data = _read_json(found)
    except ValueError as e:
        raise ConfigError(f"{where}: {found} is not valid JSON ({e})") from None
    except OSError as e:
        raise ConfigError(f"{where}: cannot read {found} ({e.strerror})") from None
    kind = file_kind(data)
    if kind in _NOT_A_PRESET:
        what, flag = _NOT_A_PRESET[kind]
        raise ConfigError(f"{where}: {found} is {what}, not a preset; use --{flag}={found}")
    if kind != "preset":
        nested = (
            [k for k, v in data.items() if isinstance(v, dict)] if isinstance(data, dict) else []
        )
        detail = f"key {nested[0]!r} holds an object" if nested else "not a JSON object"
        raise ConfigError(f"{where}: {found}: {detail}; a preset maps flag names to values")
    preset = {k: v for k, v in data.items() if not k.startswith("_")}  # "_comment"
    if "preset" in preset:
        raise ConfigError(
            f"{where}: {found} names a preset of its own ({preset['preset']!r}): presets do "
            "not nest; copy that preset's values into this file"
        )
    for key in PRESET_FILE_FLAGS:
        value = preset.get(key)
        if isinstance(value, str) and value.startswith("~"):
            preset[key] = value = os.path.expanduser(value)
        if isinstance(value, str) and value and not os.path.isabs(value):
            preset[key] = str(found.resolve().parent / value)
    return preset


# --- values --------------------------------------------------------------------------------

_EXPECTED = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _expected(flag: Flag) -> str:
    if flag.type is list:
        item = "integers" if flag.item_type is int else "strings"
        return f"a list of {item} (a,b or a b)"
    return _EXPECTED.get(flag.type, flag.type.__name__)


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            value = float(value)  # "1e6" is a fine way to write a step count
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ValueError


def _to_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError
    return float(value)


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        return str2bool(value)
    raise ValueError


def _to_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError
    return value


def _to_list(value: Any, item_type: type) -> list:
    items = value if isinstance(value, list) else [value]
    out: list = []
    for item in items:
        parts = item.split(",") if isinstance(item, str) else [item]
        for part in parts:
            if isinstance(part, str):
                part = part.strip()
                if not part:
                    continue
            out.append(_to_int(part) if item_type is int else _to_str(part))
    return out


_CONVERT = {int: _to_int, float: _to_float, bool: _to_bool, str: _to_str}


def _coerce(flag: Flag, value: Any, source: str = "the command line") -> Any:
    """The value in the flag's type; a ConfigError naming flag, value, source and type."""
    where = "" if source == "the command line" else f" (in {source})"
    if value is None:
        if flag.default is None:
            return None
        raise ConfigError(f"--{flag.name}=None{where}: expected {_expected(flag)}")
    try:
        if flag.type is list:
            return _to_list(value, flag.item_type)
        converted = _CONVERT[flag.type](value)
        if flag.check is path_text and converted.startswith("~"):
            return os.path.expanduser(converted)  # --train_dir=~/runs: the shell leaves the ~
        return converted
    except (TypeError, ValueError, OverflowError, argparse.ArgumentTypeError):
        if flag.type is list and isinstance(value, list) and source == "the command line":
            value = ",".join(value)  # as typed, not as argparse split it
        raise ConfigError(f"--{flag.name}={value!r}{where}: expected {_expected(flag)}") from None


def _normalised(value: Any) -> str:
    text = str(value).strip().lower()
    if text in _TRUE:
        return "true"
    return "false" if text in _FALSE else text


def _foreign(foreign: ForeignFlag, value: Any, source: str, notes: list[str]) -> Optional[str]:
    """Handle a Sample Factory name: the flag that takes its value here, or None (a note)."""
    where = "" if source == "the command line" else f" (in {source})"
    if foreign.refused:
        raise ConfigError(
            f"--{foreign.name}{where}: a Sample Factory flag for something this trainer does "
            f"not have: {foreign.meaning}; take it out"
        )
    if foreign.renamed_to:
        notes.append(f"--{foreign.name}{where} is Sample Factory's --{foreign.renamed_to}")
        return foreign.renamed_to
    allowed = [_normalised(a) for a in foreign.allowed or ()]
    if foreign.allowed is not None and _normalised(value) not in allowed:
        raise ConfigError(
            f"--{foreign.name}={value!r}{where}: a Sample Factory flag; here "
            f"{foreign.meaning}, so it accepts only {' or '.join(foreign.allowed)}"
        )
    notes.append(f"--{foreign.name}={value}{where} is a Sample Factory flag: {foreign.meaning}")
    return None


def parse_cfg(
    argv: Optional[list[str]] = None, evaluation: bool = False, extra_flags: Iterable[Flag] = ()
) -> Cfg:
    """Parse command-line style arguments into a validated Cfg.

    `--help[=TOPIC]` prints the grouped help and raises SystemExit(0). `evaluation` skips
    training-only checks (used by enjoy/match scripts).
    """
    from rl_pbt.envs.registry import env_default_overrides, env_extra_flags  # avoid cycle

    if isinstance(argv, str):  # "--env=X --seed=1", as typed on a command line
        argv = shlex.split(argv)
    argv = sys.argv[1:] if argv is None else list(argv)
    extra_flags = list(extra_flags)
    topic = help_request(argv)
    if topic is not None:
        print(help_text(topic, argv, extra_flags))
        raise SystemExit(0)
    # Pass 1: find the env, to learn its own flags and defaults.
    first_ns, _ = build_parser(FLAGS + extra_flags).parse_known_args(argv)
    preset_name = getattr(first_ns, "preset", None)
    preset = load_preset(preset_name) if preset_name else {}
    # the env may come from the preset: its flags and defaults apply all the same
    env_name = getattr(first_ns, "env", None) or preset.get("env")
    env_name = env_name if isinstance(env_name, str) else None
    flags = FLAGS + extra_flags + (env_extra_flags(env_name) if env_name else [])
    by_name = {f.name: f for f in flags}

    ns, unknown = build_parser(flags).parse_known_args(argv)
    if unknown:
        name = unknown[0].lstrip("-").split("=", 1)[0]
        if unknown[0].startswith("--") and name:
            raise ConfigError(unknown_flag_message(name, by_name, "the command line", env_name))
        raise ConfigError(f"unrecognized arguments: {' '.join(unknown)}")
    cli = {k.replace(_FOREIGN_DEST, "", 1): v for k, v in vars(ns).items()}

    values: dict[str, Any] = {f.name: copy.deepcopy(f.default) for f in flags}
    layers: list[tuple[str, dict[str, Any]]] = []
    if env_name:
        layers.append((f"the defaults of --env={env_name}", env_default_overrides(env_name)))
    if preset_name:
        layers.append((f"preset {preset_name}", preset))
    layers.append(("the command line", cli))
    notes: list[str] = []
    set_here: set[str] = set()  # flags the preset or the command line set
    source_of: dict[str, str] = {}
    for source, layer in layers:
        for key, value in layer.items():
            if key not in by_name and key in FOREIGN_BY_NAME:
                typed, key = key, _foreign(FOREIGN_BY_NAME[key], value, source, notes)
                if key is None:
                    continue
                if key not in by_name:  # renamed to a flag of other envs: named as typed
                    shown = f"--{typed} (Sample Factory's --{key})"
                    raise ConfigError(unknown_flag_message(key, by_name, source, env_name, shown))
            if key not in by_name:
                raise ConfigError(unknown_flag_message(key, by_name, source, env_name))
            values[key] = _coerce(by_name[key], value, source)
            source_of[key] = source
            if not source.startswith("the defaults"):
                set_here.add(key)
    notes += idle_flag_notes(values, set_here, env_name)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)

    for key in PRESET_FILE_FLAGS:  # shaping_only.json: the one in configs/, as in a preset
        if isinstance(values.get(key), str):
            values[key] = shipped_path(values[key])
    cfg = Cfg(values)
    try:
        validate(cfg, flags, evaluation=evaluation)
    except ConfigError as e:
        raise ConfigError(_with_source(str(e), source_of)) from None
    return cfg


def _with_source(message: str, source_of: dict[str, str]) -> str:
    """A check's message on one flag ('--name=value: why'), with where the value came from
    when that was not the command line ('--name=value (in preset p): why')."""
    # the first '--name=value' (a quoted value may hold spaces); '--a=x with --b=y: why'
    # names --a first, and the label goes right after it
    m = re.match(r"--(\w+)=('[^']*'|\"[^\"]*\"|\S+?)(?=: |\s|$)", message)
    source = source_of.get(m.group(1), "the command line") if m else "the command line"
    if m is None or source == "the command line" or message[m.end() :].startswith(" (in "):
        return message
    return f"{message[: m.end()]} (in {source}){message[m.end() :]}"


# flags only the PBT manager reads (--pbt_target_objective and --pbt_mix_policies_in_one_env
# also shape games and logs without PBT)
PBT_ONLY_FLAGS = frozenset(
    (
        "pbt_period_env_steps pbt_start_mutation pbt_replace_fraction pbt_mutation_rate "
        "pbt_replace_reward_gap pbt_replace_reward_gap_absolute pbt_exploit "
        "pbt_resample_probability pbt_search_space pbt_objective_window pbt_ttest_min_episodes "
        "pbt_ttest_alpha pbt_mutate_reference_policy pbt_init_random pbt_optimize_gamma "
        "pbt_perturb_min pbt_perturb_max"
    ).split()
)


# flags read only when another flag is set (beyond W&B's and PBT's)
_NEEDS = {
    "use_rnn": ("rnn_size",),
    "with_vtrace": ("vtrace_rho", "vtrace_c"),
    "pbt_replay_lineage": ("pbt_replay_policy",),
    "ray_address": (
        "policies_per_node ray_cpus_per_group ray_gpus_per_group ray_group_timeout_s".split()
    ),
}


def idle_flag_notes(values: dict[str, Any], set_here: Iterable[str], env_name: str) -> list[str]:
    """Notes on flags given (on the command line or in a preset) that change nothing with the
    other values: W&B flags without --with_wandb, the PBT manager's flags without --with_pbt
    (or a replay), the flags of _NEEDS without theirs, --mirror_symmetry for an env without a
    mirror."""
    from rl_pbt.envs.registry import env_symmetry  # avoid cycle

    given = sorted(set(set_here))
    notes = []
    idle = [k for k in given if k.startswith("wandb_")] if not values.get("with_wandb") else []
    if idle:
        notes.append(f"{_listed(idle)}: no effect without --with_wandb")
    if not values.get("with_pbt") and not values.get("pbt_replay_lineage"):
        idle = [k for k in given if k in PBT_ONLY_FLAGS]
        if idle:
            notes.append(f"{_listed(idle)}: no effect without --with_pbt")
    for enabler, flags in _NEEDS.items():
        idle = [k for k in given if k in flags] if not values.get(enabler) else []
        if idle:
            notes.append(f"{_listed(idle)}: no effect without --{enabler}")
    if "mirror_symmetry" in given and values.get("mirror_symmetry") and env_name:
        if env_symmetry(env_name) is None:
            notes.append(f"--mirror_symmetry: no effect, env {env_name} has no mirror")
    return notes


def _listed(names: list[str]) -> str:
    return ", ".join(f"--{n}" for n in names)


# --- help ----------------------------------------------------------------------------------

HELP_WIDTH = 100
_HELP_INDENT = 32


def help_request(argv: list[str]) -> Optional[str]:
    """The help topic asked for ('all' for a plain --help), or None."""
    for i, token in enumerate(argv):
        if token in ("-h", "--help"):
            following = argv[i + 1] if i + 1 < len(argv) else ""
            return following.lower() if following and not following.startswith("-") else "all"
        if token.startswith("--help="):
            return token.split("=", 1)[1].strip().lower() or "all"
    return None


def _given(argv: list[str], name: str) -> Optional[str]:
    """The last value of --NAME in argv (either form), read without parsing the rest."""
    found = None
    for i, token in enumerate(argv):
        if token.startswith(f"--{name}="):
            found = token.split("=", 1)[1]
        elif token == f"--{name}" and i + 1 < len(argv):
            found = argv[i + 1]
    return found


def _shown(value: Any) -> str:
    if value == "":
        return '""'
    if isinstance(value, list):
        return ",".join(str(v) for v in value) if value else "(empty)"
    return str(value)


def _flag_lines(flag: Flag) -> list[str]:
    head = f"  --{flag.name} {_metavar(flag)}"
    text = f"{flag.help} (default: {_shown(flag.default)})"
    body = textwrap.wrap(text, HELP_WIDTH - _HELP_INDENT) or [""]
    pad = " " * _HELP_INDENT
    if len(head) < _HELP_INDENT - 1:
        return [head.ljust(_HELP_INDENT) + body[0]] + [pad + line for line in body[1:]]
    return [head] + [pad + line for line in body]


def _section(title: str, key: str, flags: list[Flag], extra: Iterable[str] = ()) -> list[str]:
    lines = [f"{title} (--help={key}):"]
    for flag in flags:
        lines += _flag_lines(flag)
    for text in extra:
        lines += textwrap.wrap(text, HELP_WIDTH, initial_indent="  ", subsequent_indent="  ")
    return lines + [""]


def _env_section(env_name: Optional[str], flags: list[Flag]) -> list[str]:
    from rl_pbt.envs.registry import env_default_overrides, env_extra_flags, registered_envs

    if not env_name:
        with_flags = [n for n in registered_envs() if env_extra_flags(n)]
        text = f"shown with --env=NAME: {PROG} --help=env --env=NAME" + (
            f" (envs with flags of their own: {', '.join(with_flags)})" if with_flags else ""
        )
        return _section(HELP_GROUPS["env"], "env", flags, [text])
    overrides = env_default_overrides(env_name)
    extra = []
    if overrides:
        changed = ", ".join(f"{k}={_shown(v)}" for k, v in sorted(overrides.items()))
        extra.append(f"--env={env_name} changes these defaults: {changed}")
    own = env_extra_flags(env_name) + flags
    if not own:
        extra.insert(0, f"--env={env_name} has no flags of its own")
    return _section(f"flags of --env={env_name}", "env", own, extra)


def _foreign_section() -> list[str]:
    lines = [
        "Sample Factory flags with no flag of their own here (--help=sample_factory): accepted "
        "with a note so that ported commands run"
    ]
    lines = textwrap.wrap(lines[0], HELP_WIDTH)
    for f in FOREIGN_FLAGS:
        if f.refused:
            continue
        accepts = f"={'|'.join(f.allowed)}" if f.allowed else ""
        meaning = f"use --{f.renamed_to}" if f.renamed_to else f.meaning
        head = f"  --{f.name}{accepts}"
        body = textwrap.wrap(meaning, HELP_WIDTH - _HELP_INDENT)
        pad = " " * _HELP_INDENT
        if len(head) < _HELP_INDENT - 1:
            lines += [head.ljust(_HELP_INDENT) + body[0]] + [pad + b for b in body[1:]]
        else:
            lines += [head] + [pad + b for b in body]
    refused = " ".join(f"--{f.name}" for f in FOREIGN_FLAGS if f.refused)
    lines += textwrap.wrap(
        f"Refused, naming what to use instead (for what this trainer lacks): {refused}",
        HELP_WIDTH,
    )
    lines += textwrap.wrap(f"Defaults unlike Sample Factory's: {SF_DEFAULTS_TEXT}", HELP_WIDTH)
    return lines + [""]


# the flags of the same name whose defaults differ from Sample Factory 2's (a ported command
# that leaves them out trains otherwise)
SF_DEFAULTS_TEXT = (
    "--use_rnn=False (Sample Factory: True), --num_envs_per_worker=8 (2), --num_workers=2 (the "
    "number of cores), --value_bootstrap=True (False), --ppo_clip_ratio clips to [1-c, 1+c] "
    "([1/(1+c), 1+c]); the doom_* envs keep these flags' defaults (Sample Factory's Doom "
    "examples set --ppo_clip_value=0.2 and --exploration_loss_coeff=0.001)"
)


def help_topics() -> list[str]:
    return ["all", *HELP_GROUPS, "sample_factory"]


def help_text(topic: str, argv: list[str] = (), extra_flags: Iterable[Flag] = ()) -> str:
    """The help for one topic (a HELP_GROUPS key, 'sample_factory' or 'all'); env flags
    appear when argv names an env (--env, or a preset's env)."""
    from rl_pbt.envs.registry import is_known_env, unknown_env_message

    topic = HELP_ALIASES.get(topic, topic)
    if topic not in help_topics():
        raise ConfigError(f"--help={topic}: unknown topic; topics: {', '.join(help_topics())}")
    argv = list(argv)
    env_name = _given(argv, "env")
    preset_name = _given(argv, "preset")
    if not env_name and preset_name:
        env_name = load_preset(preset_name).get("env")
        if not isinstance(env_name, str):  # not a name: the help of no env (a run says why)
            env_name = None
    if env_name and not is_known_env(env_name):
        raise ConfigError(unknown_env_message(env_name))
    flags = FLAGS + list(extra_flags)
    lines: list[str] = []
    if topic == "all":
        lines += [
            f"usage: {PROG} --env=NAME [--flag=value ...]",
            f"       {PROG} --help[=TOPIC] [--env=NAME]",
            f"topics: {', '.join(help_topics())}",
            "",
            "APPO with Population Based Training and self-play on one machine.",
            *textwrap.wrap(
                "Bool flags take --flag or --flag=True/False; list flags take a,b or a b; flags "
                "are never abbreviated. Precedence: defaults < env defaults < --preset < "
                f"command line. Presets: {', '.join(list_presets()) or '(none)'}.",
                HELP_WIDTH,
            ),
            "",
        ]
    for key, title in HELP_GROUPS.items():
        if topic not in ("all", key):
            continue
        members = [f for f in flags if f.group == key]
        lines += _env_section(env_name, members) if key == "env" else _section(title, key, members)
    others = [f for f in flags if f.group not in HELP_GROUPS]
    if topic == "all" and others:
        lines += _section("other", "all", others)
    if topic in ("all", "sample_factory"):
        lines += _foreign_section()
    return "\n".join(lines).rstrip() + "\n"


# --- validation ----------------------------------------------------------------------------

# what PBT and --policy_values may set per policy: values a learner changes while it runs,
# and reward-shaping leaves
TUNABLE_TEXT = f"{', '.join(TUNED_HPARAMS)} and reward-shaping leaves as {SHAPING_PREFIX}.<key>"


def is_tunable(name: str) -> bool:
    return name in TUNED_HPARAMS or is_shaping_key(name)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _entry_problem(entry: Any) -> Optional[str]:
    """What in one search-space entry is of the wrong type (the rest is ParamSpec's job)."""
    if not isinstance(entry, dict):
        return f'expected an object such as {{"type": "log_float", "low": 1e-5}}, got {entry!r}'
    for side in ("low", "high"):
        if entry.get(side) is not None and not _is_number(entry[side]):
            return f"{side}={entry[side]!r} is not a number"
    kind = entry.get("type", "float")
    if kind not in KINDS:
        return f"type {kind!r} is not one of {list(KINDS)}"
    if "values" in entry and not isinstance(entry["values"], list):
        return f"values={entry['values']!r} is not a list"
    for key in ("discount_like", "keep_sign", "tune"):
        if key in entry and not isinstance(entry[key], bool):
            return f"{key}={entry[key]!r} must be true or false"
    return None


def check_search_space_file(path: str) -> None:
    """--pbt_search_space: the file parses, and every learning value it tunes is one a learner
    can change while it runs (reward-shaping leaves, `rew.*`, are checked against the env)."""
    where = f"--pbt_search_space={path!r}"
    if not os.path.isfile(path):
        shipped = shipped_files("search_space")
        also = f"; shipped in configs/: {', '.join(shipped)}" if shipped else ""
        raise ConfigError(f"{where}: no such file{also}")
    try:
        data = _read_json(Path(path))
    except ValueError as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ConfigError(f"{where}: not valid JSON ({e})") from None
    except OSError as e:
        raise ConfigError(f"{where}: cannot read it ({e.strerror})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a search space is a JSON object of name -> entry")
    for name, entry in data.items():
        if name.startswith("_"):  # "_comment"
            continue
        problem = _entry_problem(entry)
        if problem:
            raise ConfigError(f"{where}: entry {name!r}: {problem}")
        try:
            spec = spec_from_dict(name, entry)
        except (ValueError, TypeError, OverflowError) as e:
            raise ConfigError(f"{where}: {e}") from None
        problem = _tuning_problem(name, spec)
        if problem:
            raise ConfigError(f"{where}: entry {name!r} {problem}")


def _tuning_problem(name: str, spec: ParamSpec) -> Optional[str]:
    if not spec.tuned:
        # kept out of the search: it must still name something, or a misspelling would
        # leave the parameter it meant tuned
        if is_tunable(name) or is_shaping_key(name) or name in FLAGS_BY_NAME:
            return None
        hint = did_you_mean(name, TUNED_HPARAMS, prefix="")
        return f"names no parameter PBT tunes{hint}; PBT can tune {TUNABLE_TEXT}"
    if not is_tunable(name):
        hint = did_you_mean(name, TUNED_HPARAMS, prefix="")
        return f"cannot be tuned while a learner runs{hint}; PBT can tune {TUNABLE_TEXT}"
    if is_shaping_key(name):  # any finite number
        return search_space_problem(spec, None)
    flag = FLAGS_BY_NAME.get(name)
    return search_space_problem(spec, flag) if flag is not None else None


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


def search_space_problem(spec: ParamSpec, flag: Optional[Flag]) -> Optional[str]:
    """Why the entry `spec` lets PBT give flag's learning value one that the flag itself
    rejects ('allows -0.1, but --learning_rate must be > 0'), or None. `flag` None: a
    reward-shaping weight, any finite number."""
    what = f"--{flag.name}" if flag is not None else "a reward-shaping weight"
    for value, how in _reach(spec):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{how}, but {what} is a number"
        if not math.isfinite(value):
            return f"{how}, but {what} must be finite"
        problem = flag.check(value) if flag is not None and flag.check is not None else None
        if problem:
            return f"{how}, but {what} {problem}"
    return None


def check_train_dir(cfg: Cfg) -> None:
    """The experiment folder can be made (or is a folder already) and written to; checked
    before anything is written, so a bad path is one line, not a traceback mid-start."""
    exp_dir = experiment_dir(cfg)
    flag = f"--train_dir={cfg.train_dir!r}"
    if os.path.exists(cfg.train_dir) and not os.path.isdir(cfg.train_dir):
        raise ConfigError(f"{flag}: is a file, not a folder")
    if os.path.lexists(exp_dir) and not os.path.isdir(exp_dir):
        what = "a file" if os.path.isfile(exp_dir) else "a broken link"
        raise ConfigError(f"--experiment={cfg.experiment!r}: {exp_dir} is {what}, not a folder")
    existing = os.path.abspath(exp_dir)
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ConfigError(f"{flag}: {existing} is a file, so no folder can be made inside it")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag}: {existing} is not writable; give a folder you can write to")


def _check_flag_values(cfg: Cfg, flags: Iterable[Flag]) -> None:
    for flag in flags:
        value = getattr(cfg, flag.name)
        if value is None:
            continue
        if flag.type is float and not math.isfinite(value):
            raise ConfigError(f"--{flag.name}={value!r}: must be finite")
        if flag.type is int and not -(2**63) <= value < 2**63:  # numpy, torch: 64-bit ints
            raise ConfigError(f"--{flag.name}={value:.3g}: must be below 2**63")
        if flag.choices is not None and value not in flag.choices:
            hint = did_you_mean(str(value).lower(), [str(c) for c in flag.choices], prefix="")
            if (flag.name, str(value)) in FOREIGN_CHOICES:
                hint = f"; {FOREIGN_CHOICES[flag.name, str(value)]}"
            raise ConfigError(
                f"--{flag.name}={value!r}: allowed values are {list(flag.choices)}{hint}"
            )
        if flag.check is not None:
            problem = flag.check(value)
            if problem:
                raise ConfigError(f"--{flag.name}={value!r}: {problem}")


RESERVED_OBJECTIVES = ("elo", "vs_snapshots", "vs_scripted:NAME")


def target_objective_problem(target: str) -> Optional[str]:
    """A --pbt_target_objective that looks like a misspelled reserved name (elo, vs_snapshots,
    vs_scripted:NAME) rather than an info key: taken as a key, PBT would rank on the episode
    return for the whole run."""
    if target in ("elo", "vs_snapshots", "vs_scripted") or target.startswith("vs_scripted:"):
        return None  # vs_scripted without a player: the cross-flag checks ask for one
    bare = target.partition(":")[0]
    near = close_names(bare.lower(), ["elo", "vs_snapshots", "vs_scripted"])
    if bare.lower() in ("elo", "vs_snapshots", "vs_scripted") or near or ":" in target:
        hint = f" (did you mean {near[0]}?)" if near else ""
        return (
            f"not one of {', '.join(RESERVED_OBJECTIVES)}{hint}; an info key this close to "
            "them, or with a ':', is refused (a misspelling would rank the whole run on the "
            "episode return)"
        )
    return None


def worker_splits_problem(cfg: Cfg, inference: str) -> Optional[str]:
    """With the inference process (`inference`: --inference, or what auto chose), a worker's
    envs step in --worker_num_splits groups of equal size; local inference ignores the flag."""
    if inference != "device" or cfg.num_envs_per_worker % cfg.worker_num_splits == 0:
        return None
    return (
        f"--num_envs_per_worker={cfg.num_envs_per_worker} must be a multiple of "
        f"--worker_num_splits={cfg.worker_num_splits} with --inference=device"
    )


# rollout workers per CPU core beyond which a run is refused: each is a process of its own,
# and far more of them than cores only share the cores (and the memory) ever thinner
MAX_WORKERS_PER_CORE = 32


def _check_cross_flags(cfg: Cfg) -> None:
    problem = worker_splits_problem(cfg, cfg.inference)  # auto: checked once it has chosen
    if problem:
        raise ConfigError(problem)
    cores = os.cpu_count() or 1
    if cfg.num_workers > MAX_WORKERS_PER_CORE * cores and not cfg.ray_address:
        raise ConfigError(
            f"--num_workers={cfg.num_workers}: one process each, on a machine with {cores} CPU "
            f"cores; give at most {MAX_WORKERS_PER_CORE * cores} (about one per core is the "
            "fastest; --num_envs_per_worker adds env copies without processes)"
        )
    if cfg.batch_size % cfg.rollout != 0:
        raise ConfigError(
            f"--batch_size={cfg.batch_size} must be a multiple of "
            f"--rollout={cfg.rollout} (minibatches hold whole trajectories)"
        )
    if cfg.use_rnn and not cfg.actor_critic_share_weights:
        raise ConfigError(
            "--actor_critic_share_weights=False needs --use_rnn=False: the GRU core is one "
            "for the policy and the value"
        )
    if cfg.use_rnn:
        rec = recurrence(cfg)
        if cfg.rollout % rec != 0:
            raise ConfigError(f"--recurrence={cfg.recurrence} must divide --rollout={cfg.rollout}")
    if cfg.device == "gpu" and cfg.num_gpus == 0:
        raise ConfigError("--device=gpu with --num_gpus=0: use --device=cpu, or num_gpus > 0")
    if cfg.pbt_perturb_max < cfg.pbt_perturb_min:
        raise ConfigError(
            f"--pbt_perturb_max={cfg.pbt_perturb_max} must be >= "
            f"--pbt_perturb_min={cfg.pbt_perturb_min}"
        )
    ttest = cfg.with_pbt and cfg.pbt_exploit == "ttest"
    if ttest and cfg.pbt_ttest_min_episodes > cfg.pbt_objective_window:
        raise ConfigError(
            f"--pbt_ttest_min_episodes={cfg.pbt_ttest_min_episodes} must be <= "
            f"--pbt_objective_window={cfg.pbt_objective_window} (the t-test reads that window)"
        )
    vs_snapshots = cfg.pbt_target_objective == "vs_snapshots"
    if cfg.with_pbt and vs_snapshots and cfg.selfplay_snapshot_prob <= 0:
        raise ConfigError(
            "--pbt_target_objective=vs_snapshots ranks on games against frozen snapshots: "
            f"it needs --selfplay_snapshot_prob > 0 (got {cfg.selfplay_snapshot_prob})"
        )
    if cfg.selfplay_snapshot_temperature != 1.0 and cfg.selfplay_snapshot_prob <= 0:
        raise ConfigError(
            f"--selfplay_snapshot_temperature={cfg.selfplay_snapshot_temperature} sets how "
            "frozen snapshots play: it needs --selfplay_snapshot_prob > 0 (got "
            f"{cfg.selfplay_snapshot_prob})"
        )
    target = cfg.pbt_target_objective
    problem = target_objective_problem(target)
    if problem:
        raise ConfigError(f"--pbt_target_objective={target}: {problem}")
    if target.startswith("vs_scripted"):
        name = target.partition(":")[2]
        if not name:
            raise ConfigError(
                f"--pbt_target_objective={target}: name the scripted player, e.g. "
                "vs_scripted:alphabeta or vs_scripted:alphabeta:depth=2"
            )
        if cfg.selfplay_scripted_prob <= 0:
            raise ConfigError(
                f"--pbt_target_objective={target} ranks on games against {name!r}: it needs "
                f"--selfplay_scripted_prob > 0 (got {cfg.selfplay_scripted_prob}), the share "
                "of episodes played against it"
            )
    elif cfg.selfplay_scripted_prob > 0:
        raise ConfigError(
            f"--selfplay_scripted_prob={cfg.selfplay_scripted_prob}: the scripted player is "
            "named by --pbt_target_objective=vs_scripted:NAME"
        )
    if cfg.with_pbt and cfg.num_policies < 2:
        raise ConfigError(
            f"--with_pbt needs a population: --num_policies={cfg.num_policies} must be >= 2"
        )
    if cfg.ray_address is not None:
        _check_ray_flags(cfg)
    elif cfg.ray_node_dir is not None:
        raise ConfigError(
            f"--ray_node_dir={cfg.ray_node_dir!r} places node groups of a run over Ray: add "
            "--ray_address, or drop it"
        )


def _check_ray_flags(cfg: Cfg) -> None:
    flag = f"--ray_address={cfg.ray_address}"
    if cfg.pbt_replay_lineage:
        raise ConfigError(f"{flag}: --pbt_replay_lineage trains one policy, on one machine")
    if cfg.serial_mode:
        raise ConfigError(f"{flag} runs node groups as separate processes: drop --serial_mode")
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise ConfigError(
            f"{flag} needs Ray: {install_hint('ray')} (or drop --ray_address for a run on "
            "this machine)"
        )


def _check_files(cfg: Cfg) -> None:
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
    if cfg.with_wandb:
        import importlib.util

        if importlib.util.find_spec("wandb") is None:
            raise ConfigError(
                f"--with_wandb needs the wandb package: {install_hint('wandb')} (or drop the flag)"
            )


def _saved_env(cfg: Cfg) -> Optional[str]:
    """The env of the run already in --experiment's folder, when it has a readable config."""
    try:
        env = read_run_config(os.path.join(experiment_dir(cfg), "config.json")).get("env")
    except (ValueError, TypeError):
        return None
    return env if isinstance(env, str) else None


def validate(cfg: Cfg, flags: Iterable[Flag] = FLAGS, evaluation: bool = False) -> None:
    from rl_pbt.envs.registry import is_known_env, known_envs_message, unknown_env_message

    _check_flag_values(cfg, flags)
    if cfg.env is None:
        saved = _saved_env(cfg)
        if saved:
            raise ConfigError(
                f"--env is required: the run {cfg.experiment!r} in {cfg.train_dir} trained on "
                f"--env={saved}; add --env={saved} to resume it"
            )
        raise ConfigError("--env is required: " + known_envs_message())
    if not is_known_env(cfg.env):
        raise ConfigError(unknown_env_message(cfg.env))
    _resolve_feature_set(cfg)
    if evaluation:
        return
    _check_cross_flags(cfg)
    _check_files(cfg)
    check_train_dir(cfg)


def _resolve_feature_set(cfg: Cfg) -> None:
    """`--obs_features_set`: a set the env has; empty becomes the env's newest, so that
    config.json names the set a run trains with."""
    from rl_pbt.envs.registry import env_feature_sets, env_obs_features

    chosen = getattr(cfg, "obs_features_set", "")
    if chosen:
        try:
            env_obs_features(cfg.env, chosen)
        except ValueError as e:  # a set the env does not have
            raise ConfigError(str(e)) from None
    else:
        sets = env_feature_sets(cfg.env)
        if sets:
            cfg.obs_features_set = sets[-1]


def recurrence(cfg: Cfg) -> int:
    if not cfg.use_rnn:
        return 1
    return cfg.rollout if cfg.recurrence == -1 else cfg.recurrence


def experiment_dir(cfg: Cfg) -> str:
    return os.path.join(cfg.train_dir, cfg.experiment)


def save_cfg(cfg: Cfg, path: str) -> None:
    from rl_pbt.logging.files import atomic_write_json

    atomic_write_json(path, cfg.to_dict())


# the flags that shape (and compute) a policy's network: a run's config.json must give them to
# rebuild its models
MODEL_FLAGS = (
    "use_rnn",
    "rnn_size",
    "encoder_mlp_layers",
    "encoder_conv_architecture",
    "encoder_conv_mlp_layers",
    "nonlinearity",
    "normalize_input",
    "normalize_returns",
    "obs_features",
    "obs_features_set",
    "mirror_symmetry",
    "actor_critic_share_weights",
)


# model flags added after runs were saved without them: the value that gives those runs' model
# (`obs_features_set`: the env's first, oldest, set; see `with_added_model_flags`)
def model_flags_problem(data: dict) -> Optional[str]:
    """What is wrong with the model's flag values in a run's config.json (a type, a range),
    or None; values of the right kind in another form ("256,256") are put in their type."""
    for name in MODEL_FLAGS:
        flag = FLAGS_BY_NAME.get(name)
        if flag is None or name not in data:
            continue
        try:
            value = _coerce(flag, data[name], "config.json")
        except ConfigError as e:
            return str(e)
        problem = flag.check(value) if flag.check is not None and value is not None else None
        if problem:
            return f"--{name}={data[name]!r} (in config.json): {problem}"
        data[name] = value
    return None


MODEL_FLAGS_ADDED = {
    "obs_features": False,
    "obs_features_set": "",
    "mirror_symmetry": False,
    "actor_critic_share_weights": True,
}


def with_added_model_flags(saved: dict) -> dict:
    """A saved config with the model flags it predates: the values that rebuild its model."""
    from rl_pbt.envs.registry import env_feature_sets  # avoid cycle

    out = {**MODEL_FLAGS_ADDED, **saved}
    if "obs_features_set" not in saved:  # saved before feature sets had names: the first
        env = saved.get("env")
        sets = env_feature_sets(env) if isinstance(env, str) else []
        out["obs_features_set"] = sets[0] if sets else ""
    return out


# what a resumed run must share with the run it resumes: one such network per policy
RESUME_FIXED = ("env", "num_policies", *MODEL_FLAGS)


def same_value(new: Any, old: Any) -> bool:
    """A flag's value against a saved one (JSON gives lists where the config holds tuples)."""
    if isinstance(new, (list, tuple)) and isinstance(old, (list, tuple)):
        return list(new) == list(old)
    return new == old


def resume_mismatches(cfg: Cfg, saved: dict) -> list[str]:
    """The flags of `RESUME_FIXED` whose value differs from the saved config of the run being
    resumed, as "--flag=new (the run has old)"; `rnn_size` only counts with an RNN,
    `obs_features` only for an env that registers observation features, and `obs_features_set`
    only when both runs use them."""
    from rl_pbt.envs.registry import env_obs_features, env_symmetry  # avoid cycle

    out = []
    saved = with_added_model_flags(saved)
    for key in RESUME_FIXED:
        if key not in saved or key not in cfg:
            continue
        if key == "rnn_size" and not (cfg.use_rnn or saved.get("use_rnn")):
            continue
        features = key in ("obs_features", "obs_features_set")
        if features and env_obs_features(getattr(cfg, "env", None)) is None:
            continue
        if key == "obs_features_set" and not (cfg.obs_features and saved.get("obs_features")):
            continue
        if key == "mirror_symmetry" and env_symmetry(getattr(cfg, "env", None)) is None:
            continue
        new, old = getattr(cfg, key), saved[key]
        if not same_value(new, old):
            out.append(f"--{key}={_shown(new)} (the run has {_shown(old)})")
    return out


# flags a resume changes as a matter of course: not worth a note
RESUME_ROUTINE = (
    "restart_behavior",
    "train_for_env_steps",
    "train_for_seconds",
    "experiment",
    "train_dir",
    "preset",
)


def resume_changes(cfg: Cfg, saved: dict) -> list[tuple[str, Any, Any]]:
    """(flag, new value, the run's value) for each flag a resume gives another value than
    the run it resumes had (`saved`, its config.json), beyond those it must keep
    (`RESUME_FIXED`, refused before) and the routine ones (`RESUME_ROUTINE`)."""
    out = []
    saved = with_added_model_flags(saved)
    for key, new in cfg.to_dict().items():
        if key in RESUME_FIXED or key in RESUME_ROUTINE or key not in saved:
            continue
        old = saved[key]
        if not same_value(new, old):
            out.append((key, new, old))
    return out


def resume_notes(changes: list[tuple[str, Any, Any]], pbt_before: bool, pbt_now: bool,
                 replay: bool) -> tuple[list[str], dict[str, float]]:  # fmt: skip
    """What a resume with `changes` (see `resume_changes`) tells the user, and the learning
    values (TUNED_HPARAMS) every learner takes over its checkpoint's. Without PBT a changed
    learning flag applies from the resume on (the user asked for it); with PBT, or a replayed
    schedule, each member keeps its own value from its checkpoint, and the note says so."""
    from rl_pbt.config.flags import TUNED_HPARAMS

    if not changes:
        return [], {}
    shown = ", ".join(f"--{k}={_shown(new)} (the run had {_shown(old)})" for k, new, old in changes)
    notes = [f"resuming with flags that differ from the run's config.json: {shown}"]
    tuned = {k: float(new) for k, new, _ in changes if k in TUNED_HPARAMS}
    if tuned and (pbt_before or pbt_now or replay):
        names = ", ".join(f"--{k}" for k in tuned)
        whose = "the replayed schedule's" if replay else "PBT's"
        notes.append(
            f"{names}: each member keeps the value its checkpoint holds ({whose}); a learning "
            "flag changes nothing at the resume of such a run"
        )
        tuned = {}
    elif tuned:
        notes.append(
            "every policy trains with the new "
            + ", ".join(f"{k}={_shown(v)}" for k, v in tuned.items())
            + " from here on"
        )
    if pbt_before and not pbt_now and not replay:
        notes.append(
            "the run trained with --with_pbt and this resume has none: PBT stops, each member "
            "keeps the values it has; give --with_pbt and the run's PBT flags to go on with it"
        )
    return notes, tuned


def load_cfg(path: str) -> Cfg:
    """A saved config.json, with the model flags it predates (see `with_added_model_flags`)."""
    with open(path) as f:
        return Cfg(with_added_model_flags(json.load(f)))
