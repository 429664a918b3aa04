"""The process model: CUDA never touched in the main process, children started by fork,
forkserver and spawn (an env registered in a test-local module or a user's __main__ script),
inference served by its own process, and seeds that make runs repeat (or differ)."""

import json
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
import time

import gymnasium as gym
import pytest
import torch

from rl_pbt import parse_cfg, register_env, train
from rl_pbt.config.parse import ConfigError
from rl_pbt.learning.learner_process import learner_process_main
from rl_pbt.runtime import devices
from rl_pbt.runtime.runner import Runner
from tests.small_run import CARTPOLE_LEARN, CARTPOLE_STEPS, SMALL_RUN

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_local_cartpole(full_env_name, cfg, env_config, render_mode=None):
    """Registered from this module only: children started by spawn or forkserver import it."""
    return gym.make("CartPole-v1")


register_env("local_cartpole", make_local_cartpole)

LEARN = ["--env=local_cartpole", "--num_workers=2", "--num_policies=2", *CARTPOLE_LEARN]


def small_cfg(tmp_path, experiment, *extra, env="local_cartpole"):
    """The small parallel layout on `env`, in tmp_path/experiment."""
    return parse_cfg(
        SMALL_RUN
        + [f"--env={env}", f"--train_dir={tmp_path}", f"--experiment={experiment}", *extra]
    )


def summary(exp_dir):
    with open(os.path.join(exp_dir, "summary.json")) as f:
        return json.load(f)


def train_small(tmp_path, experiment, *extra) -> dict:
    """Train the small parallel layout (small_cfg) to the end; its summary.json."""
    assert train(small_cfg(tmp_path, experiment, *extra)) == 0
    return summary(os.path.join(tmp_path, experiment))


# Learning under each start method and through the inference process: by hand (-m slow, 30-45 s
# each). CI checks that spawn children import an env registered in a test module and train it
# (test_spawn_children_import_an_env_registered_in_a_test_module), that a user's script runs
# under spawn and forkserver (test_env_registered_in_a_user_main_script), the server's batching
# (test_the_inference_process_batches_requests_of_several_workers) and learning through it
# (test_action_mask_learning, the masked bandit, inference_server); CartPole learning under fork
# is in test_cartpole.
@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        ["--mp_start_method=forkserver"],
        ["--mp_start_method=spawn"],
        ["--inference=device", "--num_policies=1"],
    ],
    ids=["forkserver", "spawn", "inference_device"],
)
def test_cartpole_learns_under_each_start_method(tmp_path, extra):
    cfg = parse_cfg(LEARN + extra + [f"--train_dir={tmp_path}", "--experiment=cp"])
    assert train(cfg) == 0
    result = summary(os.path.join(tmp_path, "cp"))
    for p, s in result["policies"].items():
        assert len(s["recent_returns"]) == 20
        assert s["env_steps"] >= CARTPOLE_STEPS
        assert s["mean_return"] >= 195, f"policy {p}: mean of the last 20 episodes {s}"
    if "--inference=device" in extra:
        # one request holds one group of one worker (4 actors): more than that on average
        # means the server batched requests of several groups or workers per forward pass
        assert result["inference_batch_size"] > 4


def test_spawn_children_import_an_env_registered_in_a_test_module(tmp_path):
    """Spawn children start from a clean interpreter: they find local_cartpole by importing
    this module and run the budget of both policies to the end."""
    result = train_small(
        tmp_path, "sp", "--mp_start_method=spawn", "--num_policies=2",
        "--train_for_env_steps=6000",
    )  # fmt: skip
    assert sorted(result["policies"]) == ["0", "1"]
    assert all(s["env_steps"] >= 6000 for s in result["policies"].values()), result


def test_the_inference_process_batches_requests_of_several_workers(tmp_path):
    """--inference=device on the CPU, 2 workers x 8 envs and one policy: the run ends cleanly
    and the server answered more actors per forward pass than one request holds (one group of
    one worker, 4 actors), so it batched requests of several groups or workers."""
    result = train_small(
        tmp_path, "inf", "--inference=device", "--num_envs_per_worker=8",
        "--train_for_env_steps=6000",
    )  # fmt: skip
    assert result["policies"]["0"]["env_steps"] >= 6000
    assert result["inference_batch_size"] > 4, result["inference_batch_size"]


class _Recorder:
    def __init__(self):
        self.calls = []

    def wrap(self, name):
        def call(*args, **kwargs):
            self.calls.append(name)
            raise AssertionError(f"torch.cuda.{name} called in the main process")

        return call


class _FakeProcess:
    started: list = []

    def __init__(self, target, name, daemon, args):
        self.target, self.name, self.args = target, name, args
        self.pid = 0

    def start(self):
        # what spawn/forkserver do with the target and its arguments, while "spawning"
        from multiprocessing import context
        from multiprocessing.popen_spawn_posix import _DupFd
        from multiprocessing.reduction import ForkingPickler

        class Popen:
            DupFd = _DupFd

            @staticmethod
            def duplicate_for_child(fd):
                return fd

        context.set_spawning_popen(Popen())
        try:
            ForkingPickler.dumps((self.target, self.args))
        finally:
            context.set_spawning_popen(None)
        _FakeProcess.started.append(self)


class _FakeContext:
    Process = _FakeProcess
    Queue = staticmethod(multiprocessing.get_context("spawn").Queue)  # weights handover


def _as_a_cuda_build(monkeypatch) -> _Recorder:
    """Record (and fail) every way into CUDA, with torch made to look like a CUDA build: its
    accelerator is CUDA, so torch's own code (an optimiser step asks whether a CUDA graph
    capture is under way) takes the paths it takes on a GPU machine, even on a CPU build."""
    recorder = _Recorder()
    monkeypatch.setattr(torch._C, "_accelerator_getAccelerator", lambda: torch.device("cuda"))
    for name in (
        "_lazy_init",
        "is_available",
        "device_count",
        "init",
        "current_device",
        "current_stream",
        "is_current_stream_capturing",
        "synchronize",
    ):
        monkeypatch.setattr(torch.cuda, name, recorder.wrap(name))
    for name in ("current_stream", "device_count", "current_device_index", "synchronize"):
        monkeypatch.setattr(torch.accelerator, name, recorder.wrap(f"accelerator.{name}"))
    return recorder


def test_forkserver_preload_never_touches_cuda(monkeypatch):
    """The forkserver runs this before forking every child: a CUDA context there would make
    each child fail on its first CUDA call."""
    import importlib

    from rl_pbt.runtime import preload

    recorder = _as_a_cuda_build(monkeypatch)
    importlib.reload(preload)
    assert recorder.calls == []


def test_main_process_never_touches_cuda_with_gpus_visible(tmp_path, monkeypatch):
    recorder = _as_a_cuda_build(monkeypatch)
    monkeypatch.setattr(devices, "probe_gpu_count", lambda: 2)
    cfg = small_cfg(tmp_path, "cuda", "--num_policies=3", "--inference=device")
    runner = Runner(cfg)
    assert runner.device_of == {0: "cuda:0", 1: "cuda:1", 2: "cuda:0"}
    assert runner.start_method == "forkserver"
    assert runner.inference_mode == "device"
    _FakeProcess.started = []
    runner._start_processes(_FakeContext())
    names = sorted(p.name for p in _FakeProcess.started)
    assert names == sorted(
        ["learner_0", "learner_1", "learner_2", "inference_cuda:0", "inference_cuda:1"]
        + ["rollout_worker_0", "rollout_worker_1"]
    )
    for proc in _FakeProcess.started:
        assert proc.target.__module__.startswith("rl_pbt.")  # module-level entry points
    assert recorder.calls == []
    runner.stats.close()
    runner.run_lock.release()


def test_auto_inference_on_cuda_acts_in_the_workers_for_a_small_policy(tmp_path, monkeypatch):
    recorder = _as_a_cuda_build(monkeypatch)
    monkeypatch.setattr(devices, "probe_gpu_count", lambda: 1)
    runner = Runner(small_cfg(tmp_path, "auto", "--num_policies=2"))
    assert runner.device_of == {0: "cuda:0", 1: "cuda:0"}
    assert (runner.inference_mode, runner.inference) == ("local", None)
    assert "small policy" in runner.inference_why
    assert recorder.calls == []
    runner.stats.close()
    runner.run_lock.release()


def test_learners_per_device_share_one_process(tmp_path, monkeypatch):
    monkeypatch.setattr(devices, "probe_gpu_count", lambda: 2)
    cfg = small_cfg(tmp_path, "grouped", "--num_policies=4", "--learner_processes=per_device")
    runner = Runner(cfg)
    assert runner.groups == [[0, 2], [1, 3]]
    assert runner.learner_queues[0] is runner.learner_queues[2]
    assert runner.learner_queues[0] is not runner.learner_queues[1]
    runner.stats.close()
    runner.run_lock.release()


def test_fork_with_cuda_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(devices, "probe_gpu_count", lambda: 1)
    cfg = small_cfg(tmp_path, "f", "--mp_start_method=fork")
    with pytest.raises(ConfigError, match="--mp_start_method=fork"):
        Runner(cfg)
    assert not os.path.exists(os.path.join(tmp_path, "f"))


def test_device_gpu_without_cuda_is_one_line_and_touches_nothing(tmp_path):
    exp = tmp_path / "old_run"
    exp.mkdir()
    (exp / "config.json").write_text('{"keep": true}')
    (exp / ".rl_pbt_experiment").write_text("")  # a run of this trainer: overwrite would go on
    (exp / "precious.txt").write_text("results")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.train",
            "--env=CartPole-v1",
            "--device=gpu",
            "--restart_behavior=overwrite",
            f"--train_dir={tmp_path}",
            "--experiment=old_run",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "--device=gpu" in lines[0], out.stderr
    assert "Traceback" not in out.stderr
    assert (exp / "precious.txt").read_text() == "results"
    assert (exp / "config.json").read_text() == '{"keep": true}'


def test_lambda_factory_under_spawn_is_a_config_error(tmp_path):
    register_env("lambda_env", lambda *a, **k: gym.make("CartPole-v1"))
    cfg = small_cfg(tmp_path, "l", "--mp_start_method=spawn", env="lambda_env")
    with pytest.raises(ConfigError, match="module level"):
        Runner(cfg)


SCRIPT = """
import sys
import gymnasium as gym
from rl_pbt import parse_cfg, register_env, train


class MyEnv(gym.Wrapper):
    pass


def make_my_env(full_env_name, cfg, env_config, render_mode=None):
    return MyEnv(gym.make("CartPole-v1"))


if __name__ == "__main__":
    register_env("my_env", make_my_env)
    cfg = parse_cfg(["--env=my_env", "--num_policies=2", "--num_workers=2",
                     "--num_envs_per_worker=4", "--rollout=16", "--batch_size=128",
                     "--encoder_mlp_layers", "32", "--train_for_env_steps=6000",
                     "--mp_start_method=" + sys.argv[1], "--inference=" + sys.argv[2],
                     "--train_dir=" + sys.argv[3], "--experiment=user"])
    sys.exit(train(cfg))
"""


@pytest.mark.parametrize(
    "method,inference",
    [
        # forkserver with an inference process: a CUDA run's defaults
        pytest.param("forkserver", "device", id="forkserver"),
        # spawn re-imports the script as forkserver does, at twice the start time (25 s here):
        # spawn children run in CI in the test above
        pytest.param("spawn", "local", id="spawn", marks=pytest.mark.slow),
    ],
)
def test_env_registered_in_a_user_main_script(tmp_path, method, inference):
    script = tmp_path / "my_train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, str(script), method, inference, str(tmp_path / "runs")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    result = summary(tmp_path / "runs" / "user")
    assert all(s["env_steps"] >= 6000 for s in result["policies"].values())


GUARDED_SCRIPT = """
import sys
import gymnasium as gym
from rl_pbt import parse_cfg, register_env, train

if __name__ == "__main__":
    def make_guarded_env(full_env_name, cfg, env_config, render_mode=None):
        return gym.make("CartPole-v1")

    register_env("guarded_env", make_guarded_env)
    cfg = parse_cfg(["--env=guarded_env", "--num_workers=1", "--train_for_env_steps=1000",
                     "--mp_start_method=spawn", "--train_dir=" + sys.argv[1],
                     "--experiment=guarded"])
    sys.exit(train(cfg))
"""


def test_factory_under_the_main_guard_is_named_before_children_start(tmp_path):
    """Spawn children import the script without running its main block: a factory defined
    there cannot be found in them (each child failed with a traceback of its own)."""
    script = tmp_path / "guarded.py"
    script.write_text(textwrap.dedent(GUARDED_SCRIPT))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "runs")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-2000:]
    last = text.strip().splitlines()[-1]  # train() raises the ConfigError to the script
    assert last.startswith("rl_pbt.config.parse.ConfigError: --env=guarded_env: its "), last
    assert "make_env_func 'make_guarded_env' is defined under" in last, last
    assert "rollout_worker" not in text  # no child was started
    assert not (tmp_path / "runs" / "guarded" / "config.json").exists()


def _first_weights(tmp_path, name, seed_flags):
    """Each policy's version-0 weights as published by its learner process."""
    cfg = small_cfg(tmp_path, name, "--num_policies=2", *seed_flags)
    runner = Runner(cfg)
    spec = runner.spec()
    try:
        # learners only: version 0 stays in the store while no worker feeds them
        for group in runner.groups:
            runner._start(
                runner._mp_context(),
                learner_process_main,
                f"learner_{group[0]}",
                (spec, group),
                spec.learner_hb(group[0]),
            )
        deadline = time.time() + 60
        while (runner.params.seq[:2] < 2).any() and time.time() < deadline:
            time.sleep(0.05)
        out = []
        for p in range(2):
            model = runner.make_model()
            assert runner.params.read_into(p, model) == 0
            out.append(torch.cat([t.reshape(-1).float() for t in model.state_dict().values()]))
        return out
    finally:
        runner._shutdown()
        runner.stats.close()
        runner.run_lock.release()


def test_policies_start_from_different_weights_and_a_seed_repeats_them(tmp_path):
    a0, a1 = _first_weights(tmp_path, "a", ["--seed=7"])
    b0, b1 = _first_weights(tmp_path, "b", ["--seed=7"])
    c0, c1 = _first_weights(tmp_path, "c", [])
    assert torch.equal(a0, b0) and torch.equal(a1, b1)  # same seed: same first weights
    assert not torch.equal(a0, a1)  # each policy its own
    assert not torch.equal(c0, c1)  # without --seed too
    assert not torch.equal(c0, a0)


def test_derived_seeds_differ_per_component_and_repeat():
    seeds = {devices.derive_seed(7, role, i) for role in ("learner", "worker") for i in range(8)}
    assert len(seeds) == 16
    assert devices.derive_seed(7, "learner", 3) == devices.derive_seed(7, "learner", 3)
    assert devices.derive_seed(7, "learner", 3) != devices.derive_seed(8, "learner", 3)


def test_run_spec_pickles_for_spawn(tmp_path):
    runner = Runner(small_cfg(tmp_path, "p"))
    # everything but the queues and shared tensors (those travel only while spawning, tested
    # above) pickles as plain data
    spec = runner.spec()
    for name in ("cfg", "obs_space", "action_space", "registry", "initial_shaping", "device_of"):
        pickle.loads(pickle.dumps(getattr(spec, name)))
    assert spec.registry["local_cartpole"].make_env is make_local_cartpole
    runner.stats.close()
    runner.run_lock.release()


WATCHED = """
import multiprocessing, os, sys, time


def child(path):
    from rl_pbt.runtime.heartbeat import ParentWatch

    watch = ParentWatch()
    open(path + ".started", "w").close()
    start = time.monotonic()
    while not watch.gone() and time.monotonic() - start < 30:
        time.sleep(0.05)
    with open(path, "w") as f:
        f.write("gone" if watch.gone() else "still there")


def busy():  # a sibling started later, slow to end (a learner writing its checkpoint)
    time.sleep(20)


if __name__ == "__main__":
    sys.path.insert(0, sys.argv[1])
    ctx = multiprocessing.get_context(sys.argv[2])
    ctx.Process(target=child, args=(sys.argv[3],)).start()
    ctx.Process(target=busy).start()
    time.sleep(60)
"""


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_a_child_sees_its_runner_die_under_every_start_method(tmp_path, method):
    """Under forkserver (chosen on CUDA) a child's OS parent is the fork server, which lives
    as long as its children: children watching their OS parent never saw the runner die, and
    learners never saved, workers never stopped. Under fork, the runner's sentinel alone is
    held by every sibling forked later: a child watching only that waits for them to end."""
    script = tmp_path / "runner.py"
    script.write_text(WATCHED)
    out = tmp_path / "seen"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    runner = subprocess.Popen([sys.executable, str(script), ROOT, method, str(out)], env=env,
                              start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(f"{out}.started") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert os.path.exists(f"{out}.started")
        runner.kill()
        runner.wait()
        deadline = time.monotonic() + 8  # well before the busy sibling ends
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert out.exists() and out.read_text() == "gone"
    finally:
        runner.kill()
        try:
            os.killpg(runner.pid, 9)  # the child and a fork server, whatever happened
        except ProcessLookupError:
            pass
