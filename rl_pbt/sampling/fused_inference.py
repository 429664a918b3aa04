"""One batched forward pass for the agents of every population member a rollout worker hosts.

Stacks the weights of `ActorCritic` models (vector observations, MLP encoders, no RNN) so the
rollout worker acts for all policies with `torch.baddbmm` instead of one small call per policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields

import numpy as np
import torch
from torch import Tensor, nn

from rl_pbt.models.actor_critic import ActorCritic

# Bias of the padding logits that align heads of different sizes: exp() underflows to exactly
# 0, so padding never gets sampled nor changes a log-softmax, and it stays finite (no 0 * inf).
_PAD_LOGIT = -1e9
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_TINY = float(torch.finfo(torch.float32).tiny)  # the smallest uniform draw the race takes


def _activation(module: nn.Module) -> Callable[[Tensor], Tensor] | None:
    """In-place version of a supported activation module (layer outputs are fresh tensors)."""
    if type(module) is nn.ReLU:
        return torch.relu_
    if type(module) is nn.Tanh:
        return torch.tanh_
    if type(module) is nn.ELU:
        alpha = float(module.alpha)
        return lambda x: nn.functional.elu_(x, alpha)
    return None


def _mlp_layers(encoder: nn.Module) -> list[tuple[nn.Linear, nn.Module]] | None:
    """(Linear, activation) pairs of an encoder built by `mlp()`, or None for anything else."""
    if not isinstance(encoder, nn.Sequential) or len(encoder) % 2:
        return None
    mods = list(encoder)
    pairs = list(zip(mods[0::2], mods[1::2]))
    for linear, act in pairs:
        if type(linear) is not nn.Linear or linear.bias is None or _activation(act) is None:
            return None
    return pairs


def _layout(model: ActorCritic) -> tuple:
    """What must agree between models sharing a stack: obs shapes, layer sizes, activations."""
    pairs = [_mlp_layers(model.encoders[k]) for k in model.feature_keys]
    if not model.share_weights:  # the critic's own layers, as one more branch
        pairs += [_mlp_layers(model.critic_encoders[k]) for k in model.feature_keys]
    layers = tuple(
        tuple(
            (lin.in_features, lin.out_features, type(act), getattr(act, "alpha", None))
            for lin, act in p
        )
        if p is not None
        else None
        for p in pairs
    )
    return (
        model.obs_spec.shapes,
        model.mask_key,
        layers,
        model.act_spec,
        model.normalize_input,
        model.normalize_returns,
        tuple(model.obs_norms.keys()),
        type(model.obs_features),
        type(model.mirror),
    )


@dataclass
class _Weights:
    """Stacked per-row tensors read by the forward pass; `select` keeps a subset of rows."""

    norm_mean: Tensor | None  # [R, 1, D]
    norm_std: Tensor | None  # [R, 1, D]
    norm_lo: Tensor | None  # [R, 1, D] -clip
    norm_hi: Tensor | None  # [R, 1, D] clip
    # layer -> parts: one block-diagonal part for all keys, or one part per key
    layers: list[list[tuple[Tensor, Tensor]]]  # weight [R, in, out], bias [R, 1, out]
    head_w: Tensor  # [R, F, C]
    head_b: Tensor  # [R, 1, C]

    def select(self, index: Tensor) -> _Weights:
        def pick(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.index_select(0, index)

        out = {f.name: pick(getattr(self, f.name)) for f in fields(self) if f.name != "layers"}
        layers = [[(pick(w), pick(b)) for w, b in parts] for parts in self.layers]
        return _Weights(layers=layers, **out)

    def tensors(self) -> list[Tensor]:
        flat = [getattr(self, f.name) for f in fields(self) if f.name != "layers"]
        flat += [t for parts in self.layers for pair in parts for t in pair]
        return [t for t in flat if t is not None]

    def copy_row(self, dst: int, src: _Weights, src_row: int) -> None:
        """Row `dst` of these stacks := row `src_row` of `src` (same layout). Subsets are
        made during acting, so they are inference tensors, written only in inference mode."""
        with torch.inference_mode():
            for mine, theirs in zip(self.tensors(), src.tensors()):
                mine[dst].copy_(theirs[src_row])


@dataclass
class _Plan:
    """How agents map onto the padded [rows, n_max] batch; reused while `rows` is unchanged."""

    key: bytes
    n_max: int
    active: np.ndarray  # rows present, ascending
    active_key: bytes
    gather: Tensor | None  # [R_active * n_max] agent per padded slot; None: identity
    scatter: Tensor | None  # [N] padded slot per agent; None: identity


class FusedPopulationPolicy:
    """`ActorCritic.act` for many models at once: row r of every stack holds one model."""

    # Several observation keys share block-diagonal layers (one op for all keys) while these
    # stay this narrow; wider ones run per key, as the zero blocks then cost more than the ops
    # saved (2 keys, 8 rows: equal at 64 units per key, per key 20-40% faster from 128).
    block_diag_max_width = 128
    # stacked weights kept for subsets of rows in use (a loaded row is copied into them)
    max_cached_subsets = 4

    @staticmethod
    def supported(model: ActorCritic) -> bool:
        if model.use_rnn or not isinstance(model.post, nn.Identity):
            return False
        if any(len(shape) != 1 for shape in model.obs_spec.shapes):
            return False
        if model.obs_features is not None and len(model.feature_keys) != 1:
            return False  # observation features: one vector key only
        layers = _layout(model)[2]
        if any(p is None for p in layers):
            return False
        if not model.share_weights and (len(model.feature_keys) != 1 or not layers[0]):
            return False  # a critic of its own: one vector key, at least one layer
        # keys share widths and activations (true for `mlp()`), so their layers can be stacked
        return len({tuple(layer[1:] for layer in p) for p in layers}) == 1

    def __init__(self, template: ActorCritic, num_rows: int):
        if not self.supported(template):
            raise ValueError(
                "FusedPopulationPolicy needs vector observations, MLP encoders, no RNN"
            )
        if num_rows < 1:
            raise ValueError(f"num_rows={num_rows}: need at least one row")
        self.num_rows = num_rows
        self._layout = _layout(template)
        spec = template.obs_spec
        self.keys = template.feature_keys  # encoded; the action mask is applied to the logits
        self.mask_key = template.mask_key
        self.dims = [spec.shape(k)[0] for k in self.keys]
        self.in_dim = sum(self.dims)
        # the env's observation features (no parameters: one module serves every row)
        self.features = template.obs_features
        self.features_size = template.features_size
        # the env's mirror symmetry: act in the canonical orientation, as ActorCritic does
        self.mirror = template.mirror
        self.act_spec = template.act_spec
        self.normalize_input = template.normalize_input
        self.normalize_returns = template.normalize_returns
        pairs = _mlp_layers(template.encoders[self.keys[0]])
        self.widths = [lin.out_features for lin, _ in pairs]
        self._act = _activation(pairs[0][1]) if pairs else None
        num_keys = len(self.keys)
        # a critic of its own (one key): a second branch of layers on the same input, run
        # as a part of its own; the head reads the logits from the first, the value from it
        self.critic = not template.share_weights
        self._split = self.critic or (
            num_keys > 1 and num_keys * max(self.widths, default=0) > self.block_diag_max_width
        )
        branches = 2 if self.critic else num_keys
        feat = branches * self.widths[-1] if self.widths else self.in_dim + self.features_size

        r, d = num_rows, self.in_dim
        layers: list[list[tuple[Tensor, Tensor]]] = []
        in_sizes = [n + self.features_size for n in self.dims]  # one key when features
        if self.critic:
            in_sizes = in_sizes * 2
        for width in self.widths:
            if self._split:
                parts = [(torch.zeros(r, n, width), torch.zeros(r, 1, width)) for n in in_sizes]
            else:
                # keys are concatenated: zero off-diagonal blocks keep them apart
                n, m = sum(in_sizes), num_keys * width
                parts = [(torch.zeros(r, n, m), torch.zeros(r, 1, m))]
            layers.append(parts)
            in_sizes = [width] * branches

        if self.act_spec.kind == "discrete":
            nvec = self.act_spec.nvec
            self._head_pad = max(nvec)
            # logits of head i fill columns [i * pad, i * pad + n_i), so a [N, heads, pad] view
            # serves all heads with one log-softmax and one sampling race
            num_logits = len(nvec) * self._head_pad
            cols = num_logits + 1
        else:
            a = self.act_spec.dim
            # [mean | std | -1/(2 var) | -sum(log_std + log(2 pi)/2) | value]: the per-row
            # Gaussian terms come out of the head as constant columns, already in agent order
            num_logits = a
            cols = 3 * a + 2
        head_w = torch.zeros(r, feat, cols)
        head_b = torch.zeros(r, 1, cols)
        if self.act_spec.kind == "discrete":
            head_b[:, :, :num_logits] = _PAD_LOGIT
        self._num_logits = num_logits
        # the head's input rows each head reads: with a critic of its own, the policy's
        # branch comes first, the critic's after it; otherwise both read all of them
        branch = self.widths[-1] if self.critic else 0
        self._policy_rows = slice(0, branch or None)
        self._value_rows = slice(branch, None)
        norm = self.normalize_input
        self._weights = _Weights(
            norm_mean=torch.zeros(r, 1, d) if norm else None,
            norm_std=torch.ones(r, 1, d) if norm else None,
            norm_lo=torch.full((r, 1, d), -math.inf) if norm else None,
            norm_hi=torch.full((r, 1, d), math.inf) if norm else None,
            layers=layers,
            head_w=head_w,
            head_b=head_b,
        )
        self.log_std = (
            torch.zeros(r, self.act_spec.dim) if self.act_spec.kind != "discrete" else None
        )
        self.ret_mean = torch.zeros(r)
        self.ret_std = torch.ones(r)
        self._selected: dict[bytes, _Weights] = {}
        self._selected_rows: dict[bytes, np.ndarray] = {}  # the rows each subset holds
        self._plan: _Plan | None = None

    # --- filling rows --------------------------------------------------------------------------
    @torch.no_grad()
    def load(self, row: int, model: ActorCritic) -> None:
        if not 0 <= row < self.num_rows:
            raise IndexError(f"row {row} outside [0, {self.num_rows})")
        if _layout(model) != self._layout:
            raise ValueError("model layout differs from the template's")
        w = self._weights
        if self.normalize_input:
            off = 0
            for key, dim in zip(self.keys, self.dims):
                norm, cols = model.obs_norms[key], slice(off, off + dim)
                # same float64 -> float32 rounding as RunningMeanStd.normalize
                w.norm_mean[row, 0, cols] = norm.mean.float()
                w.norm_std[row, 0, cols] = (norm.var + norm.eps).sqrt().float()
                w.norm_lo[row, 0, cols] = -norm.clip
                w.norm_hi[row, 0, cols] = norm.clip
                off += dim

        encoders = [_mlp_layers(model.encoders[k]) for k in self.keys]
        if self.critic:
            encoders.append(_mlp_layers(model.critic_encoders[self.keys[0]]))
        for i, parts in enumerate(w.layers):
            linears = [pairs[i][0] for pairs in encoders]
            if not self._split:
                ((weight, bias),) = parts
                r_off = c_off = 0
                for lin in linears:
                    n_in, n_out = lin.in_features, lin.out_features
                    weight[row, r_off : r_off + n_in, c_off : c_off + n_out] = lin.weight.T
                    bias[row, 0, c_off : c_off + n_out] = lin.bias
                    r_off, c_off = r_off + n_in, c_off + n_out
            else:
                for (weight, bias), lin in zip(parts, linears):
                    weight[row] = lin.weight.T
                    bias[row, 0] = lin.bias

        ph, vh = model.policy_head, model.value_head
        if self.normalize_returns:
            self.ret_mean[row] = model.ret_norm.mean.float()
            self.ret_std[row] = model.ret_norm.std.float()
        # the value column is denormalised in the head: v * std + mean folded into w and b
        scale, shift = self.ret_std[row], self.ret_mean[row]
        w.head_w[row, self._value_rows, -1] = vh.weight[0] * scale
        w.head_b[row, 0, -1] = vh.bias[0] * scale + shift
        if self.act_spec.kind == "discrete":
            off = 0
            for i, n in enumerate(self.act_spec.nvec):
                col = i * self._head_pad
                w.head_w[row, self._policy_rows, col : col + n] = ph.weight[off : off + n].T
                w.head_b[row, 0, col : col + n] = ph.bias[off : off + n]
                off += n
        else:
            a = self.act_spec.dim
            log_std = model.log_std.detach().float()
            self.log_std[row] = log_std
            w.head_w[row, self._policy_rows, :a] = ph.weight.T
            w.head_b[row, 0, :a] = ph.bias
            w.head_b[row, 0, a : 2 * a] = log_std.exp()
            w.head_b[row, 0, 2 * a : 3 * a] = -1.0 / (2 * (2 * log_std).exp())
            w.head_b[row, 0, 3 * a] = -(log_std + _HALF_LOG_2PI).sum()
        # a subset holding this row gets its new values in place: re-stacking the whole subset
        # on every load cost 14% of the forward with 8 policies updating in turn
        for key, sel in self._selected.items():
            pos = np.flatnonzero(self._selected_rows[key] == row)
            if pos.size:
                sel.copy_row(int(pos[0]), w, row)

    # --- acting ---------------------------------------------------------------------------------
    def _make_plan(self, rows: np.ndarray, key: bytes) -> _Plan:
        n = rows.shape[0]
        if n and (rows.min() < 0 or rows.max() >= self.num_rows):
            raise IndexError(f"rows must lie in [0, {self.num_rows})")
        counts = np.bincount(rows, minlength=self.num_rows)
        active = np.flatnonzero(counts)
        cnt = counts[active]
        n_max = int(cnt.max())
        order = np.argsort(rows, kind="stable")
        starts = np.cumsum(cnt) - cnt
        # short groups repeat their last agent; those padded results are simply never read
        take = starts[:, None] + np.minimum(np.arange(n_max)[None, :], cnt[:, None] - 1)
        gather = order[take].reshape(-1)
        if gather.shape[0] == n and (gather == np.arange(n)).all():
            gather_t = scatter_t = None  # agents already grouped by row in equal numbers
        else:
            slot = np.zeros(self.num_rows, np.int64)
            slot[active] = np.arange(active.shape[0])
            rank = np.empty(n, np.int64)
            rank[order] = np.arange(n) - np.repeat(starts, cnt)
            gather_t = torch.from_numpy(gather.astype(np.int64))
            scatter_t = torch.from_numpy(slot[rows] * n_max + rank)
        return _Plan(key, n_max, active, active.tobytes(), gather_t, scatter_t)

    def _weights_for(self, plan: _Plan) -> _Weights:
        if plan.active.shape[0] == self.num_rows:
            return self._weights
        sel = self._selected.get(plan.active_key)
        if sel is None:
            if len(self._selected) >= self.max_cached_subsets:
                oldest = next(iter(self._selected))
                del self._selected[oldest], self._selected_rows[oldest]
            sel = self._weights.select(torch.from_numpy(plan.active.astype(np.int64)))
            self._selected[plan.active_key] = sel
            self._selected_rows[plan.active_key] = plan.active
        return sel

    def _illegal(self, mask: Tensor, n: int) -> Tensor:
        """The action mask [N, sum(nvec)] as a [N, heads, pad] boolean of illegal entries (the
        padding columns are already at _PAD_LOGIT and stay so)."""
        nvec = self.act_spec.nvec
        legal = mask > 0
        if len(nvec) == 1:
            return ~legal.view(n, 1, nvec[0])
        out = torch.zeros(n, len(nvec), self._head_pad, dtype=torch.bool)
        for i, part in enumerate(torch.split(legal, list(nvec), dim=-1)):
            out[:, i, : nvec[i]] = ~part
        return out

    @torch.inference_mode()
    def act(
        self, obs: dict[str, Tensor], rows: np.ndarray, deterministic: bool = False
    ) -> tuple[Tensor, Tensor, Tensor]:
        """obs[k]: [N, dim]; rows: [N] row of each agent. Returns actions [N, act_dim],
        log-probs [N] and raw (denormalised) values [N], in the agents' order."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        n = rows.shape[0]
        if n == 0:
            dim = self.act_spec.dim
            return torch.zeros(0, dim, dtype=self.act_spec.dtype), torch.zeros(0), torch.zeros(0)
        key = rows.tobytes()
        plan = self._plan
        if plan is None or plan.key != key:
            plan = self._plan = self._make_plan(rows, key)
        w = self._weights_for(plan)

        if len(self.keys) == 1:
            x = obs[self.keys[0]]
        else:
            x = torch.cat([obs[k] for k in self.keys], dim=-1)
        if x.dtype != torch.float32:
            x = x.float()
        mask = obs[self.mask_key] if self.mask_key is not None else None
        flip = None
        if self.mirror is not None:  # one vector key: x is it
            flip = self.mirror.flips(x)
            x = self.mirror.obs(x, flip)
            mask = None if mask is None else self.mirror.mask(mask, flip)
        extra = self.features(x) if self.features is not None else None
        if plan.gather is not None:
            x = x.index_select(0, plan.gather)
            extra = None if extra is None else extra.index_select(0, plan.gather)
        x = x.reshape(-1, plan.n_max, self.in_dim)
        if w.norm_mean is not None:
            x = torch.sub(x, w.norm_mean).div_(w.norm_std).clamp_(w.norm_lo, w.norm_hi)
        if extra is not None:
            x = torch.cat([x, extra.reshape(-1, plan.n_max, self.features_size)], dim=-1)

        act = self._act
        if self._split:
            xs = [x, x] if self.critic else x.split(self.dims, dim=-1)
            for parts in w.layers:
                xs = [act(torch.baddbmm(b, xk, wk)) for (wk, b), xk in zip(parts, xs)]
            x = torch.cat(xs, dim=-1)
        else:
            for ((wk, b),) in w.layers:
                x = act(torch.baddbmm(b, x, wk))

        out = torch.baddbmm(w.head_b, x, w.head_w)
        out = out.view(-1, out.shape[-1])
        if plan.scatter is not None:
            out = out.index_select(0, plan.scatter)
        values = out[:, -1]

        if self.act_spec.kind == "discrete":
            heads, pad = len(self.act_spec.nvec), self._head_pad
            logits = out[:, : self._num_logits].view(n, heads, pad)
            if mask is not None:
                logits = logits.masked_fill(self._illegal(mask, n), _PAD_LOGIT)
            log_softmax = torch.log_softmax(logits, dim=-1)
            if deterministic:
                actions = logits.argmax(dim=-1)
            else:
                # Exponential race, as torch.multinomial does for one sample but without its
                # input checks, which cost more than the whole network at these sizes:
                # argmin E_i / p_i with E_i = -log(u_i) picks i with probability p_i. u < 1
                # makes log(u) < 0, so zero-probability (padding) entries give -inf. A draw
                # of u = 0 (one in 2^24) would give -inf to a legal entry too: with one legal
                # action every entry would tie and argmax would pick entry 0, legal or not;
                # the clamp keeps legal entries finite.
                u = torch.rand_like(log_softmax).clamp_(min=_TINY)
                race = u.log_().div_(log_softmax.exp())
                actions = race.argmax(dim=-1)
            log_probs = log_softmax.gather(-1, actions.unsqueeze(-1)).view(n, heads)
            log_probs = log_probs.view(n) if heads == 1 else log_probs.sum(-1)
            if flip is not None:  # back to the env's orientation
                actions = self.mirror.actions(actions, flip)
            return actions, log_probs, values

        a = self.act_spec.dim
        mean, std = out[:, :a], out[:, a : 2 * a]
        if deterministic:
            actions = mean.contiguous()
        else:
            actions = torch.addcmul(mean, std, torch.randn(n, a))
        # from the actions themselves, as the learner will recompute it
        diff = actions - mean
        log_probs = (diff * diff * out[:, 2 * a : 3 * a]).sum(-1) + out[:, 3 * a]
        return actions, log_probs, values
