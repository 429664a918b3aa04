"""An episode the env could not finish (a crashed game: `truncated` with
`info["episode_aborted"]`) has no result: its steps are trained on as a cut, but it reaches
neither the episode statistics (nor so PBT's objective windows) nor the match results (Elo,
cross-play). Before, an aborted Doom game put its shaped return into PBT's window of true
objectives and was rated as a draw."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rl_pbt import parse_cfg, register_env
from tests.small_run import serial_worker

LENGTH, ABORT_AT = 5, 2  # a game lasts 5 steps; every third one breaks on its second step


class Crashy:
    """`n` agents acting at once; every step gives each agent 1. Every third episode of a copy
    is cut at its second step with `episode_aborted` (no objective); the others end by
    termination after 5 steps with objective 1 for agent 0 and 0 for the others."""

    def __init__(self, n: int):
        self.num_agents, self.is_multiagent = n, n > 1
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.episode, self.k = 0, 0

    def _obs(self):
        return [np.array([self.k / LENGTH, a], np.float32) for a in range(self.num_agents)]

    def reset(self, seed=None, options=None):
        self.k = 0
        obs = self._obs()
        return (obs, [{}] * self.num_agents) if self.is_multiagent else (obs[0], {})

    def step(self, actions):
        n = self.num_agents
        self.k += 1
        aborted = self.episode % 3 == 2 and self.k == ABORT_AT
        ended = aborted or self.k == LENGTH
        if aborted:
            infos = [{"episode_aborted": True} for _ in range(n)]
        elif ended:
            infos = [{"true_objective": float(a == 0)} for a in range(n)]
        else:
            infos = [{} for _ in range(n)]
        obs = self._obs()
        if ended:
            self.episode += 1
            obs, _ = self.reset()
            obs = obs if self.is_multiagent else [obs]
        done = ended and not aborted
        if not self.is_multiagent:
            return obs[0], 1.0, done, aborted, infos[0]
        return obs, [1.0] * n, [done] * n, [aborted] * n, infos

    def close(self):
        pass


@pytest.mark.parametrize("agents", [1, 2])
def test_an_aborted_episode_counts_in_no_statistic_and_no_match(tmp_path, agents):
    name = f"crashy_{agents}"
    register_env(name, lambda full_name, cfg, env_config, render_mode=None: Crashy(agents))
    cfg = parse_cfg(
        [f"--env={name}", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=2",
         "--rollout=4", "--batch_size=16", "--encoder_mlp_layers", "8", "--seed=1",
         "--decorrelate_envs_on_one_worker=False", f"--train_dir={tmp_path}", "--experiment=a"]
    )  # fmt: skip
    _, host, worker = serial_worker(cfg)
    steps = 3 * LENGTH * 6  # 6 rounds of (game, game, aborted game) per copy: 13 steps a round
    for _ in range(steps):
        worker.step()
        host.poll(timeout=0.0)
    episodes, matches = worker.episodes, worker.matches
    worker.close()

    finished_games = 2 * 2 * 6  # two copies, two finished games a round, at least 6 rounds
    assert len(episodes) >= finished_games * agents
    assert all(e.length == LENGTH and e.episode_return == LENGTH for e in episodes)
    assert all(e.objective in (0.0, 1.0) for e in episodes)
    if agents > 1:
        assert len(matches) == len(episodes) // agents
        assert all(m.objectives == [1.0, 0.0] for m in matches)
    else:
        assert matches == []


class NoObjective(Crashy):
    """Two agents acting at once, games of 5 steps that give agent 0 1 a step and agent 1
    0.5, and no objective in any info."""

    def __init__(self):
        super().__init__(2)

    def step(self, actions):
        self.k += 1
        ended = self.k == LENGTH
        obs = self._obs()
        if ended:
            obs, _ = self.reset()
        return obs, [1.0, 0.5], [ended] * 2, [False] * 2, [{}, {}]


def test_a_game_without_an_objective_is_decided_by_the_returns(tmp_path):
    """A self-play game whose env gives no `true_objective` (a PettingZoo ParallelEnv, rock
    paper scissors): every game was a draw for Elo, cross-play and vs_scripted ranking, and
    PBT ranked on a constant; the seats' returns decide it now."""
    register_env("no_objective", lambda full_name, cfg, env_config, render_mode=None: NoObjective())
    cfg = parse_cfg(
        ["--env=no_objective", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=2",
         "--rollout=4", "--batch_size=16", "--encoder_mlp_layers", "8", "--seed=1",
         "--decorrelate_envs_on_one_worker=False", f"--train_dir={tmp_path}", "--experiment=n"]
    )  # fmt: skip
    _, host, worker = serial_worker(cfg)
    for _ in range(4 * LENGTH):
        worker.step()
        host.poll(timeout=0.0)
    matches = worker.matches
    worker.close()
    assert len(matches) >= 6
    assert all(m.objectives == [5.0, 2.5] for m in matches)
