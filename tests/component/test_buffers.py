import threading
import time
from dataclasses import fields

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_pbt.memory.buffers import (
    FREE,
    LEARNER,
    QUEUED,
    WORKER,
    SlotOwnershipError,
    TrajectoryBuffers,
)
from rl_pbt.memory.param_store import ParamStore, flat_state_size
from rl_pbt.memory.slots import SlotPool
from rl_pbt.models.action_dist import action_spec
from rl_pbt.models.obs import ObsSpec
from rl_pbt.runtime.messages import LocalQueue


def make_buffers(slots=6):
    spec = ObsSpec(("obs",), ((3,),), (np.dtype(np.float32),))
    layout = TrajectoryBuffers.layout(slots, 4, spec, action_spec(gym.spaces.Discrete(2)), 0, 1)
    return TrajectoryBuffers.allocate(layout)


def test_fresh_buffers_hold_sentinels():
    b = make_buffers()
    assert torch.isnan(b.obs["obs"]).all() and torch.isnan(b.rewards).all()
    assert (b.actions == -1).all() and (b.policy_version == -1).all()
    assert not b.valid.any()


def test_slot_has_one_owner_at_a_time():
    b = make_buffers()
    pool = SlotPool(b, LocalQueue())
    pool.fill()
    got = pool.acquire(6, timeout=0)
    assert sorted(got) == list(range(6))
    assert pool.acquire(1, timeout=0) == []  # empty pool: back-pressure, not a second owner
    b.transfer(got[:2], WORKER, QUEUED)
    with pytest.raises(SlotOwnershipError, match="slot"):
        b.transfer(got[:1], WORKER, QUEUED)  # already queued: a second hand-over is refused
    b.transfer(got[:2], QUEUED, LEARNER)
    pool.release(got[:2])
    with pytest.raises(SlotOwnershipError):
        pool.release(got[:1])  # freed twice
    assert (b.owner.numpy()[got[:2]] == FREE).all()


def test_reclaim_returns_only_the_dead_workers_slots():
    b = make_buffers(6)
    pool = SlotPool(b, LocalQueue())
    pool.fill()
    first = pool.acquire(3, timeout=0, holder=1)  # worker 1 fills them, they go to a learner
    b.transfer(first, WORKER, QUEUED)
    b.transfer(first, QUEUED, LEARNER)
    pool.release(first)
    mine = pool.acquire(3, timeout=0, holder=0)  # worker 0 gets slots worker 1 used before
    theirs = pool.acquire(3, timeout=0, holder=1)
    assert sorted(mine + theirs) == list(range(6))
    b.transfer(theirs[:1], WORKER, QUEUED)  # one already sent: the learner keeps it
    assert pool.reclaim(1) == 2  # worker 1 died: its two unsent slots come back
    owner = b.owner.numpy()
    assert (owner[mine] == WORKER).all() and owner[theirs[0]] == QUEUED
    assert (owner[theirs[1:]] == FREE).all()
    assert sorted(pool.acquire(6, timeout=0, holder=2)) == sorted(theirs[1:])


def test_param_store_roundtrip_and_versions():
    net = torch.nn.Linear(3, 2)
    store = ParamStore(2, flat_state_size(net), 1)
    store.publish(1, net, version=7)
    other = torch.nn.Linear(3, 2)
    assert store.read_into(1, other) == 7
    for a, b in zip(net.state_dict().values(), other.state_dict().values()):
        torch.testing.assert_close(a, b)
    assert store.current_version(0) == 0


def _export_repeatedly(store: ParamStore, row: int, exports: int) -> None:
    """Writes the transfer row as a learner's export does (seq odd while writing), in two
    halves with a pause between, so a plain reader would see a mix of two exports."""
    half = store.transfer.shape[1] // 2
    for k in range(1, exports + 1):
        store.transfer_seq[row] += 1
        store.transfer[row, :half] = float(k)
        time.sleep(0.0002)
        store.transfer[row, half:] = float(k)
        store.transfer_seq[row] += 1
        time.sleep(0.0005)  # between exports: the row can be read whole


def test_read_transfer_never_mixes_two_exports():
    store = ParamStore(2, 1, 4096)
    writer = threading.Thread(target=_export_repeatedly, args=(store, 1, 1000))
    writer.start()
    reads, deadline = [], time.monotonic() + 10.0
    while writer.is_alive() and time.monotonic() < deadline and len(reads) < 20000:
        reads.append(store.read_transfer(1))
    writer.join(timeout=10.0)
    assert len(reads) >= 10
    mixed = [r for r in reads if r.min() != r.max()]
    assert not mixed, f"{len(mixed)} of {len(reads)} reads mixed two exports"
    assert len({float(r[0]) for r in reads}) > 1  # it did read while the source exported


def test_read_transfer_times_out_on_a_stuck_export():
    store = ParamStore(1, 1, 8)
    store.transfer_seq[0] = 1  # a writer that died mid-export
    with pytest.raises(TimeoutError, match="exported state of policy 0"):
        store.read_transfer(0, timeout=0.05)


def test_nbytes_is_what_allocate_takes():
    """The runner sizes the buffers with nbytes before allocating them: both read one layout."""
    spec = ObsSpec(("obs", "mask"), ((3, 5), (7,)), (np.dtype(np.uint8), np.dtype(np.float32)))
    for act_space, rnn, rec in [(gym.spaces.Discrete(4), 0, 1),
                                (gym.spaces.Box(-1, 1, (3,)), 16, 4)]:  # fmt: skip
        args = (5, 8, spec, action_spec(act_space), rnn, rec)
        b = TrajectoryBuffers.allocate(TrajectoryBuffers.layout(*args))
        tensors = [*b.obs.values()] + [getattr(b, f.name) for f in fields(b)
                                       if isinstance(getattr(b, f.name), torch.Tensor)]  # fmt: skip
        assert TrajectoryBuffers.nbytes(TrajectoryBuffers.layout(*args)) == sum(
            t.numel() * t.element_size() for t in tensors
        )
        assert b.rnn_states.shape == (5, 8 // rec, rnn) and b.obs["obs"].dtype == torch.uint8
