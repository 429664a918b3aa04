"""Tests of envs.pettingzoo_adapter: a scripted ParallelEnv-like env, then real PettingZoo envs."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from gymnasium import spaces

from envs.pettingzoo_adapter import (
    PettingZooFactory,
    PettingZooParallelAdapter,
    register_pettingzoo_env,
)
from rl_pbt.envs.interfaces import is_multiagent_env
from rl_pbt.envs.registry import known_to_new_processes, make_env


class ScriptedParallelEnv:
    """ParallelEnv API without PettingZoo: agent "b" terminates at step 2, the episode is
    truncated at step `horizon` (or terminates early when `end_by_termination`)."""

    metadata = {"render_modes": []}

    def __init__(self, horizon: int = 5, end_by_termination: bool = False):
        self.possible_agents = ["a", "b", "c"]
        self.agents: list[str] = []
        self.horizon = horizon
        self.end_by_termination = end_by_termination
        self.t = 0
        self.received: list[dict] = []
        self.reset_seeds: list = []

    def observation_space(self, agent):
        return spaces.Box(-10.0, 10.0, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(3)

    def _obs(self, agent):
        return np.array([self.t, self.possible_agents.index(agent) + 1], dtype=np.float32)

    def reset(self, seed=None, options=None):
        self.reset_seeds.append(seed)
        self.agents = list(self.possible_agents)
        self.t = 0
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.received.append(dict(actions))
        self.t += 1
        live = list(self.agents)
        rew = {a: float(self.possible_agents.index(a) + 1) for a in live}
        term = {a: (a == "b" and self.t == 2) for a in live}
        trunc = {a: False for a in live}
        infos = {a: {} for a in live}
        if self.t >= self.horizon:
            for a in live:
                if self.end_by_termination:
                    term[a] = True
                else:
                    trunc[a] = True
                infos[a]["true_objective"] = float(a == "a")
        if "b" in live and term["b"]:
            infos["b"]["true_objective"] = 0.25
        obs = {a: self._obs(a) for a in live}
        self.agents = [a for a in live if not (term[a] or trunc[a])]
        return obs, rew, term, trunc, infos

    def render(self):
        return None

    def close(self):
        pass


def test_adapter_contract_with_an_agent_leaving_early():
    pz = ScriptedParallelEnv(horizon=5)
    env = PettingZooParallelAdapter(pz, seed=123)
    assert is_multiagent_env(env) and env.num_agents == 3
    assert env.observation_space.shape == (2,) and env.action_space.n == 3
    obs, infos = env.reset()
    assert pz.reset_seeds == [123]  # the factory's seed is used by the first reset only
    assert [o[1] for o in obs] == [1.0, 2.0, 3.0]
    assert all(info["is_active"] for info in infos)

    for t in range(1, 5):
        obs, rew, term, trunc, infos = env.step([0, 1, 2])
        assert not any(term) and not any(trunc)
        if t <= 2:  # "b" acts until (and including) the step it terminates on
            assert pz.received[-1] == {"a": 0, "b": 1, "c": 2}
            assert rew == [1.0, 2.0, 3.0]
            assert all(info["is_active"] for info in infos)
        else:
            assert pz.received[-1] == {"a": 0, "c": 2}
            assert rew == [1.0, 0.0, 3.0]
            assert [info["is_active"] for info in infos] == [True, False, True]
        if t >= 2:
            assert not obs[1].any() and obs[1].dtype == np.float32
        assert obs[0][0] == t
    obs, rew, term, trunc, infos = env.step([0, 1, 2])
    # a time limit cuts "a" and "c"; "b" ended for good at step 2 and stays so (the cut ones'
    # values are bootstrapped, its is not)
    assert term == [False, True, False] and trunc == [True, False, True]
    assert all(info["is_active"] for info in infos)
    assert [info["true_objective"] for info in infos] == [1.0, 0.25, 0.0]
    assert rew == [1.0, 0.0, 3.0]
    # self-reset: first observations of the next episode
    assert pz.reset_seeds == [123, None]
    assert [o[0] for o in obs] == [0.0, 0.0, 0.0] and obs[1][1] == 2.0
    _, _, _, _, infos = env.step([0, 0, 0])
    assert all(info["is_active"] for info in infos) and "b" in pz.received[-1]


class NoObjectiveParallelEnv(ScriptedParallelEnv):
    """The scripted env, with no `true_objective` in any info (rock paper scissors gives none)."""

    def step(self, actions):
        obs, rew, term, trunc, infos = super().step(actions)
        return obs, rew, term, trunc, {a: {} for a in infos}


def as_percent(ret: float) -> float:
    return ret / 100


def test_the_episodes_objective_is_each_agents_return_unless_mapped():
    """A ParallelEnv had no way to give `true_objective` (rl-pbt-match refused its games, and
    self-play rated them all draws): it is each agent's return, or `objective(return)`."""
    for objective, want in ((None, [5.0, 4.0, 15.0]), (as_percent, [0.05, 0.04, 0.15])):
        env = PettingZooParallelAdapter(NoObjectiveParallelEnv(horizon=5), objective=objective)
        env.reset(seed=0)
        for _ in range(4):
            infos = env.step([0, 0, 0])[-1]
            assert not any("true_objective" in info for info in infos)
        infos = env.step([0, 0, 0])[-1]  # "b" left after 2 steps of 2: its return is 4
        assert [info["true_objective"] for info in infos] == pytest.approx(want)
        env.reset(seed=1)  # the next episode counts from 0
        for _ in range(5):
            infos = env.step([0, 0, 0])[-1]
        assert [info["true_objective"] for info in infos] == pytest.approx(want)
    register_pettingzoo_env("test_no_objective", NoObjectiveParallelEnv, objective=as_percent)
    env = make_env("test_no_objective", None, {"worker_index": 0, "vector_index": 0, "env_id": 0})
    assert env._objective is as_percent


def test_episode_ended_by_termination_terminates_everyone():
    env = PettingZooParallelAdapter(ScriptedParallelEnv(horizon=3, end_by_termination=True))
    env.reset(seed=0)
    for _ in range(2):
        _, _, term, trunc, _ = env.step([0, 0, 0])
        assert not any(term) and not any(trunc)
    _, _, term, trunc, _ = env.step([0, 0, 0])
    assert term == [True] * 3 and trunc == [False] * 3


def test_an_agent_cut_by_its_own_time_limit_stays_cut_when_the_others_win():
    class CutB(ScriptedParallelEnv):
        def step(self, actions):
            obs, rew, term, trunc, infos = super().step(actions)
            if "b" in term and term["b"]:  # "b" leaves at step 2 by a time limit of its own
                term["b"], trunc["b"] = False, True
            return obs, rew, term, trunc, infos

    env = PettingZooParallelAdapter(CutB(horizon=3, end_by_termination=True))
    env.reset(seed=0)
    for _ in range(2):
        _, _, term, trunc, _ = env.step([0, 0, 0])
        assert not any(term) and not any(trunc)
    _, _, term, trunc, _ = env.step([0, 0, 0])
    assert term == [True, False, True] and trunc == [False, True, False]


def test_rejects_mismatched_spaces_and_non_parallel_envs():
    class Mixed(ScriptedParallelEnv):
        def action_space(self, agent):
            return spaces.Discrete(3 if agent == "a" else 4)

    with pytest.raises(ValueError, match="action space"):
        PettingZooParallelAdapter(Mixed())
    with pytest.raises(TypeError):
        PettingZooParallelAdapter(object())


def _scripted(horizon: int = 5, render_mode=None) -> ScriptedParallelEnv:
    return ScriptedParallelEnv(horizon=horizon)


def test_register_pettingzoo_env():
    register_pettingzoo_env("test_scripted_parallel", _scripted, env_kwargs={"horizon": 4})
    env = make_env(
        "test_scripted_parallel", None, {"worker_index": 0, "vector_index": 0, "env_id": 0}
    )
    assert isinstance(env, PettingZooParallelAdapter) and env.env.horizon == 4
    factory = pickle.loads(pickle.dumps(PettingZooFactory(_scripted, {"horizon": 2})))
    assert factory("x", None, {"env_id": 0}).env.horizon == 2
    # a command started anew knows nothing of it: the end of a run gives in-script calls
    assert not known_to_new_processes("test_scripted_parallel")


def test_which_envs_a_new_process_knows():
    """The end of a run prints shell commands only for envs a new process can make."""
    import gymnasium

    from rl_pbt import register_env

    assert known_to_new_processes("arena_duel") and known_to_new_processes("connect_four")
    assert known_to_new_processes("CartPole-v1")
    register_env("test_own_env", lambda *a, **k: _scripted())
    gymnasium.register("TestOwnGymId-v0", entry_point=lambda **k: None)
    gymnasium.register("TestOwnGymIdByName-v0", entry_point="my_package.envs:MyEnv")
    for name in ("test_own_env", "TestOwnGymId-v0", "TestOwnGymIdByName-v0", "no_such_env"):
        assert not known_to_new_processes(name), name
    for name in ("TestOwnGymId-v0", "TestOwnGymIdByName-v0"):
        del gymnasium.envs.registry[name]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_real_pettingzoo_env():
    pytest.importorskip("pettingzoo")
    from pettingzoo.classic import rps_v2

    register_pettingzoo_env("test_pz_rps", rps_v2.parallel_env, env_kwargs={"max_cycles": 5})
    env = make_env("test_pz_rps", None, {"worker_index": 0, "vector_index": 0, "env_id": 0})
    assert env.num_agents == 2 and env.action_space.n == 3
    obs, infos = env.reset(seed=0)
    assert len(obs) == 2 and all(env.observation_space.contains(o) for o in obs)
    ends = 0
    for step in range(1, 21):
        obs, rew, term, trunc, infos = env.step([step % 3, (step + 1) % 3])
        assert len(obs) == len(rew) == 2
        assert sum(rew) == 0.0  # rock-paper-scissors is zero-sum
        assert all(info["is_active"] for info in infos)
        done = term[0] or trunc[0]
        assert done == (step % 5 == 0) and len(set(term)) == 1 and len(set(trunc)) == 1
        ends += done
    assert ends == 4


def test_real_pettingzoo_parallel_env_subclass():
    pettingzoo = pytest.importorskip("pettingzoo")

    class Tag(pettingzoo.ParallelEnv):
        """Two agents; "runner" is caught (terminates) at step 3, "chaser" at step 4."""

        metadata = {"name": "tag_v0"}

        def __init__(self):
            self.possible_agents = ["chaser", "runner"]

        def observation_space(self, agent):
            return spaces.Box(0.0, 1.0, (3,), np.float32)

        def action_space(self, agent):
            return spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            self.agents = list(self.possible_agents)
            self.t = 0
            return {a: np.full(3, 0.5, np.float32) for a in self.agents}, {
                a: {} for a in self.agents
            }

        def step(self, actions):
            self.t += 1
            obs = {a: np.full(3, 0.5, np.float32) for a in self.agents}
            term = {a: (a == "runner" and self.t == 3) or self.t == 4 for a in self.agents}
            trunc = {a: False for a in self.agents}
            rew = {a: 1.0 for a in self.agents}
            infos = {a: {} for a in self.agents}
            self.agents = [a for a in self.agents if not term[a]]
            return obs, rew, term, trunc, infos

    env = PettingZooParallelAdapter(Tag())
    env.reset(seed=0)
    actives = []
    for _ in range(4):
        obs, rew, term, trunc, infos = env.step([1, 1])
        actives.append([info["is_active"] for info in infos])
    assert actives == [[True, True], [True, True], [True, True], [True, True]]
    assert term == [True, True] and rew == [1.0, 0.0]
    obs, rew, term, trunc, infos = env.step([1, 1])
    assert obs[1].any() and not any(term)


class MaskedParallelEnv(ScriptedParallelEnv):
    """The scripted env with a mask beside its observations: one legal action per agent."""

    def observation_space(self, agent):
        return spaces.Dict(
            {
                "observation": spaces.Box(-10.0, 10.0, (2,), np.float32),
                "action_mask": spaces.Box(0, 1, (3,), np.int8),
            }
        )

    def _obs(self, agent):
        return {"observation": super()._obs(agent), "action_mask": np.array([0, 1, 0], np.int8)}


def test_a_masked_agent_that_left_still_has_a_legal_action():
    """Its placeholder observation had an all-zero mask, and the worker stops a run on a mask
    with no legal action: a masked ParallelEnv whose agents leave early could not train."""
    env = PettingZooParallelAdapter(MaskedParallelEnv(horizon=5), seed=1)
    env.reset()
    for _ in range(3):  # "b" leaves at step 2
        obs, _, term, trunc, infos = env.step([1, 1, 1])
    assert infos[1]["is_active"] is False
    assert obs[1]["action_mask"].tolist() == [1, 1, 1] and not obs[1]["observation"].any()
    assert obs[0]["action_mask"].tolist() == [0, 1, 0]


def test_an_aec_env_given_as_a_parallel_env_is_named():
    """Every AEC env has `possible_agents` too: the check never fired, and the user got an
    unrelated error later (a 'cannot unpack NoneType' at reset)."""
    pytest.importorskip("pettingzoo")
    from pettingzoo.classic import rps_v2

    with pytest.raises(TypeError, match="register_pettingzoo_aec_env"):
        PettingZooParallelAdapter(rps_v2.env())
    PettingZooParallelAdapter(rps_v2.parallel_env())  # the parallel one is taken


def test_a_seeded_reset_replaces_the_factorys_pending_seed():
    """The factory's seed (from --seed and the env id only) seeds the first reset when that
    reset has none; a worker's seeded reset replaces it, and it never comes back at a later
    reset, which would replay the same episodes in a restarted worker or a resumed run."""
    inner = ScriptedParallelEnv()
    env = PettingZooParallelAdapter(inner, seed=123)
    env.reset(seed=7)
    env.reset()
    assert inner.reset_seeds == [7, None]
    unseeded = ScriptedParallelEnv()
    env = PettingZooParallelAdapter(unseeded, seed=123)
    env.reset()
    env.reset()
    assert unseeded.reset_seeds == [123, None]
