"""Actor-critic: per-key encoders (conv for images, MLP for vectors), optional GRU, heads.

An env may register observation features (`register_env(obs_features=...)`): a module without
parameters whose output, computed from the raw vector observation, is appended to the
normalised observation before its MLP encoder (`--obs_features`, on by default). It may also
register a mirror symmetry (`register_env(symmetry=...)`, `rl_pbt.models.symmetry`): the model
then sees each observation in a canonical orientation and mirrors its actions back
(`--mirror_symmetry`, on by default).

Used by rollout workers (one step, `act`) and by the learner (whole trajectories,
`evaluate`). Observation and return normalisers are buffers, published with the weights.
The learner runs the GRU over whole sequences (cuDNN's sequence kernel on CUDA): each
recurrence chunk is cut at episode ends and the pieces run as one packed batch, a plan that
`sequence_plan` computes on the host from the dones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from rl_pbt.envs.registry import env_obs_features, env_symmetry
from rl_pbt.models.action_dist import ActionDistribution, action_spec
from rl_pbt.models.normalizer import RunningMeanStd
from rl_pbt.models.obs import obs_spec
from rl_pbt.models.symmetry import Mirror

_ACTIVATIONS = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh}


def mlp(in_size: int, layers: list[int], act: type[nn.Module]) -> tuple[nn.Module, int]:
    modules: list[nn.Module] = []
    for size in layers:
        modules += [nn.Linear(in_size, size), act()]
        in_size = size
    return nn.Sequential(*modules), in_size


def _conv_stack(
    channels: int, layers: list[tuple[int, int, int, int]], act: type[nn.Module]
) -> nn.Module:
    """Convolutions (out channels, kernel, stride, padding), each followed by `act`, then
    flattened."""
    modules: list[nn.Module] = []
    for out, kernel, stride, padding in layers:
        modules += [nn.Conv2d(channels, out, kernel, stride=stride, padding=padding), act()]
        channels = out
    return nn.Sequential(*modules, nn.Flatten())


def convnet_simple(channels: int, act: type[nn.Module]) -> nn.Module:
    return _conv_stack(channels, [(32, 8, 4, 0), (64, 4, 2, 0), (128, 3, 2, 0)], act)


class ResidualBlock(nn.Module):
    """x + conv(relu(conv(relu(x)))), both convs 3x3 keeping the channels and the size."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.conv2(torch.relu(self.conv1(torch.relu(x))))


def convnet_impala(channels: int, act: type[nn.Module]) -> nn.Module:
    """The IMPALA residual stack (Espeholt et al. 2018): three stages of conv3x3, max-pool
    3x3/2 and two residual blocks, 16/32/32 channels. ReLU as published, whatever the
    --nonlinearity (which still applies to the MLPs)."""
    layers: list[nn.Module] = []
    for out in (16, 32, 32):
        layers += [
            nn.Conv2d(channels, out, 3, padding=1),
            nn.MaxPool2d(3, stride=2, padding=1),
            ResidualBlock(out),
            ResidualBlock(out),
        ]
        channels = out
    return nn.Sequential(*layers, nn.ReLU(), nn.Flatten())


def convnet_board(channels: int, act: type[nn.Module]) -> nn.Module:
    """For small boards (board games, grid worlds): three 3x3 convolutions of 32 channels that
    keep the board's size, so every cell keeps its own features (no stride, no pooling)."""
    return _conv_stack(channels, [(32, 3, 1, 1)] * 3, act)


CONV_ARCHITECTURES = {
    "convnet_simple": convnet_simple,
    "convnet_impala": convnet_impala,
    "convnet_board": convnet_board,
}


def conv_encoder(
    shape: tuple[int, ...], architecture: str, act: type[nn.Module]
) -> tuple[nn.Module, int]:
    if architecture not in CONV_ARCHITECTURES:
        raise ValueError(
            f"--encoder_conv_architecture={architecture!r}: allowed: "
            f"{', '.join(CONV_ARCHITECTURES)}"
        )
    net = CONV_ARCHITECTURES[architecture](shape[0], act)
    try:
        with torch.no_grad():
            out = net(torch.zeros(1, *shape)).shape[1]
    except RuntimeError as e:  # a kernel larger than what is left of the image
        if "size" not in str(e).lower():
            raise
        raise ValueError(
            f"--encoder_conv_architecture={architecture}: an image observation of shape "
            f"{tuple(shape)} (channels, height, width) is too small for its kernels and "
            "strides; for small images or boards use --encoder_conv_architecture=convnet_board "
            "(3x3 kernels that keep the size)"
        ) from None
    return net, out


@dataclass(frozen=True)
class SequencePlan:
    """Where the steps of a batch of trajectories [N, T] go when their recurrence chunks,
    cut at episode ends, run through the GRU as one packed batch of sequences.

    Packed rows are time-major with the longest sequence first (what nn.GRU and cuDNN take):
    row `offset[s] + rank` holds step s of the sequence of that length rank."""

    packed_from: Tensor  # [N*T] the flat step (n * T + t) each packed row takes
    packed_at: Tensor  # [N*T] the packed row of each flat step (the inverse permutation)
    batch_sizes: Tensor  # [L] sequences still running at each time step; on the host always
    h0_from: Tensor  # [S] per sequence, longest first: the chunk whose stored state starts
    # it, or the number of chunks (the index of an appended zero row) after an episode end

    def to(self, device: torch.device | str, non_blocking: bool = False) -> SequencePlan:
        def move(t: Tensor) -> Tensor:
            return t.to(device, non_blocking=non_blocking)

        # nn.GRU reads batch_sizes on the host, so they never leave it
        return SequencePlan(
            move(self.packed_from), move(self.packed_at), self.batch_sizes, move(self.h0_from)
        )


def sequence_plan(dones: np.ndarray, recurrence: int) -> SequencePlan:
    """The plan for dones [N, T] (nonzero: the episode ended after that step, so the state is
    zero before the next one) and chunks of `recurrence` steps, each starting from a stored
    state. Host arithmetic on numpy: nothing here waits for a device."""
    n, t = dones.shape
    if t % recurrence:
        raise ValueError(f"trajectory length {t} is not a multiple of the recurrence {recurrence}")
    steps = n * t
    flat = np.arange(steps)
    after_done = np.zeros(steps, dtype=bool)
    after_done[1:] = np.asarray(dones).reshape(-1)[:-1] != 0
    start = (flat % recurrence == 0) | after_done
    starts = np.flatnonzero(start)  # first step of each sequence
    lengths = np.diff(np.append(starts, steps))
    seq = np.cumsum(start) - 1  # sequence of each step
    longest_first = np.argsort(-lengths, kind="stable")
    rank = np.empty_like(longest_first)
    rank[longest_first] = np.arange(len(longest_first))
    # sequences longer than s, for s = 0 .. L-1 (a reversed cumulative count of the lengths)
    batch_sizes = np.cumsum(np.bincount(lengths)[::-1])[::-1][1:]
    offsets = np.cumsum(batch_sizes) - batch_sizes
    packed_at = offsets[flat - starts[seq]] + rank[seq]
    packed_from = np.empty_like(packed_at)
    packed_from[packed_at] = flat
    first = starts[longest_first]
    h0_from = np.where(first % recurrence == 0, first // recurrence, steps // recurrence)
    return SequencePlan(
        torch.from_numpy(packed_from.astype(np.int64)),
        torch.from_numpy(packed_at.astype(np.int64)),
        torch.from_numpy(batch_sizes.astype(np.int64)),
        torch.from_numpy(h0_from.astype(np.int64)),
    )


class ActorCritic(nn.Module):
    def __init__(self, obs_space: gym.Space, action_space: gym.Space, cfg):
        super().__init__()
        self.obs_spec = obs_spec(obs_space)
        self.act_spec = action_spec(action_space)
        act = _ACTIVATIONS[cfg.nonlinearity]
        self.normalize_input = bool(cfg.normalize_input)
        self.obs_norms = nn.ModuleDict()
        self.mask_key = self.obs_spec.mask_key
        if self.mask_key is not None:
            mask_size = self.obs_spec.shape(self.mask_key)[0]
            if self.act_spec.kind != "discrete" or mask_size != self.act_spec.num_outputs:
                raise ValueError(
                    f"observation key {self.mask_key!r} of size {mask_size}: an action mask "
                    f"needs a Discrete, MultiDiscrete or Tuple-of-Discrete action space and "
                    f"one entry per action ({self.act_spec.num_outputs} for {action_space})"
                )
        self.feature_keys = self.obs_spec.feature_keys
        if not self.feature_keys:
            raise ValueError(
                f"the observation has only {self.mask_key!r}: give the game state under "
                "another key (PettingZoo's: 'observation')"
            )
        self.features_key, self.obs_features, self.features_size = self._obs_features(cfg)
        self.mirror_key, self.mirror = self._mirror(cfg)
        for key in self.feature_keys:
            if len(self.obs_spec.shape(key)) == 1 and self.normalize_input:
                self.obs_norms[key] = RunningMeanStd(self.obs_spec.shape(key))
        self.encoders, self.post, total = self._trunk(cfg, act)
        # a critic of its own (--actor_critic_share_weights=False): the same layers again, so
        # the value loss does not pull on the policy's features
        self.share_weights = bool(getattr(cfg, "actor_critic_share_weights", True))
        if not self.share_weights:
            if cfg.use_rnn:
                raise ValueError(
                    "--actor_critic_share_weights=False needs --use_rnn=False (the GRU core "
                    "is shared by the policy and the value)"
                )
            self.critic_encoders, self.critic_post, _ = self._trunk(cfg, act)
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

    def _trunk(self, cfg, act) -> tuple[nn.ModuleDict, nn.Module, int]:
        """The encoder of every observation key and the MLP after them (an identity without
        images); returns them and the feature size."""
        encoders = nn.ModuleDict()
        total = 0
        for key in self.feature_keys:
            shape = self.obs_spec.shape(key)
            if len(shape) == 3 and shape[-1] <= 4 < shape[0]:
                raise ValueError(
                    f"observation {key!r} with shape {shape} looks channels-last (height, "
                    "width, channels); the model takes channels-first images (channels, "
                    "height, width): transpose it in the env or a wrapper "
                    "(np.moveaxis(obs, -1, 0))"
                )
            if len(shape) == 3:
                net, out = conv_encoder(shape, cfg.encoder_conv_architecture, act)
            elif len(shape) == 1:
                extra = self.features_size if key == self.features_key else 0
                net, out = mlp(shape[0] + extra, list(cfg.encoder_mlp_layers), act)
            else:
                raise ValueError(
                    f"observation {key!r} with shape {shape}: expected a vector or "
                    f"a channels-first image"
                )
            encoders[key] = net
            total += out
        if any(self.obs_spec.is_image(k) for k in self.feature_keys):
            post, total = mlp(total, list(cfg.encoder_conv_mlp_layers), act)
        else:
            post = nn.Identity()
        return encoders, post, total

    def _obs_features(self, cfg) -> tuple[Optional[str], Optional[nn.Module], int]:
        """(the vector key, the module, its output size) of the env's observation features;
        (None, None, 0) without them or with `--obs_features=False`."""
        env = getattr(cfg, "env", None)
        on = env and getattr(cfg, "obs_features", False)
        make = env_obs_features(env, getattr(cfg, "obs_features_set", "")) if on else None
        if make is None:
            return None, None, 0
        vectors = [k for k in self.feature_keys if len(self.obs_spec.shape(k)) == 1]
        key = "observation" if "observation" in vectors else vectors[0] if vectors else None
        if key is None or (len(vectors) > 1 and key != "observation"):
            raise ValueError(
                f"env {env!r}: its observation features need one vector observation (or the "
                f"key 'observation'), found {vectors or 'none'}; or run with --obs_features=False"
            )
        module = make()
        if not isinstance(module, nn.Module) or module.state_dict():
            raise ValueError(
                f"env {env!r}: obs_features() must return a torch module without parameters "
                f"or saved buffers (features are computed, not learned: put learned layers "
                f"in the encoder, constants in buffers with persistent=False)"
            )
        dim = self.obs_spec.shape(key)[0]
        try:
            with torch.no_grad():
                out = module(torch.zeros(1, dim))
        except Exception as e:  # a module written for another observation
            raise ValueError(
                f"env {env!r}: its obs_features() fails on the observation {key!r} of size "
                f"{dim} ({type(e).__name__}: {e}); or run with --obs_features=False"
            ) from None
        if not isinstance(out, Tensor) or out.dim() != 2 or out.shape[0] != 1:
            shape = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise ValueError(
                f"env {env!r}: obs_features() maps [N, {dim}] to {shape} for N=1, expected [N, E]"
            )
        if out.dtype != torch.float32:
            raise ValueError(
                f"env {env!r}: obs_features() gives {out.dtype} for float32 input, expected float32"
            )
        return key, module, int(out.shape[1])

    def _mirror(self, cfg) -> tuple[Optional[str], Optional[Mirror]]:
        """(the vector key it mirrors, the env's `Mirror`); (None, None) without one or with
        `--mirror_symmetry=False`."""
        env = getattr(cfg, "env", None)
        make = env_symmetry(env) if env and getattr(cfg, "mirror_symmetry", False) else None
        if make is None:
            return None, None
        mirror = make()
        if not isinstance(mirror, Mirror):
            raise ValueError(
                f"env {env!r}: symmetry() must return a rl_pbt.models.symmetry.Mirror, got "
                f"{type(mirror).__name__}"
            )
        key = self.feature_keys[0]
        if len(self.feature_keys) != 1 or len(self.obs_spec.shape(key)) != 1:
            raise ValueError(
                f"env {env!r}: its mirror symmetry needs one vector observation (and the "
                f"action mask), found {self.feature_keys}; or run with --mirror_symmetry=False"
            )
        sizes = (self.obs_spec.shape(key)[0], self.act_spec.num_outputs)
        if self.act_spec.kind != "discrete" or len(self.act_spec.nvec) != 1:
            raise ValueError(
                f"env {env!r}: its mirror symmetry needs a Discrete action space; or run with "
                "--mirror_symmetry=False"
            )
        if (mirror.obs_size, mirror.num_actions) != sizes:
            raise ValueError(
                f"env {env!r}: its Mirror has {mirror.obs_size} observation entries and "
                f"{mirror.num_actions} actions, the env {sizes[0]} and {sizes[1]}"
            )
        return key, mirror

    # --- pieces -------------------------------------------------------------------------
    def canonical(self, obs: dict[str, Tensor]) -> tuple[dict[str, Tensor], Optional[Tensor]]:
        """The observations in the orientation the network sees, and where they were mirrored
        (bool, the batch's shape; None without a mirror symmetry: obs as given)."""
        if self.mirror is None:
            return obs, None
        x = obs[self.mirror_key]
        flip = self.mirror.flips(x)
        out = dict(obs)
        out[self.mirror_key] = self.mirror.obs(x, flip)
        if self.mask_key is not None:
            out[self.mask_key] = self.mirror.mask(obs[self.mask_key], flip)
        return out, flip

    def to_canonical(self, obs: dict[str, Tensor], actions: Tensor):
        """A batch (obs[k] [N, T, ...], actions [N, T, dim]) in the orientation the network
        sees: the observations as `canonical` gives them, the actions mirrored with them. The
        learner turns each batch once for all its passes (`canonical=True` below)."""
        obs, flip = self.canonical(obs)
        if flip is not None:
            actions = self.mirror.actions(actions, flip)
        return obs, actions

    def obs_features_of(
        self, obs: dict[str, Tensor], rows: Optional[Tensor] = None, canonical: bool = False
    ):
        """The env's observation features of a batch, obs[key] [N, T, D] -> [N, T, E], where
        `rows` [N, T] holds (zeros elsewhere; everywhere without it); None without features.
        The learner computes them once per batch for all its epochs (`evaluate(features=)`).
        `canonical`: obs is in the network's orientation already (`to_canonical`)."""
        if self.obs_features is None:
            return None
        if not canonical:
            obs, _ = self.canonical(obs)
        raw = obs[self.features_key].float()
        if rows is None:
            return self.obs_features(raw)
        out = raw.new_zeros(*raw.shape[:-1], self.features_size)
        out[rows] = self.obs_features(raw[rows])
        return out

    def encode(
        self, obs: dict[str, Tensor], features: Optional[Tensor] = None, critic: bool = False
    ) -> Tensor:
        """`features`: the observation features of obs, if computed already. `critic`: through
        the critic's own layers (--actor_critic_share_weights=False)."""
        encoders, post = self.encoders, self.post
        if critic:
            encoders, post = self.critic_encoders, self.critic_post
        feats = []
        for key in self.feature_keys:
            x = obs[key]
            if self.obs_spec.is_image(key):  # pixels 0..255 to 0..1; float planes as given
                x = x.float() * (1.0 / 255.0) if x.dtype == torch.uint8 else x.float()
            else:
                x = raw = x.float()
                if key in self.obs_norms:
                    x = self.obs_norms[key].normalize(x)
                if key == self.features_key:
                    f = self.obs_features(raw) if features is None else features.to(x.dtype)
                    x = torch.cat([x, f], dim=-1)
            feats.append(encoders[key](x))
        return post(torch.cat(feats, dim=-1) if len(feats) > 1 else feats[0])

    def _value_input(self, obs: dict[str, Tensor], x: Tensor, features: Optional[Tensor]):
        """What the value head reads: the policy's features x, or the critic's own."""
        if self.share_weights:
            return x
        return self.encode(obs, features, critic=True)

    def _features_once(self, obs: dict[str, Tensor], features: Optional[Tensor]):
        """The observation features, computed here when a separate critic needs them too."""
        if features is not None or self.share_weights or self.obs_features is None:
            return features
        return self.obs_features(obs[self.features_key].float())

    def denormalize_value(self, v: Tensor) -> Tensor:
        if not self.normalize_returns:
            return v
        return v * self.ret_norm.std.to(v.dtype) + self.ret_norm.mean.to(v.dtype)

    def normalize_value(self, v: Tensor) -> Tensor:
        if not self.normalize_returns:
            return v
        return (v - self.ret_norm.mean.to(v.dtype)) / self.ret_norm.std.to(v.dtype)

    def dist(
        self, head_out: Tensor, mask: Tensor | None = None, temperature: float = 1.0
    ) -> ActionDistribution:
        """The policy at `temperature`: discrete logits / temperature, or a continuous std
        times temperature (1: the policy itself)."""
        log_std = self.log_std
        if temperature != 1.0:
            if self.act_spec.kind == "discrete":
                head_out = head_out / temperature
            else:
                log_std = log_std + float(np.log(temperature))
        return ActionDistribution(self.act_spec, head_out, log_std, mask)

    def action_mask(self, obs: dict[str, Tensor]) -> Tensor | None:
        return obs[self.mask_key] if self.mask_key is not None else None

    # --- acting: one step for a batch of agents -------------------------------------------
    @torch.no_grad()
    def act(
        self,
        obs: dict[str, Tensor],
        rnn_state: Tensor | None,
        deterministic: bool = False,
        temperature: float = 1.0,
    ):
        """Returns actions, log-probs, raw (denormalised) values and the next rnn state.

        `temperature` (play only, above 0): discrete actions are sampled from softmax(logits /
        temperature), continuous ones with their std times temperature; the log-probs are
        those of that distribution."""
        obs, flip = self.canonical(obs)
        features = self._features_once(obs, None)
        x = self.encode(obs, features)
        if self.use_rnn:
            out, h = self.core(x.unsqueeze(0), rnn_state.unsqueeze(0))
            x, rnn_state = out.squeeze(0), h.squeeze(0)
        d = self.dist(self.policy_head(x), self.action_mask(obs), temperature)
        actions = d.argmax() if deterministic else d.sample()
        v = self.value_head(self._value_input(obs, x, features)).squeeze(-1)
        values = self.denormalize_value(v)
        log_probs = d.log_prob(actions)
        if flip is not None:  # back to the env's orientation
            actions = self.mirror.actions(actions, flip)
        return actions, log_probs, values, rnn_state

    # --- learning: trajectories [N, T] ---------------------------------------------------
    def evaluate(
        self,
        obs: dict[str, Tensor],
        actions: Tensor,
        rnn_states: Tensor | None,
        dones: Tensor,
        recurrence: int,
        plan: Optional[SequencePlan] = None,
        features: Optional[Tensor] = None,
        canonical: bool = False,
    ):
        """obs[k]: [N, T, ...]; actions [N, T, dim]; rnn_states [N, T // recurrence, H] (state
        before each chunk); dones [N, T]. Returns log-probs, entropy, normalised values [N, T].

        With an RNN, `plan` (from `sequence_plan` on these dones, on this device) saves
        reading the dones back from the device; without it the plan is made here.
        `canonical`: obs and actions are in the network's orientation already
        (`to_canonical`)."""
        n, t = actions.shape[:2]
        flat = {k: v.reshape(n * t, *v.shape[2:]) for k, v in obs.items()}
        actions = actions.reshape(n * t, -1)
        if not canonical:
            flat, flip = self.canonical(flat)
            if flip is not None:  # the actions as the network chose them
                actions = self.mirror.actions(actions, flip)
        if features is not None:
            features = features.reshape(n * t, -1)
        features = self._features_once(flat, features)
        x = self.encode(flat, features)
        if self.use_rnn:
            if plan is None:
                plan = sequence_plan(dones.detach().cpu().numpy(), recurrence).to(x.device)
            x = self._unroll(x, rnn_states, plan)
        # the mask the actor saw, stored with the observation: the same legal actions here
        d = self.dist(self.policy_head(x), self.action_mask(flat))
        logp = d.log_prob(actions).view(n, t)
        entropy = d.entropy().view(n, t)
        values = self.value_head(self._value_input(flat, x, features)).view(n, t)
        return logp, entropy, values

    def _unroll(self, x: Tensor, rnn_states: Tensor, plan: SequencePlan) -> Tensor:
        """GRU over the flat steps x [N*T, F], one call for every sequence of the batch."""
        h = rnn_states.reshape(-1, self.rnn_size).float()
        h0 = torch.cat([h, h.new_zeros(1, self.rnn_size)]).index_select(0, plan.h0_from)
        packed = PackedSequence(x.index_select(0, plan.packed_from).float(), plan.batch_sizes)
        # in float32 even under autocast: a bfloat16 state would lose precision step by step
        with torch.autocast(device_type=x.device.type, enabled=False):
            out, _ = self.core(packed, h0.unsqueeze(0))
        return out.data.index_select(0, plan.packed_at)

    def update_normalizers(
        self, obs: dict[str, Tensor], valid: Tensor, canonical: bool = False
    ) -> None:
        """Merge the observations where valid [N, T] is true into the running statistics
        (in the orientation the network sees them; `canonical`: obs is in it already)."""
        if not canonical:
            obs, _ = self.canonical(obs)
        for key, norm in self.obs_norms.items():
            norm.update_masked(obs[key], valid)


def make_actor_critic(obs_space: gym.Space, action_space: gym.Space, cfg) -> ActorCritic:
    return ActorCritic(obs_space, action_space, cfg)
