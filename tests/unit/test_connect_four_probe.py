"""benchmarks/connect_four_probe.py: its labels are the columns that win at once (checked
against the alpha-beta player's own win test), and a network trained on them learns the
tactic far beyond random play in a few hundred steps."""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks import connect_four_probe as probe  # noqa: E402
from envs.connect_four import COLS, drop_row, wins  # noqa: E402


def test_labels_are_the_columns_that_win_at_once():
    boards, labels = probe.win_positions(300, seed=5, copies=16)
    assert boards.shape == (300, 2, 6, 7) and labels.shape == (300, 7)
    for planes, label in zip(boards, labels):
        board = (planes[0] - planes[1]).astype(np.int8).reshape(-1)  # +1: the mover's pieces
        expected = []
        for col in range(COLS):
            row = drop_row(board, col)
            if row < 0:
                continue
            board[row * COLS + col] = 1
            if wins(board, row * COLS + col, 1):
                expected.append(col)
            board[row * COLS + col] = 0
        assert expected and np.flatnonzero(label).tolist() == expected
        np.testing.assert_allclose(label.sum(), 1.0)


def test_an_mlp_learns_to_take_the_win_from_clean_labels():
    train = probe.win_positions(4000, seed=2, copies=64)
    test = probe.win_positions(500, seed=1, copies=64)
    chance = probe.random_baseline(test)
    rows = probe.probe("mlp", train, test, steps=400, every=200, batch=256, seed=0)
    assert [r[0] for r in rows] == [200, 400]
    assert chance < 0.3
    assert rows[-1][1] > 0.6  # a uniform legal column wins about 0.16 of these positions
