"""Faults in a parallel run. A rollout worker whose process dies without a word (here: its env
kills it with SIGKILL inside step(), as a crash in an env's native code would) is restarted
with fresh envs and the run finishes its whole budget; one that keeps dying stops the run with
the reason, checkpoints saved; a learner killed outright stops the run cleanly (the other
policies saved), or restarts the whole run from its checkpoints."""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from rl_pbt.learning.checkpoints import latest_checkpoint, read_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# argv: train_dir, experiment, worker that dies, deaths (how many of its processes die), then
# extra flags. Each process of that worker dies at its env 0's step 300 while deaths remain
# (counted with marker files, so a restarted worker knows what happened before it).
SCRIPT = """
import os, signal, sys
import gymnasium as gym
from rl_pbt import parse_cfg, register_env, train

TRAIN_DIR, EXPERIMENT, VICTIM, DEATHS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])


class DyingCartPole(gym.Wrapper):
    def __init__(self, env, doomed):
        super().__init__(env)
        self.doomed, self.steps = doomed, 0

    def step(self, action):
        self.steps += 1
        if self.doomed and self.steps == 300:
            marks = os.path.join(TRAIN_DIR, "deaths")
            os.makedirs(marks, exist_ok=True)
            done = len(os.listdir(marks))
            if done < DEATHS:
                open(os.path.join(marks, str(done)), "w").close()
                # KILL_PARENT: its parent dies instead (under forkserver, the fork server)
                victim = os.getppid() if os.environ.get("KILL_PARENT") else os.getpid()
                os.kill(victim, signal.SIGKILL)
        return self.env.step(action)


def make(full_env_name, cfg, env_config, render_mode=None):
    env_config = env_config or {}
    doomed = env_config.get("worker_index") == VICTIM and env_config.get("vector_index") == 0
    return DyingCartPole(gym.make("CartPole-v1"), doomed)


if __name__ == "__main__":
    register_env("dying_cartpole", make)
    cfg = parse_cfg(["--env=dying_cartpole", "--num_workers=2", "--num_envs_per_worker=4",
                     "--rollout=16", "--batch_size=128", "--num_policies=2",
                     "--encoder_mlp_layers", "16", "--status_interval=1", "--save_every_sec=2",
                     "--train_dir=" + TRAIN_DIR, "--experiment=" + EXPERIMENT] + sys.argv[5:])
    sys.exit(train(cfg))
"""


def run_script(tmp_path, experiment, victim, deaths, *extra, timeout=240, env_vars=None):
    script = tmp_path / "dying_train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    env.update(env_vars or {})
    cmd = [sys.executable, str(script), str(tmp_path), experiment, str(victim), str(deaths)]
    return subprocess.run(
        cmd + list(extra), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )


def summary(exp_dir):
    with open(os.path.join(exp_dir, "summary.json")) as f:
        return json.load(f)


def newest_state(exp_dir, p):
    return read_checkpoint(latest_checkpoint(os.path.join(exp_dir, f"checkpoint_p{p}")))


def test_dead_worker_is_restarted_and_the_run_finishes_its_budget(tmp_path):
    budget = 15_000
    out = run_script(tmp_path, "w", 0, 2, f"--train_for_env_steps={budget}")
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    assert log.count("rollout worker 0 died (exit code -9)") == 2, log[-3000:]
    assert log.count("restarted it with fresh envs") == 2
    assert "Traceback" not in log
    exp_dir = os.path.join(tmp_path, "w")
    result = summary(exp_dir)
    assert result["worker_restarts"] == 2
    for p in (0, 1):
        assert result["policies"][str(p)]["env_steps"] >= budget
        assert newest_state(exp_dir, p)["env_steps"] >= budget  # trained on after the restarts


def test_a_fork_server_killed_alone_leaves_the_run_going(tmp_path):
    """Under forkserver (CUDA's start method) a child's end is read from the fork server. Killed
    alone mid-run, it made every child read as ended (exit code 255), and the children took
    their parent's end for the runner's and stopped: the run ended with exit 1. Now the
    children run on, watched by their pids, and the run spends its budget."""
    budget = 15_000
    out = run_script(tmp_path, "fs", 0, 1, f"--train_for_env_steps={budget}",
                     "--mp_start_method=forkserver", env_vars={"KILL_PARENT": "1"})  # fmt: skip
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    assert len(os.listdir(tmp_path / "deaths")) == 1  # the fork server was killed
    assert "the fork server ended (its children run on)" in log, log[-3000:]
    assert "died" not in log and "Traceback" not in log, log[-3000:]
    exp_dir = os.path.join(tmp_path, "fs")
    result = summary(exp_dir)
    assert result["worker_restarts"] == 0
    for p in (0, 1):
        assert result["policies"][str(p)]["env_steps"] >= budget
        assert newest_state(exp_dir, p)["env_steps"] >= budget


def test_a_worker_that_keeps_dying_stops_the_run_with_the_reason(tmp_path):
    # no periodic saves: a checkpoint can only come from the stop
    out = run_script(tmp_path, "d", 1, 99, "--train_for_seconds=200", "--save_every_sec=100000")
    log = out.stdout + out.stderr
    assert out.returncode == 1, log[-3000:]
    assert "rollout worker 1 died (exit code -9)" in log
    assert "died 3 times within 10 minutes, so the run stops" in log, log[-3000:]
    assert "Traceback" not in log
    last_death = max(os.path.getmtime(f) for f in glob.glob(str(tmp_path / "deaths" / "*")))
    for p in (0, 1):  # stopped cleanly: both learners saved, after the last death
        files = glob.glob(os.path.join(tmp_path, "d", f"checkpoint_p{p}", "*.pth"))
        assert files and min(os.path.getmtime(f) for f in files) >= last_death, files


def train_cmd(train_dir, experiment, *extra):
    return [
        sys.executable, "-m", "launch.train", "--env=CartPole-v1", "--num_workers=2",
        "--num_envs_per_worker=4", "--rollout=16", "--batch_size=128", "--num_policies=2",
        "--encoder_mlp_layers", "16", "--status_interval=1", "--save_every_sec=2",
        f"--train_dir={train_dir}", f"--experiment={experiment}", *extra,
    ]  # fmt: skip


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.2)


def pids(exp_dir):
    try:
        with open(os.path.join(exp_dir, "pids.json")) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def run_and_kill_learner_1(exp_dir: str, cmd: list[str], timeout: float) -> tuple[int, str]:
    """Start `cmd`, SIGKILL learner 1 once both policies have a checkpoint; (exit status, log)."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:

        def training():
            ckpts = [glob.glob(os.path.join(exp_dir, f"checkpoint_p{p}", "*.pth")) for p in (0, 1)]
            return all(ckpts) and "learner_1" in pids(exp_dir)

        wait_for(training, 120, "training")
        os.kill(pids(exp_dir)["learner_1"], signal.SIGKILL)
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out.decode(errors="replace")


def test_killed_learner_stops_the_run_cleanly_with_checkpoints_to_resume_from(tmp_path):
    exp_dir = os.path.join(tmp_path, "l")
    cmd = train_cmd(
        tmp_path, "l", "--train_for_seconds=200", "--heartbeat_timeout=10", "--restart_on_jam=False"
    )
    status, log = run_and_kill_learner_1(exp_dir, cmd, 120)
    assert status == 1, log[-3000:]
    # killed outside a queue operation, the learner is named at once; killed inside one (it
    # holds a shared queue's lock for microseconds), the queue stays locked and the runner's
    # watchdog ends the run instead: either way it stops
    stuck = "the runner's loop has not moved for"
    assert "learner 1 died (exit code -9)" in log or stuck in log, log[-3000:]
    # both policies keep a checkpoint a re-run resumes from (the one the kill left behind: its
    # newest periodic one; a learner killed and the run restarted from such checkpoints, and a
    # stopped run resumed, are the tests below and in test_no_run_lost.py)
    assert all(newest_state(exp_dir, p)["env_steps"] > 0 for p in (0, 1))


STUCK_SCRIPT = """
import sys, time
from rl_pbt import parse_cfg
from rl_pbt.runtime import runner as runner_module

runner_module.STOP_GRACE_S = 2.0
ticks = []
original = runner_module.Runner._tick


def tick(self, final=False):
    ticks.append(1)
    if len(ticks) > 20 and not final:
        time.sleep(3600)  # the loop blocks for good, as on a queue a killed process left locked
    return original(self, final)


runner_module.Runner._tick = tick
cfg = parse_cfg(["--env=CartPole-v1", "--num_workers=1", "--num_envs_per_worker=2",
                 "--rollout=8", "--batch_size=16", "--encoder_mlp_layers", "8",
                 "--heartbeat_timeout=3", "--train_for_seconds=300",
                 "--train_dir=" + sys.argv[1], "--experiment=stuck"])
sys.exit(runner_module.run(cfg))
"""


def test_a_stuck_runner_loop_ends_the_run_instead_of_hanging(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(textwrap.dedent(STUCK_SCRIPT))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    log = out.stdout + out.stderr
    assert out.returncode == 1, log[-3000:]
    assert "the runner's loop has not moved for" in log, log[-3000:]
    assert time.monotonic() - start < 60
    children = [v for k, v in pids(tmp_path / "stuck").items() if k != "runner"]
    assert children
    for pid in children:  # no process outlived the runner
        wait_for(lambda pid=pid: not os.path.exists(f"/proc/{pid}") or _zombie(pid), 10, "exit")


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] == "Z"
    except FileNotFoundError:
        return True


JAM_SCRIPT = """
import os, sys, time
from rl_pbt import parse_cfg
from rl_pbt.runtime import runner as runner_module

runner_module.STOP_GRACE_S = 2.0
# as rl-pbt-train does: the command that restarts this run (here: this script again)
runner_module.REEXEC_ARGV = [sys.executable, *sys.argv]
first = runner_module.JAM_RESTARTS_ENV not in os.environ
ticks = []
original = runner_module.Runner._tick


def tick(self, final=False):
    ticks.append(1)
    if first and len(ticks) > 20 and not final:
        time.sleep(3600)  # the first run jams for good, as on a queue a killed process locked
    return original(self, final)


runner_module.Runner._tick = tick
cfg = parse_cfg(["--env=CartPole-v1", "--num_workers=1", "--num_envs_per_worker=2",
                 "--rollout=8", "--batch_size=16", "--encoder_mlp_layers", "8",
                 "--heartbeat_timeout=3", "--train_for_env_steps=3000", "--save_every_sec=1",
                 "--train_dir=" + sys.argv[1], "--experiment=jam"])
sys.exit(runner_module.run(cfg))
"""


@pytest.mark.slow  # 17 s; the default run checks the watchdog (a stuck loop ends the run)
# and the whole run's restart (after a killed learner) apart
def test_a_jammed_run_restarts_itself_from_its_checkpoints(tmp_path):
    script = tmp_path / "jam.py"
    script.write_text(textwrap.dedent(JAM_SCRIPT))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    env.pop("RL_PBT_JAM_RESTARTS", None)
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    assert log.count("restarting the whole run from its last checkpoints") == 1, log[-3000:]
    after = log.split("restarting the whole run")[1]
    assert "(resuming)" in after, log[-3000:]
    # the time limit counts from the command's first start, not from the restart
    ago = re.search(r"--train_for_seconds=\d+ counts from the command's start, (\d+) s ago", after)
    assert ago and int(ago.group(1)) >= 3, log[-3000:]
    with open(tmp_path / "jam" / "summary.json") as f:
        assert all(s["env_steps"] >= 3000 for s in json.load(f)["policies"].values())


def test_jam_restarts_are_bounded_and_need_the_command_line(monkeypatch):
    from rl_pbt import parse_cfg
    from rl_pbt.runtime import runner as runner_module

    cfg = parse_cfg(["--env=CartPole-v1"])
    monkeypatch.delenv(runner_module.JAM_RESTARTS_ENV, raising=False)
    monkeypatch.setattr(runner_module, "REEXEC_ARGV", None)
    assert runner_module.jam_restart_argv(cfg) is None  # not started by rl-pbt-train
    monkeypatch.setattr(runner_module, "REEXEC_ARGV", ["python", "-m", "launch.train"])
    now = 10_000.0
    for k in range(3):
        assert runner_module.jam_restart_argv(cfg, now + k) == ["python", "-m", "launch.train"]
    assert runner_module.jam_restart_argv(cfg, now + 10) is None  # 3 within the hour
    assert runner_module.jam_restart_argv(cfg, now + 3700) is not None  # an hour later
    off = parse_cfg(["--env=CartPole-v1", "--restart_on_jam=False"])
    assert runner_module.jam_restart_argv(off, now + 9000) is None


def test_the_start_a_restart_carries_is_read_with_care():
    from rl_pbt.runtime.runner import _started_at

    assert _started_at("1000.5", 2000.0) == 1000.5
    for value in (None, "", "soon", "3000", "-1"):  # unset, not a time, in the future, < 0
        assert _started_at(value, 2000.0) == 2000.0


def test_killed_learner_restarts_the_whole_run_from_its_checkpoints(tmp_path):
    exp_dir = os.path.join(tmp_path, "r")
    cmd = train_cmd(tmp_path, "r", "--train_for_env_steps=25000", "--heartbeat_timeout=10")
    status, log = run_and_kill_learner_1(exp_dir, cmd, 240)
    assert status == 0, log[-3000:]
    assert "restarting the whole run from its last checkpoints" in log, log[-3000:]
    assert "resumed at version" in log.split("restarting the whole run")[1], log[-3000:]
    for p in (0, 1):
        assert newest_state(exp_dir, p)["env_steps"] >= 25_000
