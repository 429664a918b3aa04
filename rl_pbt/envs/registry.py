"""Env registry: names -> factories, with env-specific flags and default overrides.

Any gymnasium id also works as an env name. Factories are module-level functions so that
spawned processes can re-create envs; `envs/` integrations register themselves on import.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from rl_pbt.config.flags import Flag
from rl_pbt.extras import install_hint

MakeEnvFunc = Callable[..., Any]  # (full_env_name, cfg, env_config, render_mode=None) -> env
# (full_env_name, cfg, env_configs: list[dict]) -> BatchedMultiAgentEnv of len(env_configs) copies
MakeBatchFunc = Callable[..., Any]
# () -> a torch module without parameters: vector observation [..., D] -> extra features [..., E]
MakeObsFeatures = Callable[[], Any]
# () -> a rl_pbt.models.symmetry.Mirror: the env's mirror symmetry
MakeSymmetry = Callable[[], Any]
# the name of the feature set of an env registered with one factory (not a dict of them)
DEFAULT_FEATURES = "default"


@dataclass
class EnvEntry:
    name: str
    make_env: MakeEnvFunc
    extra_flags: list[Flag] = field(default_factory=list)
    default_overrides: dict[str, Any] = field(default_factory=dict)
    make_batch: Optional[MakeBatchFunc] = None
    # feature-set name -> factory, oldest first; the last is the default for new runs
    obs_features: Optional[dict[str, MakeObsFeatures]] = None
    symmetry: Optional[MakeSymmetry] = None
    builtin: bool = False  # registered by the built-in `envs` package (a new process has it)


_REGISTRY: dict[str, EnvEntry] = {}
# the built-in envs (the `envs` package installed beside rl_pbt): registered on the first name
# the registry lacks; `hidden_by` is another `envs` package that Python finds first; `kept`:
# built-in names a script had registered before, which stay the script's
_BUILTINS: dict[str, Any] = {"loaded": False, "loading": False, "hidden_by": None, "kept": set()}
# the fields of an entry that children need: what builds envs and models
_FACTORIES = ("make_env", "make_batch", "obs_features", "symmetry")


def register_env(
    name: str,
    make_env_func: MakeEnvFunc,
    *,
    extra_flags: Optional[list[Flag]] = None,
    default_overrides: Optional[dict[str, Any]] = None,
    overwrite: bool = True,
    make_batch_func: Optional[MakeBatchFunc] = None,
    obs_features: Optional[MakeObsFeatures | dict[str, MakeObsFeatures]] = None,
    symmetry: Optional[MakeSymmetry] = None,
) -> None:
    """Register `make_env_func(full_env_name, cfg, env_config, render_mode=None)` as `name`.

    `extra_flags` adds env-specific command-line flags; `default_overrides` changes flag
    defaults for this env (the command line still wins). Re-registering a name replaces it
    unless `overwrite=False`. `make_batch_func(full_env_name, cfg, env_configs)` optionally
    builds all of a worker's copies as one `BatchedMultiAgentEnv` (stepped in one call); each
    copy must behave as `make_env_func` would build it for the same env_config.

    `obs_features()` optionally returns a torch module without parameters that computes extra
    input features from the raw vector observation (`[..., D]` -> `[..., E]`, e.g. connect
    four's threat cells); the model appends them to the normalised observation unless
    `--obs_features=False`. The env's observations stay as they are, so scripted players,
    `launch.match` and runs trained without the features all share one env. To change an
    env's features without breaking its saved runs, give a dict of named factories, oldest
    first: new runs take the last, `--obs_features_set=NAME` picks another, and each run's
    config.json keeps the name it trained with (runs saved before the sets had names get the
    first).

    `symmetry()` optionally returns a `rl_pbt.models.symmetry.Mirror`: the game is the same
    seen in a mirror (connect four's board, left to right), and the model sees each
    observation in one canonical orientation of the two and mirrors its action back, unless
    `--mirror_symmetry=False`. The env itself stays as it is.
    """
    if _BUILTINS["loading"] and name in _REGISTRY:
        _BUILTINS["kept"].add(name)  # a script's own env of a built-in's name stays
        return
    if not callable(make_env_func):
        raise TypeError(f"register_env({name!r}): make_env_func must be callable")
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"env {name!r} is already registered")
    if make_batch_func is not None and not callable(make_batch_func):
        raise TypeError(f"register_env({name!r}): make_batch_func must be callable")
    if obs_features is not None and not isinstance(obs_features, dict):
        obs_features = {DEFAULT_FEATURES: obs_features}
    if obs_features is not None:
        for key, make in obs_features.items():
            if not isinstance(key, str) or not key or not callable(make):
                raise TypeError(
                    f"register_env({name!r}): obs_features must be callable, or a dict of "
                    f"names to callables (got {key!r}: {make!r})"
                )
        if not obs_features:
            raise TypeError(f"register_env({name!r}): obs_features is an empty dict")
    if symmetry is not None and not callable(symmetry):
        raise TypeError(f"register_env({name!r}): symmetry must be callable")
    _REGISTRY[name] = EnvEntry(
        name,
        make_env_func,
        list(extra_flags or []),
        dict(default_overrides or {}),
        make_batch_func,
        dict(obs_features) if obs_features is not None else None,
        symmetry,
        builtin=bool(_BUILTINS["loading"]),
    )


def load_builtin_envs() -> None:
    """Register the built-in envs once. The commands import them at their start; a script of
    the user's gets them when it first asks for a name the registry does not know. An env the
    script registered under a built-in's name is kept."""
    if _BUILTINS["loaded"]:
        return
    _BUILTINS["loaded"] = True
    ours = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "envs")
    try:
        spec = importlib.util.find_spec("envs")
    except (ImportError, ValueError):
        return
    found = list(spec.submodule_search_locations or []) if spec is not None else []
    if not found:
        return
    if not any(os.path.realpath(f) == os.path.realpath(ours) for f in found):
        _BUILTINS["hidden_by"] = found[0]
        return
    importlib.import_module("envs")


@contextlib.contextmanager
def builtin_registration():
    """The built-in envs register inside this (envs/__init__.py): an env a script registered
    before under a built-in's name stays the script's, with its own scripted players."""
    before = _BUILTINS["loading"]
    _BUILTINS["loading"] = True
    try:
        yield
    finally:
        _BUILTINS["loading"] = before


def kept_from_builtins(name: str) -> bool:
    """True while the built-ins register, for an env name a script had registered before."""
    return _BUILTINS["loading"] and name in _BUILTINS["kept"]


def _entry(name: str) -> Optional[EnvEntry]:
    """The registered entry of `name`; the built-ins are loaded first when the name is neither
    registered nor a gymnasium id (a child process making a gymnasium env imports no more)."""
    if name not in _REGISTRY and not _BUILTINS["loaded"] and not _is_gym_id(name):
        load_builtin_envs()
    return _REGISTRY.get(name)


def _is_gym_id(name: str) -> bool:
    import gymnasium

    return name in gymnasium.envs.registry


def known_to_new_processes(name: str) -> bool:
    """Whether a command started anew (`rl-pbt-enjoy --env=NAME`) can make env `name`: a
    built-in, or a gymnasium id gymnasium registers itself; not an env a script registered
    (with `register_env`, the PettingZoo adapters or `gymnasium.register`)."""
    entry = _entry(name)
    if entry is not None:
        return entry.builtin
    import gymnasium

    spec = gymnasium.envs.registry.get(name)
    if spec is None:
        return False
    point = spec.entry_point
    return isinstance(point, str) and point.split(":")[0].split(".")[0] == "gymnasium"


def registered_envs() -> list[str]:
    load_builtin_envs()
    return sorted(_REGISTRY)


def _gym_ids() -> list[str]:
    import gymnasium

    return list(gymnasium.envs.registry.keys())


def is_known_env(name: str) -> bool:
    return _entry(name) is not None or name in _gym_ids()


def known_envs_message(name: Optional[str] = None) -> str:
    ours = registered_envs()
    msg = f"registered envs: {', '.join(ours) if ours else '(none)'}; or any gymnasium id"
    if name:
        close = difflib.get_close_matches(name, ours + _gym_ids(), n=3)
        if close:
            msg += f" (did you mean {', '.join(close)}?)"
    return msg


# Env families that need an optional install: (name prefix, module, how to install it). An
# integration registers its names only when its package imports, so without the package a
# name of the family would read as a typo; the message names the install instead.
_OPTIONAL_FAMILIES: list[tuple[str, str, str]] = [
    ("doom_", "vizdoom", install_hint("doom")),
]


def register_optional_env_family(prefix: str, module: str, install: str) -> None:
    """Env names starting with `prefix` need `module`; when it is missing, asking for one
    says `install` (e.g. `install_hint("doom")`) instead of 'unknown env'."""
    entry = (prefix, module, install)
    if entry not in _OPTIONAL_FAMILIES:
        _OPTIONAL_FAMILIES.append(entry)


def _module_missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a parent package that fails, or a stubbed-out module
        return True


def unknown_env_message(name: str) -> str:
    """Why `name` is no env here: the package its family needs, or the known names."""
    for prefix, module, install in _OPTIONAL_FAMILIES:
        if name.startswith(prefix) and _module_missing(module):
            return (
                f"--env={name}: the {prefix}* envs need the {module} package, which is not "
                f"installed: {install}"
            )
    msg = f"--env={name!r}: unknown env; " + known_envs_message(name)
    if _BUILTINS["hidden_by"]:
        msg += (
            f"; the package 'envs' at {_BUILTINS['hidden_by']} hides the built-in envs: run "
            "from another folder, or rename that package"
        )
    return msg


def env_extra_flags(name: str) -> list[Flag]:
    entry = _entry(name)
    return list(entry.extra_flags) if entry else []


def envs_with_flag(flag_name: str) -> list[str]:
    """The registered envs that have `flag_name` as a flag of their own, sorted."""
    load_builtin_envs()
    return sorted(
        name
        for name, entry in _REGISTRY.items()
        if any(f.name == flag_name for f in entry.extra_flags)
    )


def env_feature_sets(name: Optional[str]) -> list[str]:
    """The names of the feature sets env `name` registered, oldest first (empty: none)."""
    entry = _REGISTRY.get(name) if name else None
    return list(entry.obs_features) if entry and entry.obs_features else []


def env_obs_features(name: Optional[str], which: str = "") -> Optional[MakeObsFeatures]:
    """The observation-features factory of env `name`: the set `which`, or the newest for
    "" (None without features). ValueError for a set the env does not have."""
    entry = _REGISTRY.get(name) if name else None
    sets = entry.obs_features if entry and entry.obs_features else {}
    if which and which not in sets:
        has = f"the feature sets {', '.join(sets)}" if sets else "no observation features"
        raise ValueError(f"--obs_features_set={which}: env {name!r} has {has}")
    if not sets:
        return None
    return sets[which] if which else list(sets.values())[-1]


def env_symmetry(name: Optional[str]) -> Optional[MakeSymmetry]:
    """The mirror-symmetry factory env `name` registered (None: none)."""
    entry = _REGISTRY.get(name) if name else None
    return entry.symmetry if entry else None


def env_default_overrides(name: str) -> dict[str, Any]:
    entry = _entry(name)
    return dict(entry.default_overrides) if entry else {}


def registry_snapshot(names: Optional[list[str]] = None) -> dict[str, EnvEntry]:
    """The factories of the registry (all, or `names`), handed to child processes so envs a
    user registered in a script exist there. Flags and defaults stay behind: children never
    parse flags, and a flag's check may be a lambda that spawn/forkserver cannot pickle."""
    keep = _REGISTRY if names is None else {n: _REGISTRY[n] for n in names if n in _REGISTRY}
    return {
        n: dataclasses.replace(e, extra_flags=[], default_overrides={}) for n, e in keep.items()
    }


def _same_factory(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):  # feature sets: same names, same factories
        return list(a) == list(b) and all(a[k] is b[k] for k in a)
    return a is b


def restore_registry(snapshot: dict[str, EnvEntry]) -> None:
    for name, entry in snapshot.items():
        known = _REGISTRY.get(name)
        if known is None or not all(
            _same_factory(getattr(known, f), getattr(entry, f)) for f in _FACTORIES
        ):
            _REGISTRY[name] = entry


def make_env(name: str, cfg: Any, env_config: dict, render_mode: Optional[str] = None) -> Any:
    """Create one env instance: a registered factory, else `gymnasium.make(name)`."""
    entry = _entry(name)
    if entry is not None:
        return entry.make_env(name, cfg, env_config, render_mode=render_mode)
    if name in _gym_ids():
        import gymnasium

        return gymnasium.make(name, render_mode=render_mode)
    raise ValueError(unknown_env_message(name))


def has_batched_env(name: str) -> bool:
    entry = _REGISTRY.get(name)
    return entry is not None and entry.make_batch is not None


def make_env_batch(name: str, cfg: Any, env_configs: list[dict]) -> Any:
    """All copies of a worker as one batched env (only for envs registered with a batch)."""
    entry = _REGISTRY.get(name)
    if entry is None or entry.make_batch is None:
        raise ValueError(f"env {name!r} has no batched version")
    return entry.make_batch(name, cfg, env_configs)
