"""Pure text and arithmetic behind what the trainer prints: short numbers and durations, the
ETA, the status block, the per-period PBT digest and the end-of-run hints. PopulationStats
(stats.py) gathers the figures and calls these; nothing here reads a clock or a file.
"""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass
from typing import Optional, Sequence

LINE_WIDTH = 120
POLICIES_PER_LINE = 4
MAX_POLICY_LINES = 6  # larger populations show their best and worst members only
DEFAULT_TRAIN_DIR = "train_dir"


# --- numbers and durations --------------------------------------------------------------------
def fmt_num(v: Optional[float]) -> str:
    """A short number (at most 6 characters, 7 when negative): 0.812, 12.3, 4.5k, 1.23M,
    1.2e-3; '-' for None."""
    if v is None:
        return "-"
    v = float(v)
    if not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if v == 0:
        return "0"
    if abs(v) < 0.01:
        mantissa, exponent = f"{v:.1e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    if abs(v) < 1:
        return f"{v:.3f}".rstrip("0").rstrip(".")
    for div, suffix in ((1.0, ""), (1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T")):
        text = f"{v / div:.3g}"
        if "e" not in text and abs(float(text)) < 1000:
            return text + suffix
    return f"{v:.2e}"


def fmt_duration(seconds: Optional[float]) -> str:
    """45s, 3m07s, 2h05m, 3d04h; '?' when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = max(int(round(seconds)), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


# --- ETA --------------------------------------------------------------------------------------
def progress_rate(
    samples: Sequence[tuple[float, float]], window_s: float = 60.0, min_span_s: float = 4.0
) -> Optional[float]:
    """Steps per second over the newest `window_s` seconds of (time, steps) samples, oldest
    first; None until the samples in that window span at least `min_span_s`."""
    if len(samples) < 2:
        return None
    t1, s1 = samples[-1]
    t0, s0 = t1, s1
    for t, s in reversed(samples):
        if t1 - t > window_s:
            break
        t0, s0 = t, s
    if t1 - t0 < min_span_s:
        return None
    return (s1 - s0) / (t1 - t0)


@dataclass(frozen=True)
class Eta:
    seconds: Optional[float]  # None: not enough data yet
    by: str = "steps"  # what ends the run first: "steps" or "time limit"
    upper_bound: bool = False  # the steps rate is unknown: only the time limit bounds the end

    def text(self) -> str:
        if self.seconds is None:
            return "ETA ?"
        if self.seconds <= 0 and self.by == "steps":
            return "done"
        bound = "<=" if self.upper_bound else ""
        why = " (time limit)" if self.by == "time limit" else ""
        return f"ETA {bound}{fmt_duration(self.seconds)}{why}"


def estimate_eta(
    samples: Sequence[tuple[float, float]],
    target_steps: float,
    elapsed: Optional[float] = None,
    time_limit: Optional[float] = None,
    window_s: float = 60.0,
    min_span_s: float = 4.0,
) -> Eta:
    """Time left until the progress in `samples` (time, steps) reaches `target_steps` at the
    recent rate, or until `elapsed` reaches `time_limit` when that comes sooner."""
    time_left = None
    if elapsed is not None and time_limit is not None and math.isfinite(time_limit):
        time_left = max(float(time_limit) - float(elapsed), 0.0)
    steps_left = None
    if samples and samples[-1][1] >= target_steps:
        steps_left = 0.0
    else:
        rate = progress_rate(samples, window_s, min_span_s)
        if rate is not None and rate > 0:
            steps_left = (target_steps - samples[-1][1]) / rate
    if steps_left is None and time_left is None:
        return Eta(None)
    if steps_left is None:
        return Eta(time_left, "time limit", upper_bound=True)
    if time_left is not None and time_left < steps_left:
        return Eta(time_left, "time limit")
    return Eta(steps_left, "steps")


# --- the status block -------------------------------------------------------------------------
@dataclass(frozen=True)
class PolicyStatus:
    policy: int
    env_steps: int
    ret: Optional[float] = None  # mean recent episode return
    obj: Optional[float] = None  # mean recent true objective
    lag: Optional[float] = None  # mean policy lag of the last train step
    # what PBT ranks on where that is not the objective: Elo, the score against snapshots or a
    # scripted player (named by `rank_name` of the status block)
    rank: Optional[float] = None


def ranked_by(policies: Sequence[PolicyStatus]) -> str:
    """Which value names the best member: 'rank' (what PBT ranks on, where any member has
    one), else 'obj' (the recent objective), else 'ret' (the recent return)."""
    for key in ("rank", "obj"):
        if any(getattr(s, key) is not None for s in policies):
            return key
    return "ret"


def _value(s: PolicyStatus, key: str) -> float:
    """s's value of `key`; -inf where it has none (or not a finite one)."""
    v = getattr(s, key)
    return v if v is not None and math.isfinite(v) else -math.inf


def best_policy(policies: Sequence[PolicyStatus]) -> Optional[int]:
    """The member with the highest value of `ranked_by` (ties: the lowest id)."""
    key = ranked_by(policies)
    scored = [(_value(s, key), s.policy) for s in policies if _value(s, key) > -math.inf]
    return max(scored, key=lambda vp: (vp[0], -vp[1]))[1] if scored else None


def headline(
    elapsed: float,
    frames: int,
    fps: float,
    progress: int,
    target: int,
    eta: Eta,
    policies: Sequence[PolicyStatus],
    width: int = LINE_WIDTH,
    rank_name: str = "rank",
    time_limit: Optional[float] = None,
) -> str:
    """One line: time, frames and rate, the population's progress (that of its slowest member,
    `progress` steps, since the run ends when every policy has `target`; or the time spent of
    `time_limit` seconds, where that limit is nearer) with the ETA, the best member (by what
    PBT ranks on, named `rank_name`, where the members have it), the largest policy lag.
    Optional parts are dropped from the end to fit `width`."""
    done = progress / target if target > 0 else 0.0
    of = f"{fmt_num(target)} steps"
    if time_limit and elapsed / time_limit > done:
        done, of = elapsed / time_limit, fmt_duration(time_limit)
    pct = min(math.floor(100 * done), 100)
    where = fmt_num(progress)
    if len(policies) > 1:
        slowest = min(policies, key=lambda s: (s.env_steps, s.policy))
        where = f"p{slowest.policy} {fmt_num(slowest.env_steps)} slowest"
    parts = [
        f"[{fmt_duration(elapsed)}] {fmt_num(frames)} frames {fmt_num(fps)} fps",
        f"{pct}% of {of} ({where}) {eta.text()}",
    ]
    best = best_policy(policies)
    if best is not None:
        key = ranked_by(policies)
        member = next(s for s in policies if s.policy == best)
        label = rank_name if key == "rank" else key
        parts.append(f"best p{best} {label} {fmt_num(getattr(member, key))}")
    lags = [(s.lag, s.policy) for s in policies if s.lag is not None and math.isfinite(s.lag)]
    if lags:
        lag, p = max(lags)
        parts.append(f"lag max {lag:.1f} (p{p})")
    while len(parts) > 2 and len(" | ".join(parts)) > width:
        parts.pop()
    return " | ".join(parts)[:width]


def _cells(policies: Sequence[PolicyStatus]) -> list[str]:
    show_obj = any(s.obj is not None for s in policies)
    ids = [f"p{s.policy}" for s in policies]
    rets = [fmt_num(s.ret) for s in policies]
    objs = [fmt_num(s.obj) for s in policies]
    w_id, w_ret, w_obj = max(map(len, ids)), max(map(len, rets)), max(map(len, objs))
    cells = []
    for i in range(len(policies)):
        cell = f"{ids[i]:<{w_id}} ret {rets[i]:>{w_ret}}"
        cells.append(cell + (f" obj {objs[i]:>{w_obj}}" if show_obj else ""))
    return cells


def policy_lines(
    policies: Sequence[PolicyStatus],
    width: int = LINE_WIDTH,
    per_line: int = POLICIES_PER_LINE,
    max_lines: int = MAX_POLICY_LINES,
) -> list[str]:
    """Aligned per-policy cells ('p3 ret 12.3 obj 0.812'), up to `per_line` to a line.
    A population too large for `max_lines` shows its best and worst members."""
    if not policies:
        return []
    sep, indent = " | ", "  "
    cell_w = max(len(c) for c in _cells(policies))
    k = max(1, min(per_line, (width - len(indent) + len(sep)) // (cell_w + len(sep))))
    shown = list(policies)
    hidden = 0
    if len(policies) > k * max_lines:
        key = ranked_by(policies)
        ranked = sorted(policies, key=lambda s: (-_value(s, key), s.policy))
        n_show = max(max_lines - 1, 1) * k  # the last line says how many are hidden
        keep_worst = n_show // 3
        keep = {s.policy for s in ranked[: n_show - keep_worst]}
        keep |= {s.policy for s in ranked[len(ranked) - keep_worst :]} if keep_worst else set()
        shown = [s for s in policies if s.policy in keep]
        hidden = len(policies) - len(shown)
    cells = _cells(shown)
    width_cells = max(len(c) for c in cells)
    cells = [c.ljust(width_cells) for c in cells]
    lines = [indent + sep.join(cells[i : i + k]).rstrip() for i in range(0, len(cells), k)]
    if hidden:
        lines.append(f"{indent}... {hidden} more policies (all of them in stats/scalars.jsonl)")
    return [line[:width] for line in lines]


# --- PBT ------------------------------------------------------------------------------------
def pbt_event_text(policy: int, source: Optional[int]) -> str:
    return f"p{policy}<-p{source}" if source is not None else f"p{policy} mutated"


def _plural(n: int, word: str, plural: str) -> str:
    return f"{n} {word if n == 1 else plural}"


def pbt_digest(events: Sequence[tuple[int, Optional[int]]], width: int = LINE_WIDTH) -> str:
    """One line for a status period's PBT decisions, (policy, copy source or None) each:
    'PBT: 3 copies (p2<-p5, p7<-p1, p0<-p5), 2 mutations (p1, p4)'. Names beyond `width`
    become '+N'; every detail is in pbt/lineage.jsonl."""
    copies = [pbt_event_text(p, s) for p, s in events if s is not None]
    mutated = [p for p, s in events if s is None]
    times = {p: mutated.count(p) for p in mutated}  # a policy mutated twice: 'p2 x2'
    names = [f"p{p}" + (f" x{times[p]}" if times[p] > 1 else "") for p in dict.fromkeys(mutated)]

    def group(
        word: str, plural: str, items: list[str], keep: int, count: Optional[int] = None
    ) -> Optional[str]:
        if not items:
            return None
        listed = items[:keep] + ([f"+{len(items) - keep}"] if len(items) > keep else [])
        head = _plural(len(items) if count is None else count, word, plural)
        return f"{head} ({', '.join(listed)})" if keep > 0 else head

    for keep in range(max(len(copies), len(names)), -1, -1):
        groups = [
            group("copy", "copies", copies, keep),
            group("mutation", "mutations", names, keep, len(mutated)),
        ]
        text = "PBT: " + ", ".join(g for g in groups if g)
        if len(text) <= width:
            return text
    return text[:width]


def pbt_line(
    events: Sequence[tuple[int, Optional[int]]],
    last_event: Optional[str] = None,
    last_age_s: Optional[float] = None,
    start_steps: Optional[int] = None,
    width: int = LINE_WIDTH,
    past_start: bool = False,
) -> str:
    """The PBT line of a status block: this period's digest, else when the last event was,
    else why there was none yet (`past_start`: every member is past --pbt_start_mutation)."""
    if events:
        return pbt_digest(events, width)
    if last_event is not None:
        return f"PBT: no events this period (last: {last_event}, {fmt_duration(last_age_s)} ago)"
    if past_start:
        return (
            "PBT: no events yet (a member is judged once its record holds 5 results and "
            "a --pbt_period_env_steps has passed)"
        )
    if start_steps:
        return f"PBT: no events yet (starts once every policy passes {fmt_num(start_steps)} steps)"
    return "PBT: no events yet"


def status_block(
    elapsed: float,
    frames: int,
    fps: float,
    progress: int,
    target: int,
    eta: Eta,
    policies: Sequence[PolicyStatus],
    pbt: Optional[str] = None,
    width: int = LINE_WIDTH,
    rank_name: str = "rank",
    time_limit: Optional[float] = None,
) -> list[str]:
    """The lines printed every status interval: headline, per-policy cells, PBT line."""
    lines = [
        headline(
            elapsed, frames, fps, progress, target, eta, policies, width, rank_name, time_limit
        )
    ]
    if any(s.ret is not None or s.obj is not None for s in policies):  # none before an episode
        lines += policy_lines(policies, width)
    if pbt:
        lines.append(("  " + pbt)[:width])
    return lines


# --- end of the run ---------------------------------------------------------------------------
def _cmd(module: str, *args: str) -> str:
    """A command of an installed tool: launch.report -> rl-pbt-report ..."""
    return " ".join([f"rl-pbt-{module.rsplit('.', 1)[-1]}", *args])


def _call(module: str, *args: str) -> str:
    """A command of the env's own script: `launch.enjoy.main([...])` after its register_env."""
    name = module.rsplit(".", 1)[-1]
    plain = [shlex.split(a)[0] for a in args]  # the shell's quoting off: Python strings
    return f"from launch import {name}; {name}.main({plain!r})"


def end_of_run_text(
    exp_dir: str,
    cfg,
    has_pbt: bool,
    selfplay: bool,
    best_policy: Optional[int] = None,
    own_env: bool = False,
    status: int = 0,
    interrupted: bool = False,
    trained: bool = True,
) -> str:
    """Where the results of a finished run are and the commands to look at them. `own_env`:
    the env was registered by the user's code, which a new process knows nothing of: the
    commands that make it are then calls to run after that registration. `status` other than
    0: the run stopped before its end (an error or a stop asked for), and the text says so
    first, and how to go on. `trained=False` (no policy has a trained checkpoint): no commands
    that play the policies, which have only their starting weights."""
    q = shlex.quote
    experiment = getattr(cfg, "experiment", os.path.basename(os.path.normpath(exp_dir)))
    train_dir = getattr(cfg, "train_dir", os.path.dirname(os.path.normpath(exp_dir)))
    env = getattr(cfg, "env", None)
    num_policies = int(getattr(cfg, "num_policies", 1))
    where = [f"--experiment={q(str(experiment))}"]
    if train_dir != DEFAULT_TRAIN_DIR:
        where.append(f"--train_dir={q(str(train_dir))}")
    env_arg = [f"--env={q(str(env))}"] if env else []
    policy = best_policy if best_policy is not None else 0
    files = "summary.json, stats/scalars.jsonl, checkpoint_p*/"
    if has_pbt:
        files += ", pbt/lineage.jsonl"
    watch = f"watch policy {policy}" + (" (the best)" if best_policy is not None else "")
    play = _cmd
    if own_env:
        play, env_arg = _call, []  # the script's own env: the run's config names it
        watch += f" (in your script, after registering {env})"
    hints = [("the run's report", _cmd("launch.report", *where))]
    if trained:
        hints.append((watch, play("launch.enjoy", *env_arg, *where, f"--policy={policy}")))
    if selfplay and trained:
        order = [policy] + [p for p in range(num_policies) if p != policy]
        players = [f"p{p}" for p in order[:4]] + (["random"] if num_policies < 2 else [])
        hints.append(
            (
                "members against each other",
                play("launch.match", *env_arg, *where, "--players", *players, "--games=200"),
            )
        )
    summary = q(os.path.join(exp_dir, ".summary"))
    hints.append(
        (
            "curves in TensorBoard (installed by the report extra, or pip install tensorboard)",
            f"tensorboard --logdir {summary}",
        )
    )
    lines = [f"Results in {exp_dir} ({files}). Next:"]
    if status and interrupted:
        lines = [
            f"The run was stopped (Ctrl-C or SIGTERM) with what it learned saved in {exp_dir} "
            f"({files}); the same command resumes it. To look at it:"
        ]
    elif status:
        lines = [
            f"The run stopped before its end (exit status {status}; the messages above say "
            "why). The same command resumes it from its checkpoints, once the cause is "
            f"fixed. What it saved is in {exp_dir} ({files}); to look at it:"
        ]
    for why, command in hints:
        lines += [f"  {why}:", f"    {command}"]
    return "\n".join(lines)
