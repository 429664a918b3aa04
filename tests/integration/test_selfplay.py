"""Self-play bookkeeping on the arena: Elo ratings, frozen snapshots as opponents."""

import json
import os

from rl_pbt import parse_cfg, train
from rl_pbt.pbt.lineage import read_events
from tests.small_run import SMALL_RUN


def test_snapshots_play_and_are_rated(tmp_path):
    import envs  # noqa: F401  (registers arena_duel)

    cfg = parse_cfg(
        [
            "--env=arena_duel",
            "--num_policies=2",
            *SMALL_RUN,
            "--selfplay_snapshot_prob=0.5",
            "--selfplay_snapshot_every_env_steps=3000",
            "--selfplay_snapshot_pool_size=3",
            "--matchmaking=elo",
            "--train_for_env_steps=12000",
            f"--train_dir={tmp_path}",
            "--experiment=sp",
            "--status_interval=30",
        ]
    )
    assert train(cfg) == 0
    with open(os.path.join(tmp_path, "sp", "elo.json")) as f:
        elo = json.load(f)
    keys = {str(e[0]) for e in elo["entries"]}
    games = {str(e[0]): e[2] for e in elo["entries"]}
    snaps = [k for k in keys if k.startswith("snap:")]
    assert {"0", "1"} <= keys
    assert 1 <= len(snaps) <= 3  # the pool is bounded; evicted snapshots leave the table
    assert sum(games[k] for k in snaps) > 0  # snapshots were actually played against
    with open(os.path.join(tmp_path, "sp", "summary.json")) as f:
        summary = json.load(f)
    assert all(p["env_steps"] >= 12000 for p in summary["policies"].values())


def test_pbt_ranks_on_games_against_snapshots(tmp_path):
    """--pbt_target_objective=vs_snapshots: PBT's objective windows hold only the scores of
    games against frozen snapshots (win 1, draw 0.5, loss 0), and PBT acts on them."""
    import envs  # noqa: F401

    cfg = parse_cfg(
        [
            "--env=arena_duel",
            "--with_pbt",
            "--num_policies=3",
            *SMALL_RUN,
            "--pbt_target_objective=vs_snapshots",
            "--pbt_period_env_steps=3000",
            "--pbt_start_mutation=6000",
            "--pbt_mutation_rate=1.0",
            "--pbt_objective_window=100000",
            "--selfplay_snapshot_prob=0.5",
            "--selfplay_snapshot_every_env_steps=2500",
            "--selfplay_snapshot_pool_size=4",
            "--train_for_env_steps=12000",
            f"--train_dir={tmp_path}",
            "--experiment=vs",
            "--status_interval=30",
            "--seed=3",
        ]
    )
    assert train(cfg) == 0
    exp = os.path.join(tmp_path, "vs")
    events = read_events(os.path.join(exp, "pbt", "lineage.jsonl"))
    assert events, "PBT made no decision"
    with open(os.path.join(exp, "elo.json")) as f:
        elo = json.load(f)
    games = {str(e[0]): e[2] for e in elo["entries"]}
    assert sum(g for k, g in games.items() if k.startswith("snap:")) > 0
    # every live policy's games (a game between two live policies counts for both)
    live_games = sum(games[str(p)] for p in range(3))
    with open(os.path.join(exp, "pbt", "state.json")) as f:
        windows = json.load(f)["windows"]
    scores = [v for w in windows for v in w]
    # ranking on every game would put about live_games scores in the (unbounded) windows;
    # about a third of them are games against snapshots (half the opponent seats)
    assert 0 < len(scores) <= live_games / 2, (len(scores), live_games)
    assert set(scores) <= {0.0, 0.5, 1.0}


def test_snapshots_play_at_their_temperature(tmp_path, monkeypatch):
    """--selfplay_snapshot_temperature: the frozen snapshots' seats sample at T, the live
    members' seats at 1 (serial mode: the rollout worker acts in this process)."""
    import envs  # noqa: F401
    from rl_pbt.models.actor_critic import ActorCritic

    seen = []
    act = ActorCritic.act

    def recording_act(self, obs, rnn_state, deterministic=False, temperature=1.0):
        seen.append(temperature)
        return act(self, obs, rnn_state, deterministic, temperature)

    monkeypatch.setattr(ActorCritic, "act", recording_act)
    cfg = parse_cfg(
        [
            "--env=arena_duel",
            "--num_policies=2",
            "--serial_mode",
            "--fused_inference=False",
            *SMALL_RUN,
            "--selfplay_snapshot_prob=1.0",
            "--selfplay_snapshot_every_env_steps=1000",
            "--selfplay_snapshot_temperature=0.25",
            "--train_for_env_steps=2500",
            "--train_for_seconds=120",
            f"--train_dir={tmp_path}",
            "--experiment=t",
        ]
    )
    assert train(cfg) == 0
    assert set(seen) == {1.0, 0.25} and seen.count(0.25) > 10


def test_snapshot_temperature_needs_snapshots():
    import pytest

    import envs  # noqa: F401
    from rl_pbt.config.parse import ConfigError

    with pytest.raises(ConfigError, match="--selfplay_snapshot_temperature=0.5 .*--selfplay_snap"):
        parse_cfg(["--env=arena_duel", "--selfplay_snapshot_temperature=0.5"])


def test_vs_snapshots_needs_snapshots():
    import pytest

    import envs  # noqa: F401
    from rl_pbt.config.parse import ConfigError

    with pytest.raises(ConfigError, match="--selfplay_snapshot_prob > 0"):
        parse_cfg(["--env=arena_duel", "--with_pbt", "--pbt_target_objective=vs_snapshots"])


def test_vs_snapshots_needs_a_multiagent_env(tmp_path, capsys):
    from launch.train import main

    flags = ["--env=lure", "--with_pbt", "--num_policies=2", f"--train_dir={tmp_path}"]
    flags += ["--pbt_target_objective=vs_snapshots", "--selfplay_snapshot_prob=0.5"]
    assert main(flags) == 2
    assert "--env=lure has one agent" in capsys.readouterr().err


def test_snapshots_need_a_multiagent_env(tmp_path, capsys):
    """Snapshots asked of a one-agent env stop the run (they were silently left out)."""
    from launch.train import main

    flags = ["--env=lure", "--num_policies=2", f"--train_dir={tmp_path}"]
    assert main([*flags, "--selfplay_snapshot_prob=0.25"]) == 2
    err = capsys.readouterr().err
    assert "--selfplay_snapshot_prob=0.25" in err and "--env=lure has one agent" in err
    assert list(tmp_path.iterdir()) == []  # stopped before anything was written


def test_elo_matchmaking_without_snapshots_draws_by_the_ratings(tmp_path, monkeypatch):
    """--matchmaking=elo alone: the rollout workers get the ratings as they move (they were
    sent only along with snapshots, so every member stayed at the starting rating there and
    opponents were drawn uniformly)."""
    import envs  # noqa: F401
    from rl_pbt.sampling import matchmaking

    seen = set()
    draw = matchmaking.EloMatchmaker.opponent_probs

    def recording(self, first):
        seen.add(tuple(round(self.ratings.rating(k), 3) for k in range(self.num_policies)))
        return draw(self, first)

    monkeypatch.setattr(matchmaking.EloMatchmaker, "opponent_probs", recording)
    cfg = parse_cfg(
        ["--env=arena_duel", "--num_policies=3", "--serial_mode", "--num_workers=1",
         "--num_envs_per_worker=4", "--rollout=16", "--batch_size=128",
         "--encoder_mlp_layers", "32", "--matchmaking=elo", "--train_for_env_steps=6000",
         f"--train_dir={tmp_path}", "--experiment=elo", "--seed=1", "--status_interval=30"]
    )  # fmt: skip
    assert train(cfg) == 0
    with open(os.path.join(tmp_path, "elo", "elo.json")) as f:
        rated = {str(e[0]): e[1] for e in json.load(f)["entries"]}
    assert len(set(rated.values())) > 1  # the run's ratings moved apart
    assert any(len(set(r)) > 1 for r in seen), seen  # and the workers drew by such ratings
