"""--seed makes a serial run repeat exactly: the same episodes, weights and optimiser state after
the same updates; without --seed a run takes a fresh seed (logged) and is another run."""

import glob
import json
import os
import re

import torch

from rl_pbt import parse_cfg, train
from rl_pbt.learning.checkpoints import read_checkpoint
from tests.small_run import SERIAL_CARTPOLE
from tests.small_run import state_vector as flat


def serial_run(tmp_path, name, seed=None):
    cfg = parse_cfg(
        [
            *SERIAL_CARTPOLE,
            "--train_for_env_steps=3000",
            *([f"--seed={seed}"] if seed is not None else []),
            f"--train_dir={tmp_path}",
            f"--experiment={name}",
        ]
    )
    assert train(cfg) == 0
    exp = os.path.join(tmp_path, name)
    states = []
    for p in range(2):
        path = sorted(glob.glob(os.path.join(exp, f"checkpoint_p{p}", "checkpoint_*.pth")))[-1]
        states.append(read_checkpoint(path))
    with open(os.path.join(exp, "summary.json")) as f:
        summary = json.load(f)
    return states, summary


def test_serial_run_repeats_with_a_seed_and_differs_without(tmp_path, capsys):
    a, summary_a = serial_run(tmp_path, "a", 11)
    b, summary_b = serial_run(tmp_path, "b", 11)
    capsys.readouterr()
    c, _ = serial_run(tmp_path, "c")
    # the unseeded run drew its own seed and says how to repeat it
    drawn = re.search(r"seed (\d+) \(random; --seed=\1 repeats it\)", capsys.readouterr().out)
    assert drawn and int(drawn.group(1)) != 11
    for p in range(2):
        assert a[p]["version"] == b[p]["version"] > 0
        assert torch.equal(flat(a[p]), flat(b[p])), f"policy {p}: seeded runs differ"
        assert not torch.equal(flat(a[p]), flat(c[p])), f"policy {p}: unseeded run repeats seed 11"
        # the same episodes, return for return
        ep_a, ep_b = summary_a["policies"][str(p)], summary_b["policies"][str(p)]
        assert ep_a["episodes"] == ep_b["episodes"] > 0
        assert ep_a["recent_returns"] == ep_b["recent_returns"]
    assert not torch.equal(flat(a[0]), flat(a[1]))  # each policy its own start


def test_a_run_that_drew_its_seed_is_repeated_by_that_seed(tmp_path, capsys):
    """Without --seed, the envs got no seed and drew fresh entropy of their own (connect four's
    random openings): `--seed=S` with the logged S trained other weights."""
    base = ["--env=connect_four", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=4",
            "--rollout=16", "--batch_size=128", "--encoder_mlp_layers", "16",
            "--train_for_env_steps=600", f"--train_dir={tmp_path}"]  # fmt: skip
    weights = []
    for name, extra in (("drawn", []), ("given", None)):
        if extra is None:
            drawn = re.search(
                r"seed (\d+) \(random; --seed=\1 repeats it\)", capsys.readouterr().out
            )
            assert drawn
            extra = [f"--seed={drawn.group(1)}"]
        assert train(parse_cfg([*base, f"--experiment={name}", *extra])) == 0
        path = sorted(glob.glob(os.path.join(tmp_path, name, "checkpoint_p0", "*.pth")))[-1]
        weights.append(flat(read_checkpoint(path)))
    assert torch.equal(weights[0], weights[1])
