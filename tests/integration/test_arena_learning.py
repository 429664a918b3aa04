"""Self-play learns: after a short 2-policy run on the arena, each member beats a uniformly
random player: the issue's bar is at least 80% strict wins (a draw is not a win) over 200
games, played as launch/match's cross_play plays a pairing (half the games on each side)."""

import numpy as np
import pytest

from launch.match import make_player, play
from rl_pbt import parse_cfg, train
from rl_pbt.envs.registry import make_env
from rl_pbt.envs.wrappers import as_multiagent


class Args:
    def __init__(self, train_dir):
        self.train_dir = str(train_dir)
        self.experiment = "sp"
        self.env = "arena_duel"
        self.deterministic = False


def selfplay_vs_random(
    tmp_path, steps: int, seed: int = 1, games: int = 200
) -> tuple[np.ndarray, np.ndarray]:
    """Train 2 self-play policies for `steps` frames each; return each member's fraction of
    strict wins and its score (win 1, draw 0.5, loss 0) over `games` games against random."""
    import envs  # noqa: F401

    cfg = parse_cfg(
        [
            "--env=arena_duel",
            "--num_policies=2",
            f"--train_for_env_steps={steps}",
            f"--train_dir={tmp_path}",
            "--experiment=sp",
            f"--seed={seed}",
            "--status_interval=30",
        ]
    )
    assert train(cfg) == 0
    env = as_multiagent(
        make_env("arena_duel", None, {"worker_index": 0, "vector_index": 0, "env_id": 7})
    )
    args = Args(tmp_path)
    names = ["p0", "p1", "random"]
    factories = {n: make_player(n, env, args, seed=k) for k, n in enumerate(names)}
    wins, scores = [], []
    for member in names[:2]:
        # cross_play's pairing: half the games on each side, scores from the member's side
        a, b = factories[member], factories["random"]
        first = play(env, [a()], [b()], games // 2, 2_000_000)
        second = play(env, [b()], [a()], games - games // 2, 2_000_000)
        member_scores = np.array(first + [1.0 - s for s in second])
        assert len(member_scores) == games
        wins.append(float(np.mean(member_scores == 1.0)))
        scores.append(float(np.mean(member_scores)))
    return np.array(wins), np.array(scores)


def test_selfplay_learns_to_beat_random(tmp_path):
    """CI-sized: both members WIN at least 80% of 50 games against a uniformly random player
    (the issue's bar, strict wins). Random against random wins 43.8% of 400 games (5.8% draws,
    50.5% losses; score 0.466): with the storm most games end by elimination, so this is a
    real learning bar. Measured with seeds 1, 2, 3 and 4, 200 games per member: after 200k
    frames per member all eight members won every game; after 140k they won 0.99-1.0 of them,
    after 100k 0.97-0.995. It trains 140k and plays 50 games per member (the games take about
    as long as the training): at 0.97 a member falls below 0.8 of 50 games with a chance under
    1e-6. (Before
    the storm, members that learned to camp far from the centre mostly drew against random:
    scores 0.575-1.0.)"""
    wins, scores = selfplay_vs_random(tmp_path, 140_000, games=50)
    print(f"vs random: wins {wins}, scores {scores}")
    assert np.all(wins >= 0.8), f"wins vs random: {wins}, scores {scores}"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3, 4])
def test_selfplay_beats_random_80_percent(tmp_path, seed):
    """The issue's bar on other self-play seeds than CI's: each member WINS >= 80% of 200
    games against random (draws do not count)."""
    wins, scores = selfplay_vs_random(tmp_path, 1_200_000, seed=seed)
    print(f"seed {seed} vs random: wins {wins}, scores {scores}")
    assert np.all(wins >= 0.8), f"wins vs random: {wins}, scores {scores}"
