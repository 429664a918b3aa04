"""Train a single policy on one population member's recorded PBT schedule.

    python -m launch.replay --from_experiment=lure --policy=3 --experiment=lure_p3_replay \
        [any training flags]

Reads {train_dir}/{from_experiment}/pbt/lineage.jsonl, follows the member's ancestry
(copies included), and applies each recorded change of hyperparameters and reward shaping
at the same env-step count. The env and model flags default to the source experiment's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from launch.train import main as train_main
from rl_pbt.pbt.lineage import lineage_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    parser.add_argument("--from_experiment", required=True)
    parser.add_argument("--policy", type=int, required=True)
    parser.add_argument("--train_dir", default="train_dir")
    args, rest = parser.parse_known_args(argv)
    src = os.path.join(args.train_dir, args.from_experiment)
    lineage = lineage_path(src)
    if not os.path.isfile(lineage):
        print(f"rl-pbt-replay: error: no lineage at {lineage}", file=sys.stderr)
        return 2
    with open(os.path.join(src, "config.json")) as f:
        src_cfg = json.load(f)
    inherited = [
        "env",
        "rollout",
        "batch_size",
        "num_envs_per_worker",
        "use_rnn",
        "encoder_mlp_layers",
        "train_for_env_steps",
    ]
    given = {a.split("=")[0].lstrip("-") for a in rest if a.startswith("--")}
    base = []
    for key in inherited:
        if key not in given and src_cfg.get(key) is not None:
            value = src_cfg[key]
            base += (
                [f"--{key}", *map(str, value)] if isinstance(value, list) else [f"--{key}={value}"]
            )
    if "experiment" not in given:
        base.append(f"--experiment={args.from_experiment}_p{args.policy}_replay")
    return train_main(
        base
        + [
            f"--train_dir={args.train_dir}",
            f"--pbt_replay_lineage={lineage}",
            f"--pbt_replay_policy={args.policy}",
            "--num_policies=1",
            "--with_pbt=False",
            *rest,
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
