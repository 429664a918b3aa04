"""Throughput benchmark: steady-state env frames/s of training for several population sizes,
the raw env rate of the same worker layout (random actions, no learning: the ceiling), and
the peak unique memory (USS) of the whole process tree.

    python benchmarks/throughput.py                       # CartPole-v1, 1/2/4/8 policies
    python benchmarks/throughput.py --policies 1 8 --seconds 60 --with_pbt

Needs psutil (`pip install -e ".[bench]"`). Figures are medians of the status windows in the
second half of each run; compare ratios measured in one run of this script.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tree_uss_mb(pid: int) -> float:
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for p in procs:
        try:
            total += p.memory_full_info().uss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total / 2**20


def train_run(args, num_policies: int, train_dir: str) -> dict:
    exp = f"bench_p{num_policies}"
    cmd = [
        sys.executable,
        "-m",
        "launch.train",
        f"--env={args.env}",
        f"--num_workers={args.num_workers}",
        f"--num_envs_per_worker={args.num_envs}",
        f"--rollout={args.rollout}",
        f"--batch_size={args.batch_size}",
        "--encoder_mlp_layers",
        *[str(x) for x in args.mlp],
        f"--num_policies={num_policies}",
        f"--train_for_seconds={args.seconds}",
        f"--train_dir={train_dir}",
        f"--experiment={exp}",
        "--status_interval=2",
        "--restart_behavior=overwrite",
        "--save_every_sec=100000",
    ]
    if args.with_pbt and num_policies > 1:
        cmd += ["--with_pbt", "--pbt_period_env_steps=200000", "--pbt_start_mutation=200000"]
    log_path = os.path.join(train_dir, f"{exp}.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        peak = 0.0
        while proc.poll() is None:
            time.sleep(1.0)
            peak = max(peak, tree_uss_mb(proc.pid))
    if proc.returncode != 0:
        with open(log_path) as f:
            print(f.read()[-3000:])
        raise RuntimeError(f"training run with {num_policies} policies failed")
    with open(os.path.join(train_dir, exp, "summary.json")) as f:
        summary = json.load(f)
    return {"fps": summary["fps_median_second_half"], "peak_uss_mb": peak}


def _raw_worker(env_name: str, num_envs: int, seconds: float, worker: int, out) -> None:
    sys.path.insert(0, ROOT)
    import envs  # noqa: F401  (registers the built-in envs)
    from rl_pbt.envs.registry import make_env
    from rl_pbt.envs.wrappers import as_multiagent

    envs_ = [
        as_multiagent(
            make_env(
                env_name,
                None,
                {"worker_index": worker, "vector_index": i, "env_id": worker * num_envs + i},
            )
        )
        for i in range(num_envs)
    ]
    for e in envs_:
        e.reset()
    n_agents = envs_[0].num_agents
    steps, start = 0, time.time()
    windows = []
    last_t, last_steps = start, 0
    while time.time() - start < seconds:
        for e in envs_:
            e.step([e.action_space.sample() for _ in range(n_agents)])
        steps += num_envs * n_agents
        now = time.time()
        if now - last_t >= 1.0:
            windows.append((steps - last_steps) / (now - last_t))
            last_t, last_steps = now, steps
    for e in envs_:
        e.close()
    out.put(statistics.median(windows[len(windows) // 2 :]))


def raw_rate(args) -> float:
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [
        ctx.Process(target=_raw_worker, args=(args.env, args.num_envs, 10.0, w, q))
        for w in range(args.num_workers)
    ]
    for p in procs:
        p.start()
    rates = [q.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(rates) * args.frameskip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--policies", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--seconds", type=int, default=45)
    parser.add_argument("--num_workers", type=int, default=2)
    parser.add_argument("--num_envs", type=int, default=8)
    parser.add_argument("--rollout", type=int, default=32)
    parser.add_argument("--batch_size", type=int, default=512)
    parser.add_argument("--mlp", type=int, nargs="+", default=[512, 512])
    parser.add_argument("--with_pbt", action="store_true", help="PBT on for populations > 1")
    parser.add_argument(
        "--frameskip",
        type=int,
        default=1,
        help="env frames per agent step, to count raw frames like training",
    )
    args = parser.parse_args()

    print(
        f"env {args.env}, {args.num_workers} workers x {args.num_envs} envs, rollout "
        f"{args.rollout}, batch {args.batch_size}, MLP {args.mlp}, no RNN, "
        f"{os.cpu_count()} cores, PBT {'on' if args.with_pbt else 'off'}",
        flush=True,
    )
    raw = raw_rate(args)
    print(
        f"raw env rate, random actions, same layout: {raw:,.0f} frames/s (x{args.frameskip} "
        f"frameskip)",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory() as train_dir:
        for n in args.policies:
            r = train_run(args, n, train_dir)
            rows.append((n, r))
            print(
                f"policies {n}: {r['fps']:,.0f} frames/s, peak unique memory "
                f"{r['peak_uss_mb']:,.0f} MiB",
                flush=True,
            )
    base = rows[0][1]["fps"]
    print("\n| policies | frames/s | vs first | peak USS (MiB) |")
    print("|---|---|---|---|")
    for n, r in rows:
        print(f"| {n} | {r['fps']:,.0f} | {r['fps'] / base:.0%} | {r['peak_uss_mb']:,.0f} |")
    print(f"| raw env | {raw:,.0f} | | |")


if __name__ == "__main__":
    main()
