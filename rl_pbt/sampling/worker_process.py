"""Process loop of one rollout worker: take control messages, step the envs, repeat.

Collaborators: RolloutWorker (the work), the runner (control queue in, stop flag).
"""

from __future__ import annotations

import traceback

import torch

from rl_pbt.runtime import heartbeat as hb
from rl_pbt.runtime.messages import LearnerEvent, Stop, drain
from rl_pbt.sampling.rollout_worker import StopRequested


def worker_process_main(
    make_worker,
    worker_idx: int,
    control_queue,
    report_queue,
    stop_flag,
    heartbeats,
    hb_idx: int,
    registry_snapshot,
) -> None:
    torch.set_num_threads(1)
    from rl_pbt.envs.registry import restore_registry

    restore_registry(registry_snapshot)
    worker = None
    parent = hb.ParentWatch()
    try:

        def should_stop() -> bool:
            return bool(stop_flag[0]) or parent.gone()

        worker = make_worker(worker_idx, should_stop)
        while not should_stop():
            for msg in drain(control_queue):
                if isinstance(msg, Stop):
                    stop_flag[0] = 1
                worker.handle(msg)
            worker.step()
    except (StopRequested, KeyboardInterrupt):
        pass
    except Exception:
        report_queue.put(
            LearnerEvent(-1, "error", f"rollout worker {worker_idx}: {traceback.format_exc()}")
        )
        raise
    finally:
        if worker is not None:
            worker.close()
        heartbeats.beat(hb_idx, hb.STOPPED)
