"""The param store's packed rows: float32 weights in one vector, float64 statistics bit for bit,
every row (snapshots too) guarded by its sequence counter, sizes taken from the model."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rl_pbt import parse_cfg
from rl_pbt.memory.param_store import (
    ParamStore,
    flat_state_size,
    pack_state,
    same_state_bits,
    transfer_size,
    unpack_state,
)
from rl_pbt.models.actor_critic import make_actor_critic
from rl_pbt.models.normalizer import RunningMeanStd


class Tiny(nn.Module):
    """3 float32 weights (an odd count: the 8-byte part needs a pad word) and float64 stats."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 1)
        self.norm = RunningMeanStd((2,))


def random_bits(t: torch.Tensor, gen: torch.Generator) -> None:
    """Fill an 8-byte tensor with arbitrary bit patterns, the first ones chosen to catch any
    conversion on the way: a signalling NaN double, and a double whose low word read as a
    float32 is a signalling NaN."""
    words = torch.randint(-(2**31), 2**31 - 1, (t.numel() * 2,), generator=gen, dtype=torch.int64)
    bits = words.to(torch.int32).view(torch.int64)
    special = torch.tensor([0x7FF0000000000001, 0x000000007F800001], dtype=torch.int64)
    bits[: len(special)] = special[: bits.numel()]
    t.view(torch.int64).view(-1).copy_(bits)


def same_bits(a: nn.Module, b: nn.Module) -> bool:
    return all(
        torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8))
        for x, y in zip(a.state_dict().values(), b.state_dict().values())
    )


def actor_critic():
    cfg = parse_cfg(["--env=CartPole-v1", "--encoder_mlp_layers", "8", "--use_rnn", "--rnn_size=4"])
    return make_actor_critic(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2), cfg)


def test_sizes_come_from_the_model():
    model = Tiny()
    assert flat_state_size(model) == 4 + 2 * (2 + 2 + 1)  # 3 weights + pad, then 5 doubles
    assert transfer_size(model) == flat_state_size(model) + 2 * 3 + 1
    store = ParamStore.for_model(5, model)
    assert store.flat.dtype == torch.float32 and store.flat.shape == (5, flat_state_size(model))
    assert store.transfer.shape == (5, transfer_size(model) + 1)  # rows stay even-sized
    for t in (store.seq, store.version, store.transfer_seq):
        assert t.dtype == torch.int64 and t.shape == (5,) and t.is_shared()
    assert store.flat.is_shared() and store.transfer.is_shared()


@pytest.mark.parametrize("make", [Tiny, actor_critic])
def test_publish_and_read_are_bit_exact(make):
    torch.manual_seed(0)
    src, dst = make(), make()
    gen = torch.Generator().manual_seed(1)
    for t in src.state_dict().values():
        if t.dtype == torch.float64:
            random_bits(t, gen)
    assert not same_bits(src, dst)
    store = ParamStore.for_model(3, src)
    store.publish(2, src, version=9)  # a row past the policies: a snapshot's
    assert store.seq.tolist() == [0, 0, 2] and store.current_version(2) == 9
    assert store.read_into(2, dst) == 9
    assert same_bits(src, dst)


def test_publish_is_one_cat_and_one_copy(monkeypatch):
    model = actor_critic()
    store = ParamStore.for_model(1, model)
    cats = []
    original = torch.cat
    monkeypatch.setattr(torch, "cat", lambda *a, **k: cats.append(1) or original(*a, **k))
    store.publish(0, model, 1)
    assert len(cats) == 1
    flat = pack_state(model)
    assert flat.dtype == torch.float32 and flat.dim() == 1
    assert torch.equal(store.flat[0, : flat.numel()], flat)


def test_a_row_is_one_vector_with_the_doubles_at_the_end():
    model = Tiny()
    model.norm.mean.copy_(torch.tensor([1 / 3, -2.5], dtype=torch.float64))
    flat = pack_state(model)
    weights = torch.cat([model.lin.weight.reshape(-1), model.lin.bias])
    assert torch.equal(flat[:3], weights.detach()) and flat[3] == 0
    assert torch.equal(flat[4:8].view(torch.float64), model.norm.mean)


def test_unpack_refuses_other_widths():
    model = Tiny()
    model.register_buffer("flag", torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="flag"):
        pack_state(model)


def test_read_waits_for_a_writer_then_times_out():
    model = Tiny()
    store = ParamStore.for_model(1, model)
    store.seq[0] = 1  # a writer that died mid-publish
    with pytest.raises(TimeoutError, match="weights of policy 0"):
        store.read_into(0, Tiny(), timeout=0.05)


def test_transfer_round_trip_through_the_store():
    model = Tiny()
    store = ParamStore.for_model(2, model)
    flat = torch.randn(transfer_size(model))
    store.write_transfer(1, flat)
    assert store.transfer_seq.tolist() == [0, 2]
    got = store.read_transfer(1)
    assert torch.equal(got[: flat.numel()], flat)
    other = Tiny()
    unpack_state(other, pack_state(model))
    assert same_bits(model, other)


def test_same_bits_compares_packed_states_bit_for_bit_nan_words_included():
    """A float64 whose low half reads as a float32 NaN: `torch.equal` on the packed words says
    the state differs from its own copy (this made copies between node groups look inexact);
    `same_state_bits` compares the bits."""
    value = np.array([1.0], dtype=np.float64).view(np.uint64)
    value |= np.uint64(0x7FC00001)  # the low word: a quiet NaN pattern, the value still finite
    model = nn.Module()
    model.register_buffer("mean", torch.from_numpy(value.view(np.float64)))
    packed = pack_state(model)
    assert torch.isnan(packed).any() and np.isfinite(value.view(np.float64)).all()
    copy = packed.clone()
    assert not torch.equal(packed, copy)  # the trap
    assert same_state_bits(packed, copy)
    copy[-1] = 0.0
    assert not same_state_bits(packed, copy)
    assert not same_state_bits(packed, packed[:-1]) and not same_state_bits(packed, packed.double())
