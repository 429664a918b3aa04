"""Turn-taking: a 2-agent alternating game decided by the first mover's choice. The final reward
reaches the first mover on a step where it waits (is_active=False); the returns over each
agent's own decisions credit it to the first move, so the first mover learns to win.

With --gae_lambda=0 a move's advantage is its credited reward plus the value of the agent's
next decision: the test then fails if the reward stays on the waiting step (the first move would
see only the value of a waiting state, which the critic never learns)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_pbt import parse_cfg, register_env, train
from rl_pbt.models.loading import load_policy

WINNING_MOVE = 2


class FirstMover:
    """Agent 0 picks one of 4 moves, then agent 1 answers (its move does not matter) and the
    game ends: agent 0 gets +1 if it picked WINNING_MOVE, else -1. Agent 1 is a bystander
    (reward 0): a zero-sum reward to it would teach the shared network through agent 1's
    steps too, and this test is about agent 0's credit. Each step, the agent whose turn it is
    not is marked is_active=False; the last step hands agent 0 its result while it waits."""

    is_multiagent = True
    num_agents = 2

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 1, (3,), np.float32)  # [my turn, moved, 1]
        self.action_space = gym.spaces.Discrete(4)
        self.t, self.choice = 0, -1

    def _obs(self):
        if self.t == 0:
            return [np.array([1, 0, 1], np.float32), np.array([0, 0, 1], np.float32)]
        return [np.array([0, 1, 1], np.float32), np.array([1, 1, 1], np.float32)]

    def reset(self, seed=None, options=None):
        self.t, self.choice = 0, -1
        return self._obs(), [{}, {}]

    def step(self, actions):
        if self.t == 0:
            self.choice = int(actions[0])
            self.t = 1
            infos = [{"is_active": True}, {"is_active": False}]
            return self._obs(), [0.0, 0.0], [False, False], [False, False], infos
        win = self.choice == WINNING_MOVE
        rewards = [1.0 if win else -1.0, 0.0]
        infos = [
            {"is_active": False, "true_objective": float(win)},
            {"is_active": True, "true_objective": float(not win)},
        ]
        obs, _ = self.reset()
        return obs, rewards, [True, True], [False, False], infos

    def close(self):
        pass


register_env("first_mover", lambda full_name, cfg, env_config, render_mode=None: FirstMover())


@pytest.mark.parametrize("extra", [[], ["--gae_lambda=0.0"], ["--with_vtrace"]])
def test_first_mover_learns_the_winning_move(tmp_path, extra):
    cfg = parse_cfg(
        ["--env=first_mover", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=8",
         "--rollout=8", "--batch_size=64", "--encoder_mlp_layers", "16",
         "--learning_rate=3e-3", "--train_for_env_steps=12000", "--seed=5",
         "--decorrelate_envs_on_one_worker=False", f"--train_dir={tmp_path}",
         "--experiment=fm", *extra]
    )  # fmt: skip
    assert train(cfg) == 0
    env = FirstMover()
    model = load_policy(str(tmp_path / "fm"), 0, env.observation_space, env.action_space, cfg)
    first_move = {"obs": torch.tensor([[1.0, 0.0, 1.0]])}
    d = model.dist(model.policy_head(model.encode(first_move)))
    p_win = d.log_softmax[0].exp()[0, WINNING_MOVE].item()
    assert p_win >= 0.9, f"P(winning move) = {p_win:.2f}"


@pytest.mark.parametrize("inference", ["local", "device"])
def test_trajectories_end_on_a_result_or_bootstrap_from_the_next_decision(tmp_path, inference):
    """Connect four through the real rollout worker, with an odd rollout so that trajectories
    end on either agent's turn. A trajectory whose last step is the agent's own move must carry
    that move's outcome: the game's result when the reply ended the game (the loser waits
    then, and that step falls into the next trajectory), else a bootstrap from the agent's next
    decision (one piece more of each side), never from the state where it waits."""
    pytest.importorskip("pettingzoo")
    import envs  # noqa: F401  (registers connect_four)
    from rl_pbt.learning.learner import Learner
    from rl_pbt.learning.learner_process import LearnerHost
    from rl_pbt.runtime.runner import Runner, _MergedQueue

    t_len = 7
    cfg = parse_cfg(
        ["--env=connect_four", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=8",
         f"--rollout={t_len}", "--batch_size=56", "--encoder_mlp_layers", "16",
         f"--inference={inference}", "--random_opening_moves=0", "--seed=2",
         f"--train_dir={tmp_path}", "--experiment=c4"]
    )  # fmt: skip
    runner = Runner(cfg)
    received = []

    class Recording(Learner):
        def add(self, slots):
            super().add(slots)
            b = self.buffers
            for s in slots:
                received.append(
                    {k: getattr(b, k)[s].numpy().copy() for k in ("rewards", "dones", "valid")}
                    | {"late": float(b.late_rewards[s])}
                    | {"obs": b.obs["observation"][s].numpy().copy()}
                )

    learners = {
        0: Recording(
            cfg,
            0,
            runner.make_model(),
            runner.buffers,
            runner.pool,
            runner.params,
            "cpu",
            runner.exp_dir,
        )
    }
    host = LearnerHost(
        learners, _MergedQueue(runner.learner_queues), runner.learner_queues, runner.report_queue
    )
    host.start(resume=False)
    runner.serve_in_process(learners)
    worker = runner._worker_factory(0, lambda: False, blocking=False)
    for _ in range(150):
        worker.step()
        host.poll(timeout=0.0)

    def pieces(obs):  # (own, opponent's) on the flat rows x columns x planes board
        return int(obs[0::2].sum()), int(obs[1::2].sum())

    ended_on_a_move = results = bootstrapped = 0
    for traj in received:
        if not traj["valid"][t_len - 1]:
            continue
        ended_on_a_move += 1
        own, theirs = pieces(traj["obs"][t_len - 1])
        if traj["dones"][t_len - 1]:
            results += 1
            full = own + theirs + 1 == 42
            # the loser's reward comes on its waiting step, after its last move
            result = traj["rewards"][t_len - 1] + traj["late"]
            assert result in ((1.0, -1.0, 0.0) if full else (1.0, -1.0))
        else:
            bootstrapped += 1
            assert pieces(traj["obs"][t_len]) == (own + 1, theirs + 1)
    # games last 7 to 42 moves: some trajectories end on a result, most bootstrap
    assert ended_on_a_move >= 50 and results > 0 and bootstrapped > 0, (results, bootstrapped)
