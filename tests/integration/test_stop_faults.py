"""Stops that must not go astray: a SIGTERM at any moment of a run stops it with everything
saved (never lost where an exception would be swallowed, never taken for a crash of a child
that stopped on it), and a checkpoint that cannot be written stops the run in one line, with
a non-zero status and the older checkpoints kept."""

import errno
import glob
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from rl_pbt import parse_cfg
from rl_pbt.learning import checkpoints, learner_process
from rl_pbt.learning.checkpoints import latest_checkpoint, read_checkpoint
from rl_pbt.runtime import runner as runner_module
from rl_pbt.runtime.runner import Runner
from tests.small_run import SERIAL_CARTPOLE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TINY = ["--env=CartPole-v1", "--num_workers=1", "--num_envs_per_worker=2", "--rollout=8",
        "--batch_size=16", "--encoder_mlp_layers", "8", "--mp_start_method=fork",
        "--status_interval=1"]  # fmt: skip


def tiny_cfg(tmp_path, experiment, *extra):
    return parse_cfg([*TINY, f"--train_dir={tmp_path}", f"--experiment={experiment}", *extra])


def checkpoint_files(exp_dir, p=0):
    return sorted(glob.glob(os.path.join(exp_dir, f"checkpoint_p{p}", "checkpoint_*.pth")))


class SignalInAFinaliser:
    """Sends SIGTERM to this process from inside `__del__`: Python runs the handler there, and
    ignores whatever it raises (as in a logging lock's release around a fork)."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100):  # the handler runs at one of these calls
            time.sleep(0.001)


def test_a_sigterm_where_exceptions_are_swallowed_still_stops_the_run(tmp_path, monkeypatch, capfd):
    start = Runner._start_processes

    def start_then_signal(self, ctx):
        start(self, ctx)
        SignalInAFinaliser()  # dropped at once: the signal arrives inside its finaliser

    monkeypatch.setattr(Runner, "_start_processes", start_then_signal)
    cfg = tiny_cfg(tmp_path, "t", "--train_for_env_steps=10000000", "--train_for_seconds=12")
    runner = Runner(cfg)
    began = time.monotonic()
    status = runner.run()
    out = capfd.readouterr()
    text = out.out + out.err
    assert status == 1 and runner.interrupted, text[-3000:]
    assert time.monotonic() - began < 10, text[-3000:]  # at once, not at the time limit
    assert "SIGTERM: stopping" in text and "the same command resumes it" in text
    assert "Exception ignored" not in text and "Traceback" not in text, text[-3000:]
    assert checkpoint_files(tmp_path / "t")  # the learner saved at the stop


def signal_the_learner_later(exp_dir: str, sig: int, after_s: float) -> None:
    """In a thread: once the run's pids.json names learner 0 (within 12 s), wait `after_s`
    (training) and send it `sig`."""

    def send():
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            try:
                with open(os.path.join(exp_dir, "pids.json")) as f:
                    pid = json.load(f)["learner_0"]
                break
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        else:
            return
        time.sleep(after_s)
        os.kill(pid, sig)

    threading.Thread(target=send, daemon=True).start()


def test_a_learner_that_stops_on_its_own_sigterm_stops_the_run_without_a_restart(
    tmp_path, monkeypatch, capfd
):
    """It saves and ends with exit status 0: the run stops as on that signal, and is not
    restarted from its checkpoints as after a learner killed outright."""
    monkeypatch.setattr(learner_process, "STOP_MESSAGE_GRACE_S", 0.5)  # forked learners too
    monkeypatch.setattr(runner_module, "REEXEC_ARGV", ["rl-pbt-train"])  # --restart_on_jam on
    monkeypatch.setenv(runner_module.JAM_RESTARTS_ENV, "")
    restarts = []
    monkeypatch.setattr(runner_module, "restart_whole_run", lambda *a: restarts.append(a))
    cfg = tiny_cfg(tmp_path, "l", "--train_for_env_steps=10000000", "--train_for_seconds=15")
    exp_dir = str(tmp_path / "l")

    signal_the_learner_later(exp_dir, signal.SIGTERM, 1.0)
    runner = Runner(cfg)
    status = runner.run()
    text = "".join(capfd.readouterr())
    assert status == 1 and runner.interrupted and not runner.jammed, text[-3000:]
    assert restarts == [] and "restarting" not in text
    assert "learner 0 died (exit code 0)" in text and "stopped by a signal" in text
    assert "the same command resumes it" in text
    newest = latest_checkpoint(os.path.join(exp_dir, "checkpoint_p0"))
    assert read_checkpoint(newest)["env_steps"] > 0  # it saved what it trained


def refuse_checkpoint_writes_in(folder: str, monkeypatch) -> None:
    """Writing a file in `folder` fails as in a folder made immutable (chattr +i), in this
    process and in the learners it forks."""
    write = checkpoints._write_file

    def refused(path, data):
        if os.path.dirname(os.path.abspath(path)) == os.path.abspath(folder):
            raise PermissionError(errno.EPERM, "Operation not permitted", path)
        write(path, data)

    monkeypatch.setattr(checkpoints, "_write_file", refused)


@pytest.mark.parametrize("mode", ["parallel", "serial"])
def test_a_checkpoint_that_cannot_be_written_stops_the_run_in_one_line(
    tmp_path, monkeypatch, capfd, mode
):
    flags = [*SERIAL_CARTPOLE, "--num_policies=1"] if mode == "serial" else TINY
    base = [*flags, f"--train_dir={tmp_path}", "--experiment=x", "--save_every_sec=100000"]
    assert Runner(parse_cfg([*base, "--train_for_env_steps=600"])).run() == 0
    exp_dir = tmp_path / "x"
    before = checkpoint_files(exp_dir)
    kept = read_checkpoint(before[-1])["env_steps"]
    capfd.readouterr()

    refuse_checkpoint_writes_in(str(exp_dir / "checkpoint_p0"), monkeypatch)
    status = Runner(parse_cfg([*base, "--train_for_env_steps=1200"])).run()
    text = "".join(capfd.readouterr())
    assert status == 1, text[-3000:]
    errors = [line for line in text.splitlines() if "cannot write a checkpoint" in line]
    assert len(errors) == 1, text[-3000:]
    assert f"in {exp_dir / 'checkpoint_p0'}: Operation not permitted" in errors[0]
    assert "Traceback" not in text and "Results in" not in text, text[-3000:]
    assert "The run stopped before its end" in text
    assert checkpoint_files(exp_dir) == before  # the older checkpoints kept
    summary = json.loads((exp_dir / "summary.json").read_text())
    assert summary["policies"]["0"]["env_steps"] == kept  # what a resume starts from


def test_a_learner_killed_before_its_first_checkpoint_leaves_a_run_that_resumes(tmp_path):
    """summary.json counts the steps the checkpoints hold: a learner killed outright before
    its first save leaves 0, and a re-run resumes instead of being refused for a policy that
    trained but has no checkpoint. The run is a child process: a learner killed inside a
    shared queue's operation leaves that queue locked, and the runner's watchdog then ends
    the runner's process, which must not be the test runner."""
    exp_dir = str(tmp_path / "k")
    log_path = tmp_path / "log.txt"
    cmd = [sys.executable, "-m", "launch.train", *TINY, f"--train_dir={tmp_path}",
           "--experiment=k", "--train_for_env_steps=10000000", "--train_for_seconds=60",
           "--save_every_sec=100000", "--restart_on_jam=False",
           "--heartbeat_timeout=10"]  # fmt: skip
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        # killed once a status line counts frames ("[1s] 2.4k frames"), long before a
        # checkpoint (--save_every_sec)
        while not re.search(r"\] [1-9][\d.]*k? frames", log_path.read_text()):
            assert time.monotonic() < deadline and proc.poll() is None, log_path.read_text()
            time.sleep(0.1)
        with open(os.path.join(exp_dir, "pids.json")) as f:
            os.kill(json.load(f)["learner_0"], signal.SIGKILL)
        assert proc.wait(timeout=90) == 1
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = log_path.read_text()
    assert not checkpoint_files(exp_dir), text[-3000:]
    if "learner 0 died (exit code -9)" in text:  # killed outside a queue operation
        summary = json.loads(open(os.path.join(exp_dir, "summary.json")).read())
        assert summary["policies"]["0"]["env_steps"] == 0, text[-3000:]
    else:  # inside one: the queue stayed locked, the watchdog ended the run, nothing saved
        assert "the runner's loop has not moved for" in text, text[-3000:]
    again = Runner(tiny_cfg(tmp_path, "k", "--train_for_env_steps=200"))  # not refused
    assert again.resuming and again.run() == 0
    assert checkpoint_files(exp_dir)


def test_a_stop_whose_saves_failed_does_not_say_it_saved(tmp_path, monkeypatch, capfd):
    """Ctrl-C (or SIGTERM) with the checkpoint folder refusing writes: the closing text said
    the run was stopped "with what it learned saved"; it now says the run stopped before its
    end and that the messages above say why."""
    base = [*SERIAL_CARTPOLE, "--num_policies=1", f"--train_dir={tmp_path}", "--experiment=x"]
    refuse_checkpoint_writes_in(str(tmp_path / "x" / "checkpoint_p0"), monkeypatch)
    runner = Runner(parse_cfg([*base, "--train_for_env_steps=100000"]))
    runner.stop_signals.requested = signal.SIGTERM  # taken at the loop's first turn
    status = runner.run()
    text = "".join(capfd.readouterr())
    assert status == 1 and runner.interrupted and runner.save_failed, text[-3000:]
    assert "cannot write a checkpoint" in text
    assert "with what it learned saved" not in text, text[-1500:]
    assert "The run stopped before its end" in text
