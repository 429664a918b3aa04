"""How fast can a connect four encoder learn the game's first tactic from clean labels?

    python benchmarks/connect_four_probe.py                          # MLP and convnet_board
    python benchmarks/connect_four_probe.py --encoders mlp --steps 6000

Positions come from random games (the batched env, `envs/connect_four_batch.py`), kept when the
player to move can win at once; the label is the winning column (shared among them when there
are several). Each encoder, as the trainer builds it for that env (`mlp`: the [256, 256] MLP
of `connect_four` on the 84 board values, here flattened plane by plane, an order an MLP does
not care about, and without the running input normalisation; a conv architecture: that encoder
on the 2 x 6 x 7 planes of `connect_four_planes`, then its [256] MLP), gets a linear head and is
trained by plain supervised learning (cross-entropy, Adam at 3e-4, minibatches of 512, one torch
thread). Every `--every` steps it prints the share of held-out positions (from other games)
where its most likely column wins, and the seconds spent so far.

This separates what a network can learn from what self-play teaches it: when an encoder learns
the tactic here in a few thousand steps but members trained by self-play miss immediate wins,
the bottleneck is the learning signal of self-play, not the network.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Optional

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envs.connect_four import board_from_obs, winning_columns  # noqa: E402
from envs.connect_four_batch import COLS, ROWS, ConnectFourBatch  # noqa: E402
from rl_pbt.models.actor_critic import CONV_ARCHITECTURES, conv_encoder, mlp  # noqa: E402


def win_positions(
    n: int, seed: int, copies: int = 256, exclude: Optional[np.ndarray] = None
) -> tuple[np.ndarray, np.ndarray]:
    """`n` positions from random games where the mover can win at once: board planes
    [n, 2, 6, 7] seen by the mover, and the label [n, 7] (winning columns share 1); none of
    the boards in `exclude` (a held-out set stays out of the training set)."""
    skip = {b.tobytes() for b in exclude} if exclude is not None else set()
    rng = np.random.default_rng(seed)
    env = ConnectFourBatch([seed * 100_003 + k for k in range(copies)], board_planes=True)
    ks = np.arange(copies)
    xs, ys = [], []
    while len(xs) < n:
        obs = env._observations(ks)
        actions = np.zeros((copies, 2), dtype=np.int64)
        for k in range(copies):
            mover = int(env.mover[k])
            legal = np.flatnonzero(env.heights[k] < ROWS)
            cols = winning_columns(board_from_obs(obs[k][mover]), 1)
            if cols and obs[k][mover]["observation"].tobytes() not in skip:
                label = np.zeros(COLS)
                label[cols] = 1.0 / len(cols)
                xs.append(obs[k][mover]["observation"])
                ys.append(label)
            actions[k, mover] = rng.choice(legal)
        env.step(actions)
    return np.stack(xs[:n]), np.stack(ys[:n]).astype(np.float32)


def make_net(encoder: str) -> nn.Module:
    if encoder == "mlp":
        body, size = mlp(ROWS * COLS * 2, [256, 256], nn.ELU)
        return nn.Sequential(nn.Flatten(), body, nn.Linear(size, COLS))
    conv, size = conv_encoder((2, ROWS, COLS), encoder, nn.ELU)
    post, size = mlp(size, [256], nn.ELU)
    return nn.Sequential(conv, post, nn.Linear(size, COLS))


def accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        picked = net(x).argmax(dim=1, keepdim=True)
    return float((y.gather(1, picked) > 0).float().mean())


def probe(encoder: str, train: tuple, test: tuple, steps: int, every: int, batch: int,
          seed: int) -> list[tuple[int, float, float]]:  # fmt: skip
    """Trains `encoder` on `train`; returns (step, held-out accuracy, seconds) every `every`."""
    torch.manual_seed(seed)
    net = make_net(encoder)
    opt = torch.optim.Adam(net.parameters(), lr=3e-4)
    x, y = (torch.from_numpy(a) for a in train)
    xt, yt = (torch.from_numpy(a) for a in test)
    gen = torch.Generator().manual_seed(seed)
    rows, spent = [], 0.0
    for step in range(1, steps + 1):
        start = time.perf_counter()
        idx = torch.randint(len(x), (batch,), generator=gen)
        loss = -(y[idx] * torch.log_softmax(net(x[idx]), dim=-1)).sum(dim=-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        spent += time.perf_counter() - start
        if step % every == 0 or step == steps:
            rows.append((step, accuracy(net, xt, yt), spent))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--encoders", nargs="+", default=["mlp", "convnet_board"],
                    choices=["mlp", *CONV_ARCHITECTURES])  # fmt: skip
    ap.add_argument("--positions", type=int, default=100_000, help="training positions")
    ap.add_argument("--test", type=int, default=2_000, help="held-out positions")
    ap.add_argument("--steps", type=int, default=2_000)
    ap.add_argument("--every", type=int, default=500)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    test = win_positions(args.test, seed=args.seed + 1)
    train = win_positions(args.positions, seed=args.seed + 2, exclude=test[0])
    print(f"{len(train[0]):,} training and {len(test[0]):,} held-out positions with a win at "
          f"once, from random games, none of them held out "
          f"({time.perf_counter() - start:.0f} s)")  # fmt: skip
    print(f"held-out positions where a random legal column wins: {random_baseline(test):.2f}")
    print("| encoder | step | picks a winning column | training seconds |\n|---|---|---|---|")
    for encoder in args.encoders:
        for step, acc, spent in probe(encoder, train, test, args.steps, args.every,
                                      args.batch, args.seed):  # fmt: skip
            print(f"| {encoder} | {step} | {acc:.3f} | {spent:.0f} |", flush=True)
    return 0


def random_baseline(test: tuple) -> float:
    """Expected share of positions a uniform legal column wins."""
    boards, labels = test
    occupied = boards.sum(axis=1)  # [n, rows, cols]
    legal = occupied[:, 0, :] == 0  # top cell empty
    return float(np.mean((labels > 0).sum(axis=1) / legal.sum(axis=1)))


if __name__ == "__main__":
    sys.exit(main())
