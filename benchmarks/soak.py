"""Soak test: a long arena population run (PBT and frozen snapshots on) with faults injected on
a schedule, watched from outside.

    python benchmarks/soak.py                       # 60 minutes, a worker killed every 10
    python benchmarks/soak.py --minutes 10 --kill_every 120

Every `--sample_every` seconds it records the whole process tree's unique memory (USS) and open
file descriptors. Every `--kill_every` seconds it sends SIGKILL to one rollout worker (in turn,
read from the run's pids.json) and times its recovery: until pids.json names a new process for
that worker and the population's trained env steps (stats/scalars.jsonl) have moved past where
they were at the kill. At the end it prints:

- memory after warm-up (the first `--warmup` share of the samples is left out): least-squares
  slope in MiB per hour and the spread around the median, in percent;
- open file descriptors after warm-up: first, last, max;
- every fault with its recovery time (or "not recovered");
- the run's exit status, its worker restarts (summary.json) against the kills sent.

Goal (reliability issue): memory within +-5% after warm-up, no fd growth, every fault recovered
within 30 s, nothing lost (exit 0, one restart per kill).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.throughput import ROOT, process_tree, tree_uss_mb  # noqa: E402
from rl_pbt.logging.files import read_scalars, scalars_path  # noqa: E402


def tree_fds(pid: int) -> int:
    import psutil

    total = 0
    for p in process_tree(pid):
        try:
            total += p.num_fds()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def fds_by_role(pid: int, exp_dir: str) -> dict[str, int]:
    """Open fds per process of the tree: the runner ("main"), each child named in pids.json,
    and the rest together ("other": the forkserver, multiprocessing's resource tracker)."""
    import psutil

    names = {v: k for k, v in read_pids(exp_dir).items() if isinstance(v, int)}
    names[pid] = "main"
    out: dict[str, int] = {}
    for p in process_tree(pid):
        try:
            n = p.num_fds()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        role = names.get(p.pid, "other")
        out[role] = out.get(role, 0) + n
    return out


def read_pids(exp_dir: str) -> dict:
    try:
        with open(os.path.join(exp_dir, "pids.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def trained_steps(exp_dir: str) -> int:
    """The population's trained env steps, from the newest line per policy of the scalar log."""
    records, _ = read_scalars(scalars_path(exp_dir))
    return sum({rec["policy"]: int(rec["env_steps"]) for rec in records}.values())


def slope_and_spread(samples: list[tuple[float, float]]) -> tuple[float, float]:
    """(least-squares slope per hour, max |deviation| from the median in percent)."""
    t = np.array([s[0] for s in samples])
    v = np.array([s[1] for s in samples])
    slope = float(np.polyfit(t, v, 1)[0]) * 3600 if len(samples) > 1 else 0.0
    median = float(np.median(v))
    spread = float(np.max(np.abs(v - median)) / median * 100) if median else 0.0
    return slope, spread


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--kill_every", type=float, default=600.0, help="seconds; 0: no faults")
    ap.add_argument("--sample_every", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=0.2, help="share of samples left out")
    ap.add_argument("--recovery_timeout", type=float, default=120.0)
    ap.add_argument("--num_policies", type=int, default=8)
    ap.add_argument("--num_workers", type=int, default=2)
    ap.add_argument("--train_dir", default=None)
    args = ap.parse_args(argv)

    train_dir = args.train_dir or tempfile.mkdtemp(prefix="soak_")
    os.makedirs(train_dir, exist_ok=True)
    exp_dir = os.path.join(train_dir, "soak")
    seconds = int(args.minutes * 60)
    cmd = [
        sys.executable, "-m", "launch.train", "--env=arena_duel", "--with_pbt",
        f"--num_policies={args.num_policies}", f"--num_workers={args.num_workers}",
        "--num_envs_per_worker=32", "--pbt_period_env_steps=200000",
        "--pbt_start_mutation=200000", "--selfplay_snapshot_prob=0.2",
        "--selfplay_snapshot_every_env_steps=500000", f"--train_for_seconds={seconds}",
        "--save_every_sec=60", "--status_interval=60", f"--train_dir={train_dir}",
        "--experiment=soak",
    ]  # fmt: skip
    log_path = exp_dir + ".log"
    print(f"soak: {args.minutes:g} min, log {log_path}", flush=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    start = time.time()
    samples: list[tuple[float, float, int]] = []  # (time, USS MiB, fds)
    roles: list[dict[str, int]] = []  # open fds per process, one dict per sample
    faults: list[dict] = []
    pending: Optional[dict] = None  # the fault being recovered from
    next_sample, next_kill, victim = start, start + (args.kill_every or 1e18), 0
    try:
        while proc.poll() is None:
            now = time.time()
            if now >= next_sample:
                samples.append((now - start, tree_uss_mb(proc.pid), tree_fds(proc.pid)))
                roles.append(fds_by_role(proc.pid, exp_dir))
                next_sample += args.sample_every
            if pending is not None:
                pids = read_pids(exp_dir)
                renewed = pids.get(pending["name"]) not in (None, pending["pid"])
                if renewed and trained_steps(exp_dir) > pending["steps"]:
                    pending["recovery_s"] = now - pending["at"]
                    pending = None
                elif now - pending["at"] > args.recovery_timeout:
                    pending = None  # stays "not recovered"
            if pending is None and now >= next_kill and now - start < seconds - 60:
                # (no kill in the last minute: its recovery would not be seen)
                pids = read_pids(exp_dir)
                workers = sorted(k for k in pids if k.startswith("rollout_worker_"))
                if workers:
                    name = workers[victim % len(workers)]
                    victim += 1
                    fault = {"at": now, "t": now - start, "name": name, "pid": pids[name]}
                    fault["steps"] = trained_steps(exp_dir)
                    try:
                        os.kill(fault["pid"], signal.SIGKILL)
                        faults.append(fault)
                        pending = fault
                    except ProcessLookupError:
                        pass
                next_kill += args.kill_every
            time.sleep(1.0)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)

    after = samples[int(len(samples) * args.warmup) :]
    print(f"\nrun exit status {proc.returncode} after {time.time() - start:.0f} s")
    if after:
        mem_slope, mem_spread = slope_and_spread([(t, m) for t, m, _ in after])
        fds = [f for _, _, f in after]
        print(
            f"memory after warm-up ({len(after)} samples): median "
            f"{np.median([m for _, m, _ in after]):.0f} MiB, slope {mem_slope:+.1f} MiB/h, "
            f"spread +-{mem_spread:.1f}% of the median"
        )
        print(f"open fds after warm-up: first {fds[0]}, last {fds[-1]}, max {max(fds)}")
        first, last = roles[int(len(samples) * args.warmup)], roles[-1]
        changed = {
            r: (first.get(r, 0), last.get(r, 0))
            for r in sorted(set(first) | set(last))
            if first.get(r, 0) != last.get(r, 0)
        }
        print(
            "open fds per process, first -> last after warm-up (those that changed): "
            + (", ".join(f"{r} {a} -> {b}" for r, (a, b) in changed.items()) or "none")
        )
    print("\n| t (s) | killed | recovered in (s) |\n|---|---|---|")
    for f in faults:
        rec = f.get("recovery_s")
        took = "not recovered" if rec is None else f"{rec:.1f}"
        print(f"| {f['t']:.0f} | {f['name']} | {took} |")
    try:
        with open(os.path.join(exp_dir, "summary.json")) as f:
            summary = json.load(f)
        restarts = summary.get("worker_restarts")
        frames = summary.get("frames")
        print(f"\nworker restarts {restarts} for {len(faults)} kills; {frames:,} frames in all")
        if not summary.get("final", True):  # one written during the run, which did not stop
            print("(summary.json from during the run: the run did not stop cleanly)")
    except (OSError, ValueError):
        print("\nno summary.json: the run did not stop cleanly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
