"""Load a trained policy from an experiment folder, and act with it outside training.

Used by launch/enjoy, launch/match and evaluation code.
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np
import torch

from rl_pbt.config.parse import (
    MODEL_FLAGS,
    Cfg,
    model_flags_problem,
    str2bool,
    with_added_model_flags,
)
from rl_pbt.envs.registry import env_extra_flags, is_known_env, unknown_env_message
from rl_pbt.learning.checkpoints import (
    CheckpointError,
    checkpoint_files,
    load_latest_checkpoint,
    read_checkpoint,
)
from rl_pbt.logging.files import checkpoint_dir, read_run_config
from rl_pbt.models.action_dist import to_env_action
from rl_pbt.models.actor_critic import ActorCritic, make_actor_critic
from rl_pbt.models.obs import obs_to_dict


def play_cfg(cfg: Cfg, seed: Optional[int] = None) -> Cfg:
    """A run's config for playing its env outside training: its env's flags as trained
    (episode length, resolution, ...), but those for training games only (random openings) at
    their defaults, and `seed` when given."""
    for flag in env_extra_flags(cfg.env):
        if flag.training_only:
            setattr(cfg, flag.name, flag.default)
    if seed is not None:
        cfg.seed = seed
    return cfg


def experiment_cfg(exp_dir: str, overrides: Optional[dict] = None) -> Cfg:
    """The run's config (config.json). FileNotFoundError without one; ValueError (one line
    naming the file) when it is unreadable, not JSON, not an object of flag values, or lacks
    the env or the model's flags."""
    path = os.path.join(exp_dir, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no experiment at {exp_dir} (missing config.json)")
    data = read_run_config(path)
    data = with_added_model_flags(data)  # a run saved before a model flag existed
    problem = cfg_problem(data)
    if problem:
        raise ValueError(f"{path} is not a run's config: {problem}")
    cfg = Cfg(data)
    for k, v in (overrides or {}).items():
        setattr(cfg, k, v)
    return cfg


def cfg_problem(data: dict) -> Optional[str]:
    """What is wrong with the flag values of a run's config.json (no env, no model), or None."""
    env = data.get("env")
    if not isinstance(env, str) or not env.strip():
        found = "no 'env'" if "env" not in data else f"'env' is {env!r}"
        return f"{found}, expected the name of the env the run trained on"
    missing = [k for k in MODEL_FLAGS if k not in data]
    if missing:
        return f"the model's flags {', '.join(missing)} are missing (rl-pbt-train writes them)"
    return model_flags_problem(data)


def run_env_problem(exp_dir: str, env_name: str, command: str) -> Optional[str]:
    """None when the env a run's config.json names can be made here; else a line naming the
    file and how to make the env known to `command` (a module, e.g. "launch.enjoy")."""
    if is_known_env(env_name):
        return None
    path = os.path.join(exp_dir, "config.json")
    why = unknown_env_message(env_name).split(": ", 1)[-1]  # drops the leading "--env=NAME"
    return (
        f"{path} names the env {env_name!r}, which is not registered here ({why}); an env of "
        f"your own must be registered first: call register_env({env_name!r}, ...) (or import "
        f"the module that does) in a script that then runs {command}.main([...])"
    )


def given_env_problem(env_name: str, command: str) -> Optional[str]:
    """None when env `env_name` (given with --env to `command`, e.g. "launch.enjoy") can be
    made here; else the unknown-env line and how to make an env of one's own known."""
    if is_known_env(env_name):
        return None
    return (
        f"{unknown_env_message(env_name)}; an env of your own must be registered first: call "
        f"register_env({env_name!r}, ...) (or import the module that does) in a script that "
        f"then runs {command}.main([...])"
    )


def checkpoint_misfit(exp_dir: str, policy_id: int, error: BaseException) -> str:
    """The line for a checkpoint whose weights do not fit the network its own run's
    config.json describes (played in the run's env, so not another env's observations)."""
    detail = str(error).strip().splitlines()
    detail = detail[1].strip() if len(detail) > 1 else (detail[0] if detail else "")
    return (
        f"policy {policy_id}'s checkpoint in {checkpoint_dir(exp_dir, policy_id)} does not fit "
        f"the network {os.path.join(exp_dir, 'config.json')} describes ({detail}); was the "
        "file edited, or the checkpoint copied from another run?"
    )


def load_policy(exp_dir: str, policy_id: int, obs_space, action_space, cfg: Cfg) -> ActorCritic:
    """The policy's newest usable checkpoint as an eval-mode model on the CPU (a damaged
    newest file is named in a warning and the one before it is used). FileNotFoundError when
    the folder holds no checkpoint, CheckpointError (a ValueError) when none is usable."""
    members = getattr(cfg, "num_policies", None)
    if isinstance(members, int) and not 0 <= policy_id < members:
        raise FileNotFoundError(
            f"policy {policy_id}: the run at {exp_dir} has {members} "
            f"{'policy (0)' if members == 1 else f'policies (0..{members - 1})'}"
        )
    folder = checkpoint_dir(exp_dir, policy_id)
    found = load_latest_checkpoint(folder, map_location="cpu")
    if found is None:
        n = len(checkpoint_files(folder))
        if n:
            why = f"none of the {n} checkpoints of policy {policy_id} is usable"
            raise CheckpointError(folder, why)
        raise FileNotFoundError(f"policy {policy_id}: no checkpoint in {folder}")
    path, state = found
    return _model_from_state(path, state, obs_space, action_space, cfg)


def load_policy_file(path: str, obs_space, action_space, cfg: Cfg) -> ActorCritic:
    """The model saved in one named checkpoint file, eval mode, on the CPU; CheckpointError
    (a ValueError, one line) when the file is missing, damaged or not plain data."""
    state = read_checkpoint(path, map_location="cpu")
    return _model_from_state(path, state, obs_space, action_space, cfg)


def _model_from_state(path: str, state: dict, obs_space, action_space, cfg: Cfg) -> ActorCritic:
    if "model" not in state:
        raise CheckpointError(path, "holds no 'model' weights")
    model = make_actor_critic(obs_space, action_space, cfg)
    model.load_state_dict(state["model"])
    model.eval()
    return model


class PolicyActor:
    """Acts for one agent seat with a trained model (keeps its own RNN state)."""

    def __init__(
        self,
        model: ActorCritic,
        obs_space,
        action_space,
        deterministic: bool = False,
        temperature: float = 1.0,
    ):
        self.model = model
        self.obs_space = obs_space
        self.action_space = action_space
        self.deterministic = deterministic
        self.temperature = temperature
        self.reset()

    def reset(self) -> None:
        self.h = torch.zeros(1, self.model.rnn_size) if self.model.rnn_size else None

    def act(self, obs):
        d = obs_to_dict(self.obs_space, obs)
        batch = {k: torch.as_tensor(np.asarray(v)).unsqueeze(0) for k, v in d.items()}
        actions, _, _, self.h = self.model.act(
            batch, self.h, deterministic=self.deterministic, temperature=self.temperature
        )
        return to_env_action(self.model.act_spec, self.action_space, actions[0].numpy())


# a tool's bool flag as rl-pbt-train's: `--flag`, `--flag=True`, `--flag=False`
BOOL_FLAG = {"nargs": "?", "const": True, "default": False, "type": str2bool}


def add_play_flags(parser) -> None:
    """--deterministic and --temperature, for the tools that play trained policies."""
    parser.add_argument(
        "--deterministic",
        "--eval_deterministic",  # Sample Factory's name
        **BOOL_FLAG,
        help="argmax actions (--deterministic, or =True/False)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="sample from softmax(logits / T) (continuous actions: std x T): below 1 plays "
        "closer to the argmax, above 1 more varied",
    )


def play_flags_problem(args) -> Optional[str]:
    """One line naming the flag, for --temperature values no player can use."""
    t = args.temperature
    if not np.isfinite(t) or t <= 0:
        return f"--temperature={t}: must be a number above 0 (--deterministic plays the argmax)"
    if args.deterministic and t != 1.0:
        return (
            f"--temperature={t} with --deterministic: the argmax has no temperature; "
            "give one of them"
        )
    return None
