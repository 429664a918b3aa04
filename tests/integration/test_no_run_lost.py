"""No run is ever lost: overwrite deletes only a folder this trainer made, inside --train_dir;
SIGTERM saves everything; a missing or broken pbt/state.json is rebuilt, never silently reset;
the warm-up's partial first episodes are not scored."""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from rl_pbt import parse_cfg, register_env
from rl_pbt.config.parse import ConfigError
from rl_pbt.learning.checkpoints import load_latest_checkpoint
from rl_pbt.learning.learner_process import LearnerHost
from rl_pbt.pbt.lineage import read_events
from rl_pbt.runtime.runner import FORK_SERVER_LOST, Runner, _MergedQueue, _running, _wait_for
from tests.small_run import SMALL_RUN

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cfg_for(tmp_path, experiment, *extra):
    return parse_cfg(
        SMALL_RUN
        + [
            "--env=CartPole-v1",
            f"--train_dir={tmp_path / 'runs'}",
            f"--experiment={experiment}",
            *extra,
        ]
    )


def make_precious(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}")
    (folder / "precious.txt").write_text("results")


@pytest.mark.parametrize("name", ["", "../outside", "/abs/path", "..", "a/b"])
def test_experiment_must_be_a_plain_name(tmp_path, name):
    make_precious(tmp_path / "runs" / "other_run")
    make_precious(tmp_path / "outside")
    with pytest.raises(ConfigError, match="--experiment"):
        Runner(cfg_for(tmp_path, name, "--restart_behavior=overwrite"))
    assert (tmp_path / "runs" / "other_run" / "precious.txt").read_text() == "results"
    assert (tmp_path / "outside" / "precious.txt").read_text() == "results"


def test_overwrite_refuses_a_folder_without_the_marker(tmp_path):
    make_precious(tmp_path / "runs" / "mine")
    with pytest.raises(ConfigError, match="marker"):
        Runner(cfg_for(tmp_path, "mine", "--restart_behavior=overwrite"))
    assert (tmp_path / "runs" / "mine" / "precious.txt").read_text() == "results"


def test_overwrite_refuses_a_link_to_elsewhere(tmp_path):
    make_precious(tmp_path / "elsewhere")
    (tmp_path / "elsewhere" / ".rl_pbt_experiment").write_text("")
    (tmp_path / "runs").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "runs" / "linked")
    with pytest.raises(ConfigError, match="symbolic link"):
        Runner(cfg_for(tmp_path, "linked", "--restart_behavior=overwrite"))
    assert (tmp_path / "elsewhere" / "precious.txt").read_text() == "results"


def test_overwrite_deletes_a_run_this_trainer_made(tmp_path):
    runner = Runner(cfg_for(tmp_path, "made"))
    runner.stats.close()
    runner.run_lock.release()
    exp = tmp_path / "runs" / "made"
    assert (exp / ".rl_pbt_experiment").is_file()
    (exp / "old_file.txt").write_text("old")
    runner = Runner(cfg_for(tmp_path, "made", "--restart_behavior=overwrite"))
    runner.stats.close()
    runner.run_lock.release()
    assert not (exp / "old_file.txt").exists() and (exp / "config.json").is_file()


def _ignore_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _start_run(tmp_path, steps, ignore_sigint=False, extra=()):
    cmd = [
        sys.executable,
        "-m",
        "launch.train",
        *SMALL_RUN,
        "--env=CartPole-v1",
        "--num_policies=2",
        "--with_pbt",
        "--pbt_period_env_steps=5000",
        "--pbt_start_mutation=5000",
        f"--train_for_env_steps={steps}",
        "--save_every_sec=10000",  # only the stop saves
        "--status_interval=1",
        f"--train_dir={tmp_path}",
        "--experiment=term",
        *extra,
    ]
    log = open(tmp_path / f"log_{steps}.txt", "w")
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # as a shell starts a background job: SIGINT ignored from the start
        preexec_fn=_ignore_sigint if ignore_sigint else None,
    )


def _wait_trained(tmp_path, steps, env_steps=2000):
    """Until the slowest policy passed `env_steps` (90 s at most)."""
    deadline = time.time() + 90
    while time.time() < deadline:
        time.sleep(0.5)
        log = (tmp_path / f"log_{steps}.txt").read_text()
        # the status headline names the slowest policy's env steps, e.g. "(p1 2.51k slowest)"
        slowest = re.findall(r"\(p\d+ ([\d.]+)(k?) slowest\)", log)
        if slowest and float(slowest[-1][0]) * (1000 if slowest[-1][1] else 1) > env_steps:
            return


def _trained(exp):
    """Env steps the policies trained, as the newest checkpoints hold them."""
    out = []
    for p in range(2):
        files = sorted(glob.glob(str(exp / f"checkpoint_p{p}" / "checkpoint_*.pth")))
        out.append(int(os.path.basename(files[-1]).split("_")[-1].split(".")[0]) if files else 0)
    return out


@pytest.mark.slow  # 11 s; Ctrl-C and SIGTERM themselves are checked in the default run
def test_a_run_started_with_sigint_ignored_ignores_it_in_every_process(tmp_path):
    """A background job (`cmd &` in a script, nohup) starts with SIGINT ignored; a `kill -INT`
    to its whole process group then leaves every process running, the children included (they
    used to die, and the main process restarted them)."""
    proc = _start_run(tmp_path, 10_000_000, ignore_sigint=True)
    _wait_trained(tmp_path, 10_000_000)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(4.0)
    log = (tmp_path / "log_10000000.txt").read_text()
    try:
        assert proc.poll() is None, log[-2000:]
        assert "died" not in log and "restarting" not in log, log[-2000:]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=90)
    assert all(t > 0 for t in _trained(tmp_path / "term"))  # SIGTERM still stops and saves


@pytest.mark.parametrize(
    "target, extra",
    [("group", []), ("main", []), ("group", ["--mp_start_method=forkserver"])],
    ids=["group", "main", "group_forkserver"],  # forkserver: the start method on CUDA
)
def test_sigterm_saves_everything_and_the_run_resumes(tmp_path, target, extra):
    proc = _start_run(tmp_path, 10_000_000, extra=extra)
    exp = tmp_path / "term"
    _wait_trained(tmp_path, 10_000_000)  # until both learners trained a little
    if target == "group":
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=90)
    assert proc.returncode != 0  # stopped before its budget
    trained = _trained(exp)
    assert all(t > 0 for t in trained), trained
    assert (exp / "pbt" / "state.json").is_file()
    summary = json.loads((exp / "summary.json").read_text())
    assert summary["policies"]["0"]["env_steps"] > 0
    if target == "group":
        return  # what a stop saved is resumed the same way after either signal: once, below
    inits = [e for e in read_events(str(exp / "pbt" / "lineage.jsonl")) if e["action"] == "init"]
    # the same command resumes: counters continue, no new PBT start
    proc = _start_run(tmp_path, max(trained) + 4000)
    proc.wait(timeout=120)
    assert proc.returncode == 0, (tmp_path / f"log_{max(trained) + 4000}.txt").read_text()[-3000:]
    assert "(resuming)" in (tmp_path / f"log_{max(trained) + 4000}.txt").read_text()
    assert all(b >= a for a, b in zip(trained, _trained(exp)))
    events = read_events(str(exp / "pbt" / "lineage.jsonl"))
    assert [e for e in events if e["action"] == "init"] == inits


def _pbt_run(tmp_path, steps):
    cfg = cfg_for(
        tmp_path,
        "pbt",
        "--num_policies=3",
        "--with_pbt",
        "--serial_mode",
        "--num_workers=1",
        f"--train_for_env_steps={steps}",
        "--pbt_init_random",
    )
    return Runner(cfg)


@pytest.mark.parametrize("damage", ["missing", "truncated", "not_a_state"])
def test_a_broken_pbt_state_is_rebuilt_not_reset(tmp_path, damage):
    first = _pbt_run(tmp_path, 1000)
    hparams = [dict(h) for h in first.pbt.hparams]
    first.stats.close()
    first.run_lock.release()
    exp = tmp_path / "runs" / "pbt"
    state = exp / "pbt" / "state.json"
    if damage == "missing":
        state.unlink()
    elif damage == "truncated":
        state.write_text(state.read_text()[:40])
    else:
        state.write_text("[1, 2]")
    n_events = len(read_events(str(exp / "pbt" / "lineage.jsonl")))
    again = _pbt_run(tmp_path, 2000)
    assert again.pbt.restored and again.pbt.rebuilt_note
    assert again.pbt.hparams == hparams  # the drawn values, not the defaults
    assert len(read_events(str(exp / "pbt" / "lineage.jsonl"))) == n_events  # no new init
    # no instant PBT step on resume: a period counts from the steps first seen
    assert again.pbt.update([50_000_000] * 3) == []
    again.stats.close()
    again.run_lock.release()


def test_a_broken_pbt_state_without_policy_files_stops_with_its_name(tmp_path):
    done = _pbt_run(tmp_path, 1000)
    done.stats.close()
    done.run_lock.release()
    exp = tmp_path / "runs" / "pbt"
    (exp / "pbt" / "state.json").unlink()
    (exp / "policy_01_cfg.json").unlink()
    with pytest.raises(ConfigError, match="state.json"):
        _pbt_run(tmp_path, 2000)


class FixedLength(gym.Env):
    """Every episode lasts exactly LENGTH steps."""

    LENGTH = 7
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 1.0, self.t >= self.LENGTH, False, {}


def make_fixed(full_env_name, cfg, env_config, render_mode=None):
    return FixedLength()


register_env("fixed_length", make_fixed)


def test_warm_up_episodes_are_not_scored(tmp_path):
    cfg = parse_cfg(
        [
            "--env=fixed_length",
            "--serial_mode",
            "--num_workers=1",
            "--num_envs_per_worker=8",
            "--rollout=8",
            "--batch_size=64",
            "--encoder_mlp_layers",
            "8",
            f"--train_dir={tmp_path}",
            "--experiment=w",
            "--seed=2",
        ]
    )
    runner = Runner(cfg)
    learners = {0: runner._learner_factory(0)}
    host = LearnerHost(
        learners, _MergedQueue(runner.learner_queues), runner.learner_queues, runner.report_queue
    )
    host.start(resume=False)
    worker = runner._worker_factory(0, lambda: False, blocking=False)
    assert worker.unscored.sum() >= 4  # warm-ups of 1..15 steps: most envs start mid-episode
    worker._maybe_report = lambda force=False: None  # keep every episode in the worker
    for _ in range(50):
        worker.step()
        host.poll(timeout=0.0)
    lengths = [ep.length for ep in worker.episodes]
    assert len(lengths) >= 40
    assert set(lengths) == {FixedLength.LENGTH}  # no partial first episode among them
    runner.stats.close()
    runner.run_lock.release()


def test_old_checkpoints_are_not_deleted_through_a_link(tmp_path):
    runner = Runner(
        cfg_for(tmp_path, "linkck", "--keep_checkpoints=1", "--serial_mode", "--num_policies=2")
    )
    outside = tmp_path / "other_disk"
    outside.mkdir()
    precious = outside / "checkpoint_000000000000_000000000000999.pth"
    precious.write_text("someone else's file")
    os.symlink(outside, tmp_path / "runs" / "linkck" / "checkpoint_p0")
    learner = runner._learner_factory(0)
    for _ in range(3):
        assert learner.save() is not None
        learner.version += 1
    assert precious.read_text() == "someone else's file"
    # in a real folder, rotation goes on as usual
    learner = runner._learner_factory(1)
    for _ in range(3):
        learner.save()
        learner.version += 1
    assert len(glob.glob(str(tmp_path / "runs" / "linkck" / "checkpoint_p1" / "*.pth"))) == 1
    runner.stats.close()
    runner.run_lock.release()


@pytest.mark.parametrize("mode", ["serial", "processes"])
def test_a_pbt_copy_sent_just_before_a_stop_lands_before_the_save(tmp_path, monkeypatch, mode):
    """SIGTERM right after a copy is decided: pbt/state.json records the member's new values,
    so its checkpoint must hold them too (the copy used to be dropped at the stop: new values
    in the state, old weights and values in the checkpoint)."""
    decided = []
    apply = Runner._apply_decision

    def then_sigterm(self, policy, source, hparams, shaping):
        apply(self, policy, source, hparams, shaping)
        if source is not None and not decided:
            decided.append(policy)
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(Runner, "_apply_decision", then_sigterm)
    extra = ["--serial_mode"] if mode == "serial" else ["--mp_start_method=fork"]
    cfg = cfg_for(
        tmp_path,
        "copy_at_stop",
        *extra,
        "--num_policies=3",
        "--num_workers=1",
        "--with_pbt",
        "--pbt_period_env_steps=1000",
        "--pbt_start_mutation=0",
        "--pbt_replace_fraction=0.5",
        "--pbt_replace_reward_gap=0",
        "--pbt_mutation_rate=1.0",
        "--seed=3",
        "--train_for_env_steps=200000",
        "--train_for_seconds=120",
    )
    Runner(cfg).run()
    assert decided, "no copy was decided"
    exp = tmp_path / "runs" / "copy_at_stop"
    state = json.loads((exp / "pbt" / "state.json").read_text())
    for p in range(3):
        _, checkpoint = load_latest_checkpoint(str(exp / f"checkpoint_p{p}"))
        saved = checkpoint["hparams"]["learning_rate"]
        assert saved == pytest.approx(state["hparams"][p]["learning_rate"]), p


def test_a_failed_side_write_at_the_stop_leaves_the_others(tmp_path, monkeypatch, capsys):
    """A full disk at the stop: summary.json cannot be written, pbt/state.json still is, and
    the stop goes on (it used to raise out of the shutdown, skipping the rest)."""
    runner = _pbt_run(tmp_path, 1000)
    state_path = tmp_path / "runs" / "pbt" / "pbt" / "state.json"
    state_path.unlink()

    def full_disk():
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner, "_write_summary", full_disk)
    runner._save_side_state()
    runner.stats.close()
    runner.run_lock.release()
    assert state_path.is_file()
    assert "could not write summary.json: No space left on device" in capsys.readouterr().out
    assert runner.side_state_failed  # the closing text will not say all was saved


def test_a_run_killed_before_its_stop_resumes_its_frames_and_episodes(tmp_path, monkeypatch):
    """summary.json is written during the run whenever a newer checkpoint is found, not only
    at the stop: a run killed whole (here its stop writes nothing but the checkpoints, as after
    a SIGKILL of the main process once the learners saved) resumes its frames and episodes from
    it instead of counting from 0."""
    from rl_pbt import train
    from rl_pbt.runtime import runner as runner_module
    from tests.small_run import SERIAL_CARTPOLE

    argv = [*SERIAL_CARTPOLE, f"--train_dir={tmp_path}", "--experiment=e", "--seed=1",
            "--save_every_sec=1"]  # fmt: skip
    monkeypatch.setattr(runner_module, "SUMMARY_CHECK_EVERY_S", 0.0)
    with monkeypatch.context() as killed:
        killed.setattr(runner_module.Runner, "_save_side_state", lambda self: None)
        train(parse_cfg([*argv, "--train_for_env_steps=6000"]))
    exp = os.path.join(tmp_path, "e")
    path = os.path.join(exp, "summary.json")
    with open(path) as f:
        before = json.load(f)
    assert before["final"] is False  # written during the run
    newest = [load_latest_checkpoint(os.path.join(exp, f"checkpoint_p{p}")) for p in range(2)]
    kept = [before["policies"][str(p)]["env_steps"] for p in range(2)]
    assert all(0 < k <= state["env_steps"] for k, (_, state) in zip(kept, newest)), kept
    assert before["frames"] >= sum(kept) and before["policies"]["0"]["episodes"] > 0
    assert train(parse_cfg([*argv, "--train_for_env_steps=9000"])) == 0
    with open(path) as f:
        after = json.load(f)
    steps = [after["policies"][str(p)]["env_steps"] for p in range(2)]
    assert min(steps) >= 9000 and after["final"] is True
    assert after["frames"] > before["frames"] + 3000
    for p in range(2):
        episodes = (before["policies"][str(p)]["episodes"], after["policies"][str(p)]["episodes"])
        assert episodes[1] > episodes[0] > 0, episodes


def test_the_stop_waits_for_the_learners_processes_themselves():
    """Under forkserver the runner reads a child's end from the fork server; a SIGTERM to the
    group ends the server, and the learners then look ended while they still save: the stop
    waits for their processes, by pid (`runner._running`). An ended process not yet reaped (a
    zombie) counts as ended."""
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    # the child as the runner sees it once its fork server has ended
    proc = SimpleNamespace(pid=slow.pid, exitcode=FORK_SERVER_LOST, is_alive=lambda: False)
    try:
        time.sleep(0.2)
        assert _running(proc)  # still running
        deadline = time.time() + 30
        while _running(proc) and time.time() < deadline:  # the stop's wait
            _wait_for(proc, 0.1)
        assert not _running(proc)
        assert slow.poll() == 0  # it had ended: a zombie until reaped here
    finally:
        slow.kill()
        slow.wait()
