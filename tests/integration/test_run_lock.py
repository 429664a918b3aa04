"""One run per experiment folder: a second run on a folder in use stops with one line naming
the running process (exit 2) and touches nothing; the lock goes with the process holding it,
however it ends."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest

from rl_pbt.config.parse import ConfigError
from rl_pbt.runtime.run_lock import RunLock, lock_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _hold(train_dir, ready, done):
    lock = RunLock(train_dir, "exp")
    lock.acquire()
    ready.set()
    done.wait(30)


def test_lock_is_exclusive_and_dies_with_its_holder(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(tmp_path), ready, done), daemon=True)
    holder.start()
    assert ready.wait(60)
    with pytest.raises(ConfigError, match=rf"pid {holder.pid} .*--experiment"):
        RunLock(str(tmp_path), "exp").acquire()
    RunLock(str(tmp_path), "other").acquire()  # another experiment is free
    os.kill(holder.pid, signal.SIGKILL)  # no chance to clean up: the kernel drops the lock
    holder.join(10)
    mine = RunLock(str(tmp_path), "exp")
    mine.acquire()
    assert f"pid {os.getpid()}" in open(lock_path(str(tmp_path), "exp")).read()
    mine.release()


def test_a_refused_start_leaves_the_folder_alone(tmp_path):
    """The lock is taken before the folder is touched: a second start of the experiment used
    to pass a check that held nothing and then, in the seconds before the first run took the
    lock, delete the folder (--restart_behavior=overwrite) or write its config.json."""
    from rl_pbt import parse_cfg
    from rl_pbt.runtime.runner import Runner

    def cfg(*extra):
        return parse_cfg(["--env=CartPole-v1", "--serial_mode", "--num_workers=1",
                          "--num_envs_per_worker=2", "--rollout=8", "--batch_size=16",
                          f"--train_dir={tmp_path}", "--experiment=exp", *extra])  # fmt: skip

    first = Runner(cfg("--encoder_mlp_layers", "8"))  # started, holding the folder
    config = tmp_path / "exp" / "config.json"
    before = config.read_text()
    (tmp_path / "exp" / "keep").write_text("a file of the run")
    for extra in (
        ["--encoder_mlp_layers", "8", "--learning_rate=0.01"],
        ["--restart_behavior=overwrite"],
    ):
        with pytest.raises(ConfigError, match="another run is using this experiment folder"):
            Runner(cfg(*extra))
        assert config.read_text() == before and (tmp_path / "exp" / "keep").exists()
    first.stats.close()
    first.run_lock.release()
    Runner(cfg("--encoder_mlp_layers", "8")).run_lock.release()  # free again


def test_second_run_on_a_folder_in_use_exits_2_naming_the_first(tmp_path):
    cmd = [
        sys.executable, "-m", "launch.train", "--env=CartPole-v1", "--num_workers=1",
        "--num_envs_per_worker=2", "--rollout=8", "--batch_size=16", "--encoder_mlp_layers",
        "8", f"--train_dir={tmp_path}", "--experiment=busy", "--train_for_seconds=60",
    ]  # fmt: skip
    first = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(tmp_path / "busy" / "pids.json"):
            assert time.monotonic() < deadline and first.poll() is None, "first run did not start"
            time.sleep(0.2)
        before = sorted(os.listdir(tmp_path / "busy"))
        second = subprocess.run(
            cmd + ["--restart_behavior=overwrite"], cwd=ROOT, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert second.returncode == 2, second.stdout + second.stderr
        err = second.stderr.strip().splitlines()
        assert len(err) == 1 and f"pid {first.pid}" in err[0], second.stderr
        assert "Traceback" not in second.stdout + second.stderr
        # not overwritten: every file of the first run is still there (it keeps writing more)
        assert set(before) <= set(os.listdir(tmp_path / "busy"))
        assert first.poll() is None
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(60)
