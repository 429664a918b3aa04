"""One node group of a population spread over Ray: some of the members, trained by an ordinary
single-machine run (shared-memory rollout workers, learners on this node's GPUs) in
`{experiment}/groups/g{index}`, its PBT steered by the driver through `GroupControl`.

`NodeGroup` is a plain class; the driver wraps it with `ray.remote` (one actor per group) so
that this module imports without Ray. A group starts in two steps: the constructor makes the
actor, which reports what its node holds of the group's folder (`held`); the driver then calls
`start`, with the newer checkpoints it keeps itself when the node lacks them (a group placed on
a new node, or on one that lost its disk). Ray restarts a group whose process dies: the
constructor runs again, the driver sees a group waiting to start and starts it, and the run
resumes from the checkpoints.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from typing import Optional

import torch

from rl_pbt.config.parse import Cfg, save_cfg
from rl_pbt.envs.registry import restore_registry
from rl_pbt.learning.checkpoints import checkpoint_files, install_checkpoint_file
from rl_pbt.memory.param_store import same_state_bits
from rl_pbt.runtime.control import (
    AddSnapshot,
    Apply,
    Export,
    ExportSnapshot,
    GroupControl,
    Import,
    RunEnded,
)
from rl_pbt.runtime.devices import derive_seed

REPLY_TIMEOUT_S = 120.0


def groups_root(cfg: dict) -> str:
    """Where node groups keep their runs on their node: --ray_node_dir/<experiment>/groups, or
    the experiment folder's groups/ (one machine, or a shared filesystem)."""
    root = cfg.get("ray_node_dir") or cfg["train_dir"]
    return os.path.join(root, cfg["experiment"], "groups")


def group_cfg(cfg: dict, index: int, members: list[int], run_seed: int) -> Cfg:
    """The node group's own run: its members only, no PBT of its own, resuming its folder."""
    out = dict(cfg)
    out.update(
        num_policies=len(members),
        with_pbt=False,
        policy_values=None,
        pbt_search_space=None,
        train_dir=groups_root(cfg),
        experiment=f"g{index}",
        restart_behavior="resume",
        ray_address=None,
        # seeded runs only: without --seed each start draws its own (as a run on one machine
        # does), and a resume finds the same flag (None) as the run before
        seed=derive_seed(run_seed, "group", index) if cfg.get("seed") is not None else None,
        with_wandb=False,
    )
    return Cfg(out)


def _node_id() -> Optional[str]:
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:  # not inside Ray (a test building the group directly)
        return None


def _node_ip() -> Optional[str]:
    """The address of this group's machine (node ids change with each Ray instance, so a run
    on one machine restarted with a new local Ray is on the same machine, another node id)."""
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # not inside Ray
        return None


def latest_names(folder: str, count: int) -> dict[int, Optional[str]]:
    """Member -> the name of its newest checkpoint in a group folder (None: it has none)."""
    out: dict[int, Optional[str]] = {}
    for m in range(count):
        files = checkpoint_files(os.path.join(folder, f"checkpoint_p{m}"))
        out[m] = os.path.basename(files[-1]) if files else None
    return out


class NodeGroup:
    def __init__(self, cfg: dict, index: int, members: list[int], run_seed: int, registry: dict):
        restore_registry(registry)
        self.index = index
        self.members = list(members)
        self.started_at = time.time()  # tells the driver when Ray restarted this group
        self.node_id = _node_id()  # where its folder and checkpoints are
        self.node_ip = _node_ip()
        self.cfg = group_cfg(cfg, index, members, run_seed)
        self.folder = os.path.join(self.cfg.train_dir, self.cfg.experiment)
        self.status: Optional[int] = None
        self.error: Optional[str] = None
        self.control = GroupControl()
        self.runner = None  # made by start()
        self.thread: Optional[threading.Thread] = None

    def held(self) -> dict[int, Optional[str]]:
        """What this node holds of the group's run: each member's newest checkpoint name."""
        return latest_names(self.folder, len(self.members))

    def start(self, files: dict[str, bytes], restart_behavior: str = "resume") -> None:
        """Start the run, first putting in its folder `files` (checkpoint_p{m}/NAME -> bytes,
        newer than what this node holds): then it resumes from them. In a new run the driver
        says `restart` (an earlier run's folder on this node is moved aside) or `overwrite`
        (deleted), as --restart_behavior does to the experiment folder."""
        from rl_pbt.runtime.runner import Runner

        if self.runner is not None:
            return
        if restart_behavior != "resume":
            self.cfg = Cfg({**self.cfg.to_dict(), "restart_behavior": restart_behavior})
        for rel, data in files.items():
            sub, name = rel.split("/")
            install_checkpoint_file(
                os.path.join(self.folder, sub), name, data, self.cfg.keep_checkpoints
            )
        config = os.path.join(self.folder, "config.json")
        if files and not os.path.isfile(config):
            save_cfg(self.cfg, config)  # the folder is a run to resume, not a new one
        self.runner = Runner(self.cfg)
        self.runner.control = self.control
        self.runner.stats.display_ids = list(self.members)  # the population's ids, as the driver's
        self.thread = threading.Thread(target=self._run, name=f"group_{self.index}", daemon=True)
        self.thread.start()

    def read_checkpoint(self, member: int, name: str) -> Optional[bytes]:
        """The bytes of one of a member's checkpoint files; None when it was rotated away."""
        path = os.path.join(self.folder, f"checkpoint_p{int(member)}", os.path.basename(name))
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

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
            "node_ip": self.node_ip,
            "waiting": r is None,  # for start()
            "env_steps": [int(x) for x in r.env_steps] if r is not None else [],
            "versions": [int(x) for x in r.versions] if r is not None else [],
            "checkpoints": self.held() if r is not None else {},
            "episodes": records.episodes,
            "copy_latencies": records.copy_latencies,
            "snapshots": records.snapshots,
            "matches": records.matches,
            # members whose PBT copy (in this group) has not landed: no source for PBT yet
            "copying": sorted(int(p) for p in r.copying) if r is not None else [],
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
        self, policy: int, state: torch.Tensor, hparams: dict, shaping
    ) -> tuple[bool, float]:
        """Install a member of another group's exported state (then `hparams`, `shaping`):
        (whether the state read back right after equals `state` bit for bit, seconds from the
        state's arrival here to that read-back). The group times the target's first update
        from the arrival, on this node's clock: the driver's clock may differ."""
        arrived = time.time()
        echo = self._ask(Import(policy, state, hparams, shaping, arrived))
        n = state.numel()
        same = same_state_bits(echo[:n], state.reshape(-1).to(echo.dtype))
        return same, time.time() - arrived

    def export_snapshot(self, snapshot: str) -> tuple[torch.Tensor, int]:
        """A frozen snapshot of this group: (its packed weights, their version)."""
        return self._ask(ExportSnapshot(snapshot))

    def add_snapshot(self, snapshot: str, weights: tuple[torch.Tensor, int]) -> None:
        """Another group's snapshot joins this group's pool of frozen opponents."""
        flat, version = weights
        self._ask(AddSnapshot(snapshot, flat, version))

    def stop(self, timeout: float = 300.0) -> Optional[int]:
        self.control.request_stop()
        if self.thread is not None:
            self.thread.join(timeout)
        return self.status

    def _ask(self, command):
        if self.status is not None:
            raise RunEnded(f"node group {self.index} has stopped (status {self.status})")
        if self.runner is None:
            raise RuntimeError(f"node group {self.index} has not started")
        return self.control.submit(command).wait(REPLY_TIMEOUT_S)
