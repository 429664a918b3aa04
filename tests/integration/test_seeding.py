"""--seed makes a serial run repeat exactly: the same episodes, weights and optimiser state after
the same updates; without --seed a run takes a fresh seed (logged) and is another run."""

import dataclasses
import glob
import json
import os
import re

import pytest
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


def reset_sequences(spec, incarnation: int, resets: int = 8) -> dict:
    """Per env copy of two rollout workers built as a run builds them: the first observation
    and those after `resets` more resets, as bytes."""
    from rl_pbt.runtime.processes import build_worker

    sequences = {}
    for w in range(2):
        worker = build_worker(spec, w, lambda: False, blocking=False, incarnation=incarnation)
        n = worker.num_agents
        for e, env in enumerate(worker.envs):
            first = [worker.cur_obs["observation"][e * n + a].tobytes() for a in range(n)]
            seq = [b"".join(first)]
            for _ in range(resets):
                obs, _ = env.reset()
                seq.append(b"".join(o["observation"].tobytes() for o in obs))
            sequences[(w, e)] = tuple(seq)
        worker.close()
        spec.pool.reclaim(w)  # its trajectory slots, for the next worker built here
    return sequences


@pytest.mark.parametrize("batched", [True, False])
def test_restarted_workers_and_resumed_runs_draw_games_of_their_own(tmp_path, batched):
    """Connect four's openings: a worker restarted after a crash, and every worker of a
    resumed run (`run_start` > 0), play other games than the first start's worker did (their
    reset seeds also reseed the openings; the factory's seed does not come back at the next
    reset); the same start repeats its games."""
    from rl_pbt.runtime.runner import Runner

    cfg = parse_cfg(
        [
            "--env=connect_four",
            "--num_workers=2",
            "--num_envs_per_worker=4",
            "--rollout=8",
            "--batch_size=32",
            "--encoder_mlp_layers",
            "16",
            "--seed=5",
            f"--batched_envs={batched}",
            f"--train_dir={tmp_path}",
            "--experiment=x",
        ]  # fmt: skip
    )
    runner = Runner(cfg)
    try:
        spec = runner.spec()
        assert spec.run_start == 0
        first = reset_sequences(spec, 0)
        again = reset_sequences(spec, 0)
        restarted = reset_sequences(spec, 1)
        resumed = reset_sequences(dataclasses.replace(spec, run_start=1), 0)
    finally:
        runner.run_lock.release()
    assert first == again  # repeatable
    assert len(set(first.values())) == len(first) == 8  # every copy its own games
    for other in (restarted, resumed):
        replayed = [k for k in first if first[k][1:] == other[k][1:]]
        assert replayed == []
        # openings of 0 moves (the empty board) aside, the positions are new ones
        seen = {obs for seq in first.values() for obs in seq}
        fresh = sum(obs not in seen for seq in other.values() for obs in seq)
        assert fresh >= 0.7 * 8 * 9


def test_each_start_of_a_run_is_counted_in_its_folder(tmp_path):
    from rl_pbt.runtime.runner import count_start

    exp = str(tmp_path / "x")
    os.makedirs(exp)
    assert [count_start(exp, resuming) for resuming in (False, True, True)] == [0, 1, 2]
    assert count_start(exp, False) == 0  # a new run in the folder starts the count anew
    path = os.path.join(exp, "stats", "starts.json")
    os.remove(path)
    assert count_start(exp, True) == 1  # a run from before the count: one start behind it
    with open(path, "w") as f:
        f.write("{not json")
    assert count_start(exp, True) > 2  # unreadable: a number of its own, then counted on
    with open(path) as f:
        assert json.load(f)["starts"] > 3


def test_a_start_draws_seeds_of_its_own_and_a_new_run_keeps_its_seeds():
    import numpy as np

    from rl_pbt.runtime.devices import derive_seed

    # a new run's seeds are those runs always had
    old = int(np.random.SeedSequence([7, 2, 3]).generate_state(1)[0] & 0x7FFFFFFF)
    assert derive_seed(7, "worker", 3) == derive_seed(7, "worker", 3, 0, 0) == old
    seeds = {
        derive_seed(7, "worker", 3, restart, start) for restart in range(4) for start in range(4)
    }
    assert len(seeds) == 16
    assert derive_seed(7, "main", 0, start=2) == derive_seed(7, "main", 0, start=2)
