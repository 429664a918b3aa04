"""How a connect four member loses to a fixed opponent: the member's last move of each lost game,
sorted by what it could have done.

    python benchmarks/connect_four_losses.py --train_dir DIR --member 0 --opponent alphabeta:depth=2

Kinds of loss, by the position of the member's last move:
- `missed a win`: it could have won at once;
- `missed a block`: the opponent had one four to complete and the member played elsewhere;
- `two threats`: the opponent had two or more fours to complete, so no move saves the game;
- `forced`: no immediate threat, but every legal move let the opponent complete a four next
  (it had to play under an opponent's threat: the game was lost earlier, in the endgame's
  count of threats);
- `had a safe move`: some legal move kept the opponent from winning at once, and it played
  another.

Then the score moving first and second, and over all the member's moves: how often it missed
a win at once, and how often it let the opponent win at once while another move would not
have (a missed block counts there too).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envs.connect_four import COLS, board_from_obs, drop_row, winning_columns  # noqa: E402
from launch import match  # noqa: E402
from rl_pbt.envs.registry import make_env  # noqa: E402


def after_move(board: np.ndarray, col: int) -> np.ndarray:
    out = board.copy()
    out[drop_row(out, col) * COLS + col] = 1
    return out


def lets_a_win(board: np.ndarray, move: int) -> bool:
    """After `move`, the opponent can complete a four at once."""
    return bool(winning_columns(after_move(board, move), -1))


def has_safe_move(board: np.ndarray) -> bool:
    """Some legal move keeps the opponent from completing a four at once."""
    return any(not lets_a_win(board, c) for c in range(COLS) if board[c] == 0)


def loss_kind(board: np.ndarray, move: int) -> str:
    """What the member's last move (`move`, on `board` seen by it) of a lost game was."""
    if winning_columns(board.copy(), 1):
        return "missed a win"
    threats = winning_columns(board.copy(), -1)
    if len(threats) > 1:
        return "two threats"
    if threats:
        return "missed a block" if move not in threats else "blocked, lost on top"
    return "had a safe move" if has_safe_move(board) else "forced"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train_dir", required=True)
    ap.add_argument("--experiment", default="c4")
    ap.add_argument("--env", default="connect_four")
    ap.add_argument("--member", type=int, default=0)
    ap.add_argument("--opponent", default="alphabeta:depth=2")
    ap.add_argument("--games", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    play = SimpleNamespace(env=args.env, experiment=args.experiment, train_dir=args.train_dir,
                           deterministic=False)  # fmt: skip
    torch.manual_seed(args.seed)
    env = make_env(args.env, match.seeded(args.seed), {"env_id": 0})
    me = match.make_player(f"p{args.member}", env, play, args.seed)()
    other = match.make_player(args.opponent, env, play, args.seed + 1)()
    scores, kinds, pieces = [], Counter(), []
    seat_scores: list[list[float]] = [[], []]  # moving first, second
    moves = Counter()
    for game in range(args.games):
        seats = [me, other] if game % 2 == 0 else [other, me]
        obs, _ = env.reset()
        last = None
        while True:
            mover = env.agent_names.index(env.env.agent_selection)
            move = int(seats[mover].act(obs[mover]))
            if seats[mover] is me:
                last = (board_from_obs(obs[mover]), move)
                moves["moves"] += 1
                wins_now = winning_columns(last[0].copy(), 1)
                if wins_now:
                    moves["missed wins"] += move not in wins_now
                elif lets_a_win(*last) and has_safe_move(last[0]):
                    moves["let a win with a safe move left"] += 1
            obs, _, term, trunc, infos = env.step([move, move])
            if term[0] or trunc[0]:
                score = infos[seats.index(me)]["true_objective"]
                scores.append(score)
                seat_scores[seats.index(me)].append(score)
                if score == 0 and last is not None:
                    kinds[loss_kind(*last)] += 1
                    pieces.append(int((last[0] != 0).sum()))
                break
    env.close()
    print(f"p{args.member} against {args.opponent}: score {np.mean(scores):.2f} over "
          f"{len(scores)} games, {len(pieces)} lost")  # fmt: skip
    print(f"  moving first {np.mean(seat_scores[0]):.2f}, second {np.mean(seat_scores[1]):.2f}; "
          f"of its {moves['moves']} moves: {moves['missed wins']} missed a win at once, "
          f"{moves['let a win with a safe move left']} let the opponent win at once with a "
          "safe move left")  # fmt: skip
    for kind, n in kinds.most_common():
        print(f"  {kind}: {n}")
    if pieces:
        print(f"  pieces on the board at the last move of a lost game: median "
              f"{np.median(pieces):.0f} of 42 (min {min(pieces)}, max {max(pieces)})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
