"""An env that breaks its contract stops the run with one line naming the env, the copy and
agent, and the broken rule; never a traceback, never training on poisoned data."""

import gymnasium as gym
import numpy as np
import pytest

from rl_pbt import parse_cfg, register_env
from rl_pbt.runtime.runner import Runner


class Broken(gym.Env):
    """CartPole-like dynamics-free env that breaks one rule after `at` steps."""

    def __init__(self, fault: str, at: int = 10):
        self.fault, self.at, self.t = fault, at, 0
        self.observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        if self.fault == "reset_raises":
            raise RuntimeError("the game server is gone")
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        obs, reward, done, info = np.zeros(4, np.float32), 0.1, self.t % 25 == 0, {}
        if done:
            info["true_objective"] = 1.0
        if self.t >= self.at:
            if self.fault == "obs_shape":
                obs = np.zeros(5, np.float32)
            elif self.fault == "nan_reward":
                reward = float("nan")
            elif self.fault == "nan_obs":
                obs[2] = np.nan
            elif self.fault == "text_reward":
                reward = "high"
            elif self.fault == "step_raises":
                raise ValueError("action out of range")
            elif self.fault == "objective" and done:
                info["true_objective"] = "win"
        return obs, reward, done, False, info


class BrokenMultiAgent:
    """Two agents, but step() answers for one of them only."""

    is_multiagent = True
    num_agents = 2

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        return [np.zeros(4, np.float32)] * 2, [{}, {}]

    def step(self, actions):
        return [np.zeros(4, np.float32)], [0.0], [False], [False], [{}]

    def close(self):
        pass


FAULTS = {
    "obs_shape": ("agent 0", "does not fit the observation space"),
    "nan_reward": ("agent 0", "the reward is nan"),
    "nan_obs": ("agent 0", "the observation holds NaN or infinite values"),
    "text_reward": ("agent 0", "the reward 'high' is not a number"),
    "step_raises": ("copy", "step() raised ValueError: action out of range"),
    "reset_raises": ("copy", "reset() raised RuntimeError: the game server is gone"),
    "objective": ("agent 0", "info['true_objective'] at the end of an episode is 'win'"),
}


def run(tmp_path, env_name, *extra):
    cfg = parse_cfg(
        [f"--env={env_name}", "--num_workers=1", "--num_envs_per_worker=2", "--rollout=8",
         "--batch_size=16", "--encoder_mlp_layers", "8", "--train_for_seconds=60",
         f"--train_dir={tmp_path}", "--experiment=broken", *extra]
    )  # fmt: skip
    return Runner(cfg).run()


@pytest.mark.parametrize("fault", list(FAULTS))
def test_broken_env_is_named_with_the_rule(tmp_path, capsys, fault):
    name = f"broken_{fault}"
    register_env(name, lambda full_name, cfg, env_config, render_mode=None: Broken(fault))
    assert run(tmp_path, name, "--serial_mode", "--decorrelate_envs_on_one_worker=False") == 1
    out = capsys.readouterr()
    text = out.out + out.err
    who, rule = FAULTS[fault]
    line = next((ln for ln in text.splitlines() if "ERROR" in ln), "")
    assert f"env '{name}' (worker 0, copy" in line and who in line and rule in line, text[-2000:]
    assert "Traceback" not in text
    if fault.endswith("_raises"):  # the line of the env's own code that raised
        method = fault.split("_")[0]
        assert f"(at {__file__}:" in line and line.endswith(f", in {method})"), line


def test_wrong_number_of_agents_is_named(tmp_path, capsys):
    register_env("broken_agents", lambda *a, **k: BrokenMultiAgent())
    assert run(tmp_path, "broken_agents", "--serial_mode") == 1
    text = capsys.readouterr().out
    assert "step() returned 1 observations for num_agents=2" in text, text[-2000:]
    assert "env 'broken_agents' (worker 0, copy 0)" in text and "Traceback" not in text


class BrokenFlags(BrokenMultiAgent):
    """Two agents, one observation and reward each, but one bool for both agents'
    `terminated` (or one info dict for both)."""

    def __init__(self, fault):
        super().__init__()
        self.fault = fault

    def step(self, actions):
        obs, rewards = [np.zeros(4, np.float32)] * 2, [0.0, 0.0]
        if self.fault == "one_bool":
            return obs, rewards, False, [False, False], [{}, {}]
        if self.fault == "info_text":
            return obs, rewards, [False, False], [False, False], [{}, "is_active"]
        return obs, rewards, [False, False], [False, False], {"is_active": True}


@pytest.mark.parametrize(
    "fault, message",
    [
        ("one_bool", "step() returned terminated flags as a bool for num_agents=2"),
        ("info_dict", "step() returned infos as a dict for num_agents=2"),
        ("info_text", "agent 1): step() returned an info holding a str; each agent's info is a"),
    ],
)
def test_flags_and_infos_that_are_no_list_are_named(tmp_path, capsys, fault, message):
    register_env(f"broken_{fault}", lambda *a, **k: BrokenFlags(fault))
    assert run(tmp_path, f"broken_{fault}", "--serial_mode") == 1
    text = capsys.readouterr().out
    assert message in text, text[-2000:]
    assert fault == "info_text" or "(a multi-agent env returns one per agent" in text, text[-2000:]
    where = "(worker 0, copy 0, agent 1)" if fault == "info_text" else "(worker 0, copy 0)"
    assert f"env 'broken_{fault}' {where}" in text and "Traceback" not in text


class OddObservations(gym.Env):
    """Observations that numpy would store without complaint, but not as the space says."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, space, obs):
        self.observation_space, self.obs = space, obs

    def reset(self, seed=None, options=None):
        return self.obs, {}

    def step(self, action):
        return self.obs, 0.0, False, False, {}


BOX4 = gym.spaces.Box(-1, 1, (4,), np.float32)
IMAGE = gym.spaces.Box(0, 255, (3, 64, 64), np.uint8)
ODD_OBS = {
    "scalar": (BOX4, np.float32(0.5), "shape () for the space's (4,)"),
    "floats_in_uint8": (
        IMAGE,
        np.full((3, 64, 64), 0.7, np.float32),
        "floats (float32) for a uint8 space: they would be cast to integers",
    ),
    "dict_key_missing": (
        gym.spaces.Dict({"a": BOX4, "b": BOX4}),
        {"a": np.zeros(4, np.float32)},
        "no key 'b' (the space's keys: ['a', 'b'])",
    ),
    "discrete_out_of_range": (gym.spaces.Discrete(3), 5, "5, outside the Discrete space's 0..2"),
}


@pytest.mark.parametrize("case", list(ODD_OBS))
def test_first_observations_are_checked_against_the_space(tmp_path, capsys, case):
    space, obs, problem = ODD_OBS[case]
    register_env(f"odd_{case}", lambda *a, **k: OddObservations(space, obs))
    assert run(tmp_path, f"odd_{case}", "--serial_mode") == 1
    text = capsys.readouterr().out
    line = next((ln for ln in text.splitlines() if "ERROR" in ln), "")
    assert f"env 'odd_{case}' (worker 0, copy 0, agent 0)" in line, text[-2000:]
    assert "does not fit the observation space" in line and line.endswith(problem), line


def test_broken_env_in_a_worker_process_is_one_line(tmp_path, capsys):
    register_env("broken_parallel", lambda *a, **k: Broken("nan_reward", at=20))
    assert run(tmp_path, "broken_parallel", "--mp_start_method=fork") == 1
    text = capsys.readouterr().out
    assert "ERROR: rollout worker 0: env 'broken_parallel' (worker 0, copy" in text, text[-2000:]
    assert "the reward is nan" in text and "Traceback" not in text


@pytest.mark.parametrize("mode", ["serial", "parallel"])
def test_a_run_that_fails_before_training_suggests_no_policy_to_watch(tmp_path, capsys, mode):
    """Its checkpoints hold the starting weights only: the end says why it stopped and how to
    resume, and suggests no rl-pbt-enjoy."""
    name = f"broken_at_once_{mode}"
    register_env(name, lambda *a, **k: Broken("step_raises", at=1))
    extra = ["--serial_mode"] if mode == "serial" else ["--mp_start_method=fork"]
    assert run(tmp_path, name, *extra) == 1
    text = capsys.readouterr().out
    assert "step() raised ValueError: action out of range" in text, text[-2000:]
    assert "The run stopped before its end" in text and "resumes it" in text, text[-2000:]
    assert "rl-pbt-report" in text
    assert "enjoy" not in text and "watch policy" not in text, text[-2000:]
