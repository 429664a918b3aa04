"""Flags (and a checkpoint view) shared by the short integration runs."""

import torch

# The small parallel layout of the short integration runs: 2 workers x 4 envs, rollout 16,
# batch 128, a 32-unit MLP.
SMALL_RUN = [
    "--num_workers=2",
    "--num_envs_per_worker=4",
    "--rollout=16",
    "--batch_size=128",
    "--encoder_mlp_layers",
    "32",
]

# The short 4-member PBT run of tests/integration/conftest.py: its budget and PBT period (env
# steps per member)
SHORT_PBT_STEPS = 24000
SHORT_PBT_PERIOD = 4000

# The CartPole learning runs: CARTPOLE_STEPS frames per policy, judged on the mean of the last
# 20 episodes (>= 195). The env flag is left to each test. Two epochs per batch: 2 policies x
# 7 seeds in parallel runs scored 377-500 at 150k (one epoch: 228-500 at 200k, 199-293 at 100k)
CARTPOLE_STEPS = 150_000
CARTPOLE_LEARN = [
    "--num_envs_per_worker=8",
    "--rollout=32",
    "--batch_size=512",
    "--encoder_mlp_layers",
    "64",
    "64",
    "--learning_rate=3e-4",
    "--num_epochs=2",
    "--stats_avg=20",
    f"--train_for_env_steps={CARTPOLE_STEPS}",
    "--save_every_sec=30",
    "--seed=1",
    "--status_interval=10",
    "--exploration_loss_coeff=0.0",
]

# The small serial CartPole run of the reproducibility tests: 2 policies, 1 worker x 4 envs.
SERIAL_CARTPOLE = [
    "--env=CartPole-v1",
    "--serial_mode",
    "--num_policies=2",
    "--num_workers=1",
    "--num_envs_per_worker=4",
    "--rollout=16",
    "--batch_size=64",
    "--num_epochs=2",
    "--num_batches_per_epoch=2",
    "--encoder_mlp_layers",
    "32",
]


def state_vector(state: dict) -> torch.Tensor:
    """A checkpoint's weights and Adam moments as one vector, to compare runs exactly."""
    tensors = list(state["model"].values())
    for s in state["optimizer"]["state"].values():
        tensors += [s["exp_avg"], s["exp_avg_sq"]]
    return torch.cat([t.reshape(-1).double() for t in tensors])


def serial_worker(cfg):
    """A serial run's runner, its learners' host (started) and rollout worker 0, stepped by
    hand; the worker keeps every episode and game (nothing is reported)."""
    from rl_pbt.learning.learner_process import LearnerHost
    from rl_pbt.runtime.runner import Runner, _MergedQueue

    runner = Runner(cfg)
    learners = {p: runner._learner_factory(p) for p in range(cfg.num_policies)}
    queues = runner.learner_queues
    host = LearnerHost(learners, _MergedQueue(queues), queues, runner.report_queue)
    host.start(resume=False)
    worker = runner._worker_factory(0, lambda: False, blocking=False)
    worker._maybe_report = lambda force=False: None
    return runner, host, worker
