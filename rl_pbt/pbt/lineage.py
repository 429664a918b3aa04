"""PBT lineage: the append-only JSON-lines event log ({exp_dir}/pbt/lineage.jsonl) and its readers.

Written by manager.py; replayed here as per-policy schedules and drawn as family trees.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from typing import Any, Mapping, Optional

from rl_pbt.logging.files import pbt_dir
from rl_pbt.pbt.search_space import is_shaping_key, unflatten_shaping

log = logging.getLogger(__name__)

LINEAGE_FILE = "lineage.jsonl"
ACTIONS = ("init", "mutate", "replace")

Schedule = list[tuple[int, dict[str, Any], Optional[dict]]]


def lineage_path(exp_dir: str) -> str:
    return os.path.join(pbt_dir(exp_dir), LINEAGE_FILE)


def make_event(
    policy: int,
    action: str,
    env_steps: int,
    changes: Mapping[str, Any],
    source: Optional[int] = None,
    objectives: Optional[Mapping[Any, Optional[float]]] = None,
    reason: Optional[str] = None,
    time_s: Optional[float] = None,
    source_env_steps: Optional[int] = None,
) -> dict[str, Any]:
    """One lineage record. changes: {param: [old, new]} (old is None for "init");
    `source_env_steps`: for a copy, how many env steps the source's weights had trained."""
    if action not in ACTIONS:
        raise ValueError(f"lineage action {action!r} is not one of {ACTIONS}")
    event: dict[str, Any] = {
        "time": time.time() if time_s is None else float(time_s),
        "env_steps": int(env_steps),
        "policy": int(policy),
        "action": action,
        "source": None if source is None else int(source),
        "changes": {k: [v[0], v[1]] for k, v in changes.items()},
        "objectives": {str(k): v for k, v in (objectives or {}).items()},
    }
    if source_env_steps is not None:
        event["source_env_steps"] = int(source_env_steps)
    if reason:
        event["reason"] = reason
    return event


def append_event(path: str, event: Mapping[str, Any]) -> None:
    """Append one JSON line and fsync. A torn last line from a crash is closed off first, so
    the new record always starts on a line of its own."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    line = json.dumps(event, sort_keys=True, default=float)
    with open(path, "ab+") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write(line.encode() + b"\n")
        f.flush()
        os.fsync(f.fileno())


def read_events(path: str) -> list[dict[str, Any]]:
    """All readable events in file order; [] when the file does not exist. Lines that do not
    parse (a write torn by a crash) are skipped; one that is not the last line is logged."""
    if not os.path.isfile(path):
        return []
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    events = []
    last = max((i for i, raw in enumerate(lines) if raw.strip()), default=-1)
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            event = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            if i != last:
                log.warning("%s: skipping unreadable line %d", path, i + 1)
            continue
        if _well_formed(event):
            events.append(event)
        else:
            log.warning("%s: skipping line %d, not a lineage event", path, i + 1)
    return events


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _well_formed(event: Any) -> bool:
    """A record as make_event writes it, in the fields the readers use."""
    if not isinstance(event, dict) or not _is_count(event.get("policy")):
        return False
    if event.get("action") not in ACTIONS:
        return False
    steps = event.get("env_steps", 0)
    if isinstance(steps, bool) or not isinstance(steps, (int, float)) or not math.isfinite(steps):
        return False
    source = event.get("source")
    if source is not None and not _is_count(source):
        return False
    if "source_env_steps" in event and not _is_count(event["source_env_steps"]):
        return False
    changes = event.get("changes", {})
    return isinstance(changes, dict) and all(
        isinstance(v, list) and len(v) == 2 for v in changes.values()
    )


# ---------------------------------------------------------------- schedules


def _replay(events: list[Mapping[str, Any]]) -> dict[int, list[tuple[int, int, dict]]]:
    """Per policy: (event index, env steps, complete flat values after the event)."""
    current: dict[int, dict[str, Any]] = {}
    snaps: dict[int, list[tuple[int, int, dict]]] = {}
    for i, ev in enumerate(events):
        p = int(ev["policy"])
        changes = ev.get("changes") or {}
        if ev["action"] == "init":
            values: dict[str, Any] = {}
        else:
            base = current.get(p)
            if base is None and ev.get("source") is not None:
                base = current.get(int(ev["source"]), {})
            values = dict(base or {})
        for key, pair in changes.items():
            values[key] = pair[1]
        current[p] = values
        snaps.setdefault(p, []).append((i, int(ev.get("env_steps", 0)), values))
    return snaps


def _split(values: Mapping[str, Any]) -> tuple[dict[str, Any], Optional[dict]]:
    hparams = {k: v for k, v in values.items() if not is_shaping_key(k)}
    flat = {k: v for k, v in values.items() if is_shaping_key(k)}
    return hparams, (unflatten_shaping(flat) if flat else None)


def _ancestry(
    events: list[Mapping[str, Any]],
    snaps: Mapping[int, list[tuple[int, int, dict]]],
    policy: int,
    before_index: int,
    before_steps: float,
) -> tuple[list[tuple[int, dict]], int]:
    """The entries that trained `policy`'s weights up to its event `before_index` and its own
    step count `before_steps`, counted in the weights' env steps; and the offset from the
    policy's own count to the weights' (they differ after a copy: the copied weights had
    trained as many steps as the source, `source_env_steps`; lineages written before that
    field take the copier's own count)."""
    mine = [s for s in snaps.get(policy, []) if s[0] < before_index]
    start, shift = 0, 0
    prefix: list[tuple[int, dict]] = []
    for j in range(len(mine) - 1, -1, -1):
        ev = events[mine[j][0]]
        if ev["action"] == "replace" and ev.get("source") is not None:
            at = mine[j][1]
            cut = int(ev.get("source_env_steps", at))
            prefix, source_shift = _ancestry(events, snaps, int(ev["source"]), mine[j][0], cut)
            shift = cut + source_shift - at
            start = j
            break
        if ev["action"] == "init":
            start = j
            break
    own = [(steps + shift, values) for _, steps, values in mine[start:] if steps < before_steps]
    return prefix + own, shift


def schedule_for(events: list[Mapping[str, Any]], policy_id: int) -> Schedule:
    """The values that trained `policy_id`'s current weights, as (env_steps, hparams, shaping)
    entries, each in force from its env steps on, counted in the weights' env steps. Where the
    policy copied q, the part before is q's own schedule up to the steps q had trained then
    (recursively), and the policy's later entries move by the difference between q's count and
    its own, so the list follows the weights' ancestry.
    Shaping comes back nested (indexed leaves as tuples), or None without shaping."""
    snaps = _replay(events)
    entries, _ = _ancestry(events, snaps, policy_id, len(events), math.inf)
    return [(steps, *_split(values)) for steps, values in entries]


# ---------------------------------------------------------------- family trees


def _fmt_steps(n: int) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


class _Node:
    def __init__(self, policy: int, gen: int, event: Mapping[str, Any]):
        self.policy, self.gen, self.event = policy, gen, event
        self.mutations = 0
        self.children: list[_Node] = []
        self.parent: Optional[_Node] = None
        self.previous: Optional[_Node] = None  # the same slot's earlier incarnation

    @property
    def key(self) -> str:
        return f"p{self.policy}_{self.gen}"

    def summary(self) -> str:
        ev = self.event
        steps = _fmt_steps(int(ev.get("env_steps", 0)))
        if ev["action"] == "replace":
            text = f"p{self.policy} #{self.gen}: copied p{ev.get('source')} @ {steps} steps"
            objs = ev.get("objectives") or {}
            own, src = objs.get(str(self.policy)), objs.get(str(ev.get("source")))
            if own is not None and src is not None:
                text += f" (obj {own:.4g} vs {src:.4g})"
        else:
            text = f"p{self.policy} #{self.gen}: start @ {steps} steps"
        if self.mutations:
            text += f", {self.mutations} mutation{'s' if self.mutations != 1 else ''}"
        return text


def _build_tree(events: list[Mapping[str, Any]]) -> list[_Node]:
    current: dict[int, _Node] = {}
    gens: dict[int, int] = {}
    nodes: list[_Node] = []
    for ev in events:
        p = int(ev["policy"])
        action = ev["action"]
        if action == "mutate" and p in current:
            current[p].mutations += 1
            continue
        gen = gens.get(p, -1) + 1
        gens[p] = gen
        node = _Node(p, gen, ev)
        node.previous = current.get(p)
        src = ev.get("source")
        if action == "replace" and src is not None and int(src) in current:
            node.parent = current[int(src)]
            node.parent.children.append(node)
        if action == "mutate":  # a mutation with no known start: treat it as one
            node.mutations = 1
        current[p] = node
        nodes.append(node)
    return nodes


def family_tree_dot(events: list[Mapping[str, Any]]) -> str:
    """Graphviz dot text: one box per incarnation of a policy slot; solid edges are weight
    copies (labelled with the step), dashed edges join a slot's successive incarnations."""
    nodes = _build_tree(events)
    out = ["digraph pbt_lineage {", "  rankdir=LR;", "  node [shape=box, fontsize=10];"]
    for n in nodes:
        label = n.summary().replace('"', "'").replace(": ", "\\n", 1)
        out.append(f'  "{n.key}" [label="{label}"];')
    for n in nodes:
        if n.parent is not None:
            steps = _fmt_steps(int(n.event.get("env_steps", 0)))
            out.append(f'  "{n.parent.key}" -> "{n.key}" [label="{steps}"];')
        if n.previous is not None:
            out.append(f'  "{n.previous.key}" -> "{n.key}" [style=dashed, color=gray];')
    out.append("}")
    return "\n".join(out) + "\n"


def family_tree_text(events: list[Mapping[str, Any]]) -> str:
    """Readable indented tree: each starting policy is a root, copies hang under their source."""
    nodes = _build_tree(events)
    lines: list[str] = []

    def walk(node: _Node, depth: int) -> None:
        lines.append(("    " * (depth - 1) + "+-- " if depth else "") + node.summary())
        for child in node.children:
            walk(child, depth + 1)

    for n in nodes:
        if n.parent is None:
            walk(n, 0)
    return "\n".join(lines) + ("\n" if lines else "")
