"""Shared-memory trajectory slots, the only path bulk data takes between processes.

Each slot holds one agent's `rollout` steps. A slot has exactly one owner at a time
(free pool -> rollout worker -> learner queue -> learner -> free pool); `owner` records it
and every hand-over checks it. Fresh buffers hold sentinels (NaN, -1) so a read of data
that was never written shows up in tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from rl_pbt.models.action_dist import ActionSpec
from rl_pbt.models.obs import ObsSpec, torch_dtype

FREE, WORKER, QUEUED, LEARNER = 0, 1, 2, 3
# sample data besides observations (what the learner gathers): per step, then per slot
SAMPLE_FIELDS = (
    "actions",
    "log_probs",
    "values",
    "rewards",
    "dones",
    "timeouts",
    "valid",
    "policy_id",
    "policy_version",
    "rnn_states",
    "late_rewards",
)
# each field's (shape, dtype, fill), observations as "obs.KEY" (TrajectoryBuffers.layout)
Layout = dict[str, tuple[tuple[int, ...], torch.dtype, float]]
OWNER_NAMES = {
    FREE: "free pool",
    WORKER: "rollout worker",
    QUEUED: "learner queue",
    LEARNER: "learner",
}


class SlotOwnershipError(RuntimeError):
    pass


@dataclass
class TrajectoryBuffers:
    """Tensors of shape [num_slots, T(+1), ...] in shared memory, plus numpy views of them."""

    num_slots: int
    rollout: int
    obs: dict[str, torch.Tensor]
    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor  # [S, T+1]: raw values, the last one bootstraps
    rewards: torch.Tensor
    dones: torch.Tensor  # 1.0 where the episode ended after the step (terminated or truncated)
    timeouts: torch.Tensor  # True where it ended truncated (a time limit) and not terminated
    valid: torch.Tensor
    policy_id: torch.Tensor
    policy_version: torch.Tensor
    rnn_states: torch.Tensor  # [S, T // recurrence, H] (H = 0 without an RNN)
    # [S]: rewards of the agent's waiting steps after the last step (turn-taking), each scaled
    # by --reward_scale and clipped to --reward_clip, summed: they add to the last step's reward
    late_rewards: torch.Tensor
    owner: torch.Tensor  # [S] int8
    holder: torch.Tensor  # [S] int16: the rollout worker filling the slot (-1: none)

    @staticmethod
    def layout(
        num_slots: int,
        rollout: int,
        obs_spec: ObsSpec,
        act: ActionSpec,
        rnn_size: int,
        recurrence: int,
    ) -> Layout:
        """Each field's (shape, dtype, fill); observations as `obs.KEY`."""
        s, t = num_slots, rollout
        fields = {}
        for key, shape, dtype in obs_spec.items():
            tdt = torch_dtype(dtype)
            fill = 255 if tdt == torch.uint8 else float("nan")
            fields[f"obs.{key}"] = ((s, t + 1, *shape), tdt, fill)
        act_fill = -1 if act.dtype == torch.int64 else float("nan")
        fields.update(
            actions=((s, t, act.dim), act.dtype, act_fill),
            log_probs=((s, t), torch.float32, float("nan")),
            values=((s, t + 1), torch.float32, float("nan")),
            rewards=((s, t), torch.float32, float("nan")),
            dones=((s, t), torch.float32, float("nan")),
            timeouts=((s, t), torch.bool, False),
            valid=((s, t), torch.bool, False),
            policy_id=((s, t), torch.int16, -1),
            policy_version=((s, t), torch.int64, -1),
            rnn_states=((s, t // max(recurrence, 1), rnn_size), torch.float32, float("nan")),
            late_rewards=((s,), torch.float32, 0.0),  # zeroed as a worker takes a slot
            owner=((s,), torch.int8, FREE),
            holder=((s,), torch.int16, -1),
        )
        return fields

    @staticmethod
    def nbytes(layout: Layout) -> int:
        """Bytes that the fields of a `layout` take (nothing is allocated)."""
        return sum(math.prod(shape) * dtype.itemsize for shape, dtype, _ in layout.values())

    @classmethod
    def allocate(cls, layout: Layout) -> TrajectoryBuffers:
        """The fields of a `layout` in shared memory, each filled with its sentinel."""
        fields = {
            name: torch.full(shape, fill, dtype=dtype).share_memory_()
            for name, (shape, dtype, fill) in layout.items()
        }
        obs = {name[4:]: fields.pop(name) for name in list(fields) if name.startswith("obs.")}
        num_slots, rollout = layout["rewards"][0]
        return cls(num_slots=num_slots, rollout=rollout, obs=obs, **fields)

    def numpy_views(self) -> dict[str, np.ndarray]:
        """Numpy arrays sharing the same memory (fast small writes in the rollout loop)."""
        views = {f"obs.{k}": v.numpy() for k, v in self.obs.items()}
        for name in (*SAMPLE_FIELDS, "owner"):
            views[name] = getattr(self, name).numpy()
        return views

    def transfer(self, slots, expected: int, new: int) -> None:
        """Hand slots from owner `expected` to owner `new`, refusing double ownership."""
        owner = self.owner.numpy()
        idx = np.asarray(slots, dtype=np.int64)
        wrong = idx[owner[idx] != expected]
        if wrong.size:
            slot = int(wrong[0])
            raise SlotOwnershipError(
                f"trajectory slot {slot} is owned by the {OWNER_NAMES[int(owner[slot])]}, "
                f"expected the {OWNER_NAMES[expected]} (hand-over to the {OWNER_NAMES[new]})"
            )
        owner[idx] = new

    def gather(
        self, slots: list[int], device: torch.device | str = "cpu", pin_memory: bool = False
    ) -> dict[str, torch.Tensor]:
        """Copy the given slots out of shared memory (after this they can be freed). With
        `pin_memory` the copies land in page-locked host memory, from which a copy to a CUDA
        device runs asynchronously (non_blocking) while the host goes on."""
        idx = torch.as_tensor(slots, dtype=torch.long)
        out = {f"obs.{k}": _select_rows(v, idx, pin_memory) for k, v in self.obs.items()}
        for name in SAMPLE_FIELDS:
            out[name] = _select_rows(getattr(self, name), idx, pin_memory)
        if torch.device(device).type != "cpu":
            out = {k: v.to(device, non_blocking=pin_memory) for k, v in out.items()}
        return out


def _select_rows(src: torch.Tensor, idx: torch.Tensor, pin_memory: bool) -> torch.Tensor:
    """src[idx] as a new tensor, page-locked when asked (the one copy out of shared memory)."""
    if not pin_memory:
        return src.index_select(0, idx)
    out = torch.empty((idx.numel(), *src.shape[1:]), dtype=src.dtype, pin_memory=True)
    return torch.index_select(src, 0, idx, out=out)


def num_slots_needed(
    num_actors_total: int, num_policies: int, trajectories_per_iteration: int
) -> int:
    """Every actor holds a slot, may have a full one waiting for its bootstrap value and a
    parked partial one (see RolloutWorker._switch_policy), while every learner gathers a full
    iteration; one more so that sampling can always make progress."""
    return 3 * num_actors_total + num_policies * trajectories_per_iteration + 1
