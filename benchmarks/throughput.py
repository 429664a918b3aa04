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
import queue
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Optional, Sequence

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def process_tree(pid: int) -> list:
    """psutil.Process of `pid` and of all its descendants (empty once it has exited)."""
    import psutil

    try:
        root = psutil.Process(pid)
        return [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def tree_uss_mb(pid: int) -> float:
    import psutil

    total = 0
    for p in process_tree(pid):
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
    cmd += [x for e in getattr(args, "extra", []) for x in shlex.split(e)]
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


def _random_actions(space, rng, shape: tuple[int, ...]):
    """Random actions of a gymnasium space, `shape` of them (fast path for Discrete)."""
    n = getattr(space, "n", None)
    if n is not None and getattr(space, "shape", None) == ():
        return rng.integers(int(n), size=shape)
    return [space.sample() for _ in range(int(np.prod(shape)))]


def _legal_random(obs, space, rng) -> int:
    """A random legal action of an agent whose observation carries an `action_mask`."""
    return int(rng.choice(np.flatnonzero(np.asarray(obs["action_mask"]) > 0)))


def _masked(obs) -> bool:
    return isinstance(obs, dict) and "action_mask" in obs


def _raw_steps(env_name: str, cfg, num_envs: int, worker: int, seconds: float) -> float:
    """Agent steps/s (median of the 1 s windows in the second half) of one process stepping
    `num_envs` copies with random actions; all copies in one batched env when training would
    batch them (the env registers a batch and --batched_envs is on)."""
    from rl_pbt.envs.registry import has_batched_env, make_env, make_env_batch
    from rl_pbt.envs.wrappers import as_multiagent

    configs = [
        {"worker_index": worker, "vector_index": i, "env_id": worker * num_envs + i}
        for i in range(num_envs)
    ]
    rng = np.random.default_rng(worker)
    if getattr(cfg, "batched_envs", False) and has_batched_env(env_name):
        batch = make_env_batch(env_name, cfg, configs)
        last = [batch.reset_copy(k)[0] for k in range(num_envs)]
        n_agents, space = batch.num_agents, batch.action_space

        def step_all() -> None:
            if _masked(last[0][0]):  # legal moves only (a masked env raises on others)
                actions = [[_legal_random(o, space, rng) for o in copy] for copy in last]
            else:
                actions = _random_actions(space, rng, (num_envs, n_agents))
            out = batch.step(
                np.asarray(actions).reshape((num_envs, n_agents) + (space.shape or ()))
            )
            last[:] = list(out[0])

        closers = [batch.close]
    else:
        envs_ = [as_multiagent(make_env(env_name, cfg, c)) for c in configs]
        last = [e.reset()[0] for e in envs_]
        n_agents = envs_[0].num_agents

        def step_all() -> None:
            for k, e in enumerate(envs_):
                if _masked(last[k][0]):
                    actions = [_legal_random(o, e.action_space, rng) for o in last[k]]
                else:
                    actions = list(_random_actions(e.action_space, rng, (n_agents,)))
                last[k] = e.step(actions)[0]

        closers = [e.close for e in envs_]
    steps, start = 0, time.time()
    windows = []
    last_t, last_steps = start, 0
    while time.time() - start < seconds:
        step_all()
        steps += num_envs * n_agents
        now = time.time()
        if now - last_t >= 1.0:
            windows.append((steps - last_steps) / (now - last_t))
            last_t, last_steps = now, steps
    for close in closers:
        close()
    if not windows:  # one step of every copy took longer than the whole measurement
        return steps / max(time.time() - start, 1e-6)
    return statistics.median(windows[len(windows) // 2 :])


def _raw_worker(
    env_name: str, num_envs: int, seconds: float, worker: int, out, env_flags=()
) -> None:
    """Puts (agent steps/s, env frames per agent step) on `out`, or ("error", text)."""
    try:
        sys.path.insert(0, ROOT)
        import envs  # noqa: F401  (registers the built-in envs)
        from rl_pbt.config.parse import parse_cfg

        cfg = parse_cfg([f"--env={env_name}", *env_flags])
        # a working folder of its own: envs that write files there (VizDoom's _vizdoom/)
        # must not race the other workers for them
        with tempfile.TemporaryDirectory(prefix="raw_rate_") as cwd:
            os.chdir(cwd)
            rate = _raw_steps(env_name, cfg, num_envs, worker, seconds)
            os.chdir(ROOT)
        out.put((rate, cfg.env_frameskip))
    except BaseException as e:  # the parent waits on the queue: always answer
        out.put(("error", f"{type(e).__name__}: {e}"))


def raw_env_rate(
    env_name: str,
    num_workers: int,
    num_envs: int,
    frameskip: Optional[int] = None,
    seconds: float = 10.0,
    env_flags: Sequence[str] = (),
) -> float:
    """Raw env frames/s of `num_workers` processes x `num_envs` copies with random actions
    and no learning: the ceiling of training with the same layout. `env_flags` are training
    flags the envs are built with (e.g. --doom_resolution); `frameskip` counts env frames per
    agent step (None: the env's --env_frameskip, as training counts them)."""
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [
        ctx.Process(target=_raw_worker, args=(env_name, num_envs, seconds, w, q, tuple(env_flags)))
        for w in range(num_workers)
    ]
    for p in procs:
        p.start()
    answers, deadline = [], time.time() + seconds + 300
    try:
        while len(answers) < len(procs):
            try:
                answers.append(q.get(timeout=1.0))
            except queue.Empty:
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if dead or time.time() > deadline:
                    why = f"exit codes {dead}" if dead else "no answer in time"
                    answers.append(("error", f"a worker stopped without a result ({why})"))
                    break
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    errors = [a[1] for a in answers if a[0] == "error"]
    if errors:
        raise RuntimeError(f"raw rate of {env_name}: {errors[0]}")
    skip = frameskip if frameskip is not None else answers[0][1]
    return sum(rate for rate, _ in answers) * skip


def raw_rate(args) -> float:
    flags = [f for f in args.extra if f.startswith("--batched_envs")]  # the same env layout
    return raw_env_rate(args.env, args.num_workers, args.num_envs, args.frameskip, env_flags=flags)


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
    parser.add_argument(
        "--extra",
        action="append",
        default=[],
        help="more training flags, e.g. --extra=--mp_start_method=forkserver (repeatable)",
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
