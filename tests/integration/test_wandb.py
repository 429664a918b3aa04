"""--with_wandb: the W&B sink logs offline, and a missing wandb package is a one-line error
before training."""

import glob
import json
import os
import struct
import sys
import zlib
from types import SimpleNamespace

import pytest

from rl_pbt.config.parse import ConfigError
from rl_pbt.logging.files import scalars_path
from rl_pbt.logging.stats import PopulationStats
from rl_pbt.logging.wandb_log import run_id_path
from rl_pbt.runtime.messages import EpisodeStats


def fake_cfg(**over):
    values = dict(
        experiment="wandb_test",
        stats_avg=10,
        status_interval=5.0,
        experiment_summaries_interval=10,
        train_for_env_steps=10_000,
        train_for_seconds=60,
        with_pbt=True,
        pbt_start_mutation=0,
        pbt_target_objective="true_objective",
        with_wandb=True,
        wandb_project="rl_pbt_tests",
        wandb_entity=None,
        wandb_group="g1",
        wandb_tags=["unit", "offline"],
    )
    values.update(over)
    return SimpleNamespace(**values)


def tiny_png(path):
    """A valid 1x1 grey PNG, written without an imaging library."""

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
    png += chunk(b"IDAT", zlib.compress(b"\x00\x80")) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    wandb_dir = tmp_path / "wandb_dir"
    wandb_dir.mkdir()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(wandb_dir))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    return wandb_dir


class NoWriter:
    def add_scalar(self, *args):
        pass

    def add_text(self, *args):
        pass

    def close(self):
        pass


def test_population_scalars_and_pbt_events_go_to_an_offline_wandb_run(tmp_path, offline_wandb):
    exp_dir = str(tmp_path / "exp")
    os.makedirs(os.path.join(exp_dir, "report"))
    tiny_png(os.path.join(exp_dir, "report", "objective.png"))
    stats = PopulationStats(fake_cfg(), exp_dir, 2)
    stats._writer = lambda p: NoWriter()  # TensorBoard is not what this test is about
    for p in range(2):
        stats.add_episode(EpisodeStats(p, 10.0 + p, 100, 0.25 + p / 2))
    stats.status_line([1000, 1200], [1, 1], 1.0)
    stats.maybe_write_summaries([1000, 1200], force=True)
    stats.pbt_event(SimpleNamespace(policy_id=0, source_id=1, log_line="PBT p0 <- p1"))
    stats.pbt_event(SimpleNamespace(policy_id=1, source_id=None, log_line="PBT p1 mutate"))
    stats.maybe_write_summaries([2000, 2400], force=True)
    stats.close()
    import wandb

    wandb.teardown()  # the W&B service writes the run file out when it stops

    runs = glob.glob(str(offline_wandb / "wandb" / "offline-run-*"))
    assert len(runs) == 1
    records = glob.glob(os.path.join(runs[0], "*.wandb"))
    assert len(records) == 1 and os.path.getsize(records[0]) > 0
    data = open(records[0], "rb").read()
    for key in (b"p1/episode/reward", b"p0/env_steps", b"p0/pbt/copied_from", b"pbt/events"):
        assert key in data, key
    assert b"report/objective" in data
    # the run id is kept, so a resumed run continues the same W&B run
    run_id = open(run_id_path(exp_dir)).read().strip()
    assert runs[0].endswith(run_id)
    # the JSON lines file got the same tags
    rows = [json.loads(line) for line in open(scalars_path(exp_dir))]
    assert {r["policy"] for r in rows} == {0, 1} and len(rows) == 4
    for tag in rows[-1]["scalars"]:
        assert f"p1/{tag}".encode() in data


def test_missing_wandb_is_a_one_line_error_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now raises ImportError
    with pytest.raises(ConfigError) as info:
        PopulationStats(fake_cfg(), str(tmp_path / "exp"), 2)
    message = str(info.value)
    assert "\n" not in message
    assert "--with_wandb" in message and 'pip install "rl_pbt[wandb]"' in message


def test_without_the_flag_wandb_is_not_imported(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    stats = PopulationStats(fake_cfg(with_wandb=False), str(tmp_path / "exp"), 2)
    assert stats.wandb is None
    stats.close()
