"""Which device each policy's learner and inference use: the one mapping function."""

from __future__ import annotations

from typing import Optional


def policy_device(policy_id: int, num_gpus: int, device_flag: str = "auto") -> str:
    """Policy p lives on cuda:(p % num_gpus); on the CPU when there is no GPU or --device=cpu."""
    if policy_id < 0:
        raise ValueError(f"policy_id must be >= 0, got {policy_id}")
    if device_flag == "cpu" or num_gpus <= 0:
        return "cpu"
    return f"cuda:{policy_id % num_gpus}"


def visible_gpu_count(device_flag: str = "auto") -> int:
    if device_flag == "cpu":
        return 0
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device_flag == "gpu" and n == 0:
        raise RuntimeError("--device=gpu but no CUDA device is visible; use --device=cpu")
    return n


def device_map(
    num_policies: int,
    num_gpus: int,
    device_flag: str = "auto",
) -> dict[int, str]:
    return {p: policy_device(p, num_gpus, device_flag) for p in range(num_policies)}


def describe(device_of: dict[int, str], num_gpus: Optional[int] = None) -> str:
    groups: dict[str, list[int]] = {}
    for p, d in device_of.items():
        groups.setdefault(d, []).append(p)
    return ", ".join(f"{d}: policies {ps}" for d, ps in sorted(groups.items()))
