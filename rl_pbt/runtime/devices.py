"""Devices and process start: which device each policy uses (the one mapping function), how
many GPUs there are (counted without initialising CUDA in the main process), how children
start, and the seeds each process derives from the run's seed.

CUDA's driver state does not survive fork: a child forked from a parent that touched CUDA
fails on its first CUDA call. So the main process never calls into `torch.cuda`; it counts
devices through `CUDA_VISIBLE_DEVICES`, NVML (the optional `nvidia-ml-py`) or a short child
process, and starts children with forkserver (or spawn) whenever a policy lives on CUDA.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Optional

import numpy as np

from rl_pbt.config.parse import ConfigError

_PROBE = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"


def policy_device(policy_id: int, num_gpus: int, device_flag: str = "auto") -> str:
    """Policy p lives on cuda:(p % num_gpus); on the CPU when there is no GPU or --device=cpu."""
    if policy_id < 0:
        raise ValueError(f"policy_id must be >= 0, got {policy_id}")
    if device_flag == "cpu" or num_gpus <= 0:
        return "cpu"
    return f"cuda:{policy_id % num_gpus}"


def _leading_int(text: str) -> Optional[int]:
    """The integer `text` starts with (a sign, then digits: '1gpu' is 1), else None."""
    digits = text[1:] if text[:1] in "+-" else text
    n = len(digits) - len(digits.lstrip("0123456789"))
    return int(text[: len(text) - len(digits) + n]) if n else None


def visible_devices_env() -> Optional[list[str]]:
    """The devices CUDA_VISIBLE_DEVICES lets CUDA see, as CUDA reads it, or None when it is not
    set: UUIDs ('GPU-...', 'MIG-...') while entries have the first one's prefix; otherwise
    each entry's leading integer, up to the first entry without one or a negative one; a
    device named twice hides every device."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    entries = [v.strip() for v in value.split(",")]
    prefix = next((p for p in ("GPU-", "MIG-") if entries[0].startswith(p)), None)
    out: list[str] = []
    for v in entries:
        if prefix is not None:
            key = v if v.startswith(prefix) else None
        else:
            k = _leading_int(v)
            key = str(k) if k is not None and k >= 0 else None
        if key is None:
            break
        if key in out:
            return []
        out.append(key)
    return out


def _nvml_count() -> Optional[int]:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVML broken or absent (its own error types): ask CUDA in a child
        return None


def torch_built_for_gpus() -> bool:
    """Whether torch is a CUDA or ROCm build (read from the build: touches no GPU)."""
    import torch

    return torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None


def _child_count() -> int:
    """Ask a short-lived child process, so this process never initialises CUDA."""
    if not torch_built_for_gpus():
        return 0  # a CPU build of torch: no CUDA to find, and no need to start a child
    try:
        out = subprocess.run(
            [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120
        )
        return int(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else 0
    except (subprocess.SubprocessError, ValueError, IndexError, OSError):
        return 0


def probe_gpu_count() -> int:
    """Visible CUDA devices, counted without touching `torch.cuda` in this process; none for
    a CPU build of torch (NVML may see the machine's GPUs, but this torch cannot use them)."""
    if not torch_built_for_gpus():
        return 0
    visible = visible_devices_env()
    if visible is not None and not visible:
        return 0
    n = _nvml_count()
    if n is None:
        return _child_count()
    if visible is not None:
        n = _usable_visible(visible, n)
    return n


def _usable_visible(visible: list[str], n_physical: int) -> int:
    """How many CUDA_VISIBLE_DEVICES entries CUDA will use: it stops at the first ordinal
    that does not exist (UUIDs, 'GPU-...'/'MIG-...', are taken as given)."""
    count = 0
    for v in visible:
        if v.isdigit() and int(v) >= n_physical:
            break
        count += 1
    return min(count, n_physical)


def visible_gpu_count(device_flag: str = "auto", num_gpus_flag: int = -1) -> int:
    """GPUs the run uses: 0 with --device=cpu, else the visible ones (at most --num_gpus).
    Raises ConfigError, before anything is written, for --device=gpu without a GPU."""
    if device_flag == "cpu" or num_gpus_flag == 0:
        if device_flag == "gpu":
            raise ConfigError("--device=gpu with --num_gpus=0: use --device=cpu, or num_gpus > 0")
        return 0
    n = probe_gpu_count()
    if device_flag == "gpu" and n == 0:
        raise ConfigError(
            "--device=gpu: no CUDA device is visible (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!s}); use --device=cpu or auto"
        )
    if num_gpus_flag > 0:
        if num_gpus_flag > n and device_flag == "gpu":
            raise ConfigError(f"--num_gpus={num_gpus_flag}: only {n} CUDA device(s) visible")
        n = min(n, num_gpus_flag)
    return n


def device_map(
    num_policies: int,
    num_gpus: int,
    device_flag: str = "auto",
) -> dict[int, str]:
    return {p: policy_device(p, num_gpus, device_flag) for p in range(num_policies)}


def uses_cuda(device_of: dict[int, str]) -> bool:
    return any(d.startswith("cuda") for d in device_of.values())


def resolve_start_method(flag: str, cuda: bool) -> str:
    """--mp_start_method: auto forks only when no CUDA device is used (fork shares the
    parent's pages for free and starts fastest); with CUDA, forkserver."""
    if flag == "auto":
        if cuda or not sys.platform.startswith("linux"):
            return "forkserver" if sys.platform != "win32" else "spawn"
        return "fork"
    if flag == "fork" and cuda:
        raise ConfigError(
            "--mp_start_method=fork: the policies live on CUDA, which a forked child cannot "
            "use; allowed with CUDA: auto, forkserver, spawn"
        )
    return flag


# --inference=auto on CUDA: a policy below this many parameters and without image inputs acts
# in the workers. On one H200 with 16 cores, the inference process ran 4.9x fewer frames/s than
# the workers acting themselves for connect four (161k parameters) and 5.1x fewer for the arena
# (23k; benchmarks/RESULTS.md): for a small policy its per-call overhead costs more than the
# forward pass
SMALL_POLICY_PARAMS = 1_000_000


def resolve_inference(flag: str, cuda: bool, has_images: bool, n_params: int) -> tuple[str, str]:
    """--inference: (mode, why). auto serves a policy from one inference process per device
    when the policies are on CUDA and large or image-based, else acts in the workers."""
    if flag != "auto":
        return flag, ""
    if not cuda:
        return "local", "auto: the policies are on the CPU"
    if has_images or n_params >= SMALL_POLICY_PARAMS:
        return "device", "auto: on CUDA, " + ("image inputs" if has_images else "a large policy")
    return "local", f"auto: on CUDA, a small policy (under {SMALL_POLICY_PARAMS:,} parameters)"


def describe(device_of: dict[int, str], num_gpus: Optional[int] = None) -> str:
    groups: dict[str, list[int]] = {}
    for p, d in device_of.items():
        groups.setdefault(d, []).append(p)
    return ", ".join(f"{d}: policies {ps}" for d, ps in sorted(groups.items()))


# --- seeds -------------------------------------------------------------------------------------
_ROLES = {
    "learner": 1,
    "worker": 2,
    "env": 3,
    "inference": 4,
    "pbt": 5,
    "minibatches": 6,
    "group": 7,
    "main": 8,
}


def fresh_seed() -> int:
    """A run seed when --seed is not given (logged, so the run can be repeated)."""
    return int(np.random.SeedSequence().generate_state(1)[0] & 0x7FFFFFFF)


def derive_seed(run_seed: int, role: str, index: int = 0, restart: int = 0, start: int = 0) -> int:
    """Independent seed for one component (policy p's learner, worker w, ...) of a run: every
    process gets its own stream, and the same run seed gives the same streams. A component
    restarted after it died (`restart` > 0) gets a fresh stream, not its predecessor's, and so
    does every component of a resumed run (`start` > 0: the run's folder counts its starts)."""
    entropy = [abs(int(run_seed)), _ROLES[role], int(index)] + ([int(restart)] if restart else [])
    # a new run (start 0) keeps the seeds it always had; a start is a child of those streams
    seq = np.random.SeedSequence(entropy, spawn_key=(int(start),) if start else ())
    return int(seq.generate_state(1)[0] & 0x7FFFFFFF)


def physical_memory() -> Optional[int]:
    """The machine's memory in bytes (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def shared_memory_room(folder: str = "/dev/shm") -> tuple[Optional[int], str]:
    """(bytes, what they are) that shared tensors can take at most here: the free space of
    the folder POSIX shared memory lives in, within the machine's memory; (None, "") where
    neither is known."""
    memory = physical_memory()
    try:
        st = os.statvfs(folder)
        free = int(st.f_bavail * st.f_frsize)
    except (OSError, AttributeError):
        free = None
    if free is not None and (memory is None or free < memory):
        return free, f"free in {folder}"
    if memory is not None:
        return memory, "this machine's memory"
    return None, ""
