"""Hosts learners and answers their messages; one host per learner process (one policy
each), or one host with every policy in serial mode.

Collaborators: Learner (the work), the runner (commands in, reports out), other learner
processes (PBT state transfers are forwarded straight to the target's queue).
"""

from __future__ import annotations

import time
import traceback
from typing import Optional

from rl_pbt.learning.checkpoints import CheckpointWriteError
from rl_pbt.learning.learner import Learner, NonFiniteTraining
from rl_pbt.runtime import heartbeat as hb
from rl_pbt.runtime.messages import (
    STOP_NOW,
    ApplyPBT,
    ExportDone,
    ExportState,
    LearnerEvent,
    LearnerReport,
    PublishSnapshot,
    SaveCheckpoint,
    Stop,
    Trajectories,
    drain,
)

# once it knows of a stop (the stop flag, a signal), a learner waits this long for the runner's
# Stop message, taking the PBT steps still in flight meanwhile (the runner lets them land
# first, up to runner.PBT_SETTLE_S), then saves all the same (the message may not come: a full
# queue, a signal sent to this process alone)
STOP_MESSAGE_GRACE_S = 20.0


class LearnerHost:
    def __init__(
        self,
        learners: dict[int, Learner],
        in_queue,
        learner_queues: list,
        report_queue,
        heartbeats: Optional[hb.Heartbeats] = None,
        hb_index: Optional[dict[int, int]] = None,
    ):
        self.learners = learners
        self.in_queue = in_queue
        self.learner_queues = learner_queues
        self.report_queue = report_queue
        self.heartbeats = heartbeats
        self.hb_index = hb_index or {}
        self.stopped = False
        self.draining = False  # stopping: messages are still handled, nothing more is trained
        self.unsaved: set[int] = set()  # policies whose checkpoint could not be written

    def _beat(self, activity: int, policy: Optional[int] = None) -> None:
        if self.heartbeats is None:
            return
        for p, idx in self.hb_index.items():
            if policy is None or p == policy:
                self.heartbeats.beat(idx, activity, p)

    def start(self, resume: bool, hparams: Optional[dict] = None) -> None:
        """Each learner from its newest checkpoint when resuming, then with `hparams` (the
        learning values the resume changed) over the checkpoint's; its weights published."""
        for p, learner in self.learners.items():
            if resume and learner.load_latest():
                if hparams:
                    learner.set_hparams(hparams)
                self.report_queue.put(
                    LearnerEvent(
                        p,
                        "loaded",
                        f"resumed at version {learner.version}, {learner.env_steps} env steps",
                        {"env_steps": int(learner.env_steps)},
                    )
                )
            learner.publish()
            self.report(p)

    def report(self, p: int) -> None:
        lr = self.learners[p]
        self.report_queue.put(LearnerReport(p, lr.env_steps, lr.version, dict(lr.stats)))

    def handle(self, msg) -> None:
        if isinstance(msg, Trajectories):
            self.learners[msg.policy_id].add(msg.slots)
        elif isinstance(msg, ExportState):
            self._beat(hb.PBT, msg.policy_id)
            self.learners[msg.policy_id].export_state()
            self.learner_queues[msg.then.policy_id].put(msg.then)
        elif isinstance(msg, ExportDone):
            self.report_queue.put(
                LearnerEvent(msg.policy_id, "exported", "", {"row": msg.policy_id})
            )
        elif isinstance(msg, ApplyPBT):
            self._beat(hb.PBT, msg.policy_id)
            learner = self.learners[msg.policy_id]
            if msg.source_id is not None:
                learner.import_state(msg.source_id, msg.decided_at)
            learner.set_hparams(msg.hparams)  # after the copy: the copy must not overwrite them
            learner.publish()
            if msg.source_id is not None:
                # PBT's state file holds the copy from now on: a restart must find the copied
                # weights in a checkpoint, not the member's own older ones under its new values
                self._beat(hb.SAVING, msg.policy_id)
                self._save(msg.policy_id, learner.save)
            if msg.export_to is not None:
                learner.export_state(msg.export_to)
                event = LearnerEvent(msg.policy_id, "exported", "", {"row": msg.export_to})
                self.report_queue.put(event)
            self.report_queue.put(
                LearnerEvent(
                    msg.policy_id,
                    "pbt_applied",
                    f"source={msg.source_id}",
                    {"version": learner.version},
                )
            )
        elif isinstance(msg, PublishSnapshot):
            learner = self.learners[msg.policy_id]
            learner.params.publish(msg.row, learner.model, learner.version)
            # workers hear of the snapshot only after its weights are in place
            self.report_queue.put(
                LearnerEvent(
                    msg.policy_id,
                    "snapshot_published",
                    msg.snapshot_id,
                    {"id": msg.snapshot_id, "row": msg.row},
                )
            )
        elif isinstance(msg, SaveCheckpoint):
            for p in self.learners:
                if msg.policy_id is None or msg.policy_id == p:
                    self._beat(hb.SAVING, p)
                    self._save(p, self.learners[p].save)
        elif isinstance(msg, Stop):
            failed: Optional[CheckpointWriteError] = None
            if msg.save:
                # a policy whose checkpoint could not be written keeps its older ones
                for p in [p for p in self.learners if p not in self.unsaved]:
                    self._beat(hb.SAVING, p)
                    try:
                        self._save(p, self.learners[p].save)
                    except CheckpointWriteError as e:  # the other policies still save
                        failed = failed or e
            self.stopped = True
            if failed is not None:
                raise failed
        else:
            raise TypeError(f"learner got an unexpected message {msg!r}")

    def _save(self, p: int, save) -> Optional[str]:
        """`save()` of policy p's learner. A checkpoint that cannot be written (a full disk,
        no permission) is reported in one line, with the env steps of the newest checkpoint
        kept (what a resume starts from), and CheckpointWriteError goes on up: the run stops."""
        try:
            return save()
        except CheckpointWriteError as e:
            self.unsaved.add(p)
            kept = self.learners[p].saved_env_steps
            detail = f"policy {p}: {e} (its checkpoints up to {kept:,} env steps are kept)"
            self.report_queue.put(LearnerEvent(p, "save_failed", detail))
            raise

    def poll(self, timeout: float) -> bool:
        """Handle waiting messages, train whoever has a full batch. True if anything trained."""
        self._beat(hb.WAIT_DATA)
        for msg in drain(self.in_queue, timeout=timeout):
            self.handle(msg)
            if self.stopped:
                return False
        trained = False
        if self.draining:
            return trained
        for p, learner in self.learners.items():
            if learner.ready():
                self._beat(hb.TRAINING, p)
                learner.train_if_ready()
                self.report(p)
                if learner.copy_timing is not None:
                    decided, copied, fresh, first = learner.copy_timing
                    learner.copy_timing = None
                    data = {"decided": decided, "copied": copied, "fresh": fresh, "trained": first}
                    self.report_queue.put(LearnerEvent(p, "copy_trained", "", data))
                trained = True
            if self._save(p, learner.maybe_save):
                self._beat(hb.SAVING, p)
        return trained


def learner_process_main(spec, policy_ids: list[int]) -> None:
    """Entry point of the process hosting the learners of `policy_ids` (one policy, or every
    policy of one device with --learner_processes=per_device). Module-level, so any start
    method can run it; CUDA is first touched here, never in the parent."""
    from rl_pbt.runtime.processes import (
        LEARNER_ORPHAN_GRACE_S,
        StopRequest,
        build_learner,
        child_done,
        child_setup,
    )

    # first: a signal to the process group while this process starts is noted, never raised
    # in the middle of its set-up
    signalled = StopRequest().install()
    on_cpu = not any(spec.device_of[p].startswith("cuda") for p in policy_ids)
    child_setup(
        spec,
        "learner",
        policy_ids[0],
        hide_gpus=on_cpu,
        orphan_grace_s=LEARNER_ORPHAN_GRACE_S,
        signals=False,
    )
    report_queue, heartbeats = spec.report_queue, spec.heartbeats
    hb_index = {p: spec.learner_hb(p) for p in policy_ids}
    parent = hb.ParentWatch()
    host = None
    try:
        for p in policy_ids:
            heartbeats.beat(hb_index[p], hb.STARTING, p)
        learners = {p: build_learner(spec, p) for p in policy_ids}
        host = LearnerHost(
            learners,
            spec.learner_queues[policy_ids[0]],  # the policies of one process share a queue
            spec.learner_queues,
            report_queue,
            heartbeats,
            hb_index,
        )
        host.start(spec.resuming, spec.resume_hparams)
        stop_seen = None
        while not host.stopped:
            host.poll(timeout=0.05)
            if parent.gone() or spec.stop_flag[0] == STOP_NOW:
                # the runner died without a word, or its loop is stuck: keep what was learned
                host.handle(Stop(save=True))
            elif spec.stop_flag[0] or signalled.requested:
                # the runner is stopping (a signal to the process group reaches it too): its
                # Stop message follows once the PBT steps in flight have landed
                host.draining = True
                stop_seen = stop_seen or time.monotonic()
                if time.monotonic() - stop_seen > STOP_MESSAGE_GRACE_S:
                    host.handle(Stop(save=True))
    except KeyboardInterrupt:
        if host is not None:
            host.handle(Stop(save=True))
    except NonFiniteTraining:  # every learner here holds its last finite state: keep it
        if host is not None:
            host.handle(Stop(save=True))
        report_queue.put(LearnerEvent(policy_ids[0], "error", traceback.format_exc()))
        time.sleep(0.5)
        raise
    except CheckpointWriteError:
        # a full disk, no permission: the host reported it in one line (the older checkpoints
        # kept), and no traceback follows for a fault of the folder, not of the code
        time.sleep(0.5)
        raise SystemExit(1) from None
    except Exception:
        report_queue.put(LearnerEvent(policy_ids[0], "error", traceback.format_exc()))
        time.sleep(0.5)
        raise
    finally:
        for p in policy_ids:
            heartbeats.beat(hb_index[p], hb.STOPPED, p)
        child_done()
