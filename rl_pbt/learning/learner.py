"""Learner of one policy: gathers trajectories from shared memory, runs APPO epochs, publishes
weights with a version counter, saves checkpoints and takes PBT updates.

Collaborators: TrajectoryBuffers/SlotPool (data in, slots back), ParamStore (weights out,
PBT transfers), the pure math in advantages.py/losses.py. `learner_process.py` drives it in
its own process; serial mode calls the same methods directly.

The hot path never waits for the device but once per iteration: statistics stay on the
device until one read-back at the end, which also brings the new weights to publish. On CUDA
a batch is gathered into pinned host memory and copied asynchronously, and the next batch is
gathered and copied on a side stream while the current one trains; on the CPU the same code
runs the direct path (gather, train, publish).

An iteration that goes non-finite (a NaN or infinite loss, gradient norm, reward among the
trained samples, or weight after the update) is undone: the state kept at its start (weights,
normalisers, Adam's moments and step; device copies into buffers allocated once) is put back,
its version is never published, and `bad_updates` counts it. The check rides on the same one
read-back. After MAX_BAD_UPDATES such iterations in a row the learner raises NonFiniteTraining,
and `save` never writes a non-finite state.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from rl_pbt.config.flags import TUNED_HPARAMS
from rl_pbt.config.parse import recurrence
from rl_pbt.learning.advantages import (
    bootstrap_time_limits,
    credit_to_decisions,
    gae,
    scale_rewards,
    vtrace,
)
from rl_pbt.learning.checkpoints import load_latest_checkpoint, write_checkpoint
from rl_pbt.learning.losses import (
    clipped_value_loss,
    entropy_loss,
    normalize_advantages,
    ppo_policy_loss,
)
from rl_pbt.logging.files import checkpoint_dir
from rl_pbt.memory.buffers import LEARNER, QUEUED, TrajectoryBuffers
from rl_pbt.memory.device_weights import WeightsWriter
from rl_pbt.memory.param_store import (
    ParamStore,
    flat_state_size,
    pack_state,
    transfer_size,
    unpack_state,
)
from rl_pbt.memory.slots import SlotPool
from rl_pbt.models.actor_critic import ActorCritic, SequencePlan, sequence_plan

log = logging.getLogger(__name__)

# what one iteration reads back from the device, in this order (minibatch means first); the
# last two are 1.0 when every trained reward, and every weight, buffer and Adam moment after
# the update, is finite
_MINIBATCH_STATS = ("policy_loss", "value_loss", "entropy", "grad_norm", "clip_fraction", "kl")
_BATCH_STATS = (
    "own",
    "trainable",
    "lag_sum",
    "target_sum",
    "rewards_finite",
    "state_finite",
    "rewards_clipped",
)
_LOSS_STATS = ("policy_loss", "value_loss", "entropy", "clip_fraction", "kl")

# non-finite iterations in a row (each one undone) after which a learner gives up
MAX_BAD_UPDATES = 3


class NonFiniteTraining(RuntimeError):
    """Training went non-finite MAX_BAD_UPDATES iterations in a row; the message names the
    policy, what was non-finite and what to check."""


def replayed_from_stale(stale: torch.Tensor, dones: torch.Tensor, rec: int) -> torch.Tensor:
    """[n, T] bool: steps whose recurrent state the learner rebuilds through a `stale` step of
    their sequence (the step itself included). The learner replays each sequence (a chunk of
    `rec` steps, cut after an episode's end) from its stored first state with its current
    weights, so a step that comes after one acted with weights too old (before a PBT copy)
    sees another state than its actor did: it is as stale as that step."""
    n, t = stale.shape
    stale_c = stale.reshape(n, t // rec, rec)
    dones_c = dones.reshape(n, t // rec, rec) != 0
    out = torch.empty_like(stale_c)
    carried = torch.zeros_like(stale_c[:, :, 0])
    for i in range(rec):
        carried = carried | stale_c[:, :, i]
        out[:, :, i] = carried
        carried = carried & ~dones_c[:, :, i]  # the next step starts a new episode's state
    return out.reshape(n, t)


def all_finite(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One boolean on the tensors' device: every element of every tensor is finite. Nothing
    is read back to the host."""
    return torch.stack([torch.isfinite(t).all() for t in tensors]).all()


def sums_finite(tensors: list[torch.Tensor]) -> torch.Tensor:
    """`all_finite`, the fast way for every iteration: each tensor's sum is finite, so none
    holds NaN or inf (a sum beyond the dtype's range counts too: a state that large has
    diverged all the same). One reduction per tensor, nothing as large as the tensors made;
    one boolean on the device, nothing read back."""
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in tensors:
        s = t.sum()
        by_dtype.setdefault(s.dtype, []).append(s)
    flags = [torch.isfinite(torch.stack(sums)).all() for sums in by_dtype.values()]
    return flags[0] if len(flags) == 1 else torch.stack(flags).all()


def default_hparams(cfg) -> dict[str, float]:
    return {k: float(getattr(cfg, k)) for k in TUNED_HPARAMS}


def configure_cuda(device: torch.device, cfg) -> torch.device:
    """Make `device` this process's current CUDA device (so streams, events and kernels
    without an explicit device go there) and set the kernel choices the config asks for.
    Returns the device with its index."""
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(device)
    torch.backends.cudnn.benchmark = bool(getattr(cfg, "cudnn_benchmark", False))
    tf32 = bool(getattr(cfg, "tf32", True))
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    return device


def to_device_at_once(tensors: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Host int64 tensors -> `device` in one copy (from pinned memory, asynchronous on
    CUDA); on the CPU they are returned as they are."""
    if device.type == "cpu" or not tensors:
        return tensors
    flat = torch.cat([t.reshape(-1) for t in tensors])
    if device.type == "cuda":
        flat = flat.pin_memory()
    flat = flat.to(device, non_blocking=device.type == "cuda")
    pieces = flat.split([t.numel() for t in tensors])
    return [piece.view(t.shape) for piece, t in zip(pieces, tensors)]


@dataclass
class StagedBatch:
    """One iteration's trajectories, copied out of the shared buffers."""

    host: dict[str, torch.Tensor]  # the host copy (pinned on CUDA), for host-side planning
    device: dict[str, torch.Tensor]  # on the learner's device (`host` itself on the CPU)
    copied: Optional[torch.cuda.Event] = None  # recorded after the copy on a side stream


def _minibatch_of(mb: torch.Tensor):
    """x [N, T, ...] -> the minibatch's trajectories x[mb]."""
    return lambda x: x[mb]


def _samples_of(mb: torch.Tensor, rows: torch.Tensor, t_len: int):
    """x [N, T, ...] -> the samples at the flat indices `rows` of x[mb] [len(mb), T], as
    [K, 1, ...], gathered in one step (a feed-forward model treats each sample alone: on the
    samples where the mask holds, the losses are those of the full minibatch with its mask)."""
    traj, step = mb[rows // t_len], rows % t_len
    return lambda x: x[traj, step].unsqueeze(1)


class Learner:
    def __init__(
        self,
        cfg,
        policy_id: int,
        model: ActorCritic,
        buffers: TrajectoryBuffers,
        slot_pool: SlotPool,
        params: ParamStore,
        device: str,
        exp_dir: str,
        seed: Optional[int] = None,
        turn_taking: bool = True,
    ):
        self.cfg = cfg
        self.policy_id = policy_id
        # returns over each agent's own decisions (multi-agent envs: turns, dead agents); a
        # single-agent env has invalid steps only as padding after an episode end, where the
        # plain estimators give the same result with fewer device ops
        self.turn_taking = turn_taking
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            self.device = configure_cuda(self.device, cfg)
        self.model = model.to(self.device)
        self.model.train()
        self.buffers = buffers
        self.pool = slot_pool
        self.params = params
        self.exp_dir = exp_dir
        self.hp = default_hparams(cfg)
        # fused: one kernel for every parameter's update, and no host read of the step count
        self.fused_adam = True if self.cuda else None
        self.optimizer = torch.optim.Adam(
            self.model.parameters(),
            lr=self.hp["learning_rate"],
            betas=(cfg.adam_beta1, cfg.adam_beta2),
            eps=cfg.adam_eps,
            fused=self.fused_adam,
        )
        self.amp = bool(getattr(cfg, "amp", False))
        # minibatch order: a generator of this learner's own, so that runs can be repeated
        self.generator = torch.Generator()
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)
        # gather and copy the next batch while this one trains; on the CPU nothing overlaps
        self.prefetch = self.cuda
        # on the CPU, a feed-forward model's minibatch runs only on the samples that train
        # (turn-based games: about half of every rollout is steps where the agent waits);
        # on a GPU the full batch costs about the same and picking the rows would sync
        self.compact = not self.cuda and not model.use_rnn and turn_taking
        self.copy_stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.next_batch: Optional[StagedBatch] = None
        self.version = 0
        self.env_steps = 0
        self.pending: list[int] = []
        self.traj_per_iteration = cfg.batch_size * cfg.num_batches_per_epoch // cfg.rollout
        self.traj_per_minibatch = cfg.batch_size // cfg.rollout
        self.rec = recurrence(cfg)
        self.last_save = time.monotonic()
        self.saved_env_steps = 0  # the env steps of this policy's newest checkpoint
        self.stats: dict[str, float] = {}
        self.copied_at: Optional[float] = None  # wall time of the last PBT weight copy
        self.copy_decided_at: Optional[float] = None  # when PBT decided that copy
        self.fresh_at: Optional[float] = None  # first trajectory from the copied weights came
        # (decided, copied, first fresh trajectory, first trained) wall times, for the runner
        # (decided: None for a copy sent without its decision time, which is not timed)
        self.copy_timing: Optional[tuple[Optional[float], float, float, float]] = None
        # the state at the start of the current iteration, to undo it if it goes non-finite
        self.kept: list[torch.Tensor] = []  # copies of `_live_state()`, allocated once
        self.kept_adam: tuple[bool, ...] = ()  # which parameters had Adam state then
        self.kept_version = 0
        self.bad_updates = 0  # non-finite iterations undone, in all
        self.bad_in_a_row = 0
        self.clip_noted = False  # the first clipped reward is noted once, in the log
        self.bad_what: list[str] = []  # what was non-finite, over the current streak
        # --inference=device: weights go to the inference server on the device, not the host
        self.device_weights: Optional[WeightsWriter] = None

    def share_weights(self, board, weights_queue) -> None:
        """Serve through an inference server: hand it this learner's device buffer; from now
        on each iteration publishes there (the host row keeps only the version)."""
        self.device_weights = WeightsWriter(board, self.policy_id, self.model, self.device)
        weights_queue.put(self.device_weights.message())

    # --- data in --------------------------------------------------------------------------
    def add(self, slots: list[int]) -> None:
        self.buffers.transfer(slots, QUEUED, LEARNER)
        self.pending.extend(slots)
        if self.copied_at is not None and self.fresh_at is None and slots:
            _, trainable = self._trainable(torch.as_tensor(slots, dtype=torch.long))
            if bool(trainable.any()):
                self.fresh_at = time.time()

    def _trainable(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For the slots `idx`: (own, trainable) sample masks; own samples were produced by
        this policy, trainable ones also lie within `max_policy_lag` of its version (and, for
        a recurrent policy, are not replayed through a step that does not: the mask the
        update uses, so that a slot kept for training has something to train on)."""
        b = self.buffers
        valid = b.valid.index_select(0, idx)
        own = valid & (b.policy_id.index_select(0, idx) == self.policy_id)
        lag = self.version - b.policy_version.index_select(0, idx)
        return own, own & self._fresh(lag, valid, b.dones.index_select(0, idx))

    def _fresh(self, lag: torch.Tensor, valid: torch.Tensor, dones: torch.Tensor):
        """Samples acted within `max_policy_lag` of this version, and for a recurrent policy
        not replayed through a step that was not (`replayed_from_stale`): what an update
        trains on, of its own samples."""
        fresh = lag <= min(self.cfg.max_policy_lag, torch.iinfo(lag.dtype).max)
        if self.rec > 1:
            fresh = fresh & ~replayed_from_stale(valid & ~fresh, dones, self.rec)
        return fresh

    def ready(self) -> bool:
        return self.next_batch is not None or len(self.pending) >= self.traj_per_iteration

    def train_if_ready(self) -> bool:
        if self.env_steps >= self.cfg.train_for_env_steps:
            # this policy's budget is spent while others may still train (or the run is
            # stopping): its experience is released untrained, so a resumed run that has
            # nothing left to do saves the same state it loaded
            if self.pending:
                self.pool.release(self.pending)
                self.pending = []
            self.next_batch = None  # its slots went back when it was staged
            return False
        if self.copied_at is not None:
            self._drop_stale()
        if not self.ready():
            return False
        batch = self.next_batch or self._stage(self._take_iteration())
        self.next_batch = None
        stats = self._update(batch)
        if self.prefetch and len(self.pending) >= self.traj_per_iteration:
            # the device is busy with the update just queued: stage the next batch meanwhile
            self.next_batch = self._stage(self._take_iteration(), side_stream=True)
        self._finish(stats, publish=True)
        return True

    def _take_iteration(self) -> list[int]:
        slots = self.pending[: self.traj_per_iteration]
        self.pending = self.pending[self.traj_per_iteration :]
        return slots

    def _stage(self, slots: list[int], side_stream: bool = False) -> StagedBatch:
        """Copy `slots` out of the shared buffers and give them back to the pool at once; on
        CUDA start the copy to the device (on the side stream when prefetching)."""
        host = self.buffers.gather(slots, "cpu", pin_memory=self.cuda)
        self.pool.release(slots)  # data is copied out: the slots can be refilled at once
        if not self.cuda:
            return StagedBatch(host, host)
        stream = self.copy_stream if side_stream else torch.cuda.current_stream(self.device)
        with torch.cuda.stream(stream):
            device = {k: v.to(self.device, non_blocking=True) for k, v in host.items()}
            copied = torch.cuda.Event()
            copied.record(stream)
        return StagedBatch(host, device, copied)

    def _arrived(self, staged: StagedBatch) -> dict[str, torch.Tensor]:
        """The staged batch's device tensors, usable on the current stream."""
        if staged.copied is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(staged.copied)  # the device waits, not the host
            for t in staged.device.values():
                t.record_stream(current)  # memory from the side stream, freed after our use
        return staged.device

    def _drop_stale(self) -> None:
        """Release pending slots that hold no sample this policy may train on (all of them
        older than `max_policy_lag` versions, as after a PBT copy), so that the first update
        after a copy waits for fresh experience only, not for useless updates on masked data.
        Their samples still count as env steps."""
        if not self.pending:
            return
        own, trainable = self._trainable(torch.as_tensor(self.pending, dtype=torch.long))
        keep = trainable.any(dim=1)
        if bool(keep.all()):
            return
        self.env_steps += int(own[~keep].sum()) * self.cfg.env_frameskip
        keep_list = keep.tolist()
        self.pool.release([s for s, k in zip(self.pending, keep_list) if not k])
        self.pending = [s for s, k in zip(self.pending, keep_list) if k]

    # --- the APPO update --------------------------------------------------------------------
    def train_on(
        self, batch: dict[str, torch.Tensor], host: Optional[dict[str, torch.Tensor]] = None
    ) -> None:
        """One iteration on `batch` (on this learner's device, as `TrajectoryBuffers.gather`
        makes it); `host`: its host copy, if at hand (an RNN plans its sequences there; on
        CUDA, without it, the dones are read back once more)."""
        if host is None:
            host = batch if self.device.type == "cpu" else {"dones": batch["dones"].cpu()}
        self._finish(self._update(StagedBatch(host, batch)), publish=False)

    def _update(self, staged: StagedBatch) -> torch.Tensor:
        """Queue one iteration's epochs on the device; returns its statistics, still there
        (`_MINIBATCH_STATS` averaged over minibatches, then `_BATCH_STATS`)."""
        cfg, hp, model = self.cfg, self.hp, self.model
        self._keep_state()
        entropy_coeff = hp["exploration_loss_coeff"] * self._set_annealed_lr()
        batch = self._arrived(staged)
        t = cfg.rollout
        obs = {k[4:]: v[:, :t] for k, v in batch.items() if k.startswith("obs.")}
        # in the network's orientation once, for every pass below (an env's mirror symmetry)
        obs, actions = model.to_canonical(obs, batch["actions"])
        old_logp = batch["log_probs"]
        rewards, dones, values_raw = batch["rewards"], batch["dones"], batch["values"]
        scaled = scale_rewards(rewards, cfg.reward_scale, cfg.reward_clip)
        late = batch.get("late_rewards")  # scaled and clipped (finite) by the rollout workers
        if late is not None:
            scaled[:, t - 1] += late
        valid = batch["valid"]
        own = valid & (batch["policy_id"] == self.policy_id)
        lag = self.version - batch["policy_version"]
        mask = own & self._fresh(lag, valid, dones)
        n = actions.shape[0]
        order, plans, full_plan = self._minibatch_plan(n, staged.host["dones"])

        if cfg.normalize_input:
            model.update_normalizers(obs, mask, canonical=True)
        features = None  # the env's observation features, once for every pass below: of the
        # trained samples alone where the minibatches take only those, else of all
        if cfg.with_vtrace or cfg.num_epochs > 1:
            only_trained = self.compact and not cfg.with_vtrace
            with torch.no_grad():
                rows = mask if only_trained else None
                features = model.obs_features_of(obs, rows, canonical=True)
        with torch.no_grad():
            if cfg.with_vtrace:
                with self._autocast():
                    cur_logp, _, cur_v = model.evaluate(
                        obs,
                        actions,
                        batch["rnn_states"],
                        dones,
                        self.rec,
                        plan=full_plan,
                        features=features,
                        canonical=True,
                    )
                cur_values = model.denormalize_value(cur_v.float())
                log_rhos = torch.where(mask, cur_logp.float() - old_logp, 0.0)
                step_rewards, step_dones, turns = scaled.T, dones.T, None
                if cfg.value_bootstrap:
                    step_rewards = self._bootstrap_cuts(batch, step_rewards, cur_values.T)
                if self.turn_taking:  # over each agent's own decisions
                    turns = valid.T
                    step_rewards, step_dones = credit_to_decisions(step_rewards, step_dones, turns)
                vs, adv = vtrace(
                    log_rhos.T,
                    hp["gamma"] * (1.0 - step_dones),
                    step_rewards,
                    cur_values.T,
                    values_raw[:, t],
                    cfg.vtrace_rho,
                    cfg.vtrace_c,
                    valid=turns,
                )
                returns, adv = vs.T, adv.T
            else:
                turns = valid.T if self.turn_taking else None
                step_rewards = scaled.T
                if cfg.value_bootstrap:
                    step_rewards = self._bootstrap_cuts(batch, step_rewards, values_raw[:, :t].T)
                adv, returns = gae(
                    step_rewards, values_raw.T, dones.T, hp["gamma"], cfg.gae_lambda, valid=turns
                )
                adv, returns = adv.T, returns.T
            if cfg.normalize_returns:
                model.ret_norm.update_masked(returns, mask)
            targets = model.normalize_value(returns)
            old_values = model.normalize_value(torch.nan_to_num(values_raw[:, :t]))

        sums = torch.zeros(len(_MINIBATCH_STATS), device=self.device)
        no_norm = torch.zeros((), device=self.device)
        for mb, plan in zip(order, plans):
            m = mask[mb]
            pick = _minibatch_of(mb)
            if self.compact:
                rows = m.reshape(-1).nonzero().squeeze(1)
                if rows.numel():  # else: the whole minibatch, all masked
                    pick = _samples_of(mb, rows, t)
                    m = m.new_ones(rows.numel(), 1)
            with self._autocast():
                logp, ent, values = model.evaluate(
                    {k: pick(v) for k, v in obs.items()},
                    pick(actions),
                    batch["rnn_states"][mb] if model.use_rnn else None,
                    pick(dones),
                    self.rec,
                    plan=plan,
                    features=None if features is None else pick(features),
                    canonical=True,
                )
                # the losses are reduced in float32 whatever the forward pass ran in
                logp, ent, values = logp.float(), ent.float(), values.float()
                a = pick(adv)
                if cfg.normalize_advantage:
                    a = normalize_advantages(a, m)
                pl, pstats = ppo_policy_loss(logp, pick(old_logp), a, hp["ppo_clip_ratio"], m)
                vl = clipped_value_loss(
                    values, pick(old_values), pick(targets), hp["ppo_clip_value"], m
                )
                el = entropy_loss(ent, m)
                loss = pl + hp["value_loss_coeff"] * vl + entropy_coeff * el
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = no_norm
            if hp["max_grad_norm"] > 0:
                grad_norm = nn.utils.clip_grad_norm_(model.parameters(), hp["max_grad_norm"])
            self.optimizer.step()
            self.version += 1
            step_stats = (pl, vl, -el, grad_norm, pstats["clip_fraction"], pstats["approx_kl"])
            sums += torch.stack([s.detach().float() for s in step_stats])

        zero = torch.zeros((), device=self.device)
        per_batch = torch.stack(
            [
                own.sum().float(),
                mask.sum().float(),
                torch.where(mask, lag, 0).sum().float(),  # over what is trained on
                torch.where(mask, returns, zero).sum().float(),
                torch.isfinite(torch.where(mask, rewards, zero)).all().float(),
                sums_finite(self._live_state(steps=False)).float(),
                (own & ((rewards * cfg.reward_scale).abs() > cfg.reward_clip)).sum().float(),
            ]
        )
        return torch.cat([sums / len(plans), per_batch])

    def _autocast(self) -> torch.autocast:
        """bfloat16 forward passes and losses with --amp (the backward pass follows them)."""
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.amp)

    def _bootstrap_cuts(
        self, batch: dict, rewards: torch.Tensor, values: torch.Tensor
    ) -> torch.Tensor:
        """Rewards [T, B] where the episodes that a time limit cut (`truncated` and not
        `terminated`) bootstrap from the value of their last state (`--value_bootstrap`)."""
        return bootstrap_time_limits(
            rewards,
            values,
            batch["timeouts"].T,
            batch["dones"].T,
            self.hp["gamma"],
            valid=batch["valid"].T if self.turn_taking else None,
        )

    def _minibatch_plan(
        self, n: int, host_dones: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[Optional[SequencePlan]], Optional[SequencePlan]]:
        """Host-side planning of one iteration: the minibatches' trajectory indices (from this
        learner's generator) and, with an RNN, their sequence plans and the whole batch's;
        all moved to the device in one copy."""
        order = [torch.randperm(n, generator=self.generator) for _ in range(self.cfg.num_epochs)]
        minibatches = [
            perm[start : start + self.traj_per_minibatch]
            for perm in order
            for start in range(0, n, self.traj_per_minibatch)
        ]
        if not self.model.use_rnn:
            return to_device_at_once(minibatches, self.device), [None] * len(minibatches), None
        dones = host_dones.numpy()
        plans = [sequence_plan(dones[mb.numpy()], self.rec) for mb in minibatches]
        plans.append(sequence_plan(dones, self.rec))
        moved = to_device_at_once(
            minibatches + [x for p in plans for x in (p.packed_from, p.packed_at, p.h0_from)],
            self.device,
        )
        k = len(minibatches)
        indices = iter(moved[k:])  # three per plan, in the order they went in
        plans = [
            SequencePlan(next(indices), next(indices), p.batch_sizes, next(indices)) for p in plans
        ]
        return moved[:k], plans[:-1], plans[-1]

    def _finish(self, stats: torch.Tensor, publish: bool) -> None:
        """The iteration's one wait for the device: its statistics come back, with the new
        weights in the same copy when they are to be published."""
        k = len(stats)
        to_host = publish and self.device_weights is None
        if to_host:
            host = torch.cat([stats, pack_state(self.model)]).cpu()
        else:
            if publish:
                self.device_weights.stage(self.model)  # done by the time the stats are back
            host = stats.cpu()
        values = dict(zip(_MINIBATCH_STATS + _BATCH_STATS, host[:k].numpy().tolist()))
        own, trainable = values.pop("own"), values.pop("trainable")
        lag_sum, target_sum = values.pop("lag_sum"), values.pop("target_sum")
        rewards_finite, state_finite = values.pop("rewards_finite"), values.pop("state_finite")
        clipped = values.pop("rewards_clipped")
        self.env_steps += int(own) * self.cfg.env_frameskip  # sampled, even if undone below
        bad = [name for name, ok in self._checks(values, rewards_finite, state_finite) if not ok]
        if bad:
            self._undo(bad)  # nothing published: workers keep acting with finite weights
            return
        self.bad_in_a_row, self.bad_what = 0, []
        if self.copied_at is not None and trainable > 0:
            # the first update on experience produced by the copied weights
            now = time.time()
            self.copy_timing = (self.copy_decided_at, self.copied_at, self.fresh_at or now, now)
            self.copied_at = self.fresh_at = self.copy_decided_at = None
        self.stats = values
        # samples too old to train on (all of a batch sampled before a PBT copy, whose version
        # jump puts it past --max_policy_lag) show in masked_fraction, not in the lag
        self.stats["policy_lag"] = lag_sum / trainable if trainable else 0.0
        self.stats["masked_fraction"] = 1.0 - trainable / max(own, 1.0)
        self.stats["learning_rate"] = self.optimizer.param_groups[0]["lr"]  # annealed
        self.stats["value_target_mean"] = target_sum / trainable if trainable else 0.0
        self.stats["bad_updates"] = float(self.bad_updates)
        self.stats["rewards_clipped_fraction"] = clipped / max(own, 1.0)
        if clipped and not self.clip_noted:
            self._note_clipped(clipped, own)
        if to_host:
            self.params.publish_flat(self.policy_id, host[k:], self.version)
        elif publish:
            self.device_weights.announce(self.version)
            self.params.set_version(self.policy_id, self.version)

    def _note_clipped(self, clipped: float, own: float) -> None:
        """One line, the first time any reward is clipped: a silent clip would change what the
        policy learns (its share of each iteration is logged as rewards_clipped_fraction)."""
        self.clip_noted = True
        log.warning(
            "policy %d: %d of %d rewards in this iteration exceeded --reward_clip=%g after "
            "--reward_scale=%g and were clipped; raise --reward_clip or lower --reward_scale "
            "if the env's rewards are meant to be that large (noted once; the share clipped "
            "is logged as rewards_clipped_fraction)",
            self.policy_id,
            int(clipped),
            int(own),
            self.cfg.reward_clip,
            self.cfg.reward_scale,
        )

    # --- non-finite iterations --------------------------------------------------------------
    def _live_state(self, steps: bool = True) -> list[torch.Tensor]:
        """What an iteration changes: the model's weights and buffers (normalisers), then
        Adam's moments (and step, unless `steps` is False: a count, finite, and on the host
        for the unfused kernel) of each parameter that has them."""
        tensors = [*self.model.parameters(), *self.model.buffers()]
        for p in self.model.parameters():
            st = self.optimizer.state.get(p)
            if st:
                tensors += [st["exp_avg"], st["exp_avg_sq"]] + ([st["step"]] if steps else [])
        return tensors

    def _keep_state(self) -> None:
        """Copy the state at the start of an iteration into the kept buffers, on the device
        (queued like the update itself: no wait). The buffers are allocated again only when
        the state's layout changed (Adam's state appearing after the first step, a load)."""
        live = self._live_state()
        kept = self.kept
        if len(kept) != len(live) or any(
            a.shape != b.shape or a.dtype != b.dtype or a.device != b.device
            for a, b in zip(kept, live)
        ):
            kept = self.kept = [torch.empty_like(t, requires_grad=False) for t in live]
        with torch.no_grad():
            for copy, t in zip(kept, live):
                copy.copy_(t)
        self.kept_adam = tuple(bool(self.optimizer.state.get(p)) for p in self.model.parameters())
        self.kept_version = self.version

    def _restore_state(self) -> None:
        """Put back the state kept at the start of the iteration, bit for bit; Adam's state
        made during the iteration goes, as it was not there."""
        for p, had in zip(self.model.parameters(), self.kept_adam):
            if not had and self.optimizer.state.get(p):
                del self.optimizer.state[p]
        live = self._live_state()
        assert len(live) == len(self.kept), "the learner's state changed shape mid-iteration"
        with torch.no_grad():
            for t, copy in zip(live, self.kept):
                t.copy_(copy)
        self.version = self.kept_version

    @staticmethod
    def _checks(
        values: dict[str, float], rewards_finite: float, state_finite: float
    ) -> list[tuple[str, bool]]:
        """(what, whether it was finite) for one iteration, from its read-back statistics."""
        return [
            ("loss", all(math.isfinite(values[k]) for k in _LOSS_STATS)),
            ("gradient norm", math.isfinite(values["grad_norm"])),
            ("rewards from the env", rewards_finite == 1.0),
            ("weights or Adam moments after the update", state_finite == 1.0),
        ]

    def _undo(self, bad: list[str]) -> None:
        """A non-finite iteration: restore the state from its start (its version too), count
        it, and give up after MAX_BAD_UPDATES in a row."""
        self._restore_state()
        self.bad_updates += 1
        self.bad_in_a_row += 1
        self.bad_what += [what for what in bad if what not in self.bad_what]
        self.stats = {**self.stats, "bad_updates": float(self.bad_updates)}
        if self.bad_in_a_row >= MAX_BAD_UPDATES:
            raise NonFiniteTraining(self._non_finite_message())
        log.warning(
            "policy %d: non-finite %s; the update was undone (weights stay at version %d, "
            "%d of %d allowed in a row)",
            self.policy_id,
            ", ".join(bad),
            self.version,
            self.bad_in_a_row,
            MAX_BAD_UPDATES,
        )

    def _non_finite_message(self) -> str:
        values = ", ".join(f"--{k}={self.hp[k]:g}" for k in TUNED_HPARAMS)
        return (
            f"policy {self.policy_id}: training went non-finite {self.bad_in_a_row} iterations "
            f"in a row (non-finite: {', '.join(self.bad_what)}). Each update was undone: the "
            f"weights stay finite at version {self.version}, and no checkpoint holds NaN or "
            "inf. Check that the env's rewards and observations are finite, and the learning "
            f"values this policy trains with: {values} (the command line's, or as PBT or "
            "--policy_values set them); a learning rate too large (or not finite) is the "
            "usual cause."
        )

    def publish(self) -> None:
        self.params.publish(self.policy_id, self.model, self.version)
        if self.device_weights is not None:
            self.device_weights.publish(self.model, self.version)

    # --- hyperparameters and PBT copies -----------------------------------------------------
    def set_hparams(self, hparams: dict[str, float]) -> None:
        unknown = set(hparams) - set(TUNED_HPARAMS)
        if unknown:
            raise ValueError(f"unknown hyperparameters for the learner: {sorted(unknown)}")
        self.hp.update({k: float(v) for k, v in hparams.items()})
        self._set_annealed_lr()

    def anneal_factor(self) -> float:
        """What --anneal_env_steps leaves of the learning rate and entropy bonus now: 1 at 0
        env steps, falling linearly to --anneal_final_fraction at N and staying there."""
        n = self.cfg.anneal_env_steps
        if not n:
            return 1.0
        done = min(self.env_steps / n, 1.0)
        return 1.0 - (1.0 - self.cfg.anneal_final_fraction) * done

    def _set_annealed_lr(self) -> float:
        """The optimiser's learning rate := this policy's value x `anneal_factor()`, which
        it returns."""
        factor = self.anneal_factor()
        for group in self.optimizer.param_groups:
            group["lr"] = self.hp["learning_rate"] * factor
        return factor

    def _step_tensor(self, value: float, p: torch.Tensor) -> torch.Tensor:
        """Adam's step count as Adam keeps it: on the device for the fused kernel, else on
        the host (float32 either way)."""
        device = p.device if self.fused_adam else torch.device("cpu")
        return torch.tensor(value, dtype=torch.float32, device=device)

    def _adam_moments(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        moments = []
        for p in self.model.parameters():
            st = self.optimizer.state.get(p)
            if not st:
                st = {
                    "exp_avg": torch.zeros_like(p),
                    "exp_avg_sq": torch.zeros_like(p),
                    "step": self._step_tensor(0.0, p),
                }
                self.optimizer.state[p] = st
            moments.append((st["exp_avg"], st["exp_avg_sq"]))
        return moments

    def _adam_step(self) -> float:
        for p in self.model.parameters():
            st = self.optimizer.state.get(p)
            if st and "step" in st:
                return float(st["step"])
        return 0.0

    def export_state(self, row: Optional[int] = None) -> None:
        """Whole state (weights, normalisers, Adam moments, step) -> this policy's transfer
        row (or `row`), packed on the device and copied out at once."""
        step = self._adam_step()
        moments = self._adam_moments()
        flat = torch.cat(
            [
                pack_state(self.model),
                *(m.reshape(-1) for m, _ in moments),
                *(v.reshape(-1) for _, v in moments),
                torch.full((1,), step, dtype=torch.float32, device=self.device),
            ]
        )
        self.params.write_transfer(self.policy_id if row is None else row, flat)

    def import_state(self, source_id: int, decided_at: Optional[float] = None) -> None:
        """Take the source's exported state. Experience in flight from before the copy is
        masked out by jumping the version past `max_policy_lag`. `decided_at`: when PBT
        decided the copy (the latency reported after the first update counts from there)."""
        row = self.params.read_transfer(source_id)
        size = transfer_size(self.model)
        step = float(row[size - 1])  # read on the host copy
        flat = row[:size].to(self.device)  # one copy to the device
        n_state = flat_state_size(self.model)
        unpack_state(self.model, flat[:n_state])
        offset = n_state
        moments = self._adam_moments()
        with torch.no_grad():
            for t in [m for m, _ in moments] + [v for _, v in moments]:
                t.copy_(flat[offset : offset + t.numel()].view_as(t))
                offset += t.numel()
        for p in self.model.parameters():
            self.optimizer.state[p]["step"] = self._step_tensor(step, p)
        if self.next_batch is not None:
            # staged before the copy, so all of it now lies beyond max_policy_lag: dropped
            # like _drop_stale's slots, its samples counted on its host copy
            host = self.next_batch.host
            own = host["valid"] & (host["policy_id"] == self.policy_id)
            self.env_steps += int(own.sum()) * self.cfg.env_frameskip
            self.next_batch = None
        self.version += self.cfg.max_policy_lag + 1
        self.copied_at = time.time()
        self.copy_decided_at = decided_at
        self.fresh_at = None

    # --- checkpoints ------------------------------------------------------------------------
    def checkpoint_folder(self) -> str:
        return checkpoint_dir(self.exp_dir, self.policy_id)

    def save(self) -> Optional[str]:
        """Write a checkpoint and drop the oldest beyond --keep_checkpoints; returns its path.
        A state holding NaN or inf is never written: the existing checkpoints stay as they
        are and None comes back (the check reads one value back from the device)."""
        folder = self.checkpoint_folder()
        if not bool(all_finite(self._live_state(steps=False))):
            self.last_save = time.monotonic()  # not again at every poll
            log.warning(
                "policy %d: not saving a checkpoint: its weights or optimizer state hold NaN "
                "or inf; the checkpoints in %s are kept",
                self.policy_id,
                folder,
            )
            return None
        # plain tensors, numbers, strings, lists and dicts only: loadable with weights_only
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "version": int(self.version),
            "env_steps": int(self.env_steps),
            "hparams": {k: float(v) for k, v in self.hp.items()},
            "policy_id": int(self.policy_id),
        }
        # raises CheckpointWriteError (one line; the older checkpoints untouched) on a full
        # disk or any other write failure: the caller reports it and stops
        path = write_checkpoint(
            folder,
            self.version,
            self.env_steps,
            state,
            self.cfg.keep_checkpoints,
            root=self.exp_dir,  # old files are deleted only in a real folder inside it
        )
        self.last_save = time.monotonic()
        self.saved_env_steps = int(self.env_steps)
        return path

    def maybe_save(self) -> Optional[str]:
        if time.monotonic() - self.last_save > self.cfg.save_every_sec:
            return self.save()
        return None

    def load_latest(self) -> bool:
        """Resume from the newest usable checkpoint (a damaged newer one is named in a warning
        and set aside); False when there is none."""
        found = load_latest_checkpoint(
            self.checkpoint_folder(), map_location=self.device, set_aside=True
        )
        if found is None:
            return False
        _, state = found
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self._settle_optimizer()
        self.version = int(state["version"])
        self.env_steps = int(state["env_steps"])
        self.saved_env_steps = self.env_steps
        self.set_hparams({k: v for k, v in state["hparams"].items() if k in TUNED_HPARAMS})
        return True

    def run_state(self) -> dict:
        """What the checkpoint leaves out and an exact resume needs: the experience waiting
        for an update (slot numbers; a staged batch's host copy), the minibatch stream and
        the non-finite streak."""
        staged = self.next_batch
        return {
            "pending": list(self.pending),
            "staged": None if staged is None else dict(staged.host),
            "generator": self.generator.get_state(),
            "bad_in_a_row": self.bad_in_a_row,
            "bad_updates": self.bad_updates,
        }

    def load_run_state(self, state: dict) -> None:
        self.pending = [int(s) for s in state["pending"]]
        host = state["staged"]
        if host is not None:
            device = host if not self.cuda else {k: v.to(self.device) for k, v in host.items()}
            self.next_batch = StagedBatch(host, device)
        self.generator.set_state(state["generator"])
        self.bad_in_a_row = int(state["bad_in_a_row"])
        self.bad_updates = int(state["bad_updates"])

    def _settle_optimizer(self) -> None:
        """After loading a checkpoint (perhaps written on another device): this learner's
        Adam kernel, and its state where that kernel expects it; eps and betas of this run's
        flags (a resume may change them; the checkpoint's would stand for good)."""
        cfg = self.cfg
        for group in self.optimizer.param_groups:
            group.update(fused=self.fused_adam, foreach=None, capturable=False)
            group.update(eps=cfg.adam_eps, betas=(cfg.adam_beta1, cfg.adam_beta2))
        for p in self.model.parameters():
            st = self.optimizer.state.get(p)
            if not st:
                continue
            for key in ("exp_avg", "exp_avg_sq"):
                st[key] = st[key].to(device=p.device, dtype=p.dtype)
            st["step"] = self._step_tensor(float(st["step"]), p)
