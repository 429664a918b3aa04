"""Actor-critic: per-key encoders (conv for images, MLP for vectors), optional GRU, heads.

Used by rollout workers (one step, `act`) and by the learner (whole trajectories,
`evaluate`). Observation and return normalisers are buffers, published with the weights.
"""

from __future__ import annotations

import gymnasium as gym
import torch
from torch import Tensor, nn

from rl_pbt.models.action_dist import ActionDistribution, action_spec
from rl_pbt.models.normalizer import RunningMeanStd
from rl_pbt.models.obs import obs_spec

_ACTIVATIONS = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh}


def mlp(in_size: int, layers: list[int], act: type[nn.Module]) -> tuple[nn.Module, int]:
    modules: list[nn.Module] = []
    for size in layers:
        modules += [nn.Linear(in_size, size), act()]
        in_size = size
    return nn.Sequential(*modules), in_size


def conv_encoder(
    shape: tuple[int, ...], architecture: str, act: type[nn.Module]
) -> tuple[nn.Module, int]:
    if architecture != "convnet_simple":
        raise ValueError(f"--encoder_conv_architecture={architecture!r}: allowed: convnet_simple")
    c = shape[0]
    net = nn.Sequential(
        nn.Conv2d(c, 32, 8, stride=4),
        act(),
        nn.Conv2d(32, 64, 4, stride=2),
        act(),
        nn.Conv2d(64, 128, 3, stride=2),
        act(),
        nn.Flatten(),
    )
    with torch.no_grad():
        out = net(torch.zeros(1, *shape)).shape[1]
    return net, out


class ActorCritic(nn.Module):
    def __init__(self, obs_space: gym.Space, action_space: gym.Space, cfg):
        super().__init__()
        self.obs_spec = obs_spec(obs_space)
        self.act_spec = action_spec(action_space)
        act = _ACTIVATIONS[cfg.nonlinearity]
        self.normalize_input = bool(cfg.normalize_input)
        self.encoders = nn.ModuleDict()
        self.obs_norms = nn.ModuleDict()
        total = 0
        for key, shape, _ in self.obs_spec.items():
            if len(shape) == 3:
                net, out = conv_encoder(shape, cfg.encoder_conv_architecture, act)
            elif len(shape) == 1:
                net, out = mlp(shape[0], list(cfg.encoder_mlp_layers), act)
                if self.normalize_input:
                    self.obs_norms[key] = RunningMeanStd(shape)
            else:
                raise ValueError(
                    f"observation {key!r} with shape {shape}: expected a vector or "
                    f"a channels-first image"
                )
            self.encoders[key] = net
            total += out
        if any(self.obs_spec.is_image(k) for k in self.obs_spec.keys):
            self.post, total = mlp(total, list(cfg.encoder_conv_mlp_layers), act)
        else:
            self.post = nn.Identity()
        self.use_rnn = bool(cfg.use_rnn)
        self.rnn_size = int(cfg.rnn_size) if self.use_rnn else 0
        if self.use_rnn:
            self.core = nn.GRU(total, self.rnn_size)
            total = self.rnn_size
        self.policy_head = nn.Linear(total, self.act_spec.num_outputs)
        self.value_head = nn.Linear(total, 1)
        if self.act_spec.kind == "continuous":
            self.log_std = nn.Parameter(torch.zeros(self.act_spec.dim))
        else:
            self.log_std = None
        self.ret_norm = RunningMeanStd(())
        self.normalize_returns = bool(cfg.normalize_returns)
        nn.init.orthogonal_(self.policy_head.weight, gain=0.01)
        nn.init.zeros_(self.policy_head.bias)

    # --- pieces -------------------------------------------------------------------------
    def encode(self, obs: dict[str, Tensor]) -> Tensor:
        feats = []
        for key in self.obs_spec.keys:
            x = obs[key]
            if self.obs_spec.is_image(key):
                x = x.float() * (1.0 / 255.0)
            else:
                x = x.float()
                if key in self.obs_norms:
                    x = self.obs_norms[key].normalize(x)
            feats.append(self.encoders[key](x))
        return self.post(torch.cat(feats, dim=-1) if len(feats) > 1 else feats[0])

    def denormalize_value(self, v: Tensor) -> Tensor:
        if not self.normalize_returns:
            return v
        return v * self.ret_norm.std.to(v.dtype) + self.ret_norm.mean.to(v.dtype)

    def normalize_value(self, v: Tensor) -> Tensor:
        if not self.normalize_returns:
            return v
        return (v - self.ret_norm.mean.to(v.dtype)) / self.ret_norm.std.to(v.dtype)

    def dist(self, head_out: Tensor) -> ActionDistribution:
        return ActionDistribution(self.act_spec, head_out, self.log_std)

    # --- acting: one step for a batch of agents -------------------------------------------
    @torch.no_grad()
    def act(self, obs: dict[str, Tensor], rnn_state: Tensor | None, deterministic: bool = False):
        """Returns actions, log-probs, raw (denormalised) values and the next rnn state."""
        x = self.encode(obs)
        if self.use_rnn:
            out, h = self.core(x.unsqueeze(0), rnn_state.unsqueeze(0))
            x, rnn_state = out.squeeze(0), h.squeeze(0)
        d = self.dist(self.policy_head(x))
        actions = d.argmax() if deterministic else d.sample()
        values = self.denormalize_value(self.value_head(x).squeeze(-1))
        return actions, d.log_prob(actions), values, rnn_state

    # --- learning: trajectories [N, T] ---------------------------------------------------
    def evaluate(
        self,
        obs: dict[str, Tensor],
        actions: Tensor,
        rnn_states: Tensor | None,
        dones: Tensor,
        recurrence: int,
    ):
        """obs[k]: [N, T, ...]; actions [N, T, dim]; rnn_states [N, T // recurrence, H] (state
        before each chunk); dones [N, T]. Returns log-probs, entropy, normalised values [N, T]."""
        n, t = actions.shape[:2]
        flat = {k: v.reshape(n * t, *v.shape[2:]) for k, v in obs.items()}
        x = self.encode(flat)
        if self.use_rnn:
            x = self._unroll(x.view(n, t, -1), rnn_states, dones, recurrence).reshape(n * t, -1)
        d = self.dist(self.policy_head(x))
        logp = d.log_prob(actions.reshape(n * t, -1)).view(n, t)
        entropy = d.entropy().view(n, t)
        values = self.value_head(x).view(n, t)
        return logp, entropy, values

    def _unroll(self, x: Tensor, rnn_states: Tensor, dones: Tensor, recurrence: int) -> Tensor:
        """GRU over chunks of `recurrence` steps, resetting the state after each episode end."""
        n, t, _ = x.shape
        chunks = t // recurrence
        x = x.view(n * chunks, recurrence, -1).transpose(0, 1)  # [R, N*C, F]
        h = rnn_states.reshape(n * chunks, -1)
        keep = 1.0 - dones.view(n * chunks, recurrence).transpose(0, 1).float()
        outs = []
        for step in range(recurrence):
            out, hn = self.core(x[step : step + 1], h.unsqueeze(0))
            outs.append(out.squeeze(0))
            h = hn.squeeze(0) * keep[step].unsqueeze(-1)
        y = torch.stack(outs, 0).transpose(0, 1)  # [N*C, R, H]
        return y.reshape(n, t, -1)

    def update_normalizers(self, obs: dict[str, Tensor], valid: Tensor) -> None:
        for key, norm in self.obs_norms.items():
            norm.update(obs[key][valid])


def make_actor_critic(obs_space: gym.Space, action_space: gym.Space, cfg) -> ActorCritic:
    return ActorCritic(obs_space, action_space, cfg)
