"""How much a connect four member's critic knows beyond its policy: each member plays a fixed
opponent three ways.

    python benchmarks/connect_four_critic.py --train_dir DIR            # experiment c4, p0-p3
    python benchmarks/connect_four_critic.py --train_dir DIR --members 0 2 --eta 0.1 0.3

- `policy`: its moves sampled from its policy, as `benchmarks/connect_four.py` scores it;
- `critic`: the move whose result its critic rates best, ties at random. A move's value
  Q(s, a) is 1 for a win at once, 0 for a draw that fills the board, else minus the critic's
  value of the position after it (the other side to move);
- `eta=E`: its moves sampled from policy(a) x exp(Q(s, a) / E), the policy reweighted by the
  critic's one-move lookahead.

This is search at play time with the member's own network: a diagnostic of the critic, not a
way to score members (the benchmark's figure of record is the policy alone). Each player plays
`--games` games against the opponent, half of them moving first, with seeded random numbers.
"""

from __future__ import annotations

import argparse
import os
import sys
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envs.connect_four import COLS, ROWS, board_from_obs, drop_row, wins  # noqa: E402
from launch import match  # noqa: E402
from rl_pbt.envs.registry import make_env  # noqa: E402


def after_moves(obs) -> tuple[list[int], np.ndarray, list[np.ndarray]]:
    """(legal columns, outcome of each for the mover: 1 a win, 0 a draw, NaN the game goes on,
    the observation of each position after it for the other side, PettingZoo's layout)."""
    board = board_from_obs(obs)
    mask = np.asarray(obs["action_mask"])
    cols = [c for c in range(COLS) if mask[c] > 0 and board[c] == 0]  # a waiting agent's mask
    outcome = np.full(len(cols), np.nan)  # allows every column: full ones are left out here
    nxt = []
    for i, col in enumerate(cols):
        after = board.copy()
        cell = drop_row(after, col) * COLS + col
        after[cell] = 1
        if wins(after, cell, 1):
            outcome[i] = 1.0
        elif (after != 0).all():
            outcome[i] = 0.0
        planes = np.stack([after == -1, after == 1], -1).reshape(ROWS, COLS, 2)
        nxt.append(planes.astype(np.float32).reshape(-1))
    return cols, outcome, nxt


class LookaheadActor:
    """A member that picks its move from its critic's values of the positions after each move
    (`eta` None: the best; else sampled from policy x exp(Q / eta))."""

    def __init__(self, model, eta, seed: int):
        self.model, self.eta = model, eta
        self.rng = np.random.default_rng(seed)

    def reset(self) -> None:
        pass

    @torch.no_grad()
    def act(self, obs) -> int:
        cols, outcome, nxt = after_moves(obs)
        if not cols:  # the game is over
            return 0
        next_mask = torch.tensor(np.stack([o.reshape(ROWS, COLS, 2)[0].sum(-1) == 0 for o in nxt]))
        next_mask = next_mask.float()
        next_mask[next_mask.sum(1) == 0] = 1.0  # a full board: its value is not used
        batch = {"observation": torch.tensor(np.stack(nxt)), "action_mask": next_mask}
        _, _, values, _ = self.model.act(batch, None, deterministic=True)
        q = np.where(np.isnan(outcome), -values.numpy(), outcome)
        if self.eta is None:
            return int(self.rng.choice(np.asarray(cols)[q >= q.max() - 1e-9]))
        logits = np.log(self.policy(obs)[cols]) + q / self.eta
        p = np.exp(logits - logits.max())
        return int(self.rng.choice(cols, p=p / p.sum()))

    def policy(self, obs) -> np.ndarray:
        """The policy's probabilities of the columns, in the env's orientation."""
        model = self.model
        batch = {
            "observation": torch.tensor(np.asarray(obs["observation"], np.float32))[None],
            "action_mask": torch.tensor(np.asarray(obs["action_mask"], np.float32))[None],
        }
        seen, flip = model.canonical(batch)
        head = model.policy_head(model.encode(seen))
        log_p = model.dist(head, model.action_mask(seen)).log_softmax[0]
        if flip is not None:
            log_p = model.mirror.mask(log_p, flip)
        return log_p[0].exp().double().numpy()


def score(env, me, other, games: int) -> list[float]:
    first = match.play(env, [me(), me()], [other(), other()], games // 2, 10**7)
    second = match.play(env, [other(), other()], [me(), me()], games - games // 2, 10**7)
    return first + [1.0 - s for s in second]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train_dir", required=True)
    ap.add_argument("--experiment", default="c4")
    ap.add_argument("--members", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--opponent", default="alphabeta:depth=2")
    ap.add_argument("--games", type=int, default=100)
    ap.add_argument("--eta", type=float, nargs="+", default=[0.1])
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    play = SimpleNamespace(env="connect_four", experiment=args.experiment,
                           train_dir=args.train_dir, deterministic=False,
                           temperature=1.0)  # fmt: skip
    ways = ["policy", "critic", *[f"eta={e:g}" for e in args.eta]]
    print(f"{args.experiment} in {args.train_dir} against {args.opponent}, {args.games} games "
          "each, half moving first")  # fmt: skip
    print("| member | " + " | ".join(ways) + " |")
    print("|---" * (len(ways) + 1) + "|")
    totals: dict[str, list[float]] = {w: [] for w in ways}
    for p in args.members:
        seed = args.seed + 10 * p
        env = make_env("connect_four", match.seeded(seed), {"env_id": 0})
        model = match._load_model(f"p{p}", env, play)
        other = match.make_player(args.opponent, env, play, seed + 1)
        cells = []
        for way in ways:
            torch.manual_seed(seed)  # the policy samples from torch's generator
            if way == "policy":
                me = match.make_player(f"p{p}", env, play, seed)
            else:
                eta = None if way == "critic" else float(way[4:])
                me = lambda m=model, e=eta, s=seed: LookaheadActor(m, e, s)  # noqa: E731
            s = score(env, me, other, args.games)
            totals[way].append(float(np.mean(s)))
            lo, hi = match.score_interval(s)
            cells.append(f"{np.mean(s):.2f} [{lo:.2f}, {hi:.2f}]")
        env.close()
        print(f"| p{p} | " + " | ".join(cells) + " |", flush=True)
    print("mean: " + ", ".join(f"{w} {np.mean(v):.3f}" for w, v in totals.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
