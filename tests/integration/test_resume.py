"""Re-running the same command resumes: weights, optimiser, counters come back."""

import glob
import os

import torch

from rl_pbt import parse_cfg, train
from rl_pbt.learning.checkpoints import read_checkpoint
from tests.small_run import SMALL_RUN


def checkpoints(folder):
    return sorted(glob.glob(os.path.join(folder, "checkpoint_p0", "checkpoint_*.pth")))


def run(tmp_path, steps, *extra):
    cfg = parse_cfg(
        [
            "--env=CartPole-v1",
            *SMALL_RUN,
            f"--train_for_env_steps={steps}",
            f"--train_dir={tmp_path}",
            "--experiment=res",
            "--status_interval=30",
            *extra,
        ]
    )
    assert train(cfg) == 0
    return os.path.join(tmp_path, "res")


def test_resume_continues_with_same_weights(tmp_path):
    exp = run(tmp_path, 4000)
    first = read_checkpoint(checkpoints(exp)[-1])
    assert first["env_steps"] >= 4000

    # same budget again: nothing left to train, the run loads and saves the same state
    run(tmp_path, 4000)
    again = read_checkpoint(checkpoints(exp)[-1])
    assert again["env_steps"] == first["env_steps"]
    assert again["version"] == first["version"]
    for k, v in first["model"].items():
        torch.testing.assert_close(again["model"][k], v)
    assert again["optimizer"]["state"].keys() == first["optimizer"]["state"].keys()

    # larger budget: training continues from there
    run(tmp_path, 8000)
    later = read_checkpoint(checkpoints(exp)[-1])
    assert later["env_steps"] >= 8000
    assert later["version"] > first["version"]


def test_restart_behavior_overwrite_starts_fresh(tmp_path):
    exp = run(tmp_path, 2000)
    v1 = read_checkpoint(checkpoints(exp)[-1])["version"]
    run(tmp_path, 2000, "--restart_behavior=overwrite")
    fresh = read_checkpoint(checkpoints(exp)[-1])
    assert fresh["env_steps"] < 2000 + 4 * 128 * 2 and fresh["version"] <= v1 + 64
    assert os.path.isfile(os.path.join(exp, "config.json"))
