"""Signals at a stop: a learner notes SIGINT/SIGTERM and stops between two steps (a second
signal never cuts its save short); the runner takes a signal that arrives inside a PBT step
once the step is whole."""

import multiprocessing as mp
import os
import signal
import time

import pytest

from rl_pbt.runtime.processes import StopRequest
from rl_pbt.runtime.runner import _SignalsDeferred


def _learner_like(path: str) -> None:
    request = StopRequest().install()
    with open(path + ".ready", "w"):
        pass
    while not request.requested:
        time.sleep(0.01)
    time.sleep(1.0)  # a long save, with more signals arriving meanwhile
    with open(path, "w") as f:
        f.write("saved")


def test_a_second_signal_does_not_cut_the_save_short(tmp_path):
    path = str(tmp_path / "checkpoint")
    proc = mp.get_context("spawn").Process(target=_learner_like, args=(path,))
    proc.start()
    deadline = time.monotonic() + 60
    while not os.path.exists(path + ".ready") and time.monotonic() < deadline:
        time.sleep(0.05)
    for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGINT):
        os.kill(proc.pid, sig)
        time.sleep(0.2)
    proc.join(timeout=30)
    assert proc.exitcode == 0
    with open(path) as f:
        assert f.read() == "saved"


def test_a_signal_inside_a_pbt_step_is_taken_at_its_end():
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own
    try:
        reached_end = False
        with pytest.raises(KeyboardInterrupt):
            with _SignalsDeferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the handler has run by now: it only noted the signal
                reached_end = True
        assert reached_end
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


def test_the_runners_pbt_step_applies_every_decision_before_a_signal_is_taken():
    """Ctrl-C while a PBT step's decisions go out: all of them are sent (values, copies, the
    shaping), then the stop; never a step half applied."""
    from types import SimpleNamespace

    from rl_pbt.runtime.runner import Runner

    applied = []

    def decisions(steps, ratings=None, copying=()):
        for p in (1, 2, 3):
            if p == 2:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the handler has run by now
            yield SimpleNamespace(policy_id=p, source_id=0, hparams={}, shaping=None)

    runner = SimpleNamespace(
        cfg=SimpleNamespace(pbt_target_objective="true_objective"),
        env_steps=[10, 10, 10, 10],
        copying={},
        pbt=SimpleNamespace(update=decisions),
        _apply_decision=lambda policy, source, hparams, shaping: applied.append(policy),
        stats=SimpleNamespace(pbt_event=lambda d: None),
    )
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            Runner._pbt_step(runner)
        assert applied == [1, 2, 3]
    finally:
        signal.signal(signal.SIGINT, before)


def test_no_signal_no_interrupt():
    handler = signal.getsignal(signal.SIGTERM)
    with _SignalsDeferred():
        pass
    assert signal.getsignal(signal.SIGTERM) is handler


def test_a_run_gives_the_callers_signal_handlers_back(tmp_path):
    """The stop sets handlers that only log a second Ctrl-C: after train() returns, Ctrl-C
    must interrupt the caller's script again."""
    from rl_pbt import parse_cfg, train

    def mine(signum, frame):
        raise KeyboardInterrupt

    before = {sig: signal.signal(sig, mine) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        cfg = parse_cfg(
            ["--env=CartPole-v1", "--num_workers=1", "--num_envs_per_worker=2", "--rollout=8"]
            + ["--batch_size=16", "--train_for_env_steps=200", "--mp_start_method=fork"]
            + [f"--train_dir={tmp_path}", "--experiment=handlers", "--encoder_mlp_layers=8"]
        )
        assert train(cfg) == 0
        assert signal.getsignal(signal.SIGINT) is mine
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_child_that_ends_while_the_runner_is_stopping_is_no_crash():
    """A SIGTERM to the process group reaches the children too: a learner that saved and ended
    (exit status 0) before the runner's loop took its own signal does not make the run count
    as jammed (which restarts it from its checkpoints)."""
    from types import SimpleNamespace

    from rl_pbt.runtime.runner import Runner

    runner = SimpleNamespace(
        processes=[SimpleNamespace(name="learner_0", exitcode=0)],
        stop_flag=[0],  # the loop has not taken the signal yet
        stop_signals=SimpleNamespace(requested=signal.SIGTERM),
        proc_hb={"learner_0": 1},
        heartbeats=SimpleNamespace(
            names=["rollout worker 0", "learner 0"],
            describe=lambda idx: "stopped",
            stale=lambda timeout: [],
        ),
        cfg=SimpleNamespace(heartbeat_timeout=30),
        jammed=False,
    )
    Runner._check_health(runner)
    assert not runner.jammed


def test_a_second_signal_before_the_loop_took_the_first_stops_at_once():
    """The first is only noted (the loop takes it between two turns); a second one while the
    loop has not taken it (a loop stuck on a locked queue) interrupts where it lands."""
    from rl_pbt.runtime.runner import _StopSignals

    handler = _StopSignals()
    handler(signal.SIGINT, None)
    assert handler.requested == signal.SIGINT and handler.name() == "SIGINT"
    with pytest.raises(KeyboardInterrupt):
        handler(signal.SIGINT, None)


def test_rl_pbt_train_ignores_signals_once_its_run_has_stopped(tmp_path, monkeypatch):
    """rl-pbt-train's run is the process's whole work: Ctrl-C pressed again after the stop
    (while the process exits) was a KeyboardInterrupt traceback and exit status 130, not the
    run's status."""
    from rl_pbt import parse_cfg, train
    from rl_pbt.runtime import runner as runner_module

    monkeypatch.setattr(runner_module, "WHOLE_PROCESS", True)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        cfg = parse_cfg(
            ["--env=CartPole-v1", "--serial_mode", "--num_envs_per_worker=2", "--rollout=8"]
            + ["--batch_size=16", "--train_for_env_steps=200", "--encoder_mlp_layers=8"]
            + [f"--train_dir={tmp_path}", "--experiment=whole"]
        )
        assert train(cfg) == 0
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
