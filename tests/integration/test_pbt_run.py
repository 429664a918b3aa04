"""A short 4-policy PBT run in parallel mode (tests/integration/conftest.py): replacements,
mutations, shaping in envs, the replay of a member; PBT runs that are too short or seeded."""

import glob
import json
import os

import pytest
import torch

from launch import replay
from rl_pbt import parse_cfg, train
from rl_pbt.learning.checkpoints import latest_checkpoint, read_checkpoint
from rl_pbt.pbt import unflatten_shaping
from rl_pbt.pbt.lineage import read_events, schedule_for
from rl_pbt.pbt.search_space import is_shaping_key
from tests.small_run import SHORT_PBT_PERIOD, SHORT_PBT_STEPS, SMALL_RUN


def test_pbt_run_replaces_mutates_and_reaches_envs(short_pbt_run):
    exp = short_pbt_run.exp
    log_dir = short_pbt_run.shaping_log
    events = read_events(os.path.join(exp, "pbt", "lineage.jsonl"))
    replaced = [e for e in events if e["action"] == "replace"]
    mutated = [e for e in events if e["action"] in ("replace", "mutate") and e["changes"]]
    assert len(replaced) >= 1, [e["action"] for e in events]
    assert len(mutated) >= 3
    assert all(e["policy"] != 0 for e in replaced + mutated)  # policy 0: the reference

    defaults = {
        "learning_rate": 1e-3,
        "exploration_loss_coeff": 0.003,
        "value_loss_coeff": 0.5,
        "max_grad_norm": 4.0,
        "ppo_clip_ratio": 0.1,
        "ppo_clip_value": 1.0,
    }
    changed = 0
    for p in range(1, 4):
        with open(exp / f"policy_{p:02d}_cfg.json") as f:
            values = json.load(f)
        changed += any(abs(values[k] - v) > 1e-12 for k, v in defaults.items())
    assert changed >= 1
    with open(exp / "policy_00_cfg.json") as f:
        reference = json.load(f)
    assert all(abs(reference[k] - v) < 1e-12 for k, v in defaults.items())

    # envs in the worker processes received the new shaping values
    new_shapings = set()
    for p in range(1, 4):
        with open(exp / f"policy_{p:02d}_reward_shaping.json") as f:
            new_shapings.add(json.dumps(json.load(f), sort_keys=True))
    seen = set()
    for path in glob.glob(str(log_dir / "env_*.jsonl")):
        with open(path) as f:
            seen |= {json.dumps(json.loads(line), sort_keys=True) for line in f}
    default = json.dumps({"alive": 1.0, "nested": {"fall": -1.0}}, sort_keys=True)
    assert seen - {default}, "no env saw a mutated shaping"
    # replay the lineage: each event lists every value that changed for its policy
    flat = {p: {} for p in range(4)}
    installed = []  # (policy's env steps, its whole shaping after the event)
    for e in events:
        flat[e["policy"]].update({k: v[1] for k, v in e["changes"].items() if is_shaping_key(k)})
        if e["action"] != "init":
            shaping = json.dumps(unflatten_shaping(flat[e["policy"]]), sort_keys=True)
            installed.append((e["env_steps"], shaping))
    assert {json.dumps(unflatten_shaping(flat[p]), sort_keys=True) for p in range(1, 4)} == (
        new_shapings
    )
    # every new shaping installed a round or more before the end was played by some env
    last_round = SHORT_PBT_STEPS - SHORT_PBT_PERIOD
    early = {shaping for steps, shaping in installed if steps <= last_round} - {default}
    assert early, installed
    assert early <= seen, (early - seen, seen)

    # a member that changed, replayed on one fresh policy: it trains, and ends with the values
    # its schedule holds at its last env step
    member = mutated[-1]["policy"]
    schedule = schedule_for(events, member)
    # the replay's experiment goes beside the run (--from_experiment is read in --train_dir)
    train_dir = short_pbt_run.train_dir
    assert replay.main(["--from_experiment=pbt", f"--policy={member}", f"--train_dir={train_dir}",
                        "--experiment=rp", *SMALL_RUN, "--seed=5"]) == 0  # fmt: skip
    with open(train_dir / "rp" / "summary.json") as f:
        steps = json.load(f)["policies"]["0"]["env_steps"]
    assert steps >= SHORT_PBT_STEPS
    due = [hparams for at, hparams, _ in schedule if at <= steps]
    assert len(due) >= 2  # the initial values and at least one change
    newest = latest_checkpoint(str(train_dir / "rp" / "checkpoint_p0"))
    replayed = read_checkpoint(newest)["hparams"]  # the values the learner trained with last
    assert replayed["learning_rate"] == pytest.approx(due[-1]["learning_rate"])
    assert {k: replayed[k] for k in due[-1] if k in replayed} == pytest.approx(
        {k: v for k, v in due[-1].items() if k in replayed}
    )


def test_a_budget_too_short_for_pbt_says_so_at_the_start(tmp_path, capsys):
    """The defaults start PBT at 20M env steps: a short --with_pbt run would never take a
    step, and the start says so, naming the flags."""
    common = ["--env=CartPole-v1", "--with_pbt", "--num_policies=2", "--serial_mode"]
    common += ["--num_workers=1", f"--train_dir={tmp_path}", "--train_for_env_steps=2000"]
    assert train(parse_cfg(common + ["--experiment=short"])) == 0
    out = capsys.readouterr().out
    assert "WARNING: --with_pbt: no PBT step fits in --train_for_env_steps=2000" in out
    assert "--pbt_start_mutation=20000000" in out
    fits = ["--pbt_start_mutation=500", "--pbt_period_env_steps=500", "--experiment=fits"]
    assert train(parse_cfg(common + fits)) == 0
    assert "no PBT step fits" not in capsys.readouterr().out


def test_a_seeded_serial_pbt_run_repeats(tmp_path):
    """The README's promise for serial runs holds with PBT too: the workers report after
    every step in serial mode, so each PBT step ranks the same episodes (reported on the
    clock, repeats of such a run decided differently)."""
    flags = ["--env=CartPole-v1", "--serial_mode", "--num_workers=2", "--seed=11",
             "--with_pbt", "--num_policies=2", "--pbt_start_mutation=1000",
             "--pbt_period_env_steps=1000", "--pbt_mutate_reference_policy",
             "--train_for_env_steps=6000", f"--train_dir={tmp_path}"]  # fmt: skip
    for run in ("a", "b"):
        assert train(parse_cfg(flags + [f"--experiment={run}"])) == 0

    def lineage(run):
        events = read_events(os.path.join(tmp_path, run, "pbt", "lineage.jsonl"))
        return [{k: v for k, v in e.items() if k != "time"} for e in events]

    assert len(lineage("a")) > 2 and lineage("a") == lineage("b")  # init + PBT decisions
    for p in (0, 1):
        a, b = (read_checkpoint(latest_checkpoint(str(tmp_path / r / f"checkpoint_p{p}")))
                for r in ("a", "b"))  # fmt: skip
        assert a["env_steps"] == b["env_steps"] and a["hparams"] == b["hparams"]
        assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
