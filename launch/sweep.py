"""Run many trainings, a grid of flag values, over the GPUs (or CPU cores) of this machine.

    rl-pbt-sweep --sweep=lr_seeds --grid learning_rate=1e-4,3e-4 --grid seed=1,2,3 \
        --max_parallel=2 -- --env=CartPole-v1 --train_for_env_steps=200000

Each run is `rl-pbt-train` with the flags after `--` and one value of each `--grid` flag (every
combination, in order), in its own experiment `{train_dir}/{sweep}/{run}/`, its output in
`{train_dir}/{sweep}/{run}.log`; a run's name gives its values as typed
(`learning_rate_1e-4__seed_2`).
Every run's flags are checked before the first one starts. With GPUs, each run gets
`--gpus_per_run` of them (`CUDA_VISIBLE_DEVICES`), `--runs_per_gpu` runs share one, and
`--max_parallel` defaults to the number of such slots; without (or where every run has
`--device=cpu` or `--num_gpus=0`), runs share the CPU, `--max_parallel` (default 1) at a time.
In a grid of both kinds (`--grid device=cpu,gpu`), the runs kept off the GPUs take no GPU slot:
`--max_parallel` bounds all the runs at once and may exceed the slots, the room above them
going to those runs. A run that fails is named with the end of its log, and the others go on.

`{train_dir}/{sweep}/sweep.json` keeps each run's state, flags and result. Running the same
command again skips the runs that finished and resumes the others from their checkpoints
(Ctrl-C, SIGTERM or the terminal closing stops every run, each saving first; the sweep's
process dying outright makes them save and stop too). A finished run runs again where its
budget grew or its folder is gone, and is refused where other flags would change what its
results mean. At the end a table ranks the runs, finished ones first, by their best member's
mean objective in `summary.json` (its mean return where the env gives no objective).

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

from launch import ToolParser, command, one_line, summary
from rl_pbt.config.parse import ConfigError
from rl_pbt.logging.files import atomic_write_json, experiment_name_problem
from rl_pbt.logging.progress import fmt_duration, fmt_num
from rl_pbt.runtime.devices import probe_gpu_count as visible_gpus  # no CUDA started here
from rl_pbt.runtime.devices import visible_devices_env
from rl_pbt.runtime.run_lock import LockHeld, RunLock

PROG = "rl-pbt-sweep"
RESERVED = ("experiment", "train_dir")  # each run's folder: the sweep names it
SAVE_WAIT_S = 120.0  # after Ctrl-C / SIGTERM: how long the runs get to save and stop
NAME_BYTES = 200  # a run's name is cut (and a hash of the whole added) past this
FINISHED = ("done", "done earlier")
# flags a finished run may be given anew without its results meaning something else: where it
# trains, how it reports, and its budget (a larger one trains it further)
NOT_RESULTS = ("train_dir", "experiment", "train_for_env_steps", "train_for_seconds",
               "status_interval", "save_every_sec", "keep_checkpoints",
               "restart_behavior")  # fmt: skip


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
            raise SweepError(
                f"--grid {spec!r}: {', '.join(repeated)} given twice (the items of a list "
                'flag\'s value go with spaces: "encoder_mlp_layers=64 64,256 256")'
            )
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


def value_tokens(flag: str, value: str, list_flags: frozenset = frozenset()) -> list[str]:
    """The command-line tokens of one grid value: `--flag=value` (spaces and all), or for a
    list flag `--flag a b` (`--grid "encoder_mlp_layers=64 64,256 256"`)."""
    parts = value.split()
    return [f"--{flag}", *parts] if flag in list_flags and parts else [f"--{flag}={value}"]


def flag_given(tokens: list[str], flag: str) -> bool:
    return any(t == f"--{flag}" or t.startswith(f"--{flag}=") for t in tokens)


def last_value(tokens: list[str], flag: str) -> Optional[str]:
    """The value of the last `--flag=V` / `--flag V` in `tokens` (as argparse keeps it; '' for
    a bare `--flag` at the end), None when it is not given."""
    found: Optional[str] = None
    for i, token in enumerate(tokens):
        if token.startswith(f"--{flag}="):
            found = token.split("=", 1)[1]
        elif token == f"--{flag}":
            found = tokens[i + 1] if i + 1 < len(tokens) else ""
    return found


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
    target_seconds: float = 0.0
    state: str = "waiting"  # waiting, running, done, failed, stopped, done earlier
    exit_code: Optional[int] = None
    seconds: float = 0.0
    slot: Optional[str] = None
    cfg: dict[str, Any] = field(default_factory=dict, repr=False)  # the resolved flags
    earlier_seconds: float = 0.0  # time trained in the sweep's earlier starts
    full_seconds: Optional[float] = None  # a whole run's time, from its rate in this start
    samples: list = field(default_factory=list, repr=False)  # (time, share) in this start
    proc: Any = field(default=None, repr=False)
    started: float = 0.0
    log: Any = field(default=None, repr=False)


def plan(
    sweep: str,
    root: str,
    base: list[str],
    grid: dict[str, list[str]],
    list_flags: frozenset = frozenset(),
) -> list[Run]:
    """The runs of a sweep, each with its flags: the base flags, its values, its folder."""
    runs, seen = [], set()
    base = without_flag(base, "train_dir")
    for values in expand(grid):
        name = run_name(values)
        while name in seen:  # values that read the same in a folder name ("a b" and "a/b")
            name += "_"
        seen.add(name)
        argv = [*base, *[t for k, v in values.items() for t in value_tokens(k, v, list_flags)]]
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
    """Finished runs by objective, highest first; then the others (stopped, failed, waiting:
    their figures are partial) by objective; rows without one last, in their order."""

    def order(group: list[dict[str, Any]]) -> list[dict[str, Any]]:
        scored = [r for r in group if isinstance(r.get("objective"), (int, float))]
        rest = [r for r in group if not isinstance(r.get("objective"), (int, float))]
        return sorted(scored, key=lambda r: -r["objective"]) + rest

    finished = [r for r in rows if r.get("state") in FINISHED]
    return order(finished) + order([r for r in rows if r.get("state") not in FINISHED])


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
    remaining: list[Optional[float]], waiting: int, full: Optional[float], slots: int
) -> Optional[float]:
    """Seconds until every run is done: the running runs' remaining seconds (from their rates
    in this start) and `waiting` runs of `full` seconds each, over `slots` at a time; None
    while a running run's rate, or (with runs waiting) a whole run's time, is unknown."""
    if any(r is None for r in remaining) or (waiting and full is None) or slots < 1:
        return None
    return (sum(remaining) + waiting * (full or 0.0)) / slots


def share_rate(samples: list[tuple[float, float]], min_span_s: float = 5.0) -> Optional[float]:
    """Share of its budget a run does per second, from its (time, share) samples in this start
    (None before they span `min_span_s` with progress)."""
    if len(samples) < 2:
        return None
    (t0, s0), (t1, s1) = samples[0], samples[-1]
    if t1 - t0 < min_span_s or s1 <= s0:
        return None
    return (s1 - s0) / (t1 - t0)


def changed_flags(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The flags (NOT_RESULTS aside) whose resolved values differ, as `flag: old -> new`."""
    keys = sorted((set(old) | set(new)) - set(NOT_RESULTS))
    return [f"--{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]


# --- the command -----------------------------------------------------------------------------
def build_parser() -> ToolParser:
    p = ToolParser(
        PROG,
        summary(__doc__),
        usage=f"{PROG} --sweep=NAME [--grid FLAG=V1,V2 ...] [options] -- TRAINING FLAGS",
        epilog="The training flags after '--' are rl-pbt-train's (rl-pbt-train --help). "
        "Each run trains in {train_dir}/{sweep}/{run}/ (its log beside it); "
        "{train_dir}/{sweep}/sweep.json keeps their states and results. The same command "
        "again skips finished runs and resumes the others; Ctrl-C stops every run, saved.",
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
        help="runs at once (default: one per GPU slot; 1 without a GPU or with --device=cpu); "
        "above the GPU slots where some runs train on the CPU",
    )
    p.add_argument(
        "--gpus", default=None, help="GPU indices to use, e.g. 0,1 (default: every visible GPU)"
    )
    p.add_argument("--gpus_per_run", type=int, default=1, help="GPUs each run gets")
    p.add_argument("--runs_per_gpu", type=int, default=1, help="runs that share one GPU")
    p.add_argument(
        "--progress_interval", type=float, default=30.0, help="seconds between progress lines"
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


def check_args(args, base: list[str]) -> list[int]:
    """Problems with the sweep's own flags (SweepError); returns the GPUs to use."""
    problem = experiment_name_problem(args.sweep)
    if problem:
        raise SweepError(f"--sweep={args.sweep!r}: {problem}; give a plain folder name")
    for flag in ("max_parallel", "gpus_per_run", "runs_per_gpu"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise SweepError(f"--{flag}={value}: must be 1 or more")
    if not args.progress_interval > 0:
        raise SweepError(f"--progress_interval={args.progress_interval}: must be above 0")
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


def load_envs(train_script: Optional[str]) -> None:
    """Register the envs the runs may name: the built-in ones, and those a --train_script
    registers at its top level (its __main__ block, which trains, is not run here)."""
    import envs  # noqa: F401  (registers the built-in envs)

    if train_script:
        try:
            runpy.run_path(train_script, run_name="__rl_pbt_sweep__")
        except (Exception, SystemExit) as e:
            raise SweepError(
                f"--train_script={train_script!r}: its top level failed "
                f"({type(e).__name__}: {e}); it should register its envs there and train "
                "only under `if __name__ == '__main__':`"
            ) from None


def check_runs(runs: list[Run]) -> None:
    """Every run's flags as rl-pbt-train would take them (SweepError naming the run); keeps
    each run's resolved flags and budget."""
    from rl_pbt import parse_cfg

    same: dict[str, str] = {}
    for run in runs:
        try:
            cfg = parse_cfg(run.argv)
        except ConfigError as e:
            raise SweepError(f"run {run.name}: {one_line(e)}") from None
        except SystemExit:  # --help among the training flags
            raise SweepError(
                f"run {run.name}: --help is not a training flag here; see rl-pbt-train --help"
            ) from None
        run.cfg = json.loads(json.dumps(cfg.to_dict(), default=float))  # as sweep.json keeps it
        key = json.dumps({k: v for k, v in run.cfg.items() if k not in ("experiment",)},
                         sort_keys=True)  # fmt: skip
        if key in same:
            raise SweepError(
                f"runs {same[key]} and {run.name} have the same flags (values that read the "
                "same, such as 1e-3 and 0.001); give each value once"
            )
        same[key] = run.name
        run.target_seconds = float(cfg.train_for_seconds)


def read_earlier(folder: str, runs: list[Run]) -> None:
    """What an earlier start of this sweep (its sweep.json) says of each run. A run that
    finished with the same flags is not run again (nor where only NOT_RESULTS differ, unless
    its budget grew); one that finished with other flags is refused (SweepError): its results
    would be reported under flags it did not train with."""
    try:
        with open(os.path.join(folder, "sweep.json")) as f:
            earlier = {r["name"]: r for r in json.load(f).get("runs", [])}
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return
    for run in runs:
        old = earlier.get(run.name)
        if not isinstance(old, dict):
            continue
        run.earlier_seconds = float(old.get("seconds") or 0.0)
        run_dir = os.path.join(folder, run.name)
        if old.get("state") not in FINISHED or not os.path.isfile(
            os.path.join(run_dir, "summary.json")
        ):
            continue  # not finished (or its folder is gone): it runs (again)
        old_cfg = old.get("cfg") or {}
        changed = changed_flags(old_cfg, run.cfg)
        if changed:
            raise SweepError(
                f"run {run.name} finished with other flags ({'; '.join(changed[:3])}); to run "
                f"it with these, delete {run_dir} or give another --sweep"
            )
        grew = any(
            float(run.cfg.get(k) or 0) > float(old_cfg.get(k) or 0)
            for k in ("train_for_env_steps", "train_for_seconds")
        )
        if not grew:
            run.state, run.exit_code = "done earlier", 0


class Sweep:
    """Starts the runs, at most one per free slot; keeps sweep.json; stops them all on
    Ctrl-C / SIGTERM / SIGHUP."""

    def __init__(
        self,
        name: str,
        folder: str,
        runs: list[Run],
        slots: list[str],
        limit: int,
        status_interval: float,
        train_script: Optional[str],
    ):
        self.name, self.folder, self.runs = name, folder, runs
        self.free = list(slots)  # the GPU slots not taken (none on the CPU)
        self.limit = limit  # runs at once, of both kinds
        self.gpu_runs = bool(slots)  # whether runs not kept off the GPUs take a slot
        self.status_interval = status_interval
        self.program = (
            [sys.executable, train_script]
            if train_script
            else [sys.executable, "-m", "launch.train"]
        )
        self.began = time.time()
        self.stop_signal: Optional[int] = None
        self.state_path = os.path.join(folder, "sweep.json")
        self.quiet = False  # stdout closed (a pipe whose reader ended): the runs go on

    # -- state ----------------------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        rows = []
        for run in self.runs:
            row = {
                "name": run.name,
                "values": run.values,
                "argv": run.argv,
                "cfg": run.cfg,
                "state": run.state,
                "exit_code": run.exit_code,
                "seconds": run.earlier_seconds + run.seconds,
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
        self.write(f"[{fmt_duration(time.time() - self.began)}] {text}")

    def write(self, text: str) -> None:
        if self.quiet:
            return
        try:
            print(text, flush=True)
        except (BrokenPipeError, OSError):  # nobody reads: say no more, let the runs finish
            self.quiet = True
            try:
                sys.stdout = open(os.devnull, "w")
            except OSError:
                pass

    # -- runs -----------------------------------------------------------------------------
    def needs_slot(self, run: Run) -> bool:
        return self.gpu_runs and not trains_on_the_cpu(run.cfg)

    def can_start(self, run: Run) -> bool:
        running = sum(r.state == "running" for r in self.runs)
        return running < self.limit and (bool(self.free) or not self.needs_slot(run))

    def start(self, run: Run) -> None:
        run.slot = self.free.pop(0) if self.needs_slot(run) else None
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
        run.state, run.started, run.samples = "running", time.time(), []
        if self.stop_signal is not None:  # the stop came while it was being started
            self.signal_run(run, self.stop_signal)
        where = f" on GPU {run.slot}" if run.slot is not None else ""
        if run.slot is None and self.gpu_runs:
            where = " on the CPU"
        self.say(f"start {run.name}{where} (log: {log_path})")
        self.save()

    def finish(self, run: Run, code: int) -> None:
        run.log.close()
        if run.slot is not None:
            self.free.append(run.slot)
        run.exit_code, run.seconds = code, time.time() - run.started
        if code == 0:
            run.state = "done"
            rate = share_rate(run.samples)
            run.full_seconds = 1.0 / rate if rate else None
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
        shares, remaining, fulls = [], [], []
        for run in self.runs:
            if run.state == "done" and run.full_seconds:
                fulls.append(run.full_seconds)
            if run.state != "running":
                continue
            share = log_share(os.path.join(self.folder, f"{run.name}.log"))
            if share is None:  # no status line yet: the time limit's share, if any
                share = (now - run.started) / run.target_seconds if run.target_seconds else 0.0
            share = min(share, 1.0)
            run.samples.append((now, share))
            rate = share_rate(run.samples)
            remaining.append((1.0 - share) / rate if rate else None)
            if rate:
                fulls.append(1.0 / rate)
            shares.append(f"{run.name} {share:.0%}")
        full = sum(fulls) / len(fulls) if fulls else None
        left = eta(remaining, counts.get("waiting", 0), full, self.limit)
        text = f"sweep {self.name}: " + ", ".join(parts)
        if left is not None:
            text += f" | ETA {fmt_duration(left)}"
        return text + (" | " + ", ".join(shares) if shares else "")

    def signal_run(self, run: Run, signum: int) -> None:
        forward = signal.SIGTERM if signum == signal.SIGHUP else signum
        try:
            run.proc.send_signal(forward)  # the run saves and stops
        except ProcessLookupError:
            pass

    def on_signal(self, signum, frame) -> None:
        if self.stop_signal is None:
            self.stop_signal = signum
            for run in self.runs:
                if run.state == "running":
                    self.signal_run(run, signum)

    def run(self) -> int:
        os.makedirs(self.folder, exist_ok=True)
        earlier = sum(r.state == "done earlier" for r in self.runs)
        self.say(
            f"sweep {self.name}: {plural(len(self.runs), 'run')} ({earlier} done earlier), "
            f"{self.limit} at a time, in {self.folder}"
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
                for run in self.runs:
                    if self.stop_signal is None and run.state == "waiting" and self.can_start(run):
                        self.start(run)
                running = [r for r in self.runs if r.state == "running"]
                if not running and (
                    self.stop_signal is not None or not any(r.state == "waiting" for r in self.runs)
                ):
                    break
                if self.stop_signal is not None:
                    if stop_deadline is None:
                        self.say(
                            f"stopping: {len(running)} run(s) saving and stopping (killed "
                            f"after {SAVE_WAIT_S:g}s)"
                        )
                    stop_deadline = stop_deadline or time.time() + SAVE_WAIT_S
                    if time.time() > stop_deadline:
                        for run in running:
                            self.say(f"{run.name} did not stop in {SAVE_WAIT_S:g}s; killing it")
                            try:  # its whole process group: a script's children too
                                os.killpg(run.proc.pid, signal.SIGKILL)
                            except (ProcessLookupError, PermissionError):
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
        self.write(f"\n{table(rows)}\n(in {self.state_path})")
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


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def last_lines(path: str, count: int) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return "  (no log)"
    return "\n".join("  " + line for line in lines[-count:]) or "  (empty log)"


def train_dir_of(base: list[str]) -> str:
    """The `--train_dir` of the base flags, as rl-pbt-train reads it (the last one given, `~`
    expanded; `train_dir` when not given)."""
    from rl_pbt.config.flags import FLAGS_BY_NAME

    found = last_value(base, "train_dir")
    if found is not None and not found.strip():
        raise SweepError("--train_dir after '--' is empty; give a folder")
    return os.path.expanduser(found if found is not None else FLAGS_BY_NAME["train_dir"].default)


def list_flags_of(base: list[str]) -> frozenset:
    """The names of the list flags (the trainer's, and those of the env named in `base`)."""
    from rl_pbt.config.flags import FLAGS
    from rl_pbt.envs.registry import env_extra_flags

    env = last_value(base, "env")
    extra = env_extra_flags(env) if env else []
    return frozenset(f.name for f in [*FLAGS, *extra] if f.type is list)


def cuda_ids(count: int) -> list[str]:
    """What names GPU index 0..count-1 in a child's CUDA_VISIBLE_DEVICES: the entries of this
    process's own list where it has one (so a sweep given GPUs 2,3 hands out 2 and 3)."""
    own = visible_devices_env()  # as CUDA reads it
    if own is None:
        return [str(i) for i in range(count)]
    return [own[i] if i < len(own) else str(i) for i in range(count)]


def split_tokens(tokens: list[str]) -> tuple[list[str], list[str]]:
    """The sweep's own flags and the training flags (after '--'); SweepError for a flag on the
    wrong side of it."""
    own_flags = {o for o in build_parser()._option_string_actions if o.startswith("--")}
    if "--" not in tokens:
        stray = [t for t in tokens if t.startswith("--") and t.split("=", 1)[0] not in own_flags]
        if stray:
            raise SweepError(
                f"{stray[0].split('=', 1)[0]}: the training flags go after '--' "
                f"({PROG} --sweep=NAME --grid ... -- {stray[0]} ...)"
            )
        return tokens, []
    at = tokens.index("--")
    own, base = tokens[:at], tokens[at + 1 :]
    from rl_pbt.config.flags import FLAGS_BY_NAME

    mine = {f for f in own_flags if f[2:] not in FLAGS_BY_NAME and f != "--help"}
    misplaced = [t for t in base if t.split("=", 1)[0] in mine]
    if misplaced:
        name = misplaced[0].split("=", 1)[0]
        raise SweepError(f"{name} is a flag of {PROG}: put it before '--'")
    return own, base


def trains_on_the_cpu(cfg: dict[str, Any]) -> bool:
    """Whether a run's resolved flags keep it off every GPU."""
    return cfg.get("device") == "cpu" or cfg.get("num_gpus") == 0


def prepare(args, base: list[str]) -> tuple[list[Run], list[str], int, str]:
    """The runs (checked), the GPU slots (none on the CPU), how many runs at once, the sweep's
    folder; SweepError for bad input."""
    if not base:
        raise SweepError("give the training flags after '--', e.g. -- --env=CartPole-v1")
    gpus = check_args(args, base)
    grid = parse_grid(args.grid)
    for flag in grid:
        if flag_given(base, flag):
            raise SweepError(f"--{flag} is both in --grid and after '--'; give it once")
    root = train_dir_of(base)
    folder = os.path.join(root, args.sweep)
    if os.path.isfile(os.path.join(folder, "config.json")) and not os.path.isfile(
        os.path.join(folder, "sweep.json")
    ):
        raise SweepError(
            f"--sweep={args.sweep}: {folder} is the folder of a run of rl-pbt-train, not of a "
            "sweep; choose another name"
        )
    load_envs(args.train_script)
    runs = plan(args.sweep, root, base, grid, list_flags_of(base))
    check_runs(runs)
    read_earlier(folder, runs)
    on_cpu = [trains_on_the_cpu(run.cfg) for run in runs]
    if gpus and all(on_cpu):
        if args.gpus is not None:
            raise SweepError(
                f"--gpus={args.gpus}: every run trains on the CPU (--device=cpu or "
                "--num_gpus=0); leave --gpus out"
            )
        gpus = []  # CPU runs share the cores, --max_parallel at a time: no GPU slots
    slots = gpu_slots(gpus, args.gpus_per_run, args.runs_per_gpu)
    if args.max_parallel is not None and slots and args.max_parallel > len(slots):
        if not any(on_cpu):  # the room above the slots is for runs kept off the GPUs
            raise SweepError(
                f"--max_parallel={args.max_parallel}: {len(slots)} GPU slot(s) ({len(gpus)} "
                f"GPU(s), --gpus_per_run={args.gpus_per_run}, --runs_per_gpu="
                f"{args.runs_per_gpu}); raise --runs_per_gpu to share a GPU"
            )
    ids = cuda_ids(max(gpus, default=-1) + 1)  # as the runs' CUDA_VISIBLE_DEVICES names them
    slots = [",".join(ids[int(g)] for g in slot.split(",")) for slot in slots]
    limit = args.max_parallel or len(slots) or 1
    return runs, slots[:limit], limit, folder


def core_note(runs: list[Run], limit: int, cores: Optional[int]) -> Optional[str]:
    """A line for runs at once that start more training processes (rollout workers and
    learners) than the machine has cores; None where they fit, or one run at a time."""
    if limit < 2 or not cores:
        return None
    sizes = sorted(
        (int(r.cfg.get("num_workers") or 0) + int(r.cfg.get("num_policies") or 1) for r in runs
         if r.state not in FINISHED),
        reverse=True,
    )  # fmt: skip
    at_once = sizes[:limit]
    if len(at_once) < 2 or sum(at_once) <= cores:
        return None
    return (
        f"note: {len(at_once)} runs at once start up to {sum(at_once)} training processes "
        f"(rollout workers and learners) on {cores} cores: they share them, so each run is "
        "slower than alone; a lower --max_parallel (or --num_workers) gives each run more"
    )


def main(argv: list[str] | None = None) -> int:
    tokens = sys.argv[1:] if argv is None else list(argv)
    try:
        own, base = split_tokens(tokens)
        args = build_parser().parse_args(own)
        runs, slots, limit, folder = prepare(args, base)
    except SweepError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: stopped while checking the runs; nothing was started", file=sys.stderr)
        return 130
    if args.dry_run:
        for run in runs:
            state = " (done earlier)" if run.state == "done earlier" else ""
            print(f"{run.name}{state}: {' '.join(run.argv)}")
        on_cpu = sum(trains_on_the_cpu(run.cfg) for run in runs)
        where = f" on GPU slots {', '.join(slots)}" if slots else " on the CPU"
        if slots and on_cpu:
            where += f" ({plural(on_cpu, 'run')} on the CPU, taking no slot)"
        print(f"{plural(len(runs), 'run')}, {limit} at a time{where}")
        note = core_note(runs, limit, os.cpu_count())
        if note:
            print(note)
        return 0
    root = os.path.dirname(folder)
    lock = RunLock(root, args.sweep)  # one sweep (or run) per folder at a time
    try:
        lock.acquire()
    except LockHeld:
        print(
            f"{PROG}: error: --sweep={args.sweep}: another sweep or run is using {folder} "
            f"({lock.holder()}); stop it first or choose another name",
            file=sys.stderr,
        )
        return 2
    except ConfigError as e:  # the lock file cannot be made
        print(f"{PROG}: error: --sweep={args.sweep}: {e}", file=sys.stderr)
        return 2
    try:
        note = core_note(runs, limit, os.cpu_count())
        if note:
            print(note, flush=True)
        return Sweep(
            args.sweep, folder, runs, slots, limit, args.progress_interval, args.train_script
        ).run()
    finally:
        lock.release()


def cli(argv: list[str] | None = None) -> int:
    return command(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
