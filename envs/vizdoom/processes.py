"""Doom process housekeeping: free UDP ports, a machine-wide start-up throttle, finding and
killing Doom processes. Used by doom_env.py and multiplayer.py.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import signal
import socket
import tempfile
import threading
import time
from typing import Iterable, Iterator, Optional

try:  # psutil is optional: /proc is read directly without it
    import psutil
except ImportError:  # pragma: no cover - depends on the environment
    psutil = None

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None

PORT_SPAN = 20000
_ports_lock = threading.Lock()
_ports_in_use: set[int] = set()
_live_pids_lock = threading.Lock()
_live_pids: dict[int, str] = {}  # Doom pid -> which env started it (killed at exit)


class DoomStartError(RuntimeError):
    """A Doom game could not be started (after retries)."""


class DoomGameError(RuntimeError):
    """A running Doom game crashed or stopped answering."""


# --------------------------------------------------------------------------- ports


def udp_port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def reserve_port(env_id: int, attempt: int, port_base: int) -> int:
    """A free UDP port for hosting a game: derived from env_id, moved on by each retry, never
    one that another game of this process holds.
    """
    for k in range(64):
        offset = (env_id * 7 + (attempt + k) * 1009) % PORT_SPAN
        port = port_base + offset
        with _ports_lock:
            if port in _ports_in_use:
                continue
            if udp_port_is_free(port):
                _ports_in_use.add(port)
                return port
    raise DoomStartError(f"no free UDP port near {port_base} for env_id={env_id}")


def release_port(port: Optional[int]) -> None:
    if port is not None:
        with _ports_lock:
            _ports_in_use.discard(port)


# --------------------------------------------------------------------------- start throttle

_local_starts: Optional[threading.BoundedSemaphore] = None
_local_starts_size = 0
_local_starts_lock = threading.Lock()


def _local_semaphore(size: int) -> threading.BoundedSemaphore:
    global _local_starts, _local_starts_size
    with _local_starts_lock:
        if _local_starts is None or _local_starts_size != size:
            _local_starts = threading.BoundedSemaphore(size)
            _local_starts_size = size
        return _local_starts


@contextlib.contextmanager
def start_slot(max_parallel: int, timeout: float, stagger: float = 0.0) -> Iterator[None]:
    """At most `max_parallel` Doom games start at once on this machine (a flock'ed slot file per
    start, shared by all processes) and in this process (a semaphore). Waits up to `timeout`
    seconds for a slot, then goes ahead anyway rather than failing.
    """
    if stagger > 0:
        time.sleep(stagger)
    max_parallel = max(1, int(max_parallel))
    sem = _local_semaphore(max_parallel)
    deadline = time.monotonic() + timeout
    got_sem = sem.acquire(timeout=max(0.0, timeout))
    handle = None
    try:
        if fcntl is not None:
            folder = os.path.join(tempfile.gettempdir(), "rl_pbt_doom_starts")
            os.makedirs(folder, exist_ok=True)
            while handle is None and time.monotonic() < deadline:
                for k in range(max_parallel):
                    f = open(os.path.join(folder, f"slot{k}.lock"), "a+")
                    try:
                        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        handle = f
                        break
                    except OSError:
                        f.close()
                if handle is None:
                    time.sleep(0.05)
        yield
    finally:
        if handle is not None:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
        if got_sem:
            sem.release()


# --------------------------------------------------------------------------- processes


def _children_proc(pid: int) -> list[int]:
    """Descendants of `pid` read from /proc (used when psutil is missing)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def descendant_pids() -> list[int]:
    if psutil is not None:
        try:
            return [p.pid for p in psutil.Process().children(recursive=True)]
        except psutil.Error:
            return []
    return _children_proc(os.getpid())


def doom_pids(markers: Iterable[tuple[str, str]] = ()) -> list[int]:
    """Live Doom processes started by this process; with `markers`, only those whose command
    line holds one of the (argument, value) pairs, e.g. ("-port", "41234").
    """
    markers = list(markers)
    found = []
    for pid in descendant_pids():
        args = _cmdline(pid)
        if not args or "vizdoom" not in os.path.basename(args[0]) or _is_zombie(pid):
            continue
        if markers and not any(_has_pair(args, m) for m in markers):
            continue
        found.append(pid)
    return found


def _has_pair(args: list[str], marker: tuple[str, str]) -> bool:
    key, value = marker
    return any(a == key and b == value for a, b in zip(args, args[1:]))


def track_pids(pids: Iterable[int], owner: str) -> None:
    pids = list(pids)
    with _live_pids_lock:
        for pid in pids:
            _live_pids[pid] = owner
    _record_owned(pids)


# The Doom processes of a process killed before it could close its envs (a SIGKILLed rollout
# worker) are no one's children any more, and nothing ends them: each live one is recorded by a
# file named after its owner and itself (pid and start time, so a reused pid is not mistaken
# for either), and each Doom start first ends those whose owner is gone.
def _owners_dir() -> str:
    folder = os.path.join(tempfile.gettempdir(), "rl_pbt_vizdoom", "owners")
    os.makedirs(folder, exist_ok=True)
    return folder


def _start_time(pid: int) -> Optional[str]:
    """The process's start time in clock ticks since boot (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _record_owned(pids: list[int]) -> None:
    me, mine = os.getpid(), _start_time(os.getpid())
    if mine is None:  # no /proc: nothing to record
        return
    for pid in pids:
        started = _start_time(pid)
        if started is not None:
            with contextlib.suppress(OSError):
                open(os.path.join(_owners_dir(), f"{me}-{mine}-{pid}-{started}"), "w").close()


def _unrecord_owned(pids: Iterable[int]) -> None:
    prefix = f"{os.getpid()}-{_start_time(os.getpid())}-"
    wanted = {str(p) for p in pids}
    with contextlib.suppress(OSError):
        for name in os.listdir(_owners_dir()):
            if name.startswith(prefix) and name[len(prefix) :].split("-")[0] in wanted:
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(_owners_dir(), name))


def kill_orphans() -> list[int]:
    """Kill the Doom processes recorded by processes that are gone; returns their pids."""
    killed = []
    try:
        names = os.listdir(_owners_dir())
    except OSError:
        return killed
    for name in names:
        try:
            owner, owner_start, pid, pid_start = name.split("-")
        except ValueError:
            continue
        if _start_time(int(owner)) == owner_start:
            continue  # its owner lives: its games are its own to close
        if _start_time(int(pid)) == pid_start and "vizdoom" in " ".join(_cmdline(int(pid))[:1]):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(pid), signal.SIGKILL)
                killed.append(int(pid))
        with contextlib.suppress(OSError):
            os.remove(os.path.join(_owners_dir(), name))
    return killed


def kill_pids(pids: Iterable[int], wait: float = 3.0) -> None:
    """SIGKILL (Doom ignores SIGTERM) and reap, so that no process or zombie is left."""
    pids = list(pids)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + wait
    pending = set(pids)
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done == pid:
                    pending.discard(pid)
            except ChildProcessError:  # not our child, or already reaped by vizdoom
                if not os.path.exists(f"/proc/{pid}") or _is_zombie(pid):
                    pending.discard(pid)
            except OSError as e:  # pragma: no cover - unusual platforms
                if e.errno == errno.ECHILD:
                    pending.discard(pid)
        if pending:
            time.sleep(0.02)
    with _live_pids_lock:
        for pid in pids:
            _live_pids.pop(pid, None)
    _unrecord_owned(pids)


def forget_pids(pids: Iterable[int]) -> None:
    pids = list(pids)
    with _live_pids_lock:
        for pid in pids:
            _live_pids.pop(pid, None)
    _unrecord_owned(pids)


@atexit.register
def _kill_leftovers() -> None:  # a Doom process outliving Python would spin forever
    with _live_pids_lock:
        pids = list(_live_pids)
    pids = [p for p in pids if "vizdoom" in " ".join(_cmdline(p)[:1])]
    if pids:
        kill_pids(pids, wait=1.0)
