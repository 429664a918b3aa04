"""benchmarks/gpu_throughput.py end to end on the CPU: one short CartPole-v1 run with local
inference gives a row with positive rates and a sensible fraction of the raw ceiling; a failed
run is reported in its row."""

import os
import subprocess
import sys

import pytest

from benchmarks.gpu_throughput import RunResult, learner_rate, table_row

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_throughput.py")


def _number(cell: str) -> float:
    return float(cell.replace(",", ""))


@pytest.mark.slow  # a 15 s benchmark run; the row's pieces are tested below
def test_cartpole_local_row(tmp_path):
    cmd = [
        sys.executable,
        SCRIPT,
        "--envs",
        "CartPole-v1",
        "--policies",
        "1",
        "--inference",
        "local",
        "--device=cpu",
        "--num_workers=1",
        "--num_envs=4",
        "--seconds=4",
        "--raw_seconds=2",
        f"--train_dir={tmp_path}",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| CartPole-v1 | 1 | local |")]
    assert len(rows) == 1, out
    cells = [c.strip() for c in rows[0].strip().strip("|").split("|")]
    assert len(cells) == 10, rows[0]
    fps, samples, batch, gpu, uss, raw, fraction = cells[3:]
    assert _number(fps) > 0, rows[0]
    assert _number(samples) > 0, rows[0]
    assert batch == "n/a" and gpu == "n/a", rows[0]  # local inference, no GPU in CI
    assert _number(uss) > 0, rows[0]
    assert _number(raw) > 0, rows[0]
    assert 0 < float(fraction) <= 1.5, rows[0]
    assert os.path.exists(tmp_path / "CartPole-v1_p1_local" / "summary.json")


def test_learner_rate_and_failed_row():
    # trained env steps over time, frameskip 4; the last line (at shutdown) is left out
    status = [(0.0, 0), (1.0, 400), (2.0, 800), (3.0, 1600), (4.0, 2400), (9.0, 2500)]
    assert learner_rate(status, 4) == 200.0
    assert learner_rate(status[:1], 1) is None
    # learner reports every few status lines: measured between the lines where steps moved
    steps = [0, 0, 0, 4096, 4096, 4096, 8192, 8192, 12288, 12288, 16000]
    assert learner_rate([(float(t), s) for t, s in enumerate(steps)], 4) == 8192 / 5 / 4
    row = table_row("doom_basic_128x72", 8, "device", RunResult(error="FAILED (exit 1): x"), 1e4)
    assert row.startswith("| doom_basic_128x72 | 8 | device | FAILED (exit 1): x |")
