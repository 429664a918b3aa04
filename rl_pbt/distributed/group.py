"""One node group of a population spread over Ray: some of the members, trained by an ordinary
single-machine run (shared-memory rollout workers, learners on this node's GPUs) in
`{experiment}/groups/g{index}`, its PBT steered by the driver through `GroupControl`.

`NodeGroup` is a plain class; the driver wraps it with `ray.remote` (one actor per group) so
that this module imports without Ray. Ray restarts a group whose process dies: the constructor
then runs again and the run resumes from the group's checkpoints.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from typing import Optional

import torch

from rl_pbt.config.parse import Cfg
from rl_pbt.envs.registry import restore_registry
from rl_pbt.runtime.control import (
    AddSnapshot,
    Apply,
    Export,
    ExportSnapshot,
    GroupControl,
    Import,
)
from rl_pbt.runtime.devices import derive_seed

REPLY_TIMEOUT_S = 120.0


def group_cfg(cfg: dict, index: int, members: list[int], run_seed: int) -> Cfg:
    """The node group's own run: its members only, no PBT of its own, resuming its folder."""
    out = dict(cfg)
    out.update(
        num_policies=len(members),
        with_pbt=False,
        policy_values=None,
        pbt_search_space=None,
        train_dir=os.path.join(cfg["train_dir"], cfg["experiment"], "groups"),
        experiment=f"g{index}",
        restart_behavior="resume",
        ray_address=None,
        seed=derive_seed(run_seed, "group", index),
        with_wandb=False,
    )
    return Cfg(out)


def _node_id() -> Optional[str]:
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:  # not inside Ray (a test building the group directly)
        return None


class NodeGroup:
    def __init__(self, cfg: dict, index: int, members: list[int], run_seed: int, registry: dict):
        restore_registry(registry)
        from rl_pbt.runtime.runner import Runner

        self.index = index
        self.members = list(members)
        self.started_at = time.time()  # tells the driver when Ray restarted this group
        self.node_id = _node_id()  # where its folder and checkpoints are
        self.status: Optional[int] = None
        self.error: Optional[str] = None
        self.control = GroupControl()
        self.runner = Runner(group_cfg(cfg, index, members, run_seed))
        self.runner.control = self.control
        self.thread = threading.Thread(target=self._run, name=f"group_{index}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.status = self.runner.run()
        except BaseException:  # the driver hears of it through poll()
            self.error = traceback.format_exc()
            self.status = 1

    # --- called by the driver ---------------------------------------------------------------
    def poll(self) -> dict:
        records = self.control.take_records()
        r = self.runner
        return {
            "started_at": self.started_at,
            "node_id": self.node_id,
            "env_steps": [int(x) for x in r.env_steps],
            "versions": [int(x) for x in r.versions],
            "episodes": records.episodes,
            "copy_latencies": records.copy_latencies,
            "snapshots": records.snapshots,
            "finished": self.status is not None,
            "status": self.status,
            "error": self.error,
        }

    def apply(self, policy: int, source: Optional[int], hparams: dict, shaping) -> None:
        self._ask(Apply(policy, source, hparams, shaping))

    def export(self, policy: int) -> torch.Tensor:
        """The member's whole state (weights, normalisers, Adam moments and step), flat."""
        return self._ask(Export(policy))

    def import_state(
        self, policy: int, state: torch.Tensor, hparams: dict, shaping, decided_at: float
    ) -> bool:
        """Install a member of another group's exported state (then `hparams`, `shaping`);
        True when the state read back right after equals `state` bit for bit."""
        echo = self._ask(Import(policy, state, hparams, shaping, decided_at))
        n = state.numel()
        return bool(torch.equal(echo[:n], state.reshape(-1).to(echo.dtype)))

    def export_snapshot(self, snapshot: str) -> tuple[torch.Tensor, int]:
        """A frozen snapshot of this group: (its packed weights, their version)."""
        return self._ask(ExportSnapshot(snapshot))

    def add_snapshot(self, snapshot: str, weights: tuple[torch.Tensor, int]) -> None:
        """Another group's snapshot joins this group's pool of frozen opponents."""
        flat, version = weights
        self._ask(AddSnapshot(snapshot, flat, version))

    def stop(self, timeout: float = 300.0) -> Optional[int]:
        self.control.request_stop()
        self.thread.join(timeout)
        return self.status

    def _ask(self, command):
        if self.status is not None:
            raise RuntimeError(f"node group {self.index} has stopped (status {self.status})")
        return self.control.submit(command).wait(REPLY_TIMEOUT_S)
