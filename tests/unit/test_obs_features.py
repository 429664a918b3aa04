"""Observation features an env registers (`register_env(obs_features=...)`): connect four's
threat cells against a NumPy reference, the model that appends them to the normalised
observation, the fused rollout-worker pass that must give the same actions, and the checks on
a user's module and on runs saved before the flag existed."""

from __future__ import annotations

import dataclasses
import json
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import envs  # noqa: F401  (registers connect_four)
from envs.connect_four import (
    LookaheadFeatures,
    ThreatFeatures,
    drop_row,
    winning_columns,
    wins,
)
from envs.connect_four_batch import COLS, ROWS, ConnectFourBatch
from rl_pbt import parse_cfg
from rl_pbt.config.parse import Cfg, ConfigError, load_cfg, resume_mismatches
from rl_pbt.envs import registry
from rl_pbt.envs.registry import register_env, registry_snapshot, restore_registry
from rl_pbt.models.actor_critic import make_actor_critic
from rl_pbt.models.loading import experiment_cfg
from rl_pbt.runtime.processes import check_picklable_registry
from rl_pbt.sampling.fused_inference import FusedPopulationPolicy

CELLS = ROWS * COLS


def reference_planes(board: np.ndarray) -> np.ndarray:
    """The six planes of `ThreatFeatures` cell by cell, by trying each piece on a copy of the
    board (+1 the observer, -1 the opponent)."""
    out = np.zeros((6, CELLS), dtype=np.float32)
    playable = {drop_row(board, c) * COLS + c for c in range(COLS) if drop_row(board, c) >= 0}
    for cell in range(CELLS):
        if board[cell] != 0:
            continue
        for plane, side in ((0, 1), (1, -1)):
            trial = board.copy()
            trial[cell] = side
            out[plane, cell] = wins(trial, cell, side)
        out[2, cell] = cell in playable
    out[3] = out[0] * out[2]
    out[4] = out[1] * out[2]
    for cell in playable:  # the opponent's threat right above a playable cell
        out[5, cell] = cell >= COLS and out[1, cell - COLS] == 1
    return out


def random_game_observations(games: int, seed: int) -> np.ndarray:
    """The mover's observation (84 floats) before every move of `games` random games."""
    env = ConnectFourBatch([seed])
    obs, _ = env.reset_copy(0)
    rng = np.random.default_rng(seed)
    seen, done = [], 0
    while done < games:
        mover = int(env.mover[0])
        seen.append(obs[mover]["observation"])
        col = rng.choice(np.flatnonzero(env.heights[0] < ROWS))
        actions = np.zeros((1, 2), dtype=np.int64)
        actions[0, mover] = col
        step_obs, _, term, _, _ = env.step(actions)
        obs = step_obs[0]
        done += int(term[0])
    return np.stack(seen)


def board_of(obs: np.ndarray) -> np.ndarray:
    planes = obs.reshape(ROWS, COLS, 2)
    return (planes[..., 0] - planes[..., 1]).astype(np.int8).reshape(-1)


def test_threat_cells_match_trying_every_piece_on_the_board():
    obs = random_game_observations(300, seed=4)
    got = ThreatFeatures()(torch.as_tensor(obs)).numpy().reshape(len(obs), 6, CELLS)
    counts = np.zeros(6)
    for x, planes in zip(obs, got):
        want = reference_planes(board_of(x))
        np.testing.assert_array_equal(planes, want)
        counts += want.sum(axis=1)
    assert len(obs) > 300 * 7
    assert (counts > 0).all(), counts  # every plane is set somewhere in these games
    # leading dimensions are kept: [T, B, 84] -> [T, B, 252]
    stacked = torch.as_tensor(obs[:12]).reshape(3, 4, 84)
    assert ThreatFeatures()(stacked).shape == (3, 4, ThreatFeatures.SIZE)


def wins_in_two(board: np.ndarray, side: int) -> bool:
    """`side` to move has two columns that complete a four, or one whose four the opponent
    can only block by giving it another right on top."""
    cols = winning_columns(board, side)
    if len(cols) >= 2:
        return True
    for col in cols:
        row = drop_row(board, col)
        if row >= 1:
            trial = board.copy()
            trial[row * COLS + col] = -side
            trial[(row - 1) * COLS + col] = side
            if wins(trial, (row - 1) * COLS + col, side):
                return True
    return False


def dropped(board: np.ndarray, side: int, col: int) -> np.ndarray:
    trial = board.copy()
    trial[drop_row(board, col) * COLS + col] = side
    return trial


def reference_facts(board: np.ndarray) -> np.ndarray:
    """The 4 x 7 column facts of `LookaheadFeatures`, by playing each column (and each reply)
    on copies of the board."""
    out = np.zeros((4, COLS), dtype=np.float32)
    for col in range(COLS):
        if drop_row(board, col) < 0:
            continue
        for k, side in ((0, 1), (1, -1)):
            after = dropped(board, side, col)
            out[k, col] = wins_in_two(after, side)
            replies = [c for c in range(COLS) if drop_row(after, c) >= 0]
            out[2 + k, col] = bool(winning_columns(after, -side)) or any(
                wins_in_two(dropped(after, -side, c), -side) for c in replies
            )
    return out


def test_lookahead_facts_match_playing_every_column_and_reply():
    obs = random_game_observations(40, seed=5)  # 944 positions
    got = LookaheadFeatures()(torch.as_tensor(obs)).numpy()
    np.testing.assert_array_equal(
        got[:, : ThreatFeatures.SIZE], ThreatFeatures()(torch.as_tensor(obs))
    )
    facts = got[:, ThreatFeatures.SIZE :].reshape(len(obs), 4, COLS)
    counts = np.zeros(4)
    for x, f in zip(obs, facts):
        want = reference_facts(board_of(x))
        np.testing.assert_array_equal(f, want)
        counts += want.sum(axis=1)
    assert (counts > 20).all(), counts  # every fact holds somewhere in these games
    stacked = torch.as_tensor(obs[:12]).reshape(3, 4, 84)
    assert LookaheadFeatures()(stacked).shape == (3, 4, LookaheadFeatures.SIZE)


def test_lookahead_facts_of_built_boards():
    """Boards drawn by hand, row 0 at the top: X the observer, O the opponent."""

    def obs_of(rows: list[str]) -> torch.Tensor:
        cells = "".join(rows)
        planes = [[float(c == "X"), float(c == "O")] for c in cells]
        return torch.tensor(planes).reshape(1, 84)

    def facts(rows: list[str]) -> np.ndarray:
        out = LookaheadFeatures()(obs_of(rows))[0, ThreatFeatures.SIZE :]
        return out.numpy().reshape(4, COLS)

    # X on b1, c1 (bottom row): a piece on d1 makes an open three, e1 and a1 both win
    board = [".......", ".......", ".......", ".......", ".......", ".XX...."]
    f = facts(board)
    assert f[0].tolist() == [0, 0, 0, 1, 0, 0, 0]  # my fork: d1 (a1 makes a three at the edge)
    assert f[1].sum() == 0 and f[2].sum() == 0
    # their piece on a1, d1 or e1 leaves me one open end; anywhere else I answer d1 with two
    assert f[3].tolist() == [0, 1, 1, 0, 0, 1, 1]


def c4_cfg(*extra: str) -> Cfg:
    return parse_cfg(["--env=connect_four", "--encoder_mlp_layers", "32", *extra])


def c4_spaces():
    env = ConnectFourBatch([0])
    return env.observation_space, env.action_space


def test_the_model_appends_the_features_of_the_raw_board_to_the_normalised_one():
    obs_space, action_space = c4_spaces()
    model = make_actor_critic(obs_space, action_space, c4_cfg())
    plain = make_actor_critic(obs_space, action_space, c4_cfg("--obs_features=False"))
    assert model.encoders["observation"][0].in_features == 84 + LookaheadFeatures.SIZE
    assert plain.encoders["observation"][0].in_features == 84 and plain.obs_features is None
    # no weights of its own: the checkpoint holds what a model without features would, but
    # a wider first layer
    assert set(model.state_dict()) == set(plain.state_dict())
    norm = model.obs_norms["observation"]
    with torch.no_grad():  # statistics far from the identity: features of normalised input
        norm.mean.fill_(0.4)  # would be wrong
        norm.var.fill_(0.2)
    x = torch.as_tensor(random_game_observations(5, seed=1)[-20:])
    manual = model.encoders["observation"](
        torch.cat([norm.normalize(x), LookaheadFeatures()(x)], dim=-1)
    )
    mask = torch.ones(len(x), COLS, dtype=torch.int8)
    torch.testing.assert_close(model.encode({"observation": x, "action_mask": mask}), manual)


def test_the_fused_worker_pass_gives_the_models_actions_with_features():
    obs_space, action_space = c4_spaces()
    cfg = c4_cfg("--encoder_mlp_layers", "32", "16")
    gen = torch.Generator().manual_seed(0)
    models = []
    for _ in range(3):
        model = make_actor_critic(obs_space, action_space, cfg)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            model.obs_norms["observation"].mean.uniform_(0.0, 0.5)
        models.append(model)
    assert FusedPopulationPolicy.supported(models[0])
    fused = FusedPopulationPolicy(models[0], 3)
    for row, model in enumerate(models):
        fused.load(row, model)
    x = torch.as_tensor(random_game_observations(4, seed=2)[:30])
    mask = torch.as_tensor(np.stack([board_of(o)[:COLS] == 0 for o in x.numpy()])).to(torch.int8)
    rows = np.arange(30) % 3
    obs = {"observation": x, "action_mask": mask}
    actions, log_probs, values = fused.act(obs, rows, deterministic=True)
    for row in range(3):
        idx = torch.as_tensor(np.flatnonzero(rows == row))
        sub = {k: v[idx] for k, v in obs.items()}
        ref_a, ref_lp, ref_v, _ = models[row].act(sub, None, deterministic=True)
        torch.testing.assert_close(actions[idx], ref_a)
        torch.testing.assert_close(log_probs[idx], ref_lp, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(values[idx], ref_v, rtol=1e-5, atol=1e-5)


class _Counted(nn.Module):
    """Features of any vector: |x| and x > 1; counts the rows it is given."""

    rows = 0

    def forward(self, x):
        _Counted.rows += x.reshape(-1, x.shape[-1]).shape[0]
        return torch.cat([x.abs(), (x > 1).to(x.dtype)], dim=-1)


@pytest.mark.parametrize("vtrace", [False, True])
def test_the_learner_computes_the_features_once_per_batch(tmp_path, monkeypatch, vtrace):
    """With 2 epochs the learner computes the features once per batch (of the samples it
    trains on; of all with V-trace, which evaluates them all first), and trains exactly as
    when each pass computes its own."""
    from tests.unit.test_learner_hot_path import ROLLOUT, fill, make_learner

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    register_env("features_learner_test", _make_cartpole, obs_features=_Counted)
    runs = []
    for once in (True, False):
        learner = make_learner(
            tmp_path, "--env=features_learner_test", "--use_rnn=False", f"--with_vtrace={vtrace}"
        )
        assert learner.model.encoders["obs"][0].in_features == 15 and learner.compact
        if not once:  # each minibatch computes them, as a model without the learner's help
            monkeypatch.setattr(learner.model, "obs_features_of", lambda *a, **k: None)
        fill(learner, torch.Generator().manual_seed(4), 2 * learner.traj_per_iteration)
        _Counted.rows = 0
        assert learner.train_if_ready() and learner.train_if_ready()
        runs.append((learner.model.state_dict(), learner.stats, _Counted.rows))
    (w1, s1, rows1), (w2, s2, rows2) = runs
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], rtol=1e-5, atol=1e-6, msg=k)
    for k in s1:
        assert s1[k] == pytest.approx(s2[k], rel=1e-4, abs=1e-6), k
    samples = 2 * learner.traj_per_iteration * ROLLOUT  # 2 batches
    if vtrace:  # every sample once, and without: also the trained ones, in each epoch
        assert rows1 == samples and rows2 > samples and (rows2 - samples) % 2 == 0
    else:
        assert 0 < rows1 < samples and rows2 == 2 * rows1


class _Learned(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Linear(4, 2)

    def forward(self, x):
        return self.w(x)


class _Flat(nn.Module):
    def forward(self, x):
        return x.sum()


class _Saved(nn.Module):  # a saved buffer would add a key to every checkpoint
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x):
        return x * self.scale


class _OtherSize(nn.Module):  # written for a board, given CartPole's 4 floats
    def forward(self, x):
        return x.reshape(-1, 42, 2).sum(-1)


class _Double(nn.Module):
    def forward(self, x):
        return x.double()


def _make_cartpole(full_env_name, cfg, env_config, render_mode=None):
    return gym.make("CartPole-v1")


@pytest.mark.parametrize(
    "module, words",
    [
        (_Learned, ["'features_test'", "without parameters"]),
        (_Saved, ["'features_test'", "saved buffers", "persistent=False"]),
        (_Flat, ["[N, E]", "[N, 4]"]),
        (_OtherSize, ["'features_test'", "fails on the observation", "size 4", "RuntimeError"]),
        (_Double, ["torch.float64", "expected float32"]),
    ],
)
def test_a_features_module_that_learns_or_has_the_wrong_shape_is_refused(
    module, words, monkeypatch
):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # undone after
    register_env("features_test", _make_cartpole, obs_features=module)
    cfg = parse_cfg(["--env=features_test", "--encoder_mlp_layers", "8"])
    env = gym.make("CartPole-v1")
    with pytest.raises(ValueError) as e:
        make_actor_critic(env.observation_space, env.action_space, cfg)
    for word in words:
        assert word in str(e.value), str(e.value)
    with pytest.raises(TypeError, match="obs_features must be callable"):
        register_env("features_test", _make_cartpole, obs_features=3)


def test_the_features_reach_child_processes_with_the_registry(monkeypatch):
    snapshot = registry_snapshot(["connect_four"])
    sets = {"threats": ThreatFeatures, "lookahead": LookaheadFeatures}
    assert snapshot["connect_four"].obs_features == sets
    # what a spawned child gets: the factories pickle, and restoring puts them back
    restored = pickle.loads(pickle.dumps(snapshot))
    entry = registry._REGISTRY["connect_four"]
    same = dataclasses.replace(entry, obs_features=dict(sets), extra_flags=[])
    restore_registry({"connect_four": same})  # the same factories: the entry (and flags) stay
    assert registry._REGISTRY["connect_four"] is entry
    monkeypatch.setattr(registry, "_REGISTRY", {})
    restore_registry(restored)
    assert registry.env_obs_features("connect_four") is LookaheadFeatures
    assert registry.env_obs_features("connect_four", "threats") is ThreatFeatures
    # a factory that cannot travel is named before any child starts, in a dict of sets too
    for features in (lambda: _Flat(), {"a": ThreatFeatures, "b": lambda: _Flat()}):
        monkeypatch.setattr(registry, "_REGISTRY", {})
        register_env("features_test", _make_cartpole, obs_features=features)
        with pytest.raises(ConfigError, match="its obs_features .*lambda.* cannot be sent"):
            check_picklable_registry(registry_snapshot(), "features_test", "spawn")
    with pytest.raises(TypeError, match="obs_features must be callable, or a dict"):
        register_env("features_test", _make_cartpole, obs_features={"a": 3})


def test_a_run_saved_before_the_flag_existed_loads_and_resumes_without_features(tmp_path):
    saved = c4_cfg("--obs_features=False").to_dict()
    del saved["obs_features"], saved["obs_features_set"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert experiment_cfg(str(tmp_path)).obs_features is False
    assert resume_mismatches(c4_cfg(), saved) == ["--obs_features=True (the run has False)"]
    assert resume_mismatches(c4_cfg("--obs_features=False"), saved) == []
    # an env without features: the flags change no model, so an old run resumes as it is
    cartpole = parse_cfg(["--env=CartPole-v1"]).to_dict()
    assert cartpole["obs_features_set"] == ""
    del cartpole["obs_features"], cartpole["obs_features_set"]
    assert resume_mismatches(parse_cfg(["--env=CartPole-v1"]), cartpole) == []


def test_a_run_saved_with_the_threats_alone_keeps_them(tmp_path):
    """connect_four's features were the threat planes before the lookahead facts came: a run
    saved then has `obs_features` but no set name, and must rebuild the model it trained."""
    obs_space, action_space = c4_spaces()
    assert c4_cfg().obs_features_set == "lookahead"  # new runs: the newest set, by name
    old = make_actor_critic(obs_space, action_space, c4_cfg("--obs_features_set=threats"))
    saved = c4_cfg().to_dict()
    del saved["obs_features_set"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    cfg = experiment_cfg(str(tmp_path))
    assert cfg.obs_features_set == "threats"
    assert load_cfg(str(tmp_path / "config.json")).obs_features_set == "threats"
    model = make_actor_critic(obs_space, action_space, cfg)
    assert model.encoders["observation"][0].in_features == 84 + ThreatFeatures.SIZE
    model.load_state_dict(old.state_dict())
    assert resume_mismatches(c4_cfg(), saved) == [
        "--obs_features_set=lookahead (the run has threats)"
    ]
    assert resume_mismatches(c4_cfg("--obs_features_set=threats"), saved) == []
    assert resume_mismatches(c4_cfg("--obs_features=False"), {**saved, "obs_features": False}) == []
    with pytest.raises(ConfigError, match="--obs_features_set=nope: env 'connect_four' has the "
                       "feature sets threats, lookahead"):  # fmt: skip
        c4_cfg("--obs_features_set=nope")
    with pytest.raises(ConfigError, match="--obs_features_set.*letters, digits"):
        c4_cfg("--obs_features_set=a b")
    with pytest.raises(ConfigError, match="--obs_features_set=x: env 'CartPole-v1' has no obs"):
        parse_cfg(["--env=CartPole-v1", "--obs_features_set=x"])
