"""A Discrete observation is one-hot over its n values, from its `start` on."""

import gymnasium as gym
import numpy as np
import pytest

from rl_pbt.models.obs import obs_to_dict


def test_discrete_observations_from_their_start():
    space = gym.spaces.Discrete(5, start=100)
    for value in range(100, 105):
        one_hot = obs_to_dict(space, np.int64(value))["obs"]
        assert one_hot.tolist() == [float(i == value - 100) for i in range(5)]
    for outside in (99, 105, 0):  # never wrapped round to another value
        with pytest.raises(IndexError, match="not in Discrete"):
            obs_to_dict(space, outside)
    assert obs_to_dict(gym.spaces.Discrete(3), 2)["obs"].tolist() == [0.0, 0.0, 1.0]
