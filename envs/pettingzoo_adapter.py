"""Adapter from a PettingZoo `ParallelEnv` to the rl_pbt multi-agent contract, and its registration.

PettingZoo is not imported here: any object with the ParallelEnv API works, so the package
stays optional (`pip install "rl_pbt[pettingzoo]"`).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np
from gymnasium import spaces

from rl_pbt import register_env
from rl_pbt.config.flags import Flag


def _zeros_like_space(space: spaces.Space) -> Any:
    """The all-zero element of a space, observed by agents that are out of the episode."""
    if isinstance(space, spaces.Dict):
        return {k: _zeros_like_space(s) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_zeros_like_space(s) for s in space.spaces)
    if isinstance(space, spaces.Discrete):
        return np.asarray(space.start, dtype=space.dtype)
    return np.zeros(space.shape, dtype=space.dtype)


def _agent_space(env: Any, kind: str, agent: Any) -> spaces.Space:
    method = getattr(env, f"{kind}_space", None)
    if callable(method):
        return method(agent)
    return getattr(env, f"{kind}_spaces")[agent]


class PettingZooParallelAdapter:
    """A PettingZoo ParallelEnv seen as an rl_pbt multi-agent env.

    Agents are the env's `possible_agents`, in that order, and must share one observation
    space and one action space. An agent that left the episode observes zeros, gets reward 0
    and `is_active` False (its action is ignored) until every agent is done; on that final
    step all agents are `terminated` (or `truncated`, when no live agent terminated) and
    active, and the returned observations are the first of the next episode. Each agent's
    last info holds `true_objective`, unless the env gave one: its return of the episode, or
    `objective(return)` (e.g. 1 win / 0.5 draw / 0 loss), as for AEC games.
    """

    is_multiagent = True

    def __init__(
        self,
        parallel_env: Any,
        seed: Optional[int] = None,
        objective: Optional[Callable[[float], float]] = None,
    ):
        if hasattr(parallel_env, "agent_iter"):  # a ParallelEnv has none
            raise TypeError(
                "a turn-based AEC env was given where a ParallelEnv goes: register it with "
                "register_pettingzoo_aec_env (or give its parallel_env)"
            )
        if not hasattr(parallel_env, "possible_agents"):
            raise TypeError("expected a PettingZoo ParallelEnv (no `possible_agents` attribute)")
        self.env = parallel_env
        self.agent_names: list = list(parallel_env.possible_agents)
        if not self.agent_names:
            raise ValueError("the ParallelEnv has no agents")
        self.num_agents = len(self.agent_names)
        self.observation_space = _agent_space(parallel_env, "observation", self.agent_names[0])
        self.action_space = _agent_space(parallel_env, "action", self.agent_names[0])
        for agent in self.agent_names[1:]:
            if _agent_space(parallel_env, "observation", agent) != self.observation_space:
                raise ValueError(
                    f"agent {agent!r} has another observation space than "
                    f"{self.agent_names[0]!r}; all agents must share one"
                )
            if _agent_space(parallel_env, "action", agent) != self.action_space:
                raise ValueError(
                    f"agent {agent!r} has another action space than "
                    f"{self.agent_names[0]!r}; all agents must share one"
                )
        self.render_mode = getattr(parallel_env, "render_mode", None)
        self._zero_obs = _zeros_like_space(self.observation_space)
        space = self.observation_space
        if isinstance(space, spaces.Dict) and "action_mask" in space.spaces:
            # an agent out of the episode still needs a legal action (it is ignored)
            mask = space["action_mask"]
            self._zero_obs["action_mask"] = np.ones(mask.shape, mask.dtype)
        self._done = [False] * self.num_agents
        self._last_info: list[dict] = [{} for _ in self.agent_names]
        # an agent that left: whether by a time limit (None: it left without saying)
        self._cut: list[Optional[bool]] = [None] * self.num_agents
        self._next_seed = seed
        self._objective = objective
        self._returns = np.zeros(self.num_agents)

    def _obs_list(self, obs: dict) -> list:
        return [
            obs[a] if a in obs and not self._done[i] else self._zero_obs
            for i, a in enumerate(self.agent_names)
        ]

    def reset(
        self, seed: Optional[int] = None, options: Optional[dict] = None
    ) -> tuple[list, list[dict]]:
        if seed is None:
            seed = self._next_seed
        self._next_seed = None  # a seeded reset replaces the factory's pending seed
        obs, infos = self.env.reset(seed=seed, options=options)
        self._done = [False] * self.num_agents
        self._last_info = [{} for _ in self.agent_names]
        self._cut = [None] * self.num_agents
        self._returns[:] = 0.0
        infos = infos or {}
        return self._obs_list(obs), [
            dict(infos.get(a, {}), is_active=True) for a in self.agent_names
        ]

    def step(
        self, actions: Sequence[Any]
    ) -> tuple[list, list[float], list[bool], list[bool], list[dict]]:
        if len(actions) != self.num_agents:
            raise ValueError(f"expected {self.num_agents} actions, got {len(actions)}")
        live = set(getattr(self.env, "agents", self.agent_names))
        was_done = list(self._done)
        action_dict = {
            a: actions[i] for i, a in enumerate(self.agent_names) if not was_done[i] and a in live
        }
        obs, rew, term, trunc, infos = self.env.step(action_dict)
        n = self.num_agents
        rewards = [0.0] * n
        terminated = [False] * n
        truncated = [False] * n
        out_infos: list[dict] = []
        any_term = False
        for i, a in enumerate(self.agent_names):
            if was_done[i]:
                out_infos.append({"is_active": False})
                continue
            rewards[i] = float(rew.get(a, 0.0))
            t, tr = bool(term.get(a, False)), bool(trunc.get(a, False))
            any_term |= t
            terminated[i], truncated[i] = t, tr
            info = dict(infos.get(a, {}), is_active=True)
            if t or tr or a not in obs:
                self._done[i] = True
                self._last_info[i] = info
                self._cut[i] = (tr and not t) if t or tr else None
            out_infos.append(info)
        remaining = getattr(self.env, "agents", None)
        if all(self._done) or (remaining is not None and len(remaining) == 0):
            # the episode is over: every agent ends now, active, with its last info (which
            # keeps e.g. a `true_objective` reported when it left), and the way it left: a time
            # limit (bootstrapped) or a true end; one that did not say ends as the episode did
            ended_by_time = not any_term and any(truncated)
            for i in range(n):
                if was_done[i]:
                    out_infos[i] = dict(self._last_info[i], is_active=True)
                cut = ended_by_time if self._cut[i] is None else self._cut[i]
                terminated[i], truncated[i] = not cut, cut
                if "true_objective" not in out_infos[i]:
                    ret = float(self._returns[i] + rewards[i])
                    objective = self._objective(ret) if self._objective else ret
                    out_infos[i]["true_objective"] = objective
            self.final_frame = self.render() if self.render_mode == "rgb_array" else None
            new_obs, _ = self.reset()
            return new_obs, rewards, terminated, truncated, out_infos
        self._returns += rewards
        # agents that left mid-episode: their terminal flags wait for the end of the episode
        return self._obs_list(obs), rewards, [False] * n, [False] * n, out_infos

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def factory_seed(cfg: Any, env_config: Optional[dict]) -> Optional[int]:
    """An env's own seed, from `--seed` and its `env_id` (None without `--seed`: fresh
    entropy). A batched twin seeds copy k as the env made alone for the same env_config."""
    base = getattr(cfg, "seed", None) if cfg is not None else None
    if base is None:
        return None
    env_id = int((env_config or {}).get("env_id", 0))
    return int(np.random.SeedSequence(base, spawn_key=(env_id,)).generate_state(1)[0])


class PettingZooFactory:
    """A picklable env factory around `creator_fn(**env_kwargs)` returning a ParallelEnv."""

    def __init__(
        self,
        creator_fn: Callable[..., Any],
        env_kwargs: Optional[dict] = None,
        objective: Optional[Callable[[float], float]] = None,
    ):
        self.creator_fn = creator_fn
        self.env_kwargs = dict(env_kwargs or {})
        self.objective = objective

    def _env_and_seed(self, cfg: Any, env_config: Optional[dict], render_mode: Optional[str]):
        """The PettingZoo env, and its first reset's seed (from --seed and the env id)."""
        kwargs = dict(self.env_kwargs)
        if render_mode is not None:
            kwargs["render_mode"] = render_mode
        return self.creator_fn(**kwargs), factory_seed(cfg, env_config)

    def __call__(
        self,
        full_env_name: str,
        cfg: Any,
        env_config: Optional[dict],
        render_mode: Optional[str] = None,
    ) -> PettingZooParallelAdapter:
        env, seed = self._env_and_seed(cfg, env_config, render_mode)
        return PettingZooParallelAdapter(env, seed=seed, objective=self.objective)


def register_pettingzoo_env(
    name: str,
    creator_fn: Callable[..., Any],
    env_kwargs: Optional[dict] = None,
    extra_flags: Optional[list[Flag]] = None,
    default_overrides: Optional[dict[str, Any]] = None,
    objective: Optional[Callable[[float], float]] = None,
) -> None:
    """Register `name` as `creator_fn(**env_kwargs)` (e.g. `pistonball_v6.parallel_env`) wrapped
    in `PettingZooParallelAdapter`. `creator_fn` (and `objective`, an agent's return ->
    true_objective) should be module-level functions, so that spawned worker processes can
    rebuild the factory."""
    register_env(
        name,
        PettingZooFactory(creator_fn, env_kwargs, objective),
        extra_flags=extra_flags,
        default_overrides=default_overrides,
    )


# --- turn-based (AEC) envs ----------------------------------------------------------------------
def _flat_box(space: spaces.Box) -> spaces.Box:
    """A Box of any shape as a float32 vector (board planes for an MLP)."""
    low = np.asarray(np.broadcast_to(space.low, space.shape), np.float32).reshape(-1)
    high = np.asarray(np.broadcast_to(space.high, space.shape), np.float32).reshape(-1)
    return spaces.Box(low, high, (int(np.prod(space.shape)),), np.float32)


def _planes_first(space: spaces.Box) -> spaces.Box:
    """A (rows, columns, planes) Box as float32 (planes, rows, columns)."""
    low = np.moveaxis(np.broadcast_to(space.low, space.shape), -1, 0).astype(np.float32)
    high = np.moveaxis(np.broadcast_to(space.high, space.shape), -1, 0).astype(np.float32)
    return spaces.Box(low, high, low.shape, np.float32)


class PettingZooAECAdapter:
    """A turn-based PettingZoo AEC env (e.g. `connect_four_v3.env()`) seen as an rl_pbt
    multi-agent env: one `step` is one move of the agent whose turn it is.

    Each step, every agent gets an observation, but only the mover's action is played and only
    the mover is `is_active`; the others wait (their actions are ignored, and the rewards the
    move gives them, e.g. the loser's -1 on the winning move, are credited to their own last
    move by the learner). `acts_next` marks the agent to move next, so the rollout worker
    computes no action for the others. Observations: a Dict `{"observation", "action_mask"}`
    when the env gives an action mask, its observation flattened to a float32 vector
    (`flatten=True`), or, with `board=True`, a (rows, columns, planes) board as float32 planes
    first (planes, rows, columns), for a convolutional encoder
    (`--encoder_conv_architecture=convnet_board`); a
    waiting agent's mask allows every action (its action is ignored anyway). A player knocked
    out before the game's end (terminated or truncated alone) is stepped out as PettingZoo
    says (action None on its turn) and waits, with zero observations, until the game ends:
    when every agent is out of it. Then every agent is done, with `info["true_objective"]` its
    return of the game (or `objective(return)`, e.g. 1 win / 0.5 draw / 0 loss), and the
    returned observations start the next game.
    """

    is_multiagent = True

    def __init__(
        self,
        aec_env: Any,
        seed: Optional[int] = None,
        flatten: bool = True,
        objective: Optional[Callable[[float], float]] = None,
        board: bool = False,
        random_opening: int = 0,
    ):
        if not hasattr(aec_env, "agent_iter"):
            raise TypeError("expected a PettingZoo AEC env (no `agent_iter`); for a "
                            "ParallelEnv use PettingZooParallelAdapter")  # fmt: skip
        self.env = aec_env
        self.agent_names: list = list(aec_env.possible_agents)
        self.num_agents = len(self.agent_names)
        raw_obs = aec_env.observation_space(self.agent_names[0])
        self.action_space = aec_env.action_space(self.agent_names[0])
        for agent in self.agent_names[1:]:
            if (aec_env.observation_space(agent) != raw_obs
                    or aec_env.action_space(agent) != self.action_space):  # fmt: skip
                raise ValueError(f"agent {agent!r}: all agents must share one observation "
                                 "space and one action space")  # fmt: skip
        self.masked = isinstance(raw_obs, spaces.Dict) and "action_mask" in raw_obs.spaces
        self.state_key = "observation"
        if self.masked:
            keys = [k for k in raw_obs.spaces if k != "action_mask"]
            if len(keys) != 1:
                raise ValueError(
                    f"an AEC game's observations need one key of game state beside "
                    f"'action_mask'; this one has {keys}: give one (e.g. 'observation')"
                )
            self.state_key = keys[0]
        inner = raw_obs[self.state_key] if self.masked else raw_obs
        self.board = board and isinstance(inner, spaces.Box) and len(inner.shape) == 3
        if board and not self.board:
            raise ValueError(f"board=True needs a (rows, columns, planes) Box, not {inner}")
        self.flatten = flatten and not self.board
        self.flatten &= isinstance(inner, spaces.Box) and len(inner.shape) != 1
        inner_out = _flat_box(inner) if self.flatten else _planes_first(inner) if board else inner
        if self.masked:
            self.observation_space = spaces.Dict(
                {self.state_key: inner_out, "action_mask": raw_obs["action_mask"]}
            )
            self._all_legal = np.ones(raw_obs["action_mask"].shape, raw_obs["action_mask"].dtype)
        else:
            self.observation_space = inner_out
        self.render_mode = getattr(aec_env, "render_mode", None)
        self._next_seed = seed
        self._returns = np.zeros(self.num_agents)
        # agents out of the game (knocked out before its end), and how: a time limit or not
        self._done = [False] * self.num_agents
        self._cut = [False] * self.num_agents
        self._out_obs = _zeros_like_space(self.observation_space)
        if self.masked:
            self._out_obs["action_mask"] = self._all_legal
        self._objective = objective
        if int(random_opening) < 0:
            raise ValueError(f"random_opening={random_opening}: at least 0")
        self.random_opening = int(random_opening)
        self._opening_rng = np.random.default_rng(seed)

    def _observe(self, agent: Any, moving: bool, out: bool = False):
        if out:  # out of the game: zeros, waiting
            return self._out_obs
        raw = self.env.observe(agent)
        inner = raw[self.state_key] if self.masked else raw
        if self.flatten:
            inner = np.asarray(inner, np.float32).reshape(-1)
        elif self.board:
            inner = np.ascontiguousarray(np.moveaxis(np.asarray(inner, np.float32), -1, 0))
        if not self.masked:
            return inner
        if moving:  # kept for step()'s legality check: the board is not observed twice
            self._mover_mask = np.asarray(raw["action_mask"])
        mask = self._mover_mask if moving else self._all_legal
        return {self.state_key: inner, "action_mask": mask}

    def _observations(self) -> list:
        mover = self.env.agent_selection
        return [self._observe(a, a == mover, done) for a, done in zip(self.agent_names, self._done)]

    def reset(self, seed: Optional[int] = None, options: Optional[dict] = None):
        if seed is None:
            seed = self._next_seed
        self._next_seed = None  # a seeded reset replaces the factory's pending seed
        if seed is not None:  # a seeded reset also seeds the random openings
            self._opening_rng = np.random.default_rng(seed)
        self.env.reset(seed=seed, options=options)
        self._play_opening()
        self._returns = np.zeros(self.num_agents)
        self._done = [False] * self.num_agents
        self._cut = [False] * self.num_agents
        mover = self.env.agent_selection
        infos = [{"is_active": a == mover, "acts_next": a == mover} for a in self.agent_names]
        return self._observations(), infos

    def _play_opening(self) -> None:
        """With `random_opening=N`, the game starts after 0..N uniformly random legal moves
        (a game they end is started again without): more varied positions to learn from."""
        if not self.random_opening or not self.masked:
            return
        for _ in range(int(self._opening_rng.integers(self.random_opening + 1))):
            raw = self.env.observe(self.env.agent_selection)
            legal = np.flatnonzero(raw["action_mask"])
            self.env.step(int(legal[self._opening_rng.integers(len(legal))]))
            if any(self.env.terminations.values()) or any(self.env.truncations.values()):
                self.env.reset()
                return

    def step(self, actions: Sequence[Any]):
        if len(actions) != self.num_agents:
            raise ValueError(f"expected {self.num_agents} actions, got {len(actions)}")
        mover = self.env.agent_selection
        action = actions[self.agent_names.index(mover)]
        if self.masked:
            mask = self._mover_mask  # from the observations handed out last
            if not mask[int(action)]:
                legal = np.flatnonzero(mask).tolist()
                raise ValueError(f"{mover!r} played the illegal action {action} (legal: {legal})")
        self.env.step(action)
        rewards = self._step_rewards()
        # agents out of the game before its end are stepped out by PettingZoo's rule (their
        # turn comes with action None); the game goes on while any agent is in it
        while self.env.agents and not all(self._done) and self._is_out(self.env.agent_selection):
            self.env.step(None)
            rewards += self._step_rewards()
        self._returns += rewards
        rewards = rewards.tolist()
        infos = [{"is_active": a == mover} for a in self.agent_names]
        n = self.num_agents
        if all(self._done) or not self.env.agents:
            for i, info in enumerate(infos):
                ret = float(self._returns[i])
                info["true_objective"] = self._objective(ret) if self._objective else ret
            self.final_frame = self.render() if self.render_mode == "rgb_array" else None
            cut = list(self._cut)
            new_obs, first = self.reset()
            for info, start in zip(infos, first):
                info["acts_next"] = start["acts_next"]
            return new_obs, rewards, [not c for c in cut], cut, infos
        following = self.env.agent_selection
        for a, info in zip(self.agent_names, infos):
            info["acts_next"] = a == following
        return self._observations(), rewards, [False] * n, [False] * n, infos

    def _step_rewards(self) -> np.ndarray:
        """Each agent's reward of the env's last step; marks the agents it put out of the
        game (terminated or truncated, or gone from `agents`)."""
        env = self.env
        live = set(env.agents)
        for i, a in enumerate(self.agent_names):
            if self._done[i]:
                continue
            term, trunc = bool(env.terminations.get(a, False)), bool(env.truncations.get(a, False))
            if term or trunc or a not in live:
                self._done[i], self._cut[i] = True, trunc and not term
        return np.array([float(env.rewards.get(a, 0.0)) for a in self.agent_names])

    def _is_out(self, agent: Any) -> bool:
        return bool(self.env.terminations.get(agent) or self.env.truncations.get(agent))

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


class PettingZooAECFactory(PettingZooFactory):
    """A picklable env factory around `creator_fn(**env_kwargs)` returning an AEC env."""

    def __init__(self, creator_fn, env_kwargs=None, objective=None, board=False):
        super().__init__(creator_fn, env_kwargs, objective)
        self.board = board

    def __call__(self, full_env_name, cfg, env_config, render_mode=None):
        env, seed = self._env_and_seed(cfg, env_config, render_mode)
        # training envs only: evaluation (launch.match) gives no such flag, so no opening
        opening = int(getattr(cfg, "random_opening_moves", 0) or 0)
        return PettingZooAECAdapter(
            env, seed=seed, objective=self.objective, board=self.board, random_opening=opening
        )


def register_pettingzoo_aec_env(
    name: str,
    creator_fn: Callable[..., Any],
    env_kwargs: Optional[dict] = None,
    extra_flags: Optional[list[Flag]] = None,
    default_overrides: Optional[dict[str, Any]] = None,
    objective: Optional[Callable[[float], float]] = None,
    board: bool = False,
    make_batch_func: Optional[Callable[..., Any]] = None,
    obs_features: Optional[Callable[[], Any] | dict[str, Callable[[], Any]]] = None,
    symmetry: Optional[Callable[[], Any]] = None,
) -> None:
    """Register `name` as the turn-based `creator_fn(**env_kwargs)` (e.g.
    `connect_four_v3.env`) wrapped in `PettingZooAECAdapter` (`board=True`: observations as
    board planes, see there); `creator_fn` (and `objective`, the game's return ->
    true_objective) should be module-level functions. `make_batch_func`: a faster batched
    twin for the rollout workers (see `register_env`), which must play what the adapter
    gives; `obs_features`: the model's extra input features; `symmetry`: the game's mirror
    symmetry (see `register_env`)."""
    register_env(
        name,
        PettingZooAECFactory(creator_fn, env_kwargs, objective, board),
        extra_flags=extra_flags,
        default_overrides=default_overrides,
        make_batch_func=make_batch_func,
        obs_features=obs_features,
        symmetry=symmetry,
    )
