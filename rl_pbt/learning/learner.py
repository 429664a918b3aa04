"""Learner of one policy: gathers trajectories from shared memory, runs APPO epochs, publishes
weights with a version counter, saves checkpoints and takes PBT updates.

Collaborators: TrajectoryBuffers/SlotPool (data in, slots back), ParamStore (weights out,
PBT transfers), the pure math in advantages.py/losses.py. `learner_process.py` drives it in
its own process; serial mode calls the same methods directly.
"""

from __future__ import annotations

import glob
import os
import time
from typing import Optional

import torch
from torch import nn

from rl_pbt.config.flags import TUNED_HPARAMS
from rl_pbt.config.parse import recurrence
from rl_pbt.learning.advantages import gae, vtrace
from rl_pbt.learning.losses import (
    clipped_value_loss,
    entropy_loss,
    normalize_advantages,
    ppo_policy_loss,
)
from rl_pbt.logging.files import atomic_write, checkpoint_dir
from rl_pbt.memory.buffers import LEARNER, QUEUED, TrajectoryBuffers
from rl_pbt.memory.param_store import ParamStore, flat_state_size, flatten_state, unflatten_state
from rl_pbt.memory.slots import SlotPool
from rl_pbt.models.actor_critic import ActorCritic


def default_hparams(cfg) -> dict[str, float]:
    return {k: float(getattr(cfg, k)) for k in TUNED_HPARAMS}


def transfer_size(model: nn.Module) -> int:
    n_params = sum(p.numel() for p in model.parameters())
    return flat_state_size(model) + 2 * n_params + 2


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
    ):
        self.cfg = cfg
        self.policy_id = policy_id
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.model.train()
        self.buffers = buffers
        self.pool = slot_pool
        self.params = params
        self.exp_dir = exp_dir
        self.hp = default_hparams(cfg)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(),
            lr=self.hp["learning_rate"],
            betas=(cfg.adam_beta1, cfg.adam_beta2),
            eps=cfg.adam_eps,
        )
        self.version = 0
        self.env_steps = 0
        self.pending: list[int] = []
        self.traj_per_iteration = cfg.batch_size * cfg.num_batches_per_epoch // cfg.rollout
        self.traj_per_minibatch = cfg.batch_size // cfg.rollout
        self.rec = recurrence(cfg)
        self.last_save = time.monotonic()
        self.stats: dict[str, float] = {}
        self.copied_at: Optional[float] = None  # wall time of the last PBT weight copy
        self.fresh_at: Optional[float] = None  # first trajectory from the copied weights came
        # (copied, first fresh trajectory, first trained) wall times, for the runner's log
        self.copy_timing: Optional[tuple[float, float, float]] = None

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
        this policy, trainable ones also lie within `max_policy_lag` of its version."""
        b = self.buffers
        own = b.valid.index_select(0, idx) & (b.policy_id.index_select(0, idx) == self.policy_id)
        lag = self.version - b.policy_version.index_select(0, idx)
        return own, own & (lag <= self.cfg.max_policy_lag)

    def ready(self) -> bool:
        return len(self.pending) >= self.traj_per_iteration

    def train_if_ready(self) -> bool:
        if self.env_steps >= self.cfg.train_for_env_steps:
            # this policy's budget is spent while others may still train (or the run is
            # stopping): its experience is released untrained, so a resumed run that has
            # nothing left to do saves the same state it loaded
            if self.pending:
                self.pool.release(self.pending)
                self.pending = []
            return False
        if self.copied_at is not None:
            self._drop_stale()
        if not self.ready():
            return False
        slots = self.pending[: self.traj_per_iteration]
        self.pending = self.pending[self.traj_per_iteration :]
        batch = self.buffers.gather(slots, self.device)
        self.pool.release(slots)  # data is copied out: the slots can be refilled at once
        self.train_on(batch)
        self.publish()
        return True

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
    def train_on(self, batch: dict[str, torch.Tensor]) -> None:
        cfg, hp, model = self.cfg, self.hp, self.model
        t = cfg.rollout
        obs_all = {k[4:]: v for k, v in batch.items() if k.startswith("obs.")}
        obs = {k: v[:, :t] for k, v in obs_all.items()}
        actions, old_logp = batch["actions"], batch["log_probs"]
        rewards, dones, values_raw = batch["rewards"], batch["dones"], batch["values"]
        own = batch["valid"] & (batch["policy_id"] == self.policy_id)
        lag = self.version - batch["policy_version"]
        mask = own & (lag <= cfg.max_policy_lag)
        self.env_steps += int(own.sum()) * cfg.env_frameskip
        if self.copied_at is not None and bool(mask.any()):
            # the first update on experience produced by the copied weights
            now = time.time()
            self.copy_timing = (self.copied_at, self.fresh_at or now, now)
            self.copied_at = self.fresh_at = None

        if cfg.normalize_input:
            model.update_normalizers(obs, mask)
        with torch.no_grad():
            if cfg.with_vtrace:
                cur_logp, _, cur_v = model.evaluate(
                    obs, actions, batch["rnn_states"], dones, self.rec
                )
                cur_values = model.denormalize_value(cur_v)
                log_rhos = torch.where(mask, cur_logp - old_logp, torch.zeros_like(cur_logp))
                discounts = hp["gamma"] * (1.0 - dones)
                vs, adv = vtrace(
                    log_rhos.T,
                    discounts.T,
                    rewards.T,
                    cur_values.T,
                    values_raw[:, t],
                    cfg.vtrace_rho,
                    cfg.vtrace_c,
                )
                returns, adv = vs.T, adv.T
            else:
                adv, returns = gae(rewards.T, values_raw.T, dones.T, hp["gamma"], cfg.gae_lambda)
                adv, returns = adv.T, returns.T
            if cfg.normalize_returns:
                model.ret_norm.update(returns[mask])
            targets = model.normalize_value(returns)
            old_values = model.normalize_value(torch.nan_to_num(values_raw[:, :t]))

        n = actions.shape[0]
        sums: dict[str, float] = {}
        steps = 0
        for _ in range(cfg.num_epochs):
            order = torch.randperm(n, device=self.device)
            for start in range(0, n, self.traj_per_minibatch):
                mb = order[start : start + self.traj_per_minibatch]
                m = mask[mb]
                logp, ent, values = model.evaluate(
                    {k: v[mb] for k, v in obs.items()},
                    actions[mb],
                    batch["rnn_states"][mb] if model.use_rnn else None,
                    dones[mb],
                    self.rec,
                )
                a = adv[mb]
                if cfg.normalize_advantage:
                    a = normalize_advantages(a, m)
                pl, pstats = ppo_policy_loss(logp, old_logp[mb], a, hp["ppo_clip_ratio"], m)
                vl = clipped_value_loss(
                    values, old_values[mb], targets[mb], hp["ppo_clip_value"], m
                )
                el = entropy_loss(ent, m)
                loss = pl + hp["value_loss_coeff"] * vl + hp["exploration_loss_coeff"] * el
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = 0.0
                if hp["max_grad_norm"] > 0:
                    grad_norm = float(
                        nn.utils.clip_grad_norm_(model.parameters(), hp["max_grad_norm"])
                    )
                self.optimizer.step()
                self.version += 1
                steps += 1
                for key, val in (
                    ("policy_loss", pl.item()),
                    ("value_loss", vl.item()),
                    ("entropy", -el.item()),
                    ("grad_norm", grad_norm),
                    ("clip_fraction", pstats["clip_fraction"]),
                    ("kl", pstats["approx_kl"]),
                ):
                    sums[key] = sums.get(key, 0.0) + val
        self.stats = {k: v / max(steps, 1) for k, v in sums.items()}
        own_lag = lag[own].float()
        self.stats["policy_lag"] = float(own_lag.mean()) if own_lag.numel() else 0.0
        self.stats["masked_fraction"] = 1.0 - float(mask.sum()) / max(float(own.sum()), 1.0)
        self.stats["learning_rate"] = hp["learning_rate"]
        self.stats["value_target_mean"] = float(returns[mask].mean()) if mask.any() else 0.0

    def publish(self) -> None:
        self.params.publish(self.policy_id, self.model, self.version)

    # --- hyperparameters and PBT copies -----------------------------------------------------
    def set_hparams(self, hparams: dict[str, float]) -> None:
        unknown = set(hparams) - set(TUNED_HPARAMS)
        if unknown:
            raise ValueError(f"unknown hyperparameters for the learner: {sorted(unknown)}")
        self.hp.update({k: float(v) for k, v in hparams.items()})
        for group in self.optimizer.param_groups:
            group["lr"] = self.hp["learning_rate"]

    def _adam_moments(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        moments = []
        for p in self.model.parameters():
            st = self.optimizer.state.get(p)
            if not st:
                st = {
                    "exp_avg": torch.zeros_like(p),
                    "exp_avg_sq": torch.zeros_like(p),
                    "step": torch.zeros(()),
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

    def export_state(self) -> None:
        """Whole state (weights, normalisers, Adam moments) -> this policy's transfer row."""
        row = self.params.transfer[self.policy_id]
        self.params.transfer_seq[self.policy_id] += 1
        n_state = flat_state_size(self.model)
        flatten_state(self.model, row[:n_state])
        offset = n_state
        step = self._adam_step()
        for m, v in self._adam_moments():
            for t in (m, v):
                row[offset : offset + t.numel()].copy_(t.reshape(-1))
                offset += t.numel()
        row[offset] = step
        self.params.transfer_seq[self.policy_id] += 1

    def import_state(self, source_id: int) -> None:
        """Take the source's exported state. Experience in flight from before the copy is
        masked out by jumping the version past `max_policy_lag`."""
        row = self.params.read_transfer(source_id)
        n_state = flat_state_size(self.model)
        unflatten_state(self.model, row[:n_state])
        offset = n_state
        moments = self._adam_moments()
        step = float(row[offset + sum(2 * m.numel() for m, _ in moments)])
        with torch.no_grad():
            for m, v in moments:
                for t in (m, v):
                    t.copy_(row[offset : offset + t.numel()].view_as(t))
                    offset += t.numel()
        for p in self.model.parameters():
            self.optimizer.state[p]["step"] = torch.tensor(step)
        self.version += self.cfg.max_policy_lag + 1
        self.copied_at = time.time()
        self.fresh_at = None

    # --- checkpoints ------------------------------------------------------------------------
    def checkpoint_folder(self) -> str:
        return checkpoint_dir(self.exp_dir, self.policy_id)

    def save(self) -> str:
        folder = self.checkpoint_folder()
        os.makedirs(folder, exist_ok=True)
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "version": self.version,
            "env_steps": self.env_steps,
            "hparams": self.hp,
            "policy_id": self.policy_id,
        }
        path = os.path.join(folder, f"checkpoint_{self.version:012d}_{self.env_steps}.pth")
        atomic_write(path, lambda f: torch.save(state, f), mode="wb")
        for old in sorted(glob.glob(os.path.join(folder, "checkpoint_*.pth")))[
            : -self.cfg.keep_checkpoints
        ]:
            os.unlink(old)
        self.last_save = time.monotonic()
        return path

    def maybe_save(self) -> Optional[str]:
        if time.monotonic() - self.last_save > self.cfg.save_every_sec:
            return self.save()
        return None

    def load_latest(self) -> bool:
        path = latest_checkpoint(self.checkpoint_folder())
        if path is None:
            return False
        state = torch.load(path, map_location=self.device, weights_only=False)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        self.env_steps = int(state["env_steps"])
        self.set_hparams({k: v for k, v in state["hparams"].items() if k in TUNED_HPARAMS})
        return True


def latest_checkpoint(folder: str) -> Optional[str]:
    files = sorted(glob.glob(os.path.join(folder, "checkpoint_*.pth")))
    return files[-1] if files else None
