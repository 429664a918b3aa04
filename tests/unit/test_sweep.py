"""rl-pbt-sweep's plan: the grid, the runs' names and flags, the GPU slots, the ranking, and bad
input refused in one line before anything starts."""

import json
import os
import re

import pytest

from launch import sweep
from launch.sweep import (
    SweepError,
    changed_flags,
    cuda_ids,
    eta,
    expand,
    gpu_slots,
    list_flags_of,
    log_share,
    parse_grid,
    plan,
    ranking,
    result_of,
    run_name,
    share_rate,
    split_tokens,
    train_dir_of,
    value_tokens,
    without_flag,
)


def test_grid_expands_to_every_combination_first_flag_slowest():
    grid = parse_grid(["learning_rate=1e-4, 3e-4", "--seed=1,2,3"])
    assert grid == {"learning_rate": ["1e-4", "3e-4"], "seed": ["1", "2", "3"]}
    combos = expand(grid)
    assert len(combos) == 6
    assert combos[0] == {"learning_rate": "1e-4", "seed": "1"}
    assert combos[2] == {"learning_rate": "1e-4", "seed": "3"}
    assert combos[3] == {"learning_rate": "3e-4", "seed": "1"}
    assert expand({}) == [{}]


@pytest.mark.parametrize(
    "spec, words",
    [
        ("learning_rate", "FLAG=VALUE"),
        ("=1,2", "FLAG=VALUE"),
        ("seed=1,,2", "empty value"),
        ("seed=1,2,1", "1 given twice"),
        ("experiment=a,b", "names each run's --experiment"),
        ("train_dir=a,b", "names each run's --train_dir"),
    ],
)
def test_bad_grid_specs_are_named(spec, words):
    with pytest.raises(SweepError, match=words) as e:
        parse_grid([spec])
    assert repr(spec) in str(e.value)


def test_a_flag_given_twice_in_the_grid_is_refused():
    with pytest.raises(SweepError, match="--seed is in the grid twice"):
        parse_grid(["seed=1", "seed=2"])


def test_run_names_are_plain_folder_names_and_stay_apart():
    assert run_name({"learning_rate": "3e-4", "seed": "2"}) == "learning_rate_3e-4__seed_2"
    assert run_name({}) == "run"
    assert run_name({"encoder_mlp_layers": "64 64"}) == "encoder_mlp_layers_64-64"
    assert run_name({"preset": "../x/y"}) == "preset_..-x-y"
    long_a = run_name({"f": "a" * 300 + "1"})
    long_b = run_name({"f": "a" * 300 + "2"})
    assert len(long_a.encode()) <= sweep.NAME_BYTES and long_a != long_b
    runs = plan("s", "root", [], {"preset": ["a b", "a/b"]})
    assert [r.name for r in runs] == ["preset_a-b", "preset_a-b_"]


def test_each_run_gets_the_base_flags_its_values_and_its_own_folder():
    base = ["--env=CartPole-v1", "--train_dir", "old", "--seed=7"]
    grid = {"learning_rate": ["1e-4"], "encoder_mlp_layers": ["8 8"]}
    runs = plan("lr", "/tmp/td", base, grid, frozenset({"encoder_mlp_layers"}))
    (run,) = runs
    assert run.argv == [
        "--env=CartPole-v1",
        "--seed=7",
        "--learning_rate=1e-4",
        "--encoder_mlp_layers",
        "8",
        "8",
        "--train_dir=/tmp/td/lr",
        "--experiment=learning_rate_1e-4__encoder_mlp_layers_8-8",
    ]
    assert value_tokens("seed", "3") == ["--seed=3"]
    # a value with a space stays one value, but for a list flag
    assert value_tokens("preset", "my presets/a.json") == ["--preset=my presets/a.json"]
    assert value_tokens("encoder_mlp_layers", "64 64", frozenset({"encoder_mlp_layers"})) == [
        "--encoder_mlp_layers", "64", "64"]  # fmt: skip
    assert "encoder_mlp_layers" in list_flags_of(["--env=CartPole-v1"])
    assert without_flag(["--a=1", "--train_dir", "x", "--b"], "train_dir") == ["--a=1", "--b"]


def test_gpu_slots_spread_runs_over_the_gpus_before_sharing_one():
    assert gpu_slots([0, 1], 1, 1) == ["0", "1"]
    assert gpu_slots([0, 1], 1, 2) == ["0", "1", "0", "1"]
    assert gpu_slots([0, 1, 2, 3, 4], 2, 1) == ["0,1", "2,3"]  # GPU 4 alone is too few
    assert gpu_slots([], 1, 1) == []


def test_runs_rank_by_objective_and_eta_comes_from_finished_runs(tmp_path):
    rows = [
        {"name": "a", "objective": 0.2},
        {"name": "b", "objective": None},
        {"name": "c", "objective": 0.9},
    ]
    assert [r["name"] for r in ranking(rows)] == ["c", "a", "b"]
    # a failed or stopped run's figures are partial: finished runs rank first
    rows = [
        {"name": "f", "state": "failed", "objective": 9.0},
        {"name": "d", "state": "done", "objective": 0.5},
        {"name": "e", "state": "done earlier", "objective": 0.7},
    ]
    assert [r["name"] for r in ranking(rows)] == ["e", "d", "f"]
    assert eta([None, 10.0], 0, None, 2) is None  # a running run's rate is not known yet
    assert eta([10.0], 3, None, 2) is None  # nor how long a whole run takes
    # 2 running runs with 30 s and 50 s left, 2 waiting of 100 s each, over 2 slots
    assert eta([30.0, 50.0], 2, 100.0, 2) == pytest.approx((80 + 200) / 2)
    assert share_rate([(0.0, 0.4)]) is None and share_rate([(0.0, 0.4), (2.0, 0.5)]) is None
    assert share_rate([(0.0, 0.4), (10.0, 0.5)]) == pytest.approx(0.01)  # a resumed run's
    exp = tmp_path / "e"
    exp.mkdir()
    assert result_of(str(exp)) == {}
    policies = {"0": {"env_steps": 900, "mean_objective": 0.3},
                "1": {"env_steps": 800, "mean_objective": 0.6}}  # fmt: skip
    (exp / "summary.json").write_text(json.dumps({"policies": policies}))
    assert result_of(str(exp)) == {"env_steps": 800, "best_policy": "1", "objective": 0.6,
                                   "by": "objective"}  # fmt: skip
    policies["0"].update(mean_objective=None, mean_return=21.0)  # no objective from the env
    policies["1"].update(mean_objective=None, mean_return=35.5)
    (exp / "summary.json").write_text(json.dumps({"policies": policies}))
    assert result_of(str(exp)) == {"env_steps": 800, "best_policy": "1", "objective": 35.5,
                                   "by": "return"}  # fmt: skip


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--sweep=s", "--grid", "seed=1"], "give the training flags after '--'"),
        (["--sweep=a/b", "--", "--env=CartPole-v1"], "--sweep='a/b': is a path"),
        (["--sweep=s", "--max_parallel=0", "--", "--env=CartPole-v1"], "--max_parallel=0"),
        (["--sweep=s", "--", "--env=CartPole-v1", "--experiment=x"], "--experiment after '--'"),
        (["--sweep=s", "--gpus=0", "--", "--env=CartPole-v1"], "--gpus='0': 0 GPU"),
        (["--sweep=s", "--grid", "seed=1,2", "--", "--env=CartPole-v1", "--seed=3"],
         "--seed is both in --grid and after '--'"),
        (["--sweep=s", "--grid", "learning_rate=1e-4,-1", "--", "--env=CartPole-v1"],
         "run learning_rate_-1: .*--learning_rate"),
        (["--sweep=s", "--grid", "lerning_rate=1", "--", "--env=CartPole-v1"],
         "run lerning_rate_1: .*lerning_rate.*learning_rate"),
        (["--sweep=s", "--train_script=nope.py", "--", "--env=CartPole-v1"],
         "--train_script='nope.py': no such file"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_exit_2_and_writes_nothing(argv, words, tmp_path, capsys):
    full = [*argv, f"--train_dir={tmp_path}"] if "--" in argv else argv
    if "--gpus=0" in argv and sweep.visible_gpus() > 0:
        pytest.skip("GPU 0 exists here")
    assert sweep.main(full) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rl-pbt-sweep: error: ") and len(err.splitlines()) == 1
    assert re.search(words, err), err
    assert os.listdir(tmp_path) == []


def test_dry_run_checks_and_lists_the_runs_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sweep, "visible_gpus", lambda: 0)  # a machine without GPUs
    argv = ["--sweep=s", "--grid", "seed=1,2", "--max_parallel=2", "--dry_run", "--",
            "--env=CartPole-v1", f"--train_dir={tmp_path}"]  # fmt: skip
    assert sweep.main(argv) == 0
    out = capsys.readouterr().out
    assert "seed_1: " in out and "seed_2: " in out and "2 runs, 2 at a time on the CPU" in out
    assert f"--train_dir={tmp_path}/s --experiment=seed_2" in out
    assert os.listdir(tmp_path) == []


def test_a_running_runs_share_comes_from_its_newest_status_line(tmp_path):
    log = tmp_path / "r.log"
    assert log_share(str(log)) is None
    log.write_text("starting\n")
    assert log_share(str(log)) is None
    log.write_text(
        "[5s] 40k frames 8k fps | 3% of 1.5M steps (p0 40k slowest) ETA 3m | best p0 obj 1\n"
        "  p0 ret 0.4 obj 0.5 | p1 ret 0.1 obj 0.4\n"
        "[10s] 80k frames 8k fps | 26% of 2m00s (p1 77k slowest) ETA 1m30s (time limit)\n"
        "  p0 ret 12% of nothing\n"
    )
    assert log_share(str(log)) == 0.26


def test_with_gpus_each_run_sees_its_slot_only(tmp_path, monkeypatch, capsys):
    """The GPU seam on a CPU machine: two GPUs made visible to the sweep; each run's process
    gets its slot in CUDA_VISIBLE_DEVICES (the script stands in for the training)."""
    monkeypatch.setattr(sweep, "visible_gpus", lambda: 2)
    script = tmp_path / "show_gpus.py"
    script.write_text(
        "import os, sys, time\n"
        "if __name__ == '__main__':\n"
        "    time.sleep(0.5)\n"
        "    print('CUDA_VISIBLE_DEVICES=' + os.environ.get('CUDA_VISIBLE_DEVICES', 'unset'))\n"
    )
    td = tmp_path / "td"
    argv = ["--sweep=g", "--grid", "seed=1,2,3,4", "--runs_per_gpu=2", f"--train_script={script}",
            "--progress_interval=60", "--", "--env=CartPole-v1", f"--train_dir={td}"]  # fmt: skip
    assert sweep.main(argv) == 0
    out = capsys.readouterr().out
    assert "on GPU 0" in out and "on GPU 1" in out
    runs = json.loads((td / "g" / "sweep.json").read_text())["runs"]
    for run in runs:
        log = (td / "g" / f"{run['name']}.log").read_text()
        assert f"CUDA_VISIBLE_DEVICES={run['gpus']}\n" in log and run["gpus"] in ("0", "1")
    assert sorted(r["gpus"] for r in runs) == ["0", "0", "1", "1"]
    # four slots (2 GPUs x 2 runs each) at most: a fifth is refused in one line
    assert sweep.main([*argv[:5], "--max_parallel=5", *argv[5:]]) == 2
    assert "--max_parallel=5: 4 GPU slot(s)" in capsys.readouterr().err


@pytest.mark.parametrize("cpu_flag", ["--device=cpu", "--num_gpus=0"])
def test_runs_on_the_cpu_share_the_cores_where_gpus_are_visible(tmp_path, monkeypatch, capsys,
                                                                 cpu_flag):  # fmt: skip
    """Runs kept off the GPUs take no GPU slot: --max_parallel is not bounded by the GPUs,
    and --gpus has nothing to pick."""
    monkeypatch.setattr(sweep, "visible_gpus", lambda: 1)
    argv = ["--sweep=s", "--grid", "seed=1,2,3", "--max_parallel=3", "--dry_run", "--",
            "--env=CartPole-v1", cpu_flag, f"--train_dir={tmp_path}"]  # fmt: skip
    assert sweep.main(argv) == 0
    assert "3 runs, 3 at a time on the CPU" in capsys.readouterr().out
    # the same runs on the GPU: one slot, so three at a time is refused
    gpu_argv = [a for a in argv if a != cpu_flag]
    assert sweep.main(gpu_argv) == 2
    assert "--max_parallel=3: 1 GPU slot(s)" in capsys.readouterr().err
    assert sweep.main([*argv[:5], "--gpus=0", *argv[5:]]) == 2
    err = capsys.readouterr().err
    assert "--gpus=0: every run trains on the CPU" in err and len(err.strip().splitlines()) == 1
    assert os.listdir(tmp_path) == []


def test_in_a_grid_of_both_kinds_the_cpu_runs_take_no_gpu_slot(tmp_path, monkeypatch, capsys):
    """One GPU, a grid of a CPU run and a GPU run: --max_parallel=2 runs both at once, the
    GPU run on GPU 0 and the CPU run with no slot; a third run that needs the GPU waits for
    it (the script stands in for the training and notes when it runs)."""
    monkeypatch.setattr(sweep, "visible_gpus", lambda: 1)
    script = tmp_path / "note_times.py"
    script.write_text(
        "import os, sys, time\n"
        "if __name__ == '__main__':\n"
        "    start = time.time()\n"
        "    time.sleep(1.5)\n"
        "    gpus = os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')\n"
        "    print(f'ran {start} {time.time()} gpus={gpus}')\n"
    )
    td = tmp_path / "td"
    argv = ["--sweep=m", "--grid", "seed=1,2", "--grid", "device=auto,cpu", "--max_parallel=2",
            f"--train_script={script}", "--progress_interval=60", "--", "--env=CartPole-v1",
            f"--train_dir={td}"]  # fmt: skip
    dry = [*argv[:7], "--dry_run", *argv[7:]]
    assert sweep.main(dry) == 0
    assert "4 runs, 2 at a time on GPU slots 0 (2 runs on the CPU, taking no slot)" in (
        capsys.readouterr().out
    )
    assert sweep.main(argv) == 0
    out = capsys.readouterr().out
    assert "start seed_1__device_cpu on the CPU" in out
    assert "start seed_1__device_auto on GPU 0" in out
    times = {}
    for run in json.loads((td / "m" / "sweep.json").read_text())["runs"]:
        line = [x for x in (td / "m" / f"{run['name']}.log").read_text().splitlines()
                if x.startswith("ran ")][0]  # fmt: skip
        start, end = (float(x) for x in line.split()[1:3])
        times[run["name"]] = (start, end)
        assert run["gpus"] == ("0" if "auto" in run["name"] else None), run
        assert line.endswith("gpus=0") == ("auto" in run["name"]), line
    overlap = lambda a, b: times[a][0] < times[b][1] and times[b][0] < times[a][1]  # noqa: E731
    # at most 2 at once, the GPU runs one after the other, a CPU run beside a GPU run
    assert not overlap("seed_1__device_auto", "seed_2__device_auto")
    assert overlap("seed_1__device_auto", "seed_1__device_cpu")
    for name, (start, _) in times.items():
        assert sum(s <= start < e for s, e in times.values()) <= 2, name


def test_runs_at_once_past_the_cores_are_noted():
    runs = [sweep.Run(f"r{i}", {}, [], cfg={"num_workers": 4, "num_policies": 2}) for i in range(3)]
    note = sweep.core_note(runs, 2, 8)
    assert note and "2 runs at once start up to 12 training processes" in note and "8 cores" in note
    assert sweep.core_note(runs, 2, 12) is None  # they fit
    assert sweep.core_note(runs, 1, 2) is None  # one at a time: the run's own business
    runs[0].state = runs[1].state = "done earlier"  # one left to run
    assert sweep.core_note(runs, 2, 8) is None


def test_a_train_script_whose_top_level_fails_is_named(tmp_path, capsys):
    script = tmp_path / "bad.py"
    script.write_text("import sys\nsys.exit(train_everything())\n")  # trains at import time
    argv = ["--sweep=s", f"--train_script={script}", "--", "--env=CartPole-v1",
            f"--train_dir={tmp_path / 'td'}"]  # fmt: skip
    assert sweep.main(argv) == 2
    err = capsys.readouterr().err
    assert "its top level failed (NameError" in err and "__main__" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "td").exists()


def test_gpu_indices_map_through_the_sweeps_own_cuda_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert cuda_ids(2) == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # the sweep was given GPUs 2 and 3
    assert cuda_ids(2) == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-a1b2, GPU-c3d4")
    assert cuda_ids(2) == ["GPU-a1b2", "GPU-c3d4"]


def test_train_dir_is_read_as_the_trainer_reads_it(monkeypatch):
    monkeypatch.setenv("HOME", "/home/u")
    assert train_dir_of(["--env=X"]) == "train_dir"
    assert train_dir_of(["--train_dir=a", "--train_dir", "b"]) == "b"  # the last one counts
    assert train_dir_of(["--train_dir=~/runs"]) == "/home/u/runs"
    with pytest.raises(SweepError, match="--train_dir after '--' is empty"):
        train_dir_of(["--train_dir="])


def test_flags_on_the_wrong_side_of_the_separator_are_named():
    assert split_tokens(["--sweep=s", "--", "--env=X"]) == (["--sweep=s"], ["--env=X"])
    with pytest.raises(SweepError, match="--env: the training flags go after '--'"):
        split_tokens(["--sweep=s", "--env=CartPole-v1"])
    with pytest.raises(SweepError, match="--max_parallel is a flag of rl-pbt-sweep"):
        split_tokens(["--sweep=s", "--", "--env=X", "--max_parallel=2"])


def test_a_finished_run_is_skipped_rerun_or_refused_by_what_changed(tmp_path, capsys):
    td = tmp_path / "td"
    own = ["--sweep=s", "--grid", "seed=1", "--dry_run", "--"]
    train = ["--env=CartPole-v1", f"--train_dir={td}", "--train_for_env_steps=1000"]
    # as a finished first start leaves it (the run's flags resolved as the sweep resolves them)
    runs = plan("s", str(td), train, {"seed": ["1"]})
    sweep.check_runs(runs)
    (td / "s" / "seed_1").mkdir(parents=True)
    (td / "s" / "seed_1" / "summary.json").write_text('{"policies": {}}')
    row = {"name": "seed_1", "state": "done", "cfg": runs[0].cfg, "seconds": 30.0}
    (td / "s" / "sweep.json").write_text(json.dumps({"runs": [row]}))
    # the same flags, in another order, with another status interval: done earlier
    again = ["--train_for_env_steps=1000", "--status_interval=3", f"--train_dir={td}",
             "--env=CartPole-v1"]  # fmt: skip
    assert sweep.main([*own, *again]) == 0
    assert "seed_1 (done earlier)" in capsys.readouterr().out
    # a larger budget: it trains further
    assert sweep.main([*own, *train[:-1], "--train_for_env_steps=2000"]) == 0
    assert "(done earlier)" not in capsys.readouterr().out
    # another learning value: refused, naming the flag and how to run it anew
    assert sweep.main([*own, *train, "--gamma=0.9"]) == 2
    err = capsys.readouterr().err
    assert "run seed_1 finished with other flags (--gamma: 0.99 -> 0.9)" in err
    assert f"delete {td / 's' / 'seed_1'}" in err
    assert changed_flags({"gamma": 0.99, "seed": 1}, {"gamma": 0.99, "seed": 1}) == []
    # its folder deleted: it runs again, with the new flags
    (td / "s" / "seed_1" / "summary.json").unlink()
    assert sweep.main([*own, *train, "--gamma=0.9"]) == 0
    assert "(done earlier)" not in capsys.readouterr().out


def test_a_sweep_named_as_a_run_of_the_trainer_is_refused(tmp_path, capsys):
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "config.json").write_text("{}")
    argv = ["--sweep=exp", "--", "--env=CartPole-v1", f"--train_dir={tmp_path}"]
    assert sweep.main(argv) == 2
    assert "is the folder of a run of rl-pbt-train" in capsys.readouterr().err
    assert os.listdir(tmp_path / "exp") == ["config.json"]


def test_an_unwritable_train_dir_is_not_called_busy(capsys):
    argv = ["--sweep=s", "--", "--env=CartPole-v1", "--train_dir=/proc/no_such_folder"]
    assert sweep.main(argv) == 2
    err = capsys.readouterr().err
    assert "another sweep" not in err and "/proc/no_such_folder" in err


def test_values_that_read_the_same_are_one_run_given_twice(tmp_path, capsys):
    argv = ["--sweep=s", "--grid", "learning_rate=1e-3,0.001", "--", "--env=CartPole-v1",
            f"--train_dir={tmp_path}"]  # fmt: skip
    assert sweep.main(argv) == 2
    err = capsys.readouterr().err
    assert "runs learning_rate_1e-3 and learning_rate_0.001 have the same flags" in err


def test_a_sweep_whose_folder_is_in_use_is_refused_in_one_line(tmp_path, capsys):
    from rl_pbt.runtime.run_lock import RunLock

    held = RunLock(str(tmp_path), "busy")
    held.acquire()
    try:
        argv = ["--sweep=busy", "--grid", "seed=1,2", "--", "--env=CartPole-v1",
                f"--train_dir={tmp_path}", "--train_for_env_steps=1000"]  # fmt: skip
        assert sweep.main(argv) == 2
    finally:
        held.release()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "another sweep or run is using" in err and "pid " in err
    assert not os.path.exists(tmp_path / "busy" / "sweep.json")
