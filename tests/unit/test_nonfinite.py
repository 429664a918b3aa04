"""NaN and infinity never train on: an iteration that goes non-finite is undone bit for bit
(weights, normalisers, Adam's moments and step, version), nothing is published, the learner
gives up after a few in a row, checkpoints never hold NaN/inf, and the config rejects
non-finite flags and search spaces that allow values the flags forbid."""

from __future__ import annotations

import glob
import json
import math
import os

import pytest
import torch

from rl_pbt import ConfigError, parse_cfg
from rl_pbt.learning.checkpoints import checkpoint_files, latest_checkpoint, read_checkpoint
from rl_pbt.learning.learner import MAX_BAD_UPDATES, Learner, NonFiniteTraining
from rl_pbt.learning.learner_process import LearnerHost
from rl_pbt.runtime.messages import LocalQueue, Stop
from tests.unit.test_learner_hot_path import counting_syncs, fill, make_learner


def snapshot(learner: Learner) -> dict:
    """Everything an iteration may change, cloned."""
    adam = {
        i: {k: v.clone() for k, v in learner.optimizer.state[p].items()}
        for i, p in enumerate(learner.model.parameters())
        if learner.optimizer.state.get(p)
    }
    return {
        "model": {k: v.clone() for k, v in learner.model.state_dict().items()},
        "adam": adam,
        "version": learner.version,
        "published": learner.params.current_version(learner.policy_id),
        "row": learner.params.flat[learner.policy_id].clone(),
    }


def assert_unchanged(learner: Learner, before: dict) -> None:
    after = snapshot(learner)
    assert after["version"] == before["version"]
    assert after["published"] == before["published"]
    assert torch.equal(after["row"], before["row"])  # nothing was published
    assert after["model"].keys() == before["model"].keys()
    for k, v in before["model"].items():
        assert torch.equal(after["model"][k], v), k  # bit-equal, normalisers included
    assert after["adam"].keys() == before["adam"].keys()
    for i, state in before["adam"].items():
        assert after["adam"][i].keys() == state.keys()
        for k, v in state.items():
            assert torch.equal(after["adam"][i][k], v), (i, k)


def fill_nan_rewards(learner: Learner, gen: torch.Generator) -> list[int]:
    """One iteration's trajectories whose rewards are all NaN (some samples are trainable)."""
    slots = fill(learner, gen, learner.traj_per_iteration)
    learner.buffers.rewards[torch.tensor(slots)] = float("nan")
    return slots


def all_state_finite(learner: Learner) -> bool:
    tensors = list(learner.model.state_dict().values())
    for st in learner.optimizer.state.values():
        tensors += [st["exp_avg"], st["exp_avg_sq"]]
    return all(bool(torch.isfinite(t).all()) for t in tensors)


# --- the learner -------------------------------------------------------------------------------
@pytest.mark.parametrize("rnn", [False, True])
def test_nan_reward_iteration_is_undone_exactly(tmp_path, rnn):
    learner = make_learner(tmp_path, f"--use_rnn={rnn}", "--recurrence=4")
    gen = torch.Generator().manual_seed(0)
    fill(learner, gen, learner.traj_per_iteration)
    assert learner.train_if_ready()  # a good one first: Adam has its moments and step
    assert learner.stats["bad_updates"] == 0
    good_stats = dict(learner.stats)
    before = snapshot(learner)
    steps = learner.env_steps
    fill_nan_rewards(learner, gen)
    assert learner.train_if_ready()
    assert_unchanged(learner, before)
    assert learner.bad_updates == 1 and learner.stats["bad_updates"] == 1
    # the statistics of the undone iteration are not reported; its samples still count
    assert {k: v for k, v in learner.stats.items() if k != "bad_updates"} == {
        k: v for k, v in good_stats.items() if k != "bad_updates"
    }
    assert learner.env_steps > steps
    # the next good iteration trains and publishes as usual
    fill(learner, gen, learner.traj_per_iteration)
    assert learner.train_if_ready()
    assert learner.version == before["version"] + 4
    assert learner.params.current_version(0) == learner.version
    assert learner.stats["bad_updates"] == 1 and all_state_finite(learner)


def test_nan_reward_on_the_first_iteration_leaves_no_adam_state(tmp_path):
    learner = make_learner(tmp_path)
    before = snapshot(learner)
    assert before["adam"] == {}
    fill_nan_rewards(learner, torch.Generator().manual_seed(0))
    assert learner.train_if_ready()
    assert_unchanged(learner, before)
    assert not any(learner.optimizer.state.get(p) for p in learner.model.parameters())


def test_nan_rewards_of_a_trajectory_never_trained_on_are_ignored(tmp_path):
    """A slot whose samples are all invalid keeps the buffers' NaN sentinels: nothing of it is
    trained on, so the iteration is a good one."""
    learner = make_learner(tmp_path)
    slots = fill(learner, torch.Generator().manual_seed(0), learner.traj_per_iteration)
    b = learner.buffers
    b.valid[slots[0]] = False
    b.rewards[slots[0]] = float("nan")
    b.values[slots[0]] = float("nan")
    assert learner.train_if_ready()
    assert learner.bad_updates == 0 and learner.version == 4
    assert all(math.isfinite(v) for v in learner.stats.values())


def test_gives_up_after_the_limit_of_bad_iterations_in_a_row(tmp_path):
    learner = make_learner(tmp_path)
    gen = torch.Generator().manual_seed(0)
    fill(learner, gen, learner.traj_per_iteration)
    assert learner.train_if_ready()
    before = snapshot(learner)
    for _ in range(MAX_BAD_UPDATES - 1):  # a good iteration ends the streak
        fill_nan_rewards(learner, gen)
        assert learner.train_if_ready()
    fill(learner, gen, learner.traj_per_iteration)
    assert learner.train_if_ready()
    assert learner.bad_updates == MAX_BAD_UPDATES - 1
    before = snapshot(learner)
    for _ in range(MAX_BAD_UPDATES - 1):
        fill_nan_rewards(learner, gen)
        assert learner.train_if_ready()
    fill_nan_rewards(learner, gen)
    with pytest.raises(NonFiniteTraining) as err:
        learner.train_if_ready()
    assert isinstance(err.value, RuntimeError)
    message = str(err.value)
    assert "policy 0" in message and "rewards from the env" in message
    assert "--learning_rate=0.0001" in message and "--gamma=0.99" in message
    assert_unchanged(learner, before)  # the last finite state, ready to be saved
    assert learner.bad_updates == 2 * MAX_BAD_UPDATES - 1


def test_infinite_learning_rate_is_undone_and_stops(tmp_path):
    learner = make_learner(tmp_path, "--use_rnn")
    gen = torch.Generator().manual_seed(0)
    fill(learner, gen, learner.traj_per_iteration)
    assert learner.train_if_ready()
    learner.set_hparams({"learning_rate": math.inf})  # as a PBT update could set it
    before = snapshot(learner)
    for _ in range(MAX_BAD_UPDATES - 1):
        fill(learner, gen, learner.traj_per_iteration)
        assert learner.train_if_ready()
        assert_unchanged(learner, before)
    assert learner.bad_updates == MAX_BAD_UPDATES - 1
    fill(learner, gen, learner.traj_per_iteration)
    with pytest.raises(NonFiniteTraining) as err:
        learner.train_if_ready()
    assert_unchanged(learner, before)
    message = str(err.value)
    assert "policy 0" in message and "--learning_rate=inf" in message
    assert "weights or Adam moments" in message and "rewards from the env" not in message


def test_one_learning_rate_step_that_blows_up_the_weights_is_caught(tmp_path):
    """One minibatch per iteration: the loss and gradient were finite, only the weights after
    the step are not."""
    learner = make_learner(tmp_path, "--num_batches_per_epoch=1", "--num_epochs=1")
    gen = torch.Generator().manual_seed(0)
    fill(learner, gen, learner.traj_per_iteration)
    assert learner.train_if_ready()
    learner.set_hparams({"learning_rate": math.inf})
    before = snapshot(learner)
    fill(learner, gen, learner.traj_per_iteration)
    assert learner.train_if_ready()
    assert_unchanged(learner, before)
    assert learner.bad_what == ["weights or Adam moments after the update"]


def test_train_on_undoes_too(tmp_path):
    learner = make_learner(tmp_path)
    gen = torch.Generator().manual_seed(0)
    learner.train_on(learner.buffers.gather(fill(learner, gen, 4), learner.device))
    before = snapshot(learner)
    slots = fill_nan_rewards(learner, gen)
    learner.train_on(learner.buffers.gather(slots, learner.device))
    assert_unchanged(learner, before)
    assert learner.bad_updates == 1


@pytest.mark.parametrize("prefetch", [False, True])
def test_a_bad_iteration_still_reads_back_once(tmp_path, monkeypatch, prefetch):
    learner = make_learner(tmp_path)
    learner.prefetch = prefetch
    gen = torch.Generator().manual_seed(0)
    fill(learner, gen, learner.traj_per_iteration)
    fill_nan_rewards(learner, gen)
    fill(learner, gen, learner.traj_per_iteration)
    for _ in range(3):
        with counting_syncs(monkeypatch) as seen:
            assert learner.train_if_ready()
        assert len(seen) <= 1, seen
    assert learner.bad_updates == 1


# --- checkpoints -------------------------------------------------------------------------------
def checkpoint_bytes(learner: Learner) -> dict[str, bytes]:
    files = sorted(glob.glob(os.path.join(learner.checkpoint_folder(), "checkpoint_*.pth")))
    return {f: open(f, "rb").read() for f in files}


@pytest.mark.parametrize("where", ["weight", "normaliser", "adam"])
def test_save_refuses_a_non_finite_state(tmp_path, where):
    learner = make_learner(tmp_path, "--keep_checkpoints=1")
    gen = torch.Generator().manual_seed(0)
    fill(learner, gen, learner.traj_per_iteration)
    assert learner.train_if_ready()
    path = learner.save()
    assert path is not None and os.path.isfile(path)
    fill(learner, gen, learner.traj_per_iteration)
    assert learner.train_if_ready()  # a newer version: a save would rotate `path` out
    kept = checkpoint_bytes(learner)
    assert list(kept) == [path]
    with torch.no_grad():
        if where == "weight":
            next(learner.model.parameters()).view(-1)[3] = float("nan")
        elif where == "normaliser":
            learner.model.ret_norm.var.fill_(math.inf)
        else:
            p = next(learner.model.parameters())
            learner.optimizer.state[p]["exp_avg_sq"].view(-1)[0] = math.inf
    assert learner.save() is None
    assert checkpoint_bytes(learner) == kept
    assert learner.maybe_save() is None  # and not tried again at once


def test_stop_after_giving_up_leaves_a_finite_newest_checkpoint(tmp_path):
    learner = make_learner(tmp_path, "--keep_checkpoints=2")
    gen = torch.Generator().manual_seed(0)
    fill(learner, gen, learner.traj_per_iteration)
    assert learner.train_if_ready()
    first = learner.save()
    with pytest.raises(NonFiniteTraining):
        for _ in range(MAX_BAD_UPDATES):
            fill_nan_rewards(learner, gen)
            learner.train_if_ready()
    host = LearnerHost({0: learner}, LocalQueue(), [LocalQueue()], LocalQueue())
    host.handle(Stop(save=True))
    files = sorted(checkpoint_bytes(learner))
    assert len(files) == 2 and files[0] == first  # the stop saved a second checkpoint
    state = read_checkpoint(files[-1])
    assert state["version"] == learner.version
    # the bad iterations were undone but their env steps count: only the new one has them
    assert state["env_steps"] == learner.env_steps > read_checkpoint(first)["env_steps"]
    assert all(bool(torch.isfinite(v).all()) for v in state["model"].values())
    for st in state["optimizer"]["state"].values():
        assert bool(torch.isfinite(st["exp_avg"]).all() and torch.isfinite(st["exp_avg_sq"]).all())


def test_checkpoints_order_by_version_then_env_steps(tmp_path):
    """An undone iteration counts its env steps but keeps the version: the newer checkpoint
    of one version must still be the latest, and the older the one rotated out."""
    learner = make_learner(tmp_path, "--keep_checkpoints=2")
    folder = learner.checkpoint_folder()
    os.makedirs(folder)
    old_style = os.path.join(folder, "checkpoint_000000000003_98.pth")  # unpadded names
    open(old_style, "wb").close()
    learner.version, learner.env_steps = 3, 99
    first = learner.save()
    learner.env_steps = 100
    second = learner.save()
    assert latest_checkpoint(folder) == second
    assert checkpoint_files(folder) == [first, second] and not os.path.exists(old_style)
    assert sorted(checkpoint_files(folder)) == checkpoint_files(folder)  # names sort alike


# --- the config --------------------------------------------------------------------------------
BASE = ["--env=CartPole-v1"]
PBT = BASE + ["--with_pbt", "--num_policies=2", "--pbt_init_random"]


@pytest.mark.parametrize(
    "arg, shown",
    [
        ("--learning_rate=inf", "--learning_rate=inf: must be finite"),
        ("--gamma=nan", "--gamma=nan: must be finite"),
        ("--max_grad_norm=-inf", "--max_grad_norm=-inf: must be finite"),
        ("--adam_eps=Infinity", "--adam_eps=inf: must be finite"),
        ("--status_interval=inf", "--status_interval=inf: must be finite"),
    ],
)
def test_non_finite_float_flags_are_rejected(arg, shown):
    with pytest.raises(ConfigError) as err:
        parse_cfg(BASE + [arg])
    assert str(err.value) == shown


def test_non_finite_float_in_a_preset_is_rejected(tmp_path):
    preset = tmp_path / "p.json"
    preset.write_text('{"env": "CartPole-v1", "value_loss_coeff": Infinity}')
    with pytest.raises(ConfigError) as err:
        parse_cfg([f"--preset={preset}"])
    assert str(err.value) == f"--value_loss_coeff=inf (in preset {preset}): must be finite"


def space_file(tmp_path, entries: dict) -> str:
    path = tmp_path / "space.json"
    path.write_text(json.dumps(entries))
    return str(path)


def test_search_space_allowing_a_negative_learning_rate_is_rejected(tmp_path):
    path = space_file(tmp_path, {"learning_rate": {"type": "float", "low": -0.1, "high": 0.01}})
    with pytest.raises(ConfigError) as err:
        parse_cfg(PBT + [f"--pbt_search_space={path}"])
    assert str(err.value) == (
        f"--pbt_search_space={path!r}: entry 'learning_rate' allows -0.1, but --learning_rate "
        "must be > 0"
    )


@pytest.mark.parametrize(
    "entry, shown",
    [
        ({"learning_rate": {"type": "float", "low": 0.0}}, "'learning_rate' allows 0.0, but"),
        ({"learning_rate": {"type": "categorical", "values": [1e-4, -1e-3]}}, "allows -0.001"),
        ({"learning_rate": {"type": "categorical", "values": ["fast"]}}, "is a number"),
        ({"gamma": {"low": 0.9, "high": 1.2, "discount_like": False}}, "must be in [0, 1]"),
        ({"gamma": {"low": 0.9, "discount_like": False}}, "'gamma' has no upper bound, but"),
        ({"ppo_clip_ratio": {"low": -1.0, "high": 0.3}}, "--ppo_clip_ratio must be in (0, 1)"),
        ({"exploration_loss_coeff": {"low": -0.01, "high": 0.1}}, "must be >= 0"),
        ({"max_grad_norm": {"type": "int", "low": -2, "high": 8}}, "allows -2, but"),
        ({"value_loss_coeff": {"low": 0.1, "high": 1e400}}, "allows inf, but"),
        ({"learning_rate": {"low": float("nan"), "high": 0.1}}, "low is NaN"),
        # reward-shaping weights: PBT wrote "b" or false into an env's shaping, or inf
        ({"rew.goal": {"type": "categorical", "values": ["a", "b"]}}, "'a', but a reward-"),
        ({"rew.goal": {"type": "categorical", "values": [True, False]}}, "allows True, but"),
        ({"rew.goal": {"low": 0.0, "high": 1e400}}, "allows inf, but a reward-shaping weight"),
    ],
)
def test_search_space_bounds_are_checked_against_the_flags(tmp_path, entry, shown):
    path = space_file(tmp_path, entry)
    with pytest.raises(ConfigError) as err:
        parse_cfg(PBT + [f"--pbt_search_space={path}"])
    assert shown in str(err.value)


@pytest.mark.parametrize(
    "entry",
    [
        {"learning_rate": {"type": "log_float", "low": 1e-5, "high": 1e-2}},
        {"learning_rate": {"type": "log_float"}},  # open: multiplicative moves keep it > 0
        {"learning_rate": {"type": "categorical", "values": [1e-4, 3e-4]}},
        {"gamma": {"low": 0.0}},  # discount-like: inside (0, 1) whatever its bounds
        {"exploration_loss_coeff": {"low": 0.0, "high": 0.1}, "max_grad_norm": {"low": 0}},
        {"learning_rate": {"tune": False}, "rew.x": {"low": -5.0, "high": 5.0}},
    ],
)
def test_search_spaces_within_the_flags_pass(tmp_path, entry):
    path = space_file(tmp_path, entry)
    assert parse_cfg(PBT + [f"--pbt_search_space={path}"]).pbt_search_space == path


def test_shipped_search_space_example_passes():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    example = os.path.join(root, "configs", "pbt_search_space_example.json")
    cfg = parse_cfg(PBT + [f"--pbt_search_space={example}"])
    assert cfg.pbt_search_space == example
