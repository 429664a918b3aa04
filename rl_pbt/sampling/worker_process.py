"""Process loop of one rollout worker: take control messages, step the envs, repeat.

Collaborators: RolloutWorker (the work), the runner (control queue in, stop flag).
"""

from __future__ import annotations

import traceback

from rl_pbt.envs.contract import EnvContractError
from rl_pbt.runtime import heartbeat as hb
from rl_pbt.runtime.messages import LearnerEvent, Stop, drain
from rl_pbt.sampling.rollout_worker import StopRequested


def worker_process_main(spec, worker_idx: int, incarnation: int = 0) -> None:
    """Entry point of rollout worker `worker_idx` (module-level: any start method can run it);
    `incarnation` counts the runner's restarts of it after it died."""
    from rl_pbt.runtime.processes import build_worker, child_done, child_setup

    # a restarted worker gets fresh seeds: its envs must not replay its predecessor's games
    child_setup(spec, "worker", worker_idx, restart=incarnation)
    control_queue, report_queue = spec.worker_queues[worker_idx], spec.report_queue
    stop_flag, heartbeats = spec.stop_flag, spec.heartbeats
    worker = None
    parent = hb.ParentWatch()
    try:

        def should_stop() -> bool:
            return bool(stop_flag[0]) or parent.gone()

        worker = build_worker(spec, worker_idx, should_stop, incarnation=incarnation)
        while not should_stop():
            for msg in drain(control_queue):
                if isinstance(msg, Stop):
                    stop_flag[0] = 1
                worker.handle(msg)
            worker.step()
    except (StopRequested, KeyboardInterrupt):
        pass
    except EnvContractError as e:  # the env's fault: one line naming it, no traceback
        report_queue.put(LearnerEvent(-1, "error", f"rollout worker {worker_idx}: {e}"))
        raise SystemExit(1) from None
    except Exception:
        report_queue.put(
            LearnerEvent(-1, "error", f"rollout worker {worker_idx}: {traceback.format_exc()}")
        )
        raise
    finally:
        if worker is not None:
            worker.close()
        heartbeats.beat(worker_idx, hb.STOPPED)
        child_done()
