"""On a machine with a CUDA device (skipped elsewhere; `python -m pytest -m cuda` runs only
these): learners, the inference server and whole runs on the GPU, and the main process
never initialising CUDA itself."""

import glob
import json
import os

import pytest
import torch

from rl_pbt import parse_cfg, train
from rl_pbt.learning.checkpoints import read_checkpoint
from rl_pbt.runtime.devices import probe_gpu_count
from tests.small_run import CARTPOLE_LEARN, CARTPOLE_STEPS, SMALL_RUN

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(probe_gpu_count() == 0, reason="needs a CUDA device"),
]

CARTPOLE = ["--env=CartPole-v1", "--num_workers=2", "--num_policies=2", *CARTPOLE_LEARN]


def summary(exp_dir):
    with open(os.path.join(exp_dir, "summary.json")) as f:
        return json.load(f)


@pytest.mark.parametrize(
    "extra",
    [
        ["--inference=device"],
        ["--inference=local", "--mp_start_method=spawn"],
        ["--learner_processes=per_device", "--amp"],
    ],
    ids=["device_inference", "local_inference_spawn", "per_device_amp"],
)
def test_cartpole_learns_on_the_gpu(tmp_path, extra):
    cfg = parse_cfg(
        CARTPOLE + ["--device=gpu", f"--train_dir={tmp_path}", "--experiment=g", *extra]
    )
    assert train(cfg) == 0
    # the main process counted devices and started children without a CUDA context
    assert not torch.cuda.is_initialized()
    result = summary(os.path.join(tmp_path, "g"))
    for p, s in result["policies"].items():
        assert s["env_steps"] >= CARTPOLE_STEPS
        assert s["mean_return"] >= 195, f"policy {p}: {s}"


def test_resume_on_the_gpu_continues_from_the_checkpoint(tmp_path):
    flags = SMALL_RUN + [
        "--env=CartPole-v1",
        "--device=gpu",
        "--num_policies=2",
        f"--train_dir={tmp_path}",
        "--experiment=r",
        "--keep_checkpoints=1000",
    ]
    exp = os.path.join(tmp_path, "r")

    def checkpoints(p):
        return set(glob.glob(os.path.join(exp, f"checkpoint_p{p}", "checkpoint_*.pth")))

    assert train(parse_cfg(flags + ["--train_for_env_steps=20000"])) == 0
    first = summary(exp)
    before = {p: checkpoints(p) for p in (0, 1)}
    newest = {p: max(read_checkpoint(f)["version"] for f in before[p]) for p in (0, 1)}
    assert train(parse_cfg(flags + ["--train_for_env_steps=40000"])) == 0
    second = summary(exp)
    for p in (0, 1):
        assert (
            second["policies"][str(p)]["env_steps"]
            >= 40000
            > first["policies"][str(p)]["env_steps"]
        )
        # the second run went on from the first one's weights: every checkpoint it wrote is
        # newer than all of the first run's (a run from scratch would count from 0 again)
        new = [read_checkpoint(f)["version"] for f in checkpoints(p) - before[p]]
        assert new and min(new) > newest[p], (newest[p], new)


def test_snapshot_selfplay_with_device_inference(tmp_path):
    import envs  # noqa: F401  (registers the arena)

    cfg = parse_cfg(
        SMALL_RUN
        + [
            "--env=arena_duel",
            "--device=gpu",
            "--inference=device",
            "--num_policies=4",
            "--with_pbt",
            "--pbt_period_env_steps=10000",
            "--pbt_start_mutation=10000",
            "--selfplay_snapshot_prob=0.3",
            "--selfplay_snapshot_every_env_steps=10000",
            "--train_for_env_steps=40000",
            f"--train_dir={tmp_path}",
            "--experiment=a",
        ]
    )
    assert train(cfg) == 0
    result = summary(os.path.join(tmp_path, "a"))
    assert all(s["env_steps"] >= 40000 for s in result["policies"].values())
    assert result["inference_batch_size"] > 0
