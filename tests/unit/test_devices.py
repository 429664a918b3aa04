import pytest

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
