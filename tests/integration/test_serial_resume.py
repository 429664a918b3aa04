"""A seeded serial run stopped by a signal and run again continues exactly as an uninterrupted
run: the same weights and optimiser state after the same updates."""

import glob
import os
import signal

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_pbt import parse_cfg, register_env, train
from rl_pbt.learning.checkpoints import read_checkpoint
from rl_pbt.runtime import runner as runner_module
from rl_pbt.runtime import serial_state
from tests.small_run import SERIAL_CARTPOLE
from tests.small_run import state_vector as flat

FLAGS = [
    *SERIAL_CARTPOLE,  # with the overrides below (later flags win)
    "--num_workers=2",
    "--train_for_env_steps=5000",
    "--seed=7",
    "--status_interval=60",
]


def run(tmp_path, name, *extra):
    cfg = parse_cfg([*FLAGS, f"--train_dir={tmp_path}", f"--experiment={name}", *extra])
    return train(cfg), os.path.join(tmp_path, name)


def final_states(exp):
    states = []
    for p in range(2):
        path = sorted(glob.glob(os.path.join(exp, f"checkpoint_p{p}", "checkpoint_*.pth")))[-1]
        states.append(read_checkpoint(path))
    return states


def stop_at_tick(monkeypatch, n, sig=signal.SIGTERM):
    """The n-th tick of the run sends `sig` to this process, as a user's kill would."""
    real = runner_module.Runner._tick
    calls = {"n": 0}

    def tick(self, final=False):
        calls["n"] += 1
        if calls["n"] == n:
            os.kill(os.getpid(), sig)
        return real(self, final)

    monkeypatch.setattr(runner_module.Runner, "_tick", tick)


def stopped_and_resumed(tmp_path, monkeypatch, stop_tick, *extra):
    """Train `extra` once uninterrupted ("whole"), once stopped by SIGTERM at `stop_tick` and
    run again ("stopped"). Returns the final states of the whole run, the states at the stop,
    the stopped run's and the re-run's exit status, and the final states after the resume."""
    status, whole = run(tmp_path, "whole", *extra)
    assert status == 0
    expected = final_states(whole)
    with monkeypatch.context() as m:
        stop_at_tick(m, stop_tick)
        stopped_status, exp = run(tmp_path, "stopped", *extra)
    assert os.path.isfile(serial_state.state_path(exp))
    mid = final_states(exp)
    status, exp = run(tmp_path, "stopped", *extra)
    return expected, mid, stopped_status, status, final_states(exp)


def assert_same_training(got, expected):
    for p in range(2):
        assert got[p]["version"] == expected[p]["version"]
        assert torch.equal(flat(got[p]), flat(expected[p])), f"policy {p} differs after resume"


@pytest.mark.parametrize("stop_tick", [301, 515])
def test_stopped_and_resumed_serial_run_equals_uninterrupted(
    tmp_path, monkeypatch, capsys, stop_tick
):
    expected, mid, stopped, status, got = stopped_and_resumed(tmp_path, monkeypatch, stop_tick)
    assert stopped == 1  # stopped by a signal
    assert 0 < mid[0]["version"] < expected[0]["version"]  # stopped half way
    assert status == 0
    assert "resumed exactly where the run stopped" in capsys.readouterr().out
    assert_same_training(got, expected)
    for p in range(2):
        assert got[p]["env_steps"] == expected[p]["env_steps"]


def test_a_stale_or_crafted_state_file_is_not_used(tmp_path, monkeypatch, capsys):
    with monkeypatch.context() as m:
        stop_at_tick(m, 200)
        run(tmp_path, "exp")
    path = serial_state.state_path(os.path.join(tmp_path, "exp"))
    # a pickle that would run code if it were unpickled
    import pickle

    class Boom:
        def __reduce__(self):
            return (os.system, ("touch " + os.path.join(tmp_path, "pwned"),))

    with open(path, "wb") as f:
        pickle.dump({"x": Boom()}, f)
    capsys.readouterr()
    with monkeypatch.context() as m:
        stop_at_tick(m, 20)
        status, _ = run(tmp_path, "exp")
    out = capsys.readouterr().out
    assert status == 1
    assert not os.path.exists(os.path.join(tmp_path, "pwned"))
    assert "serial_state.pt" in out and "resuming from the checkpoints" in out
    # the stop wrote a fresh state; a run with other settings does not take it
    capsys.readouterr()
    status, _ = run(tmp_path, "exp", "--rollout=8", "--train_for_env_steps=100")
    out = capsys.readouterr().out
    assert "was saved with other settings (num_slots, rollout)" in out


class NoisyDuel:
    """Two agents push a token left or right; the env adds noise from its own generator, so
    its state is more than its observations: get_state()/set_state() carry it."""

    is_multiagent = True
    num_agents = 2

    def __init__(self, seed):
        self.observation_space = gym.spaces.Box(-10, 10, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.rng = np.random.default_rng(seed)
        self.pos, self.t = 0.0, 0

    def _obs(self):
        return [np.array([self.pos, self.t / 20], np.float32)] * 2

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.pos, self.t = float(self.rng.normal()), 0
        return self._obs(), [{}, {}]

    def step(self, actions):
        self.pos += (int(actions[0]) - int(actions[1])) * 0.5 + float(self.rng.normal(0, 0.3))
        self.t += 1
        done = abs(self.pos) >= 3 or self.t >= 20
        win = float(self.pos > 0)
        rewards = [self.pos / 10, -self.pos / 10]
        infos = [{"true_objective": win}, {"true_objective": 1 - win}] if done else [{}, {}]
        obs = self._obs()
        if done:
            obs, _ = self.reset()
        return obs, rewards, [done, done], [False, False], infos

    def get_state(self):
        return {"pos": self.pos, "t": self.t, "rng": self.rng.bit_generator.state}

    def set_state(self, state):
        self.pos, self.t = state["pos"], state["t"]
        self.rng.bit_generator.state = state["rng"]

    def close(self):
        pass


def make_noisy_duel(full_env_name, cfg, env_config, render_mode=None):
    return NoisyDuel(env_config["env_id"])


def test_a_multi_agent_env_with_get_state_resumes_exactly(tmp_path, monkeypatch):
    register_env("noisy_duel_resume", make_noisy_duel)
    extra = ["--env=noisy_duel_resume", "--train_for_env_steps=3000"]
    expected, mid, stopped, _, got = stopped_and_resumed(tmp_path, monkeypatch, 97, *extra)
    assert stopped == 1
    assert 0 < mid[0]["version"]
    assert_same_training(got, expected)
    assert expected[0]["version"] > 0 and expected[1]["version"] > 0


def test_the_arena_resumes_exactly(tmp_path, monkeypatch):
    """The built-in batched game saves its copies through get_state()/set_state()."""
    import envs  # noqa: F401  (registers the arena)

    extra = ["--env=arena_duel", "--num_envs_per_worker=8", "--train_for_env_steps=4000"]
    extra += ["--batch_size=128", "--encoder_mlp_layers", "32"]
    expected, mid, stopped, _, got = stopped_and_resumed(tmp_path, monkeypatch, 61, *extra)
    assert stopped == 1
    assert 0 < mid[0]["version"] < expected[0]["version"]  # stopped half way
    assert_same_training(got, expected)
    assert expected[0]["version"] > 0 and expected[1]["version"] > 0


class Drifting(gym.Env):
    """Ignores reset's seed (draws from its own unseeded stream): a replay ends elsewhere."""

    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        self.rng, self.t = np.random.default_rng(), 0

    def reset(self, seed=None, options=None):
        self.t = 0
        return self.rng.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        obs = self.rng.uniform(-1, 1, 3).astype(np.float32)
        return obs, float(action), False, self.t >= 40, {}


def make_drifting(full_env_name, cfg, env_config, render_mode=None):
    return Drifting()


def test_an_env_that_replays_differently_resumes_from_the_checkpoints(
    tmp_path, monkeypatch, capsys
):
    register_env("drifting_resume", make_drifting)
    extra = ["--env=drifting_resume", "--train_for_env_steps=3000"]
    with monkeypatch.context() as m:
        stop_at_tick(m, 50)
        assert run(tmp_path, "exp", *extra)[0] == 1
    capsys.readouterr()
    status, exp = run(tmp_path, "exp", *extra)
    out = capsys.readouterr().out
    assert status == 0
    assert "serial_state.pt not used" in out and "set_state() failed" in out
    assert "resumed exactly" not in out
    assert min(s["env_steps"] for s in final_states(exp)) >= 3000


def test_a_stop_just_after_a_pbt_copy_resumes_exactly(tmp_path, monkeypatch, capsys):
    """Which episodes began on the weights a PBT copy replaced (they do not count for PBT) was
    not saved: after a stop just after a copy they counted, PBT decided otherwise, and the
    resumed run went another way while its log said it resumed exactly."""
    import envs  # noqa: F401  (registers the arena)
    from rl_pbt.pbt.lineage import read_events

    extra = ["--env=arena_duel", "--encoder_mlp_layers", "16", "--arena_episode_steps=40",
             "--with_pbt", "--pbt_start_mutation=400", "--pbt_period_env_steps=400",
             "--pbt_replace_fraction=0.5", "--pbt_replace_reward_gap=0",
             "--train_for_env_steps=1600", "--seed=3"]  # fmt: skip
    status, whole = run(tmp_path, "whole", *extra)
    assert status == 0
    expected = final_states(whole)
    real, stopped_at = runner_module.Runner._tick, []

    def tick(self, final=False):
        done = real(self, final)
        if not final and self.copied_version and not stopped_at:
            stopped_at.append(dict(self.copied_version))
            os.kill(os.getpid(), signal.SIGTERM)
        return done

    with monkeypatch.context() as m:
        m.setattr(runner_module.Runner, "_tick", tick)
        assert run(tmp_path, "stopped", *extra)[0] == 1
    assert stopped_at  # a copy landed, and the run stopped at the next turn
    status, exp = run(tmp_path, "stopped", *extra)
    assert status == 0
    assert "resumed exactly where the run stopped" in capsys.readouterr().out
    assert_same_training(final_states(exp), expected)
    lineage = [read_events(os.path.join(d, "pbt", "lineage.jsonl")) for d in (whole, exp)]
    strip = [[{k: v for k, v in e.items() if k != "time"} for e in ev] for ev in lineage]
    assert strip[0] == strip[1]
