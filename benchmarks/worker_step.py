"""Where a rollout worker's step goes: microseconds per worker step in `RolloutWorker.step`
and in `_record` (the bookkeeping after the env step), over a serial run with one worker.

    python benchmarks/worker_step.py --env connect_four --flags --num_policies=4
    python benchmarks/worker_step.py --root /path/to/other/checkout --env CartPole-v1

`--root` times the code of another checkout (its `rl_pbt` and `envs`), so two versions can be
compared in one sitting. Timers wrap the two methods, so their own cost (about a microsecond a
call) is included.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--env", default="connect_four")
    ap.add_argument("--env_steps", type=int, default=60_000, help="per policy")
    ap.add_argument("--flags", nargs=argparse.REMAINDER, default=[], help="more training flags")
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.abspath(args.root))
    os.chdir(args.root)

    import envs  # noqa: F401  (registers the built-in envs)
    from rl_pbt import parse_cfg, train
    from rl_pbt.sampling import rollout_worker

    worker = rollout_worker.RolloutWorker
    spent = {"step": 0.0, "_record": 0.0}
    steps = [0]

    def timed(name):
        inner = getattr(worker, name)

        def wrapper(self, *a, **k):
            t = time.perf_counter()
            try:
                return inner(self, *a, **k)
            finally:
                spent[name] += time.perf_counter() - t
                steps[0] += name == "step"

        return wrapper

    for name in spent:
        setattr(worker, name, timed(name))
    with tempfile.TemporaryDirectory() as d:
        cfg = parse_cfg(
            [f"--env={args.env}", "--serial_mode", "--num_workers=1", f"--train_dir={d}",
             "--experiment=w", f"--train_for_env_steps={args.env_steps}", *args.flags]
        )  # fmt: skip
        if train(cfg) != 0:
            raise SystemExit("the run failed")
    n = max(steps[0], 1)
    print(
        f"{args.root} {args.env}: {steps[0]} worker steps, "
        f"_record {1e6 * spent['_record'] / n:.1f} us / step, step {1e6 * spent['step'] / n:.1f} us"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
