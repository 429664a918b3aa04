"""Agents that wait: an env that says who acts next (`info["acts_next"]`) gets no forward pass
for the others. Their action is the first legal one, their steps stay untrained, a rollout that
ends waits for the agent's next decision as before, and an env that breaks its word is stopped."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rl_pbt import parse_cfg, register_env
from rl_pbt.envs.contract import EnvContractError
from rl_pbt.learning.learner import Learner
from rl_pbt.learning.learner_process import LearnerHost
from rl_pbt.memory.buffers import LEARNER, QUEUED
from rl_pbt.runtime.messages import drain
from rl_pbt.runtime.runner import Runner, _MergedQueue


class RoundRobin:
    """`n` agents move in turn (agent t % n on step t), 13 steps a game. The mover gets a reward
    of its move's index; obs: [my turn, step / 13, 1]; the waiting agents' masks allow only
    their last action, so the filler is checkable. With `lie=True` it says agent 1 waits next
    when it in fact moves."""

    is_multiagent = True
    steps = 13  # odd: a game can end on the step after a rollout fills

    def __init__(self, n: int = 3, lie: bool = False):
        self.num_agents = n
        self.lie = lie
        box = gym.spaces.Box(0, 1, (3,), np.float32)
        mask = gym.spaces.Box(0, 1, (4,), np.int8)
        self.observation_space = gym.spaces.Dict({"observation": box, "action_mask": mask})
        self.action_space = gym.spaces.Discrete(4)
        self.t = 0

    def _obs(self):
        mover = self.t % self.num_agents
        out = []
        for a in range(self.num_agents):
            mask = np.ones(4, np.int8) if a == mover else np.array([0, 0, 0, 1], np.int8)
            vec = np.array([a == mover, self.t / self.steps, 1.0], np.float32)
            out.append({"observation": vec, "action_mask": mask})
        return out

    def _infos(self, mover):
        nxt = self.t % self.num_agents
        says = [a == nxt and not (self.lie and a == 1) for a in range(self.num_agents)]
        return [{"is_active": a == mover, "acts_next": says[a]} for a in range(self.num_agents)]

    def reset(self, seed=None, options=None):
        self.t = 0
        return self._obs(), self._infos(mover=0)

    def step(self, actions):
        mover = self.t % self.num_agents
        if not 0 <= int(actions[mover]) < 4:
            raise ValueError(f"bad move {actions[mover]}")
        for a in range(self.num_agents):
            if a != mover:
                assert int(actions[a]) == 3, "a waiting agent gets the first legal action"
        rewards = [0.0] * self.num_agents
        rewards[mover] = float(actions[mover])
        self.t += 1
        done = self.t == self.steps
        infos = None
        if done:
            self.t = 0
            infos = self._infos(mover)
            for info in infos:
                info["true_objective"] = 0.0
        else:
            infos = self._infos(mover)
        n = self.num_agents
        return self._obs(), rewards, [done] * n, [False] * n, infos

    def close(self):
        pass


register_env("round_robin", lambda name, cfg, env_config, render_mode=None: RoundRobin())
register_env(
    "round_robin_lie", lambda name, cfg, env_config, render_mode=None: RoundRobin(lie=True)
)


def _worker(tmp_path, env, extra=()):
    cfg = parse_cfg(
        [f"--env={env}", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=4",
         "--rollout=2", "--batch_size=8", "--encoder_mlp_layers", "8", "--seed=1", "--device=cpu",
         f"--train_dir={tmp_path}", "--experiment=w", *extra]
    )  # fmt: skip
    return _start(cfg)


def _start(cfg):
    """A runner whose learners published their first weights, and one rollout worker; the
    learners never train (the test takes the rollouts off their queues)."""
    runner = Runner(cfg)
    learners = {
        p: Learner(cfg, p, runner.make_model(), runner.buffers, runner.pool, runner.params, "cpu",
                   runner.exp_dir)
        for p in range(cfg.num_policies)
    }  # fmt: skip
    host = LearnerHost(
        learners, _MergedQueue(runner.learner_queues), runner.learner_queues, runner.report_queue
    )
    host.start(resume=False)
    runner.serve_in_process(learners)
    return runner, runner._worker_factory(0, lambda: False, blocking=False)


def _consume(runner, received):
    """Take every sent rollout off the queue: record it, poison its values, free its slot."""
    b = runner.buffers
    for q in runner.learner_queues:
        for msg in drain(q):
            for s in msg.slots:
                received.append(
                    {k: getattr(b, k)[s].numpy().copy() for k in ("values", "valid", "dones")}
                )
                b.values[s] = float("nan")
            b.transfer(msg.slots, QUEUED, LEARNER)
            runner.pool.release(msg.slots)  # from the learner's side, as after training


@pytest.mark.parametrize("inference", ["local", "device"])
def test_waiting_agents_get_no_forward_pass_and_rollouts_still_bootstrap(tmp_path, inference):
    runner, worker = _worker(tmp_path, "round_robin", [f"--inference={inference}"])
    runner.buffers.values.fill_(float("nan"))
    rows_forwarded = []
    if inference == "local":
        act = worker.fused.act

        def counting(obs, rows, deterministic=False):
            rows_forwarded.append(len(rows))
            return act(obs, rows, deterministic)

        worker.fused.act = counting
    received: list[dict] = []
    for _ in range(120):
        worker.step()  # RoundRobin asserts the waiting agents' filler actions
        _consume(runner, received)
    if inference == "local":
        # 4 games, one mover each; a waiting agent whose rollout would otherwise go out after
        # its second waiting step is forwarded too
        assert min(rows_forwarded) == 4 and np.median(rows_forwarded) < 12 * 0.5
    assert len(received) > 100
    for traj in received:
        # every value the learner reads is finite: a rollout's bootstrap value comes from a
        # forward pass, or is 0 where the episode ended (on a waiting step too); the waiting
        # steps' log-prob and value are 0 (never trained on)
        assert np.isfinite(traj["values"]).all(), traj


def test_an_env_that_counts_the_move_of_an_agent_it_said_waits_is_stopped(tmp_path):
    _, worker = _worker(tmp_path, "round_robin_lie")
    with pytest.raises(EnvContractError, match="acts_next=False.*is_active=True"):
        for _ in range(10):
            worker.step()


def test_connect_four_forwards_one_agent_per_game(tmp_path):
    pytest.importorskip("pettingzoo")
    import envs  # noqa: F401  (registers connect_four)

    cfg = parse_cfg(
        ["--env=connect_four", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=8",
         "--rollout=8", "--batch_size=64", "--encoder_mlp_layers", "16", "--seed=1", "--device=cpu",
         f"--train_dir={tmp_path}", "--experiment=c4"]
    )  # fmt: skip
    runner, worker = _start(cfg)
    rows = []
    act = worker.fused.act
    worker.fused.act = lambda obs, r, deterministic=False: (rows.append(len(r)), act(obs, r))[1]
    received: list[dict] = []
    for _ in range(40):
        worker.step()
        _consume(runner, received)
    # 8 games, one mover each (a waiting agent is forwarded only when its rollout needs it)
    assert min(rows) == 8 and np.mean(rows) < 8.5, rows
    assert len(received) > 30


class ShortAndLong:
    """Two agents in turn, agent 0 first in every game. Games of 4 moves and of 1 move
    alternate; the mover gets 1, the waiting agent -0.25, each plus step / 1000 (a step's
    reward names the step). `first_cut`: the games of 4 end by a time limit (truncated), those
    of 1 are won (terminated); else the other way round."""

    is_multiagent = True
    num_agents = 2

    def __init__(self, first_cut: bool):
        self.first_cut = first_cut
        self.observation_space = gym.spaces.Box(0, 1, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = self.game = self.step_count = 0

    def _obs(self):
        return [np.array([a == self.t % 2, self.game % 2, 1], np.float32) for a in range(2)]

    def reset(self, seed=None, options=None):
        self.t = 0
        return self._obs(), [{"is_active": a == 0, "acts_next": a == 0} for a in range(2)]

    def step(self, actions):
        mover = self.t % 2
        bonus = self.step_count / 1000
        rewards = [(1.0 if a == mover else -0.25) + bonus for a in range(2)]
        self.t += 1
        self.step_count += 1
        long_game = self.game % 2 == 0
        infos = [{"is_active": a == mover, "acts_next": a == self.t % 2} for a in range(2)]
        if self.t < (4 if long_game else 1):
            return self._obs(), rewards, [False] * 2, [False] * 2, infos
        cut = self.first_cut == long_game
        self.game += 1
        self.t = 0
        for a, info in enumerate(infos):
            info.update(true_objective=0.0, acts_next=a == 0)
        return self._obs(), rewards, [not cut] * 2, [cut] * 2, infos

    def close(self):
        pass


FIELDS = ("rewards", "dones", "timeouts", "valid")


@pytest.mark.parametrize("first_cut", [True, False])
def test_a_rollout_that_ends_with_its_episode_takes_nothing_of_the_next(tmp_path, first_cut):
    """Agent 1's second rollout of 2 steps is game 0's moves 2 (it waits) and 3 (its move, which
    ends the game): complete, nothing to bootstrap. Game 1 ends on agent 0's first move while
    agent 1 waits: that step's reward and end belong to game 1, not to the rollout of game 0
    (they did while the rollout waited for a bootstrap value)."""
    register_env("short_and_long", lambda n, c, e, render_mode=None: ShortAndLong(first_cut))
    cfg = parse_cfg(
        ["--env=short_and_long", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=1",
         "--worker_num_splits=1", "--rollout=2", "--batch_size=4", "--encoder_mlp_layers", "8",
         "--seed=1", "--device=cpu", f"--train_dir={tmp_path}", "--experiment=w"]
    )  # fmt: skip
    runner, worker = _start(cfg)
    b = runner.buffers
    sent = []
    for _ in range(16):
        worker.step()
        for q in runner.learner_queues:
            for msg in drain(q):
                sent += [{k: getattr(b, k)[s].numpy().copy() for k in FIELDS} for s in msg.slots]
                b.transfer(msg.slots, QUEUED, LEARNER)
                runner.pool.release(msg.slots)
    game0_end = [s for s in sent if s["valid"].tolist() == [False, True] and s["dones"][1]]
    assert game0_end, "agent 1's rollout of game 0's last two moves was not sent"
    first = game0_end[0]
    assert first["rewards"][1] == pytest.approx(1.003)  # its own move at step 3, nothing added
    assert bool(first["timeouts"][1]) == first_cut  # how game 0 ended, not game 1
    assert first["rewards"][0] == pytest.approx(-0.25 + 0.002)  # its wait at step 2
