"""A catalogue of bad input to rl-pbt-train: flags, presets, search-space and policy-values
files, experiment names and folders. Each case runs the real entry point (`launch.train.main`)
and must end with exit status 2 and one line on stderr that names the culprit, without a
traceback and without touching the experiment folder (or anything else under the test's tmp
folder). A few cases run in a subprocess to prove the same from the outside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import pytest

import envs  # noqa: F401  (registers the built-in envs, as launch.train does)
from launch.train import main
from rl_pbt.config import parse
from rl_pbt.envs import registry
from rl_pbt.runtime import runner

ROOT = Path(__file__).resolve().parents[2]
PBT = ["--with_pbt", "--num_policies=2"]
LONG_TAG = "t" * 65
# the run folder and a short serial run, for the cases that name an env other than CartPole
ELSEWHERE = ["--train_dir={tmp}/runs", "--experiment=exp", "--serial_mode", "--num_workers=1"]


@dataclass
class Case:
    id: str
    argv: list[str]  # "{tmp}" stands for the test's tmp folder
    words: list[str]  # each must appear in the error line
    files: dict[str, str] = field(default_factory=dict)  # name -> text, written under {tmp}
    base: bool = True  # prepend --env=CartPole-v1 and the run folder
    setup: Optional[Callable] = None  # (monkeypatch, tmp) -> None


def space(entries) -> dict[str, str]:
    return {"space.json": entries if isinstance(entries, str) else json.dumps(entries)}


def values(entries) -> dict[str, str]:
    return {"values.json": entries if isinstance(entries, str) else json.dumps(entries)}


def preset(entries) -> dict[str, str]:
    return {"p.json": entries if isinstance(entries, str) else json.dumps(entries)}


def without_wandb(monkeypatch, tmp):
    monkeypatch.setitem(sys.modules, "wandb", None)  # find_spec then reports it missing


def needs_ray(monkeypatch, tmp):
    # without Ray, --ray_address stops at "needs Ray" before this case's own check
    pytest.importorskip("ray")


def unwritable(monkeypatch, tmp):
    # tests may run as root, for whom every folder is writable: simulate the refusal
    real = os.access
    locked = os.path.join(str(tmp), "locked")
    os.makedirs(locked)

    def access(path, mode, **kw):
        if os.path.abspath(path) == locked and mode & os.W_OK:
            return False
        return real(path, mode, **kw)

    monkeypatch.setattr(parse.os, "access", access)


def full_shared_memory(monkeypatch, tmp):
    # a /dev/shm with 64 KiB free: the buffers are sized and refused before any allocation
    # (on a machine that overcommits, allocating them would succeed and fail later)
    monkeypatch.setattr(runner, "shared_memory_room", lambda: (2**16, "free in /dev/shm"))


def fake_configs(monkeypatch, tmp):
    folder = Path(tmp) / "configs"
    folder.mkdir()
    (folder / "good.json").write_text(json.dumps({"env": "CartPole-v1"}))
    (folder / "broken.json").write_text('{"env": "CartPole-v1",')
    (folder / "space.json").write_text(json.dumps({"learning_rate": {"tune": False}}))
    monkeypatch.setattr(parse, "CONFIGS_DIR", folder)


def doom_missing(monkeypatch, tmp):
    monkeypatch.setitem(sys.modules, "vizdoom", None)
    for name in [n for n in registry.registered_envs() if n.startswith("doom_")]:
        monkeypatch.delitem(registry._REGISTRY, name)


CASES = [
    # --- flags ---
    Case("abbreviation", ["--num_env=4"], ["--num_env", "did you mean --num_envs_per_worker"]),
    Case("misspelt", ["--lerning_rate=1e-3"], ["--lerning_rate", "--learning_rate"]),
    Case("unknown_flag", ["--bogus=1"], ["unknown flag --bogus"]),
    Case("stray_word", ["stray"], ["unrecognized arguments: stray"]),
    Case("no_value", ["--num_workers"], ["--num_workers", "needs a value"]),
    Case("negative_lr", ["--learning_rate=-0.1"], ["--learning_rate=-0.1", "> 0"]),
    Case("nan_lr", ["--learning_rate=nan"], ["--learning_rate=nan", "finite"]),
    Case("gamma_above_one", ["--gamma=1.5"], ["--gamma=1.5", "[0, 1]"]),
    Case("beta_one", ["--adam_beta1=1"], ["--adam_beta1=1.0", "[0, 1)"]),
    Case("int_text", ["--num_workers=abc"], ["--num_workers='abc'", "an integer"]),
    Case("int_fraction", ["--num_workers=2.5"], ["--num_workers='2.5'", "an integer"]),
    Case("zero_workers", ["--num_workers=0"], ["--num_workers=0", "> 0"]),
    Case("zero_rollout", ["--rollout=0"], ["--rollout=0", "> 0"]),
    Case("huge_steps", ["--train_for_env_steps=1e400"], ["--train_for_env_steps", "integer"]),
    Case("bool_text", ["--with_pbt=maybe"], ["--with_pbt='maybe'", "true or false"]),
    Case("choice", ["--device=tpu"], ["--device='tpu'", "'auto', 'gpu', 'cpu'"]),
    Case("choice_case", ["--nonlinearity=ReLU"], ["--nonlinearity='ReLU'", "did you mean relu"]),
    Case("layers_text", ["--encoder_mlp_layers=64,x"], ["--encoder_mlp_layers='64,x'", "integers"]),
    Case("layers_negative", ["--encoder_mlp_layers", "64", "-1"], ["--encoder_mlp_layers", "> 0"]),
    Case("seed_negative", ["--seed=-1"], ["--seed=-1", "2**63"]),
    Case("recurrence_zero", ["--use_rnn", "--recurrence=0"], ["--recurrence=0", "-1"]),
    Case("recurrence_rollout", ["--use_rnn", "--recurrence=5"], ["--recurrence=5", "--rollout=32"]),
    Case("batch_vs_rollout", ["--batch_size=500"], ["--batch_size=500", "--rollout=32"]),
    Case(
        "splits",
        ["--num_envs_per_worker=3", "--inference=device"],
        ["--num_envs_per_worker=3", "--worker_num_splits"],
    ),
    Case("gpu_without_gpus", ["--device=gpu", "--num_gpus=0"], ["--device=gpu", "--num_gpus=0"]),
    Case("pbt_alone", ["--with_pbt"], ["--with_pbt", "--num_policies=1", ">= 2"]),
    Case("replace_fraction", PBT + ["--pbt_replace_fraction=0.9"], ["--pbt_replace_fraction"]),
    Case(
        "perturb_order",
        ["--pbt_perturb_min=1.6", "--pbt_perturb_max=1.2"],
        ["--pbt_perturb_max=1.2", "--pbt_perturb_min=1.6"],
    ),
    Case("ttest_alpha", ["--pbt_ttest_alpha=0"], ["--pbt_ttest_alpha=0.0", "(0, 1)"]),
    Case(
        "ttest_window",
        PBT + ["--pbt_exploit=ttest", "--pbt_ttest_min_episodes=50", "--pbt_objective_window=20"],
        ["--pbt_ttest_min_episodes=50", "--pbt_objective_window=20"],
    ),
    Case("vs_snapshots", PBT + ["--pbt_target_objective=vs_snapshots"], ["vs_snapshots"]),
    Case("replay_missing", ["--pbt_replay_lineage={tmp}/nope.jsonl"], ["--pbt_replay_lineage"]),
    Case("no_env", [], ["--env is required"], base=False),
    Case("unknown_env", ["--env=CartPol-v1"], ["--env='CartPol-v1'", "CartPole-v1"]),
    Case("sf_value", ["--algo=PPO"], ["--algo='PPO'", "APPO"]),
    Case("sf_rnn", ["--rnn_type=lstm"], ["--rnn_type='lstm'", "GRU"]),
    Case("wandb_project", ["--wandb_project=a/b"], ["--wandb_project='a/b'", "/"]),
    Case("wandb_entity", ["--wandb_entity="], ["--wandb_entity=''", "empty"]),
    Case("wandb_tag", [f"--wandb_tags=ok,{LONG_TAG}"], ["--wandb_tags", "64"]),
    Case(
        "wandb_missing", ["--with_wandb"], ["--with_wandb", '"rl_pbt[wandb]"'], setup=without_wandb
    ),
    Case("ray_address", ["--ray_address=cluster1"], ["--ray_address='cluster1'", "HOST:PORT"]),
    Case("policies_per_node", ["--policies_per_node=0"], ["--policies_per_node=0", "> 0"]),
    Case(
        "ray_elo_one_agent",
        [
            "--ray_address=local",
            "--serial_mode=False",
            "--with_pbt",
            "--num_policies=2",
            "--pbt_target_objective=elo",
        ],
        ["--pbt_target_objective=elo", "multi-agent", "--env=CartPole-v1"],
        setup=needs_ray,
    ),
    Case("ray_serial", ["--ray_address=local", "--serial_mode"], ["drop --serial_mode"]),
    Case("ray_node_dir", ["--ray_node_dir=/tmp/n"], ["--ray_node_dir='/tmp/n'", "--ray_address"]),
    Case("help_topic", ["--help=ppo"], ["--help=ppo", "pbt", "sampling"], base=False),
    Case(
        "doom_missing",
        ["--env=doom_basic"],
        ["--env=doom_basic", '"rl_pbt[doom]"'],
        setup=doom_missing,
    ),
    # --- presets ---
    Case("preset_values", ["--preset=arena_hunter_start"], ["--preset", "--policy_values="]),
    Case("preset_space", ["--preset=shaping_only"], ["--preset", "--pbt_search_space="]),
    Case("preset_typo", ["--preset=arena_pbt_dem"], ["--preset", "did you mean arena_pbt_demo"]),
    Case("preset_json", ["--preset={tmp}/p.json"], ["--preset", "p.json", "JSON"], preset("{")),
    Case(
        "preset_key",
        ["--preset={tmp}/p.json"],
        ["--learning_rat", "p.json", "--learning_rate"],
        preset({"learning_rat": 0.1}),
    ),
    Case(
        "preset_type",
        ["--preset={tmp}/p.json"],
        ["--num_workers='four'", "p.json"],
        preset({"num_workers": "four"}),
    ),
    Case(
        "preset_null",
        ["--preset={tmp}/p.json"],
        ["--num_workers=None", "p.json"],
        preset({"num_workers": None}),
    ),
    Case(
        "preset_section",
        ["--preset={tmp}/p.json"],
        ["--preset", "'pbt' holds an object"],
        preset({"env": "CartPole-v1", "pbt": {"with_pbt": True}}),
    ),
    Case(
        "preset_bad_value",
        ["--preset={tmp}/p.json"],
        ["--gamma=2.0"],
        preset({"_comment": "x", "gamma": 2.0}),
    ),
    Case("preset_dir_broken", ["--preset=broken"], ["--preset=broken", "JSON"], setup=fake_configs),
    Case(
        "preset_dir_list",
        ["--preset=nope"],
        ["--preset=nope", "presets: good"],
        setup=fake_configs,
    ),
    # --- search-space files ---
    Case("space_json", PBT + ["--pbt_search_space={tmp}/space.json"], ["JSON"], space("{")),
    Case(
        "space_not_object",
        PBT + ["--pbt_search_space={tmp}/space.json"],
        ["JSON object"],
        space([1, 2]),
    ),
    Case(
        "space_entry_key",
        PBT + ["--pbt_search_space={tmp}/space.json"],
        ["'learning_rate'", "unknown keys", "'lo'"],
        space({"learning_rate": {"lo": 1e-5}}),
    ),
    Case(
        "space_name",
        PBT + ["--pbt_search_space={tmp}/space.json"],
        ["'learning_rat'", "did you mean learning_rate"],
        space({"learning_rat": {"low": 1e-5}}),
    ),
    Case(
        "space_untunable",
        PBT + ["--pbt_search_space={tmp}/space.json"],
        ["'gae_lambda' cannot be tuned"],
        space({"gae_lambda": {"low": 0.9, "high": 0.99}}),
    ),
    Case(
        "space_bounds",
        PBT + ["--pbt_search_space={tmp}/space.json"],
        ["'learning_rate'", "above"],
        space({"learning_rate": {"low": 0.1, "high": 0.01}}),
    ),
    Case(
        "space_log_zero",
        PBT + ["--pbt_search_space={tmp}/space.json"],
        ["'learning_rate'", "log_float"],
        space({"learning_rate": {"type": "log_float", "low": 0, "high": 0.1}}),
    ),
    Case(
        "space_log_negative",
        PBT + ["--pbt_search_space={tmp}/space.json"],
        ["'learning_rate'", "allows -0.1", "> 0"],
        space({"learning_rate": {"type": "log_float", "low": -0.1, "high": -0.01}}),
    ),
    Case(
        "space_bound_text",
        PBT + ["--pbt_search_space={tmp}/space.json"],
        ["'learning_rate'", "low='small'"],
        space({"learning_rate": {"low": "small"}}),
    ),
    Case(
        "space_kind",
        PBT + ["--pbt_search_space={tmp}/space.json"],
        ["'learning_rate'", "'gaussian'"],
        space({"learning_rate": {"type": "gaussian"}}),
    ),
    Case(
        "space_missing",
        PBT + ["--pbt_search_space={tmp}/nope.json"],
        ["--pbt_search_space", "no such file", "shipped in configs/: ", "shaping_only.json"],
    ),
    # --- policy-values files ---
    Case("values_json", ["--policy_values={tmp}/values.json"], ["JSON"], values("[{")),
    Case(
        "values_length",
        ["--num_policies=3", "--policy_values={tmp}/values.json"],
        ["--policy_values", "2 entries for --num_policies=3"],
        values([{}, {}]),
    ),
    Case(
        "values_key",
        ["--policy_values={tmp}/values.json"],
        ["'learning_rat'", "did you mean learning_rate"],
        values([{"learning_rat": 0.1}]),
    ),
    Case(
        "values_range",
        ["--policy_values={tmp}/values.json"],
        ["--policy_values", "learning_rate=-1.0", "> 0"],
        values([{"learning_rate": -1}]),
    ),
    Case(
        "values_text",
        ["--policy_values={tmp}/values.json"],
        ["--policy_values", "gamma='high'", "not a number"],
        values([{"gamma": "high"}]),
    ),
    Case(
        "values_entry",
        ["--policy_values={tmp}/values.json"],
        ["--policy_values", "entry 0 must be an object"],
        values([3]),
    ),
    Case(
        "values_shaping",  # found by the runner, once the env is built: still nothing written
        ["--num_policies=2", "--policy_values={tmp}/values.json"],
        ["--policy_values", "rew.kill", "no reward shaping"],
        values([{}, {"rew.kill": 1.0}]),
    ),
    # --- found once the env and the model are known, still before anything is written ---
    Case(
        "elo_one_agent",
        [*PBT, "--pbt_target_objective=elo"],
        ["--pbt_target_objective=elo", "multi-agent", "one agent"],
    ),
    Case("matchmaking_one_agent", ["--matchmaking=elo"], ["--matchmaking=elo", "one agent"]),
    Case(
        "objective_near_miss",
        [*PBT, "--pbt_target_objective=vs_snapshot"],
        ["--pbt_target_objective=vs_snapshot", "did you mean vs_snapshots?"],
    ),
    Case(
        "objective_colon",
        [*PBT, "--pbt_target_objective=vs_scriptd:chaser"],
        ["vs_scriptd:chaser", "did you mean vs_scripted?"],
    ),
    Case(
        "untuned_typo",
        [*PBT, "--pbt_search_space={tmp}/space.json"],
        ["'learnin_rate'", "did you mean learning_rate?"],
        space({"learnin_rate": {"tune": False}}),
    ),
    Case(
        "space_unknown_shaping_leaf",
        ["--env=lure", *PBT, "--pbt_search_space={tmp}/space.json", *ELSEWHERE],
        ["--pbt_search_space=", "space.json", "rew.nonexistent", "reward shaping"],
        space({"rew.nonexistent": {"type": "float", "low": 0, "high": 1}}),
        base=False,
    ),
    Case(
        "replay_empty_lineage",
        ["--pbt_replay_lineage={tmp}/empty.jsonl"],
        ["--pbt_replay_lineage", "no lineage events"],
        {"empty.jsonl": ""},
    ),
    Case(
        "conv_larger_than_board",
        ["--env=connect_four_planes", "--encoder_conv_architecture=convnet_simple", *ELSEWHERE],
        [
            "--env=connect_four_planes",
            "no model",
            "too small",
            "--encoder_conv_architecture=convnet_board",
        ],
        base=False,
    ),
    Case(
        "buffers_beyond_memory",
        ["--rollout=1000000000", "--batch_size=1000000000"],  # terabytes: refused at once
        ["trajectory buffers", "do not fit in memory", "--rollout"],
    ),
    Case(
        "buffers_beyond_shared_memory",
        ["--rollout=64", "--batch_size=4096"],
        ["trajectory buffers", "do not fit in memory", "0.1 MiB free in /dev/shm", "--batch_size"],
        setup=full_shared_memory,
    ),
    Case(
        "network_beyond_memory",  # built, it took minutes of swapping
        ["--encoder_mlp_layers=1000000000"],
        ["the network (", "parameters)", "more than this machine's", "--encoder_mlp_layers"],
    ),
    Case(
        "snapshot_pool_beyond_memory",  # a traceback from torch's allocation, folder made
        [
            "--env=arena_duel",
            "--selfplay_snapshot_prob=0.5",
            "--selfplay_snapshot_pool_size=1e8",
            "--serial_mode",
            "--train_dir={tmp}/runs",
            "--experiment=exp",
        ],  # fmt: skip
        ["--selfplay_snapshot_pool_size=100000000", "more than this machine's"],
        base=False,
    ),
    Case("frameskip_huge", ["--env_frameskip=1e18"], ["--env_frameskip", "must be in [1, 1000]"]),
    Case(
        "observation_space_unsupported",
        ["--env=Blackjack-v1", *ELSEWHERE],
        ["--env=Blackjack-v1", "unsupported observation space"],
        base=False,
    ),
    Case("population_too_large", ["--num_policies=1e100"], ["--num_policies", "must be below"]),
    Case("lag_overflow", ["--max_policy_lag=1e30"], ["--max_policy_lag", "below 2**63"]),
    Case("no_mlp_layer", ["--encoder_mlp_layers"], ["--encoder_mlp_layers", "at least one"]),
    # --- experiment names and folders ---
    Case("exp_parent", ["--experiment=../x"], ["--experiment='../x'", "plain folder name"]),
    Case("exp_path", ["--experiment=a/b"], ["--experiment='a/b'", "plain folder name"]),
    Case("exp_empty", ["--experiment="], ["--experiment=''", "empty"]),
    Case("exp_dot", ["--experiment=."], ["--experiment='.'", "plain folder name"]),
    Case(
        "dir_is_file",
        ["--train_dir={tmp}/file.txt"],
        ["--train_dir", "is a file"],
        {"file.txt": "x"},
    ),
    Case(
        "dir_under_file",
        ["--train_dir={tmp}/file.txt/runs"],
        ["--train_dir", "file.txt is a file"],
        {"file.txt": "x"},
    ),
    Case("exp_is_file", ["--experiment=notes.txt"], ["--experiment='notes.txt'", "is a file"]),
    Case(
        "dir_unwritable",
        ["--train_dir={tmp}/locked/runs"],
        ["--train_dir", "locked", "not writable"],
        setup=unwritable,
    ),
]


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """(mtime_ns, size) of every file and folder under root, root included."""
    out = {".": (root.stat().st_mtime_ns, 0)}
    for path in root.rglob("*"):
        st = path.lstat()
        out[str(path.relative_to(root))] = (st.st_mtime_ns, st.st_size)
    return out


def prepare(case: Case, tmp: Path, monkeypatch) -> list[str]:
    runs = tmp / "runs"
    (runs / "exp").mkdir(parents=True)
    (runs / "exp" / "keep.txt").write_text("earlier run")
    (runs / "notes.txt").write_text("not an experiment")
    for name, text in case.files.items():
        (tmp / name).write_text(text)
    if case.setup is not None:
        case.setup(monkeypatch, tmp)
    argv = [a.replace("{tmp}", str(tmp)) for a in case.argv]
    # a short serial run, should a case ever pass its checks by mistake
    bounded = ["--serial_mode", "--num_workers=1", "--train_for_seconds=5"]
    where = [f"--train_dir={runs}", "--experiment=exp"]
    return (["--env=CartPole-v1", *bounded, *where] if case.base else []) + argv


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_exit_2_and_touches_nothing(case, tmp_path, monkeypatch, capsys):
    argv = prepare(case, tmp_path, monkeypatch)
    before = snapshot(tmp_path)
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2, err
    lines = [line for line in err.splitlines() if not line.startswith("note: ")]
    assert len(lines) == 1 and lines[0].startswith("rl-pbt-train: error: "), err
    assert "Traceback" not in err
    for word in case.words:
        assert word in lines[0], (word, lines[0])
    assert snapshot(tmp_path) == before
    assert (tmp_path / "runs" / "exp" / "keep.txt").read_text() == "earlier run"


def test_catalogue_is_broad():
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize(
    "argv, word",
    [
        (["--env=CartPole-v1", "--num_env=4"], "--num_envs_per_worker"),
        (["--env=CartPole-v1", "--train_dir={tmp}/file.txt"], "--train_dir"),
        (["--preset={tmp}/p.json"], "p.json"),
    ],
)
def test_from_the_outside(argv, word, tmp_path):
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "p.json").write_text('{"env": "CartPole-v1", "rollout": "long"}')
    before = snapshot(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    done = subprocess.run(
        [sys.executable, "-m", "launch.train", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and word in done.stderr
    assert snapshot(tmp_path) == before


def test_help_exits_0_from_the_entry_point(capsys):
    assert main(["--help=logging"]) == 0
    out = capsys.readouterr().out
    assert "--with_wandb" in out and "--wandb_tags" in out and "--num_workers" not in out
