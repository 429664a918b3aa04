"""A tiny doom_basic training run (conv + measurements encoder, frameskip 4) in parallel mode:
it starts, trains, counts frames with the frameskip, checkpoints and stops cleanly."""

import glob
import json
import os

import pytest

from rl_pbt import parse_cfg, train
from rl_pbt.learning.checkpoints import read_checkpoint

pytestmark = pytest.mark.doom


def test_doom_basic_trains(tmp_path):
    pytest.importorskip("vizdoom")
    import envs  # noqa: F401

    cfg = parse_cfg(
        [
            "--env=doom_basic",
            "--num_workers=2",
            "--num_envs_per_worker=2",
            "--batch_size=128",
            "--train_for_env_steps=4000",
            f"--train_dir={tmp_path}",
            "--experiment=doom",
            "--status_interval=30",
        ]
    )
    assert cfg.env_frameskip == 4  # the env's defaults apply
    assert train(cfg) == 0
    exp = os.path.join(tmp_path, "doom")
    with open(os.path.join(exp, "summary.json")) as f:
        summary = json.load(f)
    assert summary["policies"]["0"]["env_steps"] >= 4000
    assert summary["policies"]["0"]["episodes"] > 0
    ckpt = sorted(glob.glob(os.path.join(exp, "checkpoint_p0", "checkpoint_*.pth")))
    assert ckpt

    state = read_checkpoint(ckpt[-1])
    # env steps count frames: 4 per sample trained. Each update trains at most
    # batch_size / num_epochs new samples, nearly all of them valid in a single-agent env
    samples_at_most = state["version"] * cfg.batch_size / cfg.num_epochs
    assert state["version"] > 0
    assert 0.75 * 4 * samples_at_most <= state["env_steps"] <= 4 * samples_at_most, (
        state["env_steps"],
        state["version"],
    )
    assert any("encoders.obs.0" in k for k in state["model"])  # the conv encoder was used
