"""Throughput of training on a GPU (or the CPU) per workload, population size and inference mode.

For each (workload, policies, inference) it runs `python -m launch.train ... --inference=X
--device=D --train_for_seconds=S` and prints one table row:

- env frames/s: median of the status windows in the second half of the run (summary.json);
- learner samples/s: samples the learners trained on per second (the policies' trained env
  steps in its scalar log stats/scalars.jsonl, divided by the frameskip), over the second
  half of the run;
- infer batch: mean number of actors per forward pass of the inference processes
  (summary.json `inference_batch_size`; n/a when the run wrote none, as local inference does);
- GPU MiB: peak GPU memory of the training process tree (needs `pip install nvidia-ml-py` and
  a GPU; n/a otherwise; where NVML cannot see the tree's processes, e.g. in a container, the
  growth of the devices' used memory during the run);
- peak USS MiB: peak unique memory of the whole process tree;
- raw ceiling: env frames/s of the same workers x envs with random actions and no learning
  (measured once per workload and layout), and the fraction of it the training run reached.

After the table, for each workload and inference mode: the largest population's frames/s
relative to the smallest one's (1 policy by default). A run that fails shows the last lines
of its output in its row; the benchmark goes on with the next one.

    python benchmarks/gpu_throughput.py                                   # everything, 45 s runs
    python benchmarks/gpu_throughput.py --envs doom_basic_128x72 --policies 1 2 4 8 \\
        --num_workers 16 --num_envs 16 --seconds 90
    python benchmarks/gpu_throughput.py --envs CartPole-v1 doom_basic_128x72 --policies 1 2 \\
        --inference local --device=cpu --seconds 15                       # a CPU-only machine
    python benchmarks/gpu_throughput.py --envs arena_duel --extra="--amp=True"

Workloads: doom_basic_128x72 and doom_basic_160x120 (conv encoder, frameskip 4), arena_duel
(self-play, batched envs), CartPole-v1 (MLP). Needs psutil (`pip install -e ".[bench]"`);
compare figures measured in one run of this script on one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.throughput import ROOT, process_tree, raw_env_rate, tree_uss_mb  # noqa: E402
from rl_pbt.logging.files import read_scalars, scalars_path  # noqa: E402

# workload key -> (env name, flags of the training run and of its raw ceiling)
WORKLOADS: dict[str, tuple[str, list[str]]] = {
    "doom_basic_128x72": (
        "doom_basic",
        [
            "--doom_resolution=128x72",
            "--env_frameskip=4",
            "--encoder_conv_architecture=convnet_simple",
        ],
    ),
    "doom_basic_160x120": (
        "doom_basic",
        [
            "--doom_resolution=160x120",
            "--env_frameskip=4",
            "--encoder_conv_architecture=convnet_simple",
        ],
    ),
    "arena_duel": ("arena_duel", []),
    "CartPole-v1": ("CartPole-v1", ["--batch_size=512"]),
}

STARTUP_GRACE_S = 240  # start-up and shutdown time a run may take beyond --seconds


@dataclass
class RunResult:
    fps: Optional[float] = None
    samples_per_s: Optional[float] = None
    inference_batch: object = None  # summary.json's inference_batch_size, when present
    gpu_mb: Optional[float] = None
    peak_uss_mb: float = 0.0
    error: Optional[str] = None  # why the run failed; None when it succeeded
    status_lines: list[tuple[float, int]] = field(default_factory=list)


class GpuMemory:
    """Peak GPU memory of a process tree through NVML; `available` is False without
    nvidia-ml-py or without a GPU."""

    def __init__(self) -> None:
        self.available = False
        self.names: list[str] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [
                pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
            ]
            self.names = [_text(pynvml.nvmlDeviceGetName(h)) for h in self.handles]
            self.available = bool(self.handles)
        except Exception:  # not installed, no driver, no device: no GPU figures
            self.available = False
        self.baseline = 0.0

    def _used_mb(self) -> float:
        return sum(self.nvml.nvmlDeviceGetMemoryInfo(h).used for h in self.handles) / 2**20

    def start(self) -> None:
        if self.available:
            self.baseline = self._used_mb()

    def sample(self, pid: int) -> Optional[float]:
        """GPU MiB held by `pid`'s tree now (None without NVML)."""
        if not self.available:
            return None
        try:
            pids = {p.pid for p in process_tree(pid)}
            total, seen = 0, False
            for h in self.handles:
                for info in self.nvml.nvmlDeviceGetComputeRunningProcesses(h):
                    if info.pid in pids:
                        seen = True
                        total += info.usedGpuMemory or 0
            if seen:
                return total / 2**20
            return max(0.0, self._used_mb() - self.baseline)
        except self.nvml.NVMLError:
            return None


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _read_lines(stream, log, lines: list[tuple[float, str]]) -> None:
    """Copy the run's output to its log, remembering each line with its arrival time."""
    for line in stream:
        lines.append((time.time(), line.rstrip("\n")))
        log.write(line)
        log.flush()


def learner_rate(status: list[tuple[float, int]], frameskip: int) -> Optional[float]:
    """Trained samples/s in the second half of the run, from the status lines (arrival time,
    trained env steps of all policies). The figure only moves when a learner reports an
    update, so the rate is taken between lines where it moved: from the last such line of the
    first half to the last one (the first and last of the run when the second half has none).
    The last line, printed at shutdown, is left out."""
    if len(status) >= 3:
        status = status[:-1]
    moved = [b for a, b in zip(status, status[1:]) if b[1] != a[1]]
    if len(moved) < 2:
        return None
    middle = status[len(status) // 2][0]
    first_half = [p for p in moved if p[0] <= middle]
    start, end = (first_half[-1] if first_half else moved[0]), moved[-1]
    if start is end:
        start = moved[0]
    if end[0] <= start[0]:
        return None
    return (end[1] - start[1]) / (end[0] - start[0]) / frameskip


def _scalar_points(exp_dir: str) -> list[tuple[float, int]]:
    """(time, trained env steps of all policies) at each summary write of the run's scalar
    log (stats/scalars.jsonl: one line per policy and write)."""
    latest: dict[int, int] = {}
    points: list[tuple[float, int]] = []
    for rec in read_scalars(scalars_path(exp_dir))[0]:  # a torn last line is skipped
        latest[rec["policy"]] = int(rec["env_steps"])
        points.append((float(rec.get("time", 0.0)), sum(latest.values())))
    return points


def _failure_text(out_lines: list[tuple[float, str]], err_path: str, why: str) -> str:
    with open(err_path, errors="replace") as f:
        err = [ln.strip() for ln in f if ln.strip()]
    errors = [ln.strip() for _, ln in out_lines if "ERROR" in ln]
    tail = errors[-2:] + err[-3:] or [ln.strip() for _, ln in out_lines if ln.strip()][-3:]
    text = " / ".join(tail) if tail else "no output"
    return f"{why}: {text}"[:400].replace("|", "/")


def _stop_tree(proc: subprocess.Popen) -> None:
    """Kill the run's whole process group (it was started in a session of its own)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def train_run(cmd: list[str], exp_dir: str, seconds: int, gpu: GpuMemory) -> RunResult:
    """Run `cmd` (a launch.train command writing to `exp_dir`), sampling memory every second;
    output in `{exp_dir}.log` and `{exp_dir}.err`."""
    res = RunResult()
    out_lines: list[tuple[float, str]] = []
    err_path = exp_dir + ".err"
    gpu.start()
    with open(exp_dir + ".log", "w") as log, open(err_path, "w") as err:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        reader = threading.Thread(
            target=_read_lines, args=(proc.stdout, log, out_lines), daemon=True
        )
        reader.start()
        deadline = time.time() + seconds + STARTUP_GRACE_S
        timed_out = False
        try:
            while proc.poll() is None:
                time.sleep(1.0)
                res.peak_uss_mb = max(res.peak_uss_mb, tree_uss_mb(proc.pid))
                g = gpu.sample(proc.pid)
                if g is not None:
                    res.gpu_mb = max(res.gpu_mb or 0.0, g)
                if time.time() > deadline:
                    timed_out = True
                    _stop_tree(proc)
        except BaseException:
            _stop_tree(proc)
            raise
        finally:
            reader.join(timeout=30)
    summary_path = os.path.join(exp_dir, "summary.json")
    if timed_out:
        why = f"timed out after {seconds}+{STARTUP_GRACE_S} s"
        res.error = _failure_text(out_lines, err_path, why)
    elif proc.returncode != 0:
        res.error = _failure_text(out_lines, err_path, f"FAILED (exit code {proc.returncode})")
    elif not os.path.exists(summary_path):
        res.error = _failure_text(out_lines, err_path, "FAILED (no summary.json)")
    if res.error:
        return res
    with open(summary_path) as f:
        summary = json.load(f)
    frameskip = 1
    cfg_path = os.path.join(exp_dir, "config.json")
    if os.path.exists(cfg_path):
        with open(cfg_path) as f:
            frameskip = int(json.load(f).get("env_frameskip", 1))
    res.fps = summary.get("fps_median_second_half")
    res.inference_batch = summary.get("inference_batch_size")
    res.status_lines = _scalar_points(exp_dir)
    res.samples_per_s = learner_rate(res.status_lines, frameskip)
    return res


def _num(v: Optional[float], digits: int = 0) -> str:
    return "n/a" if v is None else f"{v:,.{digits}f}"


def _batch_text(v) -> str:
    """summary.json's inference_batch_size: a number, or one per device (list or dict)."""
    if v is None:
        return "n/a"
    if isinstance(v, dict):
        v = list(v.values())
    if isinstance(v, (list, tuple)):
        return "/".join(_batch_text(x) for x in v) or "n/a"
    try:
        return f"{float(v):.1f}"
    except (TypeError, ValueError):
        return str(v)


HEADER = (
    "| env | policies | inference | env frames/s | learner samples/s | infer batch | GPU MiB "
    "| peak USS MiB | raw ceiling | of ceiling |"
)


def table_row(key: str, n: int, inference: str, r: RunResult, raw: Optional[float]) -> str:
    cells = [key, str(n), inference]
    if r.error:
        cells += [r.error, "", "", _num(r.gpu_mb), _num(r.peak_uss_mb), _num(raw), ""]
    else:
        frac = f"{r.fps / raw:.2f}" if r.fps is not None and raw else "n/a"
        cells += [
            _num(r.fps),
            _num(r.samples_per_s),
            _batch_text(r.inference_batch),
            _num(r.gpu_mb),
            _num(r.peak_uss_mb),
            _num(raw),
            frac,
        ]
    return "| " + " | ".join(cells) + " |"


def command(args, key: str, n: int, inference: str, train_dir: str, exp: str) -> list[str]:
    env, flags = WORKLOADS[key]
    status_interval = round(min(5.0, max(1.0, args.seconds / 15)), 1)
    return [
        sys.executable,
        "-m",
        "launch.train",
        f"--env={env}",
        *flags,
        f"--num_workers={args.num_workers}",
        f"--num_envs_per_worker={args.num_envs}",
        f"--num_policies={n}",
        f"--inference={inference}",
        f"--device={args.device}",
        f"--train_for_seconds={args.seconds}",
        f"--status_interval={status_interval}",
        f"--experiment_summaries_interval={max(1, round(status_interval))}",
        "--restart_behavior=overwrite",
        "--save_every_sec=100000",
        f"--train_dir={train_dir}",
        f"--experiment={exp}",
        *args.extra_flags,
    ]


def raw_ceiling(args, key: str, cache: dict) -> Optional[float]:
    """Raw env frames/s of the run's layout, measured once per workload (None: it failed)."""
    if key not in cache:
        env, flags = WORKLOADS[key]
        print(f"[{key}] raw env rate, random actions ...", file=sys.stderr, flush=True)
        try:
            cache[key] = raw_env_rate(
                env,
                args.num_workers,
                args.num_envs,
                seconds=args.raw_seconds,
                env_flags=[*flags, *args.extra_flags],
            )
        except Exception as e:  # the training runs still tell something
            print(f"[{key}] raw rate failed: {e}", file=sys.stderr, flush=True)
            cache[key] = None
    return cache[key]


def scaling_lines(results: dict) -> list[str]:
    """For each workload and inference mode: largest population's frames/s vs the smallest's."""
    out = []
    groups: dict[tuple[str, str], dict[int, RunResult]] = {}
    for (key, n, inference), r in results.items():
        if not r.error and r.fps:
            groups.setdefault((key, inference), {})[n] = r
    for (key, inference), runs in groups.items():
        small, big = min(runs), max(runs)
        if small == big:
            continue
        a, b = runs[small].fps, runs[big].fps
        out.append(
            f"{key}, {inference} inference: {big} policies reach {b / a:.2f}x the frames/s of "
            f"{small} ({b:,.0f} vs {a:,.0f})"
        )
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--policies", type=int, nargs="+", default=[1, 8])
    parser.add_argument(
        "--inference", nargs="+", choices=["local", "device"], default=["local", "device"]
    )
    parser.add_argument("--num_workers", type=int, default=2)
    parser.add_argument("--num_envs", type=int, default=8, help="envs per worker")
    parser.add_argument("--seconds", type=int, default=45, help="length of each training run")
    parser.add_argument(
        "--raw_seconds", type=float, default=10.0, help="length of each raw env measurement"
    )
    parser.add_argument("--device", choices=["auto", "gpu", "cpu"], default="auto")
    parser.add_argument(
        "--train_dir", default=None, help="keep the runs and their logs here (default: a temp dir)"
    )
    parser.add_argument(
        "--extra",
        action="append",
        default=[],
        help='more training flags for every run, e.g. --extra="--amp=True --rollout=64"',
    )
    args = parser.parse_args(argv)
    args.extra_flags = [f for text in args.extra for f in shlex.split(text)]

    gpu = GpuMemory()
    gpus = ", ".join(gpu.names) if gpu.available else "no GPU visible to NVML"
    print(
        f"{args.num_workers} workers x {args.num_envs} envs, {args.seconds} s per run, device "
        f"{args.device}, {os.cpu_count()} CPU cores, {gpus}"
        + (f", extra flags: {' '.join(args.extra_flags)}" if args.extra_flags else ""),
        flush=True,
    )
    print(HEADER)
    print("|" + "---|" * HEADER.count(" | ") + "---|", flush=True)
    results: dict[tuple[str, int, str], RunResult] = {}
    raw_cache: dict[str, Optional[float]] = {}
    tmp = None
    if args.train_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="gpu_throughput_")
        train_dir = tmp.name
    else:
        train_dir = os.path.abspath(args.train_dir)
        os.makedirs(train_dir, exist_ok=True)
    try:
        for key in args.envs:
            raw = raw_ceiling(args, key, raw_cache)
            for n in args.policies:
                for inference in args.inference:
                    exp = f"{key}_p{n}_{inference}"
                    print(f"[{exp}] training ...", file=sys.stderr, flush=True)
                    cmd = command(args, key, n, inference, train_dir, exp)
                    r = train_run(cmd, os.path.join(train_dir, exp), args.seconds, gpu)
                    results[(key, n, inference)] = r
                    print(table_row(key, n, inference, r, raw), flush=True)
    finally:
        if tmp is not None:
            tmp.cleanup()
    lines = scaling_lines(results)
    if lines:
        print()
        for line in lines:
            print(line)
    failed = sum(1 for r in results.values() if r.error)
    if failed:
        print(f"\n{failed} of {len(results)} runs failed (see their rows)", flush=True)


if __name__ == "__main__":
    main()
