"""What a decision is credited with when its agent then waits, however long: every reward the
agent gets until its next decision (each scaled and clipped alone), the episode's end if it
comes first, and otherwise the value of the state of that next decision. Checked against the
env's own log on games where agents wait for longer than a rollout."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_pbt import parse_cfg, register_env
from rl_pbt.learning.advantages import credit_to_decisions, scale_rewards
from rl_pbt.learning.learner import Learner
from rl_pbt.learning.learner_process import LearnerHost
from rl_pbt.memory.buffers import LEARNER, QUEUED
from rl_pbt.runtime.messages import drain
from rl_pbt.runtime.runner import Runner, _MergedQueue


class TakeTurns:
    """`n` agents; the mover of each step is drawn at random (the last one again with
    probability `again`), each agent gets a random reward in [-2, 2] on every step, and an
    episode ends (terminated or cut) with probability `p_end`. Observations: [copy, agent, the
    env's step count, my turn], so a trajectory's states can be looked up in `log`."""

    is_multiagent = True

    def __init__(self, copy: int, n: int, again: float, p_end: float, log: dict):
        self.copy, self.num_agents, self.again, self.p_end = copy, n, again, p_end
        self.observation_space = gym.spaces.Box(-1e6, 1e6, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.rng = np.random.default_rng(10 + copy)
        self.k = 0
        self.log = log.setdefault(copy, {})  # env step -> (mover, rewards, terminated, cut)

    def _draw_mover(self, last=None) -> int:
        if last is not None and self.rng.random() < self.again:
            return last
        return int(self.rng.integers(self.num_agents))

    def _obs(self):
        return [
            np.array([self.copy, a, self.k, a == self.mover], np.float32)
            for a in range(self.num_agents)
        ]

    def reset(self, seed=None, options=None):
        self.mover = self._draw_mover()
        return self._obs(), [{"acts_next": a == self.mover} for a in range(self.num_agents)]

    def step(self, actions):
        mover, n = self.mover, self.num_agents
        rewards = (self.rng.integers(-8, 9, n) / 4.0).tolist()
        ended = self.rng.random() < self.p_end
        cut = ended and self.rng.random() < 0.5
        self.log[self.k] = (mover, rewards, ended and not cut, cut)
        self.k += 1
        self.mover = self._draw_mover(None if ended else mover)
        infos = [
            {"is_active": a == mover, "acts_next": a == self.mover, "true_objective": 0.0}
            for a in range(n)
        ]
        return self._obs(), rewards, [ended and not cut] * n, [cut] * n, infos

    def close(self):
        pass


def truth(log: dict, agent: int, k: int, clip: float):
    """(credited reward, episode ended, cut, env step of the agent's next decision) for the
    agent's decision at env step k; None when the log ends before the answer is known."""
    total, j = 0.0, k
    while j in log:
        mover, rewards, term, cut = log[j]
        total += min(max(rewards[agent], -clip), clip)
        if term or cut:
            return total, True, cut, None
        j += 1
        if j in log and log[j][0] == agent:
            return total, False, False, j
    return None


@pytest.mark.parametrize(
    "agents, again, rollout",
    [(2, 0.0, 4), (3, 0.3, 4), (6, 0.0, 3)],
    ids=["alternate", "three", "six_waits_longer_than_a_rollout"],
)
def test_each_decision_gets_what_follows_it_until_the_next(tmp_path, agents, again, rollout):
    log: dict = {}
    name = f"take_turns_{agents}_{rollout}"
    register_env(
        name,
        lambda full_name, cfg, env_config, render_mode=None: TakeTurns(
            env_config["env_id"], agents, again, 0.08, log
        ),
    )
    clip = 1.5
    cfg = parse_cfg(
        [f"--env={name}", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=3",
         f"--rollout={rollout}", f"--batch_size={4 * rollout}", "--encoder_mlp_layers", "8",
         "--seed=1", "--normalize_input=False", f"--reward_clip={clip}",
         f"--train_dir={tmp_path}", "--experiment=w"]
    )  # fmt: skip
    runner = Runner(cfg)
    learner = Learner(
        cfg, 0, runner.make_model(), runner.buffers, runner.pool, runner.params, "cpu",
        runner.exp_dir,
    )  # fmt: skip
    queues = runner.learner_queues
    LearnerHost({0: learner}, _MergedQueue(queues), queues, runner.report_queue).start(resume=False)
    runner.serve_in_process({0: learner})
    worker = runner._worker_factory(0, lambda: False, blocking=False)
    b, t_len = runner.buffers, rollout
    sent = []
    for _ in range(400):  # no update: the model that gave the values stays as it was
        worker.step()
        for msg in drain(queues[0]):
            for s in msg.slots:
                sent.append(
                    {k: getattr(b, k)[s].clone() for k in ("dones", "timeouts", "valid", "values")}
                    | {"rewards": scale_rewards(b.rewards[s], 1.0, clip)}
                    | {"late": float(b.late_rewards[s]), "obs": b.obs["obs"][s].clone()}
                )
            b.transfer(msg.slots, QUEUED, LEARNER)
            runner.pool.release(msg.slots)

    checked = bootstrapped = long_waits = 0
    for tr in sent:
        rewards = tr["rewards"].double().clone()
        rewards[t_len - 1] += tr["late"]  # as the learner adds them
        valid = tr["valid"]
        credited, ended = credit_to_decisions(rewards[:, None], tr["dones"].double()[:, None],
                                              valid[:, None])  # fmt: skip
        decisions = torch.nonzero(valid).view(-1).tolist()
        for n_dec, t in enumerate(decisions):
            copy, agent, k = (int(x) for x in tr["obs"][t, :3])
            want = truth(log[copy], agent, k, clip)
            if want is None:
                continue
            reward, end, cut, nxt = want
            checked += 1
            where = f"copy {copy}, agent {agent}, env step {k}"
            assert float(credited[t, 0]) == pytest.approx(reward), where
            assert bool(ended[t, 0]) == end, where
            if end:
                # the cut mark: on the step that ended the episode (the decision itself or a
                # waiting step after it; the rollout's last step for one after the rollout)
                last = t + int(tr["dones"][t:].nonzero()[0])
                assert bool(tr["timeouts"][last]) == cut, where
                continue
            if n_dec + 1 < len(decisions):
                assert int(tr["obs"][decisions[n_dec + 1], 2]) == nxt, where
                continue
            # the rollout's last decision bootstraps from the state of the agent's next one
            bootstrapped += 1
            long_waits += nxt - k - 1 >= t_len
            assert int(tr["obs"][t_len, 2]) == nxt, where
            assert bool(tr["obs"][t_len, 3]), where  # a state where the agent moves
            with torch.no_grad():
                value = learner.model.act({"obs": tr["obs"][t_len : t_len + 1]}, None)[2]
            assert float(tr["values"][t_len]) == pytest.approx(float(value[0]), abs=1e-5), where
    assert checked > 200 and bootstrapped > 20, (checked, bootstrapped)
    if agents == 6:
        assert long_waits > 5, long_waits  # waits of a whole rollout or more were checked
