"""benchmarks/connect_four.py end to end with a tiny budget: a stage trains, every member gets a
row of scores in [0, 1] against each opponent, and the goal line is printed."""

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("pettingzoo")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "connect_four.py")


def test_one_stage_prints_a_row_per_member_and_the_goal(tmp_path):
    cmd = [sys.executable, SCRIPT, "--members=2", "--stages", "1500", "--games=4",
           "--tactic_positions=40",
           "--minutes=3", f"--train_dir={tmp_path}", "--extra", "--num_workers=1",
           "--num_envs_per_worker=4", "--encoder_mlp_layers", "16", "--batch_size=512"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    rows = [ln for ln in proc.stdout.splitlines() if re.match(r"\| p[01] \|", ln)]
    assert len(rows) == 2, out
    for row in rows:
        scores = [float(c.split()[0]) for c in row.strip("|").split("|")[1:]]
        assert len(scores) == 4 and all(0.0 <= s <= 1.0 for s in scores), row
    assert "goal (best member): >= 0.95 against random:" in proc.stdout
    tactics = re.search(r"p0 ([\d.]+) / ([\d.]+);.*alphabeta:depth=1 ([\d.]+) / ", proc.stdout)
    assert tactics, out
    assert float(tactics.group(3)) == 1.0  # depth 1 always takes a win: the positions are right
    own = re.search(r"against itself: p0 (n/a|[\d.]+ / [\d.]+); p1 (n/a|[\d.]+ / [\d.]+)$",
                    proc.stdout, re.M)  # fmt: skip
    assert own, out

    # --eval_only scores the same population again, without training it further; members
    # sample their moves from a seeded generator, so the rescore repeats the stage's scores,
    # figure for figure
    def score_lines(stdout):
        return [ln for ln in stdout.splitlines() if ln.startswith(("| p", "  on up"))]

    trained = score_lines(proc.stdout)
    assert len(trained) == 3, out
    with open(os.path.join(tmp_path, "c4", "summary.json")) as f:
        before = f.read()
    rescore = [sys.executable, SCRIPT, "--members=2", "--games=4", "--eval_only",
               "--tactic_positions=40", f"--train_dir={tmp_path}"]  # fmt: skip
    proc = subprocess.run(rescore, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "as trained before" in proc.stdout
    assert score_lines(proc.stdout) == trained, (score_lines(proc.stdout), trained)
    with open(os.path.join(tmp_path, "c4", "summary.json")) as f:
        assert f.read() == before
