"""Files the trainer writes honour the umask, as a plain open() would (temp files start 0600,
which would leave results unreadable to a team sharing a folder)."""

import os
import stat

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
