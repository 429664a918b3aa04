"""Raw VizDoom rate of doom_basic with random actions (frameskip 4): one instance, and 2 worker
processes x 4 envs; prints the median env frames/s of a few windows (see --help).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time

import numpy as np

FRAMESKIP = 4


def _make_raw_game(seed: int):
    import vizdoom as vzd

    game = vzd.DoomGame()
    game.load_config(os.path.join(vzd.scenarios_path, "basic.cfg"))
    game.set_doom_scenario_path(os.path.join(vzd.scenarios_path, "basic.wad"))
    game.set_screen_resolution(vzd.ScreenResolution.RES_160X120)
    game.set_screen_format(vzd.ScreenFormat.CRCGCB)
    game.set_window_visible(False)
    game.set_sound_enabled(False)
    game.set_mode(vzd.Mode.PLAYER)
    game.set_seed(seed)
    game.set_doom_config_path(os.path.join(tempfile.gettempdir(), "rl_pbt_doom_bench.ini"))
    game.init()
    game.new_episode()
    return game


class _RawStepper:
    """One doom_basic game stepped with random button combinations."""

    def __init__(self, seed: int):
        self.game = _make_raw_game(seed)
        self.rng = np.random.default_rng(seed)
        n = self.game.get_available_buttons_size()
        self.actions = [[int(b) for b in np.binary_repr(i, n)] for i in range(2**n)]

    def step(self) -> int:
        game = self.game
        if game.is_episode_finished():
            game.new_episode()
        game.make_action(self.actions[self.rng.integers(len(self.actions))], FRAMESKIP)
        state = game.get_state()
        if state is not None:
            _ = state.screen_buffer
        return FRAMESKIP

    def close(self) -> None:
        self.game.close()


class _EnvStepper:
    """The registered doom_basic env (resize to 128x72 and measurements included)."""

    def __init__(self, seed: int):
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from envs.vizdoom import make_doom_env

        self.env = make_doom_env(
            "doom_basic", None, {"env_id": seed, "worker_index": 0, "vector_index": seed}
        )
        self.env.reset(seed=seed)
        self.env.action_space.seed(seed)

    def step(self) -> int:
        _, _, terminated, truncated, _ = self.env.step(self.env.action_space.sample())
        if terminated or truncated:
            self.env.reset()
        return FRAMESKIP

    def close(self) -> None:
        self.env.close()


def _stepper(seed: int, through_env: bool):
    return _EnvStepper(seed) if through_env else _RawStepper(seed)


def _run_windows(steppers, seconds: float, windows: int) -> list[float]:
    """Frames per second in each window, stepping all steppers round-robin."""
    rates = []
    for _ in range(windows):
        frames, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for s in steppers:
                frames += s.step()
        rates.append(frames / (time.perf_counter() - start))
    return rates


def _worker(
    index: int, num_envs: int, seconds: float, windows: int, through_env: bool, barrier, out
) -> None:
    steppers = [_stepper(100 * index + k, through_env) for k in range(num_envs)]
    for s in steppers:  # warm-up
        for _ in range(50):
            s.step()
    barrier.wait()
    out.put((index, _run_windows(steppers, seconds, windows)))
    for s in steppers:
        s.close()


def single_instance(seconds: float, windows: int, through_env: bool) -> float:
    stepper = _stepper(0, through_env)
    for _ in range(50):
        stepper.step()
    rates = _run_windows([stepper], seconds, windows)
    stepper.close()
    return statistics.median(rates)


def workers_layout(
    num_workers: int, num_envs: int, seconds: float, windows: int, through_env: bool
) -> float:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(num_workers), ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(i, num_envs, seconds, windows, through_env, barrier, out))
        for i in range(num_workers)
    ]
    for p in procs:
        p.start()
    per_worker = [out.get(timeout=120 + 2 * seconds * windows)[1] for _ in procs]
    for p in procs:
        p.join(timeout=30)
    totals = [sum(r[w] for r in per_worker) for w in range(windows)]
    return statistics.median(totals)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description="Raw VizDoom rate of doom_basic (frameskip 4, random actions, 160x120). "
        "--through_env steps the registered doom_basic env (resize, measurements) instead."
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="length of one window")
    parser.add_argument("--windows", type=int, default=5, help="windows per measurement")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--envs_per_worker", type=int, default=4)
    parser.add_argument(
        "--through_env",
        action="store_true",
        help="step the registered doom_basic env instead of bare VizDoom",
    )
    args = parser.parse_args(argv)
    what = "doom_basic env" if args.through_env else "raw VizDoom doom_basic"
    print(
        f"{what}, frameskip {FRAMESKIP}, random actions, {os.cpu_count()} CPUs, median of "
        f"{args.windows} x {args.seconds:.0f} s windows"
    )
    one = single_instance(args.seconds, args.windows, args.through_env)
    print(f"  1 instance:                 {one:10,.0f} env frames/s")
    layout = workers_layout(
        args.workers, args.envs_per_worker, args.seconds, args.windows, args.through_env
    )
    print(
        f"  {args.workers} workers x {args.envs_per_worker} envs (processes): "
        f"{layout:10,.0f} env frames/s"
    )


if __name__ == "__main__":
    main()
