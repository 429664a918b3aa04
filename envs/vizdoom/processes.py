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

from rl_pbt.runtime.heartbeat import pid_running

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
        if not args or "vizdoom" not in os.path.basename(args[0]) or not pid_running(pid):
            continue
        if markers and not any(_has_pair(args, m) for m in markers):
            continue
        found.append(pid)
    return found


def _has_pair(args: list[str], marker: tuple[str, str]) -> bool:
    key, value = marker
    return any(a == key and b == value for a, b in zip(args, args[1:]))


def track_pids(pids: Iterable[int], owner: str) -> None:
    with _live_pids_lock:
        for pid in pids:
            _live_pids[pid] = owner


def doom_work_dir() -> str:
    """A folder for the files Doom writes (config, crash logs), outside the repository."""
    folder = os.path.join(tempfile.gettempdir(), "rl_pbt_vizdoom")
    os.makedirs(folder, exist_ok=True)
    return folder


# Doom's settings file, one per process that starts games: named after that process, it is on
# each of its Doom processes' command lines (-config), so every Doom process started here
# names its owner, recorded or not (one may start while its owner is SIGKILLed)
INI_PREFIX, INI_SUFFIX = "_vizdoom_", ".ini"


def doom_ini_path(pid: Optional[int] = None) -> str:
    return os.path.join(doom_work_dir(), f"{INI_PREFIX}{pid or os.getpid()}{INI_SUFFIX}")


def _start_time(pid: int) -> Optional[int]:
    """The process's start time in clock ticks since boot (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _arg_value(args: list[str], key: str) -> Optional[str]:
    """The value after `key` on a command line (None without one)."""
    return next((value for k, value in zip(args, args[1:]) if k == key), None)


def _ini_owner(name: str) -> Optional[int]:
    """The pid a settings file's name holds (None for another file)."""
    number = name[len(INI_PREFIX) : -len(INI_SUFFIX)]
    ours = name.startswith(INI_PREFIX) and name.endswith(INI_SUFFIX) and number.isdigit()
    return int(number) if ours else None


def doom_owner(args: list[str]) -> Optional[int]:
    """The pid of the process that started the Doom process of command line `args` (from its
    settings file); None for one not started by this package."""
    path = _arg_value(args, "-config")
    if path is None or os.path.dirname(path) != doom_work_dir():
        return None
    return _ini_owner(os.path.basename(path))


def _outlived_owner(pid: int, args: list[str]) -> bool:
    """A Doom process started here whose owner is gone (a process of that pid started after
    the Doom process is another one)."""
    owner = doom_owner(args)
    if owner is None:
        return False
    owner_start, start = _start_time(owner), _start_time(pid)
    if start is None:
        return False
    return owner_start is None or owner_start > start or not pid_running(owner)


def kill_orphans() -> list[int]:
    """Kill the Doom processes started here whose owner is gone (a SIGKILLed rollout worker's:
    nothing else would end them) and free their shared memory; remove the settings files of
    processes that are gone. Returns the pids killed."""
    orphans = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and _own_process(int(entry)):
            args = _cmdline(int(entry))
            if args and "vizdoom" in os.path.basename(args[0]) and pid_running(int(entry)):
                if _outlived_owner(int(entry), args):
                    orphans.append(int(entry))
    if orphans:
        orphans = kill_pids(orphans)
    with contextlib.suppress(OSError):
        for name in os.listdir(doom_work_dir()):
            owner = _ini_owner(name)
            if owner is not None and _start_time(owner) is None:
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(doom_work_dir(), name))
    return orphans


# the shared memory of a Doom process and its controller; Doom unlinks them when it closes,
# not when it is killed
SHM_NAMES = ("ViZDoomSM", "ViZDoomMQCtr", "ViZDoomMQDoom")


def _unlink_shared_memory(instance_id: str) -> None:
    for name in SHM_NAMES:
        with contextlib.suppress(OSError):
            os.remove(os.path.join("/dev/shm", name + instance_id))


def _own_process(pid: int) -> bool:
    """Whether `pid` runs as this user (another user's processes are theirs to end)."""
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.getuid()
    except OSError:
        return False


def kill_pids(pids: Iterable[int], wait: float = 3.0) -> list[int]:
    """SIGKILL (Doom ignores SIGTERM) and reap, so that no process or zombie is left; the
    shared memory of those that are gone is unlinked. Returns the pids signalled (not those
    gone already, nor another user's)."""
    pids = list(pids)
    instances = {}
    signalled = []
    for pid in pids:
        args = _cmdline(pid)
        instance_id = _arg_value(args, "+viz_instance_id")
        if instance_id is not None and "vizdoom" in os.path.basename(args[0]):
            instances[pid] = instance_id
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            signalled.append(pid)
    deadline = time.monotonic() + wait
    pending = set(signalled)
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done == pid:
                    pending.discard(pid)
            except ChildProcessError:  # not our child, or already reaped by vizdoom
                if not pid_running(pid):
                    pending.discard(pid)
            except OSError as e:  # pragma: no cover - unusual platforms
                if e.errno == errno.ECHILD:
                    pending.discard(pid)
        if pending:
            time.sleep(0.02)
    for pid, instance_id in instances.items():
        if pid in signalled and pid not in pending:
            _unlink_shared_memory(instance_id)
    with _live_pids_lock:
        for pid in pids:
            _live_pids.pop(pid, None)
    return signalled


def forget_pids(pids: Iterable[int]) -> None:
    with _live_pids_lock:
        for pid in pids:
            _live_pids.pop(pid, None)


@atexit.register
def _kill_leftovers() -> None:  # a Doom process outliving Python would spin forever
    with _live_pids_lock:
        pids = list(_live_pids)
    pids = [p for p in pids if "vizdoom" in " ".join(_cmdline(p)[:1])]
    if pids:
        kill_pids(pids, wait=1.0)
