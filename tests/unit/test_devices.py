import sys
import types

import pytest

from rl_pbt.config.parse import ConfigError
from rl_pbt.runtime import devices
from rl_pbt.runtime.devices import device_map, policy_device


@pytest.mark.parametrize("num_gpus", [1, 2, 4])
@pytest.mark.parametrize("num_policies", range(1, 9))
def test_policy_p_lives_on_p_mod_g(num_gpus, num_policies):
    mapping = device_map(num_policies, num_gpus)
    assert sorted(mapping) == list(range(num_policies))
    for p, dev in mapping.items():
        assert dev == f"cuda:{p % num_gpus}"
    used = {d for d in mapping.values()}
    assert len(used) == min(num_gpus, num_policies)  # spread over every GPU available


@pytest.mark.parametrize("num_policies", range(1, 9))
def test_cpu_when_no_gpu_or_forced(num_policies):
    assert set(device_map(num_policies, 0).values()) == {"cpu"}
    assert set(device_map(num_policies, 4, "cpu").values()) == {"cpu"}


def test_negative_policy_rejected():
    with pytest.raises(ValueError):
        policy_device(-1, 2)


# --- counting GPUs without CUDA in this process; start methods -------------------------------


def fake_nvml(monkeypatch, count, gpu_torch=True):
    """NVML reporting `count` GPUs, beside a torch built for GPUs (or not)."""
    module = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: count
    )
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.setattr(devices, "torch_built_for_gpus", lambda: gpu_torch)


def test_a_cpu_build_of_torch_uses_no_gpu_that_nvml_sees(monkeypatch):
    """NVML counts the machine's GPUs whatever torch can use: with a CPU build of torch the
    policies went to cuda:p and every learner failed at its first CUDA call."""
    fake_nvml(monkeypatch, 2, gpu_torch=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert devices.probe_gpu_count() == 0
    assert devices.device_map(2, devices.visible_gpu_count("auto"), "auto") == {0: "cpu", 1: "cpu"}


@pytest.mark.parametrize(
    "value, seen",
    [("0,0", 0), ("1,1,2", 0), ("0,abc,1", 1), ("1gpu2,2ampere", 2), ("0, 1", 2),
     ("GPU-a,GPU-b", 2), ("GPU-a,0", 1)],
)  # fmt: skip
def test_visible_devices_are_read_as_cuda_reads_them(monkeypatch, value, seen):
    """A device named twice hides them all; an entry without a leading number ends the list
    (it was counted, and a policy then went to a cuda:k the children do not have)."""
    fake_nvml(monkeypatch, 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert devices.probe_gpu_count() == seen


@pytest.mark.parametrize("value", ["", "-1", "-1,0"])
def test_hidden_devices_count_zero(monkeypatch, value):
    fake_nvml(monkeypatch, 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert devices.probe_gpu_count() == 0


def test_nvml_count_limited_by_visible_devices(monkeypatch):
    fake_nvml(monkeypatch, 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    assert devices.probe_gpu_count() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,7,0")  # CUDA stops at ordinal 7
    assert devices.probe_gpu_count() == 1
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert devices.probe_gpu_count() == 4


def test_num_gpus_limits_and_gpu_flag_checks(monkeypatch):
    monkeypatch.setattr(devices, "probe_gpu_count", lambda: 4)
    assert devices.visible_gpu_count("auto", -1) == 4
    assert devices.visible_gpu_count("auto", 2) == 2
    assert devices.visible_gpu_count("cpu", -1) == 0
    with pytest.raises(ConfigError, match="--num_gpus=8"):
        devices.visible_gpu_count("gpu", 8)
    monkeypatch.setattr(devices, "probe_gpu_count", lambda: 0)
    assert devices.visible_gpu_count("auto", -1) == 0
    with pytest.raises(ConfigError, match="--device=gpu"):
        devices.visible_gpu_count("gpu", -1)


def test_start_method_never_forks_with_cuda():
    assert devices.resolve_start_method("auto", cuda=False) == "fork"
    assert devices.resolve_start_method("auto", cuda=True) == "forkserver"
    assert devices.resolve_start_method("spawn", cuda=True) == "spawn"
    assert devices.resolve_start_method("fork", cuda=False) == "fork"
    with pytest.raises(ConfigError, match="--mp_start_method=fork"):
        devices.resolve_start_method("fork", cuda=True)


def test_broken_nvml_falls_back_to_a_child_probe(monkeypatch):
    def broken():
        raise RuntimeError("NVML driver not loaded")

    module = types.SimpleNamespace(nvmlInit=broken, nvmlShutdown=lambda: None)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(devices, "_child_count", lambda: 3)
    monkeypatch.setattr(devices, "torch_built_for_gpus", lambda: True)
    assert devices.probe_gpu_count() == 3


@pytest.mark.parametrize("cuda, hip, built", [(None, None, False), ("12.1", None, True),
                                              (None, "6.0", True)])  # fmt: skip
def test_torch_built_for_gpus_reads_the_build(monkeypatch, cuda, hip, built):
    import torch

    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setattr(torch.version, "hip", hip, raising=False)
    assert devices.torch_built_for_gpus() is built


@pytest.mark.parametrize(
    "gpu_build, method, warmed",
    [(False, "fork", True), (True, "fork", False), (True, "forkserver", True),
     (True, "spawn", True)],
)  # fmt: skip
def test_no_backward_before_forking_with_a_gpu_build(monkeypatch, gpu_build, method, warmed):
    """With a GPU build of torch on a machine with a GPU, a backward pass in the parent starts
    autograd's device threads and every forked learner then fails its first update: the
    warm-up before forking leaves autograd alone there."""
    import torch

    from rl_pbt.runtime import runner

    monkeypatch.setattr(runner, "torch_built_for_gpus", lambda: gpu_build)
    model = torch.nn.Linear(3, 2)
    passes = []
    model.weight.register_hook(lambda grad: passes.append(grad.shape))
    runner._warm_up_imports(model, method)
    assert bool(passes) is warmed
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize(
    "flag, cuda, images, params, mode",
    [
        ("auto", False, True, 5_000_000, "local"),  # on the CPU the workers always act
        ("auto", True, False, 200_000, "local"),  # a small vector policy on CUDA
        ("auto", True, False, devices.SMALL_POLICY_PARAMS, "device"),  # a large one
        ("auto", True, True, 50_000, "device"),  # image inputs, whatever the size
        ("device", False, False, 100, "device"),  # a named mode is kept as it is
        ("local", True, True, 5_000_000, "local"),
    ],
)
def test_auto_inference_picks_by_device_inputs_and_size(flag, cuda, images, params, mode):
    chosen, why = devices.resolve_inference(flag, cuda, images, params)
    assert chosen == mode
    assert why.startswith("auto") == (flag == "auto")
