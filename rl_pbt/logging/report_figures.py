"""The figures of `launch.report`: pure drawing functions that take plain data (curves, lineage
events, ratings) and return matplotlib Figures. Needs matplotlib (the `report` extra).

Figures are built on the Agg canvas directly, never through pyplot, so importing this module
changes no global matplotlib state (a notebook keeps its own backend).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter, NullLocator

# A curve: (env steps, values), both 1-D sequences of equal length.
Curve = tuple[Sequence[float], Sequence[float]]

STEPS_LABEL = "env frames per member"
DPI = 120
LOG_SPAN_DECADES = 2.0  # an unknown value gets a log axis when positive and wider than this


def member_color(policy: int, num_members: int) -> tuple:
    """One qualitative colour per member: tab10 up to 10 members, tab20 up to 20, then a
    sampled continuous map (beyond 20, no palette keeps every pair apart)."""
    if num_members <= 10:
        return colormaps["tab10"](policy % 10)
    if num_members <= 20:
        return colormaps["tab20"](policy % 20)
    return colormaps["turbo"](policy / max(num_members - 1, 1))


def fmt_steps(x: float, _pos: Any = None) -> str:
    """Tick label for a step count: 0, 500, 20k, 1.5M, 2G."""
    if x == 0:
        return "0"
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def fmt_number(x: float, _pos: Any = None) -> str:
    """Short tick label for a value: 0.001, 0.00095, 1e-05, 12.5."""
    return f"{x:.3g}"


def _readable_log_axis(ax) -> None:
    """Plain-number ticks on a log y axis. Over less than a decade, where a log locator
    would leave one or two labels, ticks are placed as on a linear axis (still drawn on the
    log scale)."""
    low, high = ax.get_ylim()
    if low > 0 and math.log10(high / low) < 1.0:
        ax.yaxis.set_major_locator(MaxNLocator(nbins=5))
        ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(fmt_number))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _steps_axis(ax) -> None:
    ax.xaxis.set_major_formatter(FuncFormatter(fmt_steps))
    ax.set_xlabel(STEPS_LABEL)
    ax.grid(True, alpha=0.3)


def _num_members(policies) -> int:
    return max((int(p) for p in policies), default=-1) + 1


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes (white background, tight bounding box)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", facecolor="white")
    return buf.getvalue()


def message_figure(title: str, text: str) -> Figure:
    """A placeholder panel that says why a figure is empty (e.g. no data logged yet)."""
    fig = _new_figure(6, 2.5)
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_title(title, fontsize=12)
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=10)
    return fig


# ------------------------------------------------------------------------- objective curves


def objective_figure(
    curves: Mapping[int, Curve],
    copies: Sequence[Mapping[str, Any]] = (),
    ylabel: str = "objective",
    title: str = "Objective of each member",
) -> Figure:
    """One line per member over env steps. Each copy event ({"policy", "source", "env_steps"})
    puts a marker on the target's curve at the copy's step, filled with the source's colour."""
    n = _num_members(curves)
    fig = _new_figure(9, 5)
    ax = fig.add_subplot()
    handles = []
    for p in sorted(curves):
        steps, values = (np.asarray(a, dtype=float) for a in curves[p])
        (line,) = ax.plot(steps, values, color=member_color(p, n), lw=1.8, label=f"p{p}")
        handles.append(line)
    marked = 0
    for ev in copies:
        p, src = int(ev["policy"]), ev.get("source")
        if p not in curves or len(curves[p][0]) == 0:
            continue
        steps, values = (np.asarray(a, dtype=float) for a in curves[p])
        x = float(ev["env_steps"])
        y = float(np.interp(x, steps, values))
        face = member_color(int(src), n) if src is not None else "white"
        ax.plot([x], [y], marker="v", ms=10, mfc=face, mec="black", mew=1.0, ls="none", zorder=5)
        marked += 1
    if marked:
        handles.append(
            Line2D(
                [],
                [],
                marker="v",
                ms=10,
                mfc="lightgray",
                mec="black",
                ls="none",
                label="PBT copy on the target\n(fill: the source's colour)",
            )
        )
    _steps_axis(ax)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=13)
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------- value schedules


def choose_log_scale(values: Sequence[float], kind: Optional[str] = None) -> bool:
    """Log y axis for a tuned value: as its search-space kind says when known (log_float), else
    when every value is positive and they span more than LOG_SPAN_DECADES decades."""
    if kind is not None:
        return kind == "log_float"
    arr = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if arr.size == 0 or np.any(arr <= 0):
        return False
    return math.log10(arr.max() / arr.min()) > LOG_SPAN_DECADES


def schedules_figure(
    schedules: Mapping[str, Mapping[int, Curve]],
    end_steps: Mapping[int, float],
    kinds: Optional[Mapping[str, Optional[str]]] = None,
    ncols: int = 3,
) -> tuple[Figure, dict[str, str]]:
    """One small panel per tuned value: each member's value as a step function of env steps,
    held from each change until the member's last step in `end_steps`.

    schedules: {name: {policy: (change steps, values)}}; kinds: {name: search-space kind or
    None when not known}. Returns the figure and {name: "log" | "linear"} (the y scale used).
    """
    kinds = kinds or {}
    names = list(schedules)
    members = sorted({p for per in schedules.values() for p in per})
    n = _num_members(members)
    ncols = max(1, min(ncols, len(names)))
    nrows = max(1, math.ceil(len(names) / ncols))
    top_in = 0.65  # inches above the panels for the title and the legend
    fig = _new_figure(4.3 * ncols, 2.9 * nrows + top_in)
    # members often hold the same value (before their first change, or after a copy):
    # lower ids are drawn wider underneath, so every member stays visible as a stripe
    widths = {
        p: 1.3 + 2.4 * (len(members) - 1 - i) / max(len(members) - 1, 1)
        for i, p in enumerate(members)
    }
    scales: dict[str, str] = {}
    for i, name in enumerate(names):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        everything: list[float] = []
        for p in sorted(schedules[name]):
            steps, values = (list(map(float, a)) for a in schedules[name][p])
            if not steps:
                continue
            end = float(end_steps.get(p, steps[-1]))
            if end > steps[-1]:
                steps, values = steps + [end], values + [values[-1]]
            everything += values
            ax.step(steps, values, where="post", color=member_color(p, n), lw=widths[p])
        log = choose_log_scale(everything, kinds.get(name))
        scales[name] = "log" if log else "linear"
        if log:
            ax.set_yscale("log")
            _readable_log_axis(ax)
        ax.set_title(name + (" (log scale)" if log else ""), fontsize=10)
        _steps_axis(ax)
        ax.tick_params(labelsize=8)
        ax.xaxis.label.set_size(8)
        if i < len(names) - ncols:  # only the bottom panel of each column names the x axis
            ax.set_xlabel("")
    handles = [Line2D([], [], color=member_color(p, n), lw=2, label=f"p{p}") for p in members]
    height = fig.get_figheight()
    fig.suptitle(
        "Tuned values per member (learning values and reward-shaping weights)",
        y=1 - 0.08 / height,
        va="top",
    )
    fig.legend(
        handles=handles,
        loc="upper center",
        ncol=min(len(handles), 10),
        frameon=False,
        bbox_to_anchor=(0.5, 1 - 0.32 / height),
    )
    fig.tight_layout(rect=(0, 0, 1, 1 - top_in / height), pad=0.4, h_pad=1.2)
    return fig, scales


# ------------------------------------------------------------------------- family tree


def _latest_step(events: Sequence[Mapping[str, Any]]) -> float:
    return max((float(e.get("env_steps", 0)) for e in events), default=0.0)


def family_tree_figure(
    events: Sequence[Mapping[str, Any]], end_steps: Mapping[int, float]
) -> tuple[Figure, int]:
    """The lineage drawn over env steps: one row per member, a thick line per life segment,
    coloured by the founding member whose weights it carries, an arrow from source to target
    for every copy ("replace" event) and a tick for every mutation.

    Returns the figure and the number of copy arrows drawn (one per replace event).
    """
    members = sorted(
        {int(e["policy"]) for e in events}
        | {int(e["source"]) for e in events if e.get("source") is not None}
    )
    n = _num_members(members)
    fig = _new_figure(10, 1.2 + 0.55 * max(len(members), 2))
    ax = fig.add_subplot()
    # per member: [start step, root of the weights]; segments close at the next copy or end
    open_segment: dict[int, tuple[float, int]] = {}
    segments: list[tuple[int, float, float, int]] = []
    copies: list[tuple[float, int, int]] = []  # (step, source, target)
    mutations: list[tuple[float, int]] = []
    for ev in events:
        p, step, action = int(ev["policy"]), float(ev.get("env_steps", 0)), ev["action"]
        src = ev.get("source")
        if action == "replace":
            if p in open_segment:
                start, root = open_segment[p]
                segments.append((p, start, step, root))
            src_root = open_segment.get(int(src), (0.0, int(src)))[1] if src is not None else p
            open_segment[p] = (step, src_root)
            if src is not None:
                copies.append((step, int(src), p))
        elif action == "mutate":
            open_segment.setdefault(p, (step, p))
            if ev.get("changes"):
                mutations.append((step, p))
        else:  # init
            open_segment[p] = (step, p)
    last = _latest_step(events)
    for p, (start, root) in open_segment.items():
        segments.append((p, start, max(float(end_steps.get(p, last)), start), root))

    for p, start, end, root in segments:
        ax.plot([start, end], [p, p], color=member_color(root, n), lw=6, solid_capstyle="butt")
        ax.plot([start], [p], marker="o", ms=5, color="black", zorder=4)
    if mutations:
        xs, ys = zip(*mutations)
        ax.plot(xs, ys, ls="none", marker="|", ms=14, mew=1.5, color="black", zorder=4)
    drawn = 0
    for step, src, target in copies:
        arrow = FancyArrowPatch(
            (step, src),
            (step, target),
            arrowstyle="-|>",
            mutation_scale=14,
            lw=1.4,
            color="black",
            connectionstyle="arc3,rad=0.25",
            shrinkA=4,
            shrinkB=6,
            zorder=6,
        )
        ax.add_patch(arrow)
        drawn += 1

    ax.set_yticks(members)
    ax.set_yticklabels([f"p{p}" for p in members])
    ax.set_ylim(max(members, default=0) + 0.7, min(members, default=0) - 0.7)  # p0 on top
    ax.set_ylabel("member")
    _steps_axis(ax)
    ax.grid(True, axis="x", alpha=0.3)
    ax.grid(False, axis="y")
    roots = sorted({root for *_, root in segments})
    handles = [
        Line2D([], [], color=member_color(r, n), lw=6, label=f"weights from p{r}") for r in roots
    ]
    handles.append(
        Line2D([], [], color="black", lw=1.4, marker=">", ms=6, label="copy: source -> target")
    )
    if mutations:
        handles.append(
            Line2D([], [], ls="none", marker="|", ms=12, mew=1.5, color="black", label="mutation")
        )
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title(f"PBT family tree: {drawn} weight copies, {len(mutations)} mutations", fontsize=13)
    fig.tight_layout()
    return fig, drawn


# ------------------------------------------------------------------------- self-play


def elo_curves_figure(curves: Mapping[int, Curve], tag: str) -> Figure:
    """Each member's Elo rating over env steps (from the scalar log)."""
    n = _num_members(curves)
    fig = _new_figure(9, 4.5)
    ax = fig.add_subplot()
    for p in sorted(curves):
        steps, values = curves[p]
        ax.plot(steps, values, color=member_color(p, n), lw=1.8, label=f"p{p}")
    _steps_axis(ax)
    ax.set_ylabel(f"Elo rating ({tag})")
    ax.set_title("Elo rating of each member", fontsize=13)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def elo_bars_figure(entries: Sequence[tuple[Any, float, int]], num_members: int) -> Figure:
    """Latest ratings as horizontal bars, highest on top: members in their colours, frozen
    snapshots (string ids) hatched; each bar says how many rated games it rests on."""
    rows = sorted(entries, key=lambda e: -e[1])
    fig = _new_figure(8, 1.0 + 0.38 * max(len(rows), 3))
    ax = fig.add_subplot()
    labels = []
    y = np.arange(len(rows))
    for yi, (key, rating, _) in zip(y, rows):
        member = isinstance(key, int) and not isinstance(key, bool)
        labels.append(f"p{key}" if member else str(key))
        if member:
            ax.barh(yi, rating, color=member_color(key, num_members))
        else:  # hatched, so no member colour (tab10 has a gray) is mistaken for a snapshot
            ax.barh(yi, rating, color="white", edgecolor="0.35", hatch="///")
    ratings = [r for _, r, _ in rows]
    low = min(ratings, default=0.0)
    high = max(ratings, default=1.0)
    pad = max(high - low, 50.0) * 0.25
    ax.set_xlim(low - pad, high + pad)
    for yi, (_, r, games) in zip(y, rows):
        ax.text(r, yi, f" {r:.0f} ({games} games)", va="center", fontsize=8)
    ax.set_yticks(y)
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlabel("Elo rating")
    ax.set_title("Elo ratings at the last save (members in colour, frozen snapshots hatched)")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def win_rate_figure(players: Sequence[str], matrix: Sequence[Sequence[Optional[float]]]) -> Figure:
    """Cross-play heatmap: cell (row, column) is the row player's win rate against the column
    player (draw = 0.5); the diagonal is left blank."""
    arr = np.array([[np.nan if v is None else float(v) for v in row] for row in matrix])
    k = len(players)
    size = 2.5 + 0.6 * k
    fig = _new_figure(size + 1.2, size)
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(arr), cmap="RdBu", vmin=0.0, vmax=1.0)
    for i in range(k):
        for j in range(k):
            if np.isfinite(arr[i, j]):
                color = "white" if abs(arr[i, j] - 0.5) > 0.3 else "black"
                ax.text(j, i, f"{arr[i, j]:.2f}", ha="center", va="center", color=color, fontsize=9)
    ax.set_xticks(range(k))
    ax.set_xticklabels(players, rotation=45, ha="right")
    ax.set_yticks(range(k))
    ax.set_yticklabels(players)
    ax.set_xlabel("column player (opponent)")
    ax.set_ylabel("row player")
    ax.set_title("Cross-play win rate of row vs column")
    fig.colorbar(image, ax=ax, label="win rate (draw = 0.5)", shrink=0.8)
    fig.tight_layout()
    return fig
