"""Connect four as a batched env: all of a rollout worker's games stepped in one NumPy call.

`ConnectFourBatch` plays exactly what `PettingZooAECAdapter` around PettingZoo's
`connect_four_v3` gives (`envs.connect_four`): the same observations (the board seen by each
agent, own pieces first, as 84 floats or as 2 x 6 x 7 planes), the mover's legal columns as its
action mask and an all-ones mask for the agent that waits, only the mover `is_active` (and
`acts_next` for the agent to move next), +1 / -1
on the winning move, `true_objective` 1 / 0.5 / 0 when a game ends, the same random openings
for the same seed. The tests compare the two move for move. It exists for speed: PettingZoo's
env steps a few thousand moves a second on one core, which made the env the bottleneck of
connect four training.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
from gymnasium import spaces

from rl_pbt.envs.interfaces import BatchedMultiAgentEnv, generator_from_state

ROWS, COLS = 6, 7
CELLS = ROWS * COLS


def _lines() -> np.ndarray:
    """The 69 lines of 4 cells (flat indices r * COLS + c)."""
    out = []
    for r in range(ROWS):
        for c in range(COLS):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                cells = [(r + k * dr, c + k * dc) for k in range(4)]
                if all(0 <= rr < ROWS and 0 <= cc < COLS for rr, cc in cells):
                    out.append([rr * COLS + cc for rr, cc in cells])
    return np.array(out, dtype=np.int64)


def _lines_through_cells(lines: np.ndarray) -> np.ndarray:
    """(CELLS, L, 4): for each cell, the lines through it, padded with lines of the
    always-empty cell CELLS, which never win."""
    through = [lines[(lines == cell).any(axis=1)] for cell in range(CELLS)]
    width = max(len(t) for t in through)
    out = np.full((CELLS, width, 4), CELLS, dtype=np.int64)
    for cell, t in enumerate(through):
        out[cell, : len(t)] = t
    return out


LINES = _lines()
LINES_THROUGH = _lines_through_cells(LINES)


def game_score(game_return: float) -> float:
    """1 for a win, 0.5 for a draw, 0 for a loss."""
    return 1.0 if game_return > 0 else 0.0 if game_return < 0 else 0.5


class ConnectFourBatch(BatchedMultiAgentEnv):
    """`num_envs` games of connect four between 2 agents (agent 0 moves first)."""

    num_agents = 2
    _STATE = ("cells", "heights", "mover", "returns")

    def __init__(self, seeds: list, board_planes: bool = False, random_opening: int = 0):
        if int(random_opening) < 0:
            raise ValueError(f"random_opening={random_opening}: at least 0")
        self.num_envs = len(seeds)
        self.board_planes = board_planes
        self.random_opening = int(random_opening)
        inner = (
            spaces.Box(0.0, 1.0, (2, ROWS, COLS), np.float32)
            if board_planes
            else spaces.Box(0.0, 1.0, (ROWS * COLS * 2,), np.float32)
        )
        mask = spaces.Box(low=0, high=1, shape=(COLS,), dtype=np.int8)
        self.observation_space = spaces.Dict({"observation": inner, "action_mask": mask})
        self.action_space = spaces.Discrete(COLS)
        k = self.num_envs
        # cell values 0 empty, 1 agent 0's piece, 2 agent 1's; one extra always-empty cell
        self.cells = np.zeros((k, CELLS + 1), dtype=np.int8)
        self.heights = np.zeros((k, COLS), dtype=np.int64)  # pieces in each column
        self.mover = np.zeros(k, dtype=np.int64)
        self.returns = np.zeros((k, 2), dtype=np.float64)
        self._rngs = [np.random.default_rng(s) for s in seeds]  # the openings' draws
        self._all_legal = np.ones(COLS, dtype=np.int8)
        self._copies = np.arange(k)

    # --- observations -----------------------------------------------------------------------
    def _observations(self, ks: np.ndarray) -> list[list[dict]]:
        board = self.cells[ks, :CELLS]
        out = []
        planes = []
        for agent in (0, 1):
            own = board == agent + 1
            theirs = board == 2 - agent
            if self.board_planes:  # (planes, rows, columns)
                both = np.stack([own, theirs], 1).reshape(-1, 2, ROWS, COLS)
            else:  # PettingZoo's (rows, columns, planes), flat
                both = np.stack([own, theirs], 2).reshape(-1, CELLS * 2)
            planes.append(both.astype(np.float32))
        legal = (self.heights[ks] < ROWS).astype(np.int8)
        for j, k in enumerate(ks.tolist()):
            mover = self.mover[k]
            out.append(
                [
                    {
                        "observation": planes[a][j],
                        "action_mask": legal[j] if a == mover else self._all_legal,
                    }
                    for a in (0, 1)
                ]
            )
        return out

    def _infos(self, ks: np.ndarray, movers: np.ndarray) -> list[list[dict]]:
        """`is_active`: the agent moved on this step (`movers`); `acts_next`: it moves next."""
        nexts = self.mover[ks].tolist()
        return [
            [{"is_active": m == 0, "acts_next": n == 0}, {"is_active": m == 1, "acts_next": n == 1}]
            for m, n in zip(movers.tolist(), nexts)
        ]

    # --- moves ------------------------------------------------------------------------------
    def _play(self, ks: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The movers of copies `ks` drop a piece in `cols` (legal): (won, board full)."""
        rows = ROWS - 1 - self.heights[ks, cols]
        cell = rows * COLS + cols
        piece = (self.mover[ks] + 1).astype(np.int8)
        self.cells[ks, cell] = piece
        self.heights[ks, cols] += 1
        lines = self.cells[ks[:, None, None], LINES_THROUGH[cell]]  # (n, L, 4)
        won = (lines == piece[:, None, None]).all(axis=2).any(axis=1)
        full = (self.heights[ks] == ROWS).all(axis=1)
        self.mover[ks] = 1 - self.mover[ks]
        return won, full

    def _new_game(self, k: int) -> None:
        """An empty board, then the random opening: 0..N uniformly random legal moves drawn from
        copy k's own generator (the same draws as `PettingZooAECAdapter`'s). A game the opening
        ends starts again without one. Played on Python ints, one move at a time: a rollout
        worker starts a few games on every step, and NumPy's per-call cost made the openings
        a tenth of connect four's training time."""
        cells, heights = self.cells[k], self.heights[k]
        cells[:] = 0
        heights[:] = 0
        self.mover[k] = 0
        self.returns[k] = 0.0
        if not self.random_opening:
            return
        rng = self._rngs[k]
        h = [0] * COLS
        moves = int(rng.integers(self.random_opening + 1))
        for i in range(moves):
            legal = [c for c in range(COLS) if h[c] < ROWS]
            col = legal[int(rng.integers(len(legal)))]
            piece = 1 + (i & 1)
            cell = (ROWS - 1 - h[col]) * COLS + col
            cells[cell] = piece
            h[col] += 1
            won = i >= 6 and bool((cells[LINES_THROUGH[cell]] == piece).all(axis=1).any())
            if won or i + 1 == CELLS:
                cells[:] = 0
                return
        heights[:] = h
        self.mover[k] = moves & 1

    def reset_copy(self, k: int, seed: Optional[int] = None) -> tuple[list, list[dict]]:
        if seed is not None:  # as PettingZooAECAdapter.reset(seed): the openings too
            self._rngs[k] = np.random.default_rng(seed)
        self._new_game(k)
        ks = np.array([k])
        return self._observations(ks)[0], self._infos(ks, self.mover[ks])[0]

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, list[list[dict]]]:
        actions = np.asarray(actions).reshape(self.num_envs, 2)
        ks = self._copies
        movers = self.mover.copy()
        cols = actions[ks, movers].astype(np.int64)
        illegal = (cols < 0) | (cols >= COLS)
        illegal[~illegal] = self.heights[ks[~illegal], cols[~illegal]] >= ROWS
        if illegal.any():
            k = int(np.flatnonzero(illegal)[0])
            legal = np.flatnonzero(self.heights[k] < ROWS).tolist()
            raise ValueError(
                f"player_{movers[k]} of copy {k} played the illegal action {cols[k]} "
                f"(legal: {legal})"
            )
        won, full = self._play(ks, cols)
        rewards = np.zeros((self.num_envs, 2), dtype=np.float32)
        rewards[ks[won], movers[won]] = 1.0
        rewards[ks[won], 1 - movers[won]] = -1.0
        self.returns += rewards
        done = won | full
        scores = {}
        for k in np.flatnonzero(done).tolist():
            scores[k] = [game_score(self.returns[k, a]) for a in (0, 1)]
            self._new_game(k)
        infos = self._infos(ks, movers)  # this step's movers were active; who moves next
        for k, pair in scores.items():
            for a in (0, 1):
                infos[k][a]["true_objective"] = pair[a]
        obs = self._observations(ks)
        return obs, rewards, done.copy(), np.zeros(self.num_envs, dtype=bool), infos

    # --- the rest of the contract -----------------------------------------------------------
    def get_default_reward_shaping(self) -> Optional[dict]:
        return None

    def set_reward_shaping(self, reward_shaping: dict, agent_idx, env_idx=None) -> None:
        """Connect four has no shaping: its only reward is the game's result."""

    def get_state(self) -> dict:
        """Every game as plain data; `set_state` puts it back (serial runs resume exactly)."""
        out = {k: getattr(self, k).copy() for k in self._STATE}
        out["rngs"] = [r.bit_generator.state for r in self._rngs]
        return out

    def set_state(self, state: dict) -> None:
        for k in self._STATE:
            getattr(self, k)[...] = state[k]
        self._rngs = [generator_from_state(saved) for saved in state["rngs"]]

    def close(self) -> None:
        """Nothing to release."""
