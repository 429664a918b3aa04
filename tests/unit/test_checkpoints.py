"""Checkpoint files: atomic, checksummed writes; rotation; the newest usable file wins when the
newest is truncated, damaged or crafted; a full disk leaves the old checkpoints as they were."""

from __future__ import annotations

import errno
import io
import logging
import os
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rl_pbt import parse_cfg
from rl_pbt.learning import checkpoints as ck
from rl_pbt.learning.checkpoints import (
    HEADER_SIZE,
    MAGIC,
    CheckpointError,
    CheckpointWriteError,
    checkpoint_files,
    latest_checkpoint,
    load_latest_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from rl_pbt.logging.files import checkpoint_dir
from rl_pbt.models.actor_critic import make_actor_critic
from rl_pbt.models.loading import load_policy, load_policy_file

LOGGER = "rl_pbt.learning.checkpoints"


def realistic_state(seed: int = 0, version: int = 7) -> dict:
    """What a learner saves: a model's and an Adam optimizer's state, plus plain values."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(5, 4)).pow(2).sum().backward()
        opt.step()
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "version": version,
        "env_steps": 1234,
        "hparams": {"learning_rate": 3e-4, "gamma": 0.99},
        "policy_id": 0,
        "note": "seed run",
        "nested": {"a": [1, 2.5, "x", None, True], "b": {"c": (3, 4)}},
    }


def assert_same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert type(a) is type(b) and a == b


def two_checkpoints(folder: str) -> tuple[str, str]:
    older = write_checkpoint(folder, 1, 100, realistic_state(1, version=1), keep=5)
    newer = write_checkpoint(folder, 2, 200, realistic_state(2, version=2), keep=5)
    return older, newer


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


# --- round trip --------------------------------------------------------------------------------
def test_round_trip_of_a_learner_like_state(tmp_path):
    state = realistic_state()
    path = write_checkpoint(str(tmp_path), 7, 1234, state, keep=2)
    assert os.path.basename(path) == "checkpoint_000000000007_000000000001234.pth"
    with open(path, "rb") as f:
        assert f.read(len(MAGIC)) == MAGIC
    back = read_checkpoint(path, map_location="cpu")
    assert_same(state, back)
    # the optimizer state goes back into a fresh optimizer
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    model.load_state_dict(back["model"])
    opt = torch.optim.Adam(model.parameters())
    opt.load_state_dict(back["optimizer"])
    assert opt.param_groups[0]["lr"] == 3e-4
    found = load_latest_checkpoint(str(tmp_path))
    assert found is not None and found[0] == path
    assert os.listdir(tmp_path) == [os.path.basename(path)]  # no temp file left behind


def test_a_folder_without_checkpoints_gives_none_quietly(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert load_latest_checkpoint(str(tmp_path / "missing")) is None
        assert load_latest_checkpoint(str(tmp_path)) is None
    assert warnings_of(caplog) == []


def test_legacy_header_less_checkpoint_loads(tmp_path):
    state = realistic_state()
    legacy = tmp_path / "checkpoint_3_98.pth"  # old unpadded name, plain torch.save
    torch.save(state, str(legacy))
    assert_same(state, read_checkpoint(str(legacy)))
    found = load_latest_checkpoint(str(tmp_path))
    assert found is not None and found[0] == str(legacy)
    assert_same(state, found[1])


# --- bad newest files --------------------------------------------------------------------------
def test_truncated_newest_falls_back_with_one_warning(tmp_path, caplog):
    older, newer = two_checkpoints(str(tmp_path))
    size = os.path.getsize(newer)
    with open(newer, "r+b") as f:
        f.truncate(size // 2)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        found = load_latest_checkpoint(str(tmp_path))
    assert found is not None and found[0] == older and found[1]["version"] == 1
    (msg,) = warnings_of(caplog)
    assert newer in msg and "is truncated" in msg.replace(newer, "") and "\n" not in msg


def test_a_resume_sets_a_damaged_newest_aside_so_rotation_keeps_the_good_ones(tmp_path):
    """Left in place, the damaged file would sort newest for good: every resume would try it
    first, and it would hold one of the kept slots while the good checkpoints written after
    the resume (at lower versions) were deleted."""
    folder = str(tmp_path)
    older, newer = two_checkpoints(folder)
    with open(newer, "r+b") as f:
        f.truncate(os.path.getsize(newer) // 2)
    found = load_latest_checkpoint(folder)  # reading alone (enjoy, match) changes nothing
    assert found[0] == older and os.path.exists(newer)
    found = load_latest_checkpoint(folder, set_aside=True)
    assert found[0] == older and found[1]["version"] == 1
    assert not os.path.exists(newer) and os.path.exists(newer + ck.DAMAGED_SUFFIX)
    assert checkpoint_files(folder) == [older]
    for v in (2, 3, 4):  # the resumed learner goes on from version 1
        write_checkpoint(folder, v, 100 * v, {"version": v}, keep=2)
    assert [os.path.basename(f)[:23] for f in checkpoint_files(folder)] == [
        "checkpoint_000000000003",
        "checkpoint_000000000004",
    ]
    assert load_latest_checkpoint(folder)[1]["version"] == 4


def test_nothing_is_set_aside_when_no_checkpoint_loads(tmp_path):
    folder = str(tmp_path)
    files = two_checkpoints(folder)
    for path in files:
        with open(path, "r+b") as f:
            f.truncate(10)
    assert load_latest_checkpoint(folder, set_aside=True) is None
    assert checkpoint_files(folder) == list(files)


def test_truncated_inside_the_header_is_reported(tmp_path):
    _, newer = two_checkpoints(str(tmp_path))
    with open(newer, "r+b") as f:
        f.truncate(HEADER_SIZE - 5)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(newer)
    assert "truncated or damaged header" in info.value.reason


def test_bit_flip_fails_the_checksum_and_falls_back(tmp_path, caplog):
    older, newer = two_checkpoints(str(tmp_path))
    data = bytearray(open(newer, "rb").read())
    data[HEADER_SIZE + (len(data) - HEADER_SIZE) // 2] ^= 0x10
    with open(newer, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(newer)
    assert "checksum" in info.value.reason
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        found = load_latest_checkpoint(str(tmp_path))
    assert found is not None and found[0] == older
    (msg,) = warnings_of(caplog)
    assert newer in msg and "checksum" in msg.replace(newer, "")


def test_all_bad_gives_none_and_says_so(tmp_path, caplog):
    older, newer = two_checkpoints(str(tmp_path))
    for path in (older, newer):
        with open(path, "r+b") as f:
            f.truncate(100)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert load_latest_checkpoint(str(tmp_path)) is None
    msgs = warnings_of(caplog)
    assert len(msgs) == 3 and newer in msgs[0] and older in msgs[1]
    assert "no usable checkpoint" in msgs[2] and str(tmp_path) in msgs[2]


def test_unknown_format_version_and_non_dict_are_refused(tmp_path):
    _, newer = two_checkpoints(str(tmp_path))
    data = bytearray(open(newer, "rb").read())
    data[len(MAGIC)] = 9  # the format version's low byte
    with open(newer, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(CheckpointError, match="format version 9"):
        read_checkpoint(newer)
    bare = tmp_path / "checkpoint_5_5.pth"
    torch.save(torch.zeros(3), str(bare))
    with pytest.raises(CheckpointError, match="not a checkpoint dict"):
        read_checkpoint(str(bare))
    with pytest.raises(CheckpointError, match="cannot be read"):
        read_checkpoint(str(tmp_path / "checkpoint_9_9.pth"))


def test_a_file_of_something_else_is_named_so_and_old_torch_saves_still_load(tmp_path):
    other = tmp_path / "checkpoint_7_7.pth"
    other.write_bytes(b"garbage\n")  # e.g. a file copied over by mistake
    with pytest.raises(
        CheckpointError, match=r"is not a checkpoint file \(it starts with b'garbage"
    ):
        read_checkpoint(str(other))
    for zipped in (True, False):  # files of torch.save without the header, both formats
        bare = tmp_path / f"checkpoint_8_{int(zipped)}.pth"
        torch.save({"a": torch.ones(2)}, str(bare), _use_new_zipfile_serialization=zipped)
        assert torch.equal(read_checkpoint(str(bare))["a"], torch.ones(2))


class CreatesAFile:
    """Unpickled without restriction, this creates the file at `path`."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def crafted_bytes(marker: str, kind: str) -> bytes:
    evil = {"model": CreatesAFile(marker), "version": 99}
    if kind == "pickle":
        return pickle.dumps(evil)
    if kind == "torch_zip":
        buf = io.BytesIO()
        torch.save(evil, buf)
        return buf.getvalue()
    return ck.encode_checkpoint(evil)  # a valid header and checksum: still refused


@pytest.mark.parametrize("kind", ["pickle", "torch_zip", "with_header"])
def test_crafted_pickle_is_refused_not_run(tmp_path, caplog, kind):
    folder = tmp_path / "ckpt"
    older, newer = two_checkpoints(str(folder))
    # the payload is live: unpickled without restriction it does create its file
    control = tmp_path / "control"
    if kind == "pickle":
        pickle.loads(crafted_bytes(str(control), kind))
        assert control.exists()
    marker = tmp_path / "marker"
    crafted = folder / "checkpoint_000000000009_000000000000999.pth"
    crafted.write_bytes(crafted_bytes(str(marker), kind))
    assert latest_checkpoint(str(folder)) == str(crafted)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        found = load_latest_checkpoint(str(folder))
    assert not marker.exists()
    assert found is not None and found[0] == newer and found[1]["version"] == 2
    (msg,) = warnings_of(caplog)
    assert str(crafted) in msg and "\n" not in msg
    with pytest.raises(CheckpointError):
        read_checkpoint(str(crafted))
    assert not marker.exists()


# --- write failures ----------------------------------------------------------------------------
@pytest.mark.parametrize("partial", [False, True])
def test_disk_full_leaves_old_checkpoints_untouched(tmp_path, monkeypatch, partial):
    folder = str(tmp_path / "ckpt")
    older, newer = two_checkpoints(folder)
    before = {p: open(p, "rb").read() for p in (older, newer)}

    def full_disk(path: str, data: bytes) -> None:
        if partial:  # some bytes made it before the disk filled up
            with open(path, "wb") as f:
                f.write(data[: len(data) // 3])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ck, "_write_file", full_disk)
    with pytest.raises(CheckpointWriteError) as info:
        write_checkpoint(folder, 3, 300, realistic_state(3, version=3), keep=1)
    err = info.value
    assert isinstance(err, OSError) and err.errno == errno.ENOSPC
    assert folder in str(err) and os.strerror(errno.ENOSPC) in str(err) and "\n" not in str(err)
    assert sorted(os.listdir(folder)) == sorted(os.path.basename(p) for p in before)
    assert {p: open(p, "rb").read() for p in before} == before
    monkeypatch.undo()
    found = load_latest_checkpoint(folder)
    assert found is not None and found[0] == newer and found[1]["version"] == 2


def test_stale_temp_files_are_cleared_on_the_next_write(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    stale = folder / ".tmp_checkpoint_crashed"
    stale.write_bytes(b"x" * 100)
    path = write_checkpoint(str(folder), 1, 1, {"version": 1}, keep=2)
    assert os.listdir(folder) == [os.path.basename(path)]


# --- rotation ----------------------------------------------------------------------------------
def test_rotation_keeps_the_newest_in_version_order_with_mixed_names(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for name in ("checkpoint_3_98.pth", "checkpoint_10_5.pth", "checkpoint_2_999.pth"):
        torch.save({"version": 0}, str(folder / name))
    padded = write_checkpoint(str(folder), 4, 50, {"version": 4}, keep=5)
    order = [os.path.basename(p) for p in checkpoint_files(str(folder))]
    assert order == [
        "checkpoint_2_999.pth",
        "checkpoint_3_98.pth",
        os.path.basename(padded),
        "checkpoint_10_5.pth",
    ]
    newest = write_checkpoint(str(folder), 11, 60, {"version": 11}, keep=2)
    assert checkpoint_files(str(folder)) == [str(folder / "checkpoint_10_5.pth"), newest]
    # same version, more env steps: newer
    later = write_checkpoint(str(folder), 11, 70, {"version": 11}, keep=2)
    assert checkpoint_files(str(folder)) == [newest, later]


def test_rotation_never_deletes_the_file_just_written(tmp_path):
    folder = str(tmp_path)
    ahead = write_checkpoint(folder, 50, 5000, {"version": 50}, keep=1)
    behind = write_checkpoint(folder, 3, 300, {"version": 3}, keep=1)
    assert checkpoint_files(folder) == [behind, ahead]


def test_no_deletion_through_a_linked_folder(tmp_path, caplog):
    target = tmp_path / "elsewhere"
    exp = tmp_path / "exp"
    exp.mkdir()
    link = exp / "checkpoint_p0"
    os.symlink(target, link, target_is_directory=True)
    target.mkdir()
    precious = target / "checkpoint_000000000000_000000000000001.pth"
    torch.save({"version": 0}, str(precious))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for v in (1, 2):
            write_checkpoint(str(link), v, v, {"version": v}, keep=1, root=str(exp))
    assert precious.exists() and len(checkpoint_files(str(target))) == 3
    assert len([m for m in warnings_of(caplog) if "link" in m]) == 1  # said once


def test_no_deletion_outside_the_experiment(tmp_path):
    outside = tmp_path / "outside"
    paths = [write_checkpoint(str(outside), v, v, {"version": v}, keep=1) for v in (1, 2)]
    assert checkpoint_files(str(outside)) == [paths[1]]  # no root: a real folder is rotated
    kept = [
        write_checkpoint(str(outside), v, v, {"version": v}, keep=1, root=str(tmp_path / "exp"))
        for v in (3, 4)
    ]
    assert checkpoint_files(str(outside)) == [paths[1], *kept]


# --- the evaluation loader ---------------------------------------------------------------------
OBS = gym.spaces.Box(-1, 1, (5,), np.float32)
ACTIONS = gym.spaces.Discrete(3)


def test_load_policy_falls_back_past_a_damaged_newest(tmp_path, caplog):
    cfg = parse_cfg(["--env=CartPole-v1", "--encoder_mlp_layers", "16", f"--train_dir={tmp_path}"])
    exp_dir = str(tmp_path / "exp")
    folder = checkpoint_dir(exp_dir, 0)
    states = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        model = make_actor_critic(OBS, ACTIONS, cfg)
        states.append({k: v.clone() for k, v in model.state_dict().items()})
    older = write_checkpoint(folder, 1, 10, {"model": states[0], "version": 1}, keep=2)
    newer = write_checkpoint(folder, 2, 20, {"model": states[1], "version": 2}, keep=2)
    assert_same(states[1], dict(load_policy(exp_dir, 0, OBS, ACTIONS, cfg).state_dict()))
    with open(newer, "r+b") as f:
        f.truncate(os.path.getsize(newer) - 10)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        model = load_policy(exp_dir, 0, OBS, ACTIONS, cfg)
    assert not model.training
    assert_same(states[0], dict(model.state_dict()))
    assert any(newer in m for m in warnings_of(caplog))
    assert_same(states[0], dict(load_policy_file(older, OBS, ACTIONS, cfg).state_dict()))
    with pytest.raises(CheckpointError):
        load_policy_file(newer, OBS, ACTIONS, cfg)
    with open(older, "r+b") as f:
        f.truncate(50)
    with pytest.raises(ValueError, match="none of the 2 checkpoints of policy 0 is usable"):
        load_policy(exp_dir, 0, OBS, ACTIONS, cfg)
    with pytest.raises(FileNotFoundError):
        load_policy(exp_dir, 1, OBS, ACTIONS, cfg)
