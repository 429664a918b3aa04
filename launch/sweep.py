"""Run many trainings, a grid of flag values, over the GPUs (or CPU cores) of this machine.

    rl-pbt-sweep --sweep=lr_seeds --grid learning_rate=1e-4,3e-4 --grid seed=1,2,3 \
        --max_parallel=2 -- --env=CartPole-v1 --train_for_env_steps=200000

Each run is `rl-pbt-train` with the flags after `--` and one value of each `--grid` flag (every
combination, in order), in its own experiment `{train_dir}/{sweep}/{run}/`, its output in
`{train_dir}/{sweep}/{run}.log`; a run's name gives its values (`learning_rate_0.0001__seed_2`).
Every run's flags are checked before the first one starts. With GPUs, each run gets
`--gpus_per_run` of them (`CUDA_VISIBLE_DEVICES`), `--runs_per_gpu` runs share one, and
`--max_parallel` defaults to the number of such slots; without, runs share the CPU,
`--max_parallel` (default 1) at a time. A run that fails is named with the end of its log, and
the others go on.

`{train_dir}/{sweep}/sweep.json` keeps each run's state and result. Running the same command
again skips the runs that finished and resumes the others from their checkpoints (Ctrl-C,
SIGTERM or the terminal closing stops every run, each saving first). At the end a table ranks
the runs by their best member's mean objective in `summary.json` (its mean return where the env
gives no objective).

An env of your own: `--train_script=my_train.py` runs `python my_train.py FLAGS` in place of
`rl-pbt-train`. The script registers the env at its top level and trains under
`if __name__ == "__main__": sys.exit(launch.train.main())`; the sweep runs its top level once
(not the `__main__` block) to know the env when it checks the flags.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import json
import os
import re
import runpy
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from launch import ToolParser, command, summary
from rl_pbt.config.parse import ConfigError
from rl_pbt.logging.files import atomic_write_json, experiment_name_problem
from rl_pbt.logging.progress import fmt_duration, fmt_num
from rl_pbt.runtime.run_lock import RunLock

PROG = "rl-pbt-sweep"
RESERVED = ("experiment", "train_dir")  # each run's folder: the sweep names it
SAVE_WAIT_S = 120.0  # after Ctrl-C / SIGTERM: how long the runs get to save and stop
NAME_BYTES = 200  # a run's name is cut (and a hash of the whole added) past this


class SweepError(Exception):
    """Bad input to the sweep: one line, exit status 2, nothing started or written."""


# --- the plan: pure functions ----------------------------------------------------------------
def parse_grid(specs: list[str]) -> dict[str, list[str]]:
    """`["learning_rate=1e-4,3e-4", "seed=1,2"]` -> {flag: values}, in the order given."""
    grid: dict[str, list[str]] = {}
    for spec in specs:
        name, eq, values = spec.partition("=")
        name = name.strip().removeprefix("--")
        if not eq or not name:
            raise SweepError(
                f"--grid {spec!r}: give FLAG=VALUE,VALUE,... (e.g. --grid learning_rate=1e-4,3e-4)"
            )
        if name in RESERVED:
            raise SweepError(f"--grid {spec!r}: the sweep names each run's --{name}; leave it out")
        if name in grid:
            raise SweepError(
                f"--grid {spec!r}: --{name} is in the grid twice; give its values once"
            )
        items = [v.strip() for v in values.split(",")]
        if any(not v for v in items):
            raise SweepError(f"--grid {spec!r}: an empty value; values are separated by ','")
        repeated = sorted({v for v in items if items.count(v) > 1})
        if repeated:
            raise SweepError(f"--grid {spec!r}: {', '.join(repeated)} given twice")
        grid[name] = items
    return grid


def expand(grid: dict[str, list[str]]) -> list[dict[str, str]]:
    """Every combination of the grid's values, the first flag's changing slowest."""
    names = list(grid)
    return [dict(zip(names, combo)) for combo in itertools.product(*grid.values())]


def name_part(value: str) -> str:
    """A value as part of a folder name: spaces and path separators become '-'."""
    return re.sub(r"[\s/\\]+", "-", value.strip()) or "_"


def run_name(values: dict[str, str]) -> str:
    """`{flag}_{value}` joined by '__' (`run` for an empty grid); a long one is cut, with a
    hash of the whole kept so that two names stay apart."""
    name = "__".join(f"{k}_{name_part(v)}" for k, v in values.items()) or "run"
    if len(name.encode()) > NAME_BYTES:
        digest = hashlib.sha1(name.encode()).hexdigest()[:10]
        name = name.encode()[: NAME_BYTES - 11].decode(errors="ignore") + "_" + digest
    return name


def value_tokens(flag: str, value: str) -> list[str]:
    """The command-line tokens of one grid value: `--flag=value`, or `--flag a b` for a list
    flag's value with spaces (`--grid "encoder_mlp_layers=64 64,256 256"`)."""
    parts = value.split()
    return [f"--{flag}={value}"] if len(parts) == 1 else [f"--{flag}", *parts]


def flag_given(tokens: list[str], flag: str) -> bool:
    return any(t == f"--{flag}" or t.startswith(f"--{flag}=") for t in tokens)


def without_flag(tokens: list[str], flag: str) -> list[str]:
    """`tokens` with `--flag=V` / `--flag V` taken out."""
    out, skip = [], False
    for token in tokens:
        if skip:
            skip = False
        elif token == f"--{flag}":
            skip = True
        elif not token.startswith(f"--{flag}="):
            out.append(token)
    return out


def gpu_slots(gpus: list[int], gpus_per_run: int, runs_per_gpu: int) -> list[str]:
    """The `CUDA_VISIBLE_DEVICES` of each slot a run can take: the GPUs in groups of
    `gpus_per_run` (a group that would be short is left out), each group `runs_per_gpu`
    times, groups interleaved so that runs spread over the GPUs before sharing one."""
    groups = [gpus[i : i + gpus_per_run] for i in range(0, len(gpus), gpus_per_run)]
    groups = [g for g in groups if len(g) == gpus_per_run]
    return [",".join(map(str, g)) for _ in range(runs_per_gpu) for g in groups]


@dataclass
class Run:
    name: str
    values: dict[str, str]
    argv: list[str]  # the training flags
    target_steps: int = 0
    target_seconds: float = 0.0
    state: str = "waiting"  # waiting, running, done, failed, stopped, done earlier
    exit_code: Optional[int] = None
    seconds: float = 0.0
    slot: Optional[str] = None
    proc: Any = field(default=None, repr=False)
    started: float = 0.0
    log: Any = field(default=None, repr=False)


def plan(sweep: str, root: str, base: list[str], grid: dict[str, list[str]]) -> list[Run]:
    """The runs of a sweep, each with its flags: the base flags, its values, its folder."""
    runs, seen = [], set()
    base = without_flag(base, "train_dir")
    for values in expand(grid):
        name = run_name(values)
        while name in seen:  # values that read the same in a folder name ("a b" and "a/b")
            name += "_"
        seen.add(name)
        argv = [*base, *[t for k, v in values.items() for t in value_tokens(k, v)]]
        argv += [f"--train_dir={os.path.join(root, sweep)}", f"--experiment={name}"]
        runs.append(Run(name, values, argv))
    return runs


def result_of(exp_dir: str) -> dict[str, Any]:
    """What a run's summary.json says of it: env steps of its slowest member, its best member
    and that member's mean objective, or mean return (`by`) where the env gives no objective
    ({} while there is no summary)."""
    try:
        with open(os.path.join(exp_dir, "summary.json")) as f:
            policies = json.load(f).get("policies") or {}
        steps = min(int(p.get("env_steps", 0)) for p in policies.values()) if policies else 0
        result: dict[str, Any] = {"env_steps": steps}
        for key, by in (("mean_objective", "objective"), ("mean_return", "return")):
            scored = {
                k: p[key] for k, p in policies.items() if isinstance(p.get(key), (int, float))
            }
            if scored:
                best = max(scored, key=scored.get)
                result.update(best_policy=best, objective=scored[best], by=by)
                break
        return result
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def ranking(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows ordered by objective, highest first; rows without one last, in their order."""
    scored = [r for r in rows if isinstance(r.get("objective"), (int, float))]
    rest = [r for r in rows if not isinstance(r.get("objective"), (int, float))]
    return sorted(scored, key=lambda r: -r["objective"]) + rest


def table(rows: list[dict[str, Any]]) -> str:
    width = max([len(r["name"]) for r in rows] + [3])
    head = f"rank  {'run':<{width}}  {'state':<12} {'env steps':>10}  {'best member':<24}  time"
    lines = [head]
    for i, r in enumerate(ranking(rows), 1):
        obj = r.get("objective")
        best = "-" if obj is None else f"p{r['best_policy']} {r['by']} {obj:.4g}"
        lines.append(
            f"{i:>4}  {r['name']:<{width}}  {r['state']:<12} {fmt_num(r.get('env_steps')):>10}  "
            f"{best:<24}  {fmt_duration(r.get('seconds'))}"
        )
    return "\n".join(lines)


def eta(
    done_seconds: list[float], running_elapsed: list[float], waiting: int, slots: int
) -> Optional[float]:
    """Seconds until every run is done, from the mean time of the finished ones (None before
    one has finished)."""
    if not done_seconds or slots < 1:
        return None
    mean = sum(done_seconds) / len(done_seconds)
    work = waiting * mean + sum(max(0.0, mean - e) for e in running_elapsed)
    return work / slots


# --- the command -----------------------------------------------------------------------------
def build_parser() -> ToolParser:
    p = ToolParser(
        PROG,
        summary(__doc__),
        usage=f"{PROG} --sweep=NAME [--grid FLAG=V1,V2 ...] [options] -- TRAINING FLAGS",
        epilog="The training flags after '--' are rl-pbt-train's (rl-pbt-train --help).",
    )
    p.add_argument("--sweep", required=True, help="the sweep's name: its folder under train_dir")
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="FLAG=V1,V2",
        help="a training flag and its values (repeat for more flags)",
    )
    p.add_argument(
        "--max_parallel",
        type=int,
        default=None,
        help="runs at once (default: one per GPU slot; 1 without a GPU)",
    )
    p.add_argument(
        "--gpus", default=None, help="GPU indices to use, e.g. 0,1 (default: every visible GPU)"
    )
    p.add_argument("--gpus_per_run", type=int, default=1, help="GPUs each run gets")
    p.add_argument("--runs_per_gpu", type=int, default=1, help="runs that share one GPU")
    p.add_argument(
        "--status_interval", type=float, default=30.0, help="seconds between progress lines"
    )
    p.add_argument(
        "--train_script",
        default=None,
        help="a Python script to run each training with, for an env of your own",
    )
    p.add_argument(
        "--dry_run",
        action="store_true",
        help="check every run's flags and print the runs; start nothing",
    )
    return p


def visible_gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # a torch without CUDA support: no GPU
        return 0


def check_args(args, base: list[str]) -> list[int]:
    """Problems with the sweep's own flags (SweepError); returns the GPUs to use."""
    problem = experiment_name_problem(args.sweep)
    if problem:
        raise SweepError(f"--sweep={args.sweep!r}: {problem}; give a plain folder name")
    for flag in ("max_parallel", "gpus_per_run", "runs_per_gpu"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise SweepError(f"--{flag}={value}: must be 1 or more")
    if not args.status_interval > 0:
        raise SweepError(f"--status_interval={args.status_interval}: must be above 0")
    if flag_given(base, "experiment"):
        raise SweepError(
            "--experiment after '--': the sweep names each run's experiment "
            "after its values; leave it out"
        )
    if args.train_script and not os.path.isfile(args.train_script):
        raise SweepError(f"--train_script={args.train_script!r}: no such file")
    count = visible_gpus()
    if args.gpus is None:
        gpus = list(range(count))
    else:
        try:
            gpus = [int(g) for g in args.gpus.split(",")]
        except ValueError:
            raise SweepError(f"--gpus={args.gpus!r}: give GPU indices such as 0,1") from None
        wrong = [g for g in gpus if not 0 <= g < count]
        if wrong or len(set(gpus)) < len(gpus):
            raise SweepError(
                f"--gpus={args.gpus!r}: {count} GPU(s) visible here (indices "
                f"0..{count - 1}), each given once"
            )
    if gpus and len(gpus) < args.gpus_per_run:
        raise SweepError(f"--gpus_per_run={args.gpus_per_run}: only {len(gpus)} GPU(s) to use")
    return gpus


def check_runs(runs: list[Run], train_script: Optional[str]) -> None:
    """Every run's flags as rl-pbt-train would take them (SweepError naming the run), and its
    budget (for the progress lines)."""
    import envs  # noqa: F401  (registers the built-in envs)
    from rl_pbt import parse_cfg

    if train_script:  # the script's top level registers its envs; its __main__ block trains
        try:
            runpy.run_path(train_script, run_name="__rl_pbt_sweep__")
        except (Exception, SystemExit) as e:
            raise SweepError(
                f"--train_script={train_script!r}: its top level failed "
                f"({type(e).__name__}: {e}); it should register its envs there and train "
                "only under `if __name__ == '__main__':`"
            ) from None
    for run in runs:
        try:
            cfg = parse_cfg(run.argv)
        except ConfigError as e:
            one_line = "; ".join(line.strip() for line in str(e).splitlines() if line.strip())
            raise SweepError(f"run {run.name}: {one_line}") from None
        except SystemExit:  # --help among the training flags
            raise SweepError(
                f"run {run.name}: --help is not a training flag here; see rl-pbt-train --help"
            ) from None
        run.target_steps = int(cfg.train_for_env_steps)
        run.target_seconds = float(cfg.train_for_seconds)


class Sweep:
    """Starts the runs, at most `max_parallel` at a time, one per free slot; keeps
    sweep.json; stops them all on Ctrl-C / SIGTERM."""

    def __init__(
        self,
        name: str,
        folder: str,
        runs: list[Run],
        slots: list[Optional[str]],
        status_interval: float,
        train_script: Optional[str],
    ):
        self.name, self.folder, self.runs = name, folder, runs
        self.free = list(slots)
        self.status_interval = status_interval
        self.program = (
            [sys.executable, train_script]
            if train_script
            else [sys.executable, "-m", "launch.train"]
        )
        self.began = time.time()
        self.stop_signal: Optional[int] = None
        self.state_path = os.path.join(folder, "sweep.json")

    # -- state ----------------------------------------------------------------------------
    def load_earlier(self) -> None:
        """Runs that finished in an earlier start of this sweep, with the same flags, are not
        run again."""
        try:
            with open(self.state_path) as f:
                earlier = {r["name"]: r for r in json.load(f).get("runs", [])}
        except (OSError, ValueError, AttributeError, TypeError, KeyError):
            return
        for run in self.runs:
            old = earlier.get(run.name)
            if old and old.get("state") in ("done", "done earlier") and old.get("argv") == run.argv:
                run.state, run.seconds, run.exit_code = "done earlier", old.get("seconds", 0), 0

    def rows(self) -> list[dict[str, Any]]:
        rows = []
        for run in self.runs:
            row = {
                "name": run.name,
                "values": run.values,
                "argv": run.argv,
                "state": run.state,
                "exit_code": run.exit_code,
                "seconds": run.seconds,
                "gpus": run.slot,
            }
            row.update(result_of(os.path.join(self.folder, run.name)))
            rows.append(row)
        return rows

    def save(self) -> None:
        atomic_write_json(
            self.state_path, {"sweep": self.name, "program": self.program, "runs": self.rows()}
        )

    def say(self, text: str) -> None:
        print(f"[{fmt_duration(time.time() - self.began)}] {text}", flush=True)

    # -- runs -----------------------------------------------------------------------------
    def start(self, run: Run) -> None:
        run.slot = self.free.pop(0)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if run.slot is not None:
            env["CUDA_VISIBLE_DEVICES"] = run.slot
        log_path = os.path.join(self.folder, f"{run.name}.log")
        run.log = open(log_path, "a")
        run.log.write(f"\n# {' '.join(self.program + run.argv)}\n")
        run.log.flush()
        # a session of its own: a signal reaches a run once, from the sweep, not from the terminal
        run.proc = subprocess.Popen(
            [*self.program, *run.argv],
            stdout=run.log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=stop_with_parent(os.getpid()),
        )
        run.state, run.started = "running", time.time()
        where = f" on GPU {run.slot}" if run.slot is not None else ""
        self.say(f"start {run.name}{where} (log: {log_path})")

    def finish(self, run: Run, code: int) -> None:
        run.log.close()
        self.free.append(run.slot)
        run.exit_code, run.seconds = code, time.time() - run.started
        if code == 0:
            run.state = "done"
            res = result_of(os.path.join(self.folder, run.name))
            obj = res.get("objective")
            best = f": best p{res['best_policy']} {res['by']} {obj:.4g}" if obj is not None else ""
            self.say(f"done {run.name} in {fmt_duration(run.seconds)}{best}")
        elif self.stop_signal is not None:
            run.state = "stopped"
            self.say(f"stopped {run.name} (exit {code}); run the sweep again to resume it")
        else:
            run.state = "failed"
            tail = last_lines(os.path.join(self.folder, f"{run.name}.log"), 5)
            self.say(f"FAILED {run.name}: exit {code}; the end of its log:\n{tail}")
        self.save()

    def progress(self) -> str:
        counts: dict[str, int] = {}
        for run in self.runs:
            counts[run.state] = counts.get(run.state, 0) + 1
        parts = [
            f"{counts[s]} {s}"
            for s in ("done earlier", "done", "running", "failed", "stopped", "waiting")
            if counts.get(s)
        ]
        now = time.time()
        running = [r for r in self.runs if r.state == "running"]
        done = [r.seconds for r in self.runs if r.state == "done"]
        left = eta(
            done,
            [now - r.started for r in running],
            counts.get("waiting", 0),
            len(running) + len(self.free),
        )
        shares = []
        for run in running:
            share = log_share(os.path.join(self.folder, f"{run.name}.log"))
            if share is None:  # no status line yet: the time limit's share, if any
                share = (now - run.started) / run.target_seconds if run.target_seconds else 0.0
            shares.append(f"{run.name} {min(share, 1.0):.0%}")
        text = f"sweep {self.name}: " + ", ".join(parts)
        if left is not None:
            text += f" | ETA {fmt_duration(left)}"
        return text + (" | " + ", ".join(shares) if shares else "")

    def on_signal(self, signum, frame) -> None:
        if self.stop_signal is None:
            self.stop_signal = signum
            forward = signal.SIGTERM if signum == signal.SIGHUP else signum
            for run in self.runs:
                if run.state == "running":
                    try:
                        run.proc.send_signal(forward)  # the run saves and stops
                    except ProcessLookupError:
                        pass

    def run(self) -> int:
        os.makedirs(self.folder, exist_ok=True)
        self.load_earlier()
        earlier = sum(r.state == "done earlier" for r in self.runs)
        self.say(
            f"sweep {self.name}: {len(self.runs)} runs ({earlier} done earlier), "
            f"{len(self.free)} at a time, in {self.folder}"
        )
        self.save()
        handlers = {}
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            try:
                handlers[s] = signal.signal(s, self.on_signal)
            except ValueError:  # not the main thread: the runs stop only when they end
                break
        stop_deadline = None
        try:
            last_status = time.time()
            while True:
                for run in self.runs:
                    if run.state == "running" and run.proc.poll() is not None:
                        self.finish(run, run.proc.returncode)
                if self.stop_signal is None:
                    for run in self.runs:
                        if run.state == "waiting" and self.free:
                            self.start(run)
                running = [r for r in self.runs if r.state == "running"]
                if not running and (
                    self.stop_signal is not None or not any(r.state == "waiting" for r in self.runs)
                ):
                    break
                if self.stop_signal is not None:
                    stop_deadline = stop_deadline or time.time() + SAVE_WAIT_S
                    if time.time() > stop_deadline:
                        for run in running:
                            self.say(f"{run.name} did not stop in {SAVE_WAIT_S:g}s; killing it")
                            run.proc.kill()
                        stop_deadline = float("inf")
                if time.time() - last_status >= self.status_interval:
                    self.say(self.progress())
                    last_status = time.time()
                time.sleep(0.2)
        finally:
            for s, h in handlers.items():
                signal.signal(s, h)
        rows = self.rows()
        self.save()
        print(f"\n{table(rows)}\n(in {self.state_path})", flush=True)
        bad = [r for r in self.runs if r.state in ("failed", "stopped", "waiting")]
        if self.stop_signal is not None:
            self.say("stopped; run the same command again to resume the runs not done")
        elif bad:
            self.say(
                f"{len(bad)} of {len(self.runs)} runs failed: " + ", ".join(r.name for r in bad)
            )
        return 1 if bad else 0


def stop_with_parent(parent: int) -> Optional[Callable[[], None]]:
    """For a run's process, before it starts: a SIGTERM (which makes it save and stop) when the
    sweep's process ends, however it ends (Linux; None elsewhere: the run goes on alone)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def arrange() -> None:
        prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the sweep ended before the line above
            os.kill(os.getpid(), signal.SIGTERM)

    return arrange


STATUS_SHARE = re.compile(r"^\[[^\]]+\] [^|\n]* frames [^|\n]*\| (\d+)% of ", re.MULTILINE)


def log_share(path: str, tail_bytes: int = 16384) -> Optional[float]:
    """The share of its budget a run's newest status line gives (`| 26% of 1.5M steps`), from
    the end of its log; None before the first one."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - tail_bytes))
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    found = STATUS_SHARE.findall(text)
    return int(found[-1]) / 100 if found else None


def last_lines(path: str, count: int) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return "  (no log)"
    return "\n".join("  " + line for line in lines[-count:]) or "  (empty log)"


def train_dir_of(base: list[str]) -> str:
    """The `--train_dir` of the base flags (`train_dir` when not given)."""
    for i, token in enumerate(base):
        if token.startswith("--train_dir="):
            return token.split("=", 1)[1]
        if token == "--train_dir" and i + 1 < len(base):
            return base[i + 1]
    from rl_pbt.config.flags import FLAGS_BY_NAME

    return FLAGS_BY_NAME["train_dir"].default


def main(argv: list[str] | None = None) -> int:
    tokens = sys.argv[1:] if argv is None else list(argv)
    own, base = (
        (tokens[: tokens.index("--")], tokens[tokens.index("--") + 1 :])
        if ("--" in tokens)
        else (tokens, [])
    )
    args = build_parser().parse_args(own)
    try:
        if not base:
            raise SweepError("give the training flags after '--', e.g. -- --env=CartPole-v1")
        gpus = check_args(args, base)
        grid = parse_grid(args.grid)
        for flag in grid:
            if flag_given(base, flag):
                raise SweepError(f"--{flag} is both in --grid and after '--'; give it once")
        root = train_dir_of(base)
        runs = plan(args.sweep, root, base, grid)
        check_runs(runs, args.train_script)
    except SweepError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    slots: list[Optional[str]] = list(gpu_slots(gpus, args.gpus_per_run, args.runs_per_gpu))
    if args.max_parallel is not None and slots and args.max_parallel > len(slots):
        print(
            f"{PROG}: error: --max_parallel={args.max_parallel}: {len(slots)} GPU slot(s) "
            f"({len(gpus)} GPU(s), --gpus_per_run={args.gpus_per_run}, --runs_per_gpu="
            f"{args.runs_per_gpu}); raise --runs_per_gpu to share a GPU",
            file=sys.stderr,
        )
        return 2
    if args.max_parallel is not None:
        slots = slots[: args.max_parallel] if slots else [None] * args.max_parallel
    slots = slots or [None]
    if args.dry_run:
        for run in runs:
            print(f"{run.name}: {' '.join(run.argv)}")
        print(
            f"{len(runs)} runs, {len(slots)} at a time"
            + (
                f" on GPU slots {', '.join(s for s in slots if s is not None)}"
                if any(s is not None for s in slots)
                else " on the CPU"
            )
        )
        return 0
    folder = os.path.join(root, args.sweep)
    lock = RunLock(root, args.sweep)  # one sweep (or run) per folder at a time
    try:
        lock.acquire()
    except ConfigError:
        print(
            f"{PROG}: error: --sweep={args.sweep}: another sweep or run is using {folder} "
            f"({lock.holder()}); stop it first or choose another name",
            file=sys.stderr,
        )
        return 2
    try:
        return Sweep(args.sweep, folder, runs, slots, args.status_interval, args.train_script).run()
    finally:
        lock.release()


def cli(argv: list[str] | None = None) -> int:
    return command(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
