"""Report on a run: the population's family tree as text, and `report/index.html` in the
experiment folder with figures (objective curves with PBT copies, each tuned value's schedule,
the family tree, Elo and cross-play for self-play) and the table of final values.

    python -m launch.report --experiment=lure [--train_dir=train_dir] [--dot tree.dot]

Reads the scalar log (stats/scalars.jsonl), pbt/lineage.jsonl, the policy files, summary.json
and elo.json; works on a finished, running or resumed run and names what it could not find.
Figures are drawn by rl_pbt.logging.report_figures (matplotlib, the `report` extra).
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from launch import ToolParser, command, summary
from rl_pbt.extras import install_hint
from rl_pbt.logging.files import (
    EXPERIMENT_MARKER,
    atomic_write,
    experiment_name_problem,
    policy_cfg_path,
    policy_shaping_path,
    read_json,
    read_run_config,
    read_scalars,
    scalars_path,
)
from rl_pbt.logging.video import output_file_problem
from rl_pbt.pbt.lineage import family_tree_dot, family_tree_text, lineage_path, read_events
from rl_pbt.pbt.search_space import (
    DEFAULT_LEARNING_SPECS,
    GAMMA_SPEC,
    flatten_shaping,
    fmt_value,
    load_search_space_file,
)

PROG = "rl-pbt-report"
REPORT_DIR = "report"
# what "objective" means in the curves and the table, first one logged wins
OBJECTIVE_TAGS = ("episode/true_objective", "pbt/objective", "episode/reward")
TAG_NAMES = {
    "episode/true_objective": "true objective",
    "pbt/objective": "PBT objective",
    "episode/reward": "episode return",
}
# a cross-play table kept beside the run, drawn when present (the trainer does not write it):
# {"players": [names], "win_rate": [[row player's win rate against column player, or null]]}
CROSS_PLAY_FILE = "cross_play.json"
NO_PBT = "no PBT in this run: no lineage, schedules or family tree"

Curves = dict[int, tuple[list[float], list[float]]]


# ---------------------------------------------------------------------------- reading


def member_timelines(records: list[dict[str, Any]]) -> tuple[dict[int, list[dict]], int]:
    """Per member, records with strictly increasing env steps, and how many were dropped
    because a resume went back past them.

    The last record logged for a step wins (a member that trained nothing between two summary
    periods logs its step twice). A resumed run starts again from its last checkpoint, so its
    steps go back: what the file holds from the lost stretch is dropped for the newer records.
    A record at step 0 after later ones is skipped: a resumed runner logs before its learners
    have reported their restored step counts."""
    timelines: dict[int, list[dict]] = {}
    superseded = 0
    for rec in records:
        rows = timelines.setdefault(rec["policy"], [])
        if rec["env_steps"] == 0 and rows and rows[-1]["env_steps"] > 0:
            continue
        while rows and rows[-1]["env_steps"] > rec["env_steps"]:
            rows.pop()
            superseded += 1
        if rows and rows[-1]["env_steps"] == rec["env_steps"]:
            rows.pop()
        rows.append(rec)
    return timelines, superseded


def _number(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def curves_for(timelines: dict[int, list[dict]], tag: str) -> Curves:
    """{member: (env steps, values)} of one tag; members that never logged it are left out."""
    out: Curves = {}
    for p, rows in timelines.items():
        points = [(r["env_steps"], _number(r["scalars"].get(tag))) for r in rows]
        points = [(s, v) for s, v in points if v is not None]
        if points:
            out[p] = ([float(s) for s, _ in points], [v for _, v in points])
    return out


def pick_tag(timelines: dict[int, list[dict]], candidates) -> Optional[str]:
    logged = {tag for rows in timelines.values() for r in rows for tag in r["scalars"]}
    return next((t for t in candidates if t in logged), None)


def elo_tag(timelines: dict[int, list[dict]]) -> Optional[str]:
    """A logged Elo rating, e.g. "selfplay/elo", "pbt/elo_rating" or "elo/rating"."""
    logged = sorted({tag for rows in timelines.values() for r in rows for tag in r["scalars"]})

    def is_elo(tag: str) -> bool:
        last = tag.lower().split("/")[-1]
        return last == "elo" or last.startswith("elo_") or tag.lower().startswith("elo/")

    return next((t for t in logged if is_elo(t)), None)


def latest_run(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of the newest run in the log: a second "init" of a member means the
    experiment was started afresh (--restart_behavior=restart) and appended to the file."""
    start, seen = 0, set()
    for i, ev in enumerate(events):
        if ev["action"] != "init":
            continue
        if int(ev["policy"]) in seen:
            start, seen = i, set()
        seen.add(int(ev["policy"]))
    return events[start:]


def value_schedules(events: list[dict[str, Any]]) -> dict[str, dict[int, tuple[list, list]]]:
    """{value name: {member: (steps, values)}}: each member's numeric tuned values after every
    lineage event (changes are relative to the member's own previous values)."""
    current: dict[int, dict[str, Any]] = {}
    out: dict[str, dict[int, tuple[list, list]]] = {}
    for ev in events:
        p = int(ev["policy"])
        if ev["action"] == "init":
            values: dict[str, Any] = {}
        else:
            base = current.get(p)
            if base is None and ev.get("source") is not None:
                base = current.get(int(ev["source"]))
            values = dict(base or {})
        for name, pair in (ev.get("changes") or {}).items():
            values[name] = pair[1]
        current[p] = values
        for name, v in values.items():
            v = _number(v)
            if v is not None:
                steps, vals = out.setdefault(name, {}).setdefault(p, ([], []))
                steps.append(float(ev.get("env_steps", 0)))
                vals.append(v)
    return out


def value_kinds(cfg: dict[str, Any], names, notes: list[str]) -> dict[str, Optional[str]]:
    """Search-space kind of each value (log_float, float, ...): the run's search-space file,
    else the built-in specs; None where not known (the figure then judges from the values)."""
    specs = dict(DEFAULT_LEARNING_SPECS)
    specs["gamma"] = GAMMA_SPEC
    path = cfg.get("pbt_search_space")
    if path:
        try:
            specs.update(load_search_space_file(path))
        except (OSError, ValueError) as e:
            notes.append(f"search space file {path} unreadable ({e}): log axes judged from values")
    return {name: (specs[name].kind if name in specs else None) for name in names}


def read_elo(exp_dir: str, problems: Optional[dict] = None) -> list[tuple[Any, float, int]]:
    """(id, rating, games) from elo.json: ints are members, strings frozen snapshots. A file
    that cannot be read puts its path and why in `problems`."""
    data = _read_optional(os.path.join(exp_dir, "elo.json"), problems, {})
    if data is None:
        return []
    if not isinstance(data, dict) or not isinstance(data.get("entries", []), list):
        _unreadable(
            exp_dir, "elo.json", 'expected {"entries": [[id, rating, games], ...]}', problems
        )
        return []
    out = []
    for entry in data.get("entries", []):
        try:
            key, rating, games = entry
            key = key if isinstance(key, int) else str(key)
            out.append((key, float(rating), int(games)))
        except (TypeError, ValueError):
            continue
    return out


def read_cross_play(
    exp_dir: str, problems: Optional[dict] = None
) -> Optional[tuple[list[str], list[list]]]:
    data = _read_optional(os.path.join(exp_dir, CROSS_PLAY_FILE), problems)
    if data is None:
        return None
    try:
        players, matrix = [str(p) for p in data["players"]], data["win_rate"]
        square = len(matrix) == len(players) and all(len(row) == len(players) for row in matrix)
    except (TypeError, KeyError):
        square = False
    if not square:
        why = 'expected {"players": [names], "win_rate": [[one row per player]]}'
        _unreadable(exp_dir, CROSS_PLAY_FILE, why, problems)
        return None
    return players, matrix


def _unreadable(exp_dir: str, name: str, why: str, problems: Optional[dict]) -> None:
    if problems is not None:
        problems[name] = f"{os.path.join(exp_dir, name)} is unreadable ({why})"


def _read_optional(path: str, problems: Optional[dict], default: Any = None) -> Any:
    """The JSON in `path`, `default` when there is no such file, None when it cannot be read
    (its path and why are put in `problems`, keyed by the file name)."""
    try:
        return read_json(path, default)
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) else f"not valid JSON: {e}"
        _unreadable(os.path.dirname(path), os.path.basename(path), why, problems)
        return None


def _safe_json(path: str, default: Any = None) -> Any:
    try:
        return read_json(path, default)
    except (OSError, ValueError):
        return default


def read_config(exp_dir: str) -> tuple[dict, Optional[str]]:
    """The run's config.json ({} when there is none) and what is wrong with it, if anything."""
    path = os.path.join(exp_dir, "config.json")
    if not os.path.isfile(path):
        return {}, None
    try:
        return read_run_config(path), None
    except ValueError as e:
        return {}, str(e)


# ---------------------------------------------------------------------------- the report


@dataclass
class Section:
    title: str
    notes: list[str] = field(default_factory=list)
    png: Optional[str] = None  # file name inside report/
    image: Optional[bytes] = None
    caption: str = ""
    html: str = ""


@dataclass
class RunData:
    exp_dir: str
    cfg: dict
    events: list
    timelines: dict
    scalars_skipped: int
    superseded: int
    summary: dict
    end_steps: dict = field(default_factory=dict)  # member -> last env step known
    problems: dict = field(default_factory=dict)  # file name -> why it is unreadable


def load_run(exp_dir: str, cfg: Optional[dict] = None) -> RunData:
    if cfg is None:
        cfg = read_config(exp_dir)[0]
    records, skipped = read_scalars(scalars_path(exp_dir))
    timelines, superseded = member_timelines(records)
    events = latest_run(read_events(lineage_path(exp_dir)))
    problems: dict[str, str] = {}
    summary = _read_optional(os.path.join(exp_dir, "summary.json"), problems, {}) or {}
    policies = summary.get("policies") if isinstance(summary, dict) else None
    if not isinstance(summary, dict) or not isinstance(policies or {}, dict):
        _unreadable(exp_dir, "summary.json", 'expected {"policies": {member: stats}}', problems)
        summary = {}
    run = RunData(exp_dir, cfg, events, timelines, skipped, superseded, summary, {}, problems)
    for p, rows in timelines.items():
        run.end_steps[p] = float(rows[-1]["env_steps"])
    for p, stats in (summary.get("policies") or {}).items():
        steps = _number(stats.get("env_steps")) if isinstance(stats, dict) else None
        if steps is not None and str(p).isdigit():
            run.end_steps[int(p)] = max(run.end_steps.get(int(p), 0.0), steps)
    for ev in events:
        p = int(ev["policy"])
        run.end_steps[p] = max(run.end_steps.get(p, 0.0), float(ev.get("env_steps", 0)))
    return run


def objective_section(run: RunData, figures) -> Section:
    sec = Section("Objective over training", png="objective.png")
    path = os.path.relpath(scalars_path(run.exp_dir), run.exp_dir)
    if run.scalars_skipped:
        sec.notes.append(
            f"skipped {run.scalars_skipped} unreadable line(s) of {path} "
            "(a line being written by a running run, or torn by a crash)"
        )
    if run.superseded:
        sec.notes.append(
            f"{run.superseded} record(s) of {path} replaced after a resume "
            "(the run went back to its last checkpoint; the newer values are drawn)"
        )
    tag = pick_tag(run.timelines, OBJECTIVE_TAGS)
    if tag is None:
        if run.timelines:
            what = "holds no objective"
        elif os.path.isfile(scalars_path(run.exp_dir)):
            what = "holds no readable record"
        else:
            what = "is missing"
        sec.notes.append(f"the scalar log {path} {what}: no objective curves")
        return sec
    copies = [e for e in run.events if e["action"] == "replace"]
    sec.image = figures.png_bytes(
        figures.objective_figure(
            curves_for(run.timelines, tag),
            copies,
            ylabel=f"{TAG_NAMES[tag]} (mean of recent episodes)",
            title=f"Objective of each member: {TAG_NAMES[tag]} ({tag})",
        )
    )
    sec.caption = f"{tag} per member, as logged at every summary period"
    if copies:
        sec.caption += f"; {len(copies)} PBT copies marked on the target's curve"
    return sec


def schedules_section(run: RunData, figures) -> Section:
    sec = Section("Tuned values per member", png="schedules.png")
    schedules = value_schedules(run.events)
    varying = {
        name: per
        for name, per in schedules.items()
        if len({v for _, vals in per.values() for v in vals}) > 1
    }
    fixed = sorted(set(schedules) - set(varying))
    if not varying:
        sec.notes.append("no value has changed yet (no mutation or copy in the lineage)")
        return sec
    order = sorted(varying, key=lambda k: (k.startswith("rew."), k))
    kinds = value_kinds(run.cfg, order, sec.notes)
    fig, scales = figures.schedules_figure({k: varying[k] for k in order}, run.end_steps, kinds)
    sec.image = figures.png_bytes(fig)
    logs = [k for k in order if scales[k] == "log"]
    sec.caption = "each member's value from the lineage log, held until its next change"
    if logs:
        sec.caption += f"; log axes: {', '.join(logs)}"
    if fixed:
        sec.caption += f"; unchanged in every member: {', '.join(fixed)}"
    return sec


def family_tree_section(run: RunData, figures) -> Section:
    sec = Section("Family tree", png="family_tree.png")
    fig, drawn = figures.family_tree_figure(run.events, run.end_steps)
    sec.image = figures.png_bytes(fig)
    sec.caption = (
        f"{drawn} weight copies: an arrow from the source member to the target at the "
        "target's env step; line colour: the founding member whose weights a segment carries"
    )
    sec.html = f"<pre>{html.escape(family_tree_text(run.events))}</pre>"
    return sec


def selfplay_sections(run: RunData, figures) -> list[Section]:
    entries = read_elo(run.exp_dir, run.problems)
    tag = elo_tag(run.timelines)
    cross = read_cross_play(run.exp_dir, run.problems)
    unreadable = [run.problems[f] for f in ("elo.json", CROSS_PLAY_FILE) if f in run.problems]
    if not any(games for *_, games in entries) and tag is None and cross is None:
        if unreadable:
            return [
                Section(
                    "Self-play", notes=[f"{n}: no Elo or cross-play figures" for n in unreadable]
                )
            ]
        return [
            Section(
                "Self-play",
                notes=["no rated self-play matches in this run: no Elo or cross-play figures"],
            )
        ]
    members = max([p for p, _, _ in entries if isinstance(p, int)] + list(run.timelines) + [0])
    sec = Section("Elo ratings", png="elo.png")
    if tag is not None:
        sec.image = figures.png_bytes(
            figures.elo_curves_figure(curves_for(run.timelines, tag), tag)
        )
        sec.caption = f"{tag} per member over env steps"
        if "elo.json" in run.problems:  # the curves do not need it, but say it is damaged
            sec.notes.append(f"{run.problems['elo.json']}: the curves come from the scalar log")
    elif entries:
        sec.image = figures.png_bytes(figures.elo_bars_figure(entries, members + 1))
        sec.caption = "ratings saved in elo.json (the run keeps only the latest ratings)"
        sec.notes.append("no Elo rating in the scalar log: no Elo curves over time")
    elif "elo.json" in run.problems:
        sec.notes.append(f"{run.problems['elo.json']}: no Elo figure")
    else:
        sec.notes.append("no Elo ratings saved (elo.json) nor logged: no Elo figure")
    win = Section("Cross-play win rates", png="cross_play.png")
    if cross is not None:
        win.image = figures.png_bytes(figures.win_rate_figure(*cross))
        win.caption = f"from {CROSS_PLAY_FILE}"
    elif CROSS_PLAY_FILE in run.problems:
        win.notes.append(f"{run.problems[CROSS_PLAY_FILE]}: no cross-play figure")
    else:
        win.notes.append(
            f"no cross-play win rates on disk ({CROSS_PLAY_FILE}): "
            "rl-pbt-match plays members against each other and prints the table"
        )
    return [sec, win]


def final_rows(run: RunData) -> tuple[list[str], list[dict[str, Any]], str]:
    """Table of each member's current values and final objective, its columns, and where the
    objectives come from (summary.json, or the scalar log when it is newer)."""
    exp_dir = run.exp_dir
    members = set(run.timelines) | set(run.end_steps)
    p = 0
    while os.path.isfile(policy_cfg_path(exp_dir, p)):
        members.add(p)
        p += 1
    tag = pick_tag(run.timelines, OBJECTIVE_TAGS)
    summary_path = os.path.join(exp_dir, "summary.json")
    summary_time = os.path.getmtime(summary_path) if os.path.isfile(summary_path) else -1.0
    rows, columns, sources = [], [], set()
    for p in sorted(members):
        values = _safe_json(policy_cfg_path(exp_dir, p), {})
        values = dict(values) if isinstance(values, dict) else {}  # not a policy file: skipped
        shaping = _safe_json(policy_shaping_path(exp_dir, p))
        values.update(flatten_shaping(shaping if isinstance(shaping, dict) else None))
        columns += [k for k in values if k not in columns]
        stats = (run.summary.get("policies") or {}).get(str(p)) or {}
        stats = stats if isinstance(stats, dict) else {}
        objective = _number(stats.get("mean_objective"))
        if objective is None:
            objective = _number(stats.get("mean_return"))
        source = "summary.json"
        timeline = run.timelines.get(p) or []
        logged_at = _number(timeline[-1].get("time")) if timeline else None
        if tag is not None and logged_at is not None and logged_at > summary_time:
            logged = curves_for({p: timeline}, tag).get(p)
            if logged:
                objective, source = logged[1][-1], f"scalar log ({tag})"
        if objective is not None:
            sources.add(source)
        rows.append(
            {
                "member": p,
                "objective": objective,
                "env_steps": run.end_steps.get(p),
                "values": values,
            }
        )
    columns.sort(key=lambda k: (k.startswith("rew."), k))
    return columns, rows, ", ".join(sorted(sources)) or "nowhere yet"


def table_section(run: RunData) -> Section:
    sec = Section("Final values per member")
    columns, rows, source = final_rows(run)
    if not rows:
        sec.notes.append("no policy files (policy_NN_cfg.json) and no scalars: no table")
        return sec
    best = max((r["objective"] for r in rows if r["objective"] is not None), default=None)
    head = "".join(
        f"<th>{html.escape(c)}</th>" for c in ["member", "final objective", "env frames", *columns]
    )
    body = []
    for r in rows:
        obj = r["objective"]
        cells = [
            f"p{r['member']}",
            "-" if obj is None else f"{obj:.4g}",
            "-" if r["env_steps"] is None else f"{int(r['env_steps']):,}",
        ]
        cells += [fmt_value(r["values"][c]) if c in r["values"] else "-" for c in columns]
        style = ' class="best"' if obj is not None and obj == best else ""
        body.append(f"<tr{style}>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    sec.html = f"<table><tr>{head}</tr>{''.join(body)}</table>"
    sec.caption = (
        f"values from policy_NN_cfg.json and policy_NN_reward_shaping.json; "
        f"objectives from {source}; best member in bold"
    )
    return sec


def build_sections(run: RunData, figures) -> list[Section]:
    sections = [objective_section(run, figures)]
    pbt_on = bool(run.cfg.get("with_pbt")) or bool(run.events)
    if run.events:
        sections += [schedules_section(run, figures), family_tree_section(run, figures)]
    elif pbt_on:
        sections.append(
            Section(
                "PBT",
                notes=[
                    "PBT is on but pbt/lineage.jsonl holds no events yet: "
                    "no schedules or family tree"
                ],
            )
        )
    else:
        sections.append(Section("PBT", notes=[NO_PBT]))
    sections += selfplay_sections(run, figures)
    sections.append(table_section(run))
    if "summary.json" in run.problems:
        sections[-1].notes.append(
            f"{run.problems['summary.json']}: objectives come from the scalar log"
        )
    elif not run.summary:
        sections[-1].notes.append(
            "summary.json not written yet (the run is still going, or was "
            "killed): objectives come from the scalar log"
        )
    return sections


CSS = """
body { font-family: sans-serif; max-width: 1200px; margin: 2em auto; color: #222; }
img { max-width: 100%; border: 1px solid #ddd; }
.note { color: #8a4b00; background: #fff4e0; padding: 0.3em 0.6em; margin: 0.3em 0; }
.caption { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; font-size: 0.85em; }
td, th { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }
tr.best td { font-weight: bold; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; }
"""


def render_html(title: str, exp_dir: str, sections: list[Section]) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    parts = [
        "<!DOCTYPE html>",
        f"<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p class='caption'>{html.escape(os.path.abspath(exp_dir))}, made {when}</p>",
    ]
    for sec in sections:
        parts.append(f"<h2>{html.escape(sec.title)}</h2>")
        parts += [f"<p class='note'>{html.escape(n)}</p>" for n in sec.notes]
        if sec.image is not None:
            data = base64.b64encode(sec.image).decode("ascii")
            parts.append(f"<img alt='{html.escape(sec.title)}' src='data:image/png;base64,{data}'>")
        if sec.caption:
            parts.append(f"<p class='caption'>{html.escape(sec.caption)}</p>")
        parts.append(sec.html)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(run: RunData, figures) -> tuple[str, list[str]]:
    """Draw every figure, write report/*.png and report/index.html. Returns the page's path
    and the notes (what is missing), one line each."""
    exp_dir = run.exp_dir
    sections = build_sections(run, figures)
    out_dir = os.path.join(exp_dir, REPORT_DIR)
    os.makedirs(out_dir, exist_ok=True)
    for sec in sections:
        if sec.image is not None and sec.png:
            atomic_write(os.path.join(out_dir, sec.png), lambda f, b=sec.image: f.write(b), "wb")
    title = f"Run report: {os.path.basename(os.path.normpath(exp_dir))}"
    page = render_html(title, exp_dir, sections)
    index = os.path.join(out_dir, "index.html")
    atomic_write(index, lambda f: f.write(page))
    return index, [n for sec in sections for n in sec.notes]


# ---------------------------------------------------------------------------- command line


def print_text(run: RunData) -> None:
    """The text report: PBT event counts, the family tree and each member's final values."""
    events = run.events
    counts: dict[str, int] = {}
    for e in events:
        counts[e["action"]] = counts.get(e["action"], 0) + 1
    print(f"{len(events)} PBT events: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print("\nFamily tree:")
    print(family_tree_text(events))
    print("Final values:")
    _, rows, _ = final_rows(run)
    for row in rows:
        obj = row["objective"]
        hp = {k: v for k, v in row["values"].items() if not k.startswith("rew.")}
        shaping = _safe_json(policy_shaping_path(run.exp_dir, row["member"]))
        print(
            f"p{row['member']}: objective {obj if obj is None else round(obj, 4)} | "
            + ", ".join(f"{k}={v:.4g}" for k, v in sorted(hp.items()) if _number(v) is not None)
            + (f" | shaping {json.dumps(shaping)}" if shaping else "")
        )


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = ToolParser(PROG, summary(__doc__))
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--train_dir", default="train_dir", type=os.path.expanduser)
    parser.add_argument("--dot", default=None, help="also write the tree as graphviz dot")
    args = parser.parse_args(argv)
    problem = experiment_name_problem(args.experiment)
    if problem:
        return _fail(f"--experiment={args.experiment!r} {problem}: give the experiment's name")
    exp_dir = os.path.join(args.train_dir, args.experiment)
    if not os.path.isdir(exp_dir):
        return _fail(
            f"--experiment={args.experiment}: no experiment folder {exp_dir} "
            f"(--train_dir={args.train_dir})"
        )
    if not any(
        os.path.exists(os.path.join(exp_dir, f)) for f in ("config.json", EXPERIMENT_MARKER)
    ):
        return _fail(
            f"--experiment={args.experiment}: {exp_dir} is not an experiment folder "
            "(no config.json)"
        )
    cfg, problem = read_config(exp_dir)
    if problem:
        return _fail(f"--experiment={args.experiment}: {problem}")
    if args.dot:
        problem = output_file_problem(args.dot)
        if problem:
            return _fail(
                f"--dot={args.dot}: {problem}; give a file path for the tree "
                "(e.g. --dot=tree.dot) in a folder you can write to"
            )
    try:
        from rl_pbt.logging import report_figures
    except ImportError as e:
        if not (e.name or "").startswith("matplotlib"):
            raise
        return _fail(f"the report figures need matplotlib: {install_hint('report')}")

    run = load_run(exp_dir, cfg)
    if run.events:
        print_text(run)
    try:
        index, notes = write_report(run, report_figures)
    except OSError as e:
        where = os.path.join(exp_dir, REPORT_DIR)
        return _fail(f"cannot write the report in {where}: {e.strerror or e}")
    if notes:
        print("\nNotes:")
        for note in notes:
            print(f"  - {note}")
    if args.dot:
        if run.events:
            dot = family_tree_dot(run.events)
            try:
                atomic_write(args.dot, lambda f: f.write(dot))
            except OSError as e:
                return _fail(f"--dot={args.dot}: cannot write it ({e.strerror})")
            print(f"\nwrote {args.dot}")
        else:
            print(f"\nno lineage: {args.dot} not written")
    print(os.path.abspath(index))
    return 0


def cli(argv: list[str] | None = None) -> int:
    """`rl-pbt-report`: main() as the process's last work (see launch.command)."""
    return command(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
