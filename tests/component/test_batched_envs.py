"""A worker stepping the arena through its batched twin produces exactly the experience it
produces with one env object per copy (same seeds, serial mode)."""

import numpy as np

import envs  # noqa: F401  (registers the arena)
from rl_pbt import parse_cfg
from rl_pbt.envs.wrappers import BatchCopy
from rl_pbt.learning.learner_process import LearnerHost
from rl_pbt.runtime.runner import Runner, _MergedQueue


def collect(tmp_path, batched: bool, steps: int = 150):
    cfg = parse_cfg(
        [
            "--env=arena_duel",
            "--serial_mode",
            "--num_policies=2",
            "--num_workers=1",
            "--num_envs_per_worker=4",
            "--rollout=8",
            "--batch_size=64",
            "--encoder_mlp_layers",
            "16",
            "--arena_episode_steps=40",
            f"--batched_envs={batched}",
            f"--train_dir={tmp_path}",
            f"--experiment=b{int(batched)}",
            "--seed=5",
        ]
    )
    runner = Runner(cfg)
    learners = {p: runner._learner_factory(p) for p in range(cfg.num_policies)}
    host = LearnerHost(
        learners, _MergedQueue(runner.learner_queues), runner.learner_queues, runner.report_queue
    )
    host.start(resume=False)
    worker = runner._worker_factory(0, lambda: False, blocking=False)
    worker._maybe_report = lambda force=False: None  # keep every episode in the worker
    assert isinstance(worker.envs[0], BatchCopy) == batched
    obs, seats = [], []
    for _ in range(steps):
        worker.step()
        host.poll(timeout=0.0)
        obs.append(worker.cur_obs["obs"].copy())
        seats.append(list(worker.seat))
    episodes = [(e.policy_id, e.episode_return, e.length) for e in worker.episodes]
    matches = [(m.seats, m.objectives) for m in worker.matches]
    worker.close()
    return np.stack(obs), seats, episodes, matches


def test_batched_arena_gives_the_same_experience(tmp_path):
    a = collect(tmp_path, batched=False)
    b = collect(tmp_path, batched=True)
    np.testing.assert_array_equal(a[0], b[0])
    assert a[1] == b[1]
    assert a[2] == b[2] and len(a[2]) >= 8  # several 40-step episodes ended
    assert a[3] == b[3] and len(a[3]) >= 4
