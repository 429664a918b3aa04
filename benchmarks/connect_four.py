"""Strength of a self-play population on connect four against fixed opponents it never trained
with: random play and alpha-beta search of depth 1, 2 and 4.

    python benchmarks/connect_four.py                        # 4 members, 30 min of training
    python benchmarks/connect_four.py --train_dir DIR --eval_only --deterministic  # rescore
    python benchmarks/connect_four.py --train_dir DIR --eval_only --temperature 0.5
    python benchmarks/connect_four.py --stages 2000000 5000000 10000000 --minutes 120
    python benchmarks/connect_four.py --compare --seeds 1 2 3 --stages 2000000

Default mode: one population (`--members`, the trainer's defaults otherwise) trains in stages;
after each stage (env steps per member, or the time limit, whichever comes first) every member
plays `--games` games against each opponent, half of them moving first, and a table prints the
score of each member (1 win, 0.5 draw, 0 loss) with its 95% interval, the best member and the
mean. Then the tactics of each member (its most likely move): on positions from random games
where the player to move can win at once, how often it does, and where it must block the
opponent's four (and cannot win), how often it blocks; random play and alpha-beta depth 1 for
reference; then the same on positions from each member's own games against itself (one
position of each kind per player and game). The goal line checks the best member at the last
stage: >= 0.95 against random and >= 0.70 against alpha-beta depth 2.

`--compare`: for each seed, three populations with the same frames (the last stage): PBT
ranking on games against alpha-beta depth 2 (`--pbt_target_objective=vs_scripted:...`), PBT
ranking on the win rate inside the population, and no PBT (PBT rounds every eighth of the
budget); prints each population's best score against depth 1 and depth 2, then the mean and
spread over the seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envs.connect_four import board_from_obs, winning_columns  # noqa: E402
from launch import match  # noqa: E402
from rl_pbt.envs.registry import make_env  # noqa: E402
from rl_pbt.models.loading import play_flags_problem  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPPONENTS = ["random", "alphabeta:depth=1", "alphabeta:depth=2", "alphabeta:depth=4"]
REFERENCE = "alphabeta:depth=2"


def train(train_dir: str, experiment: str, steps: int, seconds: float, flags: list[str],
          env: str) -> dict:  # fmt: skip
    """Train (or resume) `experiment` up to `steps` env steps per member or `seconds`; returns
    summary.json (raises when the run failed)."""
    cmd = [sys.executable, "-m", "launch.train", f"--env={env}",
           f"--train_for_env_steps={steps}", f"--train_for_seconds={max(1, int(seconds))}",
           f"--train_dir={train_dir}", f"--experiment={experiment}", *flags]  # fmt: skip
    log = os.path.join(train_dir, f"{experiment}.log")
    with open(log, "a") as f:
        done = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"training {experiment} failed (exit {done.returncode}), see {log}")
    with open(os.path.join(train_dir, experiment, "summary.json")) as f:
        return json.load(f)


def scores(train_dir, experiment, member, opponent, games, seed, deterministic,
           env_name, temperature=1.0) -> list[float]:  # fmt: skip
    """`games` games of member pN against `opponent`, half moving first: scores of pN."""
    args = SimpleNamespace(env=env_name, experiment=experiment, train_dir=train_dir,
                           deterministic=deterministic, temperature=temperature)  # fmt: skip
    torch.manual_seed(seed)  # members sample their moves from torch's generator: a rescore repeats
    env = make_env(env_name, match.seeded(seed), {"env_id": 0})
    me = match.make_player(f"p{member}", env, args, seed)
    other = match.make_player(opponent, env, args, seed + 1)
    first = match.play(env, [me(), me()], [other(), other()], games // 2, 10**7)
    second = match.play(env, [other(), other()], [me(), me()], games - games // 2, 10**7)
    env.close()
    return first + [1.0 - s for s in second]


def cell(s: list[float]) -> str:
    lo, hi = match.score_interval(s)
    return f"{np.mean(s):.2f} [{lo:.2f}, {hi:.2f}]"


def evaluate(args, experiment: str, opponents: list[str]) -> dict[str, list[float]]:
    """member -> mean score per opponent; prints one row per member."""
    out = {}
    for p in range(args.members):
        row = [scores(args.train_dir, experiment, p, o, args.games, args.seed + 10 * p,
                      args.deterministic, args.env, args.temperature)
               for o in opponents]  # fmt: skip
        out[p] = [float(np.mean(s)) for s in row]
        print(f"| p{p} | " + " | ".join(cell(s) for s in row) + " |", flush=True)
    return out


def tactic_positions(count: int, seed: int, env_name: str, mover=None) -> tuple[object, list]:
    """(env, positions) from random games, or from games of `mover` (a player) against itself:
    (observation of the player to move, the columns that win at once, the columns that block
    the opponent's four), where either is non-empty. A position where a win is missed comes
    again a move later, so each game gives at most one position of each kind per player."""
    env = make_env(env_name, match.seeded(seed), {"env_id": 0})
    rng = np.random.default_rng(seed)
    out: list = []
    seen: set = set()  # (player, kind) already taken in this game
    obs, _ = env.reset()
    games = 0
    while len(out) < count and games < 20 * count:
        m = env.agent_names.index(env.env.agent_selection)
        board = board_from_obs(obs[m])
        legal = np.flatnonzero(obs[m]["action_mask"]).tolist()
        found = {side: winning_columns(board, side) for side in (1, -1)}
        kind = (m, bool(found[1]))
        if (found[1] or found[-1]) and (mover is None or kind not in seen):
            out.append((obs[m], found[1], found[-1]))
            seen.add(kind)
        move = int(rng.choice(legal)) if mover is None else int(mover.act(obs[m]))
        obs, _, term, trunc, _ = env.step([move, move])
        if np.any(term) or np.any(trunc):
            seen.clear()
            games += 1
    return env, out


def tactic_rates(player, positions) -> tuple[float, float]:
    """(share of won-at-once positions where `player` wins, share of must-block positions
    without a win where it blocks)."""
    take = [player.act(o) in win for o, win, _ in positions if win]
    block = [player.act(o) in stop for o, win, stop in positions if stop and not win]
    return float(np.mean(take)), float(np.mean(block))


def print_tactics(args, experiment: str) -> None:
    env, positions = tactic_positions(args.tactic_positions, args.seed, args.env)
    wins_at_once = sum(1 for _, w, _ in positions if w)
    print(f"tactics on {len(positions)} positions from random games ({wins_at_once} with a win "
          f"at once, {len(positions) - wins_at_once} with only a four to block): takes the "
          "win / blocks")  # fmt: skip
    play = SimpleNamespace(env=args.env, experiment=experiment, train_dir=args.train_dir,
                           deterministic=True)  # fmt: skip
    rows = [f"p{p}" for p in range(args.members)] + ["random", "alphabeta:depth=1"]
    cells = []
    for name in rows:
        take, block = tactic_rates(match.make_player(name, env, play, args.seed)(), positions)
        cells.append(f"{name} {take:.2f} / {block:.2f}")
    print("  " + "; ".join(cells), flush=True)
    env.close()
    # the same on positions of the member's own games (sampling its moves, as in training)
    sampling = SimpleNamespace(**{**vars(play), "deterministic": False})
    cells = []
    for p in range(args.members):
        mover = match.make_player(f"p{p}", env, sampling, args.seed)()
        torch.manual_seed(args.seed + p)
        own_env, own = tactic_positions(args.tactic_positions // 2, args.seed + p, args.env, mover)
        own_env.close()
        if not any(w for _, w, _ in own) or not any(b and not w for _, w, b in own):
            cells.append(f"p{p} n/a")  # no position of one kind in its games
            continue
        take, block = tactic_rates(match.make_player(f"p{p}", env, play, args.seed)(), own)
        cells.append(f"p{p} {take:.2f} / {block:.2f}")
    print(
        f"  on up to {args.tactic_positions // 2} positions from each member's games against "
        "itself: " + "; ".join(cells),
        flush=True,
    )


def score_stage(args, summary: dict, when: str) -> tuple[dict[str, list[float]], int]:
    """Score the population "c4" of `summary` (summary.json) against every opponent, with the
    tactics line; returns (member -> scores, the slowest member's env steps)."""
    steps = min(int(s["env_steps"]) for s in summary["policies"].values())
    print(f"\n{steps:,} env steps per member (slowest), {summary['frames']:,} frames in "
          f"this stage's run, {when}", flush=True)  # fmt: skip
    print("| member | " + " | ".join(OPPONENTS) + " |")
    print("|---|" + "---|" * len(OPPONENTS))
    scored = evaluate(args, "c4", OPPONENTS)
    table = np.array(list(scored.values()))
    best = int(np.argmax(table[:, OPPONENTS.index(REFERENCE)]))
    print(f"best against {REFERENCE}: p{best}; population mean: "
          + ", ".join(f"{o} {m:.2f}" for o, m in zip(OPPONENTS, table.mean(0))))  # fmt: skip
    print_tactics(args, "c4")
    return scored, steps


def print_goal(scored: dict) -> None:
    table = np.array(list(scored.values()))
    vs_random, vs_ref = table[:, 0].max(), table[:, OPPONENTS.index(REFERENCE)].max()
    print(
        f"\ngoal (best member): >= 0.95 against random: {vs_random:.2f} "
        f"({'met' if vs_random >= 0.95 else 'missed'}); >= 0.70 against {REFERENCE}: "
        f"{vs_ref:.2f} ({'met' if vs_ref >= 0.70 else 'missed'})"
    )


def population(args) -> None:
    trained = 0.0  # seconds spent training: the evaluations between stages do not count
    flags = [f"--num_policies={args.members}", f"--seed={args.seed}", *args.extra]
    print(f"connect four, {args.members} members, {args.games} games per opponent, time limit "
          f"{args.minutes:g} min of training, flags: {' '.join(flags)}", flush=True)  # fmt: skip
    last: dict = {}
    for stage in args.stages:
        left = args.minutes * 60 - trained
        if left < 30:
            break
        began = time.time()
        summary = train(args.train_dir, "c4", stage, left, flags, args.env)
        trained += time.time() - began
        last, steps = score_stage(args, summary, f"{trained / 60:.1f} min of training")
        if steps < stage:
            print(f"(the time limit came before {stage:,} env steps per member)")
            break
    if last:
        print_goal(last)


def rescore(args) -> None:
    """--eval_only: the population in --train_dir as it stands, no training."""
    with open(os.path.join(args.train_dir, "c4", "summary.json")) as f:
        summary = json.load(f)
    how = "their argmax" if args.deterministic else f"sampled at temperature {args.temperature:g}"
    print(f"connect four, {args.members} members, {args.games} games per opponent, moves "
          f"{how}", flush=True)  # fmt: skip
    print_goal(score_stage(args, summary, "as trained before")[0])


VARIANTS = {
    "pbt_vs_scripted": ["--with_pbt", f"--pbt_target_objective=vs_scripted:{REFERENCE}",
                        "--selfplay_scripted_prob=0.1"],
    "pbt_win_rate": ["--with_pbt"],
    "no_pbt": [],
}  # fmt: skip


def compare(args) -> None:
    steps = args.stages[-1]
    # depth 1 too: where every population scores about 0 against depth 2, it still ranks them
    opponents = ["alphabeta:depth=1", REFERENCE]
    results: dict[str, list[list[float]]] = {v: [] for v in VARIANTS}
    # PBT's defaults start after 20M env steps: here its first round comes after an eighth of
    # the budget, and one every eighth after it
    period = [f"--pbt_period_env_steps={max(1, steps // 8)}",
              f"--pbt_start_mutation={max(1, steps // 8)}"]  # fmt: skip
    for seed in args.seeds:
        for name, flags in VARIANTS.items():
            exp = f"{name}_s{seed}"
            pbt = period if "--with_pbt" in flags else []
            all_flags = [f"--num_policies={args.members}", f"--seed={seed}", *flags, *pbt,
                         *args.extra]  # fmt: skip
            train(args.train_dir, exp, steps, 10**7, all_flags, args.env)
            print(f"\nseed {seed}, {name} ({steps:,} env steps per member):", flush=True)
            print("| member | " + " | ".join(opponents) + " |\n|---|---|---|")
            scored = np.array(list(evaluate(args, exp, opponents).values()))
            results[name].append(scored.max(axis=0).tolist())  # best member per opponent
    for j, opponent in enumerate(opponents):
        print(f"\nbest member's score against {opponent}, over seeds {args.seeds}:")
        for name, per_seed in results.items():
            best = [b[j] for b in per_seed]
            print(f"  {name}: mean {np.mean(best):.3f}, min {min(best):.3f}, max {max(best):.3f} "
                  f"({', '.join(f'{b:.2f}' for b in best)})")  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--env", default="connect_four",
                    choices=["connect_four", "connect_four_planes"])  # fmt: skip
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument(
        "--stages",
        type=int,
        nargs="+",
        default=[2_000_000, 5_000_000, 10_000_000],
        help="env steps per member after which the members are evaluated",
    )
    ap.add_argument("--minutes", type=float, default=30.0, help="time limit of the training")
    ap.add_argument("--games", type=int, default=100, help="games per member and opponent")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tactic_positions", type=int, default=400,
                    help="positions from random games for the tactics line (half as many "
                         "from each member's own games)")  # fmt: skip
    ap.add_argument("--deterministic", action="store_true", help="members play their argmax")
    ap.add_argument("--temperature", type=float, default=1.0,
                    help="members sample their moves from softmax(logits / T)")  # fmt: skip
    ap.add_argument("--eval_only", action="store_true",
                    help="no training: score the population already in --train_dir")  # fmt: skip
    ap.add_argument("--compare", action="store_true", help="PBT variants against no PBT")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--train_dir", default=None)
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                    help="more training flags (last on the command line)")  # fmt: skip
    args = ap.parse_args(argv)
    args.train_dir = args.train_dir or tempfile.mkdtemp(prefix="c4_")
    os.makedirs(args.train_dir, exist_ok=True)
    problem = play_flags_problem(args)
    if problem:
        ap.error(problem)
    if args.compare:
        compare(args)
    elif args.eval_only:
        rescore(args)
    else:
        population(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
