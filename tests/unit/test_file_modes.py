"""Files the trainer writes honour the umask, as a plain open() would (temp files start 0600,
which would leave results unreadable to a team sharing a folder)."""

import os
import stat
import time

import pytest
import torch

from rl_pbt.learning.checkpoints import write_checkpoint
from rl_pbt.logging.files import atomic_write_json


@pytest.mark.parametrize("umask,expected", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_files_follow_the_umask(tmp_path, umask, expected):
    old = os.umask(umask)
    try:
        atomic_write_json(str(tmp_path / "summary.json"), {"a": 1})
        ckpt = write_checkpoint(str(tmp_path / "ckpt"), 3, 100, {"w": torch.zeros(2)}, keep=2)
    finally:
        os.umask(old)
    for path in (tmp_path / "summary.json", ckpt):
        assert stat.S_IMODE(os.stat(path).st_mode) == expected, path


def test_atomic_write_clears_old_temp_files_of_the_same_file_only(tmp_path):
    """A writer killed mid-write leaves .tmp_NAME* behind: old ones go at the next write of
    NAME; a fresh one may be another writer's, and another file's temps are not touched."""
    old = tmp_path / ".tmp_state.jsonab12"
    fresh = tmp_path / ".tmp_state.jsoncd34"
    other = tmp_path / ".tmp_summary.jsonef56"
    for f in (old, fresh, other):
        f.write_text("{")
    long_ago = time.time() - 3600
    for f in (old, other):
        os.utime(f, (long_ago, long_ago))
    atomic_write_json(str(tmp_path / "state.json"), {"a": 1})
    assert sorted(os.listdir(tmp_path)) == sorted(
        [".tmp_state.jsoncd34", ".tmp_summary.jsonef56", "state.json"]
    )
