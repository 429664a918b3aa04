"""`benchmarks/connect_four_losses.py` sorts a lost game by the member's last move: each kind on a
board built for it."""

from __future__ import annotations

import numpy as np

from benchmarks.connect_four_losses import lets_a_win, loss_kind
from envs.connect_four import COLS, ROWS


def board(cells: dict[tuple[int, int], int], full_columns=()) -> np.ndarray:
    """+1 the member's pieces, -1 the opponent's, at (row, column), row 0 at the top; columns
    in `full_columns` filled, top to bottom, with a pattern that makes no four."""
    out = np.zeros(ROWS * COLS, dtype=np.int8)
    for col in full_columns:
        for row in range(ROWS):
            out[row * COLS + col] = 1 if (row // 2 + col) % 2 else -1
    for (row, col), side in cells.items():
        out[row * COLS + col] = side
    return out


def test_each_kind_of_loss():
    three = {(5, 0): 1, (5, 1): 1, (5, 2): 1}
    assert loss_kind(board(three), move=6) == "missed a win"
    theirs = {(5, 0): -1, (5, 1): -1, (5, 2): -1, (4, 0): 1}
    assert loss_kind(board(theirs), move=6) == "missed a block"
    two = {(5, 1): -1, (5, 2): -1, (5, 3): -1}  # columns 0 and 4 both complete it
    assert loss_kind(board(two), move=0) == "two threats"
    # the opponent needs (row 4, column 0); dropping in column 0 fills row 5 first
    above = {(4, 1): -1, (4, 2): -1, (4, 3): -1}
    assert loss_kind(board(above), move=0) == "had a safe move"  # column 6 was safe
    forced = board(above, full_columns=range(1, COLS))
    forced[5 * COLS + 0] = 0
    assert loss_kind(forced, move=0) == "forced"


def test_lets_a_win():
    # the opponent's three on row 4 needs (row 4, column 0): a piece in column 0 fills row 5
    # and lets it in; column 6 does not
    above = {(4, 1): -1, (4, 2): -1, (4, 3): -1}
    assert lets_a_win(board(above), move=0)
    assert not lets_a_win(board(above), move=6)
    # an open three on the bottom row: any move but a block leaves the win there
    theirs = {(5, 0): -1, (5, 1): -1, (5, 2): -1}
    assert lets_a_win(board(theirs), move=6)
    assert not lets_a_win(board(theirs), move=3)
