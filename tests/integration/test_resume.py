"""Re-running the same command resumes: weights, optimiser, counters come back. With
--restart_behavior=overwrite or restart the second run starts from zero instead."""

import glob
import os
from pathlib import Path

import torch

from rl_pbt import parse_cfg, train
from rl_pbt.learning.checkpoints import read_checkpoint
from tests.small_run import SMALL_RUN, state_vector

LEFTOVER = "left_by_the_first_run"


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


def adam_steps(state):
    return [float(s["step"]) for s in state["optimizer"]["state"].values()]


def resumed_line(state):
    return f"policy 0: resumed at version {state['version']}, {state['env_steps']} env steps"


def assert_fresh(exp, old):
    """Every checkpoint in `exp` was written by a run that counted from zero."""
    paths = checkpoints(exp)
    assert paths
    for path in paths:
        new = read_checkpoint(path)
        assert 0 < new["version"] < old["version"]
        assert new["env_steps"] < old["env_steps"]


def test_resume_continues_with_same_weights(tmp_path, capsys):
    exp = run(tmp_path, 4000)
    first = read_checkpoint(checkpoints(exp)[-1])
    assert first["env_steps"] >= 4000
    moments = first["optimizer"]["state"].values()
    assert moments and all(s["exp_avg_sq"].abs().sum() > 0 for s in moments)
    capsys.readouterr()

    # same budget again: nothing left to train, the run loads and saves the same state
    run(tmp_path, 4000)
    assert resumed_line(first) in capsys.readouterr().out
    again = read_checkpoint(checkpoints(exp)[-1])
    assert again["env_steps"] == first["env_steps"]
    assert again["version"] == first["version"]
    for k, v in first["model"].items():
        torch.testing.assert_close(again["model"][k], v)
    assert again["optimizer"]["state"].keys() == first["optimizer"]["state"].keys()
    assert torch.equal(state_vector(again), state_vector(first)), "weights or Adam moments differ"
    assert adam_steps(again) == adam_steps(first)
    assert min(adam_steps(first)) > 0

    # larger budget: training continues from the saved version and count
    run(tmp_path, 8000)
    assert resumed_line(first) in capsys.readouterr().out
    later = read_checkpoint(checkpoints(exp)[-1])
    assert later["env_steps"] >= 8000
    assert later["version"] > first["version"]


def test_restart_behavior_overwrite_starts_fresh(tmp_path, capsys):
    exp = run(tmp_path, 2000)
    old = read_checkpoint(checkpoints(exp)[-1])
    open(os.path.join(exp, LEFTOVER), "w").close()
    capsys.readouterr()

    # a smaller budget: a resumed run would keep the old, larger counters
    run(tmp_path, 1000, "--restart_behavior=overwrite")
    out = capsys.readouterr().out
    assert not os.path.exists(os.path.join(exp, LEFTOVER)), "the old folder was not deleted"
    assert "resumed at" not in out
    assert_fresh(exp, old)
    assert os.path.isfile(os.path.join(exp, "config.json"))


def test_restart_behavior_restart_moves_the_old_run_aside(tmp_path, capsys):
    exp = run(tmp_path, 2000)
    old_paths = checkpoints(exp)
    old = read_checkpoint(old_paths[-1])
    old_bytes = [Path(p).read_bytes() for p in old_paths]
    open(os.path.join(exp, LEFTOVER), "w").close()
    capsys.readouterr()

    run(tmp_path, 1000, "--restart_behavior=restart")
    out = capsys.readouterr().out
    backups = glob.glob(glob.escape(exp) + "_old_*")
    assert len(backups) == 1, f"expected the old run moved aside, found {backups}"
    backup = backups[0]
    assert f"previous run moved to {backup}" in out
    assert os.path.isfile(os.path.join(backup, LEFTOVER))
    assert os.path.isfile(os.path.join(backup, "config.json"))
    # the old checkpoints, byte for byte what the first run left
    moved = checkpoints(backup)
    assert [os.path.basename(p) for p in moved] == [os.path.basename(p) for p in old_paths]
    assert [Path(p).read_bytes() for p in moved] == old_bytes

    # the new run: its own folder, counted from zero
    assert not os.path.exists(os.path.join(exp, LEFTOVER))
    assert "resumed at" not in out
    assert_fresh(exp, old)
