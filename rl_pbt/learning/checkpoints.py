"""Checkpoint files of one policy: written atomically with a checksum, rotated, and read back
with the newest usable one winning.

Used by the learner (save, resume) and by models/loading.py (enjoy, match, evaluation). Knows
nothing of learners: a checkpoint here is a dict of plain data (tensors, numbers, strings,
lists, tuples, dicts), and it is always read with `torch.load(..., weights_only=True)`, so a
crafted file is refused, never executed.

File layout: HEADER (magic, format version, payload length, SHA-256 of the payload), then
the `torch.save` payload. The file appears under its final name only by `os.replace` of a
fully written and fsynced temp file, so a checkpoint that is present is complete; the
checksum still catches damage from outside (a bad disk, a partial copy). Files without the
header, from before it existed, load as they are (weights_only, no checksum).
"""

from __future__ import annotations

import glob
import hashlib
import io
import logging
import os
import pickle
import re
import struct
import tempfile
import warnings
from typing import Any, Optional

import torch

from rl_pbt.logging.files import deletable_folder, fsync_folder, shared_file_mode

log = logging.getLogger(__name__)

MAGIC = b"\x89RLPBTCKPT\r\n"  # \x89 first: no torch zip ("PK") or pickle ("\x80") starts so
FORMAT_VERSION = 1
_FIELDS = struct.Struct("<IQ32s")  # format version, payload length, SHA-256 of the payload
HEADER_SIZE = len(MAGIC) + _FIELDS.size

_CHECKPOINT_NAME = re.compile(r"checkpoint_(\d+)_(\d+)\.pth")
_TEMP_PREFIX = ".tmp_checkpoint_"
_warned_kept: set[str] = set()  # folders said once to be a link: their old files are kept


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used; the message is one line naming it and why."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"checkpoint {path}: {reason}")
        self.path = path
        self.reason = reason


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, no permission...); the previous
    checkpoints are untouched. One line naming the folder and the OS error."""

    def __init__(self, message: str, err: Optional[int] = None):
        super().__init__(message)
        self.errno = err


# --- names and order ---------------------------------------------------------------------------
def checkpoint_name(version: int, env_steps: int) -> str:
    # both numbers padded, so that names sort as the checkpoints were written (an undone
    # iteration's samples count as env steps while the version stays)
    return f"checkpoint_{version:012d}_{env_steps:015d}.pth"


def checkpoint_order(path: str) -> tuple[int, int, str]:
    """(version, env steps) read from a checkpoint's name, padded or not."""
    m = _CHECKPOINT_NAME.fullmatch(os.path.basename(path))
    return (int(m.group(1)), int(m.group(2)), path) if m else (-1, -1, path)


def checkpoint_files(folder: str) -> list[str]:
    """The checkpoints in `folder`, oldest first (by version, then env steps)."""
    return sorted(glob.glob(os.path.join(folder, "checkpoint_*.pth")), key=checkpoint_order)


def latest_checkpoint(folder: str) -> Optional[str]:
    """The newest checkpoint's path by name (not checked: see `load_latest_checkpoint`)."""
    files = checkpoint_files(folder)
    return files[-1] if files else None


# --- encoding ----------------------------------------------------------------------------------
def encode_checkpoint(state: dict) -> bytes:
    """HEADER + torch.save(state): the bytes of a checkpoint file."""
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getbuffer()
    fields = _FIELDS.pack(FORMAT_VERSION, len(payload), hashlib.sha256(payload).digest())
    return b"".join((MAGIC, fields, payload))


# how a file of torch.save starts: a zip archive (torch >= 1.6), or a pickle (older torch)
TORCH_SAVE_STARTS = (b"PK\x03\x04", b"\x80")


def decode_checkpoint(data: bytes, path: str, map_location: Any = None) -> dict:
    """The state held by a checkpoint file's bytes; CheckpointError (naming `path`) when they
    are truncated, damaged, or hold anything but plain data."""
    if data[:1] == MAGIC[:1]:
        payload = _verified_payload(data, path)
    elif not data:
        raise CheckpointError(path, "is empty")
    elif not data.startswith(TORCH_SAVE_STARTS):
        raise CheckpointError(
            path, f"is not a checkpoint file (it starts with {bytes(data[:8])!r})"
        )
    else:
        payload = memoryview(data)  # written before checksums: loaded as it is
    state = _unpickle(payload, path, map_location)
    if not isinstance(state, dict):
        raise CheckpointError(path, f"holds a {type(state).__name__}, not a checkpoint dict")
    return state


def _verified_payload(data: bytes, path: str) -> memoryview:
    if len(data) < HEADER_SIZE or not data.startswith(MAGIC):
        raise CheckpointError(path, f"has a truncated or damaged header ({len(data)} bytes)")
    fmt, length, digest = _FIELDS.unpack_from(data, len(MAGIC))
    if fmt != FORMAT_VERSION:
        raise CheckpointError(
            path, f"has format version {fmt}; this version of rl_pbt reads {FORMAT_VERSION}"
        )
    payload = memoryview(data)[HEADER_SIZE:]
    if len(payload) != length:
        what = "is truncated" if len(payload) < length else "has extra bytes"
        raise CheckpointError(
            path, f"{what}: {len(payload)} payload bytes where the header says {length}"
        )
    if hashlib.sha256(payload).digest() != digest:
        raise CheckpointError(path, "fails its SHA-256 checksum (the file is damaged)")
    return payload


def _unpickle(payload: memoryview, path: str, map_location: Any) -> Any:
    try:
        with warnings.catch_warnings():  # the failure, if any, is reported below in one line
            warnings.simplefilter("ignore")
            return torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        if "weights only" in str(e).lower():
            raise CheckpointError(
                path,
                "refused: it holds objects other than tensors, numbers, strings and "
                f"containers ({_telling_line(str(e))})",
            ) from None
        raise CheckpointError(path, f"cannot be unpickled: {_telling_line(str(e))}") from None
    except Exception as e:  # a damaged file fails in many ways (EOFError, RuntimeError, ...)
        reason = f"{type(e).__name__}: {_telling_line(str(e))}"
        raise CheckpointError(path, f"cannot be unpickled ({reason})") from None


def _telling_line(message: str, limit: int = 160) -> str:
    """The line of torch's (often long, several-line) error that says what went wrong."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for line in lines:
        if "GLOBAL" in line or "Unsupported" in line:
            return line[:limit]
    return lines[0][:limit] if lines else "no details"


# --- reading -----------------------------------------------------------------------------------
def read_checkpoint(path: str, map_location: Any = None) -> dict:
    """The state saved in the checkpoint file `path`; CheckpointError (one line) when it is
    missing, unreadable, truncated, damaged or not plain data."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CheckpointError(path, f"cannot be read: {e.strerror or e}") from None
    return decode_checkpoint(data, path, map_location)


DAMAGED_SUFFIX = ".damaged"


def load_latest_checkpoint(
    folder: str, map_location: Any = None, set_aside: bool = False
) -> Optional[tuple[str, dict]]:
    """(path, state) of the newest usable checkpoint in `folder`. A bad file is named in one
    warning and the one before it is tried; None when no checkpoint is usable (with a
    warning when some were there).

    `set_aside` (a learner resuming): once an older checkpoint loads, the bad newer ones are
    renamed with DAMAGED_SUFFIX. Left as they were, they would sort as the newest forever:
    tried first at every resume, and holding slots of --keep_checkpoints, so that the good
    checkpoints written after the resume would be deleted first."""
    files = checkpoint_files(folder)
    bad: list[str] = []
    for i in range(len(files) - 1, -1, -1):
        try:
            state = read_checkpoint(files[i], map_location)
        except CheckpointError as e:
            then = "trying the one before it" if i else "no older checkpoint is left"
            log.warning("%s; %s", e, then)
            bad.append(files[i])
            continue
        if set_aside:
            for path in bad:
                try:
                    os.replace(path, path + DAMAGED_SUFFIX)
                    log.warning("set aside as %s", os.path.basename(path) + DAMAGED_SUFFIX)
                except OSError as e:
                    log.warning("could not set aside %s: %s", path, e.strerror or e)
        return files[i], state
    if files:
        log.warning(
            "no usable checkpoint in %s: %d found, none could be loaded", folder, len(files)
        )
    return None


# --- writing -----------------------------------------------------------------------------------
def _write_file(path: str, data: bytes) -> None:
    """Every checkpoint byte reaches the disk here: write, flush, fsync."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_checkpoint(
    folder: str,
    version: int,
    env_steps: int,
    state: dict,
    keep: int,
    root: Optional[str] = None,
) -> str:
    """Write `state` as checkpoint (`version`, `env_steps`) in `folder`, atomically and with
    a checksum, then keep only the newest `keep` checkpoints; returns the new file's path.

    Old files are deleted only when `folder` is a real folder (not a link), inside `root` (the
    experiment folder) when given; the file just written is never deleted. On any write
    failure the temp file is removed, the existing checkpoints are untouched and
    CheckpointWriteError is raised."""
    path = os.path.join(folder, checkpoint_name(version, env_steps))
    deletable = _deletable(folder, root)
    _write_atomically(path, encode_checkpoint(state), clean_temps=deletable)
    if deletable:
        rotate_checkpoints(folder, keep, protect=path)
    elif folder not in _warned_kept:
        _warned_kept.add(folder)
        log.warning("%s is a link or lies outside the experiment: old checkpoints are kept", folder)
    return path


def install_checkpoint_file(folder: str, name: str, data: bytes, keep: int) -> str:
    """Put a checkpoint file's bytes, read elsewhere (another node's disk), into `folder` under
    `name`: the checksum is verified first (CheckpointError when it does not match), then the
    file is written atomically and the newest `keep` checkpoints are kept."""
    if _CHECKPOINT_NAME.fullmatch(name) is None:
        raise ValueError(f"{name!r} is not a checkpoint file name")
    path = os.path.join(folder, name)
    if data.startswith(MAGIC) or not data:  # files from before checksums go in as they are
        _verified_payload(data, path)
    _write_atomically(path, data, clean_temps=True)
    rotate_checkpoints(folder, keep, protect=path)
    return path


def write_state_file(path: str, state: dict) -> None:
    """Write `state` (plain data) to `path` as a checkpoint file is written: atomically, with
    a checksum, read back by `read_checkpoint`. CheckpointWriteError on failure."""
    _write_atomically(path, encode_checkpoint(state), clean_temps=True)


def _write_atomically(path: str, data: bytes, clean_temps: bool) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        created = not os.path.isdir(folder)
        os.makedirs(folder, exist_ok=True)
        if clean_temps:
            _remove_stale_temps(folder)  # left by a crash mid-write: free their space first
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=_TEMP_PREFIX)
        os.fchmod(fd, shared_file_mode())  # as open() would: readable by a team's umask
        os.close(fd)
        _write_file(tmp, data)
        os.replace(tmp, path)
        tmp = None
        fsync_folder(folder)
        if created:  # the new folder's own entry, too
            fsync_folder(os.path.dirname(os.path.abspath(folder)))
    except OSError as e:
        if tmp is not None:
            _remove_quietly(tmp)
        name = os.path.basename(path)
        what = "a checkpoint" if _CHECKPOINT_NAME.fullmatch(name) else name
        raise CheckpointWriteError(
            f"cannot write {what} in {folder}: {e.strerror or e}", e.errno
        ) from e


def rotate_checkpoints(folder: str, keep: int, protect: Optional[str] = None) -> list[str]:
    """Delete all but the newest `keep` (at least 1) checkpoints of `folder`, never `protect`;
    returns the deleted paths. Only files named like checkpoints are touched."""
    named = [f for f in checkpoint_files(folder) if checkpoint_order(f)[0] >= 0]
    old = [f for f in named[: -max(1, keep)] if f != protect]
    deleted = []
    for f in old:
        try:
            os.unlink(f)  # unlink removes a linked file's link, not its target
            deleted.append(f)
        except FileNotFoundError:
            pass
        except OSError as e:  # the new checkpoint is written: a stale old one is no failure
            log.warning("could not delete the old checkpoint %s: %s", f, e.strerror or e)
    return deleted


def _deletable(folder: str, root: Optional[str]) -> bool:
    # never delete through a link: its target may hold someone else's files
    return deletable_folder(folder, root) if root is not None else not os.path.islink(folder)


def _remove_stale_temps(folder: str) -> None:
    for tmp in glob.glob(os.path.join(folder, _TEMP_PREFIX + "*")):
        _remove_quietly(tmp)


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
