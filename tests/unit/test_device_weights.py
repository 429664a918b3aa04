"""Weights shared on the device (--inference=device): a reader gets exactly the newest
announced state, never a half-written one, also from another process that received the
buffer through a multiprocessing queue, and a restarted learner's new buffer replaces the old."""

import multiprocessing

import pytest
import torch
from torch import nn

from rl_pbt.memory import device_weights
from rl_pbt.memory.device_weights import WeightBoard, WeightsReader, WeightsWriter, drain_buffers
from rl_pbt.memory.param_store import pack_state
from rl_pbt.runtime.messages import LocalQueue


def make_model(seed=0):
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    m.register_buffer("stats", torch.randn(3, dtype=torch.float64))  # 8-byte state, kept exact
    return m


def fill(model, value):
    with torch.no_grad():
        for t in model.state_dict().values():
            t.fill_(value)


def test_reader_gets_the_newest_announced_state_and_its_version():
    board = WeightBoard.allocate(2)
    src, dst = make_model(0), make_model(1)
    writer = WeightsWriter(board, 1, src, "cpu")
    reader = WeightsReader(board, 1)
    assert not reader.ready() and not reader.changed()
    reader.attach(writer.message().slots)
    assert not reader.ready()  # nothing announced yet: no acting on zeros
    writer.publish(src, version=3)
    assert reader.ready() and reader.changed()
    assert reader.read_into(dst) == 3
    assert torch.equal(pack_state(dst), pack_state(src))
    assert not reader.changed()
    # staged but not announced (an iteration that is undone): the reader keeps the old state
    before = pack_state(src).clone()
    fill(src, 7.0)
    writer.stage(src)
    assert not reader.changed()
    writer.announce(4)
    assert reader.changed() and reader.read_into(dst) == 4
    assert torch.equal(pack_state(dst), pack_state(src))
    assert not torch.equal(pack_state(dst), before)
    assert int(board.count[0]) == 0  # the other policy's entry is untouched


def test_a_restarted_learner_continues_the_count_and_its_buffer_is_read_again():
    board = WeightBoard.allocate(1)
    model, dst = make_model(0), make_model(1)
    q = LocalQueue()
    first = WeightsWriter(board, 0, model, "cpu")
    q.put(first.message())
    first.publish(model, version=5)
    reader = WeightsReader(board, 0)
    for msg in drain_buffers(q):
        reader.attach(msg.slots)
    assert reader.read_into(dst) == 5
    # the learner restarts from a checkpoint holding other weights, with a new buffer
    fill(model, 0.25)
    second = WeightsWriter(board, 0, model, "cpu")
    assert second.n == 1
    q.put(second.message())
    second.publish(model, version=5)
    for msg in drain_buffers(q):
        reader.attach(msg.slots)
    assert reader.changed()
    assert reader.read_into(dst) == 5
    assert torch.equal(pack_state(dst), pack_state(model))
    assert drain_buffers(q) == []


def params_values(model):
    return set(torch.cat([t.reshape(-1) for t in model.parameters()]).tolist())


def tear_reads(monkeypatch, writer, model, reads=1):
    """Stop the reader's copy halfway through its first `reads` attempts while the writer
    publishes twice, the second time into the slot being copied: the copy then holds the old
    state's first half and the new one's second half. Returns the values each torn copy held."""
    unpack = device_weights.unpack_state
    torn = []

    def unpack_halfway(dst, flat):
        if len(torn) < reads:
            half = flat.numel() // 2
            first = flat[:half].clone()
            for _ in range(2):
                fill(model, float(writer.n + 1))
                writer.publish(model, version=writer.n + 1)
            unpack(dst, torch.cat([first, flat[half:]]))
            torn.append(params_values(dst))
        else:
            unpack(dst, flat)

    monkeypatch.setattr(device_weights, "unpack_state", unpack_halfway)
    return torn


def published_once():
    """A writer that published version 1 (all ones), a reader attached to it, and the
    writer's and the reader's models."""
    board = WeightBoard.allocate(1)
    src, dst = make_model(0), make_model(1)
    writer = WeightsWriter(board, 0, src, "cpu")
    reader = WeightsReader(board, 0)
    reader.attach(writer.message().slots)
    fill(src, 1.0)
    writer.publish(src, version=1)
    return writer, reader, src, dst


def test_a_read_overlapping_a_write_is_retried_and_returns_one_whole_state(monkeypatch):
    writer, reader, src, dst = published_once()
    torn = tear_reads(monkeypatch, writer, src)
    version = reader.read_into(dst)
    assert torn == [{1.0, 3.0}]  # the first copy did mix versions 1 and 3
    assert params_values(dst) == {3.0} and torch.all(dst.stats == 3.0)
    assert version == 3
    assert not reader.changed()


def test_a_read_that_keeps_overlapping_writes_fails_instead_of_returning_a_mix(monkeypatch):
    writer, reader, src, dst = published_once()
    torn = tear_reads(monkeypatch, writer, src, reads=10**9)
    with pytest.raises(TimeoutError):
        reader.read_into(dst, timeout=0.01)
    assert torn and all(len(values) == 2 for values in torn)
    assert reader.changed()  # nothing was accepted


def _publish_many(board, q, n, done):
    model = make_model(0)
    writer = WeightsWriter(board, 0, model, "cpu")
    q.put(writer.message())
    for v in range(1, n + 1):
        fill(model, float(v))  # every word of version v holds v: a torn read shows two values
        writer.stage(model)
        writer.announce(v)
    done.wait(30)  # keep the buffer alive until the reader is finished


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_reads_from_another_process_get_whole_states_in_order(method):
    # whether a read here overlaps a write is up to timing: the tests above force the overlap
    ctx = multiprocessing.get_context(method)
    board = WeightBoard.allocate(1)
    q, done = ctx.Queue(), ctx.Event()
    n = 3000
    proc = ctx.Process(target=_publish_many, args=(board, q, n, done), daemon=True)
    proc.start()
    try:
        reader = WeightsReader(board, 0)
        reader.attach(q.get(timeout=60).slots)
        dst = make_model(1)
        seen = []
        while len(seen) < 10_000:
            if reader.changed():
                v = reader.read_into(dst)
                flat32 = torch.cat([t.reshape(-1) for t in dst.parameters()])
                assert torch.all(flat32 == v), f"torn read: version {v}, values {flat32.unique()}"
                assert torch.all(dst.stats == v)
                seen.append(v)
                if v == n:
                    break
        assert seen == sorted(seen) and seen[-1] == n
    finally:
        done.set()
        proc.join(30)
