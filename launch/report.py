"""Report on a PBT run: the family tree of the population, each member's final values, and
the objective table, from the experiment's lineage.

    python -m launch.report --experiment=lure [--dot tree.dot]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from rl_pbt.logging.files import policy_cfg_path, policy_shaping_path, read_json
from rl_pbt.pbt.lineage import family_tree_dot, family_tree_text, lineage_path, read_events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--train_dir", default="train_dir")
    parser.add_argument("--dot", default=None, help="also write the tree as graphviz dot")
    args = parser.parse_args(argv)
    exp_dir = os.path.join(args.train_dir, args.experiment)
    path = lineage_path(exp_dir)
    if not os.path.isfile(path):
        print(f"rl-pbt-report: error: no lineage at {path}", file=sys.stderr)
        return 2
    events = read_events(path)
    counts: dict[str, int] = {}
    for e in events:
        counts[e["action"]] = counts.get(e["action"], 0) + 1
    print(f"{len(events)} PBT events: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print("\nFamily tree:")
    print(family_tree_text(events))
    summary = read_json(os.path.join(exp_dir, "summary.json"), {})
    print("\nFinal values:")
    p = 0
    while os.path.isfile(policy_cfg_path(exp_dir, p)):
        hp = read_json(policy_cfg_path(exp_dir, p), {})
        shaping = read_json(policy_shaping_path(exp_dir, p))
        stats = summary.get("policies", {}).get(str(p), {})
        obj = stats.get("mean_objective")
        print(
            f"p{p}: objective {obj if obj is None else round(obj, 4)} | "
            + ", ".join(f"{k}={v:.4g}" for k, v in sorted(hp.items()))
            + (f" | shaping {json.dumps(shaping)}" if shaping else "")
        )
        p += 1
    if args.dot:
        with open(args.dot, "w") as f:
            f.write(family_tree_dot(events))
        print(f"\nwrote {args.dot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
