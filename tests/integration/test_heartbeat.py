"""A component that hangs or dies is named in a clear error and the run stops cleanly."""

import contextlib
import glob
import os

import pytest

from rl_pbt import parse_cfg, register_env, train
from tests.scripted_envs import HangingEnv


def make_hanging(name, cfg, env_config, render_mode=None):
    return HangingEnv(env_config, hang_after=200)


def make_crashing(name, cfg, env_config, render_mode=None):
    return HangingEnv(env_config, hang_after=200, crash=True)


def make_crashing_everywhere(name, cfg, env_config, render_mode=None):
    return HangingEnv(env_config, hang_after=200, crash=True, everywhere=True)


register_env("hanging_env", make_hanging)
register_env("crashing_env", make_crashing)
register_env("crashing_everywhere_env", make_crashing_everywhere)


def run(tmp_path, env, capsys, extra=()):
    cfg = parse_cfg(
        [
            *extra,
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
    # the worker known to hang is not waited for as long as the learners saving
    assert "rollout_worker_0 still not answering; terminating it" in out
    # stopped cleanly: learners saved their checkpoints
    assert glob.glob(os.path.join(tmp_path, "hb", "checkpoint_p0", "checkpoint_*.pth"))


def test_crashing_worker_is_named(tmp_path, capsys):
    status, out = run(tmp_path, "crashing_env", capsys)
    assert status == 1
    assert "rollout worker 0" in out and "env exploded on purpose" in out
    assert glob.glob(os.path.join(tmp_path, "hb", "checkpoint_p0", "checkpoint_*.pth"))


def test_every_worker_crashing_still_stops_cleanly_and_saves(tmp_path, capsys):
    """Both workers fail at about the same time: the second error, read while stopping, is
    logged instead of breaking the stop, so train() returns 1 and every learner's checkpoint,
    the PBT state and summary.json are written."""
    for attempt in range(3):  # the race is in the timing of the two errors: try it a few times
        folder = tmp_path / f"run{attempt}"
        status, out = run(
            folder, "crashing_everywhere_env", capsys, ["--num_policies=2", "--with_pbt"]
        )
        assert status == 1 and "env exploded on purpose" in out
        exp = os.path.join(folder, "hb")
        for p in (0, 1):
            assert glob.glob(os.path.join(exp, f"checkpoint_p{p}", "checkpoint_*.pth")), out
        assert os.path.isfile(os.path.join(exp, "summary.json")), out
        assert os.path.isfile(os.path.join(exp, "pbt", "state.json")), out


def _child_pids(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(x) for x in f.read().split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_killed_runner_leaves_no_orphans_and_keeps_progress(tmp_path):
    """The runner is killed outright (no chance to stop anything): its workers and learners
    notice, stop within seconds, and the learners save checkpoints on the way out."""
    import signal
    import subprocess
    import sys
    import time

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cmd = [sys.executable, "-m", "launch.train", "--env=CartPole-v1", "--num_workers=2"]
    cmd += ["--num_envs_per_worker=2", "--rollout=8", "--batch_size=32", "--num_policies=2"]
    cmd += ["--encoder_mlp_layers", "8", "--train_for_seconds=120", "--save_every_sec=100000"]
    cmd += [f"--train_dir={tmp_path}", "--experiment=orphans", "--status_interval=1"]
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    children: list[int] = []
    try:
        deadline = time.monotonic() + 60
        for line in proc.stdout:  # training is under way once a status line shows frames
            if b"fps" in line and b"frames" in line:
                break
            assert time.monotonic() < deadline, "no status line within 60 s"
        children = _child_pids(proc.pid)
        assert len(children) >= 4  # 2 workers + 2 learners (+ queue helpers)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 20
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [c for c in children if _alive(c)], "children outlived the runner"
    finally:
        for c in children:
            if _alive(c):
                os.kill(c, signal.SIGKILL)
        proc.kill()
    for p in (0, 1):
        assert glob.glob(os.path.join(tmp_path, "orphans", f"checkpoint_p{p}", "*.pth"))


@pytest.mark.slow
def test_a_suspended_run_goes_on_when_resumed(tmp_path):
    """The whole run suspended (Ctrl-Z, a batch system) for longer than --heartbeat_timeout,
    then resumed: before, the runner took every component for hung and stopped (and
    `rl-pbt-train` restarted the run); now it goes on to its end."""
    import signal
    import subprocess
    import sys
    import time

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cmd = [sys.executable, "-m", "launch.train", "--env=CartPole-v1", "--num_workers=2"]
    cmd += ["--num_envs_per_worker=2", "--rollout=8", "--batch_size=32", "--heartbeat_timeout=3"]
    cmd += ["--encoder_mlp_layers", "8", "--train_for_seconds=25", "--status_interval=1"]
    cmd += [f"--train_dir={tmp_path}", "--experiment=suspended"]
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        out = b""
        for line in proc.stdout:  # training is under way once a status line shows frames
            out += line
            if b"fps" in line and b"frames" in line:
                break
            assert time.monotonic() < deadline, "no status line within 60 s"
        os.killpg(proc.pid, signal.SIGSTOP)
        time.sleep(8)  # past the timeout, also a starting component's (3x)
        os.killpg(proc.pid, signal.SIGCONT)
        out += proc.communicate(timeout=90)[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    text = out.decode(errors="replace")
    assert "stopped answering" not in text and "has not moved" not in text, text[-2000:]
    assert "was suspended for" in text
    assert proc.returncode == 0, text[-2000:]
