"""Stops that used to lose work, run for real and counted: what a run keeps when it is stopped
at a bad moment.

    python benchmarks/stop_scenarios.py --repeats 3                 # this checkout
    python benchmarks/stop_scenarios.py --repeats 3 --code OLD_TREE  # another checkout of it

Scenarios (CartPole, CPU, each run in its own process group):

- `double_ctrl_c`: one policy with a 16.8M-parameter MLP (its checkpoint, 200 MB with the
  optimiser's state, takes a moment to write); 15 s in, SIGINT to the whole group, and again
  0.2 s later, during the save. Kept: a checkpoint is there, and no temp file.
- `copy_at_stop`: three policies with PBT from the start (a copy each period); SIGTERM to the
  main process as soon as `pbt/lineage.jsonl` records a copy. Kept: every member's newest
  checkpoint holds the learning values `pbt/state.json` gives it.

Prints one line per run and a table of runs kept per scenario.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COMMON = ["--env=CartPole-v1", "--save_every_sec=1000", "--seed=1", "--train_for_seconds=120"]
DOUBLE = ["--num_policies=1", "--num_workers=1", "--num_envs_per_worker=8", "--rollout=16"]
DOUBLE += ["--batch_size=256", "--encoder_mlp_layers", "4096,4096"]
COPY = ["--num_policies=3", "--num_workers=2", "--num_envs_per_worker=4", "--rollout=16"]
COPY += ["--batch_size=128", "--encoder_mlp_layers", "32", "--with_pbt"]
COPY += ["--pbt_period_env_steps=3000", "--pbt_start_mutation=0", "--pbt_replace_fraction=0.5"]
COPY += ["--pbt_replace_reward_gap=0", "--pbt_mutation_rate=1.0"]


def start(code: str, train_dir: str, flags: list[str]) -> subprocess.Popen:
    argv = [sys.executable, "-m", "launch.train", *COMMON, *flags, f"--train_dir={train_dir}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([code, os.environ.get("PYTHONPATH", "")]))
    log = open(os.path.join(train_dir, "log.txt"), "w")
    return subprocess.Popen(
        argv + ["--experiment=x"], cwd=code, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


def wait(proc: subprocess.Popen, timeout: float) -> None:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def double_ctrl_c(code: str, train_dir: str) -> tuple[bool, str]:
    proc = start(code, train_dir, DOUBLE)
    exp = os.path.join(train_dir, "x")
    t0 = time.time()
    while time.time() - t0 < 90 and not os.path.isfile(os.path.join(exp, "pids.json")):
        time.sleep(0.2)
    time.sleep(15)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    wait(proc, 90)
    folder = os.path.join(exp, "checkpoint_p0")
    kept = glob.glob(os.path.join(folder, "checkpoint_*.pth"))
    temps = glob.glob(os.path.join(folder, ".tmp*"))
    return bool(kept) and not temps, f"{len(kept)} checkpoint(s), {len(temps)} temp file(s)"


def copy_at_stop(code: str, train_dir: str) -> tuple[bool, str]:
    proc = start(code, train_dir, COPY)
    exp = os.path.join(train_dir, "x")
    lineage = os.path.join(exp, "pbt", "lineage.jsonl")
    t0 = time.time()
    copied = None
    while time.time() - t0 < 100 and proc.poll() is None and copied is None:
        if os.path.isfile(lineage):
            with open(lineage) as f:
                events = [json.loads(line) for line in f if line.strip().endswith("}")]
            copied = next((e for e in events if e["action"] == "replace"), None)
        time.sleep(0.005)
    if copied is None:
        wait(proc, 1)
        return False, "no copy was decided"
    os.kill(proc.pid, signal.SIGTERM)
    wait(proc, 100)
    sys.path.insert(0, code)
    from rl_pbt.learning.checkpoints import load_latest_checkpoint

    with open(os.path.join(exp, "pbt", "state.json")) as f:
        state = json.load(f)
    wrong = []
    for p in range(3):
        _, checkpoint = load_latest_checkpoint(os.path.join(exp, f"checkpoint_p{p}"))
        lr = checkpoint["hparams"]["learning_rate"]
        if abs(lr - state["hparams"][p]["learning_rate"]) > 1e-12:
            wrong.append(f"p{p}")
    what = f"copy p{copied['source']} -> p{copied['policy']}"
    return not wrong, what + (f"; {', '.join(wrong)} hold other values" if wrong else "")


SCENARIOS = {"double_ctrl_c": double_ctrl_c, "copy_at_stop": copy_at_stop}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--code", default=ROOT, help="the checkout to run (default: this one)")
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    args = ap.parse_args()
    code = os.path.abspath(args.code)
    kept = {name: 0 for name in args.scenarios}
    for name in args.scenarios:
        for i in range(args.repeats):
            train_dir = tempfile.mkdtemp(prefix=f"stop_{name}_")
            try:
                ok, what = SCENARIOS[name](code, train_dir)
            finally:
                shutil.rmtree(train_dir, ignore_errors=True)
            kept[name] += ok
            print(f"{name} run {i + 1}: {'kept' if ok else 'LOST'} ({what})", flush=True)
    print(f"\ncode: {code}")
    print("| scenario | runs that kept everything |\n|---|---|")
    for name in args.scenarios:
        print(f"| {name} | {kept[name]} of {args.repeats} |")


if __name__ == "__main__":
    main()
