"""PettingZoo's connect four (`connect_four_v3`) as the turn-based env `connect_four`, with
fixed opponents: `random` (uniform over legal moves) and `alphabeta` (negamax with
alpha-beta pruning, `alphabeta:depth=N`, default 2).

The env comes through `PettingZooAECAdapter`: observations are the board seen by the agent
(84 floats: 6 rows x 7 columns x [its own pieces, the opponent's], row 0 at the top) and the
legal columns as an action mask; `true_objective` is 1 for a win, 0.5 for a draw, 0 for a loss.
The model of `connect_four` also sees the board's threats and what each move allows one move
ahead (`LookaheadFeatures`, registered as the env's observation features, the newest of two
sets: `--obs_features_set=threats` gives `ThreatFeatures` alone, `--obs_features=False`
neither): computed from the board, not learned, and not part of the observation, so scripted
players and `launch.match` see the plain board. The model also plays each position in one
orientation of the board and its mirror image (`connect_four_mirror`, `--mirror_symmetry`).
`connect_four_planes` is the same game with the
board as 2 x 6 x 7 float planes and a small convolutional encoder
(`--encoder_conv_architecture=convnet_board`) by default.
PettingZoo is imported only when an env is made (`pip install "rl_pbt[pettingzoo]"`).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import Tensor, nn

from envs.connect_four_batch import COLS, LINES, ROWS, ConnectFourBatch, game_score
from envs.pettingzoo_adapter import factory_seed, register_pettingzoo_aec_env
from rl_pbt.config.flags import Flag, non_negative
from rl_pbt.config.parse import ConfigError
from rl_pbt.envs.scripted import register_scripted_policy
from rl_pbt.extras import install_hint
from rl_pbt.models.symmetry import Mirror

WIN = 1_000_000
_WEIGHTS = np.array([0.0, 1.0, 4.0, 32.0, 0.0])  # a line of 4 cells holding 0..4 of one side


LINES_OF_CELL = [LINES[(LINES == i).any(axis=1)] for i in range(ROWS * COLS)]
CENTRE_FIRST = [3, 2, 4, 1, 5, 0, 6]


def board_from_obs(obs) -> np.ndarray:
    """The board as 42 int8: +1 the observing agent's pieces, -1 the opponent's, 0 empty."""
    planes = np.asarray(obs["observation"])
    if planes.shape != (2, ROWS, COLS):  # PettingZoo's own layout: rows, columns, planes
        planes = np.moveaxis(planes.reshape(ROWS, COLS, 2), -1, 0)
    return (planes[0] - planes[1]).astype(np.int8).reshape(-1)


def drop_row(board: np.ndarray, col: int) -> int:
    """The row a piece dropped in `col` lands on; -1 when the column is full."""
    for r in range(ROWS - 1, -1, -1):
        if board[r * COLS + col] == 0:
            return r
    return -1


def wins(board: np.ndarray, cell: int, side: int) -> bool:
    """Whether the piece of `side` at `cell` completes a line of four."""
    return bool((board[LINES_OF_CELL[cell]].sum(axis=1) == 4 * side).any())


def winning_columns(board: np.ndarray, side: int) -> list[int]:
    """The columns where a piece of `side` completes a line of four at once (full columns
    skipped)."""
    out = []
    for col in range(COLS):
        r = drop_row(board, col)
        if r < 0:
            continue
        cell = r * COLS + col
        board[cell] = side
        if wins(board, cell, side):
            out.append(col)
        board[cell] = 0
    return out


def evaluate(board: np.ndarray) -> float:
    """Heuristic value for +1: lines still open to one side, weighted by how full they are."""
    vals = board[LINES]
    mine = (vals == 1).sum(axis=1)
    theirs = (vals == -1).sum(axis=1)
    score = _WEIGHTS[mine[theirs == 0]].sum() - _WEIGHTS[theirs[mine == 0]].sum()
    centre = board[3::COLS].sum()
    return float(score + 2.0 * centre)


def negamax(board: np.ndarray, depth: int, alpha: float, beta: float, side: int) -> float:
    """Value of the position for `side` to move, searched `depth` plies deep."""
    if depth == 0:
        return side * evaluate(board)
    best = -np.inf
    moved = False
    for col in CENTRE_FIRST:
        r = drop_row(board, col)
        if r < 0:
            continue
        moved = True
        cell = r * COLS + col
        board[cell] = side
        if wins(board, cell, side):
            value = WIN + depth  # a sooner win is worth more
        else:
            value = -negamax(board, depth - 1, -beta, -alpha, -side)
        board[cell] = 0
        best = max(best, value)
        alpha = max(alpha, value)
        if alpha >= beta:
            break
    return best if moved else 0.0  # a full board: a draw


class ThreatFeatures(nn.Module):
    """Connect four's observation features: the board of 84 floats (PettingZoo's layout, rows x
    columns x [own pieces, the opponent's]) -> 6 x 42 0/1 cells, row-major like the board:

    - `own`, `theirs`: empty cells where that side's piece would complete a line of four
      (whether or not a piece can be dropped there yet);
    - `playable`: the empty cells a piece dropped now lands on (one per column not full);
    - `own & playable`: the wins at once; `theirs & playable`: the fours to block at once;
    - `below theirs`: playable cells right under an opponent's threat (dropping a piece
      there lets the opponent complete its four on top).

    Facts of the position, with no search: what the network has to learn is which of them
    matter and how to play around them. No parameters: one module serves every policy.
    """

    SIZE = 6 * ROWS * COLS

    def __init__(self):
        super().__init__()
        incidence = np.zeros((ROWS * COLS, len(LINES)), dtype=np.float32)  # cell in line
        for line, cells in enumerate(LINES):
            incidence[cells, line] = 1.0
        self.register_buffer("incidence", torch.as_tensor(incidence), persistent=False)

    def _threats(self, side: Tensor, empty: Tensor, empty_count: Tensor) -> Tensor:
        """[N, 42] 0/1: empty cells that complete a line holding three of `side`'s pieces
        (the line's one empty cell)."""
        open_three = ((side @ self.incidence == 3) & (empty_count == 1)).to(side)
        return ((open_three @ self.incidence.T) * empty > 0).to(side)

    def forward(self, x: Tensor) -> Tensor:
        return self.threat_planes(x.reshape(-1, ROWS * COLS * 2)).reshape(*x.shape[:-1], self.SIZE)

    def threat_planes(self, x: Tensor) -> Tensor:
        """[N, 84] boards -> [N, 6 * 42] planes."""
        planes = x.reshape(-1, ROWS * COLS, 2)
        own, theirs = planes[..., 0], planes[..., 1]
        empty = 1.0 - own - theirs
        empty_count = empty @ self.incidence
        own_t = self._threats(own, empty, empty_count)
        theirs_t = self._threats(theirs, empty, empty_count)
        floor = torch.ones_like(own[:, :COLS])  # what is below the bottom row
        playable = empty * torch.cat([1.0 - empty[:, COLS:], floor], 1)
        below_theirs = playable * torch.cat([torch.zeros_like(floor), theirs_t[:, :-COLS]], 1)
        out = [own_t, theirs_t, playable, own_t * playable, theirs_t * playable, below_theirs]
        return torch.cat(out, dim=1)


# Bitboards for `LookaheadFeatures`: column c holds bits c * H .. c * H + 5, bottom row first,
# and one bit on top that is never set, so that shifts cannot carry a line into the next column.
H = ROWS + 1
BOTTOM = sum(1 << (c * H) for c in range(COLS))
BOARD = BOTTOM * ((1 << ROWS) - 1)  # the 42 cells
COLUMN_BITS = [((1 << ROWS) - 1) << (c * H) for c in range(COLS)]
CELL_BITS = [(i % COLS) * H + (ROWS - 1 - i // COLS) for i in range(ROWS * COLS)]  # row 0 on top


def four_cells(side: Tensor, empty: Tensor) -> Tensor:
    """Bitboards: the cells of `empty` where a piece of `side` completes a line of four."""
    out = (side << 1) & (side << 2) & (side << 3)  # on top of three in a column
    for s in (H, H - 1, H + 1):  # a row and the two diagonals: the missing piece at any place
        two_before = (side >> s) & (side >> 2 * s)
        two_after = (side << s) & (side << 2 * s)
        out = out | (two_after & ((side << 3 * s) | (side >> s)))
        out = out | (two_before & ((side << s) | (side >> 3 * s)))
    return out & empty


def wins_in_two(side: Tensor, filled: Tensor) -> Tensor:
    """Bool: `side`, to move, will complete a four within its next two moves whatever the
    opponent does: two playable cells complete one, or one does with another such cell right
    above it. `filled` holds both sides' pieces."""
    fours = four_cells(side, BOARD & ~filled)
    now = fours & ((filled + BOTTOM) & BOARD)
    return ((now & (now - 1)) != 0) | ((now & (fours >> 1)) != 0)


def wins_now(side: Tensor, filled: Tensor) -> Tensor:
    """Bool: `side`, to move, completes a four at once."""
    return (four_cells(side, BOARD & ~filled) & (filled + BOTTOM)) != 0


class LookaheadFeatures(ThreatFeatures):
    """Connect four's observation features: the 6 x 42 cells of `ThreatFeatures`, then 4 x 7
    facts about each column (0 for a full column), one move ahead:

    - `fork`: a piece of mine dropped there leaves me a four to complete whatever the reply
      (two at once, or one right under another);
    - `their fork`: the same for the opponent's piece;
    - `unsafe`: after my piece there, the opponent completes a four at once or has a `fork`;
    - `unsafe for them`: after their piece there, I do.

    What each side can force within its next move, found by trying every column (and every
    reply for the last two) on bitboards: no search beyond that. The network still has to
    learn which facts matter and how to steer the game between them.
    """

    SIZE = ThreatFeatures.SIZE + 4 * COLS

    def __init__(self):
        super().__init__()
        bits = torch.tensor([1 << b for b in CELL_BITS], dtype=torch.int64)
        self.register_buffer("cell_bits", bits, persistent=False)
        self.register_buffer("columns", torch.tensor(COLUMN_BITS), persistent=False)
        self.register_buffer("shifts", torch.tensor(CELL_BITS), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        lead = x.shape[:-1]
        pieces = x.reshape(-1, ROWS * COLS, 2).long() * self.cell_bits[:, None]
        sides = pieces.sum(1)  # [N, 2] bitboards: own, the opponent's
        n = sides.shape[0]
        filled = sides[:, 0] | sides[:, 1]
        playable = (filled + BOTTOM) & BOARD
        drop = playable[:, None] & self.columns  # [N, 7] the cell of each column
        after = (filled[:, None] | drop)[:, None]  # [N, 1, 7]
        reply = ((after + BOTTOM) & BOARD)[..., None] & self.columns  # [N, 1, 7, 7]
        other = sides.flip(1)[..., None]  # [N, 2, 1]: who replies to each side's drop
        # every position the facts look at, in one call of `four_cells` (few, large operations:
        # a rollout worker's batches are small, and each operation has a fixed cost)
        parts = [  # (a side's pieces, both sides' pieces) per position
            (sides, filled[:, None].expand(n, 2)),  # the board now: the threat cells
            (sides[..., None] | drop[:, None], after.expand(n, 2, COLS)),  # a side drops
            (other.expand(n, 2, COLS), after.expand(n, 2, COLS)),  # the other to move after
            (other[..., None] | reply, (after[..., None] | reply).expand(n, 2, COLS, COLS)),
        ]
        side = torch.cat([p.reshape(n, -1) for p, _ in parts], dim=1)
        full = torch.cat([f.reshape(n, -1) for _, f in parts], dim=1)
        fours = four_cells(side, BOARD & ~full)
        now = fours & ((full + BOTTOM) & BOARD)
        two = ((now & (now - 1)) != 0) | ((now & (fours >> 1)) != 0)  # wins in two
        sizes = [2, 2 * COLS, 2 * COLS, 2 * COLS * COLS]
        threats, _, _, _ = fours.split(sizes, dim=1)
        _, fork, _, reply_two = two.split(sizes, dim=1)
        _, _, wins_now, _ = (now != 0).split(sizes, dim=1)
        reply_two = (reply_two.reshape(n, 2, COLS, COLS) & (reply != 0)).any(-1)
        unsafe = wins_now.reshape(n, 2, COLS) | reply_two
        facts = torch.cat([fork.reshape(n, 2, COLS), unsafe], dim=1) & (drop != 0)[:, None]
        # the cells of ThreatFeatures, from the bitboards
        own_t, theirs_t = threats.unbind(1)
        boards = [own_t, theirs_t, playable, own_t & playable, theirs_t & playable]
        boards.append(playable & (theirs_t >> 1))  # right under an opponent's threat
        cells = (torch.stack(boards, 1)[..., None] >> self.shifts) & 1  # [N, 6, 42]
        out = torch.cat([cells.reshape(n, -1), facts.reshape(n, -1)], dim=1).to(x.dtype)
        return out.reshape(*lead, self.SIZE)


def connect_four_mirror() -> Mirror:
    """Connect four's left-right mirror on the flat observation (rows x columns x 2 planes)
    and the columns; positions are compared from the bottom row up, which changes least."""
    cell = np.arange(ROWS * COLS * 2).reshape(ROWS, COLS, 2)
    return Mirror(
        obs_perm=cell[:, ::-1].reshape(-1).tolist(),
        action_perm=list(range(COLS - 1, -1, -1)),
        order=cell[::-1].reshape(-1).tolist(),
    )


class AlphaBetaPlayer:
    """Picks the column of the best negamax value `depth` plies deep (depth 1: its own move
    only; 2: and the reply), ties broken at random."""

    def __init__(self, depth: int = 2, seed: Optional[int] = None):
        if int(depth) < 1:
            raise ValueError(f"depth={depth}: at least 1")
        self.depth = int(depth)
        self.rng = np.random.default_rng(seed)

    def act(self, obs) -> int:
        board = board_from_obs(obs)
        # the mask, less any full column (a waiting agent's mask allows every column)
        legal = np.array(
            [c for c in np.flatnonzero(np.asarray(obs["action_mask"]) > 0) if board[c] == 0]
        )
        if legal.size == 0:  # a full board: nothing to play (the game is over)
            return 0
        values = []
        for col in legal.tolist():
            r = drop_row(board, col)
            cell = r * COLS + col
            board[cell] = 1
            if wins(board, cell, 1):
                value = WIN + self.depth
            else:
                value = -negamax(board, self.depth - 1, -np.inf, np.inf, -1)
            board[cell] = 0
            values.append(value)
        values = np.asarray(values)
        best = legal[np.flatnonzero(values == values.max())]
        return int(self.rng.choice(best))

    def reset(self) -> None:
        pass


def make_alphabeta(env, seed: Optional[int] = None, depth: int = 2) -> AlphaBetaPlayer:
    return AlphaBetaPlayer(depth=depth, seed=seed)


def make_connect_four(**kwargs):
    try:
        from pettingzoo.classic import connect_four_v3
    except ModuleNotFoundError as e:  # PettingZoo, or pygame that its classic games import
        missing = (e.name or "").split(".")[0]
        if missing not in ("pettingzoo", "pygame"):
            raise  # installed but broken, or something else: its own error
        raise ConfigError(
            f"connect four is PettingZoo's connect_four_v3, and {missing} is not installed: "
            f"{install_hint('pettingzoo')}"
        ) from e

    return connect_four_v3.env(**kwargs)


def make_connect_four_batch(full_env_name: str, cfg, env_configs: list[dict]):
    """A rollout worker's games as one `ConnectFourBatch`: copy k plays what the PettingZoo
    env made alone for `env_configs[k]` would (same seed, same openings), many times faster."""
    return ConnectFourBatch(
        [factory_seed(cfg, c) for c in env_configs],
        board_planes=full_env_name == "connect_four_planes",
        random_opening=int(getattr(cfg, "random_opening_moves", 0) or 0),
    )


FLAGS = [
    Flag(
        "random_opening_moves",
        int,
        0,
        "training games start after 0..N random legal moves (more varied positions; games "
        "in launch.match and evaluation start from the empty board)",
        non_negative,
        group="env",
        training_only=True,
    )
]
# 32 games per worker (the trainer's 8 before) and a [256, 256] MLP: connect four training ran
# 3.3x the frames/s of the trainer's defaults here (42k against 12.7k, 4 members;
# benchmarks/RESULTS.md), and the smaller net at 3e-4 learned more in 9 minutes than the
# defaults in 25. Minibatches of 4096 (2 epochs) took the env steps of one member's self-play
# from 2.5M to 4.8M in 4 minutes.
# Self-play collapses to a few near-deterministic games without help: up to 8 random opening
# moves and a 10x entropy bonus kept its entropy at 0.4-0.5 (about 0.1 without) and lifted it
# from 0.65 to 0.90 against random play (benchmarks/RESULTS.md)
# 128 games per worker: 1.47x the env steps of 32 in 60 s (4 members), and over 30 minutes the
# best member scored 0.65, 0.66 and 0.56 against depth 2 (0.54, 0.45 and 0.53 with 32, same
# seeds)
# A learning rate of 1e-3 (3e-4 before): at 3e-4 an update moved the policy little (KL
# 0.001-0.0015, 4-8% of the ratios clipped); at 1e-3 three populations scored 0.55, 0.49 and
# 0.54 on average against depth 2 after 30 minutes (0.40-0.47 in five at 3e-4) and their best
# members 0.63, 0.75 and 0.83 (0.48-0.66)
SPEED = {"num_envs_per_worker": 128, "batch_size": 4096, "num_epochs": 2}
VARIETY = {"random_opening_moves": 8, "exploration_loss_coeff": 0.03}
register_pettingzoo_aec_env(
    "connect_four",
    make_connect_four,
    objective=game_score,
    extra_flags=FLAGS,
    default_overrides={
        **SPEED,
        **VARIETY,
        "encoder_mlp_layers": [256, 256],
        "learning_rate": 1e-3,
    },
    make_batch_func=make_connect_four_batch,
    # runs saved before lookahead existed trained with the threats alone: they keep them
    obs_features={"threats": ThreatFeatures, "lookahead": LookaheadFeatures},
    symmetry=connect_four_mirror,
)
register_pettingzoo_aec_env(
    "connect_four_planes",
    make_connect_four,
    objective=game_score,
    board=True,
    default_overrides={
        **SPEED,
        **VARIETY,
        "encoder_conv_architecture": "convnet_board",
        "encoder_conv_mlp_layers": [256],
    },
    extra_flags=FLAGS,
    make_batch_func=make_connect_four_batch,
)
register_scripted_policy("connect_four", "alphabeta", make_alphabeta)
register_scripted_policy("connect_four_planes", "alphabeta", make_alphabeta)
