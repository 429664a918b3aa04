"""Experiment-folder paths and atomic writes (write to a temp file, then rename)."""

from __future__ import annotations

import errno
import glob
import json
import os
import tempfile
import time
from typing import Any, Callable, Optional

# written into every experiment folder the trainer creates: --restart_behavior=overwrite
# deletes only folders that hold it
EXPERIMENT_MARKER = ".rl_pbt_experiment"


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def shared_file_mode() -> int:
    """The mode a plain open() would give a new file (0o666 less the umask): temp files are
    made 0o600, which would leave results unreadable to a team sharing a folder."""
    return 0o666 & ~_current_umask()


STALE_TEMP_S = 600.0  # a temp file this old was left by a writer that died mid-write


def atomic_write(path: str, write: Callable[[Any], None], mode: str = "w") -> None:
    """Call write(file) on a temp file in the same folder, fsync, rename over `path`, fsync
    the folder (so that the rename too survives a power cut). Temp files of `path` left by a
    writer killed mid-write are removed first."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    prefix = ".tmp_" + os.path.basename(path)
    _remove_stale_temps(folder, prefix)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix)
    try:
        os.fchmod(fd, shared_file_mode())
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_folder(folder)


def _remove_stale_temps(folder: str, prefix: str) -> None:
    """Another writer of the same file may be mid-write: only old temp files go."""
    now = time.time()
    for tmp in glob.glob(os.path.join(glob.escape(folder), glob.escape(prefix) + "*")):
        try:
            if now - os.path.getmtime(tmp) > STALE_TEMP_S:
                os.unlink(tmp)
        except OSError:
            pass


def fsync_folder(folder: str) -> None:
    """Make a rename in `folder` durable. Some systems cannot fsync a folder: then skipped."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF, errno.EACCES, errno.EPERM):
            raise
    finally:
        os.close(fd)


def atomic_write_json(path: str, data: Any) -> None:
    atomic_write(path, lambda f: json.dump(data, f, indent=2, sort_keys=True, default=float))


def read_json(path: str, default: Any = None) -> Any:
    if not os.path.isfile(path):
        return default
    with open(path) as f:
        return json.load(f)


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict:
    keys = [k for k, _ in pairs]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise ValueError(f"key {repeated[0]!r} is given more than once in one object")
    return dict(pairs)


def load_user_json(f) -> Any:
    """json.load for files users write (presets, search spaces, per-policy values): a key
    given twice in one object is a ValueError, where json.load would keep the last value
    without a word."""
    return json.load(f, object_pairs_hook=_no_repeated_keys)


def read_run_config(path: str) -> dict:
    """The flag values in a run's config.json; ValueError (one line naming the file) when it
    cannot be read, is not JSON, or is not a JSON object."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise ValueError(f"{path} is unreadable ({e.strerror or e})") from None
    except ValueError as e:  # not JSON, or not UTF-8
        raise ValueError(f"{path} is damaged: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"{path} is not a run's config: expected a JSON object of flag values, found a "
            f"JSON {json_kind(data)}"
        )
    return data


def json_kind(data: Any) -> str:
    """The JSON name of a decoded value's type: object, list, string, number, boolean, null."""
    if isinstance(data, dict):
        return "object"
    if isinstance(data, list):
        return "list"
    if isinstance(data, str):
        return "string"
    if data is None:
        return "null"
    return "boolean" if isinstance(data, bool) else "number"


def policy_cfg_path(exp_dir: str, policy_id: int) -> str:
    return os.path.join(exp_dir, f"policy_{policy_id:02d}_cfg.json")


def policy_shaping_path(exp_dir: str, policy_id: int) -> str:
    return os.path.join(exp_dir, f"policy_{policy_id:02d}_reward_shaping.json")


def checkpoint_dir(exp_dir: str, policy_id: int) -> str:
    """Policy p's checkpoints. A population over Ray (population.json) keeps member p in
    the folder of its node group: `groups/g{i}/checkpoint_p{local id}`."""
    member = population_member(exp_dir, policy_id)
    if member is not None:
        group, local = member
        return os.path.join(exp_dir, "groups", f"g{group}", f"checkpoint_p{local}")
    return os.path.join(exp_dir, f"checkpoint_p{policy_id}")


POPULATION_FILE = "population.json"


def population_member(exp_dir: str, policy_id: int) -> Optional[tuple[int, int]]:
    """(node group, id inside it) of member `policy_id` of a population run over Ray, or None
    for a run on one machine."""
    path = os.path.join(exp_dir, POPULATION_FILE)
    if not os.path.isfile(path):
        return None
    try:
        groups = read_json(path, {}).get("groups", {})
    except (OSError, ValueError):
        return None
    for name, ids in groups.items():
        if policy_id in ids:
            return int(name[1:]), ids.index(policy_id)
    return None


def summary_dir(exp_dir: str, policy_id: int) -> str:
    return os.path.join(exp_dir, ".summary", str(policy_id))


def pbt_dir(exp_dir: str) -> str:
    return os.path.join(exp_dir, "pbt")


def scalars_path(exp_dir: str) -> str:
    """JSON lines of every scalar the run logs (the TensorBoard tags), one object per policy and
    summary period: {"policy": p, "env_steps": n, "time": t, "scalars": {tag: value}}."""
    return os.path.join(exp_dir, "stats", "scalars.jsonl")


NAME_MAX = 255  # bytes in one path component on Linux, macOS and Windows file systems


def experiment_name_problem(name: Optional[str]) -> Optional[str]:
    """Why `name` is not a plain folder name (None when it is)."""
    if not name or not name.strip():
        return "is empty"
    if os.path.isabs(name) or "/" in name or "\\" in name or "\0" in name:
        return "is a path"
    if name in (".", "..") or name.strip() != name:
        return "is not a folder name"
    if len(name.encode()) > NAME_MAX:
        return f"is longer than a folder name may be ({NAME_MAX} bytes)"
    return None


def is_inside(path: str, root: str) -> bool:
    """`path` lies strictly inside `root`, links resolved."""
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path != root and os.path.commonpath([path, root]) == root


def deletable_folder(folder: str, root: str) -> bool:
    """Old files in `folder` may be deleted: it is a real folder (not a link to somewhere
    else) inside the experiment folder `root`."""
    return not os.path.islink(folder) and is_inside(folder, root)


def read_scalars(path: str) -> tuple[list[dict[str, Any]], int]:
    """Records of the scalar log in file order, and how many lines were skipped (unparsable,
    e.g. the line a running run is writing, or not a record)."""
    if not os.path.isfile(path):
        return [], 0
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    records, skipped = [], 0
    for raw in lines:
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            skipped += 1
            continue
        ok = (
            isinstance(rec, dict)
            and isinstance(rec.get("policy"), int)
            and not isinstance(rec.get("policy"), bool)
            and rec["policy"] >= 0
            and isinstance(rec.get("env_steps"), (int, float))
            and isinstance(rec.get("scalars"), dict)
        )
        if ok:
            records.append(rec)
        else:
            skipped += 1
    return records, skipped
