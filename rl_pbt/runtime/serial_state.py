"""Exact resume of a serial run: what the checkpoints leave out, saved when the run stops.

A checkpoint holds a policy's weights, optimiser and counters; a run that goes on from it
plays new episodes and draws new random numbers, so it learns differently from one that was
never stopped. In serial mode the whole run lives in one process, and at the end of a loop
turn (workers stepped, learners polled, the runner ticked) everything else can be written
down too: each env (as a seeded replay of its episode so far), each rollout worker's
seats, slots, episode sums and random stream, the trajectory buffers and free-slot order,
what each learner has waiting, and the process-wide random generators. `serial_state.pt`
holds that, next to the checkpoints it belongs to; a re-run in serial mode whose loaded
checkpoints match it continues exactly as the uninterrupted run would have.

The file is written like a checkpoint (atomic, checksum) and read with `weights_only=True`:
plain data only (numpy arrays travel as tensors), so a crafted file is refused.
"""

from __future__ import annotations

import os
import random
from typing import Any, Optional

import numpy as np
import torch

from rl_pbt.learning.checkpoints import CheckpointError, read_checkpoint, write_state_file
from rl_pbt.memory.buffers import SAMPLE_FIELDS, TrajectoryBuffers
from rl_pbt.runtime.messages import drain

FILE_NAME = "serial_state.pt"
FORMAT = 1
_ND = "__ndarray__"
# what must be equal for a saved state to fit the run that loads it
_LAYOUT_FLAGS = (
    "env",
    "num_policies",
    "num_workers",
    "num_envs_per_worker",
    "rollout",
    "batch_size",
    "num_batches_per_epoch",
    "recurrence",
    "fused_inference",
)


def state_path(exp_dir: str) -> str:
    return os.path.join(exp_dir, FILE_NAME)


# --- plain data ---------------------------------------------------------------------------
def to_plain(x: Any, where: str = "state") -> Any:
    """`x` with numpy arrays and scalars turned into tensors and numbers, so that
    `torch.load(weights_only=True)` reads it back; TypeError naming the part that is none of
    tensor, number, string, None, list, tuple, dict."""
    if isinstance(x, np.ndarray):
        return {_ND: torch.from_numpy(np.array(x, copy=True))}
    if isinstance(x, np.generic):
        return x.item()
    if x is None or isinstance(x, (bool, int, float, str, torch.Tensor)):
        return x
    if isinstance(x, dict):
        return {k: to_plain(v, f"{where}[{k!r}]") for k, v in x.items()}
    if isinstance(x, list):
        return [to_plain(v, f"{where}[{i}]") for i, v in enumerate(x)]
    if isinstance(x, tuple):
        return tuple(to_plain(v, f"{where}[{i}]") for i, v in enumerate(x))
    raise TypeError(f"{where} is a {type(x).__name__}, which a state file cannot hold")


def from_plain(x: Any) -> Any:
    if isinstance(x, dict):
        if len(x) == 1 and _ND in x:
            return x[_ND].numpy()
        return {k: from_plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [from_plain(v) for v in x]
    if isinstance(x, tuple):
        return tuple(from_plain(v) for v in x)
    return x


# --- pieces -------------------------------------------------------------------------------
def capture_rngs() -> dict:
    """The process-wide generators: torch's CPU one, numpy's legacy one, Python's."""
    return {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def restore_rngs(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(tuple(state["numpy"]))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def capture_buffers(buffers: TrajectoryBuffers, free_queue) -> dict:
    """Every slot's contents and owner, and the order in which free slots will be handed out
    (the queue is drained and refilled in the same order)."""
    free = drain(free_queue)
    for s in free:
        free_queue.put(s)
    fields = {f"obs.{k}": v.clone() for k, v in buffers.obs.items()}
    for name in (*SAMPLE_FIELDS, "owner", "holder"):
        fields[name] = getattr(buffers, name).clone()
    return {"fields": fields, "free": [int(s) for s in free]}


def restore_buffers(buffers: TrajectoryBuffers, free_queue, state: dict) -> None:
    if "late_rewards" not in state["fields"]:  # saved before they were kept apart: in rewards
        buffers.late_rewards.zero_()
    for name, saved in state["fields"].items():
        if name.startswith("obs."):
            target = buffers.obs[name[4:]]
        else:
            target = getattr(buffers, name)
        target.copy_(saved)
    drain(free_queue)
    for s in state["free"]:
        free_queue.put(s)


def layout(cfg, buffers: TrajectoryBuffers) -> dict:
    out = {k: getattr(cfg, k, None) for k in _LAYOUT_FLAGS}
    out["num_slots"] = buffers.num_slots
    out["obs"] = {k: list(v.shape[2:]) for k, v in buffers.obs.items()}
    return out


# --- the file -----------------------------------------------------------------------------
def save(
    exp_dir: str, cfg, buffers, free_queue, learners: dict, workers: list, runner: dict
) -> None:
    """Write the serial run's state. Call at the end of a loop turn, after the learners
    saved their checkpoints (their versions and step counts identify them). `runner`: the
    runner's own part (e.g. which episodes began on weights a PBT copy replaced)."""
    state = {
        "runner": runner,
        "format": FORMAT,
        "layout": layout(cfg, buffers),
        "learners": {
            int(p): {"version": int(lr.version), "env_steps": int(lr.env_steps), **lr.run_state()}
            for p, lr in learners.items()
        },
        "workers": [w.state_dict() for w in workers],
        "buffers": capture_buffers(buffers, free_queue),
        "rngs": capture_rngs(),
    }
    write_state_file(state_path(exp_dir), to_plain(state))


def remove(exp_dir: str) -> None:
    """No state to resume from (the run stopped where its state is not whole)."""
    try:
        os.unlink(state_path(exp_dir))
    except FileNotFoundError:
        pass


def load(exp_dir: str, cfg, buffers, learners: dict) -> tuple[Optional[dict], str]:
    """(state, "") when `serial_state.pt` fits this run and the checkpoints its learners
    loaded; else (None, why not) — no file is no reason worth telling ("")."""
    path = state_path(exp_dir)
    if not os.path.exists(path):
        return None, ""
    try:
        state = from_plain(read_checkpoint(path))
    except CheckpointError as e:
        return None, str(e)
    if state.get("format") != FORMAT:
        return None, f"{path} has format {state.get('format')}, this version reads {FORMAT}"
    want = layout(cfg, buffers)
    if state["layout"] != want:
        changed = sorted(k for k in want if state["layout"].get(k) != want.get(k))
        return None, f"{path} was saved with other settings ({', '.join(changed)})"
    for p, lr in learners.items():
        saved = state["learners"].get(p)
        if saved is None or (saved["version"], saved["env_steps"]) != (lr.version, lr.env_steps):
            where = "none" if saved is None else f"version {saved['version']}"
            return None, (
                f"{path} belongs to other checkpoints (policy {p}: {where} there, version "
                f"{lr.version} loaded)"
            )
    return state, ""


def restore(state: dict, buffers, free_queue, learners: dict, workers: list) -> None:
    """Apply a state from `load` to a run whose components are built (learners loaded and
    published, workers started), its envs already back (`RolloutWorker.restore_envs`, first,
    as it may fail): the random generators last, as everything else is set."""
    restore_buffers(buffers, free_queue, state["buffers"])
    for p, lr in learners.items():
        lr.load_run_state(state["learners"][p])
    for worker, saved in zip(workers, state["workers"]):
        worker.load_state_dict(saved)
    restore_rngs(state["rngs"])
