"""Train a policy or a population: parse flags, register the built-in envs, run.

The training loop lives in rl_pbt/runtime/runner.py (Runner.run).
"""

from __future__ import annotations

import sys

import envs  # noqa: F401  (registers the built-in envs)
from rl_pbt import ConfigError, parse_cfg, train


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_cfg(sys.argv[1:] if argv is None else argv)
        return train(cfg)
    except ConfigError as e:  # bad flags, or flags that do not fit the env
        print(f"rl-pbt-train: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
