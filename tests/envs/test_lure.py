"""Tests of the lure env (envs.lure): the default shaping must favour coins over the goal, and
the shaped optimum must move smoothly towards the goal as the lure weight falls."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from envs.lure import make_lure
from envs.lure.env import COIN_DECAY, GOAL, PIT, RIGHT, LureEnv
from rl_pbt.envs.interfaces import RewardShapingInterface
from rl_pbt.envs.registry import make_env


def _env() -> LureEnv:
    return make_lure("lure", None, {"worker_index": 0, "vector_index": 0, "env_id": 0})


def _walk_to(env: LureEnv, target: tuple[int, int]) -> int:
    if env.x != target[0]:
        return 2 if target[0] > env.x else 4
    if env.y != target[1]:
        return 3 if target[1] > env.y else 1
    return 0


def farm_policy(env: LureEnv) -> int:
    return _walk_to(env, PIT)


def farm_then_goal(k: int):
    """Farm k coins, then walk to the goal (earlier if the time left is only just enough)."""

    def policy(env: LureEnv) -> int:
        if env.coins < k and env.t < env.episode_steps - 9:
            return _walk_to(env, PIT)
        return _walk_to(env, GOAL)

    return policy


def goal_policy(env: LureEnv) -> int:
    return _walk_to(env, GOAL)


def _evaluate(policy, shaping=None, episodes: int = 100, gamma: float = 1.0, seed: int = 0):
    """Mean (discounted) shaped return and mean true objective of a hand-coded policy."""
    env = _env()
    if shaping:
        env.set_reward_shaping(shaping, 0)
    env.reset(seed=seed)
    returns, objectives = [], []
    for _ in range(episodes):
        ret, discount = 0.0, 1.0
        while True:
            _, reward, terminated, truncated, info = env.step(policy(env))
            ret += discount * reward
            discount *= gamma
            if terminated or truncated:
                break
        returns.append(ret)
        objectives.append(info["true_objective"])
        env.reset()
    return float(np.mean(returns)), float(np.mean(objectives))


def test_gymnasium_api():
    env = _env()
    assert isinstance(env, RewardShapingInterface)
    check_env(env, skip_render_check=True)


@pytest.mark.parametrize("gamma", [1.0, 0.99])
def test_default_shaping_prefers_the_lure(gamma):
    farm_return, farm_objective = _evaluate(farm_policy, gamma=gamma)
    goal_return, goal_objective = _evaluate(goal_policy, gamma=gamma)
    assert farm_objective == 0.0 and 0.8 < goal_objective < 0.95
    assert farm_return > 1.5 * goal_return > 0


@pytest.mark.parametrize("shaping", [{"lure": 0.0}, {"lure": 0.03}, {"goal": 40.0}])
def test_tuned_shaping_prefers_the_goal(shaping):
    goal_return, goal_objective = _evaluate(goal_policy, shaping, gamma=0.99)
    for k in range(1, 10):
        farm_return, farm_objective = _evaluate(farm_then_goal(k), shaping, gamma=0.99)
        assert goal_return > farm_return and goal_objective > farm_objective


def test_shaped_optimum_moves_smoothly_with_the_lure_weight():
    """The best farm-k-then-goal plan under the shaped reward (gamma 0.99) farms fewer coins,
    and so scores a higher true objective, at every step down in the lure weight: the
    gradient PBT follows."""
    best_k, objectives = [], []
    for lure in (1.0, 0.3, 0.15, 0.1, 0.07, 0.03):
        scores = [_evaluate(farm_then_goal(k), {"lure": lure}, 50, 0.99) for k in range(12)]
        k = int(np.argmax([ret for ret, _ in scores]))
        best_k.append(k)
        objectives.append(scores[k][1])
    assert best_k == sorted(best_k, reverse=True) and len(set(best_k)) >= 5, best_k
    assert objectives == sorted(objectives), objectives
    assert objectives[0] < 0.1 and objectives[-1] > 0.85, objectives


def test_pit_is_a_dead_end_and_coins_decay():
    env = _env()
    env.reset(seed=3)
    while not env.in_pit:
        env.step(farm_policy(env))
    rewards = []
    for t in range(20):
        _, reward, _, _, _ = env.step(t % 4 if t % 4 != RIGHT else 0)  # anything but right
        assert env.in_pit
        rewards.append(reward - env.shaping["step_penalty"])
    paid = [r for r in rewards if r > 0]
    assert len(paid) == 4  # one coin every COIN_RESPAWN_STEPS steps
    np.testing.assert_allclose(np.diff(np.log(paid)), np.log(COIN_DECAY), rtol=1e-9)
    env.step(RIGHT)
    assert not env.in_pit


def test_every_episode_reports_true_objective_and_is_short():
    env = _env()
    env.reset(seed=1)
    rng = np.random.default_rng(0)
    length, episodes, successes = 0, 0, 0
    for _ in range(5000):
        _, _, terminated, truncated, info = env.step(int(rng.integers(5)))
        length += 1
        # the time limit is part of the task (the observation shows the time left)
        assert not truncated
        if terminated:
            reached = (env.x, env.y) == GOAL
            assert info["episode_extra_stats"]["goal_reached"] == float(reached)
            assert reached or length == env.episode_steps  # else only the time limit ends it
            expected = 1.0 - length / env.episode_steps if reached else 0.0
            assert info["true_objective"] == pytest.approx(expected)
            assert length <= env.episode_steps <= 100
            successes += reached
            episodes += 1
            length = 0
            env.reset()
        else:
            assert "true_objective" not in info
    # random play sometimes reaches the goal, so it can be discovered by exploration
    assert episodes > 50 and 0 < successes < episodes


@pytest.mark.parametrize("key", ["goal", "lure", "step_penalty"])
def test_every_shaping_coefficient_changes_the_reward(key):
    def rollout(shaping):
        env = _env()
        if shaping:
            env.set_reward_shaping(shaping, 0)
        env.reset(seed=5)
        rewards, events = [], []
        for policy in [goal_policy] * 3 + [farm_policy] * 3:
            while True:
                coins, t = env.coins, env.t
                _, reward, terminated, truncated, _ = env.step(policy(env))
                rewards.append(reward)
                events.append(
                    {
                        "goal": float((env.x, env.y) == GOAL),
                        "lure": sum(COIN_DECAY**k for k in range(coins, env.coins)),
                        "step_penalty": float(env.t - t),
                    }
                )
                if terminated or truncated:
                    env.reset()
                    break
        return np.array(rewards), np.array([e[key] for e in events])

    base, counts = rollout(None)
    delta = -0.2 if key == "step_penalty" else 0.4
    changed, _ = rollout({key: _env().get_default_reward_shaping()[key] + delta})
    assert counts.sum() > 0
    np.testing.assert_allclose(changed - base, delta * counts, atol=1e-12)


def test_shaping_interface_details():
    env = _env()
    assert env.get_default_reward_shaping() == {"goal": 1.0, "lure": 1.0, "step_penalty": -0.001}
    env.set_reward_shaping({"lure": 0.1}, slice(None))
    assert env.shaping["lure"] == 0.1 and env.shaping["goal"] == 1.0
    with pytest.raises(IndexError):
        env.set_reward_shaping({"lure": 0.1}, 1)
    with pytest.raises(ValueError, match="unknown"):
        env.set_reward_shaping({"coins": 0.1}, 0)


def test_registered_and_seeded():
    from rl_pbt import parse_cfg

    cfg = parse_cfg(["--env=lure", "--seed=1"])
    assert cfg.encoder_mlp_layers == [64, 64]
    envs = [
        make_env("lure", cfg, {"worker_index": 0, "vector_index": 0, "env_id": i})
        for i in (0, 0, 1)
    ]
    starts = []
    for env in envs:
        obs = [env.reset()[0] for _ in range(10)]
        starts.append(np.concatenate(obs))
    assert np.array_equal(starts[0], starts[1]) and not np.array_equal(starts[0], starts[2])
    env = make_lure("lure", None, {"env_id": 0}, render_mode="rgb_array")
    env.reset(seed=0)
    assert env.render().dtype == np.uint8
