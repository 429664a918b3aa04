"""rl-pbt-sweep on real runs: a grid of two CartPole runs side by side, each in its own
experiment, ranked at the end and skipped when the sweep runs again; a run that fails is named
with the end of its log while the others finish; Ctrl-C stops every run with its work saved,
and the same command resumes them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from launch.sweep import log_share

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--env=CartPole-v1", "--device=cpu", "--num_workers=1", "--num_envs_per_worker=4",
        "--rollout=16", "--batch_size=64", "--encoder_mlp_layers", "8",
        "--save_every_sec=5"]  # fmt: skip


def sweep(*argv: str, timeout: float = 240) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "launch.sweep", *argv]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def states(folder: Path) -> dict[str, str]:
    runs = json.loads((folder / "sweep.json").read_text())["runs"]
    return {r["name"]: r["state"] for r in runs}


def test_a_grid_runs_side_by_side_ranks_and_is_not_run_twice(tmp_path):
    argv = ["--sweep=lr", "--grid", "learning_rate=1e-3,3e-4", "--max_parallel=2",
            "--progress_interval=2", "--", *TINY, "--train_for_env_steps=3000",
            f"--train_dir={tmp_path}"]  # fmt: skip
    done = sweep(*argv)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    folder = tmp_path / "lr"
    names = ["learning_rate_1e-3", "learning_rate_3e-4"]
    for name in names:
        summary = json.loads((folder / name / "summary.json").read_text())
        assert (
            summary["final"] and min(p["env_steps"] for p in summary["policies"].values()) >= 3000
        )
        cfg = json.loads((folder / name / "config.json").read_text())
        assert cfg["learning_rate"] == float(name.split("_")[-1])
        assert f"start {name}" in out and f"done {name} in" in out
        assert (folder / f"{name}.log").stat().st_size > 0
    # both started before either finished: side by side
    assert out.index(f"start {names[1]}") < out.index(f"done {names[0]}")
    assert out.index(f"start {names[1]}") < out.index(f"done {names[1]}")
    assert states(folder) == {n: "done" for n in names}
    table = out[out.index("rank  run") :]
    assert all(name in table for name in names) and "p0 return " in table
    # the same command again: nothing to run
    began = time.time()
    again = sweep(*argv)
    assert again.returncode == 0 and "2 runs (2 done earlier)" in again.stdout
    assert "start " not in again.stdout and time.time() - began < 60
    assert states(folder) == {n: "done earlier" for n in names}


def test_a_failing_run_is_named_and_the_others_finish(tmp_path):
    script = tmp_path / "my_train.py"
    script.write_text(
        textwrap.dedent("""
        import sys
        import gymnasium
        from rl_pbt import register_env

        def make(full_env_name, cfg, env_config, render_mode=None):
            if cfg.seed == 2:
                raise RuntimeError("seed 2 breaks this env")
            return gymnasium.make("CartPole-v1")

        register_env("my_cartpole", make)

        if __name__ == "__main__":
            from launch import train
            sys.exit(train.main())
    """)
    )
    flags = [a if a != "--env=CartPole-v1" else "--env=my_cartpole" for a in TINY]
    done = sweep("--sweep=s", "--grid", "seed=1,2", f"--train_script={script}", "--",
                 *flags, "--train_for_env_steps=2000", f"--train_dir={tmp_path}")  # fmt: skip
    out = done.stdout
    assert done.returncode == 1, out[-3000:] + done.stderr[-3000:]
    assert states(tmp_path / "s") == {"seed_1": "done", "seed_2": "failed"}
    failed = out[out.index("FAILED seed_2: exit") :]
    assert "seed 2 breaks this env" in failed  # the end of its log
    assert "1 of 2 runs failed: seed_2" in out


def test_ctrl_c_stops_every_run_saved_and_the_same_command_resumes(tmp_path):
    argv = ["--sweep=long", "--grid", "seed=1,2", "--max_parallel=2", "--", *TINY,
            "--train_for_env_steps=40000", f"--train_dir={tmp_path}"]  # fmt: skip
    cmd = [sys.executable, "-m", "launch.sweep", *argv]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip
    folder = tmp_path / "long"
    deadline = time.time() + 120
    while time.time() < deadline:  # both runs past 2% of their budget
        shares = [log_share(str(folder / f"seed_{s}.log")) for s in (1, 2)]
        if all(share is not None and share >= 0.02 for share in shares):
            break
        time.sleep(0.5)
    else:
        proc.kill()
        raise AssertionError("the runs did not start training")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=150)
    assert proc.returncode == 1, out[-3000:]
    assert states(folder) == {"seed_1": "stopped", "seed_2": "stopped"}
    assert "stopped; run the same command again" in out
    steps = {}
    for s in (1, 2):
        assert any(p.startswith("checkpoint_p0") for p in os.listdir(folder / f"seed_{s}"))
        summary = json.loads((folder / f"seed_{s}" / "summary.json").read_text())
        steps[s] = summary["policies"]["0"]["env_steps"]
        assert 0 < steps[s] < 40000
    # the same command resumes both runs from what they saved
    resumed = sweep(*argv)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert states(folder) == {"seed_1": "done", "seed_2": "done"}
    for s in (1, 2):
        log = (folder / f"seed_{s}.log").read_text()
        assert "start 2 of this run" in log  # the second start resumed the first's folder


def test_a_sweep_killed_outright_stops_its_runs_with_their_work_saved(tmp_path):
    """SIGKILL gives the sweep no chance to stop its runs: the kernel sends each a SIGTERM when
    the sweep's process is gone, and they save and stop instead of training on alone."""
    from rl_pbt.config.parse import ConfigError
    from rl_pbt.runtime.run_lock import RunLock

    argv = ["--sweep=k", "--grid", "seed=1,2", "--max_parallel=2", "--", *TINY,
            "--train_for_env_steps=400000", f"--train_dir={tmp_path}"]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "launch.sweep", *argv], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    folder = tmp_path / "k"
    deadline = time.time() + 120
    while time.time() < deadline:  # both runs have trained (not only started: "0 frames")
        shares = [log_share(str(folder / f"seed_{s}.log")) for s in (1, 2)]
        if all(share is not None and share > 0 for share in shares):
            break
        time.sleep(0.5)
    else:
        proc.kill()
        raise AssertionError("the runs did not start training")
    proc.kill()
    proc.wait(10)
    deadline, free = time.time() + 90, set()
    while time.time() < deadline and len(free) < 2:
        for s in (1, 2):
            try:
                RunLock(str(folder), f"seed_{s}").acquire()  # held while the run lives
                free.add(s)
            except ConfigError:
                pass
        time.sleep(0.5)
    assert free == {1, 2}, "runs went on training after their sweep was killed"
    for s in (1, 2):
        summary = json.loads((folder / f"seed_{s}" / "summary.json").read_text())
        assert 0 < summary["policies"]["0"]["env_steps"] < 400000
        assert any(p.startswith("checkpoint_p0") for p in os.listdir(folder / f"seed_{s}"))


def test_a_closed_output_does_not_stop_the_sweep(tmp_path):
    """`rl-pbt-sweep ... | head -1`: once nobody reads its output the sweep goes on silently
    and every run still trains."""
    argv = ["--sweep=p", "--grid", "seed=1,2,3", "--", *TINY, "--train_for_env_steps=2000",
            f"--train_dir={tmp_path}"]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "launch.sweep", *argv], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    proc.stdout.readline()
    proc.stdout.close()  # the reader goes away after the first line
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert b"Traceback" not in err
    assert states(tmp_path / "p") == {f"seed_{s}": "done" for s in (1, 2, 3)}
