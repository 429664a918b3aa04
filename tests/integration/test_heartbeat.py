"""A component that hangs or dies is named in a clear error and the run stops cleanly."""

import glob
import os

from rl_pbt import parse_cfg, register_env, train
from tests.scripted_envs import HangingEnv


def make_hanging(name, cfg, env_config, render_mode=None):
    return HangingEnv(env_config, hang_after=200)


def make_crashing(name, cfg, env_config, render_mode=None):
    return HangingEnv(env_config, hang_after=200, crash=True)


register_env("hanging_env", make_hanging)
register_env("crashing_env", make_crashing)


def run(tmp_path, env, capsys):
    cfg = parse_cfg(
        [
            f"--env={env}",
            "--num_workers=2",
            "--num_envs_per_worker=2",
            "--rollout=8",
            "--batch_size=32",
            "--encoder_mlp_layers",
            "8",
            "--heartbeat_timeout=4",
            "--train_for_seconds=60",
            f"--train_dir={tmp_path}",
            "--experiment=hb",
            "--status_interval=30",
        ]
    )
    status = train(cfg)
    return status, capsys.readouterr().out


def test_hanging_worker_is_named(tmp_path, capsys):
    status, out = run(tmp_path, "hanging_env", capsys)
    assert status == 1
    assert "rollout worker 0 stopped answering" in out
    assert "while stepping env 1" in out
    # stopped cleanly: learners saved their checkpoints
    assert glob.glob(os.path.join(tmp_path, "hb", "checkpoint_p0", "checkpoint_*.pth"))


def test_crashing_worker_is_named(tmp_path, capsys):
    status, out = run(tmp_path, "crashing_env", capsys)
    assert status == 1
    assert "rollout worker 0" in out and "env exploded on purpose" in out
    assert glob.glob(os.path.join(tmp_path, "hb", "checkpoint_p0", "checkpoint_*.pth"))
