"""One run per experiment folder: a lock file beside it, `{train_dir}/.{experiment}.lock`.

The lock is an flock on that file, so the kernel drops it when the process holding it ends,
however it ends (no stale lock after a crash). The file holds the pid and start time of the
run holding it, for the message a second run prints. It lies beside the folder, not in it, so
that --restart_behavior=overwrite can delete the folder while holding it.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from typing import Optional

from rl_pbt.config.parse import ConfigError


class LockHeld(ConfigError):
    """Another live process holds the lock."""


def lock_path(train_dir: str, experiment: str) -> str:
    return os.path.join(train_dir, f".{experiment}.lock")


class RunLock:
    def __init__(self, train_dir: str, experiment: str):
        self.path = lock_path(train_dir, experiment)
        self.experiment = experiment
        self.fd: Optional[int] = None

    def holder(self) -> str:
        try:
            with open(self.path) as f:
                text = f.read().strip()
        except OSError:
            text = ""
        return text or "another process"

    def _conflict(self) -> LockHeld:
        return LockHeld(
            f"--experiment={self.experiment}: another run is using this experiment folder "
            f"({self.holder()}; lock {self.path}); stop it first or choose another --experiment"
        )

    def acquire(self) -> None:
        """Hold the lock until `release` (or the end of the process); LockHeld (a ConfigError)
        if taken, ConfigError if the lock file cannot be made.
        Nothing to do when this object holds it already."""
        if self.fd is not None:
            return
        folder = os.path.dirname(self.path) or "."
        try:
            os.makedirs(folder, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:  # e.g. a path the permissions allow on paper (root, /proc)
            raise ConfigError(
                f"--train_dir={folder!r}: cannot make {self.path} ({e.strerror or e}); give a "
                "folder you can write to"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise self._conflict() from None
        os.ftruncate(fd, 0)
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __del__(self) -> None:  # a Runner made and never run (tests, a failed start)
        self.release()
