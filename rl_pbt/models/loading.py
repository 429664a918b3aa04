"""Load a trained policy from an experiment folder, and act with it outside training.

Used by launch/enjoy, launch/match and evaluation code.
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np
import torch

from rl_pbt.config.parse import Cfg, load_cfg
from rl_pbt.learning.learner import latest_checkpoint
from rl_pbt.logging.files import checkpoint_dir
from rl_pbt.models.action_dist import to_env_action
from rl_pbt.models.actor_critic import ActorCritic, make_actor_critic
from rl_pbt.models.obs import obs_to_dict


def experiment_cfg(exp_dir: str, overrides: Optional[dict] = None) -> Cfg:
    path = os.path.join(exp_dir, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no experiment at {exp_dir} (missing config.json)")
    cfg = load_cfg(path)
    for k, v in (overrides or {}).items():
        setattr(cfg, k, v)
    return cfg


def load_policy(exp_dir: str, policy_id: int, obs_space, action_space, cfg: Cfg) -> ActorCritic:
    folder = checkpoint_dir(exp_dir, policy_id)
    path = latest_checkpoint(folder)
    if path is None:
        raise FileNotFoundError(f"policy {policy_id}: no checkpoint in {folder}")
    model = make_actor_critic(obs_space, action_space, cfg)
    # checkpoints hold plain tensors, numbers and containers only: nothing to unpickle
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    model.eval()
    return model


class PolicyActor:
    """Acts for one agent seat with a trained model (keeps its own RNN state)."""

    def __init__(self, model: ActorCritic, obs_space, action_space, deterministic: bool = False):
        self.model = model
        self.obs_space = obs_space
        self.action_space = action_space
        self.deterministic = deterministic
        self.reset()

    def reset(self) -> None:
        self.h = torch.zeros(1, self.model.rnn_size) if self.model.rnn_size else None

    def act(self, obs):
        d = obs_to_dict(self.obs_space, obs)
        batch = {k: torch.as_tensor(np.asarray(v)).unsqueeze(0) for k, v in d.items()}
        actions, _, _, self.h = self.model.act(batch, self.h, deterministic=self.deterministic)
        return to_env_action(self.model.act_spec, self.action_space, actions[0].numpy())
