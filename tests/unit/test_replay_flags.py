"""A replay trains what its member trained on and with: the source run's env flags (the env's
own included), model flags and learning flags, unless given. Before, it kept a handful of them,
so a replay of a run trained with `--nonlinearity=tanh --actor_critic_share_weights=False
--arena_episode_steps=60` trained another network (elu, shared) on another game (300 steps)."""

from __future__ import annotations

import json

import envs  # noqa: F401  (registers the arena)
from launch import replay
from rl_pbt import parse_cfg
from rl_pbt.pbt.lineage import append_event, make_event

SOURCE = [
    "--env=arena_duel", "--with_pbt", "--num_policies=2", "--nonlinearity=tanh",
    "--actor_critic_share_weights=False", "--normalize_returns=False",
    "--arena_episode_steps=60", "--num_epochs=3", "--gamma=0.95", "--env_frameskip=2",
    "--encoder_mlp_layers", "32", "16",
]  # fmt: skip


def replayed_flags(tmp_path, monkeypatch, extra: list[str]) -> dict:
    src = tmp_path / "src"
    src.mkdir()
    cfg = parse_cfg([*SOURCE, f"--train_dir={tmp_path}", "--experiment=src"])
    (src / "config.json").write_text(json.dumps(vars(cfg)))
    (src / "pbt").mkdir()
    append_event(str(src / "pbt" / "lineage.jsonl"),
                 make_event(1, "init", 0, {"learning_rate": [None, 1e-3]}))  # fmt: skip
    seen = {}

    def train(prog, argv):
        seen.update(vars(parse_cfg(argv)))
        return 0

    monkeypatch.setattr(replay, "train_main", train)
    code = replay.main(["--from_experiment=src", "--policy=1", f"--train_dir={tmp_path}", *extra])
    assert code == 0
    return seen


def test_a_replay_keeps_the_source_runs_env_model_and_learning_flags(tmp_path, monkeypatch):
    got = replayed_flags(tmp_path, monkeypatch, [])
    assert got["nonlinearity"] == "tanh"
    assert got["actor_critic_share_weights"] is False
    assert got["normalize_returns"] is False
    assert got["arena_episode_steps"] == 60  # the env's own flag
    assert got["env_frameskip"] == 2
    assert got["num_epochs"] == 3 and got["gamma"] == 0.95
    assert got["encoder_mlp_layers"] == [32, 16]
    assert got["num_policies"] == 1 and got["with_pbt"] is False


def test_a_flag_given_to_the_replay_wins(tmp_path, monkeypatch):
    got = replayed_flags(tmp_path, monkeypatch, ["--gamma=0.9", "--arena_episode_steps=80"])
    assert got["gamma"] == 0.9 and got["arena_episode_steps"] == 80
    assert got["nonlinearity"] == "tanh"
