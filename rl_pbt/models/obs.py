"""Observation layout: every observation is handled as a dict of named arrays.

A plain Box space becomes {"obs": ...}; a Dict space keeps its keys. `ObsSpec` tells the
shared-memory buffers what to allocate and the model which keys are images.

Action masks follow PettingZoo's convention: a Dict observation with the key "action_mask"
(a Box or MultiBinary, one 0/1 entry per action, head after head for MultiDiscrete) says which
actions are legal. It is stored with the other keys, so the learner sees the mask the actor
saw, but it is not encoded: the model applies it to the policy's logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

MASK_KEY = "action_mask"


@dataclass(frozen=True)
class ObsSpec:
    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[np.dtype, ...]

    def items(self):
        return zip(self.keys, self.shapes, self.dtypes)

    def is_image(self, key: str) -> bool:
        return len(self.shapes[self.keys.index(key)]) == 3

    @property
    def mask_key(self) -> str | None:
        """The key of the action mask, or None when the env gives none."""
        return MASK_KEY if MASK_KEY in self.keys else None

    @property
    def feature_keys(self) -> tuple[str, ...]:
        """The keys the model encodes: every key but the action mask."""
        return tuple(k for k in self.keys if k != MASK_KEY)

    def shape(self, key: str) -> tuple[int, ...]:
        return self.shapes[self.keys.index(key)]


def obs_spec(space: gym.Space) -> ObsSpec:
    if isinstance(space, gym.spaces.Dict):
        subspaces = list(space.spaces.items())
    elif isinstance(space, gym.spaces.Box):
        subspaces = [("obs", space)]
    elif isinstance(space, gym.spaces.Discrete):
        subspaces = [("obs", gym.spaces.Box(0, 1, (int(space.n),), np.float32))]
    else:
        raise ValueError(
            f"unsupported observation space {space}: use Box, Discrete or a Dict of Boxes"
        )
    keys, shapes, dtypes = [], [], []
    for key, sub in subspaces:
        if key == MASK_KEY and isinstance(sub, gym.spaces.MultiBinary):
            if len(sub.shape) != 1:  # stored flat, the env's own array would not fit
                raise ValueError(
                    f"observation key {MASK_KEY!r}: one 0/1 entry per action, a vector (for "
                    f"several action heads, head after head); got MultiBinary{sub.shape}"
                )
            sub = gym.spaces.Box(0, 1, (int(sub.shape[0]),), np.float32)
        if not isinstance(sub, gym.spaces.Box):
            raise ValueError(
                f"observation key {key!r}: only Box subspaces are supported (and MultiBinary "
                f"for {MASK_KEY!r}), got {sub}"
            )
        if key == MASK_KEY and len(sub.shape) != 1:
            raise ValueError(
                f"observation key {MASK_KEY!r}: one 0/1 entry per action, a vector; got shape "
                f"{sub.shape}"
            )
        keys.append(key)
        shapes.append(tuple(int(x) for x in sub.shape))
        dtypes.append(np.dtype(np.uint8) if sub.dtype == np.uint8 else np.dtype(np.float32))
    return ObsSpec(tuple(keys), tuple(shapes), tuple(dtypes))


def obs_to_dict(space: gym.Space, obs) -> dict:
    if isinstance(space, gym.spaces.Dict):
        return obs
    if isinstance(space, gym.spaces.Discrete):
        one_hot = np.zeros(int(space.n), np.float32)
        index = int(obs) - int(space.start)  # Discrete(n, start=s) holds s .. s + n - 1
        if not 0 <= index < len(one_hot):
            raise IndexError(f"{int(obs)} is not in {space}")
        one_hot[index] = 1.0
        return {"obs": one_hot}
    return {"obs": obs}


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.uint8 if dtype == np.uint8 else torch.float32
