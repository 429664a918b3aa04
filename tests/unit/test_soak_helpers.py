"""benchmarks/soak.py's figures: memory slope per hour and spread around the median; trained
steps read from the newest scalar-log line of each policy, torn lines skipped."""

import json

import pytest

from benchmarks.soak import slope_and_spread, trained_steps
from rl_pbt.logging.files import scalars_path


def test_slope_per_hour_and_spread():
    flat = [(t, 500.0) for t in range(0, 600, 30)]
    assert slope_and_spread(flat) == (pytest.approx(0.0, abs=1e-9), 0.0)
    growing = [(t, 500.0 + t / 60) for t in range(0, 3600, 30)]  # +1 MiB per minute
    slope, spread = slope_and_spread(growing)
    assert slope == pytest.approx(60.0)
    assert spread == pytest.approx((559.5 - 529.75) / 529.75 * 100, rel=1e-3)


def test_trained_steps_takes_each_policys_newest_line(tmp_path):
    path = scalars_path(str(tmp_path))
    (tmp_path / "stats").mkdir()
    lines = [
        {"policy": 0, "env_steps": 100, "time": 1.0, "scalars": {}},
        {"policy": 1, "env_steps": 50, "time": 1.0, "scalars": {}},
        {"policy": 0, "env_steps": 300, "time": 2.0, "scalars": {}},
    ]
    with open(path, "w") as f:
        f.write("\n".join(json.dumps(x) for x in lines) + '\n{"policy": 1, "env_st')
    assert trained_steps(str(tmp_path)) == 350
    assert trained_steps(str(tmp_path / "missing")) == 0
