"""Heartbeats: each component stamps the time and what it is doing into shared memory.

The runner reads them to name a component that died or hangs, and what it was doing.
"""

from __future__ import annotations

import multiprocessing
import os
import time

import torch

ACTIVITIES = [
    "starting",
    "stepping env {detail}",
    "running inference for policy {detail}",
    "waiting for a free trajectory slot",
    "waiting for trajectories",
    "training",
    "saving a checkpoint",
    "applying a PBT update",
    "stopped",
    "resetting env {detail}",
    "waiting for the first weights of policy {detail}",
    "waiting for actions from the inference server of {detail}",
    "waiting for action requests",
]
(
    STARTING,
    STEPPING,
    INFERENCE,
    WAIT_SLOT,
    WAIT_DATA,
    TRAINING,
    SAVING,
    PBT,
    STOPPED,
    RESETTING,
    WAIT_WEIGHTS,
    WAIT_ACTIONS,
    WAIT_REQUESTS,
) = range(len(ACTIVITIES))
# INFERENCE's details other than a policy: one pass for all the process's policies (fused), or
# a frozen snapshot's seat acted for in a rollout worker
ALL_POLICIES, SNAPSHOT_PASS = -1, -2


def pid_running(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie, ended and not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        pass
    try:  # no /proc (macOS): whether the pid exists
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Heartbeats:
    def __init__(self, names: list[str]):
        self.names = list(names)
        n = len(names)
        self.stamp = torch.zeros(n, dtype=torch.float64).share_memory_()
        self.activity = torch.zeros(n, dtype=torch.int32).share_memory_()
        self.detail = torch.zeros(n, dtype=torch.int32).share_memory_()
        self._stamp_np = self.stamp.numpy()
        self._act_np = self.activity.numpy()
        self._det_np = self.detail.numpy()

    def __getstate__(self):
        return {
            "names": self.names,
            "stamp": self.stamp,
            "activity": self.activity,
            "detail": self.detail,
        }

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._stamp_np = self.stamp.numpy()
        self._act_np = self.activity.numpy()
        self._det_np = self.detail.numpy()

    def beat(self, idx: int, activity: int, detail: int = 0) -> None:
        self._stamp_np[idx] = time.time()
        self._act_np[idx] = activity
        self._det_np[idx] = detail

    def describe(self, idx: int) -> str:
        activity, detail = int(self._act_np[idx]), int(self._det_np[idx])
        if activity == INFERENCE and detail == ALL_POLICIES:
            return "running inference for all its policies"
        if activity == INFERENCE and detail == SNAPSHOT_PASS:
            return "running inference for a frozen snapshot"
        return ACTIVITIES[activity].format(detail=detail)

    def silent_for(self, idx: int, now: float | None = None) -> float:
        stamp = float(self._stamp_np[idx])
        return 0.0 if stamp == 0.0 else (now or time.time()) - stamp

    def stale(self, timeout: float) -> list[tuple[int, float]]:
        now = time.time()
        out = []
        for i in range(len(self.names)):
            # starting (imports, env creation, connecting games) gets a longer grace period
            slow_start = self._act_np[i] in (STARTING, RESETTING, WAIT_WEIGHTS)
            limit = timeout * (3 if slow_start else 1)
            if self._act_np[i] != STOPPED and self.silent_for(i, now) > limit:
                out.append((i, self.silent_for(i, now)))
        return out


class ParentWatch:
    """Tells a child process that the runner that started it is gone (killed, crashed), so
    the child stops instead of spinning on as an orphan: learners then save their checkpoints
    on the way out. Create it in the child; `gone()` is one cheap system call.

    Either sign will do: the OS parent changes, where that parent is the runner (fork,
    spawn), or the process that created the child through multiprocessing is gone (its
    sentinel closes; under fork the sentinel alone would wait for the siblings forked later,
    which hold it too). Under forkserver the OS parent is the fork server: it outlives the
    runner as long as its children do, and its own end (killed alone) says nothing of the
    runner's, so the sentinel alone decides there."""

    def __init__(self):
        self.runner = multiprocessing.parent_process()
        self.parent = os.getppid()
        # the OS parent is the runner itself (not a fork server): its change means the runner's end
        self.watch_parent = self.runner is None or self.runner.pid in (None, self.parent)

    def gone(self) -> bool:
        if self.watch_parent and os.getppid() != self.parent:
            return True
        return self.runner is not None and not self.runner.is_alive()
